"""``kafkalog job``: the main pipeline, on an embedded default.

It writes a sample Kafka data directory (several topics and partitions, 9.6 million records
spread over one simulated day) through kafkalog's log layer, then on local Spark reads one hour
of it three ways (a real full scan with pushdown off, a pushed-down ``where``, and
``startingTimestamp``/``endingTimestamp`` through the indexes), aggregates, writes Parquet, and
prints rows, the bytes the tasks actually read and the time of each.

The sample and the Parquet output go to the user's cache directory (``~/.cache/kafkalog``, or
``$XDG_CACHE_HOME/kafkalog``), never into the current directory: the README's first command is
run inside a clone, which must stay as ``git clone`` left it.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafkalog.cli import progress
from kafkalog.cli.spark_session import GET_JAVA, java_missing, local_session
from kafkalog.errors import KafkalogError

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
    p.add_argument(
        "--data",
        help="sample data directory (default: sample in kafkalog's cache directory, "
        "~/.cache/kafkalog or $XDG_CACHE_HOME/kafkalog; about 430 MB for the default 9.6 "
        "million records; kept for the next run, which reuses it)",
    )
    p.add_argument(
        "--out",
        help="Parquet output directory (default: job-out in kafkalog's cache directory, a few KB)",
    )
    p.add_argument(
        "--remove-sample",
        action="store_true",
        help="delete the sample data directory when the job ends (the next run writes it again)",
    )
    p.add_argument("--records", type=int, default=9_600_000, help="records in the sample")
    p.add_argument("--hour", type=int, default=12, help="hour of the day to read (0-23)")
    p.set_defaults(run=run)


def cache_dir() -> str:
    """kafkalog's directory in the user's cache: ``$XDG_CACHE_HOME/kafkalog`` when that is set
    to an absolute path (the XDG Base Directory rule: a relative one is ignored), else
    ``~/.cache/kafkalog``."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "kafkalog")


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
    """One chunk of a topic's records, built column by column (Arrow string kernels, no Python
    object per record: a loop building one string per record was most of the job's first run)."""
    n = len(stamps)
    users = rng.integers(0, 50_000, n)
    pages = rng.integers(0, len(PAGES), n)
    amounts = rng.integers(100, 50_000, n)

    def text(values: np.ndarray) -> pa.Array:
        return pc.cast(pa.array(values), pa.string())

    def joined(*parts: str | pa.Array) -> pa.Array:
        pieces = [pa.scalar(p) if isinstance(p, str) else p for p in parts]
        return pc.cast(pc.binary_join_element_wise(*pieces, ""), pa.binary())

    if topic == "clicks":
        page_names = pa.array(PAGES).take(pa.array(pages))
        values = joined(
            '{"user":', text(users), ',"page":"', page_names, '","ms":', text(stamps), "}"
        )
    elif topic == "orders":
        values = joined(
            '{"user":', text(users), ',"cents":', text(amounts), ',"ms":', text(stamps), "}"
        )
    else:
        tenths = (amounts + 25) // 50  # amount / 500 to one decimal
        values = joined("cpu=", text(tenths // 10), ".", text(tenths % 10))
    return pa.table(
        {
            "key": joined("user-", text(users)),
            "value": values,
            "timestamp": pa.array(stamps, pa.int64()),
        }
    )


@dataclass
class Measured:
    label: str
    how: str
    rows: int
    bytes_read: int
    seconds: float


def run(args: argparse.Namespace, out: IO[str] | None = None) -> int:
    out = out or sys.stdout
    # numba keeps compiled kernels beside their source when it can write there, which for an
    # editable install is the clone: this process (and Spark's workers, which inherit its
    # environment) keep them in the cache directory instead, unless the user chose a place
    if "numba" not in sys.modules:
        os.environ.setdefault("NUMBA_CACHE_DIR", os.path.join(cache_dir(), "numba"))
    missing = java_missing()  # before minutes of writing the sample, not after
    if missing:
        raise KafkalogError(
            f"kafkalog job runs on local Spark, which needs Java: {missing}; {GET_JAVA}"
        )
    data = os.path.abspath(args.data or os.path.join(cache_dir(), "sample"))
    parquet = os.path.abspath(args.out or os.path.join(cache_dir(), "job-out"))
    t = time.perf_counter()
    if not os.path.exists(os.path.join(data, ".kafkalog-sample")):
        print(f"writing the sample data directory to {data} ...", file=out, flush=True)
    written = write_sample(data, args.records)
    if written:
        print(f"wrote {written:,} records to {data} in {time.perf_counter() - t:.1f} s", file=out)
    else:
        print(f"reusing the sample in {data}", file=out)
    print("starting local Spark ...", file=out, flush=True)
    from pyspark.sql import functions as F

    from kafkalog.spark.stats import collect

    spark = local_session(
        "kafkalog-job",
        **{
            "spark.ui.showConsoleProgress": "true",
            "spark.sql.shuffle.partitions": "4",
            # filters on timestamp/offset/partition reach the source (and its indexes)
            "spark.sql.python.filterPushdown.enabled": "true",
        },
    )
    from kafkalog.spark.source import path_in_use

    if path_in_use(spark) == "jvm":
        print("Spark reads through kafkalog's JVM source (the kafkalog jar)", file=out)
    else:
        print("Spark reads through kafkalog's Python data source (no kafkalog jar)", file=out)
    hour_start = DAY_START + args.hour * HOUR_MS
    hour_end = hour_start + HOUR_MS
    base = {"path": data, "subscribe": "clicks"}
    in_hour = (F.col("timestamp") >= F.lit(hour_start / 1000).cast("timestamp")) & (
        F.col("timestamp") < F.lit(hour_end / 1000).cast("timestamp")
    )

    def aggregate(df: Any) -> Any:
        page = F.get_json_object(F.col("value").cast("string"), "$.page")
        return df.groupBy(page.alias("page")).agg(
            F.count("*").alias("clicks"), F.sum(F.length("value")).alias("bytes")
        )

    stats_root = tempfile.mkdtemp(prefix="kafkalog-job-stats-")

    def load(name: str, **options: str) -> Any:
        # every task of this query leaves what it read in its own statsDir
        stats = os.path.join(stats_root, name)
        reader = spark.read.format("kafkalog").options(**base, **options, statsDir=stats)
        return reader.load(), stats

    # warm-up: start the Python workers (two readers, and the planner's) and load the compiled
    # kernels in each (a read of the whole topic in two tasks; a seek by time and a pushed
    # filter on another hour), so that no measured query pays for what only a first one does
    other = DAY_START + ((args.hour + 6) % 24) * HOUR_MS
    in_other = (F.col("timestamp") >= F.lit(other / 1000).cast("timestamp")) & (
        F.col("timestamp") < F.lit((other + HOUR_MS) / 1000).cast("timestamp")
    )
    spark.read.format("kafkalog").options(**base, pushdown="false").load().where(in_hour).count()
    seek_other = {"startingTimestamp": str(other), "endingTimestamp": str(other + HOUR_MS)}
    aggregate(spark.read.format("kafkalog").options(**base, **seek_other).load()).collect()
    aggregate(spark.read.format("kafkalog").options(**base).load().where(in_other)).collect()

    def measure(label: str, how: str, df: Any, stats: str) -> tuple[Measured, list[Any]]:
        t = time.perf_counter()
        rows = aggregate(df).orderBy("page").collect()
        seconds = time.perf_counter() - t
        read = collect(stats).bytes_read  # what the tasks really fetched from the segments
        return Measured(label, how, sum(r.clicks for r in rows), read, seconds), rows

    try:
        # 1. a real full scan: pushdown off for this query, every batch of the topic is read and
        #    Spark keeps the rows of the hour
        df, stats = load("scan", pushdown="false")
        scan, scan_result = measure("full scan", "where, pushdown off", df.where(in_hour), stats)
        # 2. the same where, pushed down: its timestamp bounds go through .timeindex and .index
        df, stats = load("pushed")
        pushed, pushed_result = measure(
            "pushed where", "where, pushdown on", df.where(in_hour), stats
        )
        # 3. Spark Kafka source's own options: startingTimestamp/endingTimestamp
        df, stats = load("seek", startingTimestamp=str(hour_start), endingTimestamp=str(hour_end))
        seek, seek_result = measure("index seek", "startingTimestamp", df, stats)
        aggregate(df).orderBy("page").write.mode("overwrite").parquet(parquet)
        parquet_rows = [tuple(r) for r in spark.read.parquet(parquet).orderBy("page").collect()]
    finally:
        shutil.rmtree(stats_root, ignore_errors=True)
    results = [scan, pushed, seek]
    same = (
        parquet_rows
        == [tuple(r) for r in scan_result]
        == [tuple(r) for r in pushed_result]
        == [tuple(r) for r in seek_result]
    )
    print(file=out)
    print(f"clicks between {_iso(hour_start)} and {_iso(hour_end)}:", file=out)
    print(f"  {'method':<14}{'how':<22}{'rows':>11}{'bytes read':>16}{'seconds':>9}", file=out)
    for m in results:
        print(
            f"  {m.label:<14}{m.how:<22}{m.rows:>11,}{m.bytes_read:>16,}{m.seconds:>9.2f}",
            file=out,
        )
    print(
        f"  same aggregate from all three: {'yes' if same else 'NO'}; Parquet written to {parquet}",
        file=out,
    )
    for row in seek_result[:8]:
        print(f"    {row.page:<10} {row.clicks:>8,} clicks {row.bytes:>12,} bytes", file=out)
    print(file=out)
    print(
        f"takeaway: one hour of a day's topic through Kafka's own indexes took "
        f"{seek.seconds:.2f} s against {scan.seconds:.2f} s for a full scan "
        f"({speed_ratio(scan.seconds, seek.seconds)}), reading "
        f"{scan.bytes_read / max(seek.bytes_read, 1):.0f}x fewer bytes; a plain where on "
        f"timestamp is pushed down too, but only its lower bound can be sought "
        f"({scan.bytes_read / max(pushed.bytes_read, 1):.1f}x fewer bytes here).",
        file=out,
    )
    spark.stop()
    print(file=out)
    if args.remove_sample:
        shutil.rmtree(data, ignore_errors=True)
        print(f"removed the sample in {data}", file=out)
    else:
        print(
            f"the sample ({_megabytes(data)}) stays in {data} for the next run; remove it with\n"
            f"  rm -r {shlex.quote(data)}\n"
            "(or run kafkalog job --remove-sample; --data DIR writes it elsewhere)",
            file=out,
        )
    rows_agree = scan.rows == pushed.rows == seek.rows
    return 0 if same and rows_agree else 1


def speed_ratio(baseline_s: float, measured_s: float) -> str:
    """How ``measured_s`` compares with ``baseline_s`` in words: a slower run is said to be
    slower (a loaded machine can make the seek lose), never "0.8x faster"."""
    if measured_s <= 0 or baseline_s <= 0:
        return "no comparison: a time of zero"
    ratio = baseline_s / measured_s
    if ratio >= 1.05:
        return f"{ratio:.1f}x faster"
    if ratio > 1 / 1.05:
        return "about as fast"
    return f"{1 / ratio:.1f}x slower: the machine was busy, or the sample too small to show it"


def _megabytes(directory: str) -> str:
    total = sum(
        os.path.getsize(os.path.join(root, name))
        for root, _, names in os.walk(directory)
        for name in names
    )
    return f"{total / 1e6:,.0f} MB" if total >= 1e6 else f"{total / 1e3:,.0f} KB"


def _iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))
