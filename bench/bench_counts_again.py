"""Counts and a 1% window made again in one process, kept and not kept, against Parquet's
(issue 31), interleaved, medians:

    python bench/bench_counts_again.py --data /tmp/bench24 [--repeat 10]

``count kept``: the planner's answer and the count kept while the log's files stay as they were;
``not kept``: ``spark.kafkalog.jvm.planCache=false`` (every partition planned, the count made,
settled segments' summaries warm); ``cold``: an empty summaries directory; the window's share is
of the full scan (``sum(length(value))``). Ratios are Parquet's time over ours, same run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from kafkalog.cli.job import DAY_START
    from kafkalog.cli.spark_session import local_session

    spark = local_session("bench-counts-again", **{"spark.ui.enabled": "false"})
    summaries = tempfile.mkdtemp(prefix="kafkalog-bench-again-")
    warm = os.path.join(summaries, "warm")
    spark.conf.set("spark.kafkalog.batchSummaries.dir", warm)
    lo = DAY_START + 12 * 3600 * 1000
    hi = lo + 24 * 3600 * 1000 // 100
    between = f"timestamp between timestamp_millis({lo}) and timestamp_millis({hi - 1})"

    def load() -> Any:
        reader = spark.read.format("kafkalog").option("path", args.data)
        return reader.option("subscribe", "clicks").load()

    def not_kept(query: Callable[[], Any]) -> Callable[[], Any]:
        from jvm_vs_parquet import NOT_KEPT, conf_off  # the bench's own rows, the same switch

        return conf_off(spark, NOT_KEPT, query)

    fresh = [0]

    def cold(query: Callable[[], Any]) -> Callable[[], Any]:
        def run() -> Any:
            fresh[0] += 1
            spark.conf.set(
                "spark.kafkalog.batchSummaries.dir", os.path.join(summaries, f"cold-{fresh[0]}")
            )
            try:
                return query()
            finally:
                spark.conf.set("spark.kafkalog.batchSummaries.dir", warm)

        return run

    def window() -> Any:
        return load().where(between).selectExpr("count(*)").collect()[0][0]

    parquet = args.data.rstrip("/") + ".parquet"
    queries: dict[str, Callable[[], Any]] = {
        "count kept": lambda: load().count(),
        "count not kept": not_kept(lambda: load().count()),
        "count cold": cold(lambda: load().count()),
        "window kept": window,
        "window not kept": not_kept(window),
        "full": lambda: load().selectExpr("sum(length(value))").collect()[0][0],
        "parquet count": lambda: spark.read.parquet(parquet).count(),
    }
    for _ in range(2):  # warm: summaries learned, JIT warm
        answers = {q: f() for q, f in queries.items()}
    assert len({answers[q] for q in ("count kept", "count not kept", "parquet count")}) == 1
    times: dict[str, list[float]] = {q: [] for q in queries}
    load_before = os.getloadavg()[0]
    for _ in range(args.repeat):
        for q, f in queries.items():
            t = time.perf_counter()
            f()
            times[q].append(time.perf_counter() - t)
    med = {q: statistics.median(v) for q, v in times.items()}
    print(f"{args.repeat} runs, medians; load {load_before:.1f} -> {os.getloadavg()[0]:.1f}")
    for q in queries:
        print(f"{q:<18}{med[q] * 1000:8.1f} ms")
    for q in ("count kept", "count not kept", "count cold"):
        print(f"{q}: {med['parquet count'] / med[q]:.2f}x Parquet's")
    for q in ("window kept", "window not kept"):
        print(f"{q}: {med[q] / med['full']:.1%} of the full scan")
    shutil.rmtree(summaries, ignore_errors=True)
    spark.stop()


if __name__ == "__main__":
    main()
