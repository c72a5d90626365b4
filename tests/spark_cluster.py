"""A Spark standalone cluster on loopback, started with the launcher pyspark's wheel ships.

The wheel has ``bin/spark-class`` but no ``sbin/start-master.sh``, so the master and each worker
are one ``spark-class`` process each (``org.apache.spark.deploy.master.Master`` and
``org.apache.spark.deploy.worker.Worker spark://127.0.0.1:PORT``), on free ports, with their logs
and work directories under a temporary directory. Readiness is read from the master's JSON page
(``/json/``: its status, and the workers it counts ALIVE). The context yields once the master is
ALIVE, while the workers' JVMs still start: a driver started then starts its own JVM at the same
time (a JVM start is seconds of the test), registers with the master, and gets its executors as
each worker registers. ``Cluster.wait_for_workers`` waits for them all. Every process is killed
and reaped on exit, also when starting fails half way.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from ports import fixed_free_port


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


@dataclass
class Cluster:
    url: str  # spark://127.0.0.1:PORT
    ui: str  # the master's web UI
    logs: Path
    workers: int = 2
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def state(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.ui + "/json/", timeout=5) as r:
            state: dict[str, Any] = json.load(r)
            return state

    def log_tail(self, chars: int = 4000) -> str:
        out = []
        for f in sorted(self.logs.glob("*.log")):
            out.append(f"--- {f.name}\n{f.read_text(errors='replace')[-chars:]}")
        return "\n".join(out)

    def _wait(self, ready: Callable[[dict[str, Any]], bool], what: str, timeout: float) -> None:
        """Until ``ready(state)``; raises with the logs when a process ends or time is up."""
        deadline = time.monotonic() + timeout
        while True:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(
                        f"a cluster process ended with {p.returncode}:\n{self.log_tail()}"
                    )
            try:
                if ready(self.state()):
                    return
            except OSError:
                pass  # the master's UI is not up yet
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start in {timeout} s:\n{self.log_tail()}")
            time.sleep(0.2)

    def wait_for_master(self, timeout: float = 120.0) -> None:
        """The master serves its page and is the leader (it takes applications)."""
        self._wait(lambda state: state.get("status") == "ALIVE", "the master", timeout)

    def wait_for_workers(self, timeout: float = 120.0) -> None:
        """Every worker registered with the master and ALIVE."""

        def ready(state: dict[str, Any]) -> bool:
            alive = [w for w in state.get("workers", []) if w["state"] == "ALIVE"]
            return len(alive) == self.workers

        self._wait(ready, "the workers", timeout)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["SPARK_HOME"] = str(spark_home())
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env["SPARK_NO_DAEMONIZE"] = "1"
    env["PYSPARK_PYTHON"] = sys.executable
    return env


@contextmanager
def standalone_cluster(
    root: Path, workers: int = 2, timeout: float = 120.0, *, wait_for_workers: bool = True
) -> Iterator[Cluster]:
    """One master and ``workers`` workers of one core and 1 GiB each; with
    ``wait_for_workers=False`` it yields once the master is ALIVE (see the module's docstring)."""
    launcher = str(spark_home() / "bin" / "spark-class")
    logs = root / "logs"
    logs.mkdir(parents=True)
    handles: list[BinaryIO] = []
    port, ui_port = fixed_free_port(), fixed_free_port()
    cluster = Cluster(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui_port}", logs, workers)
    procs = cluster.procs

    def start(name: str, *args: str) -> None:
        log = open(logs / f"{name}.log", "wb")  # noqa: SIM115 - closed in the finally below
        handles.append(log)
        procs.append(
            subprocess.Popen(
                [launcher, *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=_env(),
                cwd=root,
                start_new_session=True,  # the JVM and anything it starts go as one group
            )
        )

    try:
        start(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui_port),
        )  # fmt: skip
        for n in range(workers):
            work = root / f"worker-{n}"
            work.mkdir()
            start(
                f"worker-{n}",
                "org.apache.spark.deploy.worker.Worker", cluster.url,
                "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
                "--webui-port", str(fixed_free_port()), "--work-dir", str(work),
            )  # fmt: skip
        cluster.wait_for_master(timeout)
        if wait_for_workers:
            cluster.wait_for_workers(timeout)
        yield cluster
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in reversed(procs):
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        for h in handles:
            h.close()


def java_available() -> bool:
    return shutil.which("java") is not None or bool(os.environ.get("JAVA_HOME"))
