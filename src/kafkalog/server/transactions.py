"""The transaction coordinator: transactional ids, their producer ids and epochs, the partitions
of each open transaction (its groups' ``__consumer_offsets`` partitions among them), and the
COMMIT/ABORT markers that end it.

Each transactional id's state is a record of ``__transaction_state`` in Kafka's format
(``TransactionLogKey`` v0, ``TransactionLogValue`` v0, through the codec generated from Kafka's
message definitions that ``kafkalog dump`` reads with), so a restart keeps its producer id and
bumps its epoch (fencing a zombie producer).

Offsets sent to a transaction go where Kafka puts them: AddOffsetsToTxn adds the group's
``__consumer_offsets`` partition to the transaction's partitions (so it is in the state record),
TxnOffsetCommit is written there as the producer's transactional batch before it is answered
(the group coordinator holds it as pending), and EndTxn's markers reach that partition like any
other, which makes the offsets committed or drops them. Ending a transaction writes
PREPARE_COMMIT/PREPARE_ABORT, the markers, then COMPLETE_COMMIT/COMPLETE_ABORT; a restart after a
crash between the first and the last finishes it as decided (:meth:`TransactionCoordinator.recover`,
run once every coordinator is loaded and before the listener opens, as Kafka's coordinator
re-sends the markers of a transaction it loads in a PREPARE state). A transaction left ONGOING
is aborted by its producer's next InitProducerId or by its timeout, counted from its start
time in the state record.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kafkalog.records import ControlType, Record, RecordBatch, encode_batch, encode_control_batch
from kafkalog.records.internal_topics import TRANSACTION_STATE, UnknownRecordType
from kafkalog.server import errors as E
from kafkalog.server.offset_store import (
    OFFSETS_TOPIC,
    CommittedOffset,
    TopicPartition,
    partition_for_group,
)

# TransactionState as Kafka numbers it in the transaction log
EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT = range(6)
INVALID_PRODUCER_ID_MAPPING = 49
CONCURRENT_TRANSACTIONS = 51
INVALID_TRANSACTION_TIMEOUT = 50
MAX_TRANSACTION_TIMEOUT_MS = 900000  # transaction.max.timeout.ms


@dataclass
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: int = EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    started_ms: int = -1


def encode_txn_key(transactional_id: str) -> bytes:
    return TRANSACTION_STATE.encode_key(
        "TransactionLogKey", {"transactionalId": transactional_id}, 0
    )


def encode_txn_value(meta: TxnMetadata, now: int) -> bytes:
    """``TransactionLogValue`` version 0, what Kafka's coordinator writes for a classic
    (transaction version 1) producer, through the schema-driven codec."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(meta.partitions):
        by_topic.setdefault(topic, []).append(partition)
    data = {
        "producerId": meta.producer_id,
        "producerEpoch": meta.producer_epoch,
        "transactionTimeoutMs": meta.timeout_ms,
        "transactionStatus": meta.state,
        "transactionPartitions": [
            {"topic": topic, "partitionIds": partitions} for topic, partitions in by_topic.items()
        ],
        "transactionLastUpdateTimestampMs": now,
        "transactionStartTimestampMs": meta.started_ms,
    }
    return TRANSACTION_STATE.encode_value("TransactionLogValue", data, 0)


def decode_txn(key: bytes, value: bytes | None) -> tuple[str, TxnMetadata | None] | None:
    """``(transactional id, its metadata or None for a tombstone)``; None for other records.
    Reads every version of the value (1 is flexible, with the producer ids of transaction
    version 2)."""
    what = "__transaction_state"
    try:
        k = TRANSACTION_STATE.decode_key(key, what=what)
    except UnknownRecordType:
        return None
    txn_id = k.data["transactionalId"]
    decoded = TRANSACTION_STATE.decode_value(k.version, value, what=what)
    if decoded is None:
        return txn_id, None
    v = decoded.data
    partitions = {
        (t["topic"], int(p)) for t in v["transactionPartitions"] or [] for p in t["partitionIds"]
    }
    meta = TxnMetadata(
        txn_id,
        v["producerId"],
        v["producerEpoch"],
        v["transactionTimeoutMs"],
        v["transactionStatus"],
        partitions,
        v["transactionStartTimestampMs"],
    )
    return txn_id, meta


