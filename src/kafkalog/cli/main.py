"""Entry point of the ``kafkalog`` command: sub-commands, and errors as one clear line."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

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
  kafkalog serve --data ./data --listen 127.0.0.1:9092   Kafka clients produce/consume
"""


def build_parser() -> argparse.ArgumentParser:
    from kafkalog.cli import (
        demo,
        dump,
        ingest,
        job,
        lookup,
        query,
        rebuild,
        serve,
        timeline,
        verify,
    )

    parser = argparse.ArgumentParser(
        prog="kafkalog",
        description="Read, verify and write Apache Kafka log directories.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    job.add_parser(sub)
    dump.add_parser(sub)
    verify.add_parser(sub)
    rebuild.add_parser(sub)
    lookup.add_parsers(sub)
    ingest.add_parser(sub)
    query.add_parser(sub)
    timeline.add_parser(sub)
    demo.add_parser(sub)
    serve.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except KafkalogError as e:
        print(f"kafkalog: error: {e}", file=sys.stderr)
        return 2
    except (OSError, ValueError, PermissionError) as e:
        print(f"kafkalog: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
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
