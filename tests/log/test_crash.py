"""Crash consistency: a writer process is killed with SIGKILL at random moments, again and again.

A child process (``helpers/crash_writer.py``) opens the partition through a writable
:class:`LogDir` and appends deterministic batches with ``flush.messages=N``: small segments so it
rolls often (on size, or on a full index), sometimes 64-200 KB batches, sometimes transactions,
and in half the runs every write cut in pieces with short pauses (a slow disk) so that kills land
inside writes. It reports on a pipe each append that returned, and each flush once the flushed
offset is durable in a side file. The test kills it with SIGKILL after a seeded random delay,
then reopens the log in this process (which recovers it: from the root recovery-point checkpoint,
or in some rounds from offset 0), checks every invariant of
``helpers/logcheck.check_log_at_rest`` and that nothing flushed was lost (nor any append that
returned: a SIGKILL keeps the page cache), appends a few batches itself and closes; the next
child continues the same log. Some rounds chain two kills without a recovery in between, so the
next child recovers a crashed log itself (and may be killed while doing so); in some rounds a
read-only reader looks at the crashed log before recovery, and must see whole batches only.

Children are forked from a server process that imported kafkalog once (a Python start-up costs
~0.5 s, a fork a few milliseconds); a few rounds use a freshly executed child instead. The plan
is reproducible from the seed (each round's writer profile, flush.messages, writer seed, kill
delay, chaining and recovery mode); where exactly a kill lands in the writer's work is up to the
scheduler. ``KAFKALOG_CRASH_SEED`` and ``KAFKALOG_CRASH_KILLS`` override the defaults (120
kills, ~15 s).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest
from helpers.logcheck import (
    PROFILES,
    SEGMENT_INDEX_BYTES,
    TOPIC,
    Writer,
    check_log_at_rest,
    check_reads,
    check_record,
    read_live,
)

from kafkalog.log import Log, LogDir, TopicConfig
from kafkalog.log.lock import DirectoryLock, LockedError
from kafkalog.records import LogReader

HELPERS = Path(__file__).resolve().parent / "helpers"
WRITER = str(HELPERS / "crash_writer.py")
SEED = int(os.environ.get("KAFKALOG_CRASH_SEED", "20240611"))
KILLS = int(os.environ.get("KAFKALOG_CRASH_KILLS", "120"))
EXEC_ROUNDS = {3, KILLS // 2}  # rounds whose writer is a freshly executed Python process
TIMEOUT = 60.0  # generous: a loaded CI machine must not turn slowness into a failure

PARENT_CONFIG = TopicConfig(
    segment_bytes=64 * 1024,
    segment_index_bytes=SEGMENT_INDEX_BYTES,
    index_interval_bytes=256,
    retention_ms=-1,
)
RETAIN_ABOVE = 3 * 1024 * 1024  # when the log grows past this, move its start forward ...
RETAIN_KEEP = 1024 * 1024  # ... keeping about this much


class Lines:
    """Lines of a pipe, read by a thread (so a chatty child never blocks on a full pipe)."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream: IO[bytes]) -> None:
        for raw in iter(stream.readline, b""):
            self._queue.put(raw.decode(errors="replace").rstrip("\n"))
        self._queue.put(None)

    def get(self, timeout: float = TIMEOUT) -> str | None:
        """The next line, None at EOF; raises TimeoutError."""
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no line within {timeout} s") from None


@dataclass
class Ready:
    start: int
    end: int
    recovery_point: int


