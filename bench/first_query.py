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

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

QUERY = ("count(*) as n", "sum(length(value)) as bytes", "max(timestamp) as latest")
MARKS = "KAFKALOG_BENCH_MARKS"


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


def child(side: str, data: str, parquet: str, spawned: float) -> dict[str, float]:
    """One fresh process's first and second query; phases in seconds since ``spawned``."""
    t: dict[str, float] = {"spawned": spawned}
    from pyspark.sql import SparkSession

    if side == "kafkalog":
        import kafkalog.spark.source  # noqa: F401  (what a user's register() imports)
    t["imported"] = time.time()
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
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
    t["registered"] = time.time()
    df = frame()
    t["loaded"] = time.time()
    first = df.selectExpr(*QUERY).collect()[0]
    t["answered"] = time.time()
    second = frame().selectExpr(*QUERY).collect()[0]
    t["answered_again"] = time.time()
    assert tuple(first) == tuple(second)
    spark.stop()
    if side == "kafkalog":
        seen: dict[str, list[float]] = {}
        with open(os.environ[MARKS]) as marks:
            for line in marks:
                name, at = line.split()
                seen.setdefault(name, []).append(float(at))
        # the first query's marks: before its answer; its tasks' reads end with the last one
        for name, times in seen.items():
            early = [at for at in times if at <= t["answered"]]
            t[name] = max(early) if name == "read_end" else min(early)
    return {k: v - spawned for k, v in t.items()}


def _run_child(side: str, data: str, parquet: str, src: str | None = None) -> dict[str, float]:
    """One fresh process of ``side``; with ``src``, kafkalog imported from that tree (its
    workers inherit the environment, so they import it too)."""
    with tempfile.NamedTemporaryFile("w", suffix=".marks", delete=False) as marks:
        path = marks.name
    env = {**os.environ, MARKS: path, "PYSPARK_PYTHON": sys.executable}
    if src is not None:
        env["PYTHONPATH"] = src
    spawned = time.time()
    out = subprocess.run(
        [sys.executable, __file__, "--child", side, data, parquet, repr(spawned)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    os.unlink(path)
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
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


def phases(k: dict[str, float], p: dict[str, float]) -> list[tuple[str, float | None, float]]:
    """(phase, kafkalog seconds, Parquet seconds); sub-phases of kafkalog have no peer (-1)."""
    rows: list[tuple[str, float | None, float]] = [
        ("driver imports (interpreter + pyspark [+ kafkalog])", k["imported"], p["imported"]),
        ("SparkSession (JVM start)", k["session"] - k["imported"], p["session"] - p["imported"]),
        ("load()", k["loaded"] - k["registered"], p["loaded"] - p["registered"]),
        ("  worker start + imports to schema()", k["schema_start"] - k["registered"], -1),
        ("  schema() (options parsed)", k["schema_end"] - k["schema_start"], -1),
        ("first action", k["answered"] - k["loaded"], p["answered"] - p["loaded"]),
        ("  planner worker start + imports to reader()", k["reader_start"] - k["loaded"], -1),
        ("  reader() + partitions() (planning)", k["partitions_end"] - k["reader_start"], -1),
        ("  task worker start + imports to read()", k["read_start"] - k["partitions_end"], -1),
        ("  read() to its first batch (numba loads)", k["first_batch"] - k["read_start"], -1),
        ("  rest of the tasks' read", k["read_end"] - k["first_batch"], -1),
        ("  Spark to the answer", k["answered"] - k["read_end"], -1),
        ("spawn to first answer", k["answered"], p["answered"]),
        (
            "second action (warm)",
            k["answered_again"] - k["answered"],
            p["answered_again"] - p["answered"],
        ),
    ]
    return rows


def compare(data: str, parquet: str, rounds: int, before: str) -> None:
    """kafkalog from the ``before`` source tree, from this one (``PYTHONPATH`` as given) and
    Parquet, interleaved round by round (a loaded machine's load drifts: each round sees the
    three under about the same load); medians of ``rounds`` after one discarded run of each."""
    after = os.environ.get("PYTHONPATH", "")
    sides = [
        ("before", "kafkalog", before),
        ("after", "kafkalog", after),
        ("Parquet", "parquet", None),
    ]
    for _, side, src in sides:
        _run_child(side, data, parquet, src)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name, _, _ in sides}
    for _ in range(rounds):
        for name, side, src in sides:
            runs[name].append(_run_child(side, data, parquet, src))
    med = {
        name: {key: statistics.median(r[key] for r in rs) for key in rs[0]}
        for name, rs in runs.items()
    }
    b, a, p = med["before"], med["after"], med["Parquet"]
    print(f"first query in a new process, before / after / Parquet interleaved, median of {rounds}")
    print(f"{'phase':<54}{'before':>9}{'after':>9}{'Parquet':>9}")
    for (name, old, peer), (_, new, _) in zip(phases(b, p), phases(a, p), strict=True):
        assert old is not None and new is not None
        tail = f"{peer:>8.2f}s" if peer >= 0 else ""
        print(f"{name:<54}{old:>8.2f}s{new:>8.2f}s{tail}")
    for name, k in (("before", b), ("after", a)):
        query, peer = k["answered"] - k["registered"], p["answered"] - p["registered"]
        print(
            f"load() + first action, {name}: {query:.2f}s against Parquet's {peer:.2f}s "
            f"({query / peer:.2f}x, {query - peer:+.2f}s)"
        )
    print(
        "every round (load() + first action, s): "
        + "; ".join(
            f"{name} " + " ".join(f"{r['answered'] - r['registered']:.1f}" for r in rs)
            for name, rs in runs.items()
        )
    )


def run(data: str, parquet: str, rounds: int) -> None:
    # one discarded run of each first: numba's on-disk cache and the OS's file cache filled,
    # as a user's second session finds them
    _run_child("kafkalog", data, parquet)
    _run_child("parquet", data, parquet)
    ks, ps = [], []
    for _ in range(rounds):
        ks.append(_run_child("kafkalog", data, parquet))
        ps.append(_run_child("parquet", data, parquet))
    k = {name: statistics.median(r[name] for r in ks) for name in ks[0]}
    p = {name: statistics.median(r[name] for r in ps) for name in ps[0]}
    print(f"first query in a new process, median of {rounds} (local[2]): count/sum/max over clicks")
    print(f"{'phase':<54}{'kafkalog':>10}{'Parquet':>10}{'ratio':>8}")
    for name, ours, peer in phases(k, p):
        assert ours is not None
        if peer < 0:
            print(f"{name:<54}{ours:>9.2f}s")
        else:
            print(f"{name:<54}{ours:>9.2f}s{peer:>9.2f}s{ours / peer:>7.2f}x")
    query_k = k["answered"] - k["registered"]
    query_p = p["answered"] - p["registered"]
    print(
        f"{'load() + first action (the query, JVM warm)':<54}{query_k:>9.2f}s{query_p:>9.2f}s"
        f"{query_k / query_p:>7.2f}x"
    )
    print("a Python worker's imports, each alone in a fresh interpreter:")
    for module, seconds in import_times(
        [
            "pyspark.sql.datasource",
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
        side, data, parquet, spawned = sys.argv[2:6]
        print(json.dumps(child(side, data, parquet, float(spawned))))
