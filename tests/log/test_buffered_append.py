"""``with log.buffered():`` against the same calls made one at a time.

The promise is that buffering changes when records reach the files, never what reaches them:
every scenario runs the same ``append_records`` calls on two logs, one inside ``buffered()``
and one call at a time, and compares every file byte for byte, the in-memory state and every
``AppendInfo``. The scenarios cross what the run writer must get right: rolls by size, by
``segment.ms`` and by a full index, index entries every ``index.interval.bytes``, several
records per call, headers, null keys and values, long values (three-byte varints), timestamps
that go back or are absent, and the drain in plain Python as well as the compiled one. Spies
count the runs the compiled writer took, so the comparison cannot pass without it.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_fast_append import Clock, files, state

import kafkalog.log.buffered as buffered_module
from kafkalog.errors import InvalidRecordError, KafkalogError, ReadOnlyError
from kafkalog.log import Log, TopicConfig
from kafkalog.log.segment import LogSegment
from kafkalog.records import Record
from kafkalog.records.model import Header

T0 = 1_700_000_000_000
NOW = T0 + 10_000_000
SRC = str(Path(__file__).resolve().parents[2] / "src")


def calls(seed: int, count: int, clock: Clock) -> Iterator[list[Record]]:
    """``append_records`` arguments of every shape an embedded log sends, made as time passes
    on ``clock``: a record without a timestamp is stamped with it, near its neighbours' times
    (so that ``segment.ms`` still rolls)."""
    rng = random.Random(seed)
    ts = T0
    for _ in range(count):
        shape = rng.random()
        ts += rng.choice([0, 0, 1, 7, 250, -40])
        clock.now = ts + 3
        if shape < 0.7:  # the common call: one small record
            yield [Record.of(rng.randbytes(rng.choice([0, 20, 63, 64, 100])), timestamp=ts)]
        elif shape < 0.78:
            key = rng.choice([None, b"", b"k" * rng.choice([1, 63, 64, 300])])
            value = rng.choice([None, b"v" * rng.choice([1, 8190, 8192, 12_000])])
            yield [Record.of(value, key=key, timestamp=rng.choice([ts, -1]))]
        elif shape < 0.86:
            n = rng.choice([2, 3, 70])
            yield [
                Record.of(rng.randbytes(30), key=b"%d" % i, timestamp=ts + rng.randrange(-5, 5))
                for i in range(n)
            ]
        elif shape < 0.93:
            headers = [("trace", rng.randbytes(8)), ("é" * rng.choice([1, 40]), None)]
            yield [Record.of(rng.randbytes(50), timestamp=ts, headers=headers)]
        else:
            yield [Record.of(b"late", timestamp=ts - 1_000_000)]


def run_pair(
    tmp_path: Path, seed: int, count: int, *, max_bytes: int = 1 << 20, **config: Any
) -> tuple[Log, Log, list[Any], list[Any]]:
    clock = Clock(NOW)
    one = Log(tmp_path / "one" / "events-0", TopicConfig(**config), clock=clock)
    buf = Log(tmp_path / "buffered" / "events-0", TopicConfig(**config), clock=clock)
    one_infos = [one.append_records(c) for c in calls(seed, count, clock)]
    with buf.buffered(max_bytes=max_bytes):
        buf_infos = [buf.append_records(c) for c in calls(seed, count, clock)]
    return one, buf, one_infos, buf_infos


def assert_same(one: Log, buf: Log) -> None:
    assert state(buf) == state(one)
    assert files(buf) == files(one)
    one.close()
    buf.close()
    assert files(buf) == files(one)


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Batches each compiled run took (LogSegment.append_run), to prove the runs happened."""
    taken: list[int] = []
    original = LogSegment.append_run

    def spy(self: LogSegment, *args: Any) -> int:
        n = original(self, *args)
        taken.append(n)
        return n

    monkeypatch.setattr(LogSegment, "append_run", spy)
    return taken


