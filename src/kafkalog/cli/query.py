"""``kafkalog query``: SQL over a Kafka data directory, through local Spark and the kafkalog
source: every topic is a table.

An operator's question of a broker's directory (read-only), a backup or an archive should not
need a Spark job written for it. Each topic is a view named after it (quote a name with ``-``
or ``.`` in backticks) and ``kafka`` is every topic together, all with the columns of Spark's
Kafka source; filters on ``timestamp``, ``offset``, ``partition`` and ``topic`` go to the
indexes, so a question about one hour reads about one hour.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import logging
import re
import sys
from collections.abc import Iterator, Sequence
from typing import IO, Any

from kafkalog.cli.args import int_between
from kafkalog.cli.lookup import text_or_base64
from kafkalog.cli.spark_session import local_session
from kafkalog.errors import KafkalogError

EPILOG = """\
examples:
  kafkalog query /var/lib/kafka/data "select topic, count(*) from kafka group by topic"
  kafkalog query data "select offset from orders where timestamp < '2026-01-01 12:00'"
  kafkalog query data 'select count(*) from `web-clicks`' -o isolationLevel=read_committed
  kafkalog query data "select * from orders" --format jsonl --limit 10
"""

#: options that choose topics: the views do that
_SELECTORS = ("subscribe", "subscribepattern", "assign")
_ERROR_LINE = re.compile(r"^(?:kafkalog\.\S+|\w+Error): (.+)$")


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "query",
        help="SQL over a data directory's topics, each a table (local Spark)",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "path", help="a data directory or a partition directory: a path or a pyarrow.fs URI"
    )
    p.add_argument("sql", help="the query; each topic is a view named after it, `kafka` is all")
    p.add_argument(
        "-o",
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a read option of format kafkalog for every view (includeHeaders=true, "
        "isolationLevel=read_committed, startingTimestamp=..., ...)",
    )
    p.add_argument("--format", choices=("table", "jsonl", "csv"), default="table")
    p.add_argument(
        "--limit", type=int_between(1), default=1000, help="print at most this many rows"
    )
    p.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    p.set_defaults(run=run)


def read_options(pairs: Sequence[str]) -> dict[str, str]:
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise KafkalogError(f"option {pair!r} is not KEY=VALUE")
        if key.strip().lower() in _SELECTORS:
            raise KafkalogError(
                f"option {key.strip()} is not taken: each topic is its own view, and `kafka` "
                "is all of them"
            )
        options[key.strip()] = value
    return options


def run(args: argparse.Namespace, out: IO[str] | None = None) -> int:
    from kafkalog.spark.options import parse_read_options
    from kafkalog.spark.plan import partition_directories
    from kafkalog.spark.source import HEADERS, SCHEMA

    out = out or sys.stdout
    options = read_options(args.option)
    opts = parse_read_options({**options, "path": args.path})  # refused before Spark starts
    topics = sorted({topic for topic, _ in partition_directories(opts.path)})
    spark = local_session(
        "kafkalog-query",
        args.master,
        **{
            "spark.sql.python.filterPushdown.enabled": "true",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": str(sys.stderr.isatty()).lower(),
        },
    )
    from pyspark.errors import PySparkException
    from pyspark.logger import PySparkLogger

    # PySpark logs every failed SQL statement's exception, Java stack and all, as one JSON
    # line on stderr before raising it; this command says it in one line of its own
    PySparkLogger.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
    try:
        schema = SCHEMA + (HEADERS if opts.include_headers else "")
        for name, extra in [("kafka", {}), *((t, {"subscribe": t}) for t in topics)]:
            # the schema given, Spark need not ask a Python worker for it, view after view
            reader = spark.read.format("kafkalog").schema(schema).options(**options, **extra)
            reader.option("path", args.path).load().createOrReplaceTempView(f"`{name}`")
        frame = spark.sql(args.sql)
        rows = frame.limit(args.limit + 1).collect()
    except PySparkException as e:
        tables = ""
        if e.getCondition() == "TABLE_OR_VIEW_NOT_FOUND":  # a topic's name mistyped or unquoted
            named = ", ".join(["kafka", *(f"`{t}`" if _needs_quotes(t) else t for t in topics)])
            tables = f" (the tables here: {named})"
        raise KafkalogError(f"query: {_reason(e)}{tables}") from None
    shown = rows[: args.limit]
    write = {"table": _table, "jsonl": _jsonl, "csv": _csv}[args.format]
    write(frame.columns, [[_plain(v) for v in row] for row in shown], out)
    if len(rows) > args.limit:
        print(f"(the first {args.limit} rows; --limit shows more)", file=sys.stderr)
    return 0


def _needs_quotes(name: str) -> bool:
    """Whether Spark SQL needs ``name`` in backquotes (a topic with ``-`` or ``.``)."""
    return not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name)


def _reason(error: Exception) -> str:
    """One line of what went wrong: kafkalog's own message when a task raised it (Spark wraps
    it in a Python traceback), else the first line of Spark's."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    ours = [m.group(1) for line in lines if (m := _ERROR_LINE.match(line))]
    return ours[-1] if ours else (lines[0] if lines else type(error).__name__)


def _plain(value: Any) -> Any:
    """A value as text or JSON can show it: bytes as UTF-8 (else ``base64:``), times in ISO
    8601 UTC, Spark rows and lists as JSON objects and arrays."""
    if isinstance(value, (bytes, bytearray)):
        return text_or_base64(bytes(value))
    if isinstance(value, dt.datetime):
        return value.replace(tzinfo=dt.UTC).isoformat(timespec="milliseconds")
    if isinstance(value, dt.date):
        return value.isoformat()
    if hasattr(value, "asDict"):
        return {k: _plain(v) for k, v in value.asDict().items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def _cell(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _table(columns: list[str], rows: list[list[Any]], out: IO[str]) -> None:
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip(), file=out)
    print("  ".join("-" * w for w in widths), file=out)
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip(), file=out)


def _jsonl(columns: list[str], rows: list[list[Any]], out: IO[str]) -> None:
    for row in rows:
        print(json.dumps(dict(zip(columns, row, strict=True)), ensure_ascii=False), file=out)


def _csv(columns: list[str], rows: list[list[Any]], out: IO[str]) -> None:
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows(_csv_row(row) for row in rows)


def _csv_row(row: list[Any]) -> Iterator[str]:
    for value in row:
        yield "" if value is None else _cell(value)
