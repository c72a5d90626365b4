"""What the cleaner knows of transactions as it walks the log (Kafka's
``CleanedTransactionMetadata``): which batches belong to aborted transactions (dropped), which
markers may go (a marker stays until every batch of its transaction is gone), and the
``.txnindex`` entries the cleaned segment keeps.

The aborted transactions come from the ``.txnindex`` of the segments walked; a batch is part of
one when its producer has an aborted transaction that began at or before the batch's last
offset and whose ABORT marker has not been passed yet.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable

from kafkalog.errors import CorruptRecordError
from kafkalog.index.txn_index import AbortedTxn
from kafkalog.records import RecordBatch
from kafkalog.records.model import ControlType
from kafkalog.records.types import Limits


class _Aborted:
    __slots__ = ("seen_batch", "txn")

    def __init__(self, txn: AbortedTxn) -> None:
        self.txn = txn
        self.seen_batch = False  # a batch of the transaction was walked this cleaning


class CleanedTransactions:
    """The transaction state of one cleaning walk, fed batch by batch in offset order."""

    def __init__(self, limits: Limits, on_kept_abort: Callable[[AbortedTxn], None] | None = None):
        self.limits = limits
        self.on_kept_abort = on_kept_abort
        self._pending: list[tuple[int, int, AbortedTxn]] = []  # heap by first offset
        self._order = 0
        self._aborted: dict[int, _Aborted] = {}
        self._committed: set[int] = set()

    def add_aborted(self, txns: Iterable[AbortedTxn]) -> None:
        for txn in txns:
            heapq.heappush(self._pending, (txn.first_offset, self._order, txn))
            self._order += 1

    def _consume_up_to(self, offset: int) -> None:
        pending = self._pending
        while pending and pending[0][0] <= offset:
            txn = heapq.heappop(pending)[2]
            self._aborted.setdefault(txn.producer_id, _Aborted(txn))

    def on_batch(self, batch: RecordBatch) -> bool:
        """A data batch walked; True when it belongs to an aborted transaction (it goes)."""
        self._consume_up_to(batch.last_offset)
        if not batch.is_transactional:
            return False
        found = self._aborted.get(batch.producer_id)
        if found is not None:
            found.seen_batch = True
            return True
        self._committed.add(batch.producer_id)
        return False

    def on_control_batch(self, batch: RecordBatch) -> bool:
        """A control batch walked; True when it may be discarded: an ABORT marker whose
        transaction has no batch left, a COMMIT marker whose transaction had none in this
        walk, an empty control batch (what cleaning leaves of a marker). An ABORT marker
        kept with batches still there keeps its ``.txnindex`` entry."""
        self._consume_up_to(batch.last_offset)
        if batch.records_count == 0:
            return True
        try:
            marker = batch.control_record(self.limits)
        except CorruptRecordError:
            return False  # unreadable: kept as it is, never decided on
        pid = batch.producer_id
        if marker.type is ControlType.ABORT:
            found = self._aborted.pop(pid, None)
            if found is not None and found.seen_batch:
                if self.on_kept_abort is not None:
                    self.on_kept_abort(found.txn)
                return False
            return True
        if marker.type is ControlType.COMMIT:
            if pid in self._committed:
                self._committed.discard(pid)
                return False
            return True
        return False
