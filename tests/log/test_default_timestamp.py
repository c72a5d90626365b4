"""A record appended through the object API without a timestamp is stamped now, as a producer
stamps it.

``Record.of(b"x")`` has timestamp -1 (Kafka's "no timestamp"). ``Log.append_records`` writes it
with the log's clock in ms, one "now" per call, by every path (one record, several, the general
encoder, ``log.buffered()`` with either drain, ``SharedLog`` with ``durable=True``); the
``BatchingWriter`` uses the same clock. Byte-level encoders and ``Log.append(bytes)`` keep -1,
as a client's bytes and a broker keep it. The clock ticks a second on every read, so a stamp
is checked to lie between the reads before and after the call (whole seconds: exact floats).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import kafkalog.log.buffered as buffered_module
from clirun import kafkalog_here
from kafkalog.index import TimeIndex
from kafkalog.log import Log, TopicConfig
from kafkalog.log.batching_writer import BatchingWriter
from kafkalog.log.group_commit import SharedLog
from kafkalog.log.segment import LogSegment
from kafkalog.records import LogReader, Record, encode_batch, encode_message_set

T0 = 1_700_000_000_000
GIVEN = T0 - 5_000  # a timestamp a caller gives: kept as it is


class TickingClock:
    """Seconds since the epoch, one second later at every read (so each read is a new now)."""

    def __init__(self, now_ms: int = T0, step_ms: int = 1000) -> None:
        self.now_ms = now_ms
        self.step_ms = step_ms

    def __call__(self) -> float:
        self.now_ms += self.step_ms
        return self.now_ms / 1000


def stamped(clock: TickingClock, call: Callable[[], Any]) -> tuple[int, int, Any]:
    """(before, after, result) of ``call``: a stamp it wrote lies in (before, after]."""
    before = clock.now_ms
    result = call()
    return before, clock.now_ms, result


def times(log: Log, start: int = 0) -> list[int]:
    return [r.timestamp for r in log.records(start)]


@pytest.fixture
def clock() -> TickingClock:
    return TickingClock()


@pytest.fixture
def log(tmp_path: Path, clock: TickingClock) -> Iterator[Log]:
    with Log(tmp_path / "events-0", TopicConfig(index_interval_bytes=1), clock=clock) as log:
        yield log


def test_one_record_is_stamped_with_the_logs_clock(log: Log, clock: TickingClock) -> None:
    before, after, info = stamped(clock, lambda: log.append_records([Record.of(b"x")]))
    (ts,) = times(log)
    assert before < ts <= after
    assert info.max_timestamp == ts and info.offset_of_max_timestamp == 0


def test_one_call_of_several_records_gets_one_now_given_ones_kept(
    log: Log, clock: TickingClock
) -> None:
    records = [Record.of(b"a"), Record.of(b"b", timestamp=GIVEN), Record.of(b"c"), Record.of(b"d")]
    before, after, info = stamped(clock, lambda: log.append_records(records))
    got = times(log)
    now = got[0]
    assert before < now <= after
    assert got == [now, GIVEN, now, now]  # one now for the call, the given one untouched
    assert info.max_timestamp == now


def test_the_general_encoder_stamps_too(log: Log, clock: TickingClock) -> None:
    """Compression and batch options take encode_batch, not the small-batch encoder."""
    calls: list[Callable[[], Any]] = [
        lambda: log.append_records(
            [Record.of(b"z"), Record.of(b"y", timestamp=GIVEN)], compression="gzip"
        ),
        lambda: log.append_records([Record.of(b"e")], partition_leader_epoch=3),
        lambda: log.append_records([Record.of(b"h", headers=[("k", b"v")])]),
    ]
    expected: list[tuple[int, int]] = []
    for call in calls:
        before, after, _ = stamped(clock, call)
        expected.append((before, after))
    got = times(log)
    assert got[1] == GIVEN
    for ts, (before, after) in zip([got[0], got[2], got[3]], expected, strict=True):
        assert before < ts <= after
    assert got[0] < got[2] < got[3]  # a new now per call


def test_given_timestamps_ask_for_no_default(
    log: Log, clock: TickingClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call whose records all have timestamps never asks for a "now" (nothing is paid for
    the stamping), in any path; one without asks once per call. A buffered call reads the
    log's clock itself (a frame less than ``default_timestamp``): its reads are counted."""
    asked: list[int] = []
    original = log.default_timestamp

    def spy() -> int:
        asked.append(1)
        return original()

    monkeypatch.setattr(log, "default_timestamp", spy)
    given = [Record.of(b"x", timestamp=GIVEN), Record.of(b"y", timestamp=GIVEN + 1)]
    log.append_records(given[:1])
    log.append_records(given)
    log.append_records(given, compression="gzip")
    with log.buffered():
        at = clock.now_ms
        log.append_records(given[:1])
        log.append_records(given)
        assert clock.now_ms == at  # no clock read by the kept calls
    assert not asked
    assert times(log) == [GIVEN, GIVEN, GIVEN + 1, GIVEN, GIVEN + 1, GIVEN, GIVEN, GIVEN + 1]
    log.append_records([Record.of(b"a"), Record.of(b"b")])
    log.append_records([Record.of(b"a"), Record.of(b"b")], compression="gzip")
    assert len(asked) == 2
    with log.buffered():
        at = clock.now_ms
        log.append_records([Record.of(b"a")])
        log.append_records([Record.of(b"a"), Record.of(b"b")])
        assert clock.now_ms == at + 2 * clock.step_ms  # one read per call
    assert times(log)[-3:] == [at + 1000, at + 2000, at + 2000]


