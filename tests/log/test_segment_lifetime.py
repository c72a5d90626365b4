"""A segment held by a reader while the log deletes or closes it (issue 11's first fault).

Before: a reader holding a ``LogSegment`` or an index whose log deleted or closed it read
garbage offsets, and with a 2-million-entry index the process died of SIGSEGV. Now: inside
``file.delete.delay.ms`` every read through the held segment gives the answers it gave before
(its files were only renamed ``.deleted``); after the final close every public read path raises
:class:`~kafkalog.errors.ClosedError`. The scenarios run in a child process
(``helpers/held_segment.py``) so that a signal would kill only the child and fail the test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from kafkalog.errors import ClosedError, KafkalogError
from kafkalog.log import Log, TopicConfig
from kafkalog.log.scheduler import Scheduler
from kafkalog.log.segment import LogSegment, SegmentFullError
from kafkalog.records import Record, encode_batch

HELPER = Path(__file__).parent / "helpers" / "held_segment.py"

SEGMENT_PATHS = 20  # public read paths of a segment and its indexes the helper exercises
LOG_PATHS = {"Log.read", "Log.batches", "Log.records", "Log.read_arrow", "Log.offsets_for_times"}


def held(scenario: str, tmp_path: Path) -> dict[str, Any]:
    env = dict(os.environ)
    src = str(Path(__file__).parents[2] / "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [sys.executable, str(HELPER), scenario, str(tmp_path / "events-0")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    # a negative return code is a signal (SIGSEGV, SIGBUS): the fault this file guards against
    assert proc.returncode == 0, f"child ended with {proc.returncode}: {proc.stderr[-3000:]}"
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def only(outcomes: dict[str, str], expected: str) -> None:
    wrong = {name: got for name, got in outcomes.items() if got != expected}
    assert not wrong, f"expected {expected!r} from every read path, got {wrong}"


def test_reads_work_during_the_delete_delay_then_raise_closed(tmp_path: Path) -> None:
    result = held("delay", tmp_path)
    assert len(result["before"]) == SEGMENT_PATHS
    only(result["before"], "same")
    assert result["renamed"]  # every file renamed .deleted at once, as Kafka does
    only(result["during"], "same")  # the held segment answers as before the deletion
    assert result["gone"]  # removed once file.delete.delay.ms passed
    only(result["after"], "closed")
    assert result["original files"] == [False] * 4


def test_delay_zero_deletes_at_once_and_later_reads_raise_closed(tmp_path: Path) -> None:
    result = held("now", tmp_path)
    only(result["before"], "same")
    only(result["after"], "closed")
    assert result["original files"] == [False] * 4


def test_closing_the_log_closes_held_segments_and_the_logs_reads(tmp_path: Path) -> None:
    result = held("close", tmp_path)
    only(result["after"], "closed")
    log_after = result["log after close"]
    assert set(log_after) >= LOG_PATHS
    only({k: v for k, v in log_after.items() if k in LOG_PATHS}, "closed")
    assert result["original files"] == [True] * 4  # closing deletes nothing


def test_close_during_the_delay_leaves_deleted_files_for_the_next_open(tmp_path: Path) -> None:
    result = held("close-during-delay", tmp_path)
    assert result["left"] == [
        "00000000000000000000.index.deleted",
        "00000000000000000000.log.deleted",
        "00000000000000000000.timeindex.deleted",
        "00000000000000000000.txnindex.deleted",
    ]
    only(result["after"], "closed")
    assert result["left after reopen"] == []  # the loader removes them, as Kafka's does


def test_reader_threads_while_the_delayed_deletion_closes_the_segment(tmp_path: Path) -> None:
    result = held("threads", tmp_path)
    counts = result["threads"]
    assert result["others"] == [] and counts["other"] == 0
    assert counts["same"] > 0 and counts["closed"] > 0  # both sides of the close were seen
    assert result["gone"]


# -- in process: the scheduler, the log's deletions, the 2 GiB guard ----------------------------


def test_scheduler_runs_in_due_order_and_cancel_waits_for_a_running_task() -> None:
    scheduler = Scheduler("test-scheduler")
    ran: list[str] = []
    started = threading.Event()
    release = threading.Event()

    def slow() -> None:
        started.set()
        release.wait(5)
        ran.append("slow")

    late = scheduler.schedule("late", 0.1, lambda: ran.append("late"))
    slow_task = scheduler.schedule("slow", 0.0, slow)
    dropped = scheduler.schedule("dropped", 0.05, lambda: ran.append("dropped"))
    assert started.wait(5)
    assert scheduler.cancel(dropped)  # not started: it never runs
    threading.Timer(0.2, release.set).start()
    assert not scheduler.cancel(slow_task)  # running: cancel waits for it, then says it ran
    assert ran[:1] == ["slow"] and slow_task.done
    deadline = time.monotonic() + 5
    while not late.done and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ran == ["slow", "late"] and dropped.cancelled


def test_a_failing_task_is_logged_and_the_scheduler_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    scheduler = Scheduler("test-scheduler-2")
    done = threading.Event()

    def boom() -> None:
        raise RuntimeError("boom")

    scheduler.schedule("boom", 0, boom)
    scheduler.schedule("after", 0.05, done.set)
    assert done.wait(5)
    assert any("boom" in r.getMessage() for r in caplog.records)


def fill(log: Log, n: int) -> None:
    for i in range(n):
        log.append_records([Record.of(b"v" * 100, key=str(i).encode(), timestamp=1_000 + i)])


def test_retention_renames_then_removes_after_the_delay(tmp_path: Path) -> None:
    config = TopicConfig(segment_bytes=700, retention_bytes=1000, file_delete_delay_ms=300)
    log = Log(tmp_path / "events-0", config)
    fill(log, 60)
    first = log.segments[0]
    expected = [b.base_offset for b in first.entries(0)]
    assert log.delete_old_segments() > 0
    names = os.listdir(tmp_path / "events-0")
    assert any(n.endswith(".log.deleted") for n in names)
    assert [b.base_offset for b in first.entries(0)] == expected  # still readable
    deadline = time.monotonic() + 10
    while any(n.endswith(".deleted") for n in os.listdir(tmp_path / "events-0")):
        assert time.monotonic() < deadline, "the delayed deletion never ran"
        time.sleep(0.02)
    with pytest.raises(ClosedError, match=r"00000000000000000000\.log"):
        list(first.entries(0))
    log.close()


def test_append_past_2_gib_is_refused_naming_the_file(tmp_path: Path) -> None:
    config = TopicConfig(segment_bytes=2**31 - 1)
    directory = tmp_path / "big-0"
    directory.mkdir()
    seg = LogSegment(directory, 0, config)
    batch = encode_batch([Record.of(b"x" * 100, timestamp=1)], base_offset=0)
    seg.append(0, 1, 0, batch)
    # the file's logical end just below 2^31-1 (no 2 GiB written: the file is sparse)
    seg.log.size = 2**31 - 1 - len(batch) + 1
    with pytest.raises(SegmentFullError, match=r"00000000000000000000\.log") as info:
        seg.append(1, 2, 1, encode_batch([Record.of(b"x" * 100, timestamp=2)], base_offset=1))
    assert isinstance(info.value, KafkalogError)
    assert "2147483647" in str(info.value)
    seg.log.size = len(batch)  # back to the bytes really written, so close trims nothing else
    seg.close()
