"""Time to the first answer: where a new process's first kafkalog query spends its time, next
to a Parquet first query of the same rows in the same run (``bench_spark.py --first-query``).

Each side runs in fresh processes (a new interpreter, a new JVM, new Python workers, numba's
in-memory state empty; its on-disk caches as a user's second run finds them), alternating,
``--rounds`` times; the median of each phase is printed. The phases, from the moment the
process is spawned:

- ``driver imports``: interpreter start, ``import pyspark`` (and ``kafkalog.spark``);
- ``SparkSession``: ``getOrCreate()``, the JVM's start;
- ``load()``: for kafkalog a Python worker asked for the schema (its start and imports until
  ``schema()`` is called, then ``schema()`` itself); for Parquet the footer read;
- ``first action``: planning (a Python worker's start and imports until ``reader()``, then
  ``reader()`` and ``partitions()``), then the tasks (a worker's start and imports until the
  first ``read()``, the first batch out of ``read()`` -- numba's kernels loaded there -- and the
  rest of the read), then Spark's own work to the answer;
- ``second action``: the same query again in the same session (warm workers).

kafkalog's phases are marked from inside its workers by a subclass of the source that appends
``name wall-clock-time`` lines to the file named by ``KAFKALOG_BENCH_MARKS`` (workers inherit
the driver's environment); wall clocks of one machine are comparable across processes.

Beside them: each module a Python worker imports, timed alone in a fresh interpreter.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import first_runs

QUERY = ("count(*) as n", "sum(length(value)) as bytes", "max(timestamp) as latest")
MARKS = "KAFKALOG_BENCH_MARKS"
#: the planner's own marks (kafkalog.spark.jvm_bridge.TRACE_ENV; the bench hook's where absent)
PLANNER_TRACE = "KAFKALOG_PLANNER_TRACE"


def _mark(name: str) -> None:
    with open(os.environ[MARKS], "a") as out:
        out.write(f"{name} {time.time()!r}\n")


def _spy_source() -> Any:
    """The registered source with marks around the calls Spark makes into Python."""
    from kafkalog.spark.source import KafkaLogPushdownSource, PushdownReader

    class MarkedReader(PushdownReader):
        def partitions(self) -> Any:
            try:
                return super().partitions()
            finally:
                _mark("partitions_end")

        def read(self, partition: Any) -> Iterator[Any]:
            _mark("read_start")
            first = True
            for batch in super().read(partition):
                if first:
                    _mark("first_batch")
                    first = False
                yield batch
            _mark("read_end")

    class MarkedSource(KafkaLogPushdownSource):
        def schema(self) -> str:
            _mark("schema_start")
            try:
                return super().schema()
            finally:
                _mark("schema_end")

        def reader(self, schema: Any) -> Any:
            _mark("reader_start")
            inner = super().reader(schema)
            return MarkedReader(inner.opts, inner.columns)

    return MarkedSource


def child(
    side: str, data: str, parquet: str, spawned: float, confs: dict[str, str]
) -> dict[str, float]:
    """One fresh process's first and second query; phases in seconds since ``spawned``.

    ``side`` is ``kafkalog`` (the Python source, marked from its workers), ``jvm`` (what
    ``kafkalog.spark.register`` puts in front of ``format("kafkalog")`` with a jar: the JVM
    source, its planner process marked by ``bench/first_hook``) or ``parquet``."""
    t: dict[str, float] = {"spawned": spawned}

    if side == "kafkalog":
        importlib.import_module("kafkalog.spark.source")  # what a user's register() imports
    if side == "jvm":
        importlib.import_module("kafkalog.spark")  # what a user imports to call register()
    t["imported"] = time.time()
    events = tempfile.mkdtemp(prefix="kafkalog-first-events-")
    spark = first_runs.session(events, confs)
    t["session"] = time.time()

    def frame() -> Any:
        if side == "parquet":
            return spark.read.parquet(parquet)
        return (
            spark.read.format("kafkalog").option("path", data).option("subscribe", "clicks").load()
        )

    if side == "kafkalog":
        from kafkalog.spark.source import PUSHDOWN_CONF

        spark.conf.set(PUSHDOWN_CONF, "true")
        spark.dataSource.register(_spy_source())
    if side == "jvm":
        _register_marked(spark)
    t["registered"] = time.time()
    df = frame()
    t["loaded"] = time.time()
    first = df.selectExpr(*QUERY).collect()[0]
    t["answered"] = time.time()
    second = frame().selectExpr(*QUERY).collect()[0]
    t["answered_again"] = time.time()
    assert tuple(first) == tuple(second)
    warmup = first_runs.warmup_seconds(spark)
    spark.stop()
    t.update(_spark_events(events, t["loaded"], t["answered"]))
    shutil.rmtree(events, ignore_errors=True)
    seen: dict[str, list[float]] = {}
    if os.path.exists(os.environ[MARKS]):
        with open(os.environ[MARKS]) as marks:
            for line in marks:
                name, at = line.split()
                seen.setdefault(name, []).append(float(at))
    # the first query's marks: before its answer; its tasks' reads end with the last one
    for name, times in seen.items():
        early = [at for at in times if at <= t["answered"]]
        if early:
            t[name] = max(early) if name == "read_end" else min(early)
    started = seen.get("pyworker", [])
    workers = {
        "pyworkers_register": float(len([a for a in started if a <= t["registered"]])),
        "pyworkers": float(len([a for a in started if t["registered"] < a <= t["answered"]])),
    }
    out = {k: v - spawned for k, v in t.items()}
    out.update(workers)
    out["warmup"] = warmup
    return out


def _register_marked(spark: Any) -> None:
    """``kafkalog.spark.register(spark)``, with the jar's look-up (or build) marked."""
    import kafkalog.spark
    from kafkalog.spark import jvm_path

    found = jvm_path.find_jar

    def find_jar(*args: Any, **kwargs: Any) -> Any:
        _mark("jar_start")
        try:
            return found(*args, **kwargs)
        finally:
            _mark("jar_end")

    jvm_path.find_jar = find_jar  # type: ignore[assignment]
    try:
        kafkalog.spark.register(spark)
    finally:
        jvm_path.find_jar = found  # type: ignore[assignment]
    from kafkalog.spark.source import path_in_use

    assert path_in_use(spark) == "jvm", "no JVM path here (no JDK or jar?)"


