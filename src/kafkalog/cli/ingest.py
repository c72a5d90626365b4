"""``kafkalog ingest``: JSON Lines, CSV or Parquet into a topic-partition, as Kafka would store
records a producer sent (batches, indexes, checkpoints).

JSON Lines: each line is a record's value as written; ``--key-field``/``--timestamp-field`` pick
fields of the object. CSV and Parquet: the ``value`` column (or ``--value-column``) is the value,
else the whole row as JSON; key and timestamp columns as named.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from collections.abc import Iterator
from typing import IO, Any

import numpy as np
import pyarrow as pa

from kafkalog.cli import progress


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


def _millis(value: Any, now: int) -> int:
    if value is None:
        return now
    if isinstance(value, bool):
        raise ValueError(f"timestamp {value!r} is not a time")
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, dt.datetime):
        when = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
        return int(when.timestamp() * 1000)
    text = str(value)
    if text.lstrip("-").isdigit():
        return int(text)
    when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1000)


def _encode_key(value: Any) -> bytes | None:
    if value is None:
        return None
    return value if isinstance(value, bytes) else str(value).encode()


def _jsonl_chunks(path: str, args: argparse.Namespace, now: int) -> Iterator[pa.Table]:
    keys: list[bytes | None] = []
    values: list[bytes] = []
    stamps: list[int] = []
    with open(path, "rb") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip(b"\r\n")
            if not line.strip():
                continue
            if args.key or args.timestamp:
                try:
                    obj = json.loads(line)
                except ValueError as e:
                    raise ValueError(f"{path} line {n}: not JSON ({e})") from None
                fields = obj if isinstance(obj, dict) else {}
                keys.append(_encode_key(fields.get(args.key)) if args.key else None)
                stamps.append(_millis(fields.get(args.timestamp), now) if args.timestamp else now)
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

        batches = iter(pcsv.open_csv(path))
    for batch in batches:
        table = pa.Table.from_batches([batch])
        names = table.schema.names
        value_col = args.value or ("value" if "value" in names else None)
        if value_col is not None:
            values = [_encode_key(v) for v in table.column(value_col).to_pylist()]
        else:
            values = [json.dumps(row, default=str).encode() for row in table.to_pylist()]
        keys = (
            [_encode_key(v) for v in table.column(args.key).to_pylist()]
            if args.key
            else [None] * table.num_rows
        )
        stamps = (
            [_millis(v, now) for v in table.column(args.timestamp).to_pylist()]
            if args.timestamp
            else [now] * table.num_rows
        )
        yield pa.table(
            {
                "key": pa.array(keys, pa.binary()),
                "value": pa.array(values, pa.binary()),
                "timestamp": pa.array(np.asarray(stamps, np.int64)),
            }
        )


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
    total = 0
    with (
        LogDir(args.data, writable=True) as logdir,
        progress.bar("ingesting", unit="rec") as bar,
    ):
        log = logdir.log(args.topic, args.partition, create=True, config=config)
        first = log.log_end_offset
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
        last = log.log_end_offset
    print(
        f"ingested {total:,} records into {args.topic}-{args.partition} at offsets "
        f"{first}..{last - 1} ({args.data})",
        file=out,
    )
    return 0
