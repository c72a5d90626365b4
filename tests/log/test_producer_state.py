"""Producer state (kafkalog.log.producer_state) against the scenarios of Kafka's
ProducerStateManagerTest and LogTest's idempotence tests: sequence checks, epoch fencing,
transactions, markers, snapshots. Facts from Kafka's tests; the code is kafkalog's own."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kafkalog.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    KafkalogError,
    OutOfOrderSequenceError,
    ProducerStateError,
    TransactionCoordinatorFencedError,
)
from kafkalog.index.txn_index import AbortedTxn
from kafkalog.log import Log, TopicConfig
from kafkalog.log.producer_snapshot import ProducerEntry, read_snapshot
from kafkalog.log.producer_state import (
    BatchMetadata,
    ProducerStateEntry,
    ProducerStateManager,
)
from kafkalog.records import ControlType, Record, RecordBatch, encode_batch
from kafkalog.records.batch import encode_control_batch

T0 = 1_700_000_000_000
INT_MAX = 2**31 - 1


def data(
    pid: int,
    seq: int,
    n: int = 1,
    *,
    epoch: int = 0,
    txn: bool = False,
    offset: int = 0,
    ts: int = T0,
) -> bytes:
    recs = [Record.of(b"value-%d" % i, None, ts + i) for i in range(n)]
    return encode_batch(
        recs,
        base_offset=offset,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=txn,
    )


def marker(
    pid: int, abort: bool, *, epoch: int = 0, coordinator: int = 0, offset: int = 0
) -> bytes:
    return encode_control_batch(
        ControlType.ABORT if abort else ControlType.COMMIT,
        offset=offset,
        timestamp=T0,
        producer_id=pid,
        producer_epoch=epoch,
        coordinator_epoch=coordinator,
    )


def batch(raw: bytes) -> RecordBatch:
    return RecordBatch.parse(memoryview(raw), 0, "<test>")


class Manager:
    """A ProducerStateManager driven as Kafka's tests drive theirs: one batch per call."""

    def __init__(self, directory: Path) -> None:
        self.state = ProducerStateManager(str(directory))

    def append(self, raw: bytes, offset: int, *, client: bool = True) -> list[AbortedTxn]:
        info = self.state.prepare(client=client)
        info.append(batch(raw), offset)
        out = info.commit()
        self.state.map_end_offset = offset + batch(raw).last_offset_delta + 1
        return out


@pytest.fixture
def psm(tmp_path: Path) -> Manager:
    return Manager(tmp_path)


def test_basic_idempotence(psm: Manager) -> None:
    # ProducerStateManagerTest.testBasicIdempotence: sequences must follow one another
    psm.append(data(1, 0), 0)
    psm.append(data(1, 1), 1)
    with pytest.raises(OutOfOrderSequenceError, match="out of order sequence 3"):
        psm.append(data(1, 3), 2)
    entry = psm.state.last_entry(1)
    assert entry is not None and (entry.last_seq, entry.last_data_offset) == (1, 1)


def test_a_refused_batch_changes_nothing(psm: Manager) -> None:
    psm.append(data(1, 0), 0)
    before = psm.state.entries()
    with pytest.raises(ProducerStateError):
        psm.append(data(1, 5), 1)
    assert psm.state.entries() == before


def test_sequence_wraps_past_int_max(psm: Manager) -> None:
    # testProducerSequenceWrapAround: a batch may span Integer.MAX_VALUE -> 0
    psm.append(data(15, INT_MAX - 1, 1), 0)
    psm.append(data(15, INT_MAX, 2), 1)  # sequences MAX, 0
    entry = psm.state.last_entry(15)
    assert entry is not None and (entry.first_seq, entry.last_seq) == (INT_MAX - 1, 0)
    psm.append(data(15, 1), 3)


def test_sequence_may_not_wrap_before_int_max(psm: Manager) -> None:
    # testProducerSequenceInvalidWrapAround
    psm.append(data(15, INT_MAX - 2), 0)
    with pytest.raises(OutOfOrderSequenceError):
        psm.append(data(15, 0), 1)


def test_first_batch_of_an_unknown_producer_is_not_validated(psm: Manager) -> None:
    # testNoValidationOnFirstEntryWhenLoadingLog / KIP-360: an unknown producer (its records
    # deleted by retention) may continue at any sequence
    psm.append(data(9, 16, epoch=5), 0)
    entry = psm.state.last_entry(9)
    assert entry is not None and (entry.producer_epoch, entry.last_seq) == (5, 16)