def _spark_events(directory: str, start: float, end: float) -> dict[str, float]:
    """From Spark's event log: the first action's first task launch, last task end and last
    job end (events between ``start`` and ``end``)."""
    tasks, jobs = first_runs.spark_events(directory)
    out: dict[str, float] = {}
    inside = [(a, b) for a, b in tasks if start <= a <= end]
    if inside:
        out["first_task"] = min(a for a, _ in inside)
        out["last_task_end"] = max(b for _, b in inside)
    done = [at for at in jobs if start <= at <= end]
    if done:
        out["job_end"] = max(done)
    return out


def _run_child(side: first_runs.Side, data: str, parquet: str) -> dict[str, float]:
    """One fresh process of ``side``; with its ``src``, kafkalog imported from that tree (its
    workers and the JVM source's planner inherit the environment, so they import it too)."""
    _, kind, src, confs = side
    with tempfile.NamedTemporaryFile("w", suffix=".marks", delete=False) as marks:
        path = marks.name
    spawned = time.time()
    args = [kind, data, parquet, repr(spawned), json.dumps(confs)]
    result: dict[str, float] = first_runs.run_child(
        __file__, args, src, {MARKS: path, PLANNER_TRACE: path}
    )
    os.unlink(path)
    return result


def import_times(modules: list[str]) -> dict[str, float]:
    """Each module imported alone by a fresh interpreter (the median of three), beyond the
    interpreter's own start."""
    out = {}
    for module in modules:
        runs = []
        for _ in range(3):
            code = f"import time; t = time.perf_counter(); import {module}; "
            code += "print(time.perf_counter() - t)"
            done = subprocess.run(
                [sys.executable, "-c", code], check=True, capture_output=True, text=True
            )
            runs.append(float(done.stdout))
        out[module] = statistics.median(runs)
    return out


_PLANNER = """
import json, resource, sys
from pyspark.sql.types import LongType, StructField, StructType
from kafkalog.spark.source import KafkaLogPushdownSource
source = KafkaLogPushdownSource({"path": sys.argv[1], "subscribe": "clicks"})
source.schema()
tasks = len(source.reader(StructType([StructField("offset", LongType())])).partitions())
use = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps([use.ru_utime + use.ru_stime, "numba" in sys.modules, tasks]))
"""


