"""Producer state of one partition (Kafka's ProducerStateManager, ProducerStateEntry and
ProducerAppendInfo): what the log knows of every idempotent or transactional producer.

Per producer id: its epoch, the sequence ranges and offsets of its last five batches (to
recognise a retried batch and answer it with the offsets it already got), its last timestamp,
the coordinator epoch of its last transaction marker and the first offset of its open
transaction. From the open transactions come the first unstable offset (the last stable
offset, LSO) and the LSO recorded with each aborted transaction in ``.txnindex``.

Two ways in, as in Kafka:

* :meth:`ProducerStateManager.prepare` (an append from a producer or a coordinator): every
  batch is checked (epoch fencing, sequence order, transaction state) against a copy of the
  state; the copy is applied with :meth:`ProducerAppendInfo.commit` only once the bytes are
  written, so a refused append changes nothing.
* :meth:`ProducerStateManager.update` (replaying the log: recovery, loading, truncation):
  batches already in the log are applied as they are, without refusing any.

Snapshots (:mod:`kafkalog.log.producer_snapshot`) hold the state at an offset; the log writes
one when a segment rolls and at a clean close, and replays the log only from the newest one.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from kafkalog.errors import (
    CorruptRecordError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    KafkalogError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from kafkalog.index.txn_index import AbortedTxn
from kafkalog.log.layout import SNAPSHOT_SUFFIX, segment_file
from kafkalog.log.producer_snapshot import (
    ProducerEntry,
    delete_snapshot,
    read_snapshot,
    snapshot_offsets,
    write_snapshot,
)
from kafkalog.records.batch import RecordBatch
from kafkalog.records.model import ControlType
from kafkalog.records.types import DEFAULT_LIMITS, Limits

logger = logging.getLogger("kafkalog.log")

NUM_BATCHES_TO_RETAIN = 5  # Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN
PRODUCER_ID_EXPIRATION_MS = 86_400_000  # Kafka's producer.id.expiration.ms default (1 day)
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
_INT_MAX = 0x7FFFFFFF


def decrement_sequence(sequence: int, decrement: int) -> int:
    """Kafka's DefaultRecordBatch.decrementSequence: sequences wrap at Integer.MAX_VALUE."""
    if sequence < decrement:
        return _INT_MAX - (decrement - sequence) + 1
    return sequence - decrement


def in_sequence(last_seq: int, next_seq: int) -> bool:
    """``next_seq`` follows ``last_seq`` (wrapping past Integer.MAX_VALUE to 0)."""
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == _INT_MAX)


@dataclass(frozen=True)
class BatchMetadata:
    """One of a producer's last batches: its last sequence and offset, how many offsets it
    spans (``offset_delta``) and its max timestamp."""

    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass
class ProducerStateEntry:
    """What the partition knows of one producer id."""

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    current_txn_first_offset: int | None = None
    batches: deque[BatchMetadata] = field(
        default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN)
    )

    @property
    def first_seq(self) -> int:
        return self.batches[0].first_seq if self.batches else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def first_data_offset(self) -> int:
        return self.batches[0].first_offset if self.batches else -1

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batches[-1].offset_delta if self.batches else 0

    def copy(self) -> ProducerStateEntry:
        return ProducerStateEntry(
            self.producer_id,
            self.producer_epoch,
            self.coordinator_epoch,
            self.last_timestamp,
            self.current_txn_first_offset,
            deque(self.batches, maxlen=NUM_BATCHES_TO_RETAIN),
        )

    def maybe_update_epoch(self, epoch: int) -> bool:
        """A new epoch forgets the old epoch's batches (their sequences start over)."""
        if self.producer_epoch == epoch:
            return False
        self.batches.clear()
        self.producer_epoch = epoch
        return True

    def add_batch(self, epoch: int, last_seq: int, last_offset: int, delta: int, ts: int) -> None:
        self.maybe_update_epoch(epoch)
        self.batches.append(BatchMetadata(last_seq, last_offset, delta, ts))
        self.last_timestamp = ts

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """The retained batch with exactly this epoch and sequence range, if any."""
        if epoch != self.producer_epoch:
            return None
        for meta in self.batches:
            if meta.first_seq == first_seq and meta.last_seq == last_seq:
                return meta
        return None

    def to_snapshot(self) -> ProducerEntry:
        return ProducerEntry(
            self.producer_id,
            self.producer_epoch,
            self.last_seq,
            self.last_data_offset,
            self.last_offset_delta,
            self.last_timestamp,
            self.coordinator_epoch,
            -1 if self.current_txn_first_offset is None else self.current_txn_first_offset,
        )

    @classmethod
    def from_snapshot(cls, e: ProducerEntry) -> ProducerStateEntry:
        entry = cls(
            e.producer_id,
            e.epoch,
            e.coordinator_epoch,
            e.timestamp,
            e.current_txn_first_offset if e.current_txn_first_offset >= 0 else None,
        )
        if e.last_offset >= 0:  # Kafka keeps no batch for an entry without data
            entry.batches.append(
                BatchMetadata(e.last_sequence, e.last_offset, e.offset_delta, e.timestamp)
            )
        return entry


