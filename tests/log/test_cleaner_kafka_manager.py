"""Issue 33: the cleaner to the letter of Kafka's OffsetMapTest, LogCleanerManagerTest and the
LogCleanerTest / LogCleanerIntegrationTest cases on damage, truncation and sizing (their facts
and expected values, written anew over kafkalog's API).

Kafka's setup of ``setupIncreasinglyFilthyLogs`` is kept: logs of 2048-byte segments, batches
of one record ``key-<offset>``, a roll after the first batch and after every fifth, and a roll
at the end, so that ``n`` batches leave a cleanable range ending at offset ``n``."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kafkalog.errors import CorruptRecordError, DamagedLogError
from kafkalog.log import Log, LogDir, TopicConfig
from kafkalog.log.cleaner import (
    CleanerManager,
    CleanerOptions,
    CleaningInProgress,
    OffsetMap,
    clean_filthiest,
    read_checkpoint,
)
from kafkalog.log.cleaner.api import uncleanable_bytes
from kafkalog.log.cleaner.manager import cleaning
from kafkalog.log.cleaner.split import overflows, split_overflowed
from kafkalog.log.cleaner_checkpoint import _write_checkpoint, maybe_truncate_checkpoint
from kafkalog.records import Record, encode_batch

MEMORY_SIZE = 4096  # OffsetMapTest.MEMORY_SIZE


def bounded(fn: Callable[[], Any], seconds: float = 60.0) -> Any:
    """Run ``fn`` in a thread; its result or its exception, failing the test if it does not end
    within ``seconds`` (a loop that spins must be caught as a failure, not hang the suite)."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["result"] = fn()
        except BaseException as e:  # handed back to the test
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"did not end within {seconds} s"
    if "error" in out:
        raise out["error"]
    return out.get("result")


# -- OffsetMapTest (SkimpyOffsetMap) -----------------------------------------------------------


def key(i: int) -> bytes:
    return str(i).encode()


@pytest.mark.parametrize("items", [10, 100, 1000, 5000])
def test_offset_map_basic_validation(items: int) -> None:
    m = OffsetMap(items * 48)
    for i in range(items):
        assert m.put(key(i), i)
    assert all(m.get(key(i)) == i for i in range(items))


def test_offset_map_clear() -> None:
    m = OffsetMap(MEMORY_SIZE)
    for i in range(10):
        assert m.put(key(i), i)
    assert all(m.get(key(i)) == i for i in range(10))
    m.clear()
    assert all(m.get(key(i)) == -1 for i in range(10))


def full_map() -> tuple[OffsetMap, int]:
    """Kafka's loop: keys from 37 on until every slot is taken (load factor 1.0: Kafka's map
    itself has no load factor, its cleaner applies one)."""
    m = OffsetMap(MEMORY_SIZE, load_factor=1.0)
    i = 37
    while m.size < m.slots:
        assert m.put(key(i), i)
        i += 1
    return m, i


def test_offset_map_get_when_full() -> None:
    m, i = bounded(full_map)
    # a missing key in a full table: every slot probed, then "absent" (it spun for ever)
    assert bounded(lambda: m.get(key(i))) == -1
    assert m.get(key(i - 1)) == i - 1
    assert not m.put(key(i), i)  # full: refused, not looping either


def test_offset_map_update_latest_offset() -> None:
    m, i = full_map()
    assert m.get(key(i - 1)) == i - 1
    m.update_latest_offset(40)
    assert m.get(key(40)) == 40
    assert m.latest_offset == 40


def test_offset_map_latest_offset() -> None:
    m, i = full_map()
    assert m.latest_offset == i - 1


def test_offset_map_utilization() -> None:
    m = OffsetMap(MEMORY_SIZE, load_factor=1.0)
    assert m.utilization == 0.0
    i = 37
    while m.size < m.slots:
        m.put(key(i), i)
        assert m.utilization == m.size / m.slots
        i += 1


