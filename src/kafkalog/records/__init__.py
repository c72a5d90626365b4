"""Layer 1: the bytes of Kafka log entries.

Object API (tools, tests): :class:`LogReader` / :func:`iter_entries` walk a buffer or file of log
entries, yielding :class:`RecordBatch` (magic 2) and :class:`LegacyEntry` (magic 0/1) objects whose
``records()`` decode to :class:`Record`; :func:`encode_batch`, :func:`encode_control_batch` and
:func:`encode_message_set` write them.

Columnar API (the hot path): :func:`decode_arrow` / :func:`decode_range` turn a byte range into a
``pyarrow.RecordBatch`` with Spark's Kafka columns; :func:`encode_arrow` writes Arrow columns as
batches.
"""

from kafkalog.records.batch import RecordBatch, encode_batch, encode_control_batch
from kafkalog.records.columnar import (
    HEADERS_TYPE,
    METADATA_COLUMNS,
    DecodedRange,
    arrow_schema,
    decode_arrow,
    decode_range,
)
from kafkalog.records.columnar_encode import EncodedBatches, encode_arrow
from kafkalog.records.legacy import LegacyEntry, encode_message, encode_message_set
from kafkalog.records.model import ControlRecord, ControlType, Header, Record
from kafkalog.records.reader import IncompleteTail, LogEntry, LogReader, iter_entries
from kafkalog.records.types import DEFAULT_LIMITS, Compression, Limits, TimestampType

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
