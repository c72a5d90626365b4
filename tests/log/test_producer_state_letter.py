"""The producer state to Kafka's letter (issue 24 §4), each point against the facts of Kafka's
ProducerStateManager, ProducerAppendInfo and UnifiedLog.append / maybeIncrementLogStartOffset:

- one append of several batches (a follower's fetch) records each aborted transaction's last
  stable offset as Kafka's ``lastStableOffset(completedTxn)`` computes it: the transactions the
  append began are open, the ones it completed are closed one after another in offset order;
- the last stable offset never falls below the log start offset;
- an empty control batch (what the cleaner leaves of a marker) is "transaction already
  cleaned", not damage;
- the producer state's map end offset follows every append, so a snapshot at the log end is
  written after plain appends too.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import pytest

from kafkalog.errors import KafkalogError
from kafkalog.index.txn_index import AbortedTxn
from kafkalog.log import Log, TopicConfig
from kafkalog.log.producer_snapshot import read_snapshot
from kafkalog.log.producer_state import ProducerStateManager
from kafkalog.records import ControlType, Record, RecordBatch, encode_batch
from kafkalog.records.batch import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    assemble_batch,
    encode_control_batch,
)
from provenance import FIXTURES

T0 = 1_700_000_000_000


def data(
    pid: int, seq: int, n: int = 1, *, offset: int = 0, txn: bool = True, epoch: int = 0
) -> bytes:
    recs = [Record.of(b"v%d" % i, None, T0 + i, offset=offset + i) for i in range(n)]
    return encode_batch(
        recs,
        base_offset=offset,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=txn,
    )


def plain(n: int = 1, *, offset: int = 0) -> bytes:
    return encode_batch(
        [Record.of(b"p%d" % i, None, T0, offset=offset + i) for i in range(n)], base_offset=offset
    )


def marker(pid: int, abort: bool, offset: int = 0, epoch: int = 0) -> bytes:
    return encode_control_batch(
        ControlType.ABORT if abort else ControlType.COMMIT,
        offset=offset,
        timestamp=T0,
        producer_id=pid,
        producer_epoch=epoch,
        coordinator_epoch=1,
    )


def cleaned_marker(pid: int, offset: int, epoch: int = 0) -> bytes:
    """A control batch without records, as Kafka's cleaner leaves a marker it removed while
    the batch was its producer's last (MemoryRecords.filterTo keeps the empty batch's header:
    offsets, producer id and epoch, transactional and control flags)."""
    return assemble_batch(
        b"",
        base_offset=offset,
        last_offset_delta=0,
        records_count=0,
        base_timestamp=T0,
        max_timestamp=T0,
        attributes=ATTR_CONTROL | ATTR_TRANSACTIONAL,
        producer_id=pid,
        producer_epoch=epoch,
    )


def parse(raw: bytes) -> RecordBatch:
    return RecordBatch.parse(memoryview(raw), 0, "<test>")


def one_append(state: ProducerStateManager, *batches: bytes) -> list[AbortedTxn]:
    """The batches as one append (each keeps its own base offset), committed together."""
    info = state.prepare(client=False)
    for raw in batches:
        b = parse(raw)
        info.append(b, b.base_offset)
    return info.commit()


def make(tmp_path: Path, **config: object) -> Log:
    return Log(tmp_path / "t-0", TopicConfig(file_delete_delay_ms=0, **config))  # type: ignore[arg-type]


# -- 1. several batches in one append -------------------------------------------------------------
def test_an_abort_inside_an_append_sees_the_transactions_open_at_its_marker(
    tmp_path: Path,
) -> None:
    # producer 1's transaction began at 0 in an earlier append; one append then carries
    # producer 2's first batch (5), producer 1's ABORT (6) and producer 2's ABORT (7). At 6
    # producer 2's transaction is open: Kafka records LSO 5 for producer 1, not the 8 the
    # state at the end of the append would give
    state = ProducerStateManager(str(tmp_path))
    assert one_append(state, data(1, 0, 5, offset=0)) == []
    found = one_append(state, data(2, 0, offset=5), marker(1, True, 6), marker(2, True, 7))
    assert found == [AbortedTxn(1, 0, 6, 5), AbortedTxn(2, 5, 7, 8)]
    assert state.first_unstable_offset() is None


def test_transactions_an_append_begins_after_an_abort_count_for_its_lso(tmp_path: Path) -> None:
    # Kafka registers every transaction an append begins before it completes any
    # (ProducerStateManager.update, then lastStableOffset/completeTxn in order), so an abort
    # followed in the same append by plain data and a new transaction of another producer
    # gets that transaction's first offset (9), not the offset after its marker (7)
    state = ProducerStateManager(str(tmp_path))
    one_append(state, data(1, 0, 6, offset=0))
    found = one_append(
        state, marker(1, True, 6), plain(2, offset=7), data(3, 0, offset=9), marker(3, True, 10)
    )
    assert found == [AbortedTxn(1, 0, 6, 9), AbortedTxn(3, 9, 10, 11)]


def test_one_producer_twice_in_one_append(tmp_path: Path) -> None:
    # the same producer aborts, begins again and aborts again in one append: its own
    # transactions never hold back its LSO, another producer's open one does
    state = ProducerStateManager(str(tmp_path))
    one_append(state, data(9, 0, offset=0))  # producer 9, left open throughout
    found = one_append(
        state,
        data(1, 0, offset=1),
        marker(1, True, 2),
        data(1, 1, offset=3),
        marker(1, True, 4),
    )
    assert found == [AbortedTxn(1, 1, 2, 0), AbortedTxn(1, 3, 4, 0)]
    assert state.first_unstable_offset() == 0


def test_a_follower_append_writes_the_lso_of_each_abort(tmp_path: Path) -> None:
    log = make(tmp_path)
    log.append(data(1, 0, 5, offset=0), assign_offsets=False)
    log.append(
        data(2, 0, offset=5) + marker(1, True, 6) + plain(offset=7) + marker(2, True, 8),
        assign_offsets=False,
    )
    assert log.active_segment.txn_index.all_aborted_txns() == [
        AbortedTxn(1, 0, 6, 5),
        AbortedTxn(2, 5, 8, 9),
    ]
    # a read_committed fetch of [0, 7) needs both: with LSO 9 recorded for producer 1's abort
    # the search would stop there and hand out producer 2's aborted record at 5
    assert [a.producer_id for a in log.aborted_transactions(0, 7)] == [1, 2]
    log.close()


def test_a_leader_append_of_several_batches_writes_the_same(tmp_path: Path) -> None:
    # offsets assigned (a coordinator or an embedded program appending several batches)
    log = make(tmp_path)
    log.append(data(1, 0, 5))
    log.append(data(2, 0) + marker(1, True) + plain() + marker(2, True), origin="coordinator")
    assert log.active_segment.txn_index.all_aborted_txns() == [
        AbortedTxn(1, 0, 6, 5),
        AbortedTxn(2, 5, 8, 9),
    ]
    log.close()


def _fixture_segments(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.log"))


def test_a_follower_reproduces_the_brokers_txnindex(tmp_path: Path) -> None:
    """The v2-txn partition a broker wrote (see PROVENANCE.md: segment.bytes 1400, index
    interval 100), appended again as a follower, one fetch per segment: every ``.txnindex`` and
    producer snapshot is the broker's, byte for byte. Segment 20's fetch holds producer 2003's
    transaction (26) open at producer 2002's ABORT (27), committed after it (28): its LSO is 26."""
    source = FIXTURES / "kafka-4.0-snapshot-javacode" / "v2-txn-0"
    log = make(tmp_path, segment_bytes=1400, index_interval_bytes=100)
    for segment in _fixture_segments(source):
        log.append(segment.read_bytes(), assign_offsets=False)
    log.close()
    written = tmp_path / "t-0"
    txn_indexes = sorted(p.name for p in source.glob("*.txnindex"))
    assert txn_indexes == sorted(p.name for p in written.glob("*.txnindex"))
    for name in txn_indexes:
        assert (written / name).read_bytes() == (source / name).read_bytes(), name
    snapshots = sorted(p.name for p in source.glob("*.snapshot"))
    assert snapshots == sorted(p.name for p in written.glob("*.snapshot"))
    for name in snapshots:
        assert read_snapshot(written / name) == read_snapshot(source / name), name


