"""Bench-only marks from processes Spark and the JVM source start (``bench/first_query.py``).

Put on ``PYTHONPATH`` by the first-answer benchmarks with ``KAFKALOG_BENCH_MARKS`` naming a
marks file; every Python process of the run then imports this file at start. It marks:

- in the JVM source's planner (``python -m kafkalog.spark.jvm_bridge serve``): the process's
  start (from ``/proc``), the interpreter up (here), the moment its serve loop first asks for a
  request (its imports done), and each request read and answer written (``req:OP`` /
  ``ans:OP``, a stream's calls as ``OP.METHOD``), by wrapping ``sys.stdin``/``sys.stdout``;
- any PySpark Python worker (daemon or worker) started: ``pyworker``.

Nothing else is changed; without ``KAFKALOG_BENCH_MARKS`` it does nothing.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

_MARKS = os.environ.get("KAFKALOG_BENCH_MARKS")


def _mark(name: str, at: float | None = None) -> None:
    assert _MARKS is not None
    with open(_MARKS, "a") as out:
        out.write(f"{name} {time.time() if at is None else at!r}\n")


def _started() -> float:
    """This process's start, wall clock (``/proc``: ticks since boot, to ~10 ms)."""
    with open("/proc/self/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))


class _In:
    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.op = "?"
        self.iterating = False

    def __iter__(self) -> _In:
        if not self.iterating:
            self.iterating = True
            _mark("planner_serving")
        return self

    def __next__(self) -> str:
        line: str = next(self.inner)
        import json

        try:
            req = json.loads(line)
            self.op = req.get("op", "?") + ("." + req["method"] if "method" in req else "")
        except ValueError:
            self.op = "?"
        _mark("req:" + self.op)
        return line

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class _Out:
    def __init__(self, inner: Any, source: _In) -> None:
        self.inner = inner
        self.source = source

    def write(self, text: str) -> int:
        n: int = self.inner.write(text)
        if text.endswith("\n"):
            _mark("ans:" + self.source.op)
        return n

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _install() -> None:
    argv = getattr(sys, "orig_argv", [])
    if "kafkalog.spark.jvm_bridge" in argv and "serve" in argv:
        _mark("planner_spawned", _started())
        _mark("planner_python_up")
        stdin = _In(sys.stdin)
        sys.stdin = stdin  # type: ignore[assignment]
        sys.stdout = _Out(sys.stdout, stdin)  # type: ignore[assignment]
    elif any("pyspark" in a and ("daemon" in a or "worker" in a) for a in argv):
        _mark("pyworker")


if _MARKS:
    _install()
