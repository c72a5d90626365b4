"""The fast path of ``Log.append`` (v2 batches to a CreateTime topic, no roll due) against the
general path it short-cuts: the same bytes in every ``.log``, ``.index``, ``.timeindex``,
``.txnindex`` and checkpoint, the same ``AppendInfo`` and the same in-memory state after every
append, and the general path's decision (roll) or error for everything it does not take.

Each scenario runs twice on identical input: once as ``Log.append`` normally runs, once with the
fast path switched off, so every append goes through the general path. A spy counts the appends
that reached the general path, so the comparison cannot pass with the fast path never taken.
"""

from __future__ import annotations

import os
import random
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kafkalog.errors import CorruptRecordError, InvalidRecordError, KafkalogError
from kafkalog.log import Log, TopicConfig
from kafkalog.records import (
    ControlType,
    LogReader,
    Record,
    TimestampType,
    encode_batch,
    encode_control_batch,
)

T0 = 1_700_000_000_000
NOW = T0 + 10_000_000


class Clock:
    def __init__(self, now_ms: int) -> None:
        self.now = now_ms

    def __call__(self) -> float:
        return self.now / 1000


def general_only(log: Log) -> Log:
    """Route every append of ``log`` through the general path (the fast path's parameters are
    what the configuration rules out: None)."""

    def refresh() -> None:
        log._fast_config, log._fast_limits, log._fast_params = log.config, log.limits, None

    log._refresh_fast_params = refresh  # type: ignore[method-assign]
    refresh()
    return log


@pytest.fixture
def general_calls(monkeypatch: pytest.MonkeyPatch) -> dict[int, int]:
    """Appends that reached ``Log._append_general``, per log (by ``id``)."""
    calls: dict[int, int] = {}
    original = Log._append_general

    def spy(self: Log, *args: Any) -> Any:
        calls[id(self)] = calls.get(id(self), 0) + 1
        return original(self, *args)

    monkeypatch.setattr(Log, "_append_general", spy)
    return calls


def pair(tmp_path: Path, clock: Clock | None = None, **config: Any) -> tuple[Log, Log]:
    clock = clock or Clock(NOW)
    fast = Log(tmp_path / "fast" / "events-0", TopicConfig(**config), clock=clock)
    general = general_only(
        Log(tmp_path / "general" / "events-0", TopicConfig(**config), clock=clock)
    )
    return fast, general


def files(log: Log) -> dict[str, bytes]:
    """Every file of the partition but its random topic id and the directory lock."""
    out = {}
    for name in sorted(os.listdir(log.directory)):
        if name in ("partition.metadata", ".lock"):
            continue
        with open(os.path.join(log.directory, name), "rb") as f:
            out[name] = f.read()
    return out


def state(log: Log) -> list[object]:
    """What the appends keep in memory, for each segment and for the log."""
    out: list[object] = [
        log.log_end_offset,
        log.recovery_point,
        log.log_start_offset,
        list(log.leader_epochs.entries) if log.leader_epochs is not None else None,
    ]
    for seg in log.segments:
        oindex, tindex = seg.offset_index.get(), seg.time_index.get()
        out.append(
            (
                seg.base_offset,
                seg.size,
                seg.bytes_since_last_index_entry,
                tuple(seg._max_ts_and_offset),
                seg.rolling_based_timestamp,
                oindex.entries,
                oindex.last_offset,
                tindex.entries,
                tuple(tindex.last_entry),
            )
        )
    return out


def assert_same(fast: Log, general: Log) -> None:
    assert state(fast) == state(general)
    assert files(fast) == files(general)  # open: preallocated indexes, entries in the maps


def close_and_compare(fast: Log, general: Log) -> None:
    assert_same(fast, general)
    fast.close()
    general.close()
    assert files(fast) == files(general)  # closed: indexes trimmed, final time entries


