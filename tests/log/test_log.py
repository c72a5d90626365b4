"""Log behaviours of spec §6-§7 on logs kafkalog writes: appends with offset assignment, reads
across segments, rolling, retention, truncation, recovery of a damaged tail, and reopening."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kafkalog.errors import InvalidRecordError, KafkalogError, ReadOnlyError
from kafkalog.index import OffsetIndex, TimeIndex
from kafkalog.log import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    Log,
    TopicConfig,
)
from kafkalog.records import LogReader, Record, encode_batch

T0 = 1_700_000_000_000


def rec(i: int, ts: int | None = None) -> Record:
    return Record.of(f"value-{i:05d}".encode() * 3, f"k{i}".encode(), T0 + i if ts is None else ts)


def fill(log: Log, n: int, per_batch: int = 1, start: int = 0) -> None:
    for i in range(start, start + n, per_batch):
        log.append_records([rec(j) for j in range(i, min(start + n, i + per_batch))])


class Clock:
    def __init__(self, now_ms: int) -> None:
        self.now = now_ms

    def __call__(self) -> float:
        return self.now / 1000


def make(tmp_path: Path, **config: object) -> Log:
    return Log(tmp_path / "events-0", TopicConfig(**config), clock=Clock(T0 + 10_000_000))


def test_append_assigns_offsets_and_reads_back(tmp_path: Path) -> None:
    log = make(tmp_path)
    info = log.append_records([rec(0), rec(1), rec(2)])
    assert (info.first_offset, info.last_offset, info.max_timestamp) == (0, 2, T0 + 2)
    info = log.append(encode_batch([rec(3)], base_offset=0))  # producers send base offset 0
    assert (info.first_offset, info.last_offset) == (3, 3)
    assert [r.offset for r in log.records()] == [0, 1, 2, 3]
    assert [r.value for r in log.records(2)] == [rec(2).value, rec(3).value]
    assert log.log_end_offset == 4
    raw = log.read(1, max_bytes=1)  # min one message: the whole batch holding offset 1
    (batch,) = list(LogReader(raw, verify_crc=True))
    assert (batch.base_offset, batch.last_offset) == (0, 2)
    log.close()


def test_append_rejects_bad_batches(tmp_path: Path) -> None:
    log = make(tmp_path, max_message_bytes=200)
    data = bytearray(encode_batch([rec(0)]))
    data[-1] ^= 1
    with pytest.raises(KafkalogError, match="CRC"):
        log.append(bytes(data))
    with pytest.raises(InvalidRecordError, match=r"max\.message\.bytes"):
        log.append(encode_batch([Record.of(b"x" * 500)]))
    with pytest.raises(InvalidRecordError, match="not a complete batch"):
        log.append(encode_batch([rec(0)]) + encode_batch([rec(1)])[:-3])
    with pytest.raises(InvalidRecordError, match="no complete record batch"):
        log.append(encode_batch([rec(0)])[:-3])
    assert log.log_end_offset == 0
    log.close()


def test_rolls_by_size_and_reads_across_segments(tmp_path: Path) -> None:
    log = make(tmp_path, segment_bytes=1000, index_interval_bytes=100)
    fill(log, 60)
    assert len(log.segments) > 3
    bases = [s.base_offset for s in log.segments]
    assert all(os.path.exists(tmp_path / "events-0" / f"{b:020d}.log") for b in bases)
    assert [r.offset for r in log.records()] == list(range(60))
    assert [r.offset for r in log.records(33, 37)] == [33, 34, 35, 36]
    for seg in log.segments[:-1]:  # rolled segments: indexes trimmed, final time entry written
        assert seg.size <= 1000
        assert os.path.getsize(seg.offset_index.path) % 8 == 0
        assert seg.time_index.get().last_entry.timestamp == seg.max_timestamp_so_far
    log.close()


def test_roll_on_record_time(tmp_path: Path) -> None:
    log = make(tmp_path, segment_ms=1000)
    log.append_records([rec(0, ts=T0)])
    log.append_records([rec(1, ts=T0 + 1000)])  # 1000 is not > 1000: same segment
    assert len(log.segments) == 1
    log.append_records([rec(2, ts=T0 + 1001)])
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.close()


def test_roll_on_full_index(tmp_path: Path) -> None:
    log = make(tmp_path, segment_index_bytes=32, index_interval_bytes=0)
    fill(log, 20)
    assert len(log.segments) >= 3  # an index of 4 entries fills, forcing a roll
    assert [r.offset for r in log.records()] == list(range(20))
    log.close()


def test_offsets_for_times(tmp_path: Path) -> None:
    log = make(tmp_path, segment_bytes=600, index_interval_bytes=50)
    stamps = [T0 + 10 * i for i in range(40)]
    stamps[20] = T0 + 5  # a timestamp going backwards across batches
    for i, ts in enumerate(stamps):
        log.append_records([rec(i, ts=ts)])
    assert log.offsets_for_times(T0 + 100) == (T0 + 100, 10, None)
    assert log.offsets_for_times(T0 + 101).offset == 11
    assert log.offsets_for_times(T0 + 10_000) is None
    assert log.offsets_for_times(EARLIEST_TIMESTAMP).offset == 0
    assert log.offsets_for_times(LATEST_TIMESTAMP).offset == 40
    top = log.offsets_for_times(MAX_TIMESTAMP)
    assert (top.timestamp, top.offset) == (T0 + 390, 39)
    log.increment_log_start_offset(7)
    # tiered storage's special timestamps, answered as a broker without tiered storage does
    assert log.offsets_for_times(EARLIEST_LOCAL_TIMESTAMP) == log.offsets_for_times(
        EARLIEST_TIMESTAMP
    )
    assert log.offsets_for_times(EARLIEST_LOCAL_TIMESTAMP).offset == 7
    assert log.offsets_for_times(LATEST_TIERED_TIMESTAMP) == (-1, -1, -1)
    with pytest.raises(ValueError, match="unsupported special timestamp -6"):
        log.offsets_for_times(-6)
    log.close()


def test_retention_by_size_and_time(tmp_path: Path) -> None:
    log = make(tmp_path, segment_bytes=700, retention_bytes=2000, file_delete_delay_ms=0)
    fill(log, 80)
    before = len(log.segments)
    deleted = log.delete_old_segments()
    assert deleted > 0 and len(log.segments) == before - deleted
    assert log.size_in_bytes() - log.segments[0].size < 2000 <= log.size_in_bytes() + 700
    assert log.log_start_offset == log.segments[0].base_offset
    assert next(r.offset for r in log.records()) == log.log_start_offset
    log.config = TopicConfig(segment_bytes=700, retention_ms=1000, file_delete_delay_ms=0)
    assert log.delete_old_segments(now=T0 + 10_000_000) >= 1
    assert len(log.segments) == 1 and log.active_segment.size == 0  # rolled, then deleted all
    assert log.log_start_offset == 80 == log.log_end_offset
    leftovers = [n for n in os.listdir(tmp_path / "events-0") if n.endswith(".deleted")]
    assert leftovers == []
    log.close()


def test_deleted_segments_renamed_then_removed_at_open(tmp_path: Path) -> None:
    log = make(tmp_path, segment_bytes=700, retention_bytes=1000)
    fill(log, 60)
    log.delete_old_segments()
    names = os.listdir(tmp_path / "events-0")
    assert any(n.endswith(".log.deleted") for n in names)
    log.close()
    again = make(tmp_path, segment_bytes=700)
    assert not any(n.endswith(".deleted") for n in os.listdir(tmp_path / "events-0"))
    again.close()


def test_truncate_into_the_middle_of_a_batch(tmp_path: Path) -> None:
    log = make(tmp_path, segment_bytes=800)
    fill(log, 30, per_batch=3)
    log.truncate_to(16)  # batch 15..17 goes whole
    # Kafka's LocalLog.truncateTo: updateLogEndOffset(targetOffset), whatever the cut left;
    # the next append continues at the target and offset 15 stays a gap
    assert log.log_end_offset == 16
    assert log.recovery_point <= 16
    assert [r.offset for r in log.records()] == list(range(15))
    fill(log, 3, start=16)
    assert [r.offset for r in log.records()][-3:] == [16, 17, 18]
    assert log.log_end_offset == 19
    log.close()
    with Log(tmp_path / "events-0", TopicConfig(segment_bytes=800)) as again:
        assert again.log_end_offset == 19
        assert [r.offset for r in again.records()] == [*range(15), 16, 17, 18]


def test_recovery_cuts_a_corrupt_tail_and_rebuilds_indexes(tmp_path: Path) -> None:
    log = make(tmp_path, index_interval_bytes=100)
    fill(log, 30)
    path = log.active_segment.log.path
    log.close()
    size = os.path.getsize(path)
    with open(path, "r+b") as f:  # a torn write: half a batch and garbage
        f.seek(size - 20)
        f.write(b"\xff" * 20)
        f.seek(0, 2)
        f.write(b"\x00" * 100)
    index = path[:-4] + ".index"
    os.remove(index)  # and a lost index
    log = make(tmp_path, index_interval_bytes=100)  # unclean: recovery point 0
    assert log.log_end_offset == 29
    assert [r.offset for r in log.records()] == list(range(29))
    assert os.path.exists(index)
    log.close()
    with OffsetIndex(index, 0, writable=False) as ix:
        ix.sanity_check()
        assert ix.entries > 0
    fill(make(tmp_path), 1, start=29)


def test_preallocated_zero_tail_is_cut(tmp_path: Path) -> None:
    log = make(tmp_path)
    fill(log, 5)
    path = log.active_segment.log.path
    log.close()
    with open(path, "ab") as f:
        f.write(b"\x00" * 4096)
    log = make(tmp_path)
    assert log.log_end_offset == 5 and os.path.getsize(path) < 4096
    log.close()


def test_second_writer_refused_and_reader_allowed(tmp_path: Path) -> None:
    log = make(tmp_path)
    fill(log, 3)
    log.flush()
    with pytest.raises(KafkalogError, match=r"lock|held|writer"):
        make(tmp_path)
    reader = Log(tmp_path / "events-0", writable=False)
    assert [r.offset for r in reader.records()] == [0, 1, 2]
    with pytest.raises(ReadOnlyError):
        reader.append_records([rec(9)])
    fill(log, 2, start=3)
    log.flush()
    reader.refresh()
    assert reader.log_end_offset == 5
    log.close()
    reader.close()


def test_reopen_continues_offsets_and_keeps_time_index(tmp_path: Path) -> None:
    log = make(tmp_path, segment_bytes=900, index_interval_bytes=80)
    fill(log, 40)
    log.close()
    log = make(tmp_path, segment_bytes=900, index_interval_bytes=80)
    assert log.log_end_offset == 40
    fill(log, 5, start=40)
    assert [r.offset for r in log.records()] == list(range(45))
    for seg in log.segments[:-1]:
        with TimeIndex(seg.time_index.path, seg.base_offset, writable=False) as t:
            t.sanity_check()
    log.close()


def test_last_stable_offset(tmp_path: Path) -> None:
    from kafkalog.records import ControlType, encode_control_batch

    log = make(tmp_path)
    fill(log, 3)
    assert log.last_stable_offset() == 3
    txn = encode_batch(
        [rec(3), rec(4)], producer_id=9, producer_epoch=0, base_sequence=0, is_transactional=True
    )
    log.append(txn)
    fill(log, 2, start=5)
    assert log.last_stable_offset() == 3  # the open transaction's first offset
    log.append(
        encode_control_batch(
            ControlType.ABORT, offset=0, timestamp=T0, producer_id=9, producer_epoch=0
        ),
        origin="coordinator",
    )
    assert log.last_stable_offset() == log.log_end_offset == 8
    log.close()
    reader = Log(tmp_path / "events-0", writable=False)
    assert reader.last_stable_offset() == 8
    reader.close()


def test_segment_walk_crosses_chunks_that_end_on_a_batch_boundary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: a read chunk ending exactly where a batch ends used to end the walk."""
    from kafkalog.log import segment as segment_module

    log = make(tmp_path)
    for i in range(12):
        log.append_records([Record.of(b"x" * 30, b"key", T0 + i)])
    seg = log.active_segment
    sizes = {e.size_in_bytes for e in seg.entries(0)}
    assert len(sizes) == 1  # equal batches, so chunk boundaries can land on batch boundaries
    monkeypatch.setattr(segment_module, "_FIRST_CHUNK", 3 * sizes.pop())
    monkeypatch.setattr(segment_module, "_CHUNK", 3 * seg.size // 12)
    assert [e.base_offset for e in seg.entries(0)] == list(range(12))
    assert seg.read_next_offset() == 12
    log.close()


def test_roll_on_offset_overflow(tmp_path: Path) -> None:
    """A batch whose offsets do not fit 32 bits relative to the active segment rolls a new one
    (a follower's append after a big gap, e.g. compacted data)."""
    log = make(tmp_path)
    fill(log, 3)
    far = 3 + 2**31 + 10
    log.append(encode_batch([rec(0)], base_offset=far), assign_offsets=False)
    assert [s.base_offset for s in log.segments] == [0, far]
    assert [r.offset for r in log.records()] == [0, 1, 2, far]
    with pytest.raises(InvalidRecordError, match="below the log end"):
        log.append(encode_batch([rec(1)], base_offset=5), assign_offsets=False)
    log.close()


def test_corrupt_index_rebuilt_on_open(tmp_path: Path) -> None:
    log = make(tmp_path, segment_bytes=900, index_interval_bytes=100)
    fill(log, 40)
    first = log.segments[0]
    index_path, time_path = first.offset_index.path, first.time_index.path
    log.close()
    good = Path(index_path).read_bytes()
    Path(index_path).write_bytes(good + b"\x01\x02\x03")  # torn: not whole entries
    Path(time_path).unlink()
    log = Log(
        tmp_path / "events-0",
        TopicConfig(segment_bytes=900, index_interval_bytes=100),
        had_clean_shutdown=True,
        recovery_point=40,
    )
    assert Path(index_path).read_bytes() == good
    assert os.path.getsize(time_path) % 12 == 0 and os.path.getsize(time_path) > 0
    assert [r.offset for r in log.records(5, 9)] == [5, 6, 7, 8]
    log.close()


@pytest.mark.parametrize("timestamp_type", ["CreateTime", "LogAppendTime"])
def test_append_leaves_the_callers_buffer_alone(tmp_path: Path, timestamp_type: str) -> None:
    """Offsets and epochs are stamped into copies of the batch headers (or, for LogAppendTime,
    of the whole append): the producer's buffer is never written, and the bytes on disk are
    the caller's bytes with exactly those fields changed."""
    log = make(tmp_path, message_timestamp_type=timestamp_type)
    log.append_records([rec(0)])
    sent = bytearray(encode_batch([rec(1), rec(2)]) + encode_batch([rec(3)]))
    before = bytes(sent)
    info = log.append(sent, leader_epoch=7)
    assert sent == before
    (first, second) = list(LogReader(log.read(1, max_bytes=10_000), verify_crc=True))
    assert (first.base_offset, second.base_offset, info.last_offset) == (1, 3, 3)
    assert first.partition_leader_epoch == second.partition_leader_epoch == 7
    if timestamp_type == "CreateTime":
        on_disk = log.read(1, max_bytes=10_000)
        expected = bytearray(before)
        for at, base in ((0, 1), (first.size_in_bytes, 3)):
            expected[at : at + 8] = base.to_bytes(8, "big")
            expected[at + 12 : at + 16] = (7).to_bytes(4, "big")
        assert on_disk == bytes(expected)
    else:
        assert first.max_timestamp == T0 + 10_000_000 and first.crc != _crc_field(before)
    log.close()


def _crc_field(batch: bytes) -> int:
    return int.from_bytes(batch[17:21], "big")


def test_append_of_many_batches_in_one_call(tmp_path: Path) -> None:
    log = make(tmp_path, index_interval_bytes=1000)
    many = b"".join(encode_batch([rec(i)]) for i in range(600))
    assert log.append(many).last_offset == 599
    assert [r.offset for r in log.records()] == list(range(600))
    assert log.offsets_for_times(T0 + 450).offset == 450
    log.close()


@pytest.mark.parametrize("topic", ["../evil", "a/b", ".", "..", "", "x" * 250, "tab\there", "é"])
def test_illegal_topic_names_create_nothing(tmp_path: Path, topic: str) -> None:
    """Kafka's Topic.validate rules, applied before a partition directory is made: a name like
    '../evil' would otherwise create a directory outside the data directory."""
    from kafkalog.errors import InvalidTopicError
    from kafkalog.log import LogDir

    data = tmp_path / "data"
    data.mkdir()
    with LogDir(data, writable=True) as logdir, pytest.raises(InvalidTopicError, match="illegal"):
        logdir.log(topic, 0, create=True)
    if "/" not in topic and topic not in ("", ".", ".."):
        with pytest.raises(InvalidTopicError, match="illegal"):
            Log(data / f"{topic}-0")  # a new partition directory named by the caller
    assert [p for p in tmp_path.rglob("*") if p.is_dir()] == [data]  # only its checkpoints


def test_partition_lookups_stay_inside_the_data_directory(tmp_path: Path) -> None:
    from kafkalog.errors import InvalidTopicError
    from kafkalog.log import LogDir

    outside = tmp_path / "evil-0"
    Log(outside).close()
    (tmp_path / "data").mkdir()
    with LogDir(tmp_path / "data", writable=False) as logdir:
        with pytest.raises(InvalidTopicError, match="not a directory of"):
            logdir.log("../evil", 0)
        with pytest.raises(InvalidTopicError, match="not >= 0"):
            LogDir(tmp_path / "data", writable=True).log("t", -1, create=True)
    assert Log(tmp_path / "data" / "Legal.name_x-3").partition == 3  # Kafka's alphabet is fine


def test_flush_of_a_removed_partition_directory_is_no_error(tmp_path: Path) -> None:
    # Kafka's LocalLog.flush syncs the directory through Utils.flushDirIfExists
    import shutil

    log = make(tmp_path)
    fill(log, 5)
    shutil.rmtree(tmp_path / "events-0")
    log.flush()
    assert log.recovery_point == 5
    fill(log, 2, start=5)
    log.close()


def test_truncate_fully_only_lowers_the_recovery_point(tmp_path: Path) -> None:
    # LocalLog.truncateFullyAndStartAt -> updateLogEndOffset: the recovery point comes down
    # to the new log end if above it, never up (nothing past it was flushed)
    log = make(tmp_path)
    fill(log, 10)
    log.flush(5)
    assert log.recovery_point == 5
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset, log.recovery_point) == (100, 100, 5)
    fill(log, 3, start=100)
    log.flush()
    assert log.recovery_point == 103
    log.truncate_fully_and_start_at(50)
    assert (log.log_end_offset, log.recovery_point) == (50, 50)
    log.close()


def test_reconfigure_applies_to_the_next_append_roll_and_retention(tmp_path: Path) -> None:
    """A changed topic config (a server's AlterConfigs) reaches every part of an open log:
    the roll check, retention, and the deletion delay the segment set applies."""
    log = make(tmp_path)  # 1 GiB segments, 7 days, deleted files kept 60 s
    fill(log, 10)
    assert len(log.segments) == 1
    log.reconfigure(TopicConfig(segment_bytes=200, retention_ms=1000, file_delete_delay_ms=0))
    fill(log, 10, start=10)
    assert len(log.segments) > 3  # the lowered segment.bytes rolls at once
    assert log.delete_old_segments(now=T0 + 10_000_000) >= 3
    # file.delete.delay.ms=0 reached the segment set too: nothing waits as .deleted
    assert not [n for n in os.listdir(tmp_path / "events-0") if n.endswith(".deleted")]
    assert [r.offset for r in log.records()] == []
    assert log.log_start_offset == 20 == log.log_end_offset
    log.close()