def test_offset_map_is_sized_as_kafka_sizes_it() -> None:
    # SkimpyOffsetMap: slots = memory / 24, no rounding; the cleaner's maxDesiredMapSize is
    # slots x load factor: 128 MiB holds 5,033,164 keys a round (it held 3.77M when the
    # slots were rounded down to a power of two)
    m = OffsetMap(128 * 1024 * 1024, load_factor=0.9)
    assert m.slots == 5_592_405
    assert int(m.slots * 0.9) == 5_033_164
    assert OffsetMap(MEMORY_SIZE).slots == 170
    # LogCleaner gives the map at most Int.MaxValue bytes
    assert OffsetMap(8 * 1024**3).slots == (2**31 - 1) // 24
    # and a table of a size that is no power of two holds exactly its share
    m = OffsetMap(1000 * 24, load_factor=0.9)
    assert m.slots == 1000
    assert all(m.put(key(i), i) for i in range(900))
    assert not m.put(key(900), 900)
    assert all(m.get(key(i)) == i for i in range(900))


# -- logs as LogCleanerManagerTest makes them ----------------------------------------------------


def compact_config(**kw: object) -> TopicConfig:
    base: dict[str, object] = {
        "cleanup_policy": "compact",
        "segment_bytes": 2048,
        "file_delete_delay_ms": 0,
        "min_cleanable_dirty_ratio": 0.05,  # createLowRetentionLogConfig's
    }
    base.update(kw)
    return TopicConfig(**base)  # type: ignore[arg-type]


def write_records(log: Log, batches: int, per_batch: int = 1, per_segment: int = 5) -> None:
    for i in range(batches):
        start = log.log_end_offset
        log.append_records(
            [
                Record(-1, 1000, b"key-%d" % o, b"value-%d" % o)
                for o in range(start, start + per_batch)
            ]
        )
        if i % per_segment == 0:
            log.roll()
    log.roll()


def filthy_logs(d: LogDir, topic: str, partitions: int, start: int, step: int) -> list[Log]:
    logs = []
    for p in range(partitions):
        log = d.log(topic, p, create=True, config=compact_config())
        write_records(log, start + p * step)
        logs.append(log)
    return logs


def checkpoints(d: LogDir) -> dict[tuple[str, int], int]:
    return read_checkpoint(d.path)


def set_checkpoint(log: Log, offset: int) -> None:
    _write_checkpoint(log.directory, (log.topic, log.partition), offset)


def wishing_well(d: LogDir) -> list[Log]:
    """Kafka's three "wishing-well" partitions, cleaned to 20: cleanable [20, 20], [20, 25],
    [20, 30]."""
    logs = filthy_logs(d, "wishing-well", 3, 20, 5)
    for log in logs:
        set_checkpoint(log, 20)
    return logs


def test_grab_filthiest_returns_log_with_dirtiest_ratio(tmp_path: Path) -> None:
    with LogDir(tmp_path / "d", writable=True) as d:
        logs = wishing_well(d)
        result = clean_filthiest(logs, manager=CleanerManager())
        assert result is not None and result.partition == 2


def test_grab_filthiest_ignores_uncleanable_partitions(tmp_path: Path) -> None:
    with LogDir(tmp_path / "d", writable=True) as d:
        logs = wishing_well(d)
        manager = CleanerManager()
        manager.mark_uncleanable(logs[2], "marked by the test")
        result = clean_filthiest(logs, manager=manager)
        assert result is not None and result.partition == 1


def test_grab_filthiest_ignores_in_progress_partitions(tmp_path: Path) -> None:
    with LogDir(tmp_path / "d", writable=True) as d:
        logs = wishing_well(d)
        with cleaning(logs[2].directory):  # LogCleaningInProgress
            result = clean_filthiest(logs, manager=CleanerManager())
            # and a second cleaning of it meanwhile is refused, not run twice
            with pytest.raises(CleaningInProgress):
                logs[2].compact()
        assert result is not None and result.partition == 1


def test_grab_filthiest_ignores_in_progress_and_uncleanable(tmp_path: Path) -> None:
    with LogDir(tmp_path / "d", writable=True) as d:
        logs = wishing_well(d)
        manager = CleanerManager()
        manager.mark_uncleanable(logs[1], "marked by the test")
        with cleaning(logs[2].directory):
            assert clean_filthiest(logs, manager=manager) is None


def test_dirty_offset_reset_if_larger_than_end_offset(tmp_path: Path) -> None:
    with LogDir(tmp_path / "d", writable=True) as d:
        (log,) = filthy_logs(d, "foo", 1, 20, 5)
        set_checkpoint(log, 200)
        result = clean_filthiest([log], manager=CleanerManager())
        assert result is not None and result.first_dirty == 0


