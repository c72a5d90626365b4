"""``kafkalog job``: the main pipeline, on an embedded default.

It writes a sample Kafka data directory (several topics and partitions, over a million records
spread over one simulated day) through kafkalog's log layer, then on local Spark reads one hour
of it by timestamp through the indexes, aggregates, writes Parquet, and compares that with
the same hour found by a full scan: rows, bytes read and time for each.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from typing import IO, Any

import numpy as np
import pyarrow as pa

from kafkalog.cli import progress
from kafkalog.cli.spark_session import local_session

DAY_MS = 24 * 3600 * 1000
HOUR_MS = 3600 * 1000
DAY_START = 1_767_225_600_000  # 2026-01-01T00:00:00Z
TOPICS = {"clicks": 4, "orders": 2, "metrics": 2}  # partitions per topic
PAGES = ["/", "/search", "/item", "/cart", "/checkout", "/account", "/help", "/deals"]


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "job",
        help="the main pipeline on a sample it writes: seek one hour by time on Spark",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  kafkalog job\n"
        "  kafkalog job --records 200000 --hour 6 --out /tmp/hour6",
    )
    p.add_argument("--data", default="kafkalog-sample", help="sample data directory")
    p.add_argument("--out", default="kafkalog-job-out", help="Parquet output directory")
    p.add_argument("--records", type=int, default=1_200_000, help="records in the sample")
    p.add_argument("--hour", type=int, default=12, help="hour of the day to read (0-23)")
    p.set_defaults(run=run)


def write_sample(directory: str, records: int) -> int:
    """Write the sample data directory (skipped when it already holds the same sample)."""
    from kafkalog.log import LogDir, TopicConfig
    from kafkalog.records import encode_arrow

    marker = os.path.join(directory, ".kafkalog-sample")
    if os.path.exists(marker):
        with open(marker) as f:
            if f.read().strip() == str(records):
                return 0
    rng = np.random.default_rng(2026)
    config = TopicConfig(segment_bytes=16 * 1024 * 1024, index_interval_bytes=4096)
    partitions = [(t, p) for t, n in TOPICS.items() for p in range(n)]
    per_partition = records // len(partitions)
    with (
        LogDir(directory, writable=True) as logdir,
        progress.bar("writing sample", records, "rec") as bar,
    ):
        for topic, partition in partitions:
            log = logdir.log(topic, partition, create=True, config=config)
            if log.log_end_offset:
                log.truncate_fully_and_start_at(0)
            stamps = np.sort(rng.integers(DAY_START, DAY_START + DAY_MS, per_partition))
            codec = "zstd" if topic == "orders" else "none"
            for start in range(0, per_partition, 50_000):
                n = min(50_000, per_partition - start)
                table = _rows(topic, stamps[start : start + n], rng)
                encoded = encode_arrow(
                    table,
                    base_offset=log.log_end_offset,
                    compression=codec,
                    max_records_per_batch=500,
                    partition_leader_epoch=0,
                )
                for pos, size in zip(encoded.positions, encoded.sizes, strict=True):
                    log.append(encoded.data[int(pos) : int(pos) + int(size)])
                bar.update(n)
    with open(marker, "w") as f:
        f.write(str(records))
    return per_partition * len(partitions)


def _rows(topic: str, stamps: np.ndarray, rng: np.random.Generator) -> pa.Table:
    n = len(stamps)
    users = rng.integers(0, 50_000, n)
    pages = rng.integers(0, len(PAGES), n)
    amounts = rng.integers(100, 50_000, n)
    if topic == "clicks":
        values = [
            f'{{"user":{u},"page":"{PAGES[p]}","ms":{t}}}'.encode()
            for u, p, t in zip(users.tolist(), pages.tolist(), stamps.tolist(), strict=True)
        ]
    elif topic == "orders":
        values = [
            f'{{"user":{u},"cents":{a},"ms":{t}}}'.encode()
            for u, a, t in zip(users.tolist(), amounts.tolist(), stamps.tolist(), strict=True)
        ]
    else:
        values = [f"cpu={a / 500:.1f}".encode() for a in amounts.tolist()]
    return pa.table(
        {
            "key": pa.array([f"user-{u}".encode() for u in users.tolist()], pa.binary()),
            "value": pa.array(values, pa.binary()),
            "timestamp": pa.array(stamps, pa.int64()),
        }
    )


@dataclass
class Measured:
    label: str
    rows: int
    bytes_read: int
    seconds: float


def _bytes_planned(options: dict[str, str]) -> int:
    from kafkalog.spark.options import parse_read_options
    from kafkalog.spark.plan import make_splits, resolve_ranges

    opts = parse_read_options(options)
    return sum(s.size for s in make_splits(resolve_ranges(opts), opts))


def run(args: argparse.Namespace, out: IO[str] | None = None) -> int:
    out = out or sys.stdout
    data = os.path.abspath(args.data)
    t = time.perf_counter()
    written = write_sample(data, args.records)
    if written:
        print(f"wrote {written:,} records to {data} in {time.perf_counter() - t:.1f} s", file=out)
    else:
        print(f"reusing the sample in {data}", file=out)
    print("starting local Spark ...", file=out, flush=True)
    from pyspark.sql import functions as F

    spark = local_session(
        "kafkalog-job",
        **{"spark.ui.showConsoleProgress": "true", "spark.sql.shuffle.partitions": "4"},
    )
    hour_start = DAY_START + args.hour * HOUR_MS
    hour_end = hour_start + HOUR_MS
    base = {"path": data, "subscribe": "clicks"}
    seek_options = {
        **base,
        "startingTimestamp": str(hour_start),
        "endingTimestamp": str(hour_end),
    }

    def aggregate(df: Any) -> Any:
        page = F.get_json_object(F.col("value").cast("string"), "$.page")
        return df.groupBy(page.alias("page")).agg(
            F.count("*").alias("clicks"), F.sum(F.length("value")).alias("bytes")
        )

    # warm-up: the first jobs start the Python workers and load the compiled kernels
    aggregate(spark.read.format("kafkalog").options(**base).load()).collect()

    def measure(label: str, df: Any, options: dict[str, str]) -> tuple[Measured, list[Any]]:
        t = time.perf_counter()
        rows = aggregate(df).orderBy("page").collect()
        seconds = time.perf_counter() - t
        count = sum(r.clicks for r in rows)
        return Measured(label, count, _bytes_planned(options), seconds), rows

    # 1. through the indexes: startingTimestamp/endingTimestamp resolve by .timeindex + .index
    seek_df = spark.read.format("kafkalog").options(**seek_options).load()
    seek, seek_result = measure("index seek", seek_df, seek_options)
    # 2. the same hour found by a full scan of the topic
    scan_df = (
        spark.read.format("kafkalog")
        .options(**base)
        .load()
        .where(
            (F.col("timestamp") >= F.lit(hour_start / 1000).cast("timestamp"))
            & (F.col("timestamp") < F.lit(hour_end / 1000).cast("timestamp"))
        )
    )
    scan, scan_result = measure("full scan", scan_df, base)
    results = [seek, scan]
    aggregate(seek_df).orderBy("page").write.mode("overwrite").parquet(os.path.abspath(args.out))
    parquet_rows = [
        tuple(r) for r in spark.read.parquet(os.path.abspath(args.out)).orderBy("page").collect()
    ]
    same = parquet_rows == [tuple(r) for r in scan_result] == [tuple(r) for r in seek_result]
    print(file=out)
    print(f"clicks between {_iso(hour_start)} and {_iso(hour_end)}:", file=out)
    print(f"  {'method':<12}{'rows':>12}{'bytes read':>16}{'seconds':>10}", file=out)
    for m in results:
        print(f"  {m.label:<12}{m.rows:>12,}{m.bytes_read:>16,}{m.seconds:>10.2f}", file=out)
    print(
        f"  same aggregate from both: {'yes' if same else 'NO'}; Parquet written to "
        f"{os.path.abspath(args.out)}",
        file=out,
    )
    for row in seek_result[:8]:
        print(f"    {row.page:<10} {row.clicks:>8,} clicks {row.bytes:>12,} bytes", file=out)
    spark.stop()
    return 0 if same and seek.rows == scan.rows else 1


def _iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))