# -- 2. the LSO is never below the log start ------------------------------------------------------
def test_lso_after_delete_records_inside_a_segment(tmp_path: Path) -> None:
    # UnifiedLog.maybeIncrementFirstUnstableOffset: the first unstable offset is at least the
    # log start offset (logStartOffset <= lastStableOffset <= highWatermark)
    log = make(tmp_path)
    log.append(data(1, 0, 2))  # 0, 1: a transaction left open
    log.append(plain(4))  # 2..5
    assert log.last_stable_offset() == 0
    log.increment_log_start_offset(3)
    assert log.last_stable_offset() == 3
    log.append(marker(1, False), origin="coordinator")  # 6
    assert log.last_stable_offset() == 7
    log.close()


def test_lso_after_retention_deleted_the_transactions_start(tmp_path: Path) -> None:
    log = make(tmp_path, retention_ms=-1)
    log.append(data(1, 0, 2))  # 0, 1: open
    log.roll()
    log.append(plain(3))  # 2..4
    log.roll()
    log.append(plain(3))  # 5..7
    assert log.last_stable_offset() == 0
    kept = log.segments[-1].size + log.segments[-2].size
    log.config = dataclasses.replace(log.config, retention_bytes=kept)
    assert log.delete_old_segments() == 1
    assert log.log_start_offset == 2
    assert log.last_stable_offset() == 2
    log.close()
    with Log(tmp_path / "t-0", log.config, had_clean_shutdown=True) as again:
        assert again.log_start_offset == 2 and again.last_stable_offset() == 2
    with Log(tmp_path / "t-0", log.config, writable=False) as reader:
        assert reader.last_stable_offset() == 2


