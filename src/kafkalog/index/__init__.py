"""Layer 2: Kafka's sparse indexes over memory-mapped files.

:class:`OffsetIndex` (``.index``) and :class:`TimeIndex` (``.timeindex``) with Kafka's warm/cold
binary search, a vectorised form for many targets, read-only opening for live broker
directories, and :class:`LazyIndex` so nothing is mapped before it is used.
"""

from kafkalog.index.base import DEFAULT_MAX_INDEX_SIZE, MappedIndex
from kafkalog.index.lazy import LazyIndex
from kafkalog.index.offset_index import OffsetIndex, OffsetPosition
from kafkalog.index.time_index import NO_TIMESTAMP, TimeIndex, TimestampOffset

__all__ = [
    "DEFAULT_MAX_INDEX_SIZE",
    "NO_TIMESTAMP",
    "LazyIndex",
    "MappedIndex",
    "OffsetIndex",
    "OffsetPosition",
    "TimeIndex",
    "TimestampOffset",
]
