"""A new driver's first answer on the JVM path (issue 34 §4): the planner process ``register``
starts in the background is the one the JVM asks, it warms its imports up while it waits, it
ends with the process that started it (however that ends), a planner that is gone is replaced,
and one that cannot start is said at ``load()``."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kafkalog.spark.source import BEHIND_JVM
from provenance import FIXTURES

BROKER = FIXTURES / "kafka-0.9.0.1-broker"  # 700 records


def _gone(pid: int, within: float = 20.0) -> bool:
    """The process ``pid`` ended (or is a zombie nobody reaps) within ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.1)
    return False


def _ask(path: str, request: dict[str, Any]) -> dict[str, Any]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(path)
        conn.sendall(json.dumps(request).encode() + b"\n")
        answer = b""
        while not answer.endswith(b"\n"):
            chunk = conn.recv(1 << 16)
            assert chunk, "the planner closed the connection without an answer"
            answer += chunk
    out: dict[str, Any] = json.loads(answer)
    return out


def test_the_started_planner_answers_on_its_socket_and_stops(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """``start_planner`` binds the socket before the process starts (a connection is accepted
    whenever it comes), answers one connection after another, warms its imports up (the trace
    says when), and ``stop_planner`` ends it and removes its socket's directory."""
    from kafkalog.spark import jvm_path
    from kafkalog.spark.jvm_bridge import TRACE_ENV

    monkeypatch.setattr(jvm_path, "_planner", None)  # not the suite's session's planner
    trace = tmp_path / "trace"
    monkeypatch.setenv(TRACE_ENV, str(trace))
    path = jvm_path.start_planner()
    monkeypatch.delenv(TRACE_ENV)
    assert path is not None and os.path.exists(path)
    planner = jvm_path._planner
    assert planner is not None
    try:
        assert jvm_path.start_planner() == path  # once per interpreter
        answer = _ask(path, {"op": "schema", "options": {"path": str(BROKER)}})
        assert "offset long" in answer["ddl"] and "error" not in answer
        again = _ask(path, {"op": "schema", "options": {"path": str(tmp_path / "missing")}})
        assert "kind" in again and "missing" in again["error"]
        deadline = time.monotonic() + 30
        while "planner_warm" not in trace.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        events = [line.split()[0] for line in trace.read_text().splitlines()]
        assert "planner_warm" in events and events.count("req:schema") == 2
    finally:
        jvm_path.stop_planner()
    assert planner.process.poll() is not None
    assert not os.path.exists(planner.directory)
    assert jvm_path._planner is None


def test_a_killed_driver_leaves_no_planner(tmp_path: Path) -> None:
    """The planner watches the stdin its starter holds: a driver killed outright (no atexit)
    still takes it down."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        """
import os, signal, sys
from kafkalog.spark import jvm_path
jvm_path.start_planner()
print(jvm_path._planner.process.pid, jvm_path._planner.directory, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""
    )
    done = subprocess.run([sys.executable, str(probe)], capture_output=True, text=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr
    pid, directory = done.stdout.split()
    assert _gone(int(pid)), f"planner {pid} outlived the killed driver"
    assert not os.path.exists(directory), "the killed driver's planner left its socket behind"


def _planners() -> dict[int, str]:
    """The planner processes running now (``kafkalog.spark.jvm_bridge serve``), by pid."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if "kafkalog.spark.jvm_bridge serve" in cmd:
                found[int(entry)] = cmd
    return found


def test_the_first_query_asks_the_planner_started_at_register(tmp_path: Path) -> None:
    """A new driver: ``register`` starts the planner, the JVM's first ``load()`` and query ask
    that one (no second planner, no Python worker started for the query), and it ends with the
    driver. The warm-up ``register`` started in the background (``spark.kafkalog.jvm.warmup=
    background``) ran its task. A read from
    another thread goes through the Python source (Spark's ``ADD JAR`` gives the jar to the
    calling thread only), which says why once, at WARNING; after ``register`` on that thread
    it is the JVM source's. A planner gone before ``load()`` is replaced by one the JVM starts;
    one that cannot start (a wrong interpreter) fails ``load()`` itself, saying which."""
    trace = tmp_path / "trace"
    probe = tmp_path / "probe.py"
    probe.write_text(
        f"""
import json, os, sys, threading, time
from pyspark.sql import SparkSession
import kafkalog.spark
from kafkalog.spark import jvm_path
from kafkalog.spark.source import path_in_use

def _parent(pid):
    with open(f"/proc/{{pid}}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])

def _mine(pid):
    # pid descends from this process (the planner it started, or its JVM's)
    while pid > 1:
        if pid == os.getpid():
            return True
        pid = _parent(pid)
    return False

def _planners():
    found = {{}}
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{{pid}}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\\0", b" ").decode(errors="replace")
        except (OSError, ValueError):
            continue
        if "kafkalog.spark.jvm_bridge serve" in cmd:
            found[int(pid)] = cmd
    return found

s = (
    SparkSession.builder.master("local[2]")
    .config("spark.ui.enabled", "false")
    .config(jvm_path.WARMUP_CONF, "background")
    .getOrCreate()
)
s.sparkContext.setLogLevel("ERROR")
kafkalog.spark.register(s)
assert path_in_use(s) == "jvm"
started = jvm_path._planner.process.pid
assert s.conf.get(jvm_path.PLANNER_CONF) == jvm_path._planner.path

def pyspark_workers():
    out = set()
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{{pid}}/cmdline", "rb") as f:
                if b"pyspark." in f.read() and int(pid) != os.getpid() and _mine(int(pid)):
                    out.add(int(pid))
        except (OSError, ValueError):
            pass
    return out

workers = pyspark_workers()
n = s.read.format("kafkalog").option("path", {str(BROKER)!r}).load().count()
mine = {{p: c for p, c in _planners().items() if _mine(p)}}
print("FIRST", json.dumps([n, started, mine, sorted(pyspark_workers() - workers)]), flush=True)

# the warm-up register() started in the background ran in the executor
state = None
for _ in range(6000):
    state = s.conf.get(jvm_path.WARMUP_STATE_CONF, None)
    if state is not None:
        break
    time.sleep(0.05)
print("WARMUP", state, flush=True)

# another thread's reads: through the Python source (ADD JAR gave the jar to register()'s
# thread only), said once on stderr; the JVM source's after register() on that thread
def scan(view):
    df = s.read.format("kafkalog").option("path", {str(BROKER)!r}).load()
    df.createOrReplaceTempView(view)
    plan = s.sql(f"EXPLAIN SELECT value FROM {{view}}").first()[0]
    return [df.count(), "kafkalog (JVM)" in plan, "(Python)" in plan]

seen = []
def other():
    seen.append(scan("other1"))
    seen.append(scan("other2"))
    kafkalog.spark.register(s)
    seen.append(scan("other3"))
thread = threading.Thread(target=other)
thread.start()
thread.join()
print("THREAD", json.dumps(seen), flush=True)

# the planner asked every time (the fixture's files are settled: its answers would be kept,
# tests/spark/test_kept_answers.py)
s.conf.set("spark.kafkalog.jvm.planCache", "false")
jvm_path.stop_planner()  # gone: the JVM starts its own at the next question
s.conf.set(jvm_path.PLANNER_CONF, "/nonexistent/planner.sock")
n = s.read.format("kafkalog").option("path", {str(BROKER)!r}).load().count()
print("REPLACED", n, flush=True)

s.conf.set(jvm_path.PYTHON_CONF, "/nonexistent/python3")
try:
    s.read.format("kafkalog").option("path", {str(BROKER)!r}).load()
except Exception as problem:
    print("LOAD FAILED", " | ".join(str(problem).splitlines())[:2000], flush=True)
else:
    print("LOAD PASSED", flush=True)
"""
    )
    env = {**os.environ, "KAFKALOG_PLANNER_TRACE": str(trace)}
    done = subprocess.run(
        [sys.executable, str(probe)], capture_output=True, text=True, timeout=600, env=env
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    lines = {line.split(" ", 1)[0]: line for line in done.stdout.splitlines()}
    n, started, planners, new_workers = json.loads(lines["FIRST"].split(" ", 1)[1])
    assert n == 700
    assert [int(p) for p in planners] == [started], planners  # only the one register started
    assert "--listen-fd" in planners[str(started)]
    assert new_workers == [], "a Python worker started for a JVM-path batch query"
    events = [line.split()[0] for line in trace.read_text().splitlines()]
    assert events.count("planner_serving") >= 2  # the started one, then the JVM's own
    assert "req:schema" in events and "req:plan" in events
    assert re.fullmatch(r"WARMUP done \d+ \(read 1400 rows in \d+ ms\)", lines["WARMUP"])
    python, jvm = [700, False, True], [700, True, False]
    assert json.loads(lines["THREAD"].split(" ", 1)[1]) == [python, python, jvm]
    said = [line for line in done.stderr.splitlines() if BEHIND_JVM in line]
    assert said == [BEHIND_JVM], done.stderr[-3000:]  # once, and only at WARNING (alone)
    assert lines["REPLACED"] == "REPLACED 700"
    assert lines["LOAD"].startswith("LOAD FAILED"), done.stdout
    assert "planner process (/nonexistent/python3 -m kafkalog.spark.jvm_bridge)" in lines["LOAD"]
    assert "is kafkalog installed for that interpreter" in lines["LOAD"]
    assert _gone(started), "the planner register() started outlived its driver"
    assert all(_gone(int(pid)) for pid in planners), f"planners left behind: {planners}"


def _mine(pid: int) -> bool:
    """Whether ``pid`` descends from this process (this worker's JVM's planners only)."""
    while pid > 1:
        if pid == os.getpid():
            return True
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
    return False


def test_a_stream_goes_on_when_its_planner_is_replaced(spark: Any, tmp_path: Path) -> None:
    """A stream's state in the planner (its reader, AvailableNow's target) is opened again on a
    new planner when the one it was opened on ends mid-query: no micro-batch fails, every
    record arrives once."""
    from kafkalog.log import Log
    from kafkalog.records.model import Record

    d = tmp_path / "data" / "events-0"
    with Log(d, writable=True) as log:
        log.append_records([Record(-1, 1_700_000_000_000, None, b"a%d" % i) for i in range(100)])
    query = (
        spark.readStream.format("kafkalog")
        .option("path", str(d.parent))
        .option("startingOffsets", "earliest")
        .load()
        .writeStream.format("memory")
        .queryName("replaced_planner")
        .option("checkpointLocation", str(tmp_path / "cp"))
        .start()
    )
    try:
        query.processAllAvailable()
        killed = [pid for pid in _planners() if _mine(pid)]
        assert killed, "no planner of this driver found"
        for pid in killed:
            os.kill(pid, signal.SIGKILL)
        assert all(_gone(pid) for pid in killed)
        with Log(d, writable=True) as log:
            log.append_records([Record(-1, 1_700_000_000_000, None, b"b%d" % i) for i in range(50)])
        query.processAllAvailable()
        assert query.exception() is None
        rows = spark.sql("SELECT offset FROM replaced_planner").collect()
        assert sorted(r.offset for r in rows) == list(range(150))
    finally:
        query.stop()


#: an interpreter for the JVM's planner whose first planner answers the first question, then
#: ends when asked the second (what a planner killed under load looks like to the JVM: up when
#: it checked, gone before the answer); every later planner is the real one
_ENDS_WHEN_ASKED_TWICE = """
import os, subprocess, sys
real, seen = {real!r}, {seen!r}
first = not os.path.exists(seen)
with open(seen, "a") as f:
    f.write(f"started {{os.getpid()}}\\n")
if not first:
    os.execv(real, [real, *sys.argv[1:]])
planner = subprocess.Popen([real, *sys.argv[1:]], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
assert planner.stdin is not None and planner.stdout is not None
planner.stdin.write(sys.stdin.buffer.readline())
planner.stdin.flush()
sys.stdout.buffer.write(planner.stdout.readline())
sys.stdout.buffer.flush()
asked = sys.stdin.buffer.readline()
with open(seen, "a") as f:
    f.write(f"ended-asked {{os.getpid()}} {{bool(asked)}}\\n")
planner.kill()
os._exit(1)
"""


def test_a_planner_that_ends_while_asked_is_replaced(spark: Any, tmp_path: Path) -> None:
    """A planner the JVM started that had answered and then ends while asked (killed, or gone
    before the JVM saw it exit: a window a loaded machine opens, where the stream above once
    failed with "ended; is kafkalog installed") is replaced and the question asked again; only
    one that ends before its first answer is said to be unable to start."""
    from kafkalog.log import Log
    from kafkalog.records.model import Record
    from kafkalog.spark import jvm_path

    d = tmp_path / "data" / "events-0"
    with Log(d, writable=True) as log:
        log.append_records([Record(-1, 1_700_000_000_000, None, b"a%d" % i) for i in range(30)])
    seen = tmp_path / "planners"
    wrapper = tmp_path / "python"
    wrapper.write_text(
        f"#!{sys.executable}\n" + _ENDS_WHEN_ASKED_TWICE.format(real=sys.executable, seen=str(seen))
    )
    wrapper.chmod(0o755)
    before = {k: spark.conf.get(k, None) for k in (jvm_path.PYTHON_CONF, jvm_path.PLANNER_CONF)}
    spark.conf.set(jvm_path.PYTHON_CONF, str(wrapper))
    spark.conf.set(jvm_path.PLANNER_CONF, "")  # no register() planner: the JVM starts its own
    try:
        rows = spark.read.format("kafkalog").option("path", str(d.parent)).load().collect()
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
    assert sorted(r.offset for r in rows) == list(range(30))
    events = [line.split()[0] for line in seen.read_text().splitlines()]
    # the first planner was asked a second question and ended without answering it; the JVM
    # started a second one, which answered the rest
    assert events[:3] == ["started", "ended-asked", "started"], events
    assert "True" in seen.read_text().splitlines()[1]
