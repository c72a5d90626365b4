"""Durability of an embedded log: ``flush.messages``/``flush.ms`` and group commit.

* ``flush.messages=N`` fsyncs (and moves the recovery point) every N records, ``flush.ms``
  after that much time, on an append and, with the flush scheduler, with no append at all;
* ``append(..., durable=True)`` from eight threads returns only after an fsync that covers its
  offsets (``os.fsync`` is wrapped to record what each call covered), and the threads share
  fsyncs: with a slow disk (each fsync made to take 5 ms) far fewer fsyncs than appends;
* a SIGKILL'd process keeps every record a group commit acknowledged: a child appends durably
  from eight threads and reports each acknowledged record; it is killed at a random moment,
  the log reopened (recovered) and every reported record must be there with its bytes.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafkalog.log import Log, TopicConfig
from kafkalog.log.group_commit import SharedLog
from kafkalog.records import Record

HELPERS = Path(__file__).resolve().parent / "helpers"


class FsyncSpy:
    """Wraps ``os.fsync``: counts calls, optionally makes each take ``delay`` seconds."""

    def __init__(self, delay: float = 0.0) -> None:
        self.calls = 0
        self.delay = delay
        self.real = os.fsync

    def __call__(self, fd: int) -> None:
        self.calls += 1
        if self.delay:
            time.sleep(self.delay)
        self.real(fd)


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> Iterator[FsyncSpy]:
    s = FsyncSpy()
    monkeypatch.setattr(os, "fsync", s)
    yield s


def test_flush_messages_fsyncs_every_n_records(tmp_path: Path, spy: FsyncSpy) -> None:
    with Log(tmp_path / "t-0", TopicConfig(flush_messages=3)) as log:
        points = []
        for i in range(7):
            before = spy.calls
            log.append_records([Record.of(b"%d" % i, timestamp=1)])
            points.append((log.recovery_point, spy.calls > before))
        assert [p for p, _ in points] == [0, 0, 3, 3, 3, 6, 6]
        assert [f for _, f in points] == [False, False, True, False, False, True, False]


def test_flush_ms_on_append_and_by_the_scheduler(tmp_path: Path) -> None:
    now = [1000.0]
    log = Log(tmp_path / "t-0", TopicConfig(flush_ms=50), clock=lambda: now[0])
    with SharedLog(log, flush_scheduler=True) as shared:
        shared.append_records([Record.of(b"a", timestamp=1)])
        assert log.recovery_point == 0  # 50 ms have not passed
        now[0] += 0.06
        shared.append_records([Record.of(b"b", timestamp=1)])
        assert log.recovery_point == 2  # flushed by the append: flush.ms had passed
        shared.append_records([Record.of(b"c", timestamp=1)])
        assert log.recovery_point == 2
        now[0] += 0.06  # no append comes: the scheduler flushes within its next wake-up
        deadline = time.monotonic() + 5
        while log.recovery_point < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert log.recovery_point == 3


def test_durable_appends_wait_for_an_fsync_covering_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = Log(tmp_path / "t-0")
    shared = SharedLog(log)
    covered = [0]  # the log end offset when the newest completed fsync started
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        end = log.log_end_offset  # every offset below it was written before this fsync
        time.sleep(0.005)  # a slow disk: appenders pile up behind the fsync
        real_fsync(fd)
        covered[0] = max(covered[0], end)

    monkeypatch.setattr(os, "fsync", fsync)
    appends = 0
    bad: list[tuple[int, int]] = []
    count = threading.Lock()

    def run(t: int) -> None:
        nonlocal appends
        for i in range(40):
            info = shared.append_records([Record.of(b"%d-%d" % (t, i), timestamp=1)], durable=True)
            if covered[0] <= info.last_offset or shared.durable_offset <= info.last_offset:
                bad.append((info.last_offset, covered[0]))
            with count:
                appends += 1

    threads = [threading.Thread(target=run, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not bad, f"acknowledged before an fsync covered them: {bad[:5]}"
    assert appends == 320
    assert shared.fsyncs <= appends // 3, f"{shared.fsyncs} fsyncs for {appends} appends"
    shared.close()
    with Log(tmp_path / "t-0", writable=False) as reader:
        assert reader.log_end_offset == 320


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sigkill_keeps_what_group_commit_acknowledged(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    directory = tmp_path / "events-0"
    acked: dict[int, bytes] = {}
    for _ in range(2):  # the second child continues the log the first one's crash left
        proc = subprocess.Popen(
            [sys.executable, str(HELPERS / "durable_child.py"), str(directory), "8"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == b"READY"
            target = rng.randint(50, 600)
            lines = 0
            while lines < target:
                line = proc.stdout.readline()
                if not line:
                    break
                offset, value = line.decode().split()
                acked[int(offset)] = value.encode()
                lines += 1
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            # acknowledgements already written to the pipe count too; read through the same
            # buffered reader as the lines above (communicate() reads the raw descriptor and
            # would start after what readline() buffered, perhaps inside a line: "12 v" read
            # from "...\n1" + "2 v" once made an acknowledged offset 2 of offset 12's value)
            rest = proc.stdout.read()
            err = proc.stderr.read() if proc.stderr is not None else b""
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert lines == target, err.decode(errors="replace")
        # only whole lines: each is written and flushed whole, but a kill may come mid-write
        for whole in rest.decode().split("\n")[:-1]:
            at, written = whole.split()
            acked[int(at)] = written.encode()
        with Log(directory) as log:  # recovery runs (no clean shutdown)
            stored = {r.offset: r.value for r in log.records()}
            missing = [o for o, v in acked.items() if stored.get(o) != v]
            assert not missing, f"{len(missing)} acknowledged records lost, e.g. {missing[:5]}"
            assert sorted(stored) == list(range(log.log_end_offset))
