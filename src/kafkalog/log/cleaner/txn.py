"""What the cleaner knows of transactions as it walks the log (Kafka's
``CleanedTransactionMetadata``): which batches belong to aborted transactions (dropped), which
markers may go (a marker stays until every batch of its transaction is gone), and the
``.txnindex`` entries the cleaned segment keeps.

The aborted transactions come from the ``.txnindex`` of the segments walked; a batch is part of
one when its producer has an aborted transaction that began at or before the batch's last
offset and whose ABORT marker has not been passed yet.

Kafka trusts those entries; a damaged one (no CRC covers a ``.txnindex``) would have the
cleaner delete a committed batch as aborted, or keep an aborted one as committed (whose
values then supersede committed ones). So an entry the walk contradicts stops the
cleaning before anything is swapped in (:class:`TxnIndexContradiction`): its ABORT marker is
not where it says (another producer's, a COMMIT, none before a later batch), its producer
commits inside it, or a transaction whose batches were kept aborts with no entry read. An
entry is kept only with its marker (both go when no batch of the transaction is left), so a
healthy cleaned log never contradicts its own.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable

from kafkalog.errors import CorruptRecordError
from kafkalog.index.txn_index import AbortedTxn
from kafkalog.records import RecordBatch
from kafkalog.records.model import ControlType
from kafkalog.records.types import Limits


class TxnIndexContradiction(Exception):
    """A ``.txnindex`` entry the batches walked contradict: ``what`` says how."""

    def __init__(self, txn: AbortedTxn | None, what: str, marker: int = -1) -> None:
        super().__init__(what)
        self.txn = txn  # None: an entry missing, for the ABORT marker at ``marker``
        self.what = what
        self.marker = marker


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
        #: (producer id, marker offset) of the aborted transactions whose marker was passed
        self._done: set[tuple[int, int]] = set()
        self._from = 2**63  # the lowest offset whose aborted transactions were looked up

    def add_aborted(self, txns: Iterable[AbortedTxn], start: int | None = None) -> None:
        """The aborted transactions overlapping offsets from ``start`` on (the look-up's):
        a marker below every ``start`` given may lack its entry (the walk may begin below)."""
        if start is not None:
            self._from = min(self._from, start)
        for txn in txns:
            heapq.heappush(self._pending, (txn.first_offset, self._order, txn))
            self._order += 1

    def _consume_up_to(self, offset: int, base: int | None = None) -> None:
        pending = self._pending
        while pending and pending[0][0] <= offset:
            txn = heapq.heappop(pending)[2]
            if (txn.producer_id, txn.last_offset) in self._done:
                continue  # given again by the next segment's look-up (it spans both)
            self._aborted.setdefault(txn.producer_id, _Aborted(txn))
        for found in self._aborted.values():
            if found.txn.last_offset < (offset if base is None else base):
                raise TxnIndexContradiction(
                    found.txn,
                    f"no ABORT marker of producer {found.txn.producer_id} at offset "
                    f"{found.txn.last_offset}",
                )

    def on_batch(self, batch: RecordBatch) -> bool:
        """A data batch walked; True when it belongs to an aborted transaction (it goes)."""
        self._consume_up_to(batch.last_offset, batch.base_offset)
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
            if found is not None:
                self._done.add((pid, found.txn.last_offset))
                if found.txn.last_offset != batch.base_offset:
                    raise TxnIndexContradiction(
                        found.txn,
                        f"producer {pid}'s ABORT marker is at offset {batch.base_offset}",
                    )
            elif pid in self._committed and batch.base_offset >= self._from:
                for other in self._aborted.values():
                    if other.txn.last_offset == batch.base_offset:
                        raise TxnIndexContradiction(
                            other.txn,
                            f"offset {batch.base_offset} is producer {pid}'s ABORT marker",
                        )
                # its batches since its last marker were kept as committed: the entry is
                # missing, or an earlier entry's last stable offset ended the look-up early
                raise TxnIndexContradiction(
                    None,
                    f"producer {pid}'s transaction aborts at offset {batch.base_offset} and "
                    "no .txnindex entry read names it (an entry missing, or an earlier "
                    "entry's last stable offset too high)",
                    batch.base_offset,
                )
            if found is not None and found.seen_batch:
                if self.on_kept_abort is not None:
                    self.on_kept_abort(found.txn)
                return False
            return True
        if marker.type is ControlType.COMMIT:
            if pid in self._aborted:
                raise TxnIndexContradiction(
                    self._aborted[pid].txn,
                    f"producer {pid} commits at offset {batch.base_offset}, inside it",
                )
            if pid in self._committed:
                self._committed.discard(pid)
                return False
            return True
        return False
