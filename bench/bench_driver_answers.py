"""Warm counts and windows answered on the driver, this tree against another (issue 31).

    python bench/bench_driver_answers.py --data /tmp/bench24 [--before /work/main/src] [--rounds 5]

Each round starts one process per tree (kafkalog imported from that ``src``, so each runs the
jar of its own Java sources), alternating which goes first; a process warms up (every batch
verified once, in a summaries directory shared by both) and then times, ``--repeat`` times each,
interleaved: ``count(*)``, a 1% ``where timestamp between`` window's count, both again "not
kept" (``spark.kafkalog.jvm.planCache=false``: planned and counted every time), the full scan
(``sum(length(value))``: the window's share is of it), a query reading nothing (``where offset
< 0``), Spark's own floors (a count over a literal one-row table: two small jobs, no scan; and
``select 1L``: one one-task job, the shape of a count answered on the driver), and
Parquet's ``count(*)`` and window over the same rows (``<data>.parquet``, as ``bench_spark.py``
writes it). Medians per tree over all its rounds; ratios are Parquet's time over ours from the
same processes, so a loaded machine moves both sides.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

QUERIES = (
    "count",
    "count not kept",
    "window",
    "window not kept",
    "full",
    "nothing",
    "spark floor",
    "select 1L",
    "parquet count",
    "parquet window",
)


def child(data: str, repeat: int, summaries: str) -> None:
    from pyspark.sql import SparkSession

    import kafkalog.spark
    from kafkalog.cli.job import DAY_START

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    kafkalog.spark.register(spark)
    spark.conf.set("spark.kafkalog.batchSummaries.dir", summaries)
    lo = DAY_START + 12 * 3600 * 1000
    hi = lo + 24 * 3600 * 1000 // 100
    between = f"timestamp between timestamp_millis({lo}) and timestamp_millis({hi - 1})"

    def load() -> Any:
        reader = spark.read.format("kafkalog").option("path", data)
        return reader.option("subscribe", "clicks").load()

    def parquet() -> Any:
        return spark.read.parquet(data.rstrip("/") + ".parquet")

    def not_kept(query: Callable[[], Any]) -> Callable[[], Any]:
        from jvm_vs_parquet import NOT_KEPT, conf_off  # the bench's own rows, the same switch

        return conf_off(spark, NOT_KEPT, query)

    def window() -> Any:
        return load().where(between).selectExpr("count(*)").collect()[0][0]

    queries = {
        "count": lambda: load().count(),
        "count not kept": not_kept(lambda: load().count()),
        "window": window,
        "window not kept": not_kept(window),
        "full": lambda: load().selectExpr("sum(length(value))").collect()[0][0],
        "nothing": lambda: load().where("offset < 0").selectExpr("count(*)").collect()[0][0],
        "spark floor": lambda: spark.sql("select count(*) from values (1) as t(a)").collect(),
        "select 1L": lambda: spark.sql("select 1L as n").collect(),
        "parquet count": lambda: parquet().count(),
        "parquet window": lambda: parquet().where(between).selectExpr("count(*)").collect()[0][0],
    }
    answers = {q: f() for q, f in queries.items()}  # warm: every batch verified, JIT warm
    for q in ("count", "window"):
        assert answers[q] == answers["parquet " + q], (q, answers)
    assert answers["nothing"] == 0
    times: dict[str, list[float]] = {q: [] for q in queries}
    for _ in range(repeat):
        for q, f in queries.items():
            t = time.perf_counter()
            f()
            times[q].append(time.perf_counter() - t)
    print("RESULT " + json.dumps(times), flush=True)
    spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--before", help="another kafkalog src tree, run in the same rounds")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=7, help="timed runs per query per process")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--summaries", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.data, args.repeat, args.summaries)
        return
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    trees = {"this": here}
    if args.before:
        trees["before"] = os.path.abspath(args.before)
    summaries = tempfile.mkdtemp(prefix="kafkalog-bench-driver-")
    times: dict[str, dict[str, list[float]]] = {t: {q: [] for q in QUERIES} for t in trees}
    load = [os.getloadavg()[0]]
    for r in range(args.rounds):
        order = list(trees) if r % 2 == 0 else list(reversed(trees))
        for tree in order:
            env = {**os.environ, "PYTHONPATH": trees[tree], "PYSPARK_PYTHON": sys.executable}
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--child",
                    "--data",
                    args.data,
                    "--repeat",
                    str(args.repeat),
                    "--summaries",
                    summaries,
                ],
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            line = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
            if out.returncode or not line:
                sys.exit(f"{tree} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
            for q, v in json.loads(line[0][len("RESULT ") :]).items():
                times[tree][q].extend(v)
        load.append(os.getloadavg()[0])
    print(
        f"{args.rounds} rounds x {args.repeat} runs per tree, medians (ms); load average "
        + " -> ".join(f"{x:.1f}" for x in load)
    )
    print(f"{'query':<16}" + "".join(f"{t:>12}" for t in trees))
    med = {t: {q: statistics.median(v) for q, v in times[t].items()} for t in trees}
    for q in QUERIES:
        print(f"{q:<16}" + "".join(f"{med[t][q] * 1000:>12.1f}" for t in trees))
    for t in trees:
        m = med[t]
        print(
            f"{t}: count(*) {m['parquet count'] / m['count']:.2f}x Parquet's (target >= 3x); "
            f"window {m['window'] / m['full']:.1%} of the full scan (target <= 3%), "
            f"{m['parquet window'] / m['window']:.2f}x Parquet's window; a query reading "
            f"nothing {m['nothing'] / m['full']:.1%}, "
            f"Spark's floor {m['spark floor'] / m['full']:.1%}, select 1L "
            f"{m['select 1L'] / m['full']:.1%}"
        )
        print(
            f"{t}: count not kept {m['parquet count'] / m['count not kept']:.2f}x Parquet's; "
            f"window not kept {m['window not kept'] / m['full']:.1%} of the full scan; "
            f"Parquet's count over select 1L {m['parquet count'] / m['select 1L']:.2f}x (the most "
            "a driver-answered count can reach here)"
        )


if __name__ == "__main__":
    main()
