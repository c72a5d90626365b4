"""``kafkalog serve`` in a child process that is SIGKILLed at named points of a transaction's path
and restarted on the same port (tests/server/crash_serve.py does the killing), for the
crash-point tests of exactly-once across crashes. Each serve run is a real process (forked from
a warm fork server, so a restart does not spend seconds importing): SIGKILL ends it for real."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from ports import fixed_free_port

SCRIPT = Path(__file__).with_name("crash_serve.py")


class ForkedServe:
    """One serve run forked by the fork server, with the part of ``subprocess.Popen``'s interface
    :class:`CrashingServe` uses (its exit status comes from the fork server, which reaps it)."""

    def __init__(self, pid: int, server: ForkServer) -> None:
        self.pid = pid
        self._server = server
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.status(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"serve pid {self.pid}", timeout or 0)
            time.sleep(0.005)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ForkServer:
    """``crash_serve.py --fork-server``: serve imported once, each run forked from it."""

    def __init__(self, errors: Path) -> None:
        self._errors = errors
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        with open(errors, "wb") as err:
            self._proc = subprocess.Popen(
                [sys.executable, str(SCRIPT), "--fork-server"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                env=env,
            )
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._stdin: IO[bytes] = self._proc.stdin
        self._started: queue.Queue[int | None] = queue.Queue()
        self._exits: dict[int, int] = {}
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, args=(self._proc.stdout,), daemon=True)
        self._reader.start()

    def _read(self, stream: IO[bytes]) -> None:
        for raw in iter(stream.readline, b""):
            kind, pid, *rest = raw.decode().split()
            if kind == "S":
                self._started.put(int(pid))
            else:
                with self._lock:
                    self._exits[int(pid)] = int(rest[0])
        self._started.put(None)

    def start(
        self, argv: list[str], log: Path, config: dict[str, Any] | None = None
    ) -> ForkedServe:
        request = {"argv": argv, "log": str(log), "config": config or {}}
        self._stdin.write(json.dumps(request).encode() + b"\n")
        self._stdin.flush()
        try:
            pid = self._started.get(timeout=60)
        except queue.Empty:
            pid = None
        if pid is None:
            raise AssertionError(
                "the serve fork server did not fork: "
                + self._errors.read_text(errors="replace")[-3000:]
            )
        return ForkedServe(pid, self)

    def status(self, pid: int) -> int | None:
        with self._lock:
            return self._exits.get(pid)

    def close(self) -> None:
        """End of input: the server exits once its children have (they are stopped first)."""
        with contextlib.suppress(BrokenPipeError):
            self._stdin.close()
        try:
            self._proc.wait(30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
            raise AssertionError("the serve fork server did not exit") from None


class CrashingServe:
    """One serve process at a time on one port: each is given the next kill point; when it dies
    by SIGKILL at its point the next one starts at once (the clients reconnect by themselves).
    Any other exit (serve failing to start after a crash, say) stops the restarts and is
    reported by :meth:`stop`."""

    def __init__(
        self,
        data_dir: Path,
        points: list[str],
        serve_args: list[str] | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        """``serve_args``: more ``kafkalog serve`` options (``--topic-config``, say);
        ``config``: ``ServerConfig`` fields the CLI has no option for."""
        self.data_dir = data_dir
        self.serve_args = list(serve_args or [])
        self.config = dict(config or {})
        self.points = list(points)
        self.port = fixed_free_port()
        self.record = data_dir.parent / "kill-points"
        self.hit: list[str] = []  # the points serve was killed at, in order
        self.failure: str | None = None
        self._runs = 0
        self._current = "none"
        self._forks = ForkServer(data_dir.parent / "fork-server.stderr")
        self._proc = self._start(self.points.pop(0) if self.points else "none")
        self._stopping = threading.Event()
        self._watcher = threading.Thread(target=self._watch, daemon=True)
        self._watcher.start()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _start(self, point: str) -> ForkedServe:
        self._runs += 1
        self._current = point
        log = self.data_dir.parent / f"serve-{self._runs}.log"
        args = ["serve", "--data", str(self.data_dir), "--listen", self.bootstrap]
        args += ["--group-initial-rebalance-delay-ms", "0", *self.serve_args]
        return self._forks.start([point, str(self.record), "--", *args], log, self.config)

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
        try:
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
        finally:
            self._forks.close()
        if self.failure is not None:
            raise AssertionError(self.failure)