def test_new_epoch_must_start_at_sequence_zero(psm: Manager) -> None:
    # testProducerEpochBumpWithNonZeroSequence (checkSequence, producerEpoch != current)
    psm.append(data(1, 0, epoch=0), 0)
    with pytest.raises(OutOfOrderSequenceError, match="new epoch 1 must start at sequence 0"):
        psm.append(data(1, 5, epoch=1), 1)
    psm.append(data(1, 0, epoch=1), 1)
    entry = psm.state.last_entry(1)
    assert entry is not None and len(entry.batches) == 1  # the old epoch's batches forgotten


def test_older_epoch_is_fenced(psm: Manager) -> None:
    # testProducerFenced / InvalidProducerEpochException for a client append
    psm.append(data(1, 0, epoch=3), 0)
    with pytest.raises(
        InvalidProducerEpochError, match="epoch 2, older than the last seen epoch 3"
    ):
        psm.append(data(1, 1, epoch=2), 1)
    with pytest.raises(InvalidProducerEpochError):
        psm.append(marker(1, abort=True, epoch=2), 1)


def test_replication_applies_what_a_client_append_would_refuse(psm: Manager) -> None:
    # AppendOrigin.REPLICATION: no sequence check, an old epoch only warned about
    psm.append(data(1, 0, epoch=3), 0)
    psm.append(data(1, 7, epoch=3), 1, client=False)
    psm.append(data(1, 9, epoch=2), 2, client=False)
    entry = psm.state.last_entry(1)
    assert entry is not None and entry.last_seq == 9


def test_non_transactional_write_inside_a_transaction(psm: Manager) -> None:
    # testNonTransactionalAppendWithOngoingTransaction
    psm.append(data(1, 0, txn=True), 0)
    with pytest.raises(InvalidTxnStateError, match="transaction begun at 0 is open"):
        psm.append(data(1, 1, txn=False), 1)


def test_control_record_bumps_producer_epoch(psm: Manager) -> None:
    # testControlRecordBumpsProducerEpoch
    psm.append(data(1, 0, txn=True), 0)
    psm.append(marker(1, abort=True, epoch=1), 1)
    entry = psm.state.last_entry(1)
    assert entry is not None
    assert (entry.producer_epoch, entry.last_seq, entry.current_txn_first_offset) == (1, -1, None)
    psm.append(data(1, 0, epoch=1), 2)


def test_coordinator_fencing(psm: Manager) -> None:
    # testCoordinatorFencing / testCoordinatorFencedAfterReload
    psm.append(data(1, 0, txn=True), 0)
    psm.append(marker(1, abort=False, coordinator=3), 1)
    psm.append(data(1, 1, txn=True), 2)
    with pytest.raises(TransactionCoordinatorFencedError, match="coordinator epoch 2"):
        psm.append(marker(1, abort=False, coordinator=2), 3)


def test_marker_without_producer_state(psm: Manager) -> None:
    # testAppendTxnMarkerWithNoProducerState: the entry is created, no transaction completed
    assert psm.append(marker(7, abort=True, epoch=2, coordinator=27), 100) == []
    entry = psm.state.last_entry(7)
    assert entry is not None
    assert (entry.producer_epoch, entry.coordinator_epoch, entry.last_data_offset) == (2, 27, -1)
    assert psm.state.first_unstable_offset() is None


def test_empty_transactions_leave_no_index_entry(psm: Manager) -> None:
    # testSkipEmptyTransactions: a marker with no open transaction completes nothing
    assert psm.append(marker(1, abort=True), 0) == []
    psm.append(data(1, 0, txn=True), 1)
    assert psm.append(marker(1, abort=True), 2) == [AbortedTxn(1, 1, 2, 3)]


def test_first_unstable_and_last_stable_offsets(psm: Manager) -> None:
    # testLastStableOffsetCompletedTxn: the LSO recorded for an abort is the earliest other
    # open transaction, else the offset after the marker
    psm.append(data(1, 0, txn=True), 99)
    psm.append(data(2, 0, txn=True), 101)
    psm.append(data(3, 0, txn=True), 103)
    assert psm.state.first_unstable_offset() == 99
    assert psm.append(marker(2, abort=True), 105) == [AbortedTxn(2, 101, 105, 99)]
    assert psm.append(marker(1, abort=False), 106) == []
    assert psm.state.first_unstable_offset() == 103
    assert psm.append(marker(3, abort=True), 107) == [AbortedTxn(3, 103, 107, 108)]
    assert psm.state.first_unstable_offset() is None