def worker_cpu(data: str) -> None:
    """CPU seconds (user + system, median of three fresh interpreters: what a loaded machine
    does not inflate) of a worker's imports, and of a whole planner process: ``schema()``,
    ``reader()``, ``partitions()`` over the sample."""

    def cpu(args: list[str]) -> list[Any]:
        code = "import resource, sys; " + args[0]
        code += "; u = resource.getrusage(resource.RUSAGE_SELF)"
        code += "; print(u.ru_utime + u.ru_stime)"
        done = subprocess.run(
            [sys.executable, "-c", code, *args[1:]], check=True, capture_output=True, text=True
        )
        return [float(done.stdout.split()[-1])]

    print("CPU seconds in a fresh interpreter (median of 3):")
    for what in [
        "pass",
        "import kafkalog.spark.source",
        "import kafkalog.spark.plan",
        "import kafkalog.spark.task",
    ]:
        print(f"  {what:<52}{statistics.median(cpu([what])[0] for _ in range(3)):>6.2f}s")
    runs = []
    for _ in range(3):
        done = subprocess.run(
            [sys.executable, "-c", _PLANNER, data], check=True, capture_output=True, text=True
        )
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    runs.sort()
    seconds, numba, tasks = runs[1]
    print(
        f"  {'planner: import, schema(), reader(), partitions()':<52}{seconds:>6.2f}s"
        f"  ({tasks} tasks; numba {'imported' if numba else 'not imported'})"
    )


def first_numba_call() -> tuple[float, float]:
    """A fresh process: numba's import plus the first decode kernel call (its compiled code
    loaded from the on-disk cache), and the same call again."""
    code = """
import time
from kafkalog.records import Record, encode_batch
from kafkalog.records.columnar import decode_arrow
data = encode_batch([Record.of(b"v", b"k", 0)], base_offset=0)
t = time.perf_counter(); decode_arrow(data); a = time.perf_counter() - t
t = time.perf_counter(); decode_arrow(data); b = time.perf_counter() - t
print(a, b)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if done.returncode != 0:
        return float("nan"), float("nan")
    a, b = done.stdout.split()
    return float(a), float(b)


def _get(r: dict[str, float], later: str, earlier: str) -> float | None:
    if later in r and earlier in r:
        return r[later] - r[earlier]
    return None


#: (phase, its end mark, its start mark, the sides it applies to: j(vm), p(ython), q (Parquet))
PHASES: list[tuple[str, str, str, str]] = [
    ("driver imports (interpreter + pyspark [+ kafkalog])", "imported", "spawned", "jpq"),
    ("SparkSession (JVM start)", "session", "imported", "jpq"),
    ("register()", "registered", "session", "jp"),
    ("  jar found (or built): find_jar", "jar_end", "jar_start", "j"),
    ("  ADD JAR and confs, after the jar", "registered", "jar_end", "j"),
    ("load()", "loaded", "registered", "jpq"),
    ("  planner process: spawned (from register())", "planner_spawned", "registered", "j"),
    ("  planner: spawn to interpreter up", "planner_python_up", "planner_spawned", "j"),
    ("  planner: its imports, up to serving", "planner_serving", "planner_python_up", "j"),
    ("  planner: up to its imports warm (after only)", "planner_warm", "planner_python_up", "j"),
    ("  planner: schema request in, from load()", "req:schema", "registered", "j"),
    ("  planner: schema answered", "ans:schema", "req:schema", "j"),
    ("  worker start + imports to schema()", "schema_start", "registered", "p"),
    ("  schema() (options parsed)", "schema_end", "schema_start", "p"),
    ("first action", "answered", "loaded", "jpq"),
    ("  Spark's analysis to the plan request", "req:plan", "loaded", "j"),
    ("  planner: plan answered", "ans:plan", "req:plan", "j"),
    ("  plan answered to the first task", "first_task", "ans:plan", "j"),
    ("  planner worker start + imports to reader()", "reader_start", "loaded", "p"),
    ("  reader() + partitions() (planning)", "partitions_end", "reader_start", "p"),
    ("  task worker start + imports to read()", "read_start", "partitions_end", "p"),
    ("  read() to its first batch (numba loads)", "first_batch", "read_start", "p"),
    ("  rest of the tasks' read", "read_end", "first_batch", "p"),
    ("  Spark's planning to the first task", "first_task", "loaded", "q"),
    ("  tasks: first launch to last end", "last_task_end", "first_task", "jpq"),
    ("  last task end to the answer", "answered", "last_task_end", "jpq"),
    ("load() + first action (the query)", "answered", "registered", "jpq"),
    ("register() + load() + first action", "answered", "session", "jpq"),
    ("spawn to first answer", "answered", "spawned", "jpq"),
    ("second action (warm)", "answered_again", "answered", "jpq"),
]


def _kind(side: str) -> str:
    return {"jvm": "j", "kafkalog": "p", "parquet": "q"}[side]


def _table(labels: list[tuple[str, str]], med: dict[str, dict[str, float]]) -> list[str]:
    """One row per phase, one column per (label, side); blank where a phase is not a side's."""
    lines = [f"{'phase':<56}" + "".join(f"{label:>16}" for label, _ in labels)]
    for name, end, start, kinds in PHASES:
        cells = []
        for label, side in labels:
            value = _get(med[label], end, start) if _kind(side) in kinds else None
            cells.append(f"{value:>15.2f}s" if value is not None else f"{'':>16}")
        lines.append(f"{name:<56}" + "".join(cells))
    for key, name in (
        ("pyworkers_register", "Python worker processes started by register()"),
        ("pyworkers", "Python worker processes started by load() + 1st action"),
    ):
        lines.append(
            f"{name:<56}" + "".join(f"{med[label].get(key, 0):>16.0f}" for label, _ in labels)
        )
    name = "JVM warm-up, inside register() (0: off)"
    lines.append(
        f"{name:<56}" + "".join(f"{med[label].get('warmup', 0):>15.2f}s" for label, _ in labels)
    )
    return lines