class WriterProc:
    """One writer child: its report lines, readiness, kill and death."""

    def __init__(self, pid: int, lines: Lines, errors: Path, popen: Any = None) -> None:
        self.pid = pid
        self.lines = lines
        self.errors = errors
        self.popen = popen  # set for an executed child; None for a forked one
        self.ready: Ready | None = None
        self.acked = 0  # log end offset after the last append that returned
        self.flushed = 0
        self.appends = 0
        self.status: int | None = None

    def _take(self, line: str) -> bool:
        """Account for one line; True when it is the server's exit notice for this child."""
        kind, _, rest = line.partition(" ")
        fields = rest.split()
        if not fields or int(fields[0]) != self.pid:
            self.fail(f"unexpected line {line!r}")
        if kind == "R":
            self.ready = Ready(*map(int, fields[1:4]))
        elif kind == "A":
            self.acked = max(self.acked, int(fields[1]))
            self.appends += 1
        elif kind == "F":
            self.flushed = max(self.flushed, int(fields[1]))
        elif kind == "X":
            self.status = int(fields[1])
            return True
        elif kind != "D":
            self.fail(f"unexpected line {line!r}")
        return False

    def wait_ready(self) -> Ready:
        while self.ready is None:
            line = self.lines.get()
            if line is None or self._take(line):
                self.fail("ended before it was ready")
        return self.ready

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):  # it died on its own: wait_dead tells
            os.kill(self.pid, signal.SIGKILL)

    def wait_dead(self) -> int:
        """Wait until the child is gone (and reaped) and every line it wrote was read."""
        if self.popen is not None:
            self.status = self.popen.wait(TIMEOUT)
            while (line := self.lines.get()) is not None:
                self._take(line)
            return self.status
        while True:
            line = self.lines.get()
            if line is None:
                self.fail("the fork server died")
            if self._take(line):
                assert self.status is not None
                return self.status

    def killed_by_sigkill(self) -> bool:
        if self.popen is not None:
            return self.status == -signal.SIGKILL
        assert self.status is not None
        return os.WIFSIGNALED(self.status) and os.WTERMSIG(self.status) == signal.SIGKILL

    def ensure_dead(self) -> None:
        """Kill the child if it may still be running (a failed round must not leave a writer
        behind holding the lock, nor the fork server waiting for it)."""
        if self.status is not None:
            return
        if self.popen is not None:
            self.popen.kill()
            self.wait_dead()
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(TimeoutError):
            while (line := self.lines.get()) is not None and not self._take(line):
                pass

    def fail(self, why: str) -> None:
        self.ensure_dead()
        err = self.errors.read_text(errors="replace")[-4000:] if self.errors.exists() else ""
        pytest.fail(f"writer pid {self.pid}: {why}\n--- its stderr ---\n{err}")