def test_only_the_last_five_batches_are_kept(psm: Manager) -> None:
    for seq in range(7):
        psm.append(data(1, seq), seq)
    entry = psm.state.last_entry(1)
    assert entry is not None
    assert [b.last_seq for b in entry.batches] == [2, 3, 4, 5, 6]
    assert psm.state.find_duplicate(batch(data(1, 6))) == BatchMetadata(6, 6, 0, T0)
    assert psm.state.find_duplicate(batch(data(1, 1))) is None
    assert psm.state.find_duplicate(batch(data(1, 6, epoch=1))) is None


def test_snapshot_round_trip(psm: Manager, tmp_path: Path) -> None:
    # testTakeSnapshot / testRecoverFromSnapshot: the snapshot keeps the last batch only
    psm.append(data(1, 0, 3), 0)
    psm.append(data(1, 3, 2, txn=True), 3)
    psm.append(data(2, 0, epoch=4), 5)
    psm.append(marker(3, abort=False, coordinator=8), 6)
    path = psm.state.take_snapshot()
    assert path == str(tmp_path / f"{7:020d}.snapshot")
    assert psm.state.take_snapshot() is None  # not a new offset
    assert read_snapshot(path) == [
        ProducerEntry(1, 0, 4, 4, 1, T0 + 1, -1, 3),
        ProducerEntry(2, 4, 0, 5, 0, T0, -1, -1),
        ProducerEntry(3, 0, -1, -1, 0, T0, 8, -1),
    ]
    again = ProducerStateManager(str(tmp_path))
    again.truncate_and_reload(0, 7)
    assert again.map_end_offset == 7
    assert again.entries() == psm.state.entries()
    assert again.first_unstable_offset() == 3
    # the next batch of producer 1 continues from the snapshot's last sequence
    info = again.prepare()
    info.append(batch(data(1, 5, txn=True)), 7)
    with pytest.raises(OutOfOrderSequenceError):
        again.prepare().append(batch(data(1, 4)), 7)


def test_truncate_and_reload_removes_snapshots_out_of_range(tmp_path: Path) -> None:
    # testTruncateAndReloadRemovesOutOfRangeSnapshots: (log start, log end] survives
    state = ProducerStateManager(str(tmp_path))
    for offset in (1, 2, 3, 4):
        state.map_end_offset = offset
        state.take_snapshot()
    state.truncate_and_reload(1, 3)
    assert state.snapshot_offsets() == [2, 3]
    assert state.map_end_offset == 3


def test_a_corrupt_snapshot_is_deleted_and_an_older_one_loaded(
    psm: Manager, tmp_path: Path
) -> None:
    # testLoadFromCorruptSnapshotFile
    psm.append(data(1, 0), 0)
    psm.state.take_snapshot()  # at 1
    psm.append(data(1, 1), 1)
    newest = psm.state.take_snapshot()  # at 2
    assert newest is not None
    raw = bytearray(Path(newest).read_bytes())
    raw[-1] ^= 0x01
    Path(newest).write_bytes(bytes(raw))
    again = ProducerStateManager(str(tmp_path))
    again.truncate_and_reload(0, 2)
    assert again.snapshot_offsets() == [1]
    assert again.map_end_offset == 1
    entry = again.last_entry(1)
    assert entry is not None and entry.last_seq == 0


def test_remove_stray_snapshots(tmp_path: Path) -> None:
    # testRemoveStraySnapshotsKeepCleanShutdownSnapshot / testRemoveAllStraySnapshots
    state = ProducerStateManager(str(tmp_path))
    for offset in (5, 10, 12, 20, 42):
        state.map_end_offset = offset
        state.take_snapshot()
    state.remove_stray_snapshots([5, 10, 20])
    assert state.snapshot_offsets() == [5, 10, 20, 42]  # the newest stray one is past 20
    state.remove_stray_snapshots([5, 10, 20, 50])
    assert state.snapshot_offsets() == [5, 10, 20]


