"""Entry point of the ``kafkalog`` command: sub-commands, and errors as one clear line."""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from collections.abc import Sequence
from typing import Any

from kafkalog.errors import KafkalogError

EXAMPLES = """\
examples:
  kafkalog job                           the main pipeline on a sample it writes (Spark)
  kafkalog demo                          write a small sample log and dump it
  kafkalog dump --files 00000000000000000000.log
  kafkalog dump --deep-iteration --print-data-log --files seg.log
  kafkalog verify /var/lib/kafka/data      check CRCs, batches, indexes, checkpoints
  kafkalog rebuild-index --dry-run data/orders-3
  kafkalog lookup data/orders-3 --timestamp 2026-01-01T12:00:00Z
  kafkalog cat data/orders-3 --offset 1200 --max 5
  kafkalog ingest events.jsonl --data ./data --topic events --key-field user
  kafkalog timeline /var/lib/kafka/data --png timeline.png
  kafkalog query data "select topic, count(*) from kafka group by topic"
  kafkalog groups /var/lib/kafka/data --json
  kafkalog groups data --offsets-for-time 2026-01-01T12:00:00Z > reset.csv
  kafkalog retention data/orders-3
  kafkalog compact data --config cleanup.policy=compact --dry-run
  kafkalog serve --data ./data --listen 127.0.0.1:9092   Kafka clients produce/consume
  kafkalog scram --data ./data --add alice        add a SCRAM user (password prompted)
"""


# (command, module under kafkalog.cli, the help line of ``kafkalog --help``). Only the module of
# the command being run is imported: numba, pyarrow and Spark load where a command needs them,
# so ``kafkalog --help`` and the light commands answer at once. tests/cli/test_cli_fast.py
# checks that each help line is the one the module registers.
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("job", "job", "the main pipeline on a sample it writes: seek one hour by time on Spark"),
    ("dump", "dump", "print the batches and records of segment files, as kafka-dump-log.sh does"),
    ("verify", "verify", "check batches, CRCs, indexes and checkpoints of partitions (read-only)"),
    (
        "rebuild-index",
        "rebuild",
        "rebuild .index/.timeindex/.txnindex from the .log files (never changes a .log)",
    ),
    (
        "repair",
        "repair",
        "quarantine a damaged log's bad bytes and keep every readable batch (no deletes)",
    ),
    ("lookup", "lookup", "find the segment, position and first record at an offset or a time"),
    ("cat", "lookup", "records as JSON Lines from an offset or a time"),
    ("ingest", "ingest", "JSON Lines, CSV or Parquet into a topic-partition directory"),
    ("query", "query", "SQL over a data directory's topics, each a table (local Spark)"),
    (
        "timeline",
        "timeline",
        "records and bytes over time per partition, from the indexes only (PNG + summary)",
    ),
    ("demo", "demo", "write a sample Kafka partition and dump it (no broker needed)"),
    (
        "groups",
        "groups",
        "consumer groups' committed offsets and lag from __consumer_offsets (no broker)",
    ),
    (
        "retention",
        "retention",
        "what the next retention pass would delete, and what keeps each segment alive",
    ),
    (
        "compact",
        "compact",
        "clean compacted partitions as Kafka's log cleaner does (latest value per key)",
    ),
    ("serve", "serve", "serve a data directory to Kafka clients over Kafka's wire protocol"),
    ("scram", "scram", "add, delete or list the SCRAM users kafkalog serve authenticates"),
)


def _register(sub: Any, module_name: str) -> None:
    module = importlib.import_module(f"kafkalog.cli.{module_name}")
    if hasattr(module, "add_parsers"):
        module.add_parsers(sub)
    else:
        module.add_parser(sub)
    for parser in sub.choices.values():  # a module docstring as --help shows it: no markup
        if parser.description:
            parser.description = _plain(parser.description)


def _plain(text: str) -> str:
    """reST markup of the docstrings that ``--help`` prints (``:mod:`x``` and double
    backquotes) as a terminal reader reads it: ``x`` and single backquotes."""
    return re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text).replace("``", "`")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; every command's own parser when ``command`` is None, else that command's
    only (the others, all of them for ``""``, are listed with their help line without
    importing them)."""
    parser = argparse.ArgumentParser(
        prog="kafkalog",
        description="Read, verify and write Apache Kafka log directories.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    done: set[str] = set()
    # a module may register several commands (lookup: lookup and cat): load it whole
    wanted = {module_name for name, module_name, _ in COMMANDS if name == command}
    for name, module_name, help_line in COMMANDS:
        if command is None or module_name in wanted:
            if module_name not in done:
                _register(sub, module_name)
                done.add(module_name)
        elif not (module_name in done and _registered(sub, name)):
            sub.add_parser(name, help=help_line, add_help=False)
    return parser


def _registered(sub: Any, name: str) -> bool:
    return name in sub.choices


def _command(argv: Sequence[str]) -> str | None:
    """The sub-command named on the command line (the first word that is not an option)."""
    names = {c[0] for c in COMMANDS}
    for word in argv:
        if not word.startswith("-"):
            return word if word in names else None
    return None


def _quiet_broken_pipe() -> int:
    """A reader that went away (``kafkalog dump ... | head``): end quietly, as Unix tools do.
    Python would complain again when flushing stdout at exit, so stdout is pointed at
    /dev/null first."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
    return 141  # 128 + SIGPIPE, what a shell reports for a Unix tool killed by the pipe


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    command = _command(words)
    parser = build_parser(command or "")  # no command named: every command a stub
    args = parser.parse_args(words)
    try:
        return int(args.run(args))
    except BrokenPipeError:
        return _quiet_broken_pipe()
    except KafkalogError as e:
        print(f"kafkalog: error: {e}", file=sys.stderr)
        return 2
    except (IsADirectoryError, PermissionError) as e:
        if e.filename is None:  # raised with its own words (dump given a directory)
            print(f"kafkalog: error: {e}", file=sys.stderr)
            return 2
        # a file of a log that cannot be read at all: named, at its first byte
        where = f"{e.filename} at byte 0: " if e.filename else ""
        print(f"kafkalog: error: {where}cannot read it ({e.strerror})", file=sys.stderr)
        return 2
    except (OSError, ValueError) as e:
        print(f"kafkalog: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: said, so a silent stop is not taken for the end
        print(f"kafkalog: interrupted, {args.command} did not finish", file=sys.stderr)
        return 130
    except Exception as e:  # a bug of ours: still one line, the traceback on request
        if os.environ.get("KAFKALOG_DEBUG"):
            raise
        print(
            f"kafkalog: internal error: {type(e).__name__}: {e} "
            "(a bug: KAFKALOG_DEBUG=1 shows where)",
            file=sys.stderr,
        )
        return 3


if __name__ == "__main__":
    sys.exit(main())
