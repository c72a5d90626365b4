"""Arrow columns into v2 record batches: the write half of the columnar path.

The Spark writer hands Arrow batches of ``key``/``value``/``timestamp``/``headers`` columns; a
compiled loop plans the batch boundaries and writes records straight into the output buffer,
then each batch is compressed (if asked) and its CRC-32C computed in C.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafkalog.errors import InvalidRecordError
from kafkalog.records import _kernels as K
from kafkalog.records import compression as _compression
from kafkalog.records.batch import (
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
)
from kafkalog.records.columnar import _alloc
from kafkalog.records.crc import crc32c
from kafkalog.records.types import Compression, TimestampType

_CRC = struct.Struct(">I")
# batches up to this size get the compiled CRC (no Python call per batch); larger ones the C one
_COMPILED_CRC_MAX = 512
_LENGTH_ATTRS = struct.Struct(">i")


@dataclass(frozen=True)
class EncodedBatches:
    """Encoded batches back to back, with what a segment needs to index them."""

    data: memoryview  # the batches back to back (a view of Arrow-pool memory, no copy)
    positions: np.ndarray  # byte position of each batch in ``data``
    base_offsets: np.ndarray
    last_offsets: np.ndarray
    max_timestamps: np.ndarray
    offsets_of_max_timestamp: np.ndarray
    record_counts: np.ndarray

    @property
    def batch_count(self) -> int:
        return len(self.positions)

    @property
    def sizes(self) -> np.ndarray:
        ends = np.append(self.positions[1:], len(self.data))
        sizes: np.ndarray = ends - self.positions
        return sizes


def _binary_parts(arr: pa.Array, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Offsets, data and validity of a binary-like column, without copying the data."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    t = arr.type
    if pa.types.is_string(t) or pa.types.is_binary(t):
        off_dtype: type = np.int32
    elif pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        off_dtype = np.int64
    elif pa.types.is_null(t):
        n = len(arr)
        return np.zeros(n + 1, np.int64), np.empty(0, np.uint8), np.zeros(n, np.bool_)
    else:
        raise InvalidRecordError(f"column {name!r} must be binary or string, not {t}")
    n = len(arr)
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], off_dtype)[arr.offset : arr.offset + n + 1].astype(
        np.int64, copy=False
    )
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.empty(0, np.uint8)
    valid = np.asarray(arr.is_valid(), dtype=np.bool_) if arr.null_count else np.ones(n, np.bool_)
    return offsets, data, valid


def _timestamps_ms(col: pa.Array | None, n: int, default: int) -> np.ndarray:
    """Record timestamps in ms; null or missing means ``default``.

    Finer units are floor-divided in int64 (as Spark's ``DateTimeUtils.toMillis``): going through
    float64 lost precision above 2**53 and Arrow refused the cast outright, so every realistic
    nanosecond timestamp (pandas' default unit) raised ``ArrowInvalid``.
    """
    if col is None:
        # read-only like the Arrow column's view below, so the encode kernels compile once for
        # both (numba types a read-only array apart: a second write_batches compile cost ~6 s)
        filled = np.full(n, default, np.int64)
        filled.flags.writeable = False
        return filled
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    t = col.type
    if pa.types.is_timestamp(t):
        per_ms = {"s": -1000, "ms": 1, "us": 1000, "ns": 1_000_000}[t.unit]
        raw = col.cast(pa.int64())
        if per_ms < 0:
            raw = pc.multiply(raw, -per_ms)
        elif per_ms > 1:
            ints = np.asarray(raw.fill_null(0), dtype=np.int64) // per_ms
            raw = pa.array(ints, pa.int64(), mask=np.asarray(raw.is_null()))
    elif pa.types.is_integer(t):
        raw = col.cast(pa.int64())
    else:
        raise InvalidRecordError(f"column 'timestamp' must be a timestamp or integer ms, not {t}")
    return np.asarray(raw.fill_null(default), dtype=np.int64)


def encode_arrow(
    table: pa.Table | pa.RecordBatch,
    *,
    base_offset: int = 0,
    compression: Compression | str | int = Compression.NONE,
    compression_level: int | None = None,
    max_records_per_batch: int = 1000,
    max_batch_bytes: int = 1024 * 1024,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    log_append_time: int | None = None,
    default_timestamp: int | None = None,
    partition_leader_epoch: int = -1,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    batch_record_counts: np.ndarray | None = None,
) -> EncodedBatches:
    """Encode the rows of ``table`` as v2 batches with contiguous offsets from ``base_offset``.

    Columns: ``value`` (required), ``key``, ``timestamp`` (Arrow timestamp or int64 ms; null or
    missing means ``default_timestamp``, by default now; an explicit -1, "no timestamp", is
    written as -1, as :func:`~kafkalog.records.batch.encode_batch` writes it) and ``headers``
    (list<struct<key: string, value: binary>>). A batch holds at most ``max_records_per_batch``
    records and stays under ``max_batch_bytes`` unless a single record is larger.
    ``batch_record_counts`` (records per batch, summing to the row count) cuts the batches
    where the caller says instead: an embedded log's buffered appends keep one batch per call.
    """
    codec = Compression.parse(compression)
    names = table.schema.names
    if "value" not in names:
        raise InvalidRecordError("a 'value' column is required")
    if max_records_per_batch < 1:
        raise InvalidRecordError("max_records_per_batch must be at least 1")
    if timestamp_type is TimestampType.NO_TIMESTAMP:
        raise InvalidRecordError("v2 batches have CreateTime or LogAppendTime timestamps")
    if timestamp_type is TimestampType.LOG_APPEND_TIME and log_append_time is None:
        raise InvalidRecordError("a LogAppendTime batch needs log_append_time")
    n = table.num_rows
    now = int(time.time() * 1000) if default_timestamp is None else default_timestamp
    val_off, val_data, val_valid = _binary_parts(table.column("value"), "value")
    if "key" in names:
        key_off, key_data, key_valid = _binary_parts(table.column("key"), "key")
    else:
        key_off, key_data, key_valid = (
            np.zeros(n + 1, np.int64),
            np.empty(0, np.uint8),
            np.zeros(n, np.bool_),
        )
    ts = _timestamps_ms(table.column("timestamp") if "timestamp" in names else None, n, now)
    has_headers = "headers" in names
    if has_headers:
        hl_off, hl_valid, hk_off, hk_data, hv_off, hv_data, hv_valid = _header_parts(
            table.column("headers")
        )
    else:
        hl_off = np.zeros(1, np.int64)
        hl_valid = np.zeros(1, np.bool_)
        hk_off = hv_off = np.zeros(1, np.int64)
        hk_data = hv_data = np.empty(0, np.uint8)
        hv_valid = np.zeros(1, np.bool_)

    rec_size = np.empty(max(n, 1), np.int64)
    if batch_record_counts is None:
        b_first = np.empty(n + 2, np.int64)
        b_area = np.empty(n + 1, np.int64)
        nb = K.plan_batches(
            ts,
            key_off,
            key_valid,
            val_off,
            val_valid,
            has_headers,
            hl_off,
            hl_valid,
            hk_off,
            hv_off,
            hv_valid,
            max_records_per_batch,
            max(1, max_batch_bytes - HEADER_SIZE),
            b_first,
            b_area,
            rec_size,
        )
    else:
        nb, b_first, b_area = _given_batches(
            batch_record_counts,
            n,
            (ts, key_off, key_valid, val_off, val_valid, has_headers),
            (hl_off, hl_valid, hk_off, hv_off, hv_valid),
            rec_size,
        )
    if nb < 0:
        i = -nb - 1
        raise InvalidRecordError(f"row {i}: timestamp {int(ts[i])} is neither >= 0 nor -1")
    if n == 0:
        nb = 0
    b_first = b_first[: nb + 1]
    sizes = b_area[:nb] + HEADER_SIZE
    b_pos = np.zeros(nb, np.int64)
    if nb:
        b_pos[1:] = np.cumsum(sizes)[:-1]
    out = _alloc(int(sizes.sum()), np.uint8)
    attributes = 0
    if timestamp_type is TimestampType.LOG_APPEND_TIME:
        attributes |= ATTR_TIMESTAMP_TYPE
    if is_transactional:
        attributes |= ATTR_TRANSACTIONAL
    max_ts = np.empty(nb, np.int64)
    max_ts_off = np.empty(nb, np.int64)
    K.write_batches(
        out,
        b_pos,
        b_first,
        nb,
        base_offset,
        attributes,
        partition_leader_epoch,
        producer_id,
        producer_epoch,
        base_sequence,
        log_append_time or 0,
        timestamp_type is TimestampType.LOG_APPEND_TIME,
        ts,
        rec_size,
        key_off,
        key_data,
        key_valid,
        val_off,
        val_data,
        val_valid,
        has_headers,
        hl_off,
        hl_valid,
        hk_off,
        hk_data,
        hv_off,
        hv_data,
        hv_valid,
        max_ts,
        max_ts_off,
    )
    counts = np.diff(b_first)
    base_offsets = base_offset + b_first[:-1]
    if codec is Compression.NONE:
        view = out.data
        if K.stamp_small_crcs(out, b_pos, sizes, nb, _COMPILED_CRC_MAX):
            for b in np.flatnonzero(sizes > _COMPILED_CRC_MAX).tolist():
                p = int(b_pos[b])
                _CRC.pack_into(
                    view, p + CRC_OFFSET, crc32c(view[p + ATTRIBUTES_OFFSET : p + int(sizes[b])])
                )
        data = view
        positions = b_pos
    else:
        data, positions = _compress_batches(out, b_pos, sizes, codec, compression_level)
    return EncodedBatches(
        data=data,
        positions=positions,
        base_offsets=base_offsets,
        last_offsets=base_offsets + counts - 1,
        max_timestamps=max_ts,
        offsets_of_max_timestamp=max_ts_off,
        record_counts=counts,
    )


def _given_batches(
    counts: np.ndarray,
    n: int,
    records: tuple[Any, ...],
    headers: tuple[np.ndarray, ...],
    rec_size: np.ndarray,
) -> tuple[int, np.ndarray, np.ndarray]:
    """Batch boundaries from records-per-batch counts, and every record's size in them."""
    counts = np.asarray(counts, np.int64)
    if (counts < 1).any() or int(counts.sum()) != n:
        raise InvalidRecordError(
            f"batch_record_counts must be positive and sum to the {n} rows, not {counts.sum()}"
        )
    nb = len(counts)
    b_first = np.zeros(nb + 1, np.int64)
    np.cumsum(counts, out=b_first[1:])
    b_area = np.empty(nb, np.int64)
    ts, key_off, key_valid, val_off, val_valid, has_headers = records
    hl_off, hl_valid, hk_off, hv_off, hv_valid = headers
    bad = K.size_given_batches(
        ts,
        key_off,
        key_valid,
        val_off,
        val_valid,
        has_headers,
        hl_off,
        hl_valid,
        hk_off,
        hv_off,
        hv_valid,
        b_first,
        nb,
        b_area,
        rec_size,
    )
    return (bad if bad < 0 else nb), b_first, b_area


def _compress_batches(
    out: np.ndarray,
    b_pos: np.ndarray,
    sizes: np.ndarray,
    codec: Compression,
    level: int | None,
) -> tuple[memoryview, np.ndarray]:
    pieces: list[bytes] = []
    positions = np.empty(len(b_pos), np.int64)
    pos = 0
    view = out.data
    for b in range(len(b_pos)):
        p = int(b_pos[b])
        header = bytearray(view[p : p + HEADER_SIZE])
        payload = _compression.compress(
            codec, view[p + HEADER_SIZE : p + int(sizes[b])], magic=2, level=level
        )
        _LENGTH_ATTRS.pack_into(header, 8, HEADER_SIZE - LOG_OVERHEAD + len(payload))
        header[ATTRIBUTES_OFFSET + 1] = (header[ATTRIBUTES_OFFSET + 1] & 0xF8) | int(codec)
        crc = crc32c(bytes(header[ATTRIBUTES_OFFSET:]) + payload)
        _CRC.pack_into(header, CRC_OFFSET, crc)
        positions[b] = pos
        pieces.append(bytes(header))
        pieces.append(payload)
        pos += len(header) + len(payload)
    return memoryview(b"".join(pieces)), positions


def _header_parts(col: Any) -> tuple[np.ndarray, ...]:
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if not pa.types.is_list(col.type) and not pa.types.is_large_list(col.type):
        raise InvalidRecordError(
            f"column 'headers' must be list<struct<key: string, value: binary>>, not {col.type}"
        )
    n = len(col)
    off_dtype = np.int32 if pa.types.is_list(col.type) else np.int64
    hl_off = np.frombuffer(col.buffers()[1], off_dtype)[col.offset : col.offset + n + 1].astype(
        np.int64, copy=False
    )
    hl_valid = (
        np.asarray(col.is_valid(), dtype=np.bool_) if col.null_count else np.ones(n, np.bool_)
    )
    values = col.values
    if not pa.types.is_struct(values.type):
        raise InvalidRecordError("column 'headers' must hold structs of (key, value)")
    if values.null_count:
        raise InvalidRecordError("a header entry may not be null (its value may)")
    hk_off, hk_data, hk_valid = _binary_parts(values.field("key"), "headers.key")
    if not hk_valid.all():
        raise InvalidRecordError("header keys may not be null")
    hv_off, hv_data, hv_valid = _binary_parts(values.field("value"), "headers.value")
    return hl_off, hl_valid, hk_off, hk_data, hv_off, hv_data, hv_valid
