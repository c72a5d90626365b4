"""The log cleaner against the scenarios of Kafka's LogCleanerTest and LogCleanerManagerTest
(their facts, written anew): keys, tombstones and their delete horizon (KIP-534), aborted
transactions, markers, producers' last batches, the round's last batch, groups, the cleaner
checkpoint, the dirty section's bounds (active segment, min.compaction.lag.ms, last stable
offset), the dirty ratio, compression and LogAppendTime kept, and kafka-python as an
independent decoder of what was written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kafkalog.errors import DamagedLogError
from kafkalog.index.txn_index import AbortedTxn
from kafkalog.log import Log, LogDir, TopicConfig
from kafkalog.log.checkpoints import OffsetCheckpoint
from kafkalog.log.cleaner import (
    CleanerOptions,
    OffsetMap,
    clean_filthiest,
    dirty_section_of,
    read_checkpoint,
)
from kafkalog.records import Record, RecordBatch, encode_batch
from kafkalog.records.batch import ATTR_DELETE_HORIZON, encode_control_batch
from kafkalog.records.model import ControlType
from kafkalog.records.types import Compression, TimestampType

DAY = 86_400_000


def config(**kw: object) -> TopicConfig:
    base: dict[str, object] = {
        "cleanup_policy": "compact",
        "segment_bytes": 1024,
        "file_delete_delay_ms": 0,
        "delete_retention_ms": 1000,
    }
    base.update(kw)
    return TopicConfig(**base)  # type: ignore[arg-type]


def open_log(tmp_path: Path, **kw: object) -> Log:
    return Log(tmp_path / "data" / "t-0", config(**kw))


def put(log: Log, key: bytes | None, value: bytes | None, ts: int = 1000) -> int:
    if key is None:
        # a keyless record: only a follower's append (or a policy changed later) brings one
        # into a compacted topic; a client's is refused
        batch = encode_batch([Record(-1, ts, key, value)], base_offset=log.log_end_offset)
        return log.append(batch, assign_offsets=False).first_offset
    return log.append_records([Record(-1, ts, key, value)]).first_offset


class Producer:
    """An idempotent or transactional producer: sequences as a client numbers them."""

    def __init__(self, log: Log, pid: int, epoch: int = 0) -> None:
        self.log, self.pid, self.epoch, self.seq = log, pid, epoch, 0

    def send(self, records: list[tuple[bytes | None, bytes | None]], txn: bool = False) -> int:
        batch = encode_batch(
            [Record(-1, 1000, k, v) for k, v in records],
            producer_id=self.pid,
            producer_epoch=self.epoch,
            base_sequence=self.seq,
            is_transactional=txn,
        )
        self.seq += len(records)
        return self.log.append(batch).first_offset

    def end(self, commit: bool) -> int:
        kind = ControlType.COMMIT if commit else ControlType.ABORT
        marker = encode_control_batch(
            kind, offset=0, timestamp=1000, producer_id=self.pid, producer_epoch=self.epoch
        )
        return self.log.append(marker, origin="coordinator").first_offset


def latest(log: Log) -> dict[bytes | None, bytes | None]:
    return {r.key: r.value for r in log.records()}


def batches(log: Log) -> list[RecordBatch]:
    out = []
    for seg in log.segments:
        for b in seg.entries(0):
            assert isinstance(b, RecordBatch)
            out.append(b)
    return out


def offsets(log: Log) -> list[int]:
    return [r.offset for r in log.records(include_control=True)]


def test_only_the_latest_record_of_each_key_stays_with_its_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for i in range(60):
        put(log, b"k%d" % (i % 7), b"v%d" % i)
    log.roll()
    put(log, b"k0", b"active")  # the active segment is never cleaned
    result = log.compact(now=5000)
    kept = [(r.offset, r.key, r.value) for r in log.records()]
    assert kept == [(53 + i, b"k%d" % ((53 + i) % 7), b"v%d" % (53 + i)) for i in range(7)] + [
        (60, b"k0", b"active")
    ]
    assert result.end_offset == 60 and result.stats.records_superseded == 53
    assert read_checkpoint(str(tmp_path / "data")) == {("t", 0): 60}
    log.close()
    with Log(tmp_path / "data" / "t-0", config()) as again:  # what it left loads the same
        assert [(r.offset, r.key, r.value) for r in again.records()] == kept


def test_checkpoint_is_kafkas_file_and_the_next_cleaning_starts_there(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for i in range(20):
        put(log, b"a", b"%d" % i)
    log.roll()
    log.compact(now=5000)
    path = tmp_path / "data" / "cleaner-offset-checkpoint"
    assert path.read_bytes() == b"0\n1\nt 0 20\n"
    assert dirty_section_of(log, 5000).first_dirty == 20
    assert dirty_section_of(log, 5000).cleanable_bytes == 0
    # a checkpoint past the log end (the log was cut) is reset to the log start
    OffsetCheckpoint.write(path, {("t", 0): 10_000})
    section = dirty_section_of(log, 5000)
    assert section.first_dirty == log.log_start_offset and section.checkpoint_reset
    log.close()


def test_tombstone_gets_a_delete_horizon_and_goes_after_it(tmp_path: Path) -> None:
    log = open_log(tmp_path, delete_retention_ms=DAY)
    put(log, b"a", b"1")
    put(log, b"b", b"1")
    put(log, b"a", None)  # the tombstone
    log.roll()
    log.compact(now=10_000)
    tomb = next(b for b in batches(log) if b.base_offset == 2)
    # KIP-534: the batch holding a tombstone is rewritten with the horizon as its base
    # timestamp and the horizon attribute bit, the record's timestamp kept through its delta
    assert tomb.attributes & ATTR_DELETE_HORIZON
    assert tomb.delete_horizon_ms == 10_000 + DAY
    assert tomb.records()[0].timestamp == 1000 and tomb.records()[0].value is None
    assert latest(log) == {b"a": None, b"b": b"1"}
    # before the horizon a later cleaning keeps it; after it, the next cleaning drops it
    put(log, b"c", b"1")
    log.roll()
    log.compact(now=10_000 + DAY - 1)
    assert latest(log) == {b"a": None, b"b": b"1", b"c": b"1"}
    put(log, b"d", b"1")
    log.roll()
    result = log.compact(now=10_000 + DAY)
    assert latest(log) == {b"b": b"1", b"c": b"1", b"d": b"1"}
    assert result.stats.tombstones_removed == 1
    log.close()


def test_record_without_key_is_removed_and_round_keeps_its_last_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    put(log, b"a", b"1")
    put(log, None, b"no key")  # the last batch before the first uncleanable offset
    log.roll()
    log.compact(now=5000)
    found = batches(log)
    assert [(b.base_offset, b.records_count) for b in found] == [(0, 1), (1, 0)]
    assert log.log_end_offset == 2 and offsets(log) == [0]
    log.close()


def test_aborted_transaction_goes_and_its_marker_stays_until_its_horizon(tmp_path: Path) -> None:
    log = open_log(tmp_path, delete_retention_ms=DAY)
    p = Producer(log, pid=7)
    put(log, b"k", b"before")
    p.send([(b"k", b"aborted")], txn=True)  # 1
    p.end(commit=False)  # 2
    put(log, b"x", b"1")  # 3
    p.send([(b"z", b"1")])  # 4: the producer's last data batch is a later one
    log.roll()
    entry = AbortedTxn(7, 1, 2, 3)  # the LSO once it ended: the log end then
    assert log.aborted_transactions(0, 5) == [entry]
    log.compact(now=10_000)
    # the aborted record is gone, "before" is the key's value again; the marker stays while
    # this cleaning saw a batch of its transaction, and so does its .txnindex entry
    assert latest(log) == {b"k": b"before", b"x": b"1", b"z": b"1"}
    assert [b.base_offset for b in batches(log)] == [0, 2, 3, 4]
    assert log.aborted_transactions(0, 5) == [entry]
    # the next cleaning finds the transaction empty: the marker gets a horizon, the entry goes
    put(log, b"y", b"1")
    log.roll()
    log.compact(now=20_000)
    marker = next(b for b in batches(log) if b.is_control)
    assert marker.delete_horizon_ms == 20_000 + DAY and marker.records_count == 1
    assert marker.producer_id == 7 and marker.is_transactional
    assert log.aborted_transactions(0, 6) == []
    put(log, b"w", b"1")
    log.roll()
    log.compact(now=20_000 + DAY)
    assert not [b for b in batches(log) if b.is_control]
    log.close()


def test_aborted_batch_that_is_the_producers_last_stays_empty(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    p = Producer(log, pid=8, epoch=2)
    p.send([(b"k", b"aborted")], txn=True)  # 0: the producer's last data batch
    p.end(commit=False)  # 1
    put(log, b"x", b"1")
    log.roll()
    log.compact(now=5000)
    found = [
        (b.base_offset, b.records_count, b.producer_id, b.is_transactional) for b in batches(log)
    ]
    assert found == [(0, 0, 8, True), (1, 1, 8, True), (2, 1, -1, False)]
    assert latest(log) == {b"x": b"1"}
    log.close()


def test_spent_marker_of_a_retired_producer_goes_after_its_horizon(tmp_path: Path) -> None:
    log = open_log(tmp_path, delete_retention_ms=1000)
    p = Producer(log, pid=9)
    p.send([(b"k", b"1")], txn=True)
    p.end(commit=True)
    log.roll()
    put(log, b"k", b"2")  # supersedes the transaction's only record
    log.roll()
    # the producer expired (no longer active): its batches need not stay
    assert log.producer_state.remove_expired_producers(10**12) == [9]
    log.compact(now=10_000)
    # this cleaning still walked a batch of the transaction: the COMMIT marker stays as it is
    marker = [b for b in batches(log) if b.is_control]
    assert len(marker) == 1 and marker[0].delete_horizon_ms is None
    put(log, b"z", b"1")
    log.roll()
    log.compact(now=10_000)  # the transaction is empty now: the marker gets its horizon
    marker = [b for b in batches(log) if b.is_control]
    assert len(marker) == 1 and marker[0].delete_horizon_ms == 11_000
    put(log, b"y", b"1")
    log.roll()
    result = log.compact(now=11_000)
    assert not [b for b in batches(log) if b.is_control] and result.stats.markers_removed == 1
    assert latest(log) == {b"k": b"2", b"z": b"1", b"y": b"1"}
    log.close()


def test_producers_last_batch_stays_empty_with_its_producer_fields(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    p = Producer(log, pid=42, epoch=3)
    p.send([(b"k", b"1"), (b"j", b"1")])
    p.send([(b"k", b"2"), (b"j", b"2")])  # offsets 2-3, sequences 2-3
    put(log, b"k", b"3")
    put(log, b"j", b"3")
    log.roll()
    before = log.producer_state.last_entry(42)
    assert before is not None and before.last_seq == 3
    log.compact(now=5000)
    empty = [b for b in batches(log) if b.producer_id == 42]
    assert [(b.base_offset, b.last_offset, b.records_count) for b in empty] == [(2, 3, 0)]
    b = empty[0]
    assert (b.producer_epoch, b.base_sequence, b.base_timestamp, b.compression) == (
        3,
        2,
        -1,
        Compression.NONE,
    )
    assert b.is_valid()
    log.close()
    with Log(tmp_path / "data" / "t-0", config()) as again:
        entry = again.producer_state.last_entry(42)
        assert entry is not None and (entry.last_seq, entry.producer_epoch) == (3, 3)
        # the retry of the producer's last batch is still answered as a duplicate
        retry = encode_batch(
            [Record(-1, 1000, b"k", b"2"), Record(-1, 1000, b"j", b"2")],
            producer_id=42,
            producer_epoch=3,
            base_sequence=2,
        )
        info = again.append(retry)
        assert info.duplicate and (info.first_offset, info.last_offset) == (2, 3)


def test_partly_kept_batch_is_rebuilt_like_kafkas_builder(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=100_000)
    recs = [Record(-1, 1000 + i, b"k%d" % i, b"v%d" % i) for i in range(5)]
    log.append(encode_batch(recs, compression=Compression.GZIP, partition_leader_epoch=4))
    put(log, b"k0", b"new", ts=2000)
    put(log, b"k3", b"new", ts=2000)
    log.roll()
    log.compact(now=5000)
    b = batches(log)[0]
    # base offset, last offset (delta 4), codec and leader epoch kept; 3 records; the first
    # kept record's timestamp is the new base timestamp
    assert (b.base_offset, b.last_offset, b.records_count) == (0, 4, 3)
    assert (b.compression, b.partition_leader_epoch, b.base_timestamp, b.max_timestamp) == (
        Compression.GZIP,
        4,
        1001,
        1004,
    )
    assert [(r.offset, r.timestamp, r.key) for r in b.records()] == [
        (1, 1001, b"k1"),
        (2, 1002, b"k2"),
        (4, 1004, b"k4"),
    ]
    assert b.is_valid() and not b.has_delete_horizon
    # the same bytes the record layer's own encoder writes for these records
    expect = encode_batch(
        [
            Record(o, t, k, v)
            for o, t, k, v in [
                (1, 1001, b"k1", b"v1"),
                (2, 1002, b"k2", b"v2"),
                (4, 1004, b"k4", b"v4"),
            ]
        ],
        base_offset=0,
        compression=Compression.GZIP,
        partition_leader_epoch=4,
    )
    assert b.records() == RecordBatch.parse(expect).records()
    log.close()


def test_log_append_time_batches_keep_their_time(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=100_000)
    recs = [Record(-1, 5, b"a", b"1"), Record(-1, 6, b"b", b"1")]
    log.append(  # as a follower copies it (a client's LogAppendTime is the broker's to set)
        encode_batch(recs, timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=777),
        assign_offsets=False,
    )
    put(log, b"a", b"2")
    log.roll()
    log.compact(now=5000)
    b = batches(log)[0]
    assert b.timestamp_type is TimestampType.LOG_APPEND_TIME and b.max_timestamp == 777
    assert [(r.key, r.timestamp) for r in b.records()] == [(b"b", 777)]
    log.close()


def test_open_transaction_stops_the_dirty_section(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    put(log, b"a", b"1")
    log.roll()
    p = Producer(log, pid=5)
    p.send([(b"a", b"open")], txn=True)  # offset 1, still open
    log.roll()
    put(log, b"a", b"3")
    log.roll()
    section = dirty_section_of(log, 5000)
    assert log.last_stable_offset() == 1 and section.first_uncleanable == 1
    log.compact(now=5000)
    assert offsets(log) == [0, 1, 2]  # nothing past the open transaction's segment judged
    log.close()


def test_min_compaction_lag_keeps_recent_segments_dirty(tmp_path: Path) -> None:
    log = open_log(tmp_path, min_compaction_lag_ms=1000)
    put(log, b"a", b"old", ts=1000)
    log.roll()
    put(log, b"a", b"recent", ts=9500)
    log.roll()
    put(log, b"a", b"active", ts=9900)
    assert dirty_section_of(log, 10_000).first_uncleanable == 1
    log.compact(now=10_000)
    assert offsets(log) == [0, 1, 2]
    assert dirty_section_of(log, 11_000).first_uncleanable == 2
    log.compact(now=11_000)
    assert offsets(log) == [1, 2]
    log.close()


def test_groups_merge_segments_that_fit_one(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=400)
    for i in range(30):
        put(log, b"k%d" % (i % 3), b"v%d" % i)
    log.roll()
    assert len(log.segments) > 5
    before = [s.base_offset for s in log.segments]
    log.compact(now=5000)
    # groups are made of the segments as they were (each was full): one cleaned segment for
    # each, most of them empty now (as a broker leaves them, see the 0.9 fixture)
    assert [s.base_offset for s in log.segments] == before
    assert offsets(log) == [27, 28, 29]
    put(log, b"k0", b"new")
    log.roll()
    result = log.compact(now=5000)
    # the next cleaning finds them small: one group, one segment (+ the active one)
    assert [s.base_offset for s in log.segments] == [0, 31]
    assert result.segments_before > result.segments_after == 2
    assert offsets(log) == [28, 29, 30]
    names = sorted(os.listdir(tmp_path / "data" / "t-0"))
    assert not [n for n in names if n.endswith((".cleaned", ".swap", ".deleted"))]
    log.close()


def test_offset_map_full_cleans_in_several_rounds(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=100_000)
    for rep in range(3):
        for i in range(100):
            put(log, b"k%03d" % i, b"%d" % rep)
    log.roll()
    # 64 slots at 24 bytes, load factor 0.5: 32 keys a round
    result = log.compact(
        now=5000, options=CleanerOptions(dedupe_buffer_size=64 * 24, load_factor=0.5)
    )
    assert result.rounds > 1
    assert latest(log) == {b"k%03d" % i: b"2" for i in range(100)}
    assert len(offsets(log)) == 100
    log.close()


def test_offset_map_is_bounded_and_keeps_the_latest_offset() -> None:
    m = OffsetMap(1024 * 24, load_factor=0.75)
    assert m.slots == 1024
    for i in range(700):
        assert m.put(b"key%d" % i, i)
    assert m.put(b"key5", 900) and m.get(b"key5") == 900 and m.get(b"nope") == -1
    assert m.latest_offset == 900 and m.size == 700
    for i in range(700, 768):
        assert m.put(b"key%d" % i, i)
    assert not m.put(b"one more", 1000)  # 768 = 1024 x 0.75: full
    assert m.memory_in_use <= 1024 * 24


def test_clean_filthiest_picks_the_dirtiest_past_its_ratio(tmp_path: Path) -> None:
    cfg = config(min_cleanable_dirty_ratio=0.5)
    with LogDir(tmp_path / "d", writable=True) as d:
        a = d.log("a", 0, create=True, config=cfg)
        b = d.log("b", 0, create=True, config=cfg)
        d.log("plain", 0, create=True)  # cleanup.policy=delete: never cleaned
        for i in range(10):
            put(a, b"k", b"%d" % i)
            put(b, b"k%d" % i, b"%d" % i)
        a.roll()
        b.roll()
        configs = {"a": cfg, "b": cfg, "plain": TopicConfig()}
        first = d.clean_filthiest(configs.get, now=5000)
        second = d.clean_filthiest(configs.get, now=5000)
        third = d.clean_filthiest(configs.get, now=5000)
    assert first is not None and second is not None and third is None
    assert {(first.topic, second.topic)} == {("a", "b")} or {first.topic, second.topic} == {
        "a",
        "b",
    }
    assert read_checkpoint(str(tmp_path / "d")) == {("a", 0): 10, ("b", 0): 10}


def test_clean_filthiest_leaves_a_log_below_its_ratio(tmp_path: Path) -> None:
    cfg = config(min_cleanable_dirty_ratio=0.9)
    with LogDir(tmp_path / "d", writable=True) as d:
        a = d.log("a", 0, create=True, config=cfg)
        for i in range(10):
            put(a, b"k", b"%d" % i)
        a.roll()
        a.compact(now=5000)
        put(a, b"k", b"new")
        a.roll()  # a little dirty data over a clean log: ratio well below 0.9
        assert 0 < dirty_section_of(a, 5000).dirty_ratio < 0.9
        assert clean_filthiest([a], now=5000) is None
        # max.compaction.lag.ms overdue: cleaned whatever the ratio
        a.config = config(min_cleanable_dirty_ratio=0.9, max_compaction_lag_ms=1)
        assert clean_filthiest([a], now=5000) is not None


def test_compact_delete_also_runs_retention(tmp_path: Path) -> None:
    log = open_log(tmp_path, cleanup_policy="compact,delete", retention_ms=1000, segment_bytes=200)
    for i in range(10):
        put(log, b"k%d" % i, b"v", ts=1000)
    log.roll()
    put(log, b"new", b"v", ts=100_000)
    result = log.compact(now=100_000)
    assert result.deleted_segments >= 1 and offsets(log) == [10]
    log.close()


def test_damaged_batch_stops_the_cleaning_and_changes_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    put(log, b"a", b"1")
    put(log, b"a", b"2")
    log.roll()
    path = log.segments[0].log.path
    data = bytearray(Path(path).read_bytes())
    data[-1] ^= 0xFF  # a value byte of the second batch: its CRC no longer matches
    Path(path).write_bytes(bytes(data))
    with pytest.raises(DamagedLogError):
        log.compact(now=5000)
    assert Path(path).read_bytes() == bytes(data)
    assert not [n for n in os.listdir(os.path.dirname(path)) if n.endswith(".cleaned")]
    log.close()


def test_dry_run_writes_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for i in range(10):
        put(log, b"k", b"%d" % i)
    log.roll()
    before = {
        n: (tmp_path / "data" / "t-0" / n).read_bytes()
        for n in os.listdir(tmp_path / "data" / "t-0")
    }
    result = log.compact(now=5000, dry_run=True)
    assert result.stats.records_superseded == 9 and result.size_after < result.size_before
    after = {
        n: (tmp_path / "data" / "t-0" / n).read_bytes()
        for n in os.listdir(tmp_path / "data" / "t-0")
    }
    assert before == after
    assert not (tmp_path / "data" / "cleaner-offset-checkpoint").exists()
    log.close()


def test_kafka_python_decodes_the_cleaned_segments(tmp_path: Path) -> None:
    from kafka.record import MemoryRecords

    log = open_log(tmp_path, segment_bytes=100_000, delete_retention_ms=DAY)
    for codec in (
        Compression.NONE,
        Compression.GZIP,
        Compression.SNAPPY,
        Compression.LZ4,
        Compression.ZSTD,
    ):
        recs = [
            Record(-1, 1000 + i, b"%s-%d" % (codec.name.encode(), i % 3), b"v%d" % i)
            for i in range(6)
        ]
        log.append(encode_batch(recs, compression=codec))
    put(log, b"NONE-0", None)  # a tombstone: its batch gets a horizon
    p = Producer(log, pid=3)
    p.send([(b"NONE-1", b"p1")])
    p.send([(b"NONE-1", b"p2")])
    log.roll()
    log.compact(now=5000)
    ours = [(r.offset, r.timestamp, r.key, r.value) for r in log.records()]
    theirs = []
    data = Path(log.segments[0].log.path).read_bytes()
    records = MemoryRecords(data)
    while records.has_next():
        batch = records.next_batch()
        assert batch.validate_crc()
        for r in batch:
            theirs.append((r.offset, r.timestamp, r.key, r.value))
    assert theirs == ours and len(ours) > 10
    log.close()


def test_dirty_section_bytes_and_bounds_are_kafkas(tmp_path: Path) -> None:
    """``LogToClean`` and ``cleanableOffsets`` to the byte: the clean bytes are the segments
    below the first dirty offset (the one holding it included), the cleanable bytes those from
    that one up to the segment holding the first uncleanable offset (a last stable offset or a
    compaction lag inside a segment stops the cleaning at its start), the ratio is cleanable
    over both; ``max.compaction.lag.ms`` is measured from the earliest first-batch timestamp
    of the dirty segments below the active one."""
    from kafkalog.log.cleaner_checkpoint import _write_checkpoint

    log = open_log(tmp_path, segment_bytes=10_000, min_compaction_lag_ms=1000)
    for seg in range(4):
        for i in range(3):
            put(log, b"k%d" % i, b"v%d.%d" % (seg, i), ts=1000 + seg)
        log.roll()
    put(log, b"a", b"active", ts=9000)
    s = list(log.segments)
    size = [x.size for x in s]
    _write_checkpoint(log.directory, ("t", 0), s[1].base_offset + 1)  # inside S1
    section = dirty_section_of(log, 5000)
    assert section.first_dirty == s[1].base_offset + 1
    assert section.first_uncleanable == s[4].base_offset  # the active segment
    assert section.clean_bytes == size[0] + size[1]
    assert section.cleanable_bytes == size[1] + size[2] + size[3]
    assert section.dirty_ratio == section.cleanable_bytes / (
        size[0] + 2 * size[1] + size[2] + size[3]
    )
    # max.compaction.lag.ms: from S1's first batch (ts 1001), the oldest dirty one
    log.config = config(
        segment_bytes=10_000, min_compaction_lag_ms=1000, max_compaction_lag_ms=2000
    )
    assert dirty_section_of(log, 5000).compaction_delay_ms == 5000 - 2000 - 1001
    assert dirty_section_of(log, 3001).compaction_delay_ms == 0
    # min.compaction.lag.ms: S3 holds a record newer than now - lag, from its start on
    section = dirty_section_of(log, 2002)
    assert section.first_uncleanable == s[3].base_offset
    assert section.cleanable_bytes == size[1] + size[2]
    # an open transaction inside S2 stops the cleaning at S2's start
    log.close()
    log = open_log(tmp_path, segment_bytes=10_000)
    p = Producer(log, pid=7)
    active = log.segments[-1]
    assert active.base_offset == s[4].base_offset
    p.send([(b"b", b"open")], txn=True)
    log.roll()
    section = dirty_section_of(log, 5000)
    assert log.last_stable_offset() == s[4].base_offset + 1
    assert section.first_uncleanable == s[4].base_offset
    log.close()


def test_groups_are_bounded_by_index_bytes_and_offset_range(tmp_path: Path) -> None:
    """``groupSegmentsBySize``'s other bounds: segments whose logs fit one segment stay apart
    when their offset or time indexes together pass ``segment.index.bytes``; an empty segment
    joins whatever its offsets; a segment whose offsets would be more than 2^31-1 past the
    group's base starts a group of its own (a follower's offsets jump that far only on a
    compacted log). Each cleaned segment takes the base offset of its group's first one."""
    from kafkalog.log.cleaner.dirty import _index_sizes

    log = open_log(tmp_path, segment_bytes=100_000, segment_index_bytes=120, index_interval_bytes=1)
    for i in range(35):
        put(log, b"k%d" % i, b"v", ts=1000 + i)
    log.roll()
    before = [s.base_offset for s in log.segments]
    assert len(before) >= 4
    full = [_index_sizes(s)[1] for s in log.segments[:-2]]
    assert all(2 * t > 120 for t in full)  # two time indexes never fit one
    log.compact(now=5000)
    assert [s.base_offset for s in log.segments] == before  # the logs would have fit
    put(log, b"k0", b"w", ts=2000)
    log.roll()
    log.compact(now=5000)
    # the cleaned segments have one index entry per append: now they fit one segment
    assert [s.base_offset for s in log.segments] == [0, 36]
    far = log.log_end_offset + 2**31 + 5
    batch = encode_batch([Record(-1, 3000, b"far", b"v")], base_offset=far)
    log.append(batch, assign_offsets=False)
    log.roll()
    assert [s.base_offset for s in log.segments] == [0, 36, far, far + 1]
    log.compact(now=5000)
    # 36 (empty) joins 0's group; ``far`` cannot
    assert [s.base_offset for s in log.segments] == [0, far, far + 1]
    assert offsets(log)[-2:] == [35, far]
    names = sorted(os.listdir(tmp_path / "data" / "t-0"))
    assert f"{far:020d}.log" in names and f"{36:020d}.log" not in names
    log.close()
