"""A stream's first micro-batch against its later ones, in a new process (issue 34 §4:
the first no slower than a later one plus 1 s), ``bench_spark.py --first-stream``.

Each side runs in a fresh process (a new interpreter, JVM and workers), alternating round after
round: ``jvm`` is what ``kafkalog.spark.register`` puts in front of ``format("kafkalog")`` with
a jar (the JVM source, planned by its Python planner process), ``python`` the Python source
(``KAFKALOG_JVM=0``); the JVM source's warm-up (the decoder's first task in the executor)
runs by default when the stream starts (``StreamWarmup.java``, ``spark.kafkalog.jvm.warmup``
unset: ``stream``), ``warm-up off``, ``warm-up background`` and ``warm-up inside``
(``register``) set it to ``false``, ``background`` and ``true``; ``first plan`` and ``first
plan early`` add the driver's first planning and compile on a thread of its own, started at the
end or the start of ``register`` (``spark.kafkalog.jvm.warmup.compile=true``, ``early``);
``class archive`` starts the driver's JVM with kafkalog's class archive
(``kafkalog.spark.class_archive.driver_options``: the first run dumps it, later ones map it),
``dumping a class archive`` is the first run's (every run dumps one at exit, to a file of its
own).
The stream reads the sample's ``clicks`` topic from the earliest offsets with
``maxOffsetsPerTrigger`` into
Spark's ``noop`` sink under ``Trigger.AvailableNow`` (every micro-batch the same size until the
end); each micro-batch's phases are Spark's own progress
events (``query.recentProgress``: ``durationMs``), its tasks' span from Spark's event log, and
``start()`` to the first micro-batch's start is timed around them.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

import first_runs

#: the progress event's ``durationMs`` parts printed, in the order Spark spends them
#: a side's conf saying: the driver JVM's class archive (``kafkalog.spark.class_archive``)
CLASS_ARCHIVE = "kafkalog.bench.class_archive"
PARTS = ["latestOffset", "queryPlanning", "getBatch", "addBatch", "walCommit", "commitOffsets"]


def child(side: str, data: str, per_trigger: int, confs: dict[str, str]) -> dict[str, Any]:
    """One fresh process: a stream over clicks, its micro-batches' durations (seconds)."""
    import kafkalog.spark

    t0 = time.time()
    if confs.pop(CLASS_ARCHIVE, None):
        from kafkalog.spark.class_archive import driver_options

        confs = driver_options(confs)
    archive = confs.get("spark.driver.extraJavaOptions", "")
    events = tempfile.mkdtemp(prefix="kafkalog-first-stream-events-")
    spark = first_runs.session(events, confs, **{"spark.sql.shuffle.partitions": "2"})
    session = time.time()
    kafkalog.spark.register(spark)
    from kafkalog.spark.source import path_in_use

    assert path_in_use(spark) == side, f"wanted the {side} path, got {path_in_use(spark)}"
    registered = time.time()
    checkpoint = tempfile.mkdtemp(prefix="kafkalog-first-stream-")
    stream = (
        spark.readStream.format("kafkalog")
        .option("path", data)
        .option("subscribe", "clicks")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(per_trigger))
        .load()
    )
    loaded = time.time()
    query = (
        stream.writeStream.format("noop")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    started = time.time()
    query.awaitTermination()
    ended = time.time()
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    first_plan = str(spark.conf.get("spark.kafkalog.jvm.warmup.compile.state", "off"))
    warmup = first_runs.warmup_seconds(spark)
    warmup_state = str(spark.conf.get("spark.kafkalog.jvm.warmup.state", "off"))
    if warmup_state == "off":
        warmup_state = _stream_warmup_state(spark)
        if warmup_state.startswith("done "):
            warmup = int(warmup_state.split()[1]) / 1000
    spark.stop()
    shutil.rmtree(checkpoint, ignore_errors=True)
    tasks, _ = first_runs.spark_events(events)
    shutil.rmtree(events, ignore_errors=True)
    batches = []
    for p in progress:
        at = _epoch(p["timestamp"])
        d = p["durationMs"]
        end = at + d.get("triggerExecution", 0) / 1000
        mine = [(a, b) for a, b in tasks if at <= a <= end]
        batches.append(
            {
                "start": at - started,
                "rows": p["numInputRows"],
                "total": d.get("triggerExecution", 0) / 1000,
                **{k: d.get(k, 0) / 1000 for k in PARTS},
                "tasks": len(mine),
                "task_span": max(b for _, b in mine) - min(a for a, _ in mine) if mine else 0.0,
            }
        )
    return {
        "session": session - t0,
        "register": registered - session,
        "load": loaded - registered,
        "start": started - loaded,
        "end": ended - started,
        "warmup": warmup,
        "warmup_state": warmup_state,
        "first_plan": float(first_plan.split()[1]) / 1000
        if first_plan.startswith("done ")
        else 0.0,
        "batches": batches,
        "archive": "used"
        if "SharedArchive" in archive
        else "dumped"
        if "AtExit" in archive
        else "-",
    }


def _stream_warmup_state(spark: Any) -> str:
    """What the JVM source's warm-up at the stream's start did (``StreamWarmup.java`` keeps it
    in a JVM system property; ``off`` where none ran: an older tree, or the warm-up off)."""
    key = "kafkalog.jvm.warmup.stream.state"
    row = spark.sql(f"SELECT java_method('java.lang.System', 'getProperty', '{key}')").first()
    return "off" if row is None or row[0] in (None, "null") else str(row[0])


def _epoch(stamp: str) -> float:
    """A progress event's ``timestamp`` (ISO 8601, UTC, ms) as seconds since the epoch."""
    import datetime as dt

    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _run_child(side: first_runs.Side, data: str, per_trigger: int) -> dict[str, Any]:
    _, kind, src, confs = side
    env = {"KAFKALOG_JVM": "0"} if kind == "python" else {}
    args = [kind, data, str(per_trigger), json.dumps(confs)]
    result: dict[str, Any] = first_runs.run_child(__file__, args, src, env)
    return result


def run(
    data: str,
    per_trigger: int,
    rounds: int,
    before: str | None = None,
    python: bool = True,
    only: list[str] | None = None,
) -> None:
    """Every side in turn, round after round, after one discarded run of each; medians. The
    JVM path five ways: as ``register`` leaves it (the jar added by ``ADD JAR``: the executor
    fetches it and loads its classes in a class loader of its own, even in local mode; the
    warm-up when the stream starts), without warm-up, with the warm-up's first task in the
    background of ``register``, with it inside ``register``, and
    with the jar in ``spark.jars`` from the session's start (driver and executor share one copy
    of its classes)."""
    from kafkalog.spark.jar import find_jar

    after = os.environ.get("PYTHONPATH", "")
    on = {"spark.kafkalog.jvm.warmup": "true"}
    off = {"spark.kafkalog.jvm.warmup": "false"}
    background = {"spark.kafkalog.jvm.warmup": "background"}
    plan_end = {"spark.kafkalog.jvm.warmup.compile": "true"}
    plan_early = {"spark.kafkalog.jvm.warmup.compile": "early"}
    jars = {"spark.jars": str(find_jar())}
    archive = {CLASS_ARCHIVE: "1"}
    dump = os.path.join(tempfile.gettempdir(), "kafkalog-first-stream-dump.jsa")
    dumping = {"spark.driver.extraJavaOptions": f"-XX:ArchiveClassesAtExit={dump} -Xlog:cds*=off"}
    sides: list[first_runs.Side] = [
        ("JVM", "jvm", after, {}),
        ("JVM, first plan", "jvm", after, plan_end),
        ("JVM, first plan early", "jvm", after, plan_early),
        ("JVM, warm-up off", "jvm", after, off),
        ("JVM, warm-up background", "jvm", after, background),
        ("JVM, warm-up inside", "jvm", after, on),
        ("JVM, spark.jars", "jvm", after, jars),
        ("JVM, class archive", "jvm", after, archive),
        ("JVM, dumping a class archive", "jvm", after, dumping),
        ("JVM, class archive, first plan early", "jvm", after, {**archive, **plan_early}),
    ]
    if python:
        sides.append(("Python", "python", after, {}))
    if before:
        sides = [
            ("JVM before", "jvm", before, {}),
            ("JVM after", "jvm", after, {}),
            ("JVM after, warm-up off", "jvm", after, off),
        ]
        if python:
            sides += [
                ("Python before", "python", before, {}),
                ("Python after", "python", after, {}),
            ]
    if only is not None:
        unknown = set(only) - {label for label, *_ in sides}
        assert not unknown, f"no such sides: {sorted(unknown)}"
        sides = [side for side in sides if side[0] in only]
    load = first_runs.load_average()
    runs = first_runs.interleave(sides, lambda s: _run_child(s, data, per_trigger), rounds)
    print(
        f"a stream's micro-batches in a new process (clicks, maxOffsetsPerTrigger={per_trigger}, "
        f"availableNow, noop sink, local[2]), median of {rounds}; load average (1 min) "
        f"{load} at the start, {first_runs.load_average()} at the end"
    )
    rows = [
        ("register()", lambda r: r["register"]),
        ("readStream...load()", lambda r: r["load"]),
        ("start() returns", lambda r: r["start"]),
        ("start() to the first micro-batch's start", lambda r: r["batches"][0]["start"]),
        ("first micro-batch", lambda r: r["batches"][0]["total"]),
        *[(f"  {part}", _first_part(part)) for part in PARTS],
        ("  its tasks: first launch to last end", _first_part("task_span")),
        ("  its tasks (count)", _first_part("tasks")),
        ("later micro-batches (median)", lambda r: _later(r, "total")),
        *[(f"  {part}", _later_part(part)) for part in PARTS],
        ("  their tasks: first launch to last end", _later_part("task_span")),
        ("first minus later", lambda r: r["batches"][0]["total"] - _later(r, "total")),
        ("register() to the first micro-batch's end", _to_first_answer),
        ("micro-batches", lambda r: len(r["batches"])),
        ("JVM warm-up's job (0: off)", lambda r: r["warmup"]),
        ("register()'s first plan (0: off)", lambda r: r.get("first_plan", 0.0)),
    ]
    print(f"{'phase':<46}" + "".join(f"{label:>22}" for label, *_ in sides))
    for name, get in rows:
        cells = "".join(
            f"{statistics.median(get(r) for r in runs[label]):>21.2f}s" for label, *_ in sides
        )
        print(f"{name:<46}{cells}")
    print(
        "every round (first micro-batch / later median, s): "
        + "; ".join(
            f"{label} "
            + " ".join(
                f"{r['batches'][0]['total']:.1f}/{_later(r, 'total'):.1f}" for r in runs[label]
            )
            for label, *_ in sides
        )
    )
    print(
        "the class archive in each round: "
        + "; ".join(
            f"{label} " + " ".join(r.get("archive", "-") for r in runs[label])
            for label, *_ in sides
        )
    )
    for label, *_ in sides:
        if runs[label][-1]["warmup"]:
            print(f"{label}: the warm-up's last state: {runs[label][-1]['warmup_state']}")


def _to_first_answer(r: dict[str, Any]) -> float:
    first = r["batches"][0]
    return float(r["register"] + r["load"] + r["start"] + first["start"] + first["total"])


def _first_part(part: str) -> Any:
    return lambda r: r["batches"][0][part]


def _later_part(part: str) -> Any:
    return lambda r: _later(r, part)


def _later(r: dict[str, Any], part: str) -> float:
    rest = r["batches"][1:]
    return statistics.median(b[part] for b in rest) if rest else float("nan")


if __name__ == "__main__":
    side, data, per_trigger, confs = sys.argv[2:6]
    print(json.dumps(child(side, data, int(per_trigger), json.loads(confs))))
