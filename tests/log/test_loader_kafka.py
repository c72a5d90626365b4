"""What Kafka's LogLoader does with a directory a crash left behind (spec §7.9), checked file by
file: interrupted swaps, a log start offset checkpoint past the log end, ``-delete`` directories.
Each case cites the Kafka code it follows (storage/.../log/LogLoader.java)."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from kafkalog.errors import DamagedLogError, IndexOffsetOverflowError
from kafkalog.log import EARLIEST_TIMESTAMP, Log, TopicConfig
from kafkalog.records import LogReader, Record, encode_batch

T0 = 1_700_000_000_000


def rec(i: int) -> Record:
    return Record.of(b"v%05d" % i * 5, b"k%d" % i, T0 + i)


def build(directory: Path, n: int = 30, **config: object) -> list[int]:
    """A log of ``n`` one-record batches in several segments; returns the segment bases."""
    log = Log(directory, TopicConfig(segment_bytes=600, file_delete_delay_ms=0, **config))
    for i in range(n):
        log.append_records([rec(i)])
    bases = [s.base_offset for s in log.segments]
    log.close()
    return bases


def snapshot(directory: Path) -> dict[str, tuple[bytes, int]]:
    return {
        n: ((directory / n).read_bytes(), os.stat(directory / n).st_mtime_ns)
        for n in sorted(os.listdir(directory))
    }


def _interrupted_merge(directory: Path) -> list[int]:
    """The cleaner merged the first two segments into one ``.swap`` (with its indexes) and
    crashed before the old segments were renamed ``.deleted`` (LocalLog.replaceSegments)."""
    bases = build(directory)
    first, second = bases[0], bases[1]
    merged = (directory / f"{first:020d}.log").read_bytes() + (
        directory / f"{second:020d}.log"
    ).read_bytes()
    (directory / f"{first:020d}.log.swap").write_bytes(merged)
    return bases


def test_interrupted_swap_replaces_every_segment_it_covers(tmp_path: Path) -> None:
    # LogLoader.load, second pass: every non-swap file whose offset is in [min swap base,
    # max swap readNextOffset) is deleted before the swap files are renamed
    directory = tmp_path / "t-0"
    bases = _interrupted_merge(directory)
    snap = directory / f"{bases[1]:020d}.snapshot"
    snap.write_bytes(b"")  # a producer snapshot inside the swapped range goes too
    kraft = directory / "00000000000000000005-0000000001.checkpoint.deleted"
    kraft.write_bytes(b"")  # left to the metadata log's own recovery
    log = Log(directory, TopicConfig(segment_bytes=600), had_clean_shutdown=True)
    assert [s.base_offset for s in log.segments] == [bases[0], *bases[2:]]
    assert [r.offset for r in log.records()] == list(range(30))
    names = os.listdir(directory)
    assert f"{bases[1]:020d}.log" not in names and not snap.exists()
    assert not any(n.endswith(".swap") for n in names)
    assert kraft.exists()
    log.close()


def test_read_only_sees_an_interrupted_swap_as_kafka_will_load_it(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    bases = _interrupted_merge(directory)
    before = snapshot(directory)
    with Log(directory, writable=False) as log:
        assert [s.base_offset for s in log.segments] == [bases[0], *bases[2:]]
        assert [r.offset for r in log.records()] == list(range(30))
    assert snapshot(directory) == before


def test_log_start_checkpoint_beyond_the_log_end_empties_the_log(tmp_path: Path) -> None:
    # LogLoader.deleteSegmentsIfLogStartGreaterThanLogEnd: every segment deleted, the epoch
    # cache cleared, one empty segment created at the checkpointed log start offset
    directory = tmp_path / "t-0"
    build(directory)
    log = Log(
        directory, TopicConfig(segment_bytes=600), log_start_offset=100, had_clean_shutdown=False
    )
    assert [s.base_offset for s in log.segments] == [100]
    assert (log.log_start_offset, log.log_end_offset) == (100, 100)
    assert log.recovery_point == 0  # unclean: min(recovery point checkpoint, log end)
    assert list(log.records()) == []
    assert log.offsets_for_times(EARLIEST_TIMESTAMP).offset == 100
    assert [n for n in os.listdir(directory) if n.endswith(".log")] == [f"{100:020d}.log"]
    assert len(log.leader_epochs) == 0
    log.close()


def test_log_start_checkpoint_beyond_the_log_end_read_only(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    build(directory)
    before = snapshot(directory)
    with Log(directory, writable=False, log_start_offset=100) as log:
        assert (log.log_start_offset, log.log_end_offset) == (100, 100)
        assert log.segments == [] and list(log.records()) == []
    assert snapshot(directory) == before


def test_delete_directory_is_not_recovered(tmp_path: Path) -> None:
    # LogLoader.load: recoverLog is skipped for a directory ending in -delete
    directory = tmp_path / "t-0"
    build(directory)
    active = sorted(n for n in os.listdir(directory) if n.endswith(".log"))[-1]
    with open(directory / active, "r+b") as f:
        f.truncate(os.path.getsize(directory / active) - 5)  # a torn last batch
    doomed = tmp_path / "t-0.0123456789abcdef0123456789abcdef-delete"
    os.rename(directory, doomed)
    size = os.path.getsize(doomed / active)
    log = Log(doomed, TopicConfig(segment_bytes=600), had_clean_shutdown=False)
    assert os.path.getsize(doomed / active) == size  # not cut: not recovered
    log.close()
    os.rename(doomed, directory)
    # the same files, recovered
    log = Log(directory, TopicConfig(segment_bytes=600), had_clean_shutdown=False)
    assert os.path.getsize(directory / active) < size
    assert log.log_end_offset == 29
    log.close()


def test_truncate_fully_and_start_at_clears_the_leader_epoch_cache(tmp_path: Path) -> None:
    # UnifiedLog.truncateFullyAndStartAt (a follower out of range of its leader, or a
    # truncation below the first segment): leaderEpochCache.clearAndFlush()
    directory = tmp_path / "t-0"
    log = Log(directory, TopicConfig(segment_bytes=600, file_delete_delay_ms=0))
    for i in range(30):
        log.append(encode_batch([rec(i)], partition_leader_epoch=3 + i // 10))
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset) == (100, 100)
    assert len(log.leader_epochs) == 0
    checkpoint = (directory / "leader-epoch-checkpoint").read_text()
    assert checkpoint == "0\n0\n"  # written at once, as clearAndFlush does
    log.append(encode_batch([rec(100)], partition_leader_epoch=9))
    assert [tuple(e) for e in log.leader_epochs] == [(9, 100)]
    log.close()


def test_truncation_and_retention_remove_producer_snapshots(tmp_path: Path) -> None:
    # ProducerStateManager.truncateAndReload deletes snapshots past the new log end (and
    # those at or below the log start), rebuildProducerState takes one at the new end;
    # truncateFullyAndStartAt deletes them all; retention takes each deleted segment's own
    # (UnifiedLog.deleteProducerSnapshots). The unreadable (empty) snapshots planted here are
    # deleted when recovery tries them, and recovery writes one at each recovered base.
    directory = tmp_path / "t-0"
    bases = build(directory)
    for offset in (*bases, 30):
        (directory / f"{offset:020d}.snapshot").write_bytes(b"")
    config = TopicConfig(segment_bytes=600, file_delete_delay_ms=0, retention_ms=-1)
    log = Log(directory, config, had_clean_shutdown=False)  # the planted snapshots: recovery

    def snapshots() -> list[int]:
        return sorted(int(n[:20]) for n in os.listdir(directory) if n.endswith(".snapshot"))

    assert snapshots() == [*bases[1:], 30]
    log.truncate_to(bases[3] + 1)
    assert snapshots() == [*bases[1:4], bases[3] + 1]
    log.increment_log_start_offset(bases[2])
    log.delete_old_segments()
    assert [s.base_offset for s in log.segments] == bases[2:4]
    assert snapshots() == [*bases[2:4], bases[3] + 1]
    log.truncate_fully_and_start_at(100)
    assert snapshots() == []
    log.close()


def test_read_only_reads_a_torn_tail_as_recovery_would_cut_it(tmp_path: Path) -> None:
    # LogSegment.recover cuts the log at the first invalid batch: preallocated zeros
    # (log.preallocate=true, or a crash) or a torn write. A read-only reader cannot cut, but
    # must see the same records instead of failing to open the log.
    directory = tmp_path / "t-0"
    build(directory)
    active = directory / sorted(n for n in os.listdir(directory) if n.endswith(".log"))[-1]
    whole = active.read_bytes()
    next_batch = encode_batch([rec(30)], base_offset=30)
    torn = (
        b"\x00" * 4096,  # preallocated, or pages never written
        next_batch[:40],  # the next batch cut off
        next_batch[:20] + b"\x00" * 300,
    )
    for tail in torn:
        active.write_bytes(whole + tail)
        before = snapshot(directory)
        with Log(directory, writable=False) as log:
            assert log.log_end_offset == 30
            assert [r.offset for r in log.records()] == list(range(30))
            log.refresh()
            assert log.log_end_offset == 30
        with Log(directory, writable=False, log_start_offset=20) as log:
            assert (log.log_start_offset, log.log_end_offset) == (20, 30)
        assert snapshot(directory) == before


def test_garbage_after_the_last_batch_is_damage_not_a_torn_tail(tmp_path: Path) -> None:
    # bytes after the last batch with a valid batch after them are no crash's leftovers: not
    # cut or hidden, an error naming them
    directory = tmp_path / "t-0"
    build(directory)
    active = directory / sorted(n for n in os.listdir(directory) if n.endswith(".log"))[-1]
    whole = active.read_bytes()
    last = list(LogReader(whole))[-1]
    active.write_bytes(whole + b"\xff" * 50 + whole[last.position :])  # a valid batch after
    before = snapshot(directory)
    # a read-only open goes on (the log ends before the damage); a read to the end raises
    with Log(directory, writable=False) as log:
        assert log.damage_at_end is not None
        with pytest.raises(DamagedLogError, match=f"byte {len(whole)}: damaged log"):
            list(log.records())
    with pytest.raises(DamagedLogError, match="kafkalog repair"):
        Log(directory, TopicConfig(segment_bytes=600), had_clean_shutdown=False).close()
    after = snapshot(directory)
    after.pop(".kafkalog.lock"), before.pop(".kafkalog.lock", None)  # the writer's own
    assert after == before


@pytest.mark.parametrize("tail", ["0xff", "a fragment", "absurd size"])
def test_any_bytes_after_the_last_batch_with_nothing_valid_after_are_a_torn_tail(
    tmp_path: Path, tail: str, caplog: pytest.LogCaptureFixture
) -> None:
    # issue 32: a crash can leave any bytes after the last whole batch (the torn page of an
    # append), a size field reading 2 GB among them: reads stop before them, and a writable
    # open after an unclean shutdown cuts them (Kafka's LogLoaderTest.testCorruptLog) after
    # copying them beside the segment, and says so
    directory = tmp_path / "t-0"
    build(directory)
    active = directory / sorted(n for n in os.listdir(directory) if n.endswith(".log"))[-1]
    whole = active.read_bytes()
    extra = {
        "0xff": b"\xff" * 40,
        "a fragment": whole[-60:-20] + b"\x00" * 30,
        "absurd size": (10**12).to_bytes(8, "big") + b"\x7f\xff\xff\xf0" + b"\x01" * 8,
    }[tail]
    active.write_bytes(whole + extra)
    with Log(directory, writable=False) as log:
        assert log.damage_at_end is None
        expected = [r.offset for r in log.records()]
    assert expected == list(range(30))
    (directory / ".kafkalog-clean-shutdown").unlink(missing_ok=True)
    config = TopicConfig(segment_bytes=600)
    with (
        caplog.at_level("WARNING", logger="kafkalog.log"),
        Log(directory, config, had_clean_shutdown=False) as log,
    ):
        assert [r.offset for r in log.records()] == expected
    assert active.read_bytes() == whole
    (copy,) = directory.glob(active.name + ".torn-*")
    assert copy.read_bytes() == extra
    assert any(str(copy) in r.getMessage() for r in caplog.records)


def test_recovery_does_not_empty_a_segment_whose_offsets_overflow_it(tmp_path: Path) -> None:
    # A legacy segment (KAFKA-6264) holding offsets that do not fit 32 bits past its base:
    # LogSegment.recover throws LogSegmentOffsetOverflowException, which recoverLog does not
    # catch (only InvalidOffsetException | IOException empty a segment); Kafka splits it.
    # kafkalog cannot split, but must not destroy the records either: a clear error instead.
    directory = tmp_path / "t-0"
    directory.mkdir()
    data = encode_batch([rec(1)], base_offset=2**31 + 5)
    path = directory / f"{0:020d}.log"
    path.write_bytes(data)
    (directory / f"{0:020d}.index").write_bytes(b"")
    (directory / f"{0:020d}.timeindex").write_bytes(b"")
    with pytest.raises(IndexOffsetOverflowError, match=f"{0:020d}.log"):
        Log(directory, TopicConfig())
    assert path.read_bytes() == data


def test_a_transaction_index_that_fails_its_sanity_check_is_rebuilt(tmp_path: Path) -> None:
    # LogLoader.loadSegmentFiles: segment.sanityCheck -> txnIndex.sanityCheck throws
    # CorruptIndexException (an entry ending before the segment's base) -> recoverSegment
    directory = tmp_path / "t-0"
    bases = build(directory)
    txn = directory / f"{bases[1]:020d}.txnindex"
    entry = struct.pack(">hqqqq", 0, 42, 0, 1, 2)  # aborted txn ending at offset 1 < base
    txn.write_bytes(entry)
    log = Log(directory, TopicConfig(segment_bytes=600), had_clean_shutdown=True)
    assert [r.offset for r in log.records()] == list(range(30))
    log.close()
    assert not txn.exists() or txn.read_bytes() == b""