@pytest.mark.parametrize("drain", ["compiled", "python"])
def test_buffered_calls_are_stamped_when_made(
    log: Log, clock: TickingClock, drain: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if drain == "python":
        monkeypatch.setattr(buffered_module, "_numba_loaded", lambda: False)
    taken: list[int] = []
    original = LogSegment.append_run

    def spy(self: LogSegment, *args: Any) -> int:
        n = original(self, *args)
        taken.append(n)
        return n

    monkeypatch.setattr(LogSegment, "append_run", spy)
    calls = 300 if drain == "compiled" else 20
    windows = []
    with log.buffered():
        for i in range(calls):
            if i % 3 == 0:
                records = [Record.of(b"one %d" % i)]
            elif i % 3 == 1:
                records = [Record.of(b"given %d" % i, timestamp=GIVEN)]
            else:  # several records and headers: the buffer's general path
                records = [Record.of(b"m", headers=[("h", b"1")]), Record.of(b"n", timestamp=GIVEN)]
            before, after, info = stamped(clock, lambda r=records: log.append_records(r))
            windows.append((before, after, info, records))
        assert log._writer is not None and log._writer.pending == calls  # all kept
    assert (sum(taken) > 0) == (drain == "compiled")
    got = times(log)
    row = 0
    for before, after, info, records in windows:
        for rec in records:
            if rec.timestamp == -1:
                assert before < got[row] <= after
                assert info.max_timestamp >= got[row]
            else:
                assert got[row] == GIVEN
            row += 1
    assert row == len(got)


def test_buffered_writes_what_the_calls_write_one_at_a_time(tmp_path: Path) -> None:
    """The same calls with the same clock: the same files, stamped or not."""
    logs = []
    for name, buffered in (("one", False), ("buffered", True)):
        clock = TickingClock(step_ms=0)  # the paths read the clock a different number of times
        log = Log(tmp_path / name / "events-0", clock=clock)
        calls = [[Record.of(b"v%d" % i, timestamp=GIVEN if i % 4 == 0 else -1)] for i in range(50)]
        if buffered:
            with log.buffered():
                for c in calls:
                    log.append_records(c)
        else:
            for c in calls:
                log.append_records(c)
        log.close()
        logs.append(log)
    one, buf = (Path(log.directory) for log in logs)
    names = sorted(os.listdir(one))
    assert names == sorted(os.listdir(buf))
    for name in names:
        if name.endswith((".log", ".index", ".timeindex")):
            assert (one / name).read_bytes() == (buf / name).read_bytes(), name


def test_durable_and_shared_appends_are_stamped(tmp_path: Path, clock: TickingClock) -> None:
    with SharedLog(Log(tmp_path / "events-0", clock=clock)) as shared:
        before, after, _ = stamped(
            clock, lambda: shared.append_records([Record.of(b"d")], durable=True)
        )
        shared.append_records([Record.of(b"g", timestamp=GIVEN)], durable=True)
        assert shared.durable_offset == 2
        got = times(shared.log)
    assert before < got[0] <= after and got[1] == GIVEN


def test_the_batching_writer_stamps_with_the_logs_clock(
    tmp_path: Path, clock: TickingClock
) -> None:
    log = Log(tmp_path / "events-0", clock=clock)
    writer = BatchingWriter(log, {"linger.ms": 0})
    before, after, future = stamped(clock, lambda: writer.send(b"s"))
    given = writer.send(b"t", timestamp=GIVEN)
    writer.flush()
    assert (future.result(), given.result()) == (0, 1)
    got = times(log)
    writer.close()
    log.close()
    assert before < got[0] <= after and got[1] == GIVEN


def test_time_index_lookups_and_reads_find_stamped_records(tmp_path: Path) -> None:
    clock = TickingClock()
    directory = tmp_path / "events-0"
    with Log(directory, TopicConfig(index_interval_bytes=1), clock=clock) as log:
        for i in range(10):
            log.append_records([Record.of(b"r%d" % i)])
        stamps = times(log)
        assert stamps == sorted(stamps) and len(set(stamps)) == 10
        found = log.offsets_for_times(stamps[6])
        assert found is not None and (found.offset, found.timestamp) == (6, stamps[6])
        assert log.offsets_for_times(stamps[6] - 1) is not None
        assert log.offsets_for_times(stamps[-1] + 1) is None
    index_path = directory / "00000000000000000000.timeindex"
    with TimeIndex(str(index_path), 0, writable=False) as index:
        entries = [(e.timestamp, e.offset) for e in index]
    assert entries and all(ts == stamps[off] for ts, off in entries)
    assert entries[-1] == (stamps[-1], 9)
    lookup = kafkalog_here("lookup", str(directory), "--timestamp", str(stamps[4]))
    assert lookup.returncode == 0, lookup.stderr
    assert f"entry ({stamps[4]}, 4)" in lookup.stdout
    cat = kafkalog_here("cat", str(directory), "--timestamp", str(stamps[8]))
    assert cat.returncode == 0, cat.stderr
    assert [line.split('"offset": ')[1].split(",")[0] for line in cat.stdout.splitlines()] == [
        "8",
        "9",
    ]


def test_time_retention_sees_stamped_records(tmp_path: Path) -> None:
    """retention.ms judges a segment by its largest timestamp: the stamp, not the mtime."""
    clock = TickingClock()
    config = TopicConfig(retention_ms=60_000, file_delete_delay_ms=0)
    with Log(tmp_path / "events-0", config, clock=clock) as log:
        log.append_records([Record.of(b"old")])
        log.roll()
        log.append_records([Record.of(b"new")])
        assert log.delete_old_segments() == 0  # a few seconds old
        clock.now_ms += 120_000
        log.append_records([Record.of(b"newer")])
        assert log.delete_old_segments() == 1  # by the clock, not by the file's mtime
        assert log.log_start_offset == 1


def test_log_append_time_topics_are_unchanged(tmp_path: Path, clock: TickingClock) -> None:
    config = TopicConfig(message_timestamp_type="LogAppendTime")
    with Log(tmp_path / "events-0", config, clock=clock) as log:
        before, after, _ = stamped(clock, lambda: log.append_records([Record.of(b"x")]))
        (batch,) = log.batches()
        assert before < batch.max_timestamp <= after  # the broker's time, as before
        # the record's own timestamp field stays "none" (-1): its delta from a -1 base is 0
        assert batch.base_timestamp == -1


def test_byte_level_appends_and_encoders_keep_minus_one(log: Log, clock: TickingClock) -> None:
    raw = encode_batch([Record.of(b"raw")])
    (batch,) = LogReader(raw)
    assert batch.max_timestamp == -1 and batch.records()[0].timestamp == -1
    info = log.append(raw)
    assert info.max_timestamp == -1
    assert times(log) == [-1]
    (v1,) = LogReader(encode_message_set([Record.of(b"old")], magic=1))
    assert v1.records()[0].timestamp == -1
    assert Record.of(b"x").timestamp == -1