def batch(rng: random.Random, ts: int, *, records: int | None = None, **options: Any) -> bytes:
    n = records if records is not None else rng.choice([1, 2, 5, 20, 60])
    size = rng.choice([10, 100, 400])
    recs = [Record.of(rng.randbytes(size), f"k{i}".encode(), ts + i) for i in range(n)]
    return encode_batch(recs, **options)


def workload(seed: int) -> Iterator[bytes]:
    """Producer appends of every shape the fast path meets: one or several batches, small and
    large, timestamps rising, standing still, going back and absent, leader epochs, codecs."""
    rng = random.Random(seed)
    ts = T0
    epoch = -1
    for _ in range(300):
        kind = rng.random()
        ts += rng.choice([0, 1, 7, 50, 1000])
        stamp = ts if rng.random() > 0.1 else ts - rng.choice([1, 5_000])  # sometimes older
        if rng.random() < 0.03:
            stamp = -1  # no timestamps at all (max timestamp -1)
        if rng.random() < 0.05:
            epoch += 1
        options: dict[str, Any] = {"partition_leader_epoch": epoch}
        if rng.random() < 0.1:
            options["compression"] = rng.choice(["gzip", "zstd"])
        if kind < 0.7:
            yield batch(rng, stamp, **options)
        else:
            yield b"".join(batch(rng, stamp + i, **options) for i in range(rng.choice([2, 3, 8])))


CONFIGS = [
    {},
    {"index_interval_bytes": 100},
    {"index_interval_bytes": 0, "segment_bytes": 30_000},
    {"segment_bytes": 50_000, "segment_index_bytes": 96},  # indexes fill: rolls on that
    {"segment_index_bytes": 96, "index_interval_bytes": 0},  # the time index fills first
    {"segment_index_bytes": 120, "index_interval_bytes": 0},  # the offset index fills first
    {"segment_ms": 2_000, "index_interval_bytes": 1000},  # rolls on record time
    {"flush_messages": 50},
    {"max_message_bytes": 3_000},  # larger batches are refused, on both paths alike
]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: ",".join(c) or "defaults")
@pytest.mark.parametrize("seed", [1, 2])
def test_fast_path_writes_what_the_general_path_writes(
    tmp_path: Path, config: dict[str, Any], seed: int, general_calls: dict[int, int]
) -> None:
    fast, general = pair(tmp_path, **config)
    appends = 0
    for data in workload(seed):
        results = []
        for log in (fast, general):
            try:
                results.append(log.append(data))
            except KafkalogError as e:
                results.append(f"{type(e).__name__}: {e}".replace(log.directory, ""))
        assert results[0] == results[1]
        appends += 1
    assert general_calls[id(general)] == appends
    assert general_calls.get(id(fast), 0) < appends / 2, "the fast path was hardly taken"
    assert len(fast.segments) == len(general.segments)
    close_and_compare(fast, general)


def test_transactions_take_the_general_path(tmp_path: Path, general_calls: dict[int, int]) -> None:
    fast, general = pair(tmp_path, index_interval_bytes=100)
    rng = random.Random(3)
    sends = [
        batch(rng, T0),
        batch(rng, T0 + 1, producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True),
        batch(rng, T0 + 2),
        encode_control_batch(
            ControlType.ABORT, offset=0, timestamp=T0 + 3, producer_id=7, producer_epoch=0
        ),
        batch(rng, T0 + 4),
        batch(rng, T0 + 5),
    ]
    for data in sends:
        origin = "coordinator" if data[22] & 0x20 else "client"
        assert fast.append(data, origin=origin) == general.append(data, origin=origin)
    # the first append of a segment, the transactional batch and its marker
    assert general_calls[id(fast)] == 3
    assert fast.last_stable_offset() == general.last_stable_offset()
    assert fast.active_segment.txn_index.all_aborted_txns() == (
        general.active_segment.txn_index.all_aborted_txns()
    )
    close_and_compare(fast, general)