@pytest.mark.parametrize(
    "config",
    [
        {},  # one segment, an index entry every 4096 bytes
        {"segment_bytes": 32 * 1024, "index_interval_bytes": 300},  # many rolls and entries
        {"segment_bytes": 64 * 1024, "index_interval_bytes": 1},  # an entry for every batch
        {"segment_index_bytes": 8 * 40, "index_interval_bytes": 100},  # rolls on a full index
        {"segment_ms": 4000},  # rolls on record time
        {"segment_jitter_ms": 300, "segment_ms": 4000},
    ],
)
@pytest.mark.parametrize("seed", [1, 2])
def test_buffered_calls_write_what_single_calls_write(
    tmp_path: Path,
    runs: list[int],
    config: dict[str, Any],
    seed: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the same jitter for both logs' segments (Kafka draws it at random per segment)
    monkeypatch.setattr(
        TopicConfig,
        "random_segment_jitter",
        lambda self, rng=None: min(self.segment_jitter_ms, 233),
    )
    one, buf, one_infos, buf_infos = run_pair(tmp_path, seed, 3000, **config)
    assert buf_infos == one_infos
    assert sum(runs) > 1500  # most batches went through the compiled runs
    assert len(buf.segments) == len(one.segments)
    if config.get("index_interval_bytes", 4096) < 4096 or "segment_ms" in config:
        assert len(one.segments) > 5  # the scenario rolls (by size, full index or time)
    assert_same(one, buf)


def test_small_max_bytes_drains_often(tmp_path: Path, runs: list[int]) -> None:
    one, buf, one_infos, buf_infos = run_pair(
        tmp_path, 3, 2000, max_bytes=2000, segment_bytes=32 * 1024
    )
    assert buf_infos == one_infos
    assert len(runs) > 50
    assert_same(one, buf)


def test_the_python_drain_writes_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Few calls in a process without numba loaded are encoded in Python: same files."""
    monkeypatch.setattr(buffered_module, "_numba_loaded", lambda: False)
    taken: list[int] = []

    def no_run(*args: Any) -> int:
        taken.append(1)
        return 0

    monkeypatch.setattr(LogSegment, "append_run", no_run)
    one, buf, one_infos, buf_infos = run_pair(
        tmp_path, 4, 255, segment_bytes=32 * 1024, index_interval_bytes=200
    )
    assert buf_infos == one_infos
    assert not taken
    assert_same(one, buf)


def test_a_short_buffered_block_does_not_load_numba(tmp_path: Path) -> None:
    """A script's few buffered appends must not pay for loading the compiled kernels."""
    code = textwrap.dedent(
        f"""
        import sys
        from kafkalog.log import Log
        from kafkalog.records import Record
        log = Log({str(tmp_path / "e-0")!r})
        with log.buffered():
            for i in range(100):
                log.append_records([Record.of(b"x%d" % i)])
        assert log.log_end_offset == 100
        log.close()
        print("numba" in sys.modules)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": SRC},
        check=True,
    )
    assert out.stdout.strip() == "False"


def test_reads_and_other_changes_write_what_is_kept_first(tmp_path: Path) -> None:
    log = Log(tmp_path / "events-0", TopicConfig(segment_bytes=4096))
    with log.buffered():
        for i in range(300):
            log.append_records([Record.of(b"r%d" % i, timestamp=T0 + i)])
        assert log.log_end_offset == 0  # kept: not in the files yet
        assert [r.offset for r in log.records(297)] == [297, 298, 299]
        assert log.log_end_offset == 300
        log.append_records([Record.of(b"more", timestamp=T0 + 300)])
        found = log.offsets_for_times(T0 + 300)
        assert found is not None and found.offset == 300
        log.append_records([Record.of(b"a", timestamp=T0 + 301)])
        log.append_records([Record.of(b"zipped", timestamp=T0 + 302)], compression="gzip")
        assert log.log_end_offset == 303  # the kept one first, then the compressed one
        log.append_records([Record.of(b"b", timestamp=T0 + 303)])
        log.truncate_to(302)  # what was kept is written, then cut
        info = log.append_records([Record.of(b"after", timestamp=T0 + 304)])
        assert info.first_offset == 302  # offsets follow the truncated end
        log.append_records([Record.of(b"c", timestamp=T0 + 305)])
        log.flush()
        assert log.recovery_point == 304
    values = [r.value for r in log.records(299)]
    assert values == [b"r299", b"more", b"a", b"after", b"c"]
    log.close()


def test_an_exception_in_the_block_still_writes_what_was_appended(tmp_path: Path) -> None:
    log = Log(tmp_path / "events-0")
    with pytest.raises(RuntimeError), log.buffered():
        log.append_records([Record.of(b"kept")])
        raise RuntimeError("the caller's own error")
    assert log.log_end_offset == 1
    log.close()


def test_bad_calls_fail_as_they_do_unbuffered_and_lose_nothing(tmp_path: Path) -> None:
    log = Log(tmp_path / "events-0", TopicConfig(max_message_bytes=1000))
    with log.buffered():
        log.append_records([Record.of(b"before")])
        with pytest.raises(InvalidRecordError):
            log.append_records([Record.of(b"x" * 2000)])  # larger than max.message.bytes
        with pytest.raises(InvalidRecordError):
            log.append_records([Record.of(b"x", timestamp=-5)])
        with pytest.raises(TypeError):
            log.append_records([Record.of("text", timestamp=T0)])  # type: ignore[arg-type]
        log.append_records([Record.of(b"after")])
    assert [r.value for r in log.records()] == [b"before", b"after"]
    log.close()


def test_buffered_needs_a_writable_log_and_nests(tmp_path: Path) -> None:
    log = Log(tmp_path / "events-0")
    with pytest.raises(ValueError), log.buffered(max_bytes=0):
        pass
    with log.buffered():
        log.append_records([Record.of(b"outer")])
        with log.buffered():
            log.append_records([Record.of(b"inner")])
        assert log.log_end_offset == 0  # the inner block is part of the outer one
    assert log.log_end_offset == 2
    log.close()
    reader = Log(tmp_path / "events-0", writable=False)
    with pytest.raises(ReadOnlyError), reader.buffered():
        pass
    reader.close()


def test_log_append_time_topics_are_not_buffered(tmp_path: Path) -> None:
    """A LogAppendTime topic stamps each batch at its append: nothing is kept."""
    clock = Clock(NOW)
    log = Log(
        tmp_path / "events-0", TopicConfig(message_timestamp_type="LogAppendTime"), clock=clock
    )
    with log.buffered():
        log.append_records([Record.of(b"a", timestamp=T0)])
        assert log.log_end_offset == 1
    assert next(log.batches()).max_timestamp == NOW
    log.close()


def test_headers_and_several_records_read_back(tmp_path: Path) -> None:
    log = Log(tmp_path / "events-0")
    with log.buffered():
        info = log.append_records(
            [
                Record.of(b"v1", key=b"k", timestamp=T0, headers=[("h", b"1"), ("n", None)]),
                Record.of(None, key=None, timestamp=T0 + 5),
            ]
        )
    assert (info.first_offset, info.last_offset, info.max_timestamp) == (0, 1, T0 + 5)
    got = list(log.records())
    assert got[0].headers == (Header("h", b"1"), Header("n", None))
    assert (got[1].key, got[1].value, got[1].timestamp) == (None, None, T0 + 5)
    log.close()


def test_buffered_offsets_mismatch_is_refused(tmp_path: Path) -> None:
    """The guard that the kept calls start at the log end: a change behind the log's back
    (here simulated) is an error, not records written at other offsets than promised."""
    log = Log(tmp_path / "events-0")
    with pytest.raises(KafkalogError, match="given offsets from 0"), log.buffered():
        log.append_records([Record.of(b"a")])
        log.log_end_offset = 5
    log.log_end_offset = 0
    log.close()


CRASH_CHILD = """
import sys, time
from kafkalog.log import Log, TopicConfig
from kafkalog.records import Record
log = Log(sys.argv[1], TopicConfig(segment_bytes=64 * 1024))
with log.buffered(max_bytes=20_000):
    for i in range(5000):
        log.append_records([Record.of(b"record %d" % i, timestamp=1700000000000 + i)])
    print(log.log_end_offset, flush=True)  # what the drains wrote; 5000 - that is kept
    time.sleep(60)
"""


def test_sigkill_loses_only_what_was_kept(tmp_path: Path) -> None:
    """Killed inside the block: what the drains wrote is there after recovery, what was kept
    is gone (as an uncommitted transaction is), and the log reopens clean and appendable."""
    directory = tmp_path / "events-0"
    child = subprocess.Popen(
        [sys.executable, "-c", CRASH_CHILD, str(directory)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": SRC},
    )
    try:
        assert child.stdout is not None
        written = int(child.stdout.readline())
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert 0 < written < 5000
    log = Log(directory)
    assert log.log_end_offset == written
    assert [r.value for r in log.records(written - 1)] == [b"record %d" % (written - 1)]
    for seg in log.segments:  # every index entry points into the file
        for entry in seg.offset_index.get():
            assert entry.position < seg.size
    log.append_records([Record.of(b"next")])
    assert log.log_end_offset == written + 1
    log.close()