def test_dirty_offset_reset_if_smaller_than_start_offset(tmp_path: Path) -> None:
    with LogDir(tmp_path / "d", writable=True) as d:
        (log,) = filthy_logs(d, "foo", 1, 20, 5)
        log.increment_log_start_offset(10)
        set_checkpoint(log, 0)
        result = clean_filthiest([log], manager=CleanerManager())
        assert result is not None and result.first_dirty == 10


def test_checkpoint_updated_for_invalid_offset_no_cleaning(tmp_path: Path) -> None:
    with LogDir(tmp_path / "d", writable=True) as d:
        (log,) = filthy_logs(d, "foo", 1, 20, 5)
        log.increment_log_start_offset(20)
        set_checkpoint(log, 15)
        assert clean_filthiest([log], manager=CleanerManager()) is None
        # not selected, yet the out-of-range checkpoint is written corrected
        assert checkpoints(d)[("foo", 0)] == 20


def test_checkpoint_updated_for_invalid_offset_not_selected(tmp_path: Path) -> None:
    with LogDir(tmp_path / "d", writable=True) as d:
        logs = filthy_logs(d, "foo", 2, 20, 5)
        logs[0].increment_log_start_offset(15)
        set_checkpoint(logs[0], 10)
        set_checkpoint(logs[1], 5)
        result = clean_filthiest(logs, manager=CleanerManager())
        assert result is not None and result.partition == 1  # the dirtier log
        assert checkpoints(d)[("foo", 0)] == 15


# -- truncation and the checkpoint -------------------------------------------------------------


def test_maybe_truncate_checkpoint_should_truncate_data(tmp_path: Path) -> None:
    with LogDir(tmp_path / "d", writable=True) as d:
        log = d.log("log", 0, create=True, config=compact_config())
        set_checkpoint(log, 999)
        maybe_truncate_checkpoint(log.directory, ("log", 0), 1000)  # checkpoint <= offset: kept
        assert checkpoints(d)[("log", 0)] == 999
        maybe_truncate_checkpoint(log.directory, ("log", 0), 1)  # checkpoint > offset: cut
        assert checkpoints(d)[("log", 0)] == 1


def test_truncation_below_the_checkpoint_keeps_one_copy_of_a_key(tmp_path: Path) -> None:
    """The issue's case: a key written 10 times after a truncation below the checkpoint kept
    10 copies (taken as clean); Kafka truncates the checkpoint with the log and keeps 1."""
    with LogDir(tmp_path / "d", writable=True) as d:
        log = d.log("t", 0, create=True, config=compact_config(segment_bytes=100_000))
        for i in range(20):
            log.append_records([Record(-1, 1000, b"k%d" % i, b"v")])
        log.roll()
        log.compact(now=5000)
        assert checkpoints(d)[("t", 0)] == 20
        log.truncate_to(5)
        assert checkpoints(d)[("t", 0)] == 5
        for i in range(10):
            log.append_records([Record(-1, 1000, b"again", b"%d" % i)])
        log.roll()
        log.compact(now=5000)
        values = [r.value for r in log.records() if r.key == b"again"]
        assert values == [b"9"]
        log.truncate_fully_and_start_at(3)
        assert checkpoints(d)[("t", 0)] == 3


# -- segments below the log start of a compact-only log --------------------------------------


def three_segments(d: LogDir, topic: str) -> Log:
    """Segments [0, 5, 10] of 5 records each and an empty active one at 15; 400-byte segments,
    so that a cleaning leaves each in a group of its own (as Kafka's test's 5-record segments)."""
    log = d.log(topic, 0, create=True, config=compact_config(segment_bytes=400))
    for base in range(3):
        for i in range(5):
            log.append_records([Record(-1, 1000, b"test", b"%d" % (base * 5 + i))])
        log.roll()
    return log