def test_log_append_time_takes_the_general_path(
    tmp_path: Path, general_calls: dict[int, int]
) -> None:
    fast, general = pair(tmp_path, message_timestamp_type="LogAppendTime")
    rng = random.Random(4)
    for i in range(5):
        data = batch(rng, T0 + i)
        assert fast.append(data) == general.append(data)
    assert general_calls[id(fast)] == 5
    assert {b.max_timestamp for b in fast.batches()} == {NOW}
    assert {b.timestamp_type for b in fast.batches()} == {TimestampType.LOG_APPEND_TIME}
    close_and_compare(fast, general)


def test_a_new_config_is_picked_up(tmp_path: Path) -> None:
    """The fast path reads the configuration once per configuration object: assigning another
    one (here LogAppendTime, then a smaller segment.bytes) takes effect on the next append."""
    fast, general = pair(tmp_path)
    rng = random.Random(5)
    sends = [batch(rng, T0 + i, records=20) for i in range(12)]
    for i, data in enumerate(sends):
        if i == 4:
            for log in (fast, general):
                log.config = TopicConfig(message_timestamp_type="LogAppendTime")
        if i == 8:
            for log in (fast, general):
                log.config = TopicConfig(segment_bytes=2 * len(data))
        assert fast.append(data) == general.append(data)
    stamped = [b.max_timestamp == NOW for b in fast.batches()]
    assert stamped == [False] * 4 + [True] * 4 + [False] * 4
    assert len(fast.segments) == len(general.segments) > 2
    close_and_compare(fast, general)


def test_a_roll_is_decided_by_the_general_path(
    tmp_path: Path, general_calls: dict[int, int]
) -> None:
    fast, general = pair(tmp_path, segment_bytes=10_000, index_interval_bytes=1000)
    rng = random.Random(6)
    for i in range(40):
        data = batch(rng, T0 + i, records=10)  # ~1 KB: a roll every ~9 appends
        assert fast.append(data) == general.append(data)
    assert len(fast.segments) > 3
    # each segment's first append (size 0: the roll's bookkeeping) and each append that rolls
    assert general_calls[id(fast)] <= 2 * len(fast.segments)
    close_and_compare(fast, general)


@pytest.mark.parametrize("multi", [False, True], ids=["one-batch", "three-batches"])
def test_segments_begun_without_a_timestamp_roll_on_the_wall_clock(
    tmp_path: Path, general_calls: dict[int, int], multi: bool
) -> None:
    """A segment whose first batch has no timestamp (-1) rolls on its age by the log's clock
    (Kafka's timeWaitedForRoll: now - created), whatever the later batches' timestamps: the
    fast path takes the appends between rolls and rolls where the general path does."""
    clock = Clock(NOW)
    fast, general = pair(tmp_path, clock, segment_ms=2_000, index_interval_bytes=300)
    rng = random.Random(8)
    for i in range(120):
        stamp = -1 if i % 40 < 25 else T0 + 150 * i  # some segments begun by stamped batches
        count = 3 if multi else 1
        data = b"".join(batch(rng, stamp, records=rng.choice([1, 4])) for _ in range(count))
        assert fast.append(data) == general.append(data)
        assert_same(fast, general)
        clock.now += 150
    rolls = len(fast.segments)
    assert rolls > 5
    assert general_calls[id(fast)] <= 2 * rolls, "the fast path refused -1 segments"
    close_and_compare(fast, general)


def _corrupt(data: bytes, at: int, value: int) -> bytes:
    out = bytearray(data)
    out[at] = value
    return bytes(out)