def _summary(
    labels: list[tuple[str, str]],
    runs: dict[str, list[dict[str, float]]],
    med: dict[str, dict[str, float]],
) -> list[str]:
    parquet = med["Parquet"]["answered"] - med["Parquet"]["registered"]
    lines = []
    for label, side in labels:
        if side == "parquet":
            continue
        query = med[label]["answered"] - med[label]["registered"]
        full = med[label]["answered"] - med[label]["session"]
        lines.append(
            f"{label}: load() + first action {query:.2f}s, with register() {full:.2f}s, against "
            f"Parquet's {parquet:.2f}s ({full / parquet:.2f}x, {full - parquet:+.2f}s; "
            f"target <= +1 s)"
        )
    lines.append(
        "every round (register() + load() + first action, s): "
        + "; ".join(
            f"{label} " + " ".join(f"{r['answered'] - r['session']:.1f}" for r in runs[label])
            for label, _ in labels
        )
    )
    return lines


def _report(sides: list[first_runs.Side], data: str, parquet: str, rounds: int) -> None:
    """The sides interleaved round by round; the table of medians and the summary."""
    load = first_runs.load_average()
    runs = first_runs.interleave(sides, lambda side: _run_child(side, data, parquet), rounds)
    med = first_runs.medians(runs)
    labels = [(label, kind) for label, kind, _, _ in sides]
    print(
        f"first query in a new process (count/sum/max over clicks), interleaved, median of "
        f"{rounds} (local[2]); load average (1 min) {load} at the start, "
        f"{first_runs.load_average()} at the end"
    )
    print("\n".join(_table(labels, med) + _summary(labels, runs, med)))


#: the JVM source with its warm-up (the decoder's first task at register(), off by default)
WARMUP = {"spark.kafkalog.jvm.warmup": "true"}


def run(data: str, parquet: str, rounds: int, before: str | None = None) -> None:
    """The JVM path (without and with its warm-up), the Python source and Parquet, interleaved
    round by round; with ``before``, the JVM path from that source tree beside them (this
    tree's is ``PYTHONPATH`` as given), else the workers' import times after."""
    sides: list[first_runs.Side] = [
        ("JVM", "jvm", None, {}),
        ("JVM warm-up", "jvm", None, WARMUP),
        ("Python", "kafkalog", None, {}),
        ("Parquet", "parquet", None, {}),
    ]
    if before:
        sides.insert(0, ("JVM before", "jvm", before, {}))
    _report(sides, data, parquet, rounds)
    if before:
        return
    print("a Python worker's imports, each alone in a fresh interpreter:")
    for module, seconds in import_times(
        [
            "pyspark.sql.datasource",
            "kafkalog.spark",
            "kafkalog.spark.jvm_bridge",
            "kafkalog.spark.source",
            "kafkalog.spark.plan",
            "kafkalog.spark.task",
            "numba",
        ]
    ).items():
        print(f"  import {module:<46}{seconds:>9.2f}s")
    worker_cpu(data)
    cold, warm = first_numba_call()
    print(
        f"  first decode kernel call in a fresh process (numba + cached code): {cold:.2f}s, "
        f"then {warm * 1e6:.0f} us"
    )


if __name__ == "__main__":
    if (
        sys.argv[1] == "--worker-cpu"
    ):  # that part alone: python bench/first_query.py --worker-cpu DATA
        worker_cpu(sys.argv[2])
    elif sys.argv[1] == "--child":
        side, data, parquet, spawned, confs = sys.argv[2:7]
        print(json.dumps(child(side, data, parquet, float(spawned), json.loads(confs))))