def test_expired_producers_are_forgotten(psm: Manager) -> None:
    # ProducerStateManagerTest.testProducerExpiration... : a producer with an open transaction
    # never expires; the others do once producer.id.expiration.ms has passed
    psm.append(data(1, 0, ts=T0), 0)
    psm.append(data(2, 0, txn=True, ts=T0), 1)
    psm.append(data(3, 0, ts=T0 + 5000), 2)
    assert psm.state.remove_expired_producers(T0 + 4999, expiration_ms=5000) == []
    assert psm.state.remove_expired_producers(T0 + 5000, expiration_ms=5000) == [1]
    assert sorted(psm.state.producers) == [2, 3]
    psm.append(data(1, 7), 3)  # an unknown producer again: any sequence goes


def test_entry_copy_is_independent() -> None:
    entry = ProducerStateEntry(1)
    entry.add_batch(0, 0, 0, 0, T0)
    copy = entry.copy()
    copy.add_batch(0, 1, 1, 0, T0)
    assert len(entry.batches) == 1 and len(copy.batches) == 2


# -- through Log.append (LogTest's idempotence and transaction tests) ----------------------------
def make(tmp_path: Path, **config: object) -> Log:
    return Log(tmp_path / "t-0", TopicConfig(file_delete_delay_ms=0, **config))  # type: ignore[arg-type]


def test_duplicate_append_returns_the_original_offsets(tmp_path: Path) -> None:
    # LogTest.testDuplicateAppends
    log = make(tmp_path)
    first = log.append(data(1, 0, 3))
    log.append(data(1, 3, 2))
    size = os.path.getsize(log.active_segment.log.path)
    again = log.append(data(1, 0, 3))
    assert again == first and again.duplicate and not first.duplicate
    assert (again.first_offset, again.last_offset) == (0, 2)
    assert os.path.getsize(log.active_segment.log.path) == size
    assert log.log_end_offset == 5
    # a batch older than the last five is no duplicate any more: out of order
    for seq in range(5, 10):
        log.append(data(1, seq))
    with pytest.raises(OutOfOrderSequenceError):
        log.append(data(1, 0, 3))
    log.close()


def test_follower_appends_are_not_deduplicated(tmp_path: Path) -> None:
    # LogTest.testDuplicateAppendToFollower: replicated batches keep their offsets as given
    log = make(tmp_path)
    log.append(data(1, 0, 2, offset=0), assign_offsets=False)
    log.append(data(1, 0, 2, offset=2), assign_offsets=False)
    assert log.log_end_offset == 4
    log.close()


def test_refused_appends_write_nothing(tmp_path: Path) -> None:
    log = make(tmp_path)
    log.append(data(1, 0, epoch=2, txn=True))
    size = os.path.getsize(log.active_segment.log.path)
    for bad, error in (
        (data(1, 5, epoch=2, txn=True), OutOfOrderSequenceError),
        (data(1, 1, epoch=1, txn=True), InvalidProducerEpochError),
        (data(1, 1, epoch=2), InvalidTxnStateError),
        (marker(1, abort=True, epoch=1), InvalidProducerEpochError),
    ):
        with pytest.raises(error) as caught:
            log.append(bad, origin="coordinator" if bad[22] & 0x20 else "client")
        assert isinstance(caught.value, ProducerStateError)
        assert isinstance(caught.value, KafkalogError)
        assert caught.value.producer_id == 1
    assert os.path.getsize(log.active_segment.log.path) == size
    assert log.log_end_offset == 1
    log.close()


def test_idempotent_batches_do_not_take_the_fast_path_unchecked(tmp_path: Path) -> None:
    # non-transactional idempotent batches once went through the fast path without any check
    log = make(tmp_path)
    log.append(data(4, 0))
    with pytest.raises(OutOfOrderSequenceError):
        log.append(data(4, 2))
    with pytest.raises(OutOfOrderSequenceError):
        log.append(data(4, 2) + data(4, 3))  # the multi-batch fast path too
    log.close()