def bad_inputs() -> list[bytes]:
    rng = random.Random(7)
    good = batch(rng, T0, records=3)
    other = batch(rng, T0 + 1, records=3)
    length = len(good) - 12
    return [
        b"",
        good[:-1],
        good[:60],
        good + b"\0",
        good + other[:-5],
        good + other[:30],
        _corrupt(good, len(good) - 1, good[-1] ^ 1),  # CRC mismatch
        good + _corrupt(other, 30, other[30] ^ 4),  # CRC mismatch in the second batch
        _corrupt(good, 16, 1),  # magic 1 where a v2 batch is
        _corrupt(good, 16, 3),
        _corrupt(good, 16, 0x80),  # a negative magic
        good[:8] + struct.pack(">i", -5) + good[12:],
        good[:8] + struct.pack(">i", 2**31 - 1) + good[12:],
        good[:8] + struct.pack(">i", 20) + good[12:],
        good[:8] + struct.pack(">i", length + 1) + good[12:],
        good[:8] + struct.pack(">i", length - 1) + good[12:],
        bytes(61),
        bytes(200),
        rng.randbytes(61),
        rng.randbytes(500),
    ]


def test_bad_input_raises_what_the_general_path_raises(tmp_path: Path) -> None:
    fast, general = pair(tmp_path, max_message_bytes=2_000)
    rng = random.Random(8)
    for data in (batch(rng, T0, records=2), batch(rng, T0 + 1, records=2)):
        for log in (fast, general):  # not empty: the fast path is live for what follows
            log.append(data)
    oversize = encode_batch([Record.of(bytes(3_000), None, T0 + 2)])
    outcomes: list[object] = []
    for data in [*bad_inputs(), oversize, oversize + batch(rng, T0, records=1)]:
        errors = []
        for log in (fast, general):
            try:
                log.append(data)
                errors.append(None)
            except KafkalogError as e:
                errors.append((type(e), str(e).replace(log.directory, "")))
        assert errors[0] == errors[1], data[:70]
        outcomes.append(errors[0])
    assert None not in outcomes  # a magic 3 batch is refused too, as a broker refuses it
    assert any("magic 2 only" in str(o) for o in outcomes)
    assert files(fast) == files(general)
    assert state(fast) == state(general)
    with pytest.raises(CorruptRecordError, match="CRC"):
        fast.append(bad_inputs()[6])
    with pytest.raises(InvalidRecordError, match=r"max\.message\.bytes"):
        fast.append(oversize)
    close_and_compare(fast, general)


@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview], ids=lambda w: w.__name__)
def test_any_buffer_and_the_callers_bytes_untouched(tmp_path: Path, wrap: Any) -> None:
    fast, general = pair(tmp_path, index_interval_bytes=0)
    rng = random.Random(9)
    for i in range(6):
        data = batch(rng, T0 + i) if i % 2 else batch(rng, T0 + i) + batch(rng, T0 + i)
        sent = wrap(bytearray(data))
        assert fast.append(sent) == general.append(data)
        assert bytes(sent) == data
    for b in LogReader(fast.read(0, 10**6), verify_crc=True):
        assert b.base_offset >= 0
    close_and_compare(fast, general)


def test_flush_ms_on_the_fast_path(tmp_path: Path) -> None:
    clock = Clock(NOW)
    fast, general = pair(tmp_path, clock=clock, flush_ms=1_000)
    rng = random.Random(10)
    points = []
    for i in range(12):
        clock.now += 300
        data = batch(rng, T0 + i)
        assert fast.append(data) == general.append(data)
        points.append((fast.recovery_point, general.recovery_point))
    assert all(a == b for a, b in points)
    assert len({a for a, _ in points}) > 2  # it did flush, more than once
    close_and_compare(fast, general)


def test_follower_and_epoch_appends_take_the_general_path(
    tmp_path: Path, general_calls: dict[int, int]
) -> None:
    fast, general = pair(tmp_path)
    rng = random.Random(11)
    first = batch(rng, T0, records=3)
    for log in (fast, general):
        log.append(first)
    data = batch(rng, T0 + 1, records=3, base_offset=3)
    assert fast.append(data, assign_offsets=False) == general.append(data, assign_offsets=False)
    data = batch(rng, T0 + 2, records=3)
    assert fast.append(data, leader_epoch=4) == general.append(data, leader_epoch=4)
    assert general_calls[id(fast)] == 3
    close_and_compare(fast, general)
