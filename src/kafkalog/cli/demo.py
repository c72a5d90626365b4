"""``kafkalog demo``: write a small sample partition with every kind of batch, then dump it.

It is the README's first command: a fresh install can see, without a broker or any data of its
own, that kafkalog writes Kafka segments and reads them back (with both decoders).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from typing import IO, Any

import pyarrow as pa

from kafkalog.records import (
    Compression,
    ControlType,
    Record,
    TimestampType,
    decode_arrow,
    encode_arrow,
    encode_batch,
    encode_control_batch,
)

SEGMENT = "00000000000000000000.log"


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "demo",
        help="write a sample Kafka partition and dump it (no broker needed)",
        description="Write a sample partition directory with every codec, a transaction and "
        "a LogAppendTime batch, then dump it as kafka-dump-log.sh would.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  kafkalog demo\n  kafkalog demo --out ./sample --records 20000",
    )
    p.add_argument("--out", default=None, help="directory to write into (default: a temp dir)")
    p.add_argument("--records", type=int, default=5000, help="records in the sample")
    p.set_defaults(run=run)


def write_sample(directory: str, records: int = 5000, start_ms: int | None = None) -> str:
    """Write ``<directory>/clicks-0/00000000000000000000.log``; returns the segment path."""
    start = int(time.time() * 1000) - records * 10 if start_ms is None else start_ms
    part = os.path.join(directory, "clicks-0")
    os.makedirs(part, exist_ok=True)
    pieces: list[bytes] = []
    offset = 0
    per_codec = max(1, records // len(Compression))
    for codec in Compression:
        n = per_codec
        rows = pa.table(
            {
                "key": [f"user-{(offset + i) % 97}".encode() for i in range(n)],
                "value": [
                    f'{{"page": "/item/{(offset + i) % 50}", "ms": {10 * (offset + i)}}}'.encode()
                    for i in range(n)
                ],
                "timestamp": pa.array([start + 10 * (offset + i) for i in range(n)], pa.int64()),
                "headers": [[{"key": "source", "value": b"demo"}] for _ in range(n)],
            }
        )
        enc = encode_arrow(
            rows,
            base_offset=offset,
            compression=codec,
            max_records_per_batch=500,
            partition_leader_epoch=0,
        )
        pieces.append(bytes(enc.data))
        offset += n
    # a committed transaction, and a batch stamped by the "broker" (LogAppendTime)
    txn = [Record.of(b"txn-value", b"txn-key", start + 10 * offset)]
    pieces.append(
        encode_batch(
            txn,
            base_offset=offset,
            producer_id=7,
            producer_epoch=0,
            base_sequence=0,
            is_transactional=True,
            partition_leader_epoch=0,
        )
    )
    pieces.append(
        encode_control_batch(
            ControlType.COMMIT,
            offset=offset + 1,
            timestamp=start + 10 * offset,
            producer_id=7,
            producer_epoch=0,
            coordinator_epoch=1,
            partition_leader_epoch=0,
        )
    )
    pieces.append(
        encode_batch(
            [Record.of(b"stamped", None, start)],
            base_offset=offset + 2,
            timestamp_type=TimestampType.LOG_APPEND_TIME,
            log_append_time=start + 10 * offset + 5,
            partition_leader_epoch=0,
        )
    )
    path = os.path.join(part, SEGMENT)
    with open(path, "wb") as f:
        for piece in pieces:
            f.write(piece)
    return path


def run(args: argparse.Namespace, out: IO[str] | None = None) -> int:
    from kafkalog.cli import dump

    out = out or sys.stdout
    directory = args.out or tempfile.mkdtemp(prefix="kafkalog-demo-")
    t = time.perf_counter()
    path = write_sample(directory, args.records)
    wrote = time.perf_counter() - t
    size = os.path.getsize(path)
    print(f"wrote {path} ({size:,} bytes) in {wrote * 1000:.0f} ms", file=out)
    with open(path, "rb") as f:
        data = f.read()
    t = time.perf_counter()
    table = decode_arrow(data, include_headers=True, timestamp_unit="us")
    took = time.perf_counter() - t
    print(
        f"decoded {table.num_rows:,} records into Arrow columns in {took * 1000:.0f} ms "
        f"(CRCs verified): {', '.join(table.schema.names)}",
        file=out,
    )
    _print_rows(table.slice(0, 3), out)
    print(file=out)
    dump_args = argparse.Namespace(
        files=[path],
        print_data_log=False,
        deep_iteration=False,
        max_bytes=None,
        key_decoder=None,
        value_decoder=None,
        skip_record_metadata=False,
        json=False,
    )
    return dump.run(dump_args, out=out)


def _print_rows(table: pa.RecordBatch, out: IO[str]) -> None:
    print(f"  {'offset':>6}  {'timestamp (UTC)':<26}  {'key':<10}  value", file=out)
    for row in table.to_pylist():
        key = row["key"].decode() if row["key"] is not None else "null"
        value = row["value"].decode() if row["value"] is not None else "null"
        print(
            f"  {row['offset']:>6}  {row['timestamp'].isoformat():<26}  {key:<10}  {value}",
            file=out,
        )
