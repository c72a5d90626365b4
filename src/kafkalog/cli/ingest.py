"""``kafkalog ingest``: JSON Lines, CSV or Parquet into a topic-partition, as Kafka would store
records a producer sent (batches, indexes, checkpoints).

JSON Lines: each line is a record's value as written; ``--key-field``/``--timestamp-field`` pick
fields of the object. CSV and Parquet: the ``value`` column (or ``--value-column``) is the value,
else the whole row as JSON; key and timestamp columns as named.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import math
import os
import sys
from collections.abc import Iterator
from typing import IO, Any

import numpy as np
import pyarrow as pa

from kafkalog.cli import progress
from kafkalog.cli.args import epoch_millis
from kafkalog.cli.lookup import text_or_base64


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "ingest",
        help="JSON Lines, CSV or Parquet into a topic-partition directory",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        "  kafkalog ingest events.jsonl --data ./data --topic events --key-field user\n"
        "  kafkalog ingest orders.parquet --data ./data --topic orders --partition 2 "
        "--compression zstd --config segment.bytes=104857600",
    )
    p.add_argument("file", help="a .jsonl/.json, .csv or .parquet file")
    p.add_argument("--data", required=True, help="the data directory (created if missing)")
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, default=0)
    p.add_argument(
        "--format",
        choices=("jsonl", "csv", "parquet"),
        default=None,
        help="default: from the file name's extension",
    )
    p.add_argument("--key-field", "--key-column", dest="key", default=None)
    p.add_argument("--value-column", dest="value", default=None)
    p.add_argument(
        "--timestamp-field",
        "--timestamp-column",
        dest="timestamp",
        default=None,
        help="epoch milliseconds or ISO 8601; default: now",
    )
    p.add_argument(
        "--compression", default="none", choices=("none", "gzip", "snappy", "lz4", "zstd")
    )
    p.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="topic configuration, Kafka's names (repeatable)",
    )
    p.set_defaults(run=run)


def _format(args: argparse.Namespace) -> str:
    if args.format:
        return str(args.format)
    name = args.file.lower()
    for ext, fmt in (
        (".parquet", "parquet"),
        (".csv", "csv"),
        (".jsonl", "jsonl"),
        (".json", "jsonl"),
        (".ndjson", "jsonl"),
    ):
        if name.endswith(ext):
            return fmt
    raise ValueError(f"cannot tell the format of {args.file}: give --format")


_MAX_MILLIS = 2**63 - 1


def _millis(value: Any, now: int) -> int:
    """Epoch milliseconds of ``value``; ValueError (never OverflowError) for anything a record's
    int64 timestamp cannot hold, so the caller can name the line or row."""
    millis = _to_millis(value, now)
    if not 0 <= millis <= _MAX_MILLIS:
        raise ValueError(f"timestamp {value!r} is outside 0..{_MAX_MILLIS} ms")
    return millis


def _to_millis(value: Any, now: int) -> int:
    if value is None:
        return now
    if isinstance(value, bool):
        raise ValueError(f"timestamp {value!r} is not a time")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"timestamp {value!r} is not a time")
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, dt.datetime):
        when = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
        return int(when.timestamp() * 1000)
    return epoch_millis(str(value))


def _encode_key(value: Any) -> bytes | None:
    """A field as bytes: bytes as they are, strings as UTF-8, anything else as its JSON text
    (``true``, ``{"a": 1}``), not Python's repr (``True``, ``{'a': 1}``)."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return json.dumps(value, default=_json_default, separators=(",", ":")).encode()


def _json_default(value: Any) -> Any:
    """JSON for what ``json`` lacks: bytes that are not UTF-8 as ``base64:...`` (as ``cat``
    prints them), other bytes as text, times/dates/decimals as their ISO or decimal text."""
    if isinstance(value, bytes):
        return text_or_base64(value)
    return str(value)


def _jsonl_chunks(path: str, args: argparse.Namespace, now: int) -> Iterator[pa.Table]:
    keys: list[bytes | None] = []
    values: list[bytes] = []
    stamps: list[int] = []
    with open(path, "rb") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip(b"\r\n")
            if n == 1 and line.startswith(b"\xef\xbb\xbf"):
                line = line[3:]  # a UTF-8 byte order mark is the file's, not the record's
            if not line.strip():
                continue
            if args.key or args.timestamp:
                try:
                    obj = json.loads(line)
                except ValueError as e:
                    raise ValueError(f"{path} line {n}: not JSON ({e})") from None
                fields = obj if isinstance(obj, dict) else {}
                keys.append(_encode_key(fields.get(args.key)) if args.key else None)
                try:
                    stamps.append(
                        _millis(fields.get(args.timestamp), now) if args.timestamp else now
                    )
                except ValueError as e:
                    raise ValueError(f"{path} line {n}: {e}") from None
            else:
                keys.append(None)
                stamps.append(now)
            values.append(line)
            if len(values) >= 50_000:
                yield _table(keys, values, stamps)
                keys, values, stamps = [], [], []
    if values:
        yield _table(keys, values, stamps)


