"""Layer 2: Kafka's sparse indexes over memory-mapped files.

:class:`OffsetIndex` (``.index``) and :class:`TimeIndex` (``.timeindex``) with Kafka's warm/cold
binary search, a vectorised form for many targets, read-only opening for live broker
directories, :class:`LazyIndex` so nothing is mapped before it is used, and the aborted
transaction index :class:`TransactionIndex` (``.txnindex``).
"""

from kafkalog.index.base import DEFAULT_MAX_INDEX_SIZE, MappedIndex
from kafkalog.index.lazy import LazyIndex
from kafkalog.index.offset_index import OffsetIndex, OffsetPosition
from kafkalog.index.time_index import NO_TIMESTAMP, TimeIndex, TimestampOffset
from kafkalog.index.txn_index import AbortedTxn, TransactionIndex, TxnIndexSearchResult

__all__ = [
    "DEFAULT_MAX_INDEX_SIZE",
    "NO_TIMESTAMP",
    "AbortedTxn",
    "LazyIndex",
    "MappedIndex",
    "OffsetIndex",
    "OffsetPosition",
    "TimeIndex",
    "TimestampOffset",
    "TransactionIndex",
    "TxnIndexSearchResult",
]
