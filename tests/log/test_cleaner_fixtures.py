"""Compacted partitions a real broker wrote (``tests/fixtures``: Kafka 0.9's v0 compacted
topics and its cleaner's output, ``__consumer_offsets`` of Kafka 2.x-4.x brokers) cleaned
again by kafkalog: with the broker's own ``cleaner-offset-checkpoint`` nothing is left to clean
and no byte changes; cleaned from scratch, every key keeps its latest value, no record is made
up, the log end stays, and what is left loads and decodes with kafka-python."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kafkalog.log import Log, TopicConfig
from kafkalog.log.layout import segment_logs
from kafkalog.records import Record, RecordBatch
from provenance import FIXTURES

PARTITIONS = sorted(
    p
    for pattern in ("*/__consumer_offsets-*", "kafka-0.9.0.1-broker/v0-compact*")
    for p in FIXTURES.glob(pattern)
    if p.is_dir() and any(Path(f).stat().st_size for _, f in segment_logs(p))
)
CONFIG = TopicConfig(cleanup_policy="compact", file_delete_delay_ms=0)


def copy(partition: Path, tmp: Path, with_checkpoint: bool) -> Path:
    data = tmp / "data"
    data.mkdir(parents=True)
    target = data / partition.name
    shutil.copytree(partition, target)
    for name in ("cleaner-offset-checkpoint", "log-start-offset-checkpoint"):
        src = partition.parent / name
        if (with_checkpoint or name != "cleaner-offset-checkpoint") and src.exists():
            shutil.copy(src, data / name)
    return target


def records(directory: Path) -> list[tuple[int, bytes | None, bytes | None]]:
    with Log(directory, CONFIG, writable=False) as log:
        return [(r.offset, r.key, r.value) for r in log.records()]


def files(directory: Path) -> dict[str, bytes]:
    return {
        p.name: p.read_bytes()
        for p in directory.iterdir()
        if p.suffix in (".log", ".index", ".timeindex", ".txnindex")
    }


def test_there_are_compacted_fixture_partitions() -> None:
    assert len(PARTITIONS) >= 6


@pytest.mark.parametrize("partition", PARTITIONS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_cleaning_a_broker_cleaned_partition_again(partition: Path, tmp_path: Path) -> None:
    work = copy(partition, tmp_path / "a", with_checkpoint=True)
    before = records(work)
    Log(work, CONFIG).close()  # what a writable open leaves (recovery, a 0.9 .timeindex)
    opened = files(work)
    log = Log(work, CONFIG)
    result = log.compact(now=2**40)
    end = log.log_end_offset
    log.close()
    after = records(work)
    if result.rounds == 0:
        assert files(work) == opened  # nothing dirty: not a byte changes
    check(before, after)
    with Log(work, CONFIG) as again:
        assert again.log_end_offset == end


@pytest.mark.parametrize("partition", PARTITIONS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_cleaning_a_broker_partition_from_scratch(partition: Path, tmp_path: Path) -> None:
    from kafka.record import MemoryRecords

    work = copy(partition, tmp_path / "b", with_checkpoint=False)
    before = records(work)
    with Log(work, CONFIG, writable=False) as ro:
        end = ro.log_end_offset
    with Log(work, CONFIG) as log:
        log.roll()  # the active segment is never cleaned: all of it is dirty now
        result = log.compact(now=2**40)
        assert log.log_end_offset == end
        assert result.rounds >= 1 and result.end_offset == end
    after = records(work)
    check(before, after)
    for _, path in segment_logs(work):
        data = Path(path).read_bytes()
        decoded = []
        recs = MemoryRecords(data)
        while recs.has_next():
            batch = recs.next_batch()
            assert batch.validate_crc()
            decoded.extend((r.offset, r.key, r.value) for r in batch)
        assert set(decoded) <= set(before)


def check(before: list, after: list) -> None:
    """Per key the latest value stays (a tombstone may go: the key is then absent), nothing
    is made up, and the records left keep their order and offsets."""
    assert set(after) <= set(before)
    assert [o for o, _, _ in after] == sorted(o for o, _, _ in after)
    want: dict = {}
    for _, k, v in before:
        want[k] = v
    got: dict = {}
    for _, k, v in after:
        got[k] = v
    for key, value in want.items():
        if key is None:
            continue
        if value is None:
            assert got.get(key) is None
        else:
            assert got.get(key) == value


LEGACY_COMPACTED = sorted(FIXTURES.glob("kafka-0.9.0.1-broker/v0-compact*"))
HOUR = 3_600_000


@pytest.mark.parametrize("stale", [False, True], ids=["fresh", "stale"])
@pytest.mark.parametrize("partition", LEGACY_COMPACTED, ids=lambda p: p.name)
def test_legacy_tombstones_go_by_segment_mtime_v2_ones_by_their_horizon(
    partition: Path, stale: bool, tmp_path: Path
) -> None:
    """Kafka's two tombstone rules side by side on a 0.9 broker's compacted partition (its
    round 9 wrote v0 tombstones for keys 0, 4 and 8; its cleaner checkpoint says 80): a v0/v1
    tombstone goes once its segment is older than the last clean segment's mtime minus
    ``delete.retention.ms`` (the legacy horizon), whatever the clock; a v2 tombstone in the
    same round is never judged by mtime, it gets the delete horizon in its batch header
    (KIP-534) and goes only once that has passed."""
    assert LEGACY_COMPACTED
    work = copy(partition, tmp_path, with_checkpoint=True)
    config = TopicConfig(cleanup_policy="compact", file_delete_delay_ms=0, delete_retention_ms=HOUR)
    legacy_tombstones = {90, 94, 98}
    with Log(work, config) as log:
        log.roll()  # segment 80 (the v0 tombstones) becomes dirty
        v2 = log.append_records([Record(-1, 1000, b"key-1", None)]).first_offset
        log.roll()
        segs = {s.base_offset: s for s in log.segments}
        mtime = segs[60].last_modified  # the last clean segment: the legacy horizon's base
        old = mtime - 2 * HOUR if stale else mtime
        segs[80].set_last_modified(old)
        segs[v2].set_last_modified(mtime - 2 * HOUR)  # stale by mtime: must not matter
        now = mtime + 10 * HOUR
        log.compact(now=now)
        kept = {r.offset: (r.key, r.value) for r in log.records()}
        tombstones = {o for o, (_, v) in kept.items() if v is None}
        assert tombstones == ({v2} if stale else legacy_tombstones | {v2})
        assert 91 not in kept  # key-1's value, superseded by the v2 tombstone
        holder = [
            b for s in log.segments for b in s.entries(0) if b.base_offset <= v2 <= b.last_offset
        ]
        assert isinstance(holder[0], RecordBatch)
        assert holder[0].delete_horizon_ms == now + HOUR
        # a later cleaning before the batch's horizon keeps it; one after removes it
        log.append_records([Record(-1, 1000, b"key-2", b"x")])
        log.roll()
        log.compact(now=now + HOUR - 1)
        assert v2 in {r.offset for r in log.records()}
        log.append_records([Record(-1, 1000, b"key-3", b"x")])
        log.roll()
        log.compact(now=now + HOUR)
        assert v2 not in {r.offset for r in log.records()}


@pytest.mark.parametrize("partition", LEGACY_COMPACTED, ids=lambda p: p.name)
def test_min_compaction_lag_of_v0_segments_goes_by_their_mtime(
    partition: Path, tmp_path: Path
) -> None:
    """v0 messages carry no timestamp: ``min.compaction.lag.ms`` (and Kafka's
    ``largestTimestamp``) fall back to the segment's mtime; ``max.compaction.lag.ms`` finds no
    first-batch timestamp and never forces a cleaning."""
    from kafkalog.log.cleaner import dirty_section_of

    work = copy(partition, tmp_path, with_checkpoint=True)
    config = TopicConfig(
        cleanup_policy="compact",
        file_delete_delay_ms=0,
        min_compaction_lag_ms=HOUR,
        max_compaction_lag_ms=HOUR,
    )
    with Log(work, config) as log:
        log.roll()
        seg = log.segments[-2]
        assert seg.base_offset == 80 and seg.max_timestamp_so_far < 0
        now = seg.last_modified + HOUR // 2
        section = dirty_section_of(log, now)
        assert section.first_uncleanable == 80 and section.cleanable_bytes == 0
        assert section.compaction_delay_ms == 0
        seg.set_last_modified(now - 2 * HOUR)
        section = dirty_section_of(log, now)
        assert section.first_uncleanable == 100 and section.cleanable_bytes == seg.size
        assert section.compaction_delay_ms == 0
        result = log.compact(now=now)
        assert result.rounds == 1 and result.end_offset == 100


def test_checkpoint_entry_of_a_partition_gone_is_dropped_at_the_next_write(
    tmp_path: Path,
) -> None:
    """Kafka's manager writes ``cleaner-offset-checkpoint`` with only the logs it has
    (``updateCheckpoints``). A 0.9 broker's data directory whose checkpoint names both
    compacted topics at 80: one partition's directory removed by hand, the next cleaning of
    the other drops its entry, so the topic created again under that name is cleaned from its
    start (a stale 80 would leave its first 80 offsets taken as clean, never compacted)."""
    from kafkalog.log.cleaner import read_checkpoint

    broker = FIXTURES / "kafka-0.9.0.1-broker"
    data = tmp_path / "data"
    data.mkdir()
    for name in ("v0-compact-0", "v0-compact-gzip-0"):
        shutil.copytree(broker / name, data / name)
    shutil.copy(broker / "cleaner-offset-checkpoint", data / "cleaner-offset-checkpoint")
    assert read_checkpoint(str(data)) == {("v0-compact", 0): 80, ("v0-compact-gzip", 0): 80}
    shutil.rmtree(data / "v0-compact-gzip-0")
    with Log(data / "v0-compact-0", CONFIG) as log:
        log.roll()
        log.compact(now=2**40)
        end = log.log_end_offset
    assert read_checkpoint(str(data)) == {("v0-compact", 0): end}
    with Log(data / "v0-compact-gzip-0", CONFIG) as log:
        for i in range(100):
            key = b"k%d" % (i % 10 if i < 80 else i - 70)
            log.append_records([Record(-1, 1000 + i, key, b"v%d" % i)])
        log.roll()
        log.compact(now=2**40)
        got = [(r.offset, r.key) for r in log.records()]
    assert got == [(70 + k, b"k%d" % k) for k in range(10)] + [
        (i, b"k%d" % (i - 70)) for i in range(80, 100)
    ]
