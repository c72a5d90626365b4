"""The JVM path's Python readers, watched from outside in a driver of its own (run by
tests/spark/test_python_readers.py: its own JVM, so its environment names the trace every
reader writes, and it may be stopped and killed).

``python readers_probe.py TRACE LOCAL REMOTE BIG`` prints one ``REPORT {json}`` line: the rows
of the remote copy against the local one's, which processes served which splits, what a reader
killed between splits and one killed mid-split did to the next queries, and which readers were
left after ``SparkSession.stop()`` and after the JVM was killed."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from typing import Any

from kafkalog.cli.spark_session import local_session

TRACE, LOCAL, REMOTE, BIG = sys.argv[1:5]


def events() -> list[list[str]]:
    """The trace's events so far, each split at ``:`` (``read_start``, pid, byte, segment)."""
    try:
        with open(TRACE) as f:
            return [line.rsplit(" ", 1)[0].split(":", 3) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def since(mark: int, kind: str) -> list[list[str]]:
    return [e for e in events()[mark:] if e[0] == kind]


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def wait_gone(pids: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def start() -> Any:
    return local_session("readers-probe", **{"spark.ui.enabled": "false"})


def rows(spark: Any, path: str) -> list[tuple[Any, ...]]:
    df = spark.read.format("kafkalog").option("path", path).option("includeHeaders", "true")
    return sorted((tuple(r) for r in df.load().collect()), key=repr)


def served(mark: int) -> dict[str, Any]:
    starts = since(mark, "read_start")
    return {
        "splits": len(starts),
        "pids": sorted({int(e[1]) for e in starts}),
        "started": sorted(int(e[1]) for e in since(mark, "reader_serving")),
    }


report: dict[str, Any] = {}
spark = start()
want = rows(spark, LOCAL)  # the Java decoder alone: local segments

# many splits, few readers
mark = len(events())
got = rows(spark, REMOTE)
report["first"] = {"equal": got == want, "rows": len(got), **served(mark)}

# every reader killed between splits: the next query's splits go to new ones, rows exact
killed = report["first"]["pids"]
for pid in killed:
    os.kill(pid, signal.SIGKILL)
report["killed_left"] = wait_gone(killed, 10)
mark = len(events())
got = rows(spark, REMOTE)
report["after_kill"] = {"equal": got == want, "rows": len(got), **served(mark)}

# a reader killed while it reads the big split: the query fails naming it, never short
for _attempt in range(3):
    mark = len(events())
    shot: list[list[str]] = []

    def kill_when_reading(mark: int = mark, shot: list[list[str]] = shot) -> None:
        """Kill the first reader of the big split once it has written a batch of its rows."""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            for e in since(mark, "read_start"):
                if any(b[1] == e[1] for b in since(mark, "read_batch")):
                    os.kill(int(e[1]), signal.SIGKILL)
                    shot.append(e)
                    return
            time.sleep(0.002)

    killer = threading.Thread(target=kill_when_reading)
    killer.start()
    df = spark.read.format("kafkalog").option("path", BIG).load()
    try:
        answer = df.selectExpr("count(*)", "sum(length(value))").collect()
    except Exception as problem:
        failure = str(problem)
    else:
        failure = None
    killer.join()
    finished = [e for e in since(mark, "read_end") if shot and e[1] == shot[0][1]]
    report["mid_split"] = {
        "shot": shot[0] if shot else None,
        "failure": failure and failure[:3000],
        "answer": None if failure else [list(r) for r in answer],
        "finished_before_kill": bool(finished),
    }
    if failure is not None or not finished:
        break  # else the reader ended its split before the kill landed: once more

# and the next query reads on, through a new reader
mark = len(events())
got = rows(spark, REMOTE)
report["after_mid_split"] = {"equal": got == want, **served(mark)}

# the session's end ends its readers, though the JVM lives on
ever = sorted({int(e[1]) for e in events() if e[0] == "reader_serving"})
report["alive_before_stop"] = [p for p in ever if alive(p)]
spark.stop()
report["left_after_stop"] = wait_gone(report["alive_before_stop"], 2)

# a new session in the same JVM, then the JVM killed: its readers end too
spark = start()
mark = len(events())
report["new_session_rows"] = len(rows(spark, REMOTE))
readers = [p for p in served(mark)["started"] if alive(p)]
jvms = sorted({parent(p) for p in readers})
report["readers_before_jvm_kill"] = readers
report["jvms"] = jvms
for jvm in jvms:
    os.kill(jvm, signal.SIGKILL)
report["left_after_jvm_kill"] = wait_gone(readers, 15)
print("REPORT " + json.dumps(report), flush=True)
os._exit(0)  # the JVM is gone: no session to stop
