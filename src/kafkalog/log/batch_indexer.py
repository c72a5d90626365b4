"""The index entries of a segment's batches, written in file order: the one step that
recovery (``LogSegment.recover``), the rebuild of a missing ``.timeindex`` and
``kafkalog rebuild-index`` share, so that all three write the entries Kafka's
``LogSegment.recover`` writes (``index.interval.bytes`` through
:func:`~kafkalog.log.index_interval.entry_due`, the time index's entry naming the largest
timestamp so far, and each aborted transaction's ``.txnindex`` entry from the producer state)."""

from __future__ import annotations

from typing import Any

from kafkalog.index.time_index import TimestampOffset
from kafkalog.log.index_interval import entry_due
from kafkalog.records.batch import RecordBatch
from kafkalog.records.reader import LogEntry
from kafkalog.records.types import DEFAULT_LIMITS, Limits


class BatchIndexer:
    """Feed it each batch with its position, in file order; :meth:`finish` writes the time
    index's closing entry. Any index may be None (not rebuilt); ``txn_state`` (a
    ``ProducerStateManager`` or ``TxnState`` as of the segment's base) gives the aborted
    transactions."""

    def __init__(
        self,
        interval: int,
        *,
        offset_index: Any = None,
        time_index: Any = None,
        txn_index: Any = None,
        txn_state: Any = None,
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        self.interval = interval
        self.offset_index = offset_index
        self.time_index = time_index
        self.txn_index = txn_index
        self.txn_state = txn_state
        self.limits = limits
        self.since = 0  # bytes since the last index entry
        self.max_ts = TimestampOffset(-1, -1)

    def add(self, batch: LogEntry, position: int) -> None:
        if batch.max_timestamp > self.max_ts.timestamp:
            self.max_ts = TimestampOffset(batch.max_timestamp, batch.last_offset)
        due, self.since = entry_due(self.since, batch.size_in_bytes, self.interval)
        if due:
            if self.offset_index is not None:
                self.offset_index.append(batch.last_offset, position)
            if self.time_index is not None:
                self.time_index.maybe_append(self.max_ts.timestamp, self.max_ts.offset)
        if self.txn_state is not None and isinstance(batch, RecordBatch):
            aborted = self.txn_state.update(batch, self.limits)
            if aborted is not None and self.txn_index is not None:
                self.txn_index.append(aborted)

    def finish(self) -> TimestampOffset:
        """The time index's last entry (the largest timestamp, whatever the interval); the
        largest timestamp and its offset."""
        if self.time_index is not None:
            self.time_index.maybe_append(
                self.max_ts.timestamp, self.max_ts.offset, skip_full_check=True
            )
        return self.max_ts