# -- 3. an empty control batch --------------------------------------------------------------------
def test_the_producer_state_takes_an_empty_control_batch_as_cleaned(tmp_path: Path) -> None:
    # ProducerAppendInfo.append: a control batch without records means the transaction was
    # cleaned from the log: nothing is completed, nothing refused (no epoch check either)
    state = ProducerStateManager(str(tmp_path))
    one_append(state, data(1, 0, 2, offset=0, epoch=3))
    assert one_append(state, cleaned_marker(1, 2, epoch=1)) == []
    assert state.first_unstable_offset() == 0  # nothing was completed
    entry = state.last_entry(1)
    assert entry is not None and entry.producer_epoch == 3
    # a producer seen only through an emptied marker gets an entry with nothing in it, as
    # Kafka's prepareUpdate/update leave it
    assert one_append(state, cleaned_marker(7, 3)) == []
    unknown = state.last_entry(7)
    assert unknown is not None and unknown.producer_epoch == -1 and not unknown.batches
    # replaying the log takes it the same way
    assert state.update(parse(cleaned_marker(1, 4))) is None
    assert state.map_end_offset == 5


def test_a_follower_appends_a_cleaned_marker_and_recovery_reads_it(tmp_path: Path) -> None:
    log = make(tmp_path)
    log.append(data(1, 0, 2, offset=0), assign_offsets=False)
    log.append(marker(1, False, 2), assign_offsets=False)
    # what the leader's cleaner left: the marker of producer 2's emptied transaction
    log.append(cleaned_marker(2, 3) + plain(2, offset=4), assign_offsets=False)
    assert log.log_end_offset == 6 and log.last_stable_offset() == 6
    assert [r.offset for r in log.records()] == [0, 1, 4, 5]
    path = tmp_path / "t-0"
    shutil.copytree(path, tmp_path / "crashed-0")
    log.close()
    # an unclean open replays and re-indexes every batch, the empty one too
    with Log(tmp_path / "crashed-0", log.config, had_clean_shutdown=False) as again:
        assert again.log_end_offset == 6 and again.last_stable_offset() == 6
        assert [r.offset for r in again.records()] == [0, 1, 4, 5]
        again.append(marker(2, True), origin="coordinator")  # producer 2 carries on
        assert again.log_end_offset == 7


# -- 4. the map end offset follows every append ---------------------------------------------------
def test_a_snapshot_at_the_log_end_after_plain_appends(tmp_path: Path) -> None:
    # UnifiedLog.append: updateMapEndOffset(lastOffset + 1) after every append, with or
    # without producer ids, so takeSnapshot writes the state as of the log end
    log = make(tmp_path)
    log.append(plain(3))  # the fast path
    assert log.producer_state.map_end_offset == 3
    log.append(plain(2) + plain(2))  # the fast path, several batches
    assert log.producer_state.map_end_offset == 7
    log.append(data(1, 0, 2, txn=False))  # the general path
    assert log.producer_state.map_end_offset == 9
    with log.buffered() as writer:
        writer.append_records([Record.of(b"x", None, T0)] * 3)
    assert log.log_end_offset == 12
    assert log.producer_state.map_end_offset == 12
    path = log.producer_state.take_snapshot()
    assert path is not None and os.path.basename(path) == f"{12:020d}.snapshot"
    assert [e.producer_id for e in read_snapshot(path)] == [1]
    log.close()


def test_a_snapshot_after_plain_appends_only(tmp_path: Path) -> None:
    log = make(tmp_path)
    log.append(plain(4))
    assert log.producer_state.take_snapshot() is not None
    assert log.producer_state.last_snapshot_offset == 4
    log.close()


@pytest.mark.parametrize("origin", ["leader", "follower"])
def test_a_refused_append_leaves_the_map_end_offset(tmp_path: Path, origin: str) -> None:
    log = make(tmp_path)
    log.append(data(1, 0, 2, txn=False))
    with pytest.raises(KafkalogError):
        if origin == "leader":
            log.append(data(1, 5, txn=False))  # out of order
        else:
            log.append(plain(offset=0), assign_offsets=False)  # below the log end
    assert log.producer_state.map_end_offset == log.log_end_offset == 2
    log.close()