def test_abort_index_entry_and_lso_from_a_transaction_in_an_earlier_segment(
    tmp_path: Path,
) -> None:
    log = make(tmp_path)
    log.append(data(7, 0, 2, txn=True))  # 0, 1: producer 7's transaction
    log.append(data(8, 0, txn=True))  # 2: producer 8's, left open
    log.append(encode_batch([Record.of(b"plain", None, T0)]))  # 3
    assert log.last_stable_offset() == 0
    log.roll()
    info = log.append(marker(7, abort=True), origin="coordinator")  # 4
    assert info.first_offset == 4
    assert log.active_segment.txn_index.all_aborted_txns() == [AbortedTxn(7, 0, 4, 2)]
    assert log.segments[0].txn_index.all_aborted_txns() == []
    assert log.last_stable_offset() == 2
    log.append(marker(8, abort=False), origin="coordinator")
    assert log.last_stable_offset() == log.log_end_offset == 6
    log.close()


def test_snapshots_on_roll_and_close(tmp_path: Path) -> None:
    # UnifiedLog.roll takes a snapshot at the new base; close at the log end
    log = make(tmp_path)
    log.append(data(1, 0, 2, txn=True))
    log.roll()
    log.append(data(1, 2, txn=True))
    log.close()
    directory = tmp_path / "t-0"
    assert sorted(n for n in os.listdir(directory) if n.endswith(".snapshot")) == [
        f"{2:020d}.snapshot",
        f"{3:020d}.snapshot",
    ]
    assert read_snapshot(directory / f"{2:020d}.snapshot") == [
        ProducerEntry(1, 0, 1, 1, 1, T0 + 1, -1, 0)
    ]
    assert read_snapshot(directory / f"{3:020d}.snapshot") == [
        ProducerEntry(1, 0, 2, 2, 0, T0, -1, 0)
    ]
    with Log(directory, TopicConfig(), had_clean_shutdown=True) as again:
        assert again.last_stable_offset() == 0
        with pytest.raises(OutOfOrderSequenceError):
            again.append(data(1, 7, txn=True))
        assert again.append(data(1, 2, txn=True)).duplicate


def test_truncation_rebuilds_producer_state(tmp_path: Path) -> None:
    # UnifiedLog.truncateTo -> rebuildProducerState: the state as of the target offset
    log = make(tmp_path)
    log.append(data(1, 0, txn=True))  # 0
    log.append(marker(1, abort=False), origin="coordinator")  # 1
    log.append(data(1, 1, txn=True))  # 2
    assert log.last_stable_offset() == 2
    log.truncate_to(2)
    assert log.last_stable_offset() == 2 == log.log_end_offset
    log.append(data(1, 1, txn=True))  # the same sequence is welcome again
    log.truncate_to(1)
    assert log.last_stable_offset() == 0
    log.close()


@pytest.mark.parametrize("lib", ["kafka-python", "aiokafka"])
def test_batches_encoded_by_independent_producers(tmp_path: Path, lib: str) -> None:
    # kafka-python's and aiokafka's own batch builders, as their idempotent and transactional
    # producers send batches: the producer state reads them as kafkalog's own
    if lib == "kafka-python":
        from kafka.record.default_records import DefaultRecordBatchBuilder
    else:
        from aiokafka.record.default_records import DefaultRecordBatchBuilder

    def build(pid: int, epoch: int, seq: int, n: int, transactional: bool) -> bytes:
        builder = DefaultRecordBatchBuilder(2, 0, transactional, pid, epoch, seq, 1 << 20)
        for i in range(n):
            assert builder.append(i, T0 + i, b"k%d" % i, b"v%d" % i, []) is not None
        return bytes(builder.build())

    log = make(tmp_path)
    first = log.append(build(21, 3, 0, 4, False))
    second = log.append(build(21, 3, 4, 2, False))
    assert (first.first_offset, second.first_offset) == (0, 4)
    retry = log.append(build(21, 3, 0, 4, False))
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (0, 3)
    with pytest.raises(OutOfOrderSequenceError):
        log.append(build(21, 3, 7, 1, False))
    with pytest.raises(InvalidProducerEpochError):
        log.append(build(21, 2, 6, 1, False))
    log.append(build(22, 0, 0, 3, True))  # 6..8
    assert log.last_stable_offset() == 6
    log.append(marker(22, abort=True), origin="coordinator")  # 9
    assert log.active_segment.txn_index.all_aborted_txns() == [AbortedTxn(22, 6, 9, 10)]
    entry = log.producer_state.last_entry(21)
    assert entry is not None and (entry.producer_epoch, entry.last_seq) == (3, 5)
    log.close()
