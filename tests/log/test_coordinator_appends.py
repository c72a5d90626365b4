"""A coordinator's own transactional batches (the TxnOffsetCommit records a group coordinator
writes to ``__consumer_offsets``, each with the producer's id and epoch and sequence 0, as Kafka's
GroupMetadataManager.storeOffsets writes them) are checked as Kafka checks a COORDINATOR append:
the epoch only. Neither the duplicate check nor the sequence check applies; they are a
producer's (UnifiedLog.analyzeAndValidateProducerState, ProducerAppendInfo.maybeValidateDataBatch
check them for CLIENT appends only)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkalog.errors import ProducerStateError
from kafkalog.log import AppendOrigin, Log
from kafkalog.records import ControlType, Record, encode_batch
from kafkalog.records.batch import encode_control_batch


def txn_batch(value: bytes, epoch: int = 0, sequence: int = 0) -> bytes:
    return encode_batch(
        [Record.of(value, key=b"k", timestamp=1)],
        producer_id=7,
        producer_epoch=epoch,
        base_sequence=sequence,
        is_transactional=True,
    )


def commit(epoch: int = 0) -> bytes:
    return encode_control_batch(
        ControlType.COMMIT, offset=0, timestamp=1, producer_id=7, producer_epoch=epoch
    )


def test_each_transaction_s_coordinator_batch_is_written(tmp_path: Path) -> None:
    log = Log(tmp_path / "__consumer_offsets-0", writable=True)
    try:
        offsets = []
        for i in range(3):  # three transactions of one producer, each with sequence 0
            info = log.append(txn_batch(b"%d" % i), origin=AppendOrigin.COORDINATOR)
            assert not info.duplicate
            offsets.append(info.first_offset)
            log.append(commit(), origin=AppendOrigin.COORDINATOR)
        assert offsets == [0, 2, 4]
        assert [(r.offset, r.value) for r in log.records(0)] == [(0, b"0"), (2, b"1"), (4, b"2")]
    finally:
        log.close()


def test_a_client_retry_is_still_a_duplicate_and_an_old_epoch_still_fenced(
    tmp_path: Path,
) -> None:
    log = Log(tmp_path / "t-0", writable=True)
    try:
        first = log.append(txn_batch(b"a"))
        again = log.append(txn_batch(b"a"))
        assert again.duplicate and again.first_offset == first.first_offset
        log.append(commit(), origin=AppendOrigin.COORDINATOR)
        log.append(txn_batch(b"b", epoch=1), origin=AppendOrigin.COORDINATOR)
        with pytest.raises(ProducerStateError):
            log.append(txn_batch(b"c", epoch=0), origin=AppendOrigin.COORDINATOR)
        assert log.log_end_offset == 3
    finally:
        log.close()