@dataclass(frozen=True)
class CompletedTxn:
    """A transaction a COMMIT or ABORT marker ended: its first offset and the marker's."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


class ProducerAppendInfo:
    """The producer-state changes of one append, checked batch by batch against copies of the
    entries they touch and applied only by :meth:`commit` (Kafka's ProducerAppendInfo)."""

    def __init__(
        self, manager: ProducerStateManager, *, client: bool, sequences: bool = True
    ) -> None:
        self.manager = manager
        self.client = client  # a producer's or coordinator's append: refuse what Kafka refuses
        # sequences are a producer's: a coordinator's own batches (a TxnOffsetCommit written
        # to __consumer_offsets) are not checked for them, as in Kafka's maybeValidateDataBatch
        self.sequences = sequences
        self.entries: dict[int, ProducerStateEntry] = {}
        self.completed: list[CompletedTxn] = []
        #: (producer id, first offset) of the transactions this append begins, in offset
        #: order (Kafka's startedTransactions)
        self.started: list[tuple[int, int]] = []

    def _entry(self, producer_id: int) -> ProducerStateEntry:
        entry = self.entries.get(producer_id)
        if entry is None:
            current = self.manager.producers.get(producer_id)
            entry = current.copy() if current is not None else ProducerStateEntry(producer_id)
            self.entries[producer_id] = entry
        return entry

    def append(
        self,
        batch: RecordBatch,
        base_offset: int,
        limits: Limits = DEFAULT_LIMITS,
        *,
        timestamp: int | None = None,
    ) -> CompletedTxn | None:
        """Check and stage one batch that lands at ``base_offset``; returns the transaction it
        ends (a COMMIT or ABORT marker of an open transaction), else None. ``timestamp`` is the
        batch's max timestamp as written, when the log stamped it (LogAppendTime)."""
        ts = batch.max_timestamp if timestamp is None else timestamp
        pid = batch.producer_id
        last_offset = base_offset + batch.last_offset_delta
        entry = self._entry(pid)
        if batch.is_control and batch.records_count == 0:
            # what the cleaner leaves of a marker whose transaction it removed, kept because it
            # was its producer's last batch: "already cleaned", nothing to complete or check
            # (Kafka's ProducerAppendInfo.append skips an empty control batch the same way)
            return None
        epoch = batch.producer_epoch
        self._check_epoch(entry, epoch, base_offset)
        if batch.is_control:
            marker = batch.control_record(limits)
            if marker.type not in (ControlType.ABORT, ControlType.COMMIT):
                return None
            coordinator_epoch = marker.coordinator_epoch or 0
            if entry.coordinator_epoch > coordinator_epoch and self.client:
                raise TransactionCoordinatorFencedError(
                    f"{self.manager.directory}: transaction marker of producer {pid} at offset "
                    f"{base_offset} has coordinator epoch {coordinator_epoch}, older than the "
                    f"last seen {entry.coordinator_epoch}",
                    producer_id=pid,
                    offset=base_offset,
                )
            # a marker ends a transaction only if one is open: an empty transaction leaves no
            # .txnindex entry and does not move the last stable offset
            done = (
                CompletedTxn(
                    pid,
                    entry.current_txn_first_offset,
                    last_offset,
                    marker.type is ControlType.ABORT,
                )
                if entry.current_txn_first_offset is not None
                else None
            )
            entry.maybe_update_epoch(epoch)
            entry.current_txn_first_offset = None
            entry.coordinator_epoch = coordinator_epoch
            entry.last_timestamp = ts
            if done is not None:
                self.completed.append(done)
            return done
        if self.client and self.sequences:
            self._check_sequence(entry, epoch, batch.base_sequence, base_offset)
        entry.add_batch(epoch, batch.last_sequence, last_offset, batch.last_offset_delta, ts)
        if entry.current_txn_first_offset is not None and not batch.is_transactional:
            if self.client:
                raise InvalidTxnStateError(
                    f"{self.manager.directory}: producer {pid} wrote a non-transactional batch at "
                    f"offset {base_offset} while its transaction begun at "
                    f"{entry.current_txn_first_offset} is open",
                    producer_id=pid,
                    offset=base_offset,
                )
        elif entry.current_txn_first_offset is None and batch.is_transactional:
            entry.current_txn_first_offset = base_offset
            self.started.append((pid, base_offset))
        return None

    def _check_epoch(self, entry: ProducerStateEntry, epoch: int, offset: int) -> None:
        if epoch < entry.producer_epoch and self.client:
            raise InvalidProducerEpochError(
                f"{self.manager.directory}: producer {entry.producer_id} at offset {offset} has "
                f"epoch {epoch}, older than the last seen epoch {entry.producer_epoch}: it is "
                "fenced",
                producer_id=entry.producer_id,
                offset=offset,
            )

    def _check_sequence(
        self, entry: ProducerStateEntry, epoch: int, first_seq: int, offset: int
    ) -> None:
        """Kafka's ProducerAppendInfo.checkSequence."""
        pid = entry.producer_id
        if epoch != entry.producer_epoch:
            if first_seq != 0 and entry.producer_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"{self.manager.directory}: producer {pid} at offset {offset}: a new epoch "
                    f"{epoch} must start at sequence 0, not {first_seq}",
                    producer_id=pid,
                    offset=offset,
                )
            return
        current = self.manager.producers.get(pid)
        if entry.batches:
            last_seq = entry.last_seq
        elif current is not None and current.producer_epoch == epoch:
            last_seq = current.last_seq
        else:
            last_seq = NO_SEQUENCE
        known_epoch = current is not None and current.producer_epoch != NO_PRODUCER_EPOCH
        if known_epoch and not in_sequence(last_seq, first_seq):
            raise OutOfOrderSequenceError(
                f"{self.manager.directory}: producer {pid} at offset {offset}: out of order "
                f"sequence {first_seq} (the last one written is {last_seq}, epoch {epoch})",
                producer_id=pid,
                offset=offset,
            )

    def commit(self) -> list[AbortedTxn]:
        """Apply the staged changes; returns the ``.txnindex`` entries of the transactions
        aborted, each with Kafka's last stable offset for it (see ``_apply``)."""
        return self.manager._apply(self)


