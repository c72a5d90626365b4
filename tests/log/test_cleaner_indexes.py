"""The indexes of the segments a cleaning writes, and what it keeps, over real writers' shapes
(tests/read_shapes.py: scrambled timestamps, LogAppendTime, nested aborted transactions of a
follower, v1 message sets): Kafka's cleaner appends each read chunk's kept batches as one
``LogSegment.append``, so each offset-index entry names an append's largest offset at the byte
where the append starts, each time-index entry the largest timestamp so far at the last
offset of the batch holding it, the last one (written as the segment becomes inactive) the
segment's largest timestamp; the ``.txnindex`` keeps an entry exactly for the ABORT markers
kept because some batch of their transaction is (the entry moves with the marker)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from kafkalog.log import Log
from kafkalog.records import Record, RecordBatch
from kafkalog.records.model import ControlType
from read_shapes import compacting, write_shape

NAMES = [
    "v2-scrambled-multi-i1-codecs-roll",
    "v2-logappendtime-multi-i1-roll",
    "v2-txn-nested-aborts-follower-i1-roll",
    "v1-scrambled-i4096-roll",
]
NOW = 4102444800000  # 2100: every horizon passed


@pytest.mark.parametrize("name", NAMES)
def test_cleaned_segments_indexes_are_what_kafkas_cleaner_writes(name: str, tmp_path: Path) -> None:
    shape = write_shape(tmp_path, name)
    config = compacting(name)
    with Log(shape.directory, config) as log:
        log.roll()
        before = len(log.segments)
        before_txns = snapshot(log)
        result = log.compact(now=NOW)
        assert result.rounds >= 1 and result.stats.records_kept < result.stats.records_read
        cleaned = [s for s in log.segments if s.base_offset < result.end_offset]
        assert len(cleaned) < before or any(s.size == 0 for s in cleaned)
        for seg in cleaned:
            entries = list(seg.entries(0))
            starts = {e.position: e for e in entries}
            lasts = {e.last_offset for e in entries}
            offsets = list(seg.offset_index.get())
            for (o1, p1), (o2, p2) in itertools.pairwise(offsets):
                assert o1 < o2 and p1 < p2
            for off, pos in offsets:
                assert pos in starts and off >= starts[pos].last_offset and off in lasts
            times = list(seg.time_index.get())
            for a, b in itertools.pairwise(times):
                assert a.timestamp < b.timestamp and a.offset <= b.offset
            stamped = [e for e in entries if e.max_timestamp >= 0]
            if not stamped:
                assert times == []
                continue
            top = max(e.max_timestamp for e in stamped)
            holder = next(e.last_offset for e in stamped if e.max_timestamp == top)
            assert (times[-1].timestamp, times[-1].offset) == (top, holder)
            for t in times:  # the largest timestamp so far at that batch
                upto = [e.max_timestamp for e in entries if e.last_offset <= t.offset]
                assert t.offset in lasts and max(upto) == t.timestamp
        check_txn_indexes(log, cleaned, before_txns)
        # a second cleaning walks no batch of the transactions the first removed: their
        # markers lose their entries (and, stamped with a horizon, go at a third)
        log.append_records([Record(-1, NOW, b"k0", b"x")])
        log.roll()
        before_txns = snapshot(log)
        result = log.compact(now=NOW)
        cleaned = [s for s in log.segments if s.base_offset < result.end_offset]
        check_txn_indexes(log, cleaned, before_txns)


def snapshot(log: Log) -> dict[int, bool]:
    """Per ABORT marker the log's ``.txnindex`` lists: whether a batch of its transaction is
    in the log (Kafka keeps the entry of a marker the cleaning walked a batch of)."""
    batches = [
        e
        for s in log.segments
        for e in s.entries(0)
        if isinstance(e, RecordBatch) and e.is_transactional and not e.is_control
    ]
    out = {}
    for s in log.segments:
        for t in s.txn_index.all_aborted_txns():
            out[t.last_offset] = any(
                b.producer_id == t.producer_id and t.first_offset <= b.base_offset < t.last_offset
                for b in batches
            )
    return out


def check_txn_indexes(log: Log, cleaned: list[Any], before: dict[int, bool]) -> None:
    """Each cleaned segment lists exactly the kept ABORT markers whose transaction had a batch
    when the cleaning walked it, each where its marker is."""
    for seg in cleaned:
        aborts = {
            e.base_offset
            for e in seg.entries(0)
            if isinstance(e, RecordBatch)
            and e.is_control
            and e.records_count
            and e.control_record(log.limits).type is ControlType.ABORT
        }
        listed = {t.last_offset for t in seg.txn_index.all_aborted_txns()}
        assert listed == {o for o in aborts if before.get(o)}, seg.txn_index.path


TXN_AND_PRODUCER_SHAPES = [
    "v2-multi-i1-idempotent-roll",
    "v2-txn-multi-i1-roll",
    "v2-txn-follower-multi-i300",
    "v2-txn-nested-aborts-follower-i1-roll",
    "v2-gaps-follower-multi-i1-roll",
    "v2-deleterecords-txn-multi-i1-roll",
]


@pytest.mark.parametrize("name", TXN_AND_PRODUCER_SHAPES)
def test_cleaning_keeps_the_latest_committed_record_of_each_key_brute_force(
    name: str, tmp_path: Path
) -> None:
    """Against the brute force over the full decode (read_shapes.truth): below the first
    uncleanable offset exactly the latest record of each key outside aborted transactions
    stays (a tombstone too, at a first cleaning), no keyless record and no record of an
    aborted transaction; from that offset on, every record as it was."""
    from kafkalog.log.cleaner import dirty_section_of
    from read_shapes import truth

    shape = write_shape(tmp_path, name)
    config = compacting(name)
    with Log(shape.directory, config) as log:
        log.roll()
    known = truth(shape.directory)
    with Log(shape.directory, config) as log:
        bound = dirty_section_of(log, NOW).first_uncleanable
        result = log.compact(now=NOW)
        assert result.end_offset == bound
        got = [(r.offset, r.key, r.value) for r in log.records()]
    data = [r for r in known.records if not r.control]
    latest: dict[bytes, int] = {}
    for r in data:
        if r.offset < bound and r.key is not None and r.offset not in known.aborted:
            latest[r.key] = r.offset
    want = [
        (r.offset, r.key, r.value)
        for r in data
        if r.offset >= bound or (r.key is not None and latest.get(r.key) == r.offset)
    ]
    assert got == want