def test_segments_below_log_start_of_compact_log_are_deleted(tmp_path: Path) -> None:
    """testLogsWithSegmentsToDeleteShouldConsiderCleanupPolicyCompactLogs: a compact-only log
    also loses its segments below the log start ([0, 5, 10] -> [10] as the issue found), both
    when it is the one cleaned and when it is only looked at."""
    with LogDir(tmp_path / "d", writable=True) as d:
        picked = three_segments(d, "picked")
        picked.increment_log_start_offset(10)
        result = clean_filthiest([picked], manager=CleanerManager())
        assert result is not None and result.deleted_segments >= 1
        assert [s.base_offset for s in picked.segments if s.base_offset < 15] == [10]
        idle = three_segments(d, "idle")
        idle.reconfigure(compact_config(segment_bytes=400, min_cleanable_dirty_ratio=0.99))
        set_checkpoint(idle, 15)  # nothing dirty: not picked
        idle.increment_log_start_offset(10)
        assert clean_filthiest([idle], manager=CleanerManager()) is None
        assert [s.base_offset for s in idle.segments] == [10, 15]


def test_uncleanable_partitions_are_not_deleted_from(tmp_path: Path) -> None:
    """testLogsWithSegmentsToDeleteShouldNotConsiderUncleanablePartitions."""
    with LogDir(tmp_path / "d", writable=True) as d:
        log = three_segments(d, "log")
        log.increment_log_start_offset(10)
        manager = CleanerManager()
        manager.mark_uncleanable(log, "marked by the test")
        assert clean_filthiest([log], manager=manager) is None
        assert [s.base_offset for s in log.segments] == [0, 5, 10, 15]


# -- damage: never a hang, never a stall of the others -----------------------------------------


def test_corrupt_message_size_larger_than_bytes_available(tmp_path: Path) -> None:
    """LogCleanerTest.testCorruptMessageSizeLargerThanBytesAvailable: the first segment's file
    cut to 1024 bytes under the open log. Kafka throws CorruptRecordException; kafkalog spun
    for ever holding the log's lock. Now: an error naming the file and the byte, and the lock
    free (the partition appends and reads after it)."""
    big = 64 * 1024
    log = Log(tmp_path / "d" / "t-0", compact_config(segment_bytes=big * 16))
    while len(log.segments) < 2:
        log.append_records([Record(-1, 1000, b"%d" % log.log_end_offset, bytes(big))])
    first = log.segments[0].log.path
    with open(first, "r+b") as f:
        f.truncate(1024)
    with pytest.raises(CorruptRecordError) as caught:
        bounded(lambda: log.compact(now=5000), 60)
    assert isinstance(caught.value, DamagedLogError)
    assert caught.value.path == first and caught.value.position == 1024
    assert f"{first} at byte 1024" in str(caught.value)
    bounded(lambda: log.append_records([Record(-1, 1000, b"after", b"x")]), 30)
    log.close()


def test_a_read_of_a_segment_cut_under_the_open_log_ends(tmp_path: Path) -> None:
    """The walk the cleaner shares with every reader (``SegmentFile.entries``) spun for ever
    on a file shorter than the open log holds (a read that returns nothing never moves on):
    the dirty section's first-batch timestamps, a fetch and ``records()`` all hung, under the
    log's lock for some. Now each names the file and the byte where the file ends."""
    log = Log(tmp_path / "d" / "t-0", compact_config(segment_bytes=1024))
    for i in range(60):
        log.append_records([Record(-1, 1000, b"k%d" % (i % 7), b"v" * 30)])
    first = log.segments[0].log.path
    size = os.path.getsize(first)
    with open(first, "r+b") as f:
        f.truncate(size - 10)
    with pytest.raises(DamagedLogError) as caught:
        bounded(lambda: sum(1 for _ in log.records()), 30)
    assert caught.value.path == first and caught.value.position == size - 10
    log.close()


def test_load_factor_one_finishes(tmp_path: Path) -> None:
    """A full map (load factor 1.0) cleaned for ever; Kafka finishes in rounds."""
    log = Log(tmp_path / "d" / "t-0", compact_config(segment_bytes=100_000))
    for rep in range(3):
        for i in range(200):
            log.append_records([Record(-1, 1000, b"k%03d" % i, b"%d" % rep)])
    log.roll()
    options = CleanerOptions(dedupe_buffer_size=64 * 24, load_factor=1.0)
    result = bounded(lambda: log.compact(now=5000, options=options), 120)
    # 64 slots all usable: each round maps the next 64 dirty records (64 distinct keys, a key
    # coming back every 200 records), so 600 records take ceil(600 / 64) rounds, as Kafka's
    # cleaner takes with a full map; before, the first lookup of a missing key never returned
    assert result.rounds == 10
    latest = {r.key: r.value for r in log.records()}
    assert latest == {b"k%03d" % i: b"2" for i in range(200)}
    assert sum(1 for _ in log.records()) == 200
    log.close()


