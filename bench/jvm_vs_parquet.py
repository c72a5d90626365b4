"""The JVM source against Parquet and the Python source, same rows, same run, local[2]
(issue 31's targets), called by ``python bench/bench_spark.py --jvm [--records N]``.

Each query runs over kafkalog's JVM source (``format("kafkalog")`` after ``register``), the
Python source (``format("kafkalog_python")``) and the same rows in Parquet, interleaved
(round after round, every source in turn), and the median of the rounds is kept; a ratio is
Parquet's time over ours (= our rows/s over Parquet's; > 1 is faster than Parquet). The 1%
window is a ``where timestamp between`` (pushed down) as a fraction of the full scan's time.
``count(*)`` is answered by the driver in local mode (pushed down, no scan task); ``count(*) in
tasks`` is the same count made by Spark tasks, as on a cluster; ``checkCrcs=false`` the count
from batch headers alone (opt-in, no CRC).

The JVM source keeps verified batch summaries (what a CRC-checked read learned of each batch)
in a directory of its own for this run: the plain rows are warm (every batch verified by an
earlier query), the ``cold`` rows run each time with an empty directory, as a first query does.
The plain rows also reuse the planner's answers and a count kept while the log's files stay as
they were (a repeated query over a log nobody writes); the ``not kept`` rows ask and count again
(every partition planned; warm summaries of settled segments give their headers unread, as to a
new process; ``bench_live_count.py`` times a log being written to).

``Spark's floor`` is a query of the same shape that Spark answers with no source at all,
``spark.sql("select 1L as n").collect()``: analysed, optimised, one one-task job (a projection
over one row), the row back through py4j -- what a count answered on the driver costs in Spark
besides the source (a pushed-down count is a projection over a ``LocalScan``'s rows, which
Spark runs as a one-task job as well). Its rows say what is Spark's: Parquet's count over the
floor is the most any source's count can reach in this run, and the floor over the full scan the
least share a window can take.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

#: the issue's targets: ratio (our rows/s over Parquet's) each query must reach
TARGETS = {
    "sum(length(value))": 1.5,
    "count(*)": 3.0,
    "count(*) in tasks": 3.0,
    "count(*) checkCrcs=false": 3.0,
    "groupBy(partition).count()": 2.0,
    "groupBy(partition) checkCrcs=false": 2.0,
    "columns=value sum": 1.5,
    "count(*) not kept": 3.0,
    "count(*) cold": 3.0,
    "groupBy(partition) cold": 2.0,
}


def run(spark: Any, data: str, parquet_path: str, rounds: int, python_too: bool) -> str:
    from kafkalog.cli.job import DAY_START

    def kafkalog(fmt: str, **options: str) -> Any:
        reader = spark.read.format(fmt).option("path", data).option("subscribe", "clicks")
        return reader.options(**options).load()

    window_lo = DAY_START + 12 * 3600 * 1000
    window_hi = window_lo + 24 * 3600 * 1000 // 100  # 1% of the simulated day
    between = (
        f"timestamp between timestamp_millis({window_lo}) and timestamp_millis({window_hi - 1})"
    )

    summaries = tempfile.mkdtemp(prefix="kafkalog-bench-summaries-")
    spark.conf.set("spark.kafkalog.batchSummaries.dir", os.path.join(summaries, "warm"))
    fresh = [0]

    def cold(query: Callable[[], Any]) -> Callable[[], Any]:
        """``query`` with no batch summary yet (a new, empty directory), as a first query."""

        def run() -> Any:
            fresh[0] += 1
            where = os.path.join(summaries, f"cold-{fresh[0]}")
            spark.conf.set("spark.kafkalog.batchSummaries.dir", where)
            try:
                return query()
            finally:
                spark.conf.set("spark.kafkalog.batchSummaries.dir", os.path.join(summaries, "warm"))

        return run

    def queries(frame: Callable[..., Any]) -> dict[str, Callable[[], Any]]:
        return {
            "sum(length(value))": lambda: frame().selectExpr("sum(length(value))").collect(),
            "count(*)": lambda: frame().count(),
            "count(*) in tasks": conf_off(spark, IN_TASKS, lambda: frame().count()),
            "count(*) checkCrcs=false": lambda: frame(checkCrcs="false").count(),
            "groupBy(partition).count()": lambda: sorted(
                tuple(r) for r in frame().groupBy("partition").count().collect()
            ),
            "groupBy(partition) checkCrcs=false": lambda: sorted(
                tuple(r) for r in frame(checkCrcs="false").groupBy("partition").count().collect()
            ),
            "columns=value sum": lambda: (
                frame(columns="value").selectExpr("sum(length(value))").collect()
            ),
            "1% window": lambda: frame().where(between).selectExpr("count(*)").collect(),
            "count(*) not kept": conf_off(spark, NOT_KEPT, lambda: frame().count()),
            "1% window not kept": conf_off(
                spark, NOT_KEPT, lambda: frame().where(between).selectExpr("count(*)").collect()
            ),
            "count(*) cold": cold(lambda: frame().count()),
            "groupBy(partition) cold": cold(
                lambda: sorted(tuple(r) for r in frame().groupBy("partition").count().collect())
            ),
            "1% window cold": cold(lambda: frame().where(between).selectExpr("count(*)").collect()),
        }

    def parquet(columns: str | None = None, **kafkalog_only: str) -> Any:
        df = spark.read.parquet(parquet_path)
        return df.select(*columns.split(",")) if columns else df

    sources: dict[str, dict[str, Callable[[], Any]]] = {
        "jvm": queries(lambda **o: kafkalog("kafkalog", **o)),
        "parquet": queries(parquet),
    }
    if python_too:
        sources["python"] = queries(lambda **o: kafkalog("kafkalog_python", **o))
    names = list(sources["jvm"])

    def floor() -> Any:
        return spark.sql("select 1L as n").collect()

    # the same answers first (and every source warmed up)
    for q in names:
        answers = {s: sources[s][q]() for s in sources}
        assert len({repr(a) for a in answers.values()}) == 1, (q, answers)
    times: dict[tuple[str, str], list[float]] = {}
    load_before = os.getloadavg()[0]  # the machine may be shared: said beside the figures
    floor()
    for _ in range(rounds):
        for q in names:
            for s in sources:
                t = time.perf_counter()
                sources[s][q]()
                times.setdefault((s, q), []).append(time.perf_counter() - t)
            t = time.perf_counter()
            floor()  # beside every query, so that the floor sees the machine the rows saw
            times.setdefault(("floor", ""), []).append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    spark.conf.unset("spark.kafkalog.batchSummaries.dir")
    shutil.rmtree(summaries, ignore_errors=True)
    rows = kafkalog("kafkalog").count()
    lines = [
        f"{rows:,} records, {rounds} interleaved rounds, medians (s); ratio = Parquet's time "
        "over ours (our rows/s over Parquet's); load average (1 min) "
        f"{load_before:.1f} before the rounds, {os.getloadavg()[0]:.1f} after",
        f"{'query':<36}{'JVM':>8}{'Python':>9}{'Parquet':>9}{'JVM/Pq':>8}{'Py/Pq':>7}  target",
    ]
    for q in names:
        jvm, pq = med[("jvm", q)], med[("parquet", q)]
        py = med.get(("python", q))
        target = TARGETS.get(q)
        lines.append(
            f"{q:<36}{jvm:>8.2f}{py if py is not None else float('nan'):>9.2f}{pq:>9.2f}"
            f"{pq / jvm:>7.2f}x{(pq / py if py else float('nan')):>6.2f}x  "
            + (f">= {target}x: {'met' if pq / jvm >= target else 'NOT met'}" if target else "")
        )
    spark_floor, pq_count = med[("floor", "")], med[("parquet", "count(*)")]
    lines.append(
        f"{'Spark floor: select 1L (no source)':<36}{spark_floor:>8.3f}{'':>9}{pq_count:>9.2f}"
        f"{pq_count / spark_floor:>7.2f}x{'':>7}  (Parquet's count over Spark's floor: the most "
        "any source's count can reach here)"
    )
    full = med[("jvm", "sum(length(value))")]
    lines.append(
        f"Spark's floor: {spark_floor / full:.1%} of the JVM full scan's time (no window can take "
        f"less); count(*) kept: {med[('jvm', 'count(*)')] / spark_floor:.2f}x the floor"
    )
    for label in ("1% window", "1% window not kept", "1% window cold"):
        share = med[("jvm", label)] / full
        lines.append(
            f"{label} on the JVM path: {share:.1%} of its full scan's time "
            f"(target <= 3%: {'met' if share <= 0.03 else 'NOT met'})"
        )
    return "\n".join(lines)


#: the JVM source's switches the bench turns off for a row (the other sources ignore them):
#: counts made by Spark tasks, as on a cluster, not by the driver (local mode's default)
IN_TASKS = "spark.kafkalog.jvm.driverCounts"
#: the planner asked and the count made every time, no answer kept from an earlier query over
#: the same unchanged files (as in a new process, or over a log being written to)
NOT_KEPT = "spark.kafkalog.jvm.planCache"


def conf_off(spark: Any, conf: str, query: Callable[[], Any]) -> Callable[[], Any]:
    """``query`` run with the session conf ``conf`` set to false, then unset."""

    def run() -> Any:
        spark.conf.set(conf, "false")
        try:
            return query()
        finally:
            spark.conf.unset(conf)

    return run
