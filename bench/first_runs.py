"""What the first-answer benchmarks (``bench/first_query.py``, ``bench/first_stream.py``) share:
a fresh child process per run, its session with Spark's event log, the event log read back,
the sides interleaved round by round, and the machine's load printed beside the figures.

A side is ``(label, kind, src, confs)``: ``kind`` says what the child runs (each bench has its
own), ``src`` a kafkalog source tree to import (``None``: ``PYTHONPATH`` as given), ``confs``
Spark confs the child's session is built with (e.g. ``spark.kafkalog.jvm.warmup=true``).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable
from typing import Any

#: bench-only marks from the processes Spark and the JVM source start (``first_hook``)
HOOK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "first_hook")

Side = tuple[str, str, str | None, dict[str, str]]


def session(events: str, confs: dict[str, str] | None = None, **more: str) -> Any:
    """A fresh local[2] session whose event log (uncompressed) goes to ``events``."""
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.eventLog.enabled", "true")
        .config("spark.eventLog.compress", "false")
        .config("spark.eventLog.dir", "file://" + events)
    )
    for key, value in {**more, **(confs or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def spark_events(directory: str) -> tuple[list[tuple[float, float]], list[float]]:
    """From Spark's event log under ``directory`` (wall clock, s): every task's launch and
    finish, and every job's end."""
    tasks: list[tuple[float, float]] = []
    jobs: list[float] = []
    for d, _, names in os.walk(directory):
        for name in names:
            if not name.startswith(("events_", "local-")):
                continue
            with open(os.path.join(d, name)) as log:
                for line in log:
                    if '"SparkListenerTaskEnd"' in line:
                        info = json.loads(line)["Task Info"]
                        tasks.append((info["Launch Time"] / 1000, info["Finish Time"] / 1000))
                    elif '"SparkListenerJobEnd"' in line:
                        jobs.append(json.loads(line)["Completion Time"] / 1000)
    return tasks, jobs


def run_child(script: str, args: list[str], src: str | None, env: dict[str, str]) -> Any:
    """``script --child ARGS`` in a fresh interpreter, kafkalog from ``src`` (else
    ``PYTHONPATH`` as given) with the bench hook beside it; its last line of output, as JSON."""
    tree = src if src is not None else os.environ.get("PYTHONPATH", "")
    full = {**os.environ, "PYSPARK_PYTHON": sys.executable, **env}
    full["PYTHONPATH"] = os.pathsep.join(p for p in (tree, HOOK) if p)
    out = subprocess.run(
        [sys.executable, script, "--child", *args],
        env=full,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def interleave(sides: list[Side], one: Callable[[Side], Any], rounds: int) -> dict[str, list[Any]]:
    """Every side in turn, round after round (a shared machine's load drifts: each round sees
    the sides under about the same load), after one discarded run of each (numba's on-disk
    cache, the jar's cache and the OS's file cache filled, as a user's second session finds
    them)."""
    for side in sides:
        one(side)
    runs: dict[str, list[Any]] = {side[0]: [] for side in sides}
    for _ in range(rounds):
        for side in sides:
            runs[side[0]].append(one(side))
    return runs


def medians(runs: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, float]]:
    """The median of each key over a side's runs (the runs that have it)."""
    return {
        label: {
            key: statistics.median(r[key] for r in rs if key in r)
            for key in set().union(*(r.keys() for r in rs))
        }
        for label, rs in runs.items()
    }


def load_average() -> str:
    """The 1-minute load average now (the machine is shared: say how loaded it was)."""
    return f"{os.getloadavg()[0]:.1f}"


def warmup_seconds(spark: Any) -> float:
    """How long the JVM source's warm-up took (its state conf, ``done MS (...)``: see
    ``kafkalog.spark.jvm_path.first_task``), 0 when it was off, NaN when it failed."""
    state = str(spark.conf.get("spark.kafkalog.jvm.warmup.state", "off"))
    if state.startswith("done "):
        return int(state.split()[1]) / 1000
    return 0.0 if state == "off" else float("nan")
