"""The JVM path's queries over archived segments in an object store, one run, local[2]: every
split of an ``s3://`` location goes to kafkalog's Python reader, either a reader the executor
keeps between splits (now) or a process started per split (before:
``spark.kafkalog.jvm.reuseReaders=false``), next to the Python source over the same store.

The store is the tests' (``tests/s3store.py``: moto's S3 server on loopback, the objects put with
boto3), holding a generated log directory (``--partitions`` partitions of ``--segments``
segments each: as many splits). Each query is ``SELECT count(*), sum(length(value))``, the three
ways interleaved, ``--rounds`` times after one warm-up each; medians, and their ratios.

    python bench/bench_remote_reads.py [--partitions 8] [--segments 4] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

REUSE = "spark.kafkalog.jvm.reuseReaders"
TOPIC = "archive"
QUERY = ("count(*)", "sum(length(value))")


def write_logs(root: Path, partitions: int, segments: int) -> int:
    """``partitions`` partitions of ``segments`` segments of ~200-byte records (1 MB each, the
    last one less)."""
    from kafkalog.log import Log, TopicConfig
    from kafkalog.records import Record

    config = TopicConfig(segment_bytes=1 << 20)
    total = 0
    for p in range(partitions):
        with Log(root / f"{TOPIC}-{p}", config) as log:
            while len(log.segments) < segments:  # the last one part-filled
                batch = [
                    Record.of(
                        b"v%09d" % (total + i) * 18, b"k%d" % i, 1_700_000_000_000 + total + i
                    )
                    for i in range(500)
                ]
                log.append_records(batch)
                total += len(batch)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--segments", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    from pyspark.sql import SparkSession

    import kafkalog.spark
    from kafkalog.spark.jvm_bridge import PYTHON_NAME
    from kafkalog.spark.source import path_in_use
    from s3store import serve

    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="kafkalog-bench-remote-") as tmp:
        records = write_logs(Path(tmp), args.partitions, args.segments)
        store_iter = serve(Path(tmp))
        store = next(store_iter)
        try:
            spark = (
                SparkSession.builder.master("local[2]")
                .config("spark.ui.enabled", "false")
                .getOrCreate()
            )
            spark.sparkContext.setLogLevel("ERROR")
            kafkalog.spark.register(spark)
            assert path_in_use(spark) == "jvm", "no JVM path here (no JDK?)"
            uri = store.uri()
            splits = len(list(Path(tmp).glob("*/*.log")))

            def run(way: str) -> tuple[float, list[Any]]:
                fmt = PYTHON_NAME if way == "python" else "kafkalog"
                spark.conf.set(REUSE, "false" if way == "spawn" else "true")
                t = time.perf_counter()
                got = spark.read.format(fmt).option("path", uri).load().selectExpr(*QUERY)
                rows = [tuple(r) for r in got.collect()]
                return time.perf_counter() - t, rows

            ways = ("spawn", "kept", "python")
            times: dict[str, list[float]] = {w: [] for w in ways}
            answers = {w: run(w)[1] for w in ways}  # warm-up: the JVM's, the readers' first
            assert len({repr(a) for a in answers.values()}) == 1, answers
            assert answers["kept"][0][0] == records, (answers, records)
            for _ in range(args.rounds):
                for way in ways:
                    seconds, rows = run(way)
                    assert rows == answers[way]
                    times[way].append(seconds)
            spark.conf.unset(REUSE)
            spark.stop()
        finally:
            next(store_iter, None)  # stops the server
    after = os.getloadavg()
    med = {w: statistics.median(t) for w, t in times.items()}
    print(
        f"{records} records, {splits} splits ({args.partitions} partitions x {args.segments} "
        f"segments of <= 1 MB) in moto's S3 on loopback; local[2]; {args.rounds} rounds"
    )
    print(
        f"load average before {load[0]:.1f}, after {after[0]:.1f} (1 min), {os.cpu_count()} cores"
    )
    for way, label in (
        ("spawn", "JVM path, a reader process per split (reuseReaders=false)"),
        ("kept", "JVM path, readers kept (default)"),
        ("python", "Python source"),
    ):
        rounds = " / ".join(f"{t:.2f}" for t in times[way])
        print(
            f"{label}: median {med[way]:.2f} s ({med[way] / splits * 1000:.0f} ms/split; {rounds})"
        )
    print(f"kept / per split: {med['kept'] / med['spawn']:.2f}x the time")
    print(f"kept / Python source: {med['kept'] / med['python']:.2f}x the time")


if __name__ == "__main__":
    main()