class TransactionCoordinator:
    """Runs on the event loop with the rest of the broker (no locking needed).

    Building it reads ``__transaction_state`` and writes nothing; :meth:`recover` then finishes
    what the last run left half-ended, through the callbacks, so the broker calls it once
    everything those callbacks reach is built."""

    def __init__(
        self,
        *,
        partitions: int,
        offsets_partitions: int,
        append_state: Callable[[int, bytes], None],
        read_state: Callable[[], Iterable[RecordBatch]],
        append_marker: Callable[[str, int, bytes], None],
        partition_exists: Callable[[str, int], bool],
        store_offsets: Callable[[str, int, int, dict[TopicPartition, CommittedOffset]], None],
        complete_offsets: Callable[[int, int, bool], None],
        next_producer_id: Callable[[], int],
    ) -> None:
        self.partitions = partitions
        self.offsets_partitions = offsets_partitions
        self._append_state = append_state
        self._append_marker = append_marker
        self._partition_exists = partition_exists
        self._store_offsets = store_offsets
        self._complete_offsets = complete_offsets
        self._next_producer_id = next_producer_id
        self.txns: dict[str, TxnMetadata] = {}
        for batch in read_state():
            if batch.is_control:
                continue
            for rec in batch.records():
                if rec.key is None:
                    continue
                found = decode_txn(rec.key, rec.value)
                if found is None:
                    continue
                txn_id, meta = found
                if meta is None:
                    self.txns.pop(txn_id, None)
                else:
                    self.txns[txn_id] = meta

    def recover(self) -> list[str]:
        """Finish each transaction the last run left half-ended, as it was decided: its markers
        written again (a partition that already has one gets a second, which ends nothing) and
        its COMPLETE state stored. One left ONGOING stays open until its producer's next
        InitProducerId or its timeout aborts it. Returns the transactional ids finished."""
        finished = []
        for meta in self.txns.values():
            if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
                self._write_markers(meta, commit=meta.state == PREPARE_COMMIT)
                finished.append(meta.transactional_id)
        return finished

    def _persist(self, meta: TxnMetadata) -> None:
        now = int(time.time() * 1000)
        record = Record.of(
            encode_txn_value(meta, now), key=encode_txn_key(meta.transactional_id), timestamp=now
        )
        self._append_state(
            partition_for_group(meta.transactional_id, self.partitions), encode_batch([record])
        )

    def _check(self, txn_id: str, pid: int, epoch: int) -> tuple[int, TxnMetadata | None]:
        meta = self.txns.get(txn_id)
        if meta is None or meta.producer_id != pid:
            return INVALID_PRODUCER_ID_MAPPING, None
        if epoch != meta.producer_epoch:
            return E.INVALID_PRODUCER_EPOCH, None
        return E.NONE, meta

    # -- requests ----------------------------------------------------------------------------
    def init_producer_id(self, txn_id: str, timeout_ms: int) -> dict[str, Any]:
        if not 0 < timeout_ms <= MAX_TRANSACTION_TIMEOUT_MS:
            return {
                "error_code": INVALID_TRANSACTION_TIMEOUT,
                "producer_id": -1,
                "producer_epoch": -1,
            }
        meta = self.txns.get(txn_id)
        if meta is None:
            meta = TxnMetadata(txn_id, self._next_producer_id(), 0, timeout_ms)
            self.txns[txn_id] = meta
        else:
            if meta.producer_epoch >= 32766:  # epoch exhausted: a fresh producer id
                if meta.state == ONGOING:
                    self._end(meta, commit=False)
                meta.producer_id, meta.producer_epoch = self._next_producer_id(), 0
            else:
                meta.producer_epoch += 1
                if meta.state == ONGOING:
                    # a new incarnation aborts what the old one left open, its markers carrying
                    # the new epoch: the old producer is fenced from that moment
                    self._end(meta, commit=False)
            meta.timeout_ms = timeout_ms
        meta.state = EMPTY
        meta.partitions.clear()
        self._persist(meta)
        return {
            "error_code": E.NONE,
            "producer_id": meta.producer_id,
            "producer_epoch": meta.producer_epoch,
        }

    def _begin(self, meta: TxnMetadata, partitions: Iterable[TopicPartition]) -> None:
        if meta.state != ONGOING:
            meta.state = ONGOING
            meta.started_ms = int(time.time() * 1000)
        meta.partitions.update(partitions)
        self._persist(meta)

    def add_partitions(
        self, txn_id: str, pid: int, epoch: int, wanted: list[tuple[str, list[int]]]
    ) -> list[dict[str, Any]]:
        code, meta = self._check(txn_id, pid, epoch)
        missing = {(t, p) for t, ps in wanted for p in ps if not self._partition_exists(t, p)}
        if code == E.NONE and missing:
            code = E.UNKNOWN_TOPIC_OR_PARTITION
        if code == E.NONE and meta is not None:
            self._begin(meta, [(t, p) for t, ps in wanted for p in ps])
        results = []
        for topic, partitions in wanted:
            results.append(
                {
                    "name": topic,
                    "results_by_partition": [
                        {
                            "partition_index": p,
                            "partition_error_code": (
                                E.UNKNOWN_TOPIC_OR_PARTITION
                                if (topic, p) in missing
                                else code
                                if code != E.UNKNOWN_TOPIC_OR_PARTITION
                                else 55  # OPERATION_NOT_ATTEMPTED
                            ),
                        }
                        for p in partitions
                    ],
                }
            )
        return results

    def add_offsets(self, txn_id: str, pid: int, epoch: int, group: str) -> int:
        code, meta = self._check(txn_id, pid, epoch)
        if code == E.NONE and meta is not None:
            # the group's __consumer_offsets partition joins the transaction: its TxnOffsetCommit
            # records go there, and so do the markers that end them
            self._begin(meta, [self.offsets_partition(group)])
        return code

    def offsets_partition(self, group: str) -> TopicPartition:
        return OFFSETS_TOPIC, partition_for_group(group, self.offsets_partitions)

    def txn_offset_commit(
        self,
        txn_id: str,
        pid: int,
        epoch: int,
        group: str,
        offsets: dict[TopicPartition, CommittedOffset],
    ) -> int:
        code, meta = self._check(txn_id, pid, epoch)
        if code != E.NONE or meta is None:
            return code
        if meta.state != ONGOING or self.offsets_partition(group) not in meta.partitions:
            return E.INVALID_TXN_STATE  # AddOffsetsToTxn first, as Kafka requires
        self._store_offsets(group, pid, epoch, offsets)
        return E.NONE

    def end_txn(self, txn_id: str, pid: int, epoch: int, commit: bool) -> int:
        code, meta = self._check(txn_id, pid, epoch)
        if code != E.NONE or meta is None:
            return code
        if meta.state in (COMPLETE_COMMIT, COMPLETE_ABORT, EMPTY):
            done = COMPLETE_COMMIT if commit else COMPLETE_ABORT
            # a retried EndTxn of what already ended is fine; anything else is not
            return E.NONE if meta.state == done else E.INVALID_TXN_STATE
        self._end(meta, commit)
        return E.NONE

    def expire(self, now_ms: int) -> list[str]:
        """Abort every transaction open longer than its timeout, as Kafka's coordinator does:
        the epoch is bumped first, so the producer that abandoned it is fenced."""
        expired = []
        for meta in self.txns.values():
            if meta.state == ONGOING and now_ms - meta.started_ms > meta.timeout_ms:
                if meta.producer_epoch < 32766:
                    meta.producer_epoch += 1
                self._end(meta, commit=False)
                expired.append(meta.transactional_id)
        return expired

    def _end(self, meta: TxnMetadata, commit: bool) -> None:
        meta.state = PREPARE_COMMIT if commit else PREPARE_ABORT
        self._persist(meta)
        self._write_markers(meta, commit)

    def _write_markers(self, meta: TxnMetadata, commit: bool) -> None:
        """The markers of a decided transaction (its PREPARE state stored), then its COMPLETE
        state: a crash anywhere in between leaves the PREPARE state for :meth:`recover`."""
        kind = ControlType.COMMIT if commit else ControlType.ABORT
        for topic, partition in sorted(meta.partitions):
            marker = encode_control_batch(
                kind,
                offset=0,
                timestamp=int(time.time() * 1000),
                producer_id=meta.producer_id,
                producer_epoch=meta.producer_epoch,
            )
            self._append_marker(topic, partition, marker)
            if topic == OFFSETS_TOPIC:
                self._complete_offsets(meta.producer_id, partition, commit)
        meta.state = COMPLETE_COMMIT if commit else COMPLETE_ABORT
        meta.partitions.clear()
        self._persist(meta)
