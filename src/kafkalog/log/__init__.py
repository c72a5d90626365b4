"""Layer 3: segments, partition logs and data directories, as Kafka keeps them.

:class:`LogSegment` (one ``.log`` with its indexes), :class:`Log` (a ``topic-partition``
directory: append, read, time lookups, roll, retention, truncation, recovery) and
:class:`LogDir` (a broker-style data directory, opened read-only for live brokers), with the
topic configuration (:class:`TopicConfig`) and checkpoint files in Kafka's formats.
Loading and recovery live in :mod:`kafkalog.log.loader` (Kafka's LogLoader), producer state
and its snapshots in :mod:`kafkalog.log.producer_state` (Kafka's ProducerStateManager).
"""

from kafkalog.log.config import TopicConfig
from kafkalog.log.log import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    AppendInfo,
    Log,
)
from kafkalog.log.logdir import LogDir
from kafkalog.log.producer_state import (
    BatchMetadata,
    ProducerAppendInfo,
    ProducerStateEntry,
    ProducerStateManager,
)
from kafkalog.log.segment import LogSegment, TimestampAndOffset
from kafkalog.log.validator import AppendOrigin

__all__ = [
    "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIERED_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "AppendInfo",
    "AppendOrigin",
    "BatchMetadata",
    "Log",
    "LogDir",
    "LogSegment",
    "ProducerAppendInfo",
    "ProducerStateEntry",
    "ProducerStateManager",
    "TimestampAndOffset",
    "TopicConfig",
]
