"""Layer 3: segments, partition logs and data directories, as Kafka keeps them.

:class:`LogSegment` (one ``.log`` with its indexes), :class:`Log` (a ``topic-partition``
directory: append, read, time lookups, roll, retention, truncation, recovery) and
:class:`LogDir` (a broker-style data directory, opened read-only for live brokers), with the
topic configuration (:class:`TopicConfig`) and checkpoint files in Kafka's formats.
Loading and recovery live in :mod:`kafkalog.log.loader` (Kafka's LogLoader), producer state
and its snapshots in :mod:`kafkalog.log.producer_state` (Kafka's ProducerStateManager).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

#: where each name of this package lives: loaded on first use (PEP 562), so that importing a
#: light module of the package (``layout``: file names, the partitions of a directory) does not
#: load the log and its dependencies (Spark's ``load()`` checks a path with it)
_HOME = {
    "TopicConfig": "config",
    "EARLIEST_LOCAL_TIMESTAMP": "log",
    "EARLIEST_TIMESTAMP": "log",
    "LATEST_TIERED_TIMESTAMP": "log",
    "LATEST_TIMESTAMP": "log",
    "MAX_TIMESTAMP": "log",
    "AppendInfo": "log",
    "Log": "log",
    "LogDir": "logdir",
    "BatchMetadata": "producer_state",
    "ProducerAppendInfo": "producer_state",
    "ProducerStateEntry": "producer_state",
    "ProducerStateManager": "producer_state",
    "LogSegment": "segment",
    "TimestampAndOffset": "segment",
    "AppendOrigin": "validator",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


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