def _table(keys: list[bytes | None], values: list[bytes], stamps: list[int]) -> pa.Table:
    return pa.table(
        {
            "key": pa.array(keys, pa.binary()),
            "value": pa.array(values, pa.binary()),
            "timestamp": pa.array(np.asarray(stamps, np.int64)),
        }
    )


def _columnar_chunks(path: str, fmt: str, args: argparse.Namespace, now: int) -> Iterator[pa.Table]:
    if fmt == "parquet":
        import pyarrow.parquet as pq

        batches: Iterator[pa.RecordBatch] = pq.ParquetFile(path).iter_batches(batch_size=50_000)
    else:
        import pyarrow.csv as pcsv

        try:
            batches = iter(pcsv.open_csv(path))
        except pa.ArrowException as e:
            raise ValueError(f"{path}: {e}") from None
    row = 0
    for batch in _named_errors(path, batches):
        table = _plain_times(pa.Table.from_batches([batch]))
        names = table.schema.names
        for option, column in (
            ("--key-column", args.key),
            ("--value-column", args.value),
            ("--timestamp-column", args.timestamp),
        ):
            if column is not None and column not in names:
                raise ValueError(f"{path}: {option} {column!r} is not a column ({names})")
        value_col = args.value or ("value" if "value" in names else None)
        if value_col is not None:
            values = [_encode_key(v) for v in table.column(value_col).to_pylist()]
        else:
            values = [json.dumps(row, default=_json_default).encode() for row in table.to_pylist()]
        keys = (
            [_encode_key(v) for v in table.column(args.key).to_pylist()]
            if args.key
            else [None] * table.num_rows
        )
        stamps = [now] * table.num_rows
        if args.timestamp:
            for i, v in enumerate(table.column(args.timestamp).to_pylist()):
                try:
                    stamps[i] = _millis(v, now)
                except ValueError as e:
                    raise ValueError(f"{path} row {row + i + 1}: {e}") from None
        row += table.num_rows
        yield pa.table(
            {
                "key": pa.array(keys, pa.binary()),
                "value": pa.array(values, pa.binary()),
                "timestamp": pa.array(np.asarray(stamps, np.int64)),
            }
        )


def _named_errors(path: str, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``batches``, with a parse error (pyarrow's message names neither) naming ``path``."""
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except pa.ArrowException as e:
            raise ValueError(f"{path}: {e}") from None
        yield batch


def _plain_times(table: pa.Table) -> pa.Table:
    """Nanosecond timestamp columns as microsecond ones: Python's datetime stops at
    microseconds, so ``to_pylist`` refuses a nanosecond time that is not a whole microsecond
    (pandas writes such); a record's timestamp is milliseconds anyway."""
    for i, f in enumerate(table.schema):
        if pa.types.is_timestamp(f.type) and f.type.unit == "ns":
            ms = table.column(i).cast(pa.timestamp("us", f.type.tz), safe=False)
            table = table.set_column(i, pa.field(f.name, ms.type, f.nullable), ms)
    return table


def run(args: argparse.Namespace, out: IO[str] | None = None) -> int:
    import time

    from kafkalog.log import LogDir, TopicConfig
    from kafkalog.records import encode_arrow

    out = out or sys.stdout
    config = TopicConfig.from_properties(
        dict(item.split("=", 1) for item in args.config if "=" in item)
    )
    bad = [item for item in args.config if "=" not in item]
    if bad:
        raise ValueError(f"--config {bad[0]!r} is not KEY=VALUE")
    fmt = _format(args)
    if not os.path.exists(args.file):
        raise FileNotFoundError(f"no file {args.file}")
    now = int(time.time() * 1000)
    chunks = (
        _jsonl_chunks(args.file, args, now)
        if fmt == "jsonl"
        else _columnar_chunks(args.file, fmt, args, now)
    )
    # the first chunk is read before the partition is opened, so that bad input found there
    # leaves no new directory behind; bad input found later rolls back what was appended
    first_chunk = next(chunks, None)
    chunks = itertools.chain([] if first_chunk is None else [first_chunk], chunks)
    total = 0
    with (
        LogDir(args.data, writable=True) as logdir,
        progress.bar("ingesting", unit="rec") as bar,
    ):
        log = logdir.log(args.topic, args.partition, create=True, config=config)
        first = log.log_end_offset
        try:
            for table in chunks:
                encoded = encode_arrow(
                    table,
                    base_offset=log.log_end_offset,
                    compression=args.compression,
                    # a batch must fit both a segment and max.message.bytes
                    max_batch_bytes=min(config.max_message_bytes, config.segment_bytes // 2),
                )
                for pos, size in zip(encoded.positions, encoded.sizes, strict=True):
                    log.append(encoded.data[int(pos) : int(pos) + int(size)])
                total += table.num_rows
                bar.update(table.num_rows)
        except BaseException:
            # bad input on line 60,001 must not leave the first 60,000 lines appended
            log.truncate_to(first)
            raise
        last = log.log_end_offset
    print(
        f"ingested {total:,} records into {args.topic}-{args.partition} at offsets "
        f"{first}..{last - 1} ({args.data})",
        file=out,
    )
    return 0
