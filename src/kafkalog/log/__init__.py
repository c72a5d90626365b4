"""Layer 3: segments, partition logs and data directories, as Kafka keeps them.

:class:`LogSegment` (one ``.log`` with its indexes), :class:`Log` (a ``topic-partition``
directory: append, read, time lookups, roll, retention, truncation, recovery) and
:class:`LogDir` (a broker-style data directory, opened read-only for live brokers), with the
topic configuration (:class:`TopicConfig`) and checkpoint files in Kafka's formats.
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
from kafkalog.log.segment import LogSegment, TimestampAndOffset

__all__ = [
    "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIERED_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "AppendInfo",
    "Log",
    "LogDir",
    "LogSegment",
    "TimestampAndOffset",
    "TopicConfig",
]