class ForkServer:
    """``crash_writer.py serve``: forks writer children from a warm process."""

    def __init__(self, workdir: Path) -> None:
        self.errors = workdir / "server.stderr"
        self._err = open(self.errors, "wb")  # noqa: SIM115 - closed in close()
        self.popen = subprocess.Popen(
            [sys.executable, WRITER, "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
        )
        assert self.popen.stdout is not None
        self.lines = Lines(self.popen.stdout)
        first = self.lines.get(timeout=300)  # a cold numba cache compiles the kernels first
        if first != "S ready":
            self.close()
            pytest.fail(f"fork server did not start: {first!r}: {self.errors.read_text()}")

    def start(self, params: dict[str, Any]) -> WriterProc:
        assert self.popen.stdin is not None
        self.popen.stdin.write(json.dumps(params).encode() + b"\n")
        self.popen.stdin.flush()
        early: list[str] = []
        while True:  # the child may report before the server prints its pid
            line = self.lines.get()
            if line is None:
                pytest.fail(f"fork server died: {self.errors.read_text()}")
            if line.startswith("P "):
                break
            early.append(line)
        proc = WriterProc(int(line.split()[1]), self.lines, self.errors)
        for line in early:
            proc._take(line)
        return proc

    def close(self) -> None:
        if self.popen.poll() is None:
            assert self.popen.stdin is not None
            try:
                self.popen.stdin.write(b"\n")
                self.popen.stdin.close()
                self.popen.wait(30)
            except (OSError, subprocess.TimeoutExpired):
                self.popen.kill()
                self.popen.wait(30)
        self._err.close()


def exec_writer(params: dict[str, Any], workdir: Path) -> WriterProc:
    errors = workdir / f"writer-{params['seed']}.stderr"
    with open(errors, "wb") as err:
        popen = subprocess.Popen(
            [sys.executable, WRITER, "write", json.dumps(params)],
            stdout=subprocess.PIPE,
            stderr=err,
        )
    assert popen.stdout is not None
    return WriterProc(popen.pid, Lines(popen.stdout), errors, popen)


@pytest.fixture
def fork_server(tmp_path: Path) -> Iterator[ForkServer]:
    server = ForkServer(tmp_path)
    try:
        yield server
    finally:
        server.close()


def writer_params(rng: random.Random, root: Path, flushed_file: Path) -> dict[str, Any]:
    profile = rng.choices(PROFILES, weights=[35, 25, 20, 20])[0]
    return {
        "root": str(root),
        "topic": TOPIC,
        "partition": 0,
        "flushed_file": str(flushed_file),
        "seed": rng.getrandbits(32),
        "profile": profile,
        "flush_messages": rng.choice([1, 2, 5, 20, 100]),
        "txn_rate": rng.choice([0.0, 0.0, 0.1]),
        "budget": (3 if profile == "large" else 1) * 1024 * 1024,
        "slow_write": rng.random() < 0.5,
        "segment_index_bytes": SEGMENT_INDEX_BYTES,
    }


def read_flushed(path: Path) -> int:
    try:
        return int(path.read_text())
    except FileNotFoundError:
        return 0


def torn_tail(partition: Path) -> bool:
    """Whether the newest ``.log`` ends with a cut-off batch (a kill landed inside a write)."""
    logs = sorted(partition.glob("*.log")) if partition.is_dir() else []
    if not logs:
        return False
    reader = LogReader(logs[-1].read_bytes())
    for _ in reader:
        pass
    return reader.incomplete_tail is not None


def newest_segment_empty(partition: Path) -> bool:
    logs = sorted(partition.glob("*.log")) if partition.is_dir() else []
    return len(logs) > 1 and logs[-1].stat().st_size == 0


@dataclass
class Expected:
    start: int = 0  # the log start offset the parent set (retention)
    must_have: int = 0  # every offset below this must be in the log
    deep_from: int = 0  # records below were fully checked in an earlier round


def recover_and_continue(
    root: Path,
    *,
    peek: bool,
    full: bool,
    rng: random.Random,
    expected: Expected,
    stats: Counter[str],
) -> None:
    """Reopen the crashed log in this process, check it, append to it, close it cleanly.

    ``peek``: first read it read-only, as it is; ``full``: recover it from offset 0 as a
    standalone log instead of through the data directory and its checkpoints."""
    partition = root / f"{TOPIC}-0"
    stats["torn tails seen"] += torn_tail(partition)
    stats["newest segment empty (kill around a roll)"] += newest_segment_empty(partition)
    seen_by_reader: int | None = None
    if peek and partition.is_dir():
        # a read-only reader (a tool inspecting a crashed broker's directory) sees whole
        # batches only, and everything acknowledged, before any recovery
        with Log(partition, writable=False) as before:
            seen_by_reader = read_live(before).end
        assert seen_by_reader >= expected.must_have
        stats["read-only reads before recovery"] += 1
    logdir: LogDir | None = None
    if full:  # a standalone log: no root checkpoint, recovery from offset 0
        log = Log(partition, PARENT_CONFIG, recovery_point=0, log_start_offset=expected.start)
        stats["full recoveries"] += 1
    else:
        logdir = LogDir(root, writable=True)
        log = logdir.log(TOPIC, 0, create=True, config=PARENT_CONFIG)
    try:
        facts = check_log_at_rest(log, deep_from=0 if full else expected.deep_from)
        assert log.log_start_offset == expected.start
        assert log.log_end_offset >= expected.must_have, (
            f"lost records: the log ends at {log.log_end_offset}, but offsets below "
            f"{expected.must_have} were flushed or acknowledged"
        )
        assert log.recovery_point <= log.log_end_offset
        if seen_by_reader is not None:  # recovery cut exactly the cut-off tail, nothing whole
            assert log.log_end_offset == seen_by_reader
        check_reads(log, facts, rng)
        stats["max segments"] = max(stats["max segments"], facts.segments)
        stats["aborted txns"] = max(stats["aborted txns"], facts.aborted)

        # appending continues where the crashed writer stopped
        end = log.log_end_offset
        writer = Writer(log, rng, "small", txn_rate=0.2)
        for _ in range(rng.randint(1, 3)):
            writer.step()
        got = [r.offset for r in log.records(end)]
        markers = {b.base_offset for b in log.batches(end) if b.is_control}
        assert got == [o for o in range(end, log.log_end_offset) if o not in markers]
        for rec in log.records(end):
            check_record(rec)

        if logdir is not None and log.size_in_bytes() > RETAIN_ABOVE:
            kept = 0
            for seg in reversed(log.segments):
                kept += seg.size
                if kept >= RETAIN_KEEP:
                    break
            upper = seg.base_offset + max(1, (log.log_end_offset - seg.base_offset) // 4)
            expected.start = rng.randint(seg.base_offset, min(upper, log.log_end_offset))
            log.increment_log_start_offset(expected.start)
            assert log.delete_old_segments() > 0
            stats["retention passes"] += 1
    finally:
        if logdir is not None:
            logdir.close()
        else:
            log.close()
    expected.must_have = expected.deep_from = log.log_end_offset


def warm_parent(tmp_path: Path) -> None:
    """Load the numba kernels in this process before the clock matters."""
    log = Log(tmp_path / "warm-0", PARENT_CONFIG)
    Writer(log, random.Random(0), "small", 0.0).step()
    log.close()
    reader = Log(tmp_path / "warm-0", writable=False)
    list(reader.records(0))
    reader.close()


def kill_at_random(
    proc: WriterProc,
    rng: random.Random,
    may_be_early: bool,
    partition: Path,
    expected: Expected,
    stats: Counter[str],
) -> None:
    """SIGKILL the writer after a seeded random delay, and wait until it is gone."""
    if may_be_early and rng.random() < 0.1:
        time.sleep(rng.uniform(0, 0.01))  # lands while it opens (and maybe recovers) the log
        stats["early kills"] += 1
    else:
        ready = proc.wait_ready()
        if ready.end < expected.must_have:
            proc.fail(f"opened the log ending at {ready.end} < {expected.must_have}")
        if rng.random() < 0.25:  # while it lives, no second writer gets in
            with pytest.raises(LockedError) as refused:
                Log(partition, PARENT_CONFIG)
            assert refused.value.holder_pid == proc.pid
        time.sleep(rng.uniform(0.005, 0.15))
    proc.kill()
    proc.wait_dead()


def test_sigkill_at_random_moments_loses_nothing_flushed(
    tmp_path: Path, fork_server: ForkServer
) -> None:
    root = tmp_path / "data"
    flushed_file = tmp_path / "flushed"
    partition = root / f"{TOPIC}-0"
    expected = Expected()
    stats: Counter[str] = Counter()
    warm_parent(tmp_path)
    began = time.monotonic()
    for n in range(KILLS):
        # each round's plan comes from its own seeded generator, so that it does not depend on
        # what earlier rounds happened to write (the timing does); checks use another one
        rng = random.Random(f"{SEED}:{n}")
        checks = random.Random(f"{SEED}:{n}:checks")
        params = writer_params(rng, root, flushed_file)
        stats[f"profile {params['profile']}"] += 1
        if n in EXEC_ROUNDS:
            proc = exec_writer(params, tmp_path)
            stats["executed writers"] += 1
        else:
            proc = fork_server.start(params)
        try:
            kill_at_random(proc, rng, n not in EXEC_ROUNDS, partition, expected, stats)
        except BaseException:
            proc.ensure_dead()
            raise
        if not proc.killed_by_sigkill():
            proc.fail(f"did not die of SIGKILL (status {proc.status})")
        stats["kills"] += 1
        stats["appends acknowledged"] += proc.appends
        if proc.ready is not None and proc.ready.end < expected.must_have:
            proc.fail(f"opened the log ending at {proc.ready.end} < {expected.must_have}")
        flushed = read_flushed(flushed_file)
        assert flushed <= max(proc.acked, expected.must_have, proc.flushed), "flushed > written"
        expected.must_have = max(expected.must_have, proc.acked, flushed)
        chained, peek, full = rng.random() < 0.2, rng.random() < 0.3, rng.random() < 0.2
        if chained and n + 1 < KILLS:
            stats["chained kills"] += 1  # the next writer recovers this crash itself
            continue
        recover_and_continue(root, peek=peek, full=full, rng=checks, expected=expected, stats=stats)
        stats["recoveries checked"] += 1
    elapsed = time.monotonic() - began
    print(f"\ncrash test: seed {SEED}, {elapsed:.1f} s, final log end {expected.must_have}")
    for key in sorted(stats):
        print(f"  {key}: {stats[key]}")
    assert stats["kills"] == KILLS


def test_writer_lock_is_released_when_the_writer_is_killed(tmp_path: Path) -> None:
    """The writer lock is an fcntl lock: the kernel drops it with the SIGKILLed process, so a
    new writer gets in at once (no stale lock to clean up), and recovers the log."""
    root = tmp_path / "data"
    partition = root / f"{TOPIC}-0"
    params = writer_params(random.Random(SEED), root, tmp_path / "flushed")
    params.update(profile="large", slow_write=True, flush_messages=1)
    proc = exec_writer(params, tmp_path)
    try:
        proc.wait_ready()
        while proc.appends < 2:  # it is appending now
            line = proc.lines.get()
            if line is None or proc._take(line):
                proc.fail("ended while appending")
        assert DirectoryLock.holder(partition) == proc.pid
        with pytest.raises(LockedError) as refused:
            Log(partition, PARENT_CONFIG)
        assert refused.value.holder_pid == proc.pid
        with pytest.raises(LockedError):
            LogDir(root, writable=True).log(TOPIC, 0, config=PARENT_CONFIG)
    finally:
        proc.ensure_dead()
    assert proc.killed_by_sigkill()
    # no retry, no sleep: the lock died with the process
    assert DirectoryLock.holder(partition) is None
    log = Log(partition, PARENT_CONFIG, recovery_point=0)
    try:
        assert log.log_end_offset >= proc.acked
        check_log_at_rest(log)
        end = log.log_end_offset
        Writer(log, random.Random(1), "small", 0.0).step()
        assert next(log.records(end)).offset == end
    finally:
        log.close()
    with LogDir(root, writable=True) as logdir:  # and the next writer after that
        check_log_at_rest(logdir.log(TOPIC, 0, config=PARENT_CONFIG))
