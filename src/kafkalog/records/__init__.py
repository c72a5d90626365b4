"""Layer 1: the bytes of Kafka log entries.

Object API (tools, tests): :class:`LogReader` / :func:`iter_entries` walk a buffer or file of log
entries, yielding :class:`RecordBatch` (magic 2) and :class:`LegacyEntry` (magic 0/1) objects whose
``records()`` decode to :class:`Record`; :func:`encode_batch`, :func:`encode_control_batch` and
:func:`encode_message_set` write them.

Columnar API (the hot path): :func:`decode_arrow` / :func:`decode_range` turn a byte range into a
``pyarrow.RecordBatch`` with Spark's Kafka columns; :func:`encode_arrow` writes Arrow columns as
batches.
"""

from typing import TYPE_CHECKING, Any

from kafkalog.records.batch import RecordBatch, encode_batch, encode_control_batch
from kafkalog.records.legacy import LegacyEntry, encode_message, encode_message_set
from kafkalog.records.model import ControlRecord, ControlType, Header, Record
from kafkalog.records.reader import IncompleteTail, LogEntry, LogReader, iter_entries
from kafkalog.records.types import DEFAULT_LIMITS, Compression, Limits, TimestampType

# The columnar API loads numba and pyarrow (most of a second): it is imported on first use, so
# tools that only walk batches (the ``kafkalog`` command's light sub-commands) start at once.
_LAZY = {
    "HEADERS_TYPE": "kafkalog.records.columnar",
    "METADATA_COLUMNS": "kafkalog.records.columnar",
    "DecodedRange": "kafkalog.records.columnar",
    "arrow_schema": "kafkalog.records.columnar",
    "decode_arrow": "kafkalog.records.columnar",
    "decode_range": "kafkalog.records.columnar",
    "EncodedBatches": "kafkalog.records.columnar_encode",
    "encode_arrow": "kafkalog.records.columnar_encode",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from kafkalog.records.columnar import (
        HEADERS_TYPE,
        METADATA_COLUMNS,
        DecodedRange,
        arrow_schema,
        decode_arrow,
        decode_range,
    )
    from kafkalog.records.columnar_encode import EncodedBatches, encode_arrow

__all__ = [
    "DEFAULT_LIMITS",
    "HEADERS_TYPE",
    "METADATA_COLUMNS",
    "Compression",
    "ControlRecord",
    "ControlType",
    "DecodedRange",
    "EncodedBatches",
    "Header",
    "IncompleteTail",
    "LegacyEntry",
    "Limits",
    "LogEntry",
    "LogReader",
    "Record",
    "RecordBatch",
    "TimestampType",
    "arrow_schema",
    "decode_arrow",
    "decode_range",
    "encode_arrow",
    "encode_batch",
    "encode_control_batch",
    "encode_message",
    "encode_message_set",
    "iter_entries",
]