def break_partition(directory: str) -> None:
    """Garbage over a batch in the middle of the partition's first segment (outside what a
    clean shutdown's open checks: the next cleaning meets it)."""
    first = sorted(p for p in os.listdir(directory) if p.endswith(".log"))[0]
    path = os.path.join(directory, first)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.seek(size // 2)
        f.write(b"jogeajgoea" * 8)


def test_marks_partitions_uncleanable_and_cleans_the_others(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """LogCleanerIntegrationTest.testMarksPartitionsAsOfflineAndPopulatesUncleanableMetrics,
    on a data directory: two of three compacted partitions damaged; passes of the cleaner
    mark them uncleanable (a log line each, the gauges count them and their dirty bytes) and
    clean the third. A damaged partition deleted is no longer counted (kafkalog forgets a mark
    when the partition's directory is gone; Kafka when the log leaves its pool)."""
    data = tmp_path / "d"
    with LogDir(data, writable=True) as d:
        for p in range(3):
            log = d.log("t", p, create=True, config=compact_config())
            for dup in range(3):
                for k in range(20):
                    log.append_records([Record(-1, 1000, b"key%d" % k, b"v%d-%d" % (k, dup))])
            log.roll()
    break_partition(str(data / "t-0"))
    break_partition(str(data / "t-1"))
    config = compact_config(min_cleanable_dirty_ratio=0.01)
    caplog.set_level(logging.ERROR, logger="kafkalog.log.cleaner")
    with LogDir(data, writable=True) as d:
        results = []
        for _ in range(5):
            results.append(bounded(lambda: d.clean_filthiest(lambda topic: config, now=5000), 60))
        manager = d.cleaner_manager
        marked = manager.uncleanable_partitions(str(data))
        assert set(marked) == {("t", 0), ("t", 1)}
        assert manager.uncleanable_partitions_count(str(data)) == 2
        for (_, p), mark in marked.items():
            assert f"t-{p}" in mark.reason and "at byte" in mark.reason
        cleaned = [r for r in results if r is not None]
        assert [r.partition for r in cleaned] == [2]
        assert sum(1 for _ in d.log("t", 2).records()) == 20
        logs = [d.log("t", p) for p in range(3)]
        expected = sum(
            sum(s.size for s in log.segments if s.base_offset < log.segments[-1].base_offset)
            for log in logs[:2]
        )
        assert uncleanable_bytes(manager, logs, str(data)) == expected
        lines = [r.getMessage() for r in caplog.records if "uncleanable" in r.getMessage()]
        assert len(lines) == 2 and all("t-0" in m or "t-1" in m for m in lines)
        d.remove_partition("t", 0)
        assert not (data / "t-0").exists()
        d.clean_filthiest(lambda topic: config, now=5000)
        assert set(manager.uncleanable_partitions(str(data))) == {("t", 1)}


def test_a_partition_that_cannot_open_is_uncleanable_not_fatal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A partition whose open fails (damage its loader refuses) is marked uncleanable by the
    directory's pass, which cleans the others; a damaged one that opens is marked when its
    cleaning meets the damage, and the next pass cleans another (Kafka's cleaner backs off
    after a failed cleaning, it does not pick again in the same pass)."""
    data = tmp_path / "d"
    with LogDir(data, writable=True) as d:
        for p in range(3):
            log = d.log("t", p, create=True, config=compact_config())
            for dup in range(3 + p):
                for k in range(20):
                    log.append_records([Record(-1, 1000, b"key%d" % k, b"v%d" % dup)])
            log.roll()
    break_partition(str(data / "t-2"))
    config = compact_config(min_cleanable_dirty_ratio=0.01)
    real_open = LogDir.log

    def refusing(self: LogDir, topic: str, partition: int, **kw: Any) -> Log:
        if partition == 0:
            raise DamagedLogError.found(
                "refused by the test", path=str(data / "t-0" / "x.log"), position=7, partition="t-0"
            )
        return real_open(self, topic, partition, **kw)

    monkeypatch.setattr(LogDir, "log", refusing)
    with LogDir(data, writable=True) as d:
        results = [d.clean_filthiest(lambda topic: config, now=5000) for _ in range(3)]
        # every pass: one cleaning attempt; t-1 cleaned, t-2's attempt met its damage
        assert [r.partition if r is not None else None for r in results].count(None) == 2
        assert [r.partition for r in results if r is not None] == [1]
        marked = d.cleaner_manager.uncleanable_partitions(str(data))
        assert set(marked) == {("t", 0), ("t", 2)}
        assert "x.log at byte 7" in marked[("t", 0)].reason
        assert "t-2" in marked[("t", 2)].reason
        assert sum(1 for _ in d.log("t", 1).records()) == 20


def test_concurrent_segment_deletion_aborts_the_group(tmp_path: Path) -> None:
    """testCleanSegmentsWithConcurrentSegmentDeletion. Deliberate difference: Kafka swaps the
    cleaned segment in although retention deleted one of the group's segments meanwhile (the
    cleaned segment then holds records below the new log start until the next retention);
    kafkalog aborts that group (CleaningAborted, nothing swapped, checkpoint not moved), so
    bytes retention or DeleteRecords removed are never written back into a new file, and the
    next cleaning does the work. What Kafka asserts of the outcome holds: the deleted segment
    goes exactly once, and no cleaned file is left behind."""
    from kafkalog.log.cleaner import CleaningAborted

    log = Log(
        tmp_path / "d" / "t-0",
        compact_config(segment_bytes=1024, cleanup_policy="compact,delete"),
    )
    while len(log.segments) < 3:
        log.append_records([Record(-1, 1000, b"0", b"%d" % log.log_end_offset)])
        log.roll()
    first = log.segments[0].log.path

    def delete_meanwhile(step: str) -> None:
        if step == "cleaned-written":
            log.increment_log_start_offset(log.segments[-1].base_offset)
            log.delete_old_segments(5000)

    with pytest.raises(CleaningAborted):
        log.compact(now=5000, on_step=delete_meanwhile)
    assert not os.path.exists(first) and not any(
        p.endswith(".cleaned") for p in os.listdir(log.directory)
    )
    # Kafka ends with 2 segments: its cleaned segment (offsets below the new log start) and
    # the active one; kafkalog with the active one alone, nothing below the log start kept
    log.compact(now=5000)
    assert [s.base_offset for s in log.segments] == [log.log_start_offset]
    log.close()


# -- the command -------------------------------------------------------------------------------


def test_compact_command_reports_the_damaged_and_cleans_the_rest(tmp_path: Path) -> None:
    import json

    from tests.clirun import kafkalog_here

    data = tmp_path / "data"
    for topic in ("__consumer_offsets", "orders"):
        with Log(data / f"{topic}-0", TopicConfig(segment_bytes=2048)) as log:
            for i in range(60):
                log.append_records([Record(-1, 1000 + i, b"k%d" % (i % 4), b"v%d" % i)])
            log.roll()
    break_partition(str(data / "orders-0"))

    def segment_bytes() -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in (data / "orders-0").glob("*.log")}

    before = segment_bytes()
    run = kafkalog_here("compact", str(data), "--config", "cleanup.policy=compact", "--json")
    assert run.returncode == 1, run.stderr
    rows = [json.loads(line) for line in run.stdout.splitlines()]
    orders = next(r for r in rows if r.get("partition") == "orders-0")
    offsets = next(r for r in rows if r.get("partition") == "__consumer_offsets-0")
    assert orders["uncleanable"] and "orders-0" in orders["error"] and "at byte" in orders["error"]
    assert offsets["stats"]["records_superseded"] == 56
    assert rows[-1]["uncleanable"] == 1 and rows[-1]["partitions"] == 1
    assert segment_bytes() == before  # the damaged partition's records left as they were
    text = kafkalog_here("compact", str(data), "--config", "cleanup.policy=compact")
    assert text.returncode == 1
    assert "orders-0: uncleanable, left as it was" in text.stdout
    assert "1 partitions cleaned, 0 skipped, 1 uncleanable" in text.stdout


# -- segments whose offsets overflow (LogSplitter) -----------------------------------------------


def overflowed_log(directory: Path) -> Log:
    """A legacy-shaped log: segment 0 holds offsets 0..9 and then 2^31+5.., more than 2^31-1
    past its base (old brokers wrote such segments); the keys of the late batch supersede
    every other early key."""
    cfg = compact_config(segment_bytes=1024 * 1024)
    with Log(directory, cfg) as log:
        for i in range(10):
            log.append_records([Record(-1, 1000, b"k%d" % i, b"early%d" % i)])
        path = log.segments[0].log.path
    late = [Record(-1, 1000, b"k%d" % i, b"late%d" % i) for i in range(0, 10, 2)]
    with open(path, "ab") as f:
        f.write(encode_batch(late, base_offset=2**31 + 5))
    log = Log(directory, cfg)
    log.roll()
    return log


def test_split_of_a_segment_with_offset_overflow(tmp_path: Path) -> None:
    """testSegmentWithOffsetOverflow, its first half: the split leaves one segment more, the
    same records at the same offsets, and no segment that overflows."""
    log = overflowed_log(tmp_path / "d" / "t-0")
    before = [(r.offset, r.key, r.value) for r in log.records()]
    count = len(log.segments)
    (seg,) = [s for s in log.segments if overflows(s)]
    pieces = split_overflowed(log, seg, log.lock)
    assert [p.base_offset for p in pieces] == [0, 2**31 + 5]
    assert len(log.segments) == count + 1
    assert not any(overflows(s) for s in log.segments)
    assert [(r.offset, r.key, r.value) for r in log.records()] == before
    log.close()
    with Log(tmp_path / "d" / "t-0", writable=False) as again:  # as the loader sees it
        assert [(r.offset, r.key, r.value) for r in again.records()] == before


def test_cleaning_splits_an_overflowed_segment_then_cleans_it(tmp_path: Path) -> None:
    """testSegmentWithOffsetOverflow, its second half through Log.compact: every cleaning of
    such a segment raised SegmentOverflowError ("roll a new segment first"); now the cleaning
    splits it (Kafka aborts that cleaning and cleans the pieces next time: kafkalog starts the
    next round at once) and keeps the latest record of every key, at its offset."""
    log = overflowed_log(tmp_path / "d" / "t-0")
    result = log.compact(now=5000)
    assert not any(overflows(s) for s in log.segments)
    kept = [(r.offset, r.key, r.value) for r in log.records()]
    expected = [(i, b"k%d" % i, b"early%d" % i) for i in range(1, 10, 2)]
    expected += [(2**31 + 5 + j, b"k%d" % i, b"late%d" % i) for j, i in enumerate(range(0, 10, 2))]
    assert kept == expected
    assert result.stats.records_superseded == 5
    log.close()


def test_compact_command_passes_by_a_partition_in_use(tmp_path: Path) -> None:
    """LogCleanerManager's in-progress rule for the command: a partition another process is
    writing or cleaning (its lock held) is listed as skipped, and the others are cleaned."""
    import json

    from tests.clirun import kafkalog

    data = tmp_path / "data"
    for topic in ("__consumer_offsets", "orders"):
        with Log(data / f"{topic}-0", TopicConfig(segment_bytes=2048)) as log:
            for i in range(60):
                log.append_records([Record(-1, 1000 + i, b"k%d" % (i % 4), b"v%d" % i)])
            log.roll()
    with Log(data / "orders-0", TopicConfig(segment_bytes=2048)):
        # a real process: the lock this one holds is another process's to it
        run = kafkalog("compact", str(data), "--config", "cleanup.policy=compact", "--json")
    assert run.returncode == 0, run.stderr
    rows = [json.loads(line) for line in run.stdout.splitlines()]
    orders = next(r for r in rows if r.get("partition") == "orders-0")
    offsets = next(r for r in rows if r.get("partition") == "__consumer_offsets-0")
    assert orders["skipped"] and "orders-0" in orders["reason"]
    assert offsets["stats"]["records_superseded"] == 56
    assert rows[-1]["skipped"] == 1 and rows[-1]["partitions"] == 1