class ProducerStateManager:
    """The producer state of one partition directory and its ``.snapshot`` files.

    ``writable=False`` never writes or deletes a file (a broker's directory read in place).
    ``map_end_offset`` is the offset up to which the state reflects the log.
    """

    def __init__(self, directory: str, *, writable: bool = True) -> None:
        self.directory = directory
        self.writable = writable
        self.producers: dict[int, ProducerStateEntry] = {}
        self._ongoing: dict[int, int] = {}  # producer id -> first offset of its open txn
        self.map_end_offset = 0
        self.last_snapshot_offset = -1

    # -- queries ----------------------------------------------------------------------------
    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    @property
    def is_empty(self) -> bool:
        return not self.producers

    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest open transaction, None if none is open."""
        return min(self._ongoing.values(), default=None)

    def ongoing_transactions(self) -> dict[int, int]:
        """Open transactions: producer id -> first offset."""
        return dict(self._ongoing)

    def find_duplicate(self, batch: RecordBatch) -> BatchMetadata | None:
        """One of the producer's last five batches with the same epoch and sequences: a
        retried send, already written."""
        entry = self.producers.get(batch.producer_id)
        if entry is None or batch.is_control:
            return None
        return entry.find_duplicate(batch.producer_epoch, batch.base_sequence, batch.last_sequence)

    # -- changes ----------------------------------------------------------------------------
    def prepare(self, *, client: bool = True, sequences: bool = True) -> ProducerAppendInfo:
        return ProducerAppendInfo(self, client=client, sequences=sequences)

    def update(
        self, batch: RecordBatch, limits: Limits = DEFAULT_LIMITS, base_offset: int | None = None
    ) -> AbortedTxn | None:
        """Replay one batch already in the log (recovery, loading): nothing is refused. Returns
        the ``.txnindex`` entry when it is the ABORT marker of an open transaction."""
        base = batch.base_offset if base_offset is None else base_offset
        aborted: AbortedTxn | None = None
        if batch.producer_id >= 0 and batch.magic >= 2:
            info = ProducerAppendInfo(self, client=False)
            try:
                info.append(batch, base, limits)
            except CorruptRecordError:
                pass  # a control batch without a readable marker: nothing to apply
            else:
                found = self._apply(info)
                aborted = found[0] if found else None
        self.map_end_offset = base + batch.last_offset_delta + 1
        return aborted

    def _apply(self, info: ProducerAppendInfo) -> list[AbortedTxn]:
        """Apply one append's changes; the ``.txnindex`` entries of the transactions it
        aborted, each with its last stable offset computed as Kafka's UnifiedLog.append does
        for an append of several batches (a follower's fetch): every transaction the append
        began counts as open, and the ones it completed are closed one after another in
        offset order, so an abort's LSO is the first offset of the earliest transaction of
        another producer still open at that point, else the offset after its marker."""
        open_txns = {first: pid for pid, first in self._ongoing.items()}
        open_txns.update((first, pid) for pid, first in info.started)
        aborted: list[AbortedTxn] = []
        for txn in info.completed:
            if txn.is_aborted:
                others = [first for first, pid in open_txns.items() if pid != txn.producer_id]
                lso = min(others) if others else txn.last_offset + 1
                aborted.append(AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, lso))
            open_txns.pop(txn.first_offset, None)
        for pid, entry in info.entries.items():
            self.producers[pid] = entry
            if entry.current_txn_first_offset is None:
                self._ongoing.pop(pid, None)
            else:
                self._ongoing[pid] = entry.current_txn_first_offset
        return aborted

    def remove_expired_producers(
        self, now_ms: int, expiration_ms: int = PRODUCER_ID_EXPIRATION_MS
    ) -> list[int]:
        """Kafka's removeExpiredProducers: forget the producers without an open transaction
        whose last write is ``expiration_ms`` or more before ``now_ms``; returns their ids.
        A broker runs it periodically (``producer.id.expiration.check.interval.ms``); kafkalog
        leaves the when to the program that embeds the log (a server, say)."""
        expired = [
            pid
            for pid, e in self.producers.items()
            if e.current_txn_first_offset is None and now_ms - e.last_timestamp >= expiration_ms
        ]
        for pid in expired:
            del self.producers[pid]
        return expired

    def clear(self) -> None:
        self.producers.clear()
        self._ongoing.clear()

    # -- snapshots --------------------------------------------------------------------------
    def snapshot_offsets(self) -> list[int]:
        try:
            return snapshot_offsets(self.directory)
        except FileNotFoundError:
            return []

    def latest_snapshot_offset(self) -> int | None:
        found = self.snapshot_offsets()
        return found[-1] if found else None

    def entries(self) -> list[ProducerEntry]:
        return [self.producers[p].to_snapshot() for p in sorted(self.producers)]

    def take_snapshot(self, *, sync: bool = False) -> str | None:
        """Write ``<map_end_offset>.snapshot`` unless one was written there already (Kafka
        takes one only at a new offset)."""
        if not self.writable or self.map_end_offset <= self.last_snapshot_offset:
            return None
        if not os.path.isdir(self.directory):
            return None  # the partition directory was removed: nothing to keep state for
        path = write_snapshot(self.directory, self.map_end_offset, self.entries(), sync=sync)
        self.last_snapshot_offset = self.map_end_offset
        return path

    def load_entry(self, entry: ProducerStateEntry) -> None:
        """Put ``entry`` in the state as it is (Kafka's loadProducerEntry)."""
        self.producers[entry.producer_id] = entry
        if entry.current_txn_first_offset is None:
            self._ongoing.pop(entry.producer_id, None)
        else:
            self._ongoing[entry.producer_id] = entry.current_txn_first_offset

    def load_snapshot(self, path: str) -> None:
        """Replace the state by the entries of the snapshot file at ``path``."""
        self.clear()
        for e in read_snapshot(path):
            self.load_entry(ProducerStateEntry.from_snapshot(e))

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int) -> None:
        """Kafka's truncateAndReload: delete the snapshots outside (log start, log end], then
        load the newest readable one (a corrupt one is deleted and the next older tried); with
        none the state starts empty at the log start offset. The caller replays the log from
        :attr:`map_end_offset`."""
        offsets = self.snapshot_offsets()
        for offset in offsets:
            if (offset > log_end_offset or offset <= log_start_offset) and self.writable:
                delete_snapshot(self.directory, offset)
        kept = [o for o in offsets if log_start_offset < o <= log_end_offset]
        self.clear()
        for offset in reversed(kept):
            path = segment_file(self.directory, offset, SNAPSHOT_SUFFIX)
            try:
                self.load_snapshot(path)
            except (KafkalogError, OSError) as e:
                self.clear()
                # Kafka warns and deletes it; the state is rebuilt from an older one or the log
                logger.warning(
                    "%s: cannot load the producer snapshot (%s); %s, and the producer state "
                    "is rebuilt from an older snapshot or from the log",
                    path,
                    e,
                    "deleted it" if self.writable else "passed it over",
                )
                if self.writable:
                    delete_snapshot(self.directory, offset)
                continue
            self.map_end_offset = self.last_snapshot_offset = offset
            return
        self.map_end_offset = self.last_snapshot_offset = log_start_offset

    def remove_stray_snapshots(self, segment_bases: Iterable[int]) -> None:
        """Kafka's removeStraySnapshots: keep the snapshots at segment base offsets and the
        newest stray one if it is past the last segment's base; delete the others."""
        if not self.writable:
            return
        bases = set(segment_bases)
        stray = [o for o in self.snapshot_offsets() if o not in bases]
        keep_last = bool(stray) and bool(bases) and stray[-1] >= max(bases)
        for offset in stray[:-1] if keep_last else stray:
            delete_snapshot(self.directory, offset)

    def delete_snapshots_above(self, offset: int) -> None:
        if not self.writable:
            return
        for found in self.snapshot_offsets():
            if found > offset:
                delete_snapshot(self.directory, found)
        self.last_snapshot_offset = min(self.last_snapshot_offset, offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Every producer forgotten and every snapshot deleted: the log starts over."""
        self.clear()
        if self.writable:
            for found in self.snapshot_offsets():
                with contextlib.suppress(FileNotFoundError):
                    delete_snapshot(self.directory, found)
        # as Kafka's (rebuildProducerState right after it): nothing to snapshot at the start
        self.map_end_offset = self.last_snapshot_offset = offset
