"""``kafkalog serve`` in a child process that is SIGKILLed at named points of a transaction's path
and restarted on the same port (tests/server/crash_serve.py does the killing), for the
crash-point tests of exactly-once across crashes."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from ports import fixed_free_port

SCRIPT = Path(__file__).with_name("crash_serve.py")


class CrashingServe:
    """One serve process at a time on one port: each is given the next kill point; when it dies
    by SIGKILL at its point the next one starts at once (the clients reconnect by themselves).
    Any other exit (serve failing to start after a crash, say) stops the restarts and is
    reported by :meth:`stop`."""

    def __init__(self, data_dir: Path, points: list[str]) -> None:
        self.data_dir = data_dir
        self.points = list(points)
        self.port = fixed_free_port()
        self.record = data_dir.parent / "kill-points"
        self.hit: list[str] = []  # the points serve was killed at, in order
        self.failure: str | None = None
        self._runs = 0
        self._current = "none"
        self._proc = self._start(self.points.pop(0) if self.points else "none")
        self._stopping = threading.Event()
        self._watcher = threading.Thread(target=self._watch, daemon=True)
        self._watcher.start()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _start(self, point: str) -> subprocess.Popen[bytes]:
        self._runs += 1
        self._current = point
        log = open(self.data_dir.parent / f"serve-{self._runs}.log", "wb")  # noqa: SIM115
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        args = ["serve", "--data", str(self.data_dir), "--listen", self.bootstrap]
        args += ["--group-initial-rebalance-delay-ms", "0"]
        with log:
            return subprocess.Popen(
                [sys.executable, str(SCRIPT), point, str(self.record), "--", *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )

    def _watch(self) -> None:
        while not self._stopping.is_set():
            code = self._proc.poll()
            if code is None:
                time.sleep(0.01)
                continue
            recorded = self.record.read_text().split() if self.record.exists() else []
            if code != -signal.SIGKILL or recorded[-1:] != [self._current]:
                self.failure = (
                    f"serve run {self._runs} ({self._current}) exited {code}:\n"
                    + (self.data_dir.parent / f"serve-{self._runs}.log").read_text(
                        errors="replace"
                    )[-3000:]
                )
                return
            self.hit.append(self._current)
            self._proc = self._start(self.points.pop(0) if self.points else "none")

    def crash(self) -> None:
        """SIGKILL the running serve now (the test's own kill point); the next one starts."""
        self._current = "external"
        with open(self.record, "a") as f:
            f.write("external\n")
        self._proc.send_signal(signal.SIGKILL)
        deadline = time.monotonic() + 10
        while self.hit[-1:] != ["external"] and time.monotonic() < deadline:
            time.sleep(0.01)
        self.hit.remove("external")
        self.wait_ready()

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.failure is None:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                time.sleep(0.02)
        raise AssertionError(self.failure or "serve did not start")

    def stop(self) -> None:
        """Stop restarting; end the running serve cleanly (SIGTERM, exit 0 expected)."""
        self._stopping.set()
        self._watcher.join()
        proc = self._proc
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise AssertionError("serve did not stop on SIGTERM") from None
            if proc.returncode != 0 and self.failure is None:
                self.failure = f"serve exited {proc.returncode} on SIGTERM"
        if self.failure is not None:
            raise AssertionError(self.failure)
