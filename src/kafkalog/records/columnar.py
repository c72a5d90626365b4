"""The columnar path: log bytes straight into ``pyarrow.RecordBatch`` columns, and back.

This is the hot path of the Spark reader. Headers are scanned by a compiled loop, CRCs checked
by the C CRC-32C, and the records of all batches of a byte range decoded by one compiled loop into
Arrow buffers; no Python object is made per record. zstd payloads (Kafka's usual codec) are
inflated by that loop itself, batch by batch into one cache-resident buffer; other codecs, and
zstd payloads of unusual shape, are inflated per batch beforehand.
The columns follow Spark's Kafka source (``key``, ``value``, ``topic``, ``partition``,
``offset``, ``timestamp``, ``timestampType``, optional ``headers``), plus optional batch
metadata columns.
"""

from __future__ import annotations

import ctypes
import itertools
import threading
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from kafkalog.errors import (
    BatchTooLargeError,
    CompressionError,
    CorruptRecordError,
    _PositionedError,
)
from kafkalog.records import _kernels as K
from kafkalog.records import compression
from kafkalog.records import record_codes as C
from kafkalog.records.batch import HEADER_SIZE, LOG_OVERHEAD, MIN_RECORD_SIZE
from kafkalog.records.crc import crc32c
from kafkalog.records.header_prune import RowBounds, unmatched
from kafkalog.records.reader import IncompleteTail, LogReader, bad_magic_reason
from kafkalog.records.types import (
    DEFAULT_LIMITS,
    Compression,
    Limits,
    TimestampType,
    TimestampUnit,
)

HEADERS_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))

#: Optional per-record columns describing the batch a record came from.
METADATA_COLUMNS: dict[str, pa.DataType] = {
    "producerId": pa.int64(),
    "producerEpoch": pa.int32(),
    "leaderEpoch": pa.int32(),
    "isControl": pa.bool_(),
    "isTransactional": pa.bool_(),
    "batchPosition": pa.int64(),
}

# indexes into the header field rows written by ``scan_entries``
F_BASE_OFFSET, F_LENGTH, F_EPOCH, F_MAGIC, F_CRC, F_ATTRS, F_LOD = 0, 1, 2, 3, 4, 5, 6
F_BASE_TS, F_MAX_TS, F_PID, F_PEPOCH, F_BASE_SEQ, F_COUNT = 7, 8, 9, 10, 11, 12

_SCAN_CHUNK = 16384

_KERNEL_ERRORS = C.MESSAGES


def arrow_schema(
    *,
    include_headers: bool = False,
    metadata: Sequence[str] = (),
    timestamp_unit: TimestampUnit = "ms",
    topic_partition: bool = False,
    columns: Collection[str] | None = None,
) -> pa.Schema:
    """The schema :func:`decode_arrow` produces for these options (Spark's column order);
    with ``columns``, only the record columns named there (metadata columns are asked for
    by ``metadata``)."""
    fields = [pa.field("key", pa.binary()), pa.field("value", pa.binary())]
    if topic_partition:
        fields += [pa.field("topic", pa.string()), pa.field("partition", pa.int32())]
    fields += [
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp(timestamp_unit, tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADERS_TYPE))
    for name in metadata:
        if name not in METADATA_COLUMNS:
            raise ValueError(
                f"unknown metadata column {name!r}; known: {', '.join(METADATA_COLUMNS)}"
            )
        fields.append(pa.field(name, METADATA_COLUMNS[name]))
    if columns is not None:
        unknown = set(columns) - set(RECORD_COLUMNS)
        if unknown:
            raise ValueError(
                f"unknown column(s) {sorted(unknown)}; known: {', '.join(RECORD_COLUMNS)}"
            )
        fields = [f for f in fields if f.name in columns or f.name in metadata]
    return pa.schema(fields)


#: The record columns :func:`decode_range` can produce (``columns`` picks some of them).
RECORD_COLUMNS = (
    "key",
    "value",
    "topic",
    "partition",
    "offset",
    "timestamp",
    "timestampType",
    "headers",
)


@dataclass(frozen=True)
class _Options:
    """The decode options, carried together through the per-run decoders."""

    schema: pa.Schema
    path: str | None
    include_headers: bool
    metadata: tuple[str, ...]
    timestamp_unit: TimestampUnit
    verify_crc: bool
    control_records: str
    topic: str | None
    partition: int | None
    limits: Limits
    decompress_threads: int
    columns: frozenset[str]

    def wants(self, column: str) -> bool:
        return column in self.columns


@dataclass(frozen=True)
class DecodedRange:
    """What :func:`decode_range` read: the records, and where reading stopped and why."""

    batch: pa.RecordBatch
    next_position: int
    entries: int
    incomplete_tail: IncompleteTail | None
    #: entries not decoded: their headers prove they hold no row within ``within``
    skipped: int = 0
    #: each entry's byte position, and first and last offsets as its header says (a v0/v1
    #: entry's offset field, its last, as both): control batches hold no row, so only these
    #: show a base offset out of line next to one (:mod:`kafkalog.log.arrow_read`)
    header_offsets: np.ndarray | None = None


def decode_arrow(
    buffer: Any,
    start: int = 0,
    end: int | None = None,
    **options: Any,
) -> pa.RecordBatch:
    """Decode the log entries in ``buffer[start:end]`` into one Arrow record batch.

    Options are those of :func:`decode_range`.
    """
    return decode_range(buffer, start, end, **options).batch


def decode_range(
    buffer: Any,
    start: int = 0,
    end: int | None = None,
    *,
    path: str | None = None,
    include_headers: bool = False,
    metadata: Sequence[str] = (),
    timestamp_unit: TimestampUnit = "ms",
    verify_crc: bool = True,
    control_records: Literal["skip", "include"] = "skip",
    topic: str | None = None,
    partition: int | None = None,
    limits: Limits = DEFAULT_LIMITS,
    decompress_threads: int = 1,
    columns: Collection[str] | None = None,
    within: RowBounds | None = None,
) -> DecodedRange:
    """Decode every complete log entry from ``start`` to ``end`` of ``buffer``.

    ``buffer`` is anything exposing the buffer protocol (bytes, an mmap, a memoryview). Control
    records (transaction markers) are skipped unless ``control_records="include"``. A cut-off
    last entry ends decoding and is reported in ``incomplete_tail``; corruption raises
    :class:`CorruptRecordError` naming ``path`` and the byte position.
    ``decompress_threads`` > 1 decodes on that many threads: a range of zstd batches is split
    into runs inflated and decoded in parallel (without ``include_headers``), other codecs are
    inflated on a pool (zstd and gzip release the GIL); leave it at 1 where every core already
    runs a task, as under Spark.
    ``columns`` names the record columns wanted (of :data:`RECORD_COLUMNS`; default all): the
    others are not built, and keys or values left out are checked but never copied.
    ``within`` names the rows wanted (offsets, timestamps): entries whose headers prove they
    hold none are CRC-checked and skipped, not decoded (:mod:`kafkalog.records.header_prune`);
    rows outside it may still be returned.
    """
    if (topic is None) != (partition is None):
        raise ValueError("give both topic and partition, or neither")
    schema = arrow_schema(
        include_headers=include_headers,
        metadata=metadata,
        timestamp_unit=timestamp_unit,
        topic_partition=topic is not None,
        columns=columns,
    )
    opts = _Options(
        schema,
        path,
        include_headers and (columns is None or "headers" in columns),
        tuple(metadata),
        timestamp_unit,
        verify_crc,
        control_records,
        topic,
        partition,
        limits,
        max(1, decompress_threads),
        frozenset(RECORD_COLUMNS if columns is None else columns),
    )
    data = np.frombuffer(buffer, dtype=np.uint8)
    stop = len(data) if end is None else min(end, len(data))
    positions, fields, next_pos = _scan(data, start, stop, path, limits)
    tail = None
    if next_pos < stop:
        remaining = stop - next_pos
        declared: int | None = None
        if remaining >= LOG_OVERHEAD:
            size_field = data[next_pos + 8 : next_pos + 12].tobytes()
            declared = int.from_bytes(size_field, "big", signed=True) + LOG_OVERHEAD
        tail = IncompleteTail(next_pos, declared, remaining)
    parts: list[pa.RecordBatch] = []
    magics = fields[:, F_MAGIC]
    n = len(positions)
    skip = None
    if within is not None and within.bounded:
        skip = unmatched(data, positions, fields, within, limits, verify_crc=verify_crc)
    i = 0
    while i < n:
        if skip is not None and skip[i]:
            i += 1
            continue
        j = i
        legacy = magics[i] < 2
        while j < n and (magics[j] < 2) == legacy and (skip is None or not skip[j]):
            j += 1
        decode = _decode_legacy if legacy else _decode_v2
        parts.append(decode(data, positions[i:j], fields[i:j], opts))
        i = j
    if not parts:
        batch = schema.empty_table().to_batches()
        result = batch[0] if batch else pa.RecordBatch.from_pylist([], schema=schema)
    elif len(parts) == 1:
        result = parts[0]
    else:
        result = pa.Table.from_batches(parts, schema=schema).combine_chunks().to_batches()[0]
    skipped = 0 if skip is None else int(skip.sum())
    firsts = fields[:, F_BASE_OFFSET]
    lasts = np.where(magics >= 2, firsts + fields[:, F_LOD], firsts)
    heads = np.stack([positions, firsts, lasts], axis=1)
    return DecodedRange(result, next_pos, n, tail, skipped, heads)


def _scan(
    data: np.ndarray, start: int, stop: int, path: str | None, limits: Limits
) -> tuple[np.ndarray, np.ndarray, int]:
    pos_chunks: list[np.ndarray] = []
    field_chunks: list[np.ndarray] = []
    pos = start
    while True:
        cap = min(_SCAN_CHUNK, max(1, (stop - pos) // 26 + 1))
        out_pos = np.empty(cap, np.int64)
        out_fields = np.zeros((cap, 13), np.int64)
        err, count, pos, err_pos = K.scan_entries(
            data, pos, stop, limits.max_batch_bytes, out_pos, out_fields
        )
        pos_chunks.append(out_pos[:count])
        field_chunks.append(out_fields[:count])
        if err != C.OK:
            cls = BatchTooLargeError if err == C.ERR_ENTRY_TOO_LARGE else CorruptRecordError
            if err == C.ERR_MAGIC:
                raise cls(bad_magic_reason(int(data[err_pos])), path=path, position=err_pos)
            size = int.from_bytes(data[err_pos : err_pos + 4].tobytes(), "big", signed=True)
            raise cls(f"{_KERNEL_ERRORS[err]} (size field {size})", path=path, position=err_pos)
        if count < cap:
            break
    return np.concatenate(pos_chunks), np.concatenate(field_chunks), pos


def _decode_v2(
    data: np.ndarray,
    positions: np.ndarray,
    fields: np.ndarray,
    opts: _Options,
    fuse: bool = True,
) -> pa.RecordBatch:
    """Decode a run of v2 batches; zstd payloads are inflated inside the kernel when ``fuse``.

    The kernel only inflates the common shape (one frame, bounded within the limit by its
    headers) and reports any failure without a reason; whenever a range holding such batches
    fails anywhere, it is decoded again with ``fuse=False``, where every payload goes through
    ``compression.decompress_buffer``, so errors (which one is raised first, its text and
    position) are exactly those of the per-batch path.
    """
    path, limits, include_headers = opts.path, opts.limits, opts.include_headers
    lengths = fields[:, F_LENGTH]
    attrs = fields[:, F_ATTRS]
    counts = fields[:, F_COUNT]
    area_start = positions + HEADER_SIZE
    area_end = positions + LOG_OVERHEAD + lengths
    if opts.verify_crc:
        crcs = fields[:, F_CRC]
        for k in range(len(positions)):
            p = int(positions[k])
            if crc32c(data[p + 21 : int(area_end[k])]) != crcs[k]:
                raise CorruptRecordError(
                    f"record batch CRC mismatch: stored {int(crcs[k])}, computed "
                    f"{crc32c(data[p + 21 : int(area_end[k])])}",
                    path=path,
                    position=p + 17,
                )
    bad = np.flatnonzero(counts < 0)
    if bad.size:
        k = int(bad[0])
        raise CorruptRecordError(
            f"negative record count {int(counts[k])}", path=path, position=int(positions[k]) + 57
        )
    codecs = attrs & 0x07
    bad = np.flatnonzero(codecs > 4)
    if bad.size:
        k = int(bad[0])
        raise CorruptRecordError(
            f"unknown compression codec id {int(codecs[k])}",
            path=path,
            position=int(positions[k]) + 21,
        )
    # control batches are decoded (and so validated) like any other; their rows are dropped
    # afterwards when skipped, as a consumer iterates and then discards them
    idx = np.arange(len(positions))
    src = np.zeros(len(idx), np.int32)
    starts = area_start[idx].copy()
    ends = area_end[idx].copy()
    # zstd payloads the kernel inflates itself: their output bound, else -1
    zcap = _plan_zstd(data, codecs, area_start, area_end, limits) if fuse else None
    fused = zcap is not None
    if zcap is None:
        zcap = np.full(len(idx), -1, np.int64)

    def redo() -> pa.RecordBatch:
        return _decode_v2(data, positions, fields, opts, fuse=False)

    # other compressed payloads are inflated into buffers of their own, read in place
    # the kernel reads each source by address; this list keeps them alive until it returns
    srcs: list[np.ndarray] = [data]
    compressed = [
        (k_i, k) for k_i, k in enumerate(idx.tolist()) if codecs[k] != 0 and zcap[k_i] < 0
    ]

    def inflate(item: tuple[int, int]) -> bytes | memoryview:
        k = item[1]
        codec = Compression(int(codecs[k]))
        p = int(positions[k])
        body = data[p + HEADER_SIZE : int(area_end[k])]
        try:
            return compression.decompress_buffer(
                codec, body, magic=2, limit=limits.decompressed_bound(len(body))
            )
        except _PositionedError as e:
            raise CompressionError(
                f"{codec.label} payload: {e.reason}", path=path, position=p + HEADER_SIZE
            ) from e

    try:
        if opts.decompress_threads > 1 and len(compressed) > 1:
            inflated = list(_pool(opts.decompress_threads).map(inflate, compressed))
        else:
            inflated = [inflate(item) for item in compressed]
    except CompressionError:
        if fused:
            return redo()
        raise
    for (k_i, _), raw in zip(compressed, inflated, strict=True):
        src[k_i] = len(srcs)
        starts[k_i] = 0
        ends[k_i] = len(raw)
        srcs.append(np.frombuffer(raw, np.uint8))
    sel_counts = counts[idx]
    room = ends - starts
    # A payload the kernel inflates is checked there against its real size; its bound already
    # caps the count here, so no output is sized from a count its payload cannot hold.
    room_bound = np.where(zcap >= 0, zcap, room)
    over = np.flatnonzero(sel_counts * MIN_RECORD_SIZE > room_bound)
    if over.size:
        if fused:
            return redo()
        k = int(idx[over[0]])
        raise CorruptRecordError(
            f"record count {int(counts[k])} cannot fit in {int(room[over[0]])} bytes of records",
            path=path,
            position=int(positions[k]) + 57,
        )
    total = int(sel_counts.sum())
    area_bytes = int(room_bound.sum())
    fixed = (attrs[idx] & 0x08) != 0
    want_key, want_value = opts.wants("key"), opts.wants("value")
    out_offset = _alloc(total, np.int64)
    out_ts = _alloc(total, np.int64)
    # keys and values not asked for are never copied: their buffers stay one element long
    key_off = _alloc(total + 1 if want_key else 1, np.int32)
    val_off = _alloc(total + 1 if want_value else 1, np.int32)
    key_valid = _alloc(total if want_key else 1, np.bool_)
    val_valid = _alloc(total if want_value else 1, np.bool_)
    key_data = _alloc(area_bytes if want_key else 1, np.uint8)
    val_data = _alloc(area_bytes if want_value else 1, np.uint8)
    hl_off = _alloc(total + 1 if include_headers else 1, np.int32)
    # held here until the kernel returns: it writes through the scratch buffer's address
    dctx, scratch = _zstd_kernel_state(int(zcap.max())) if fused else (0, _NO_SCRATCH)
    hcap = max(16, total) if include_headers else 1
    base_offsets = fields[idx, F_BASE_OFFSET]
    base_ts = fields[idx, F_BASE_TS]
    max_ts = fields[idx, F_MAX_TS]
    threads = min(opts.decompress_threads, len(idx))
    # what the kernel takes first, threaded or not: the batches and their header fields
    src_addrs = np.array([a.ctypes.data for a in srcs], np.int64)
    batches = (src_addrs, src, starts, ends, sel_counts, base_offsets, base_ts, max_ts, fixed)
    if fused and threads > 1 and not include_headers and want_key and want_value:
        done = _decode_chunks(
            threads,
            *batches,
            (out_offset, out_ts, key_off, key_data, key_valid, val_off, val_data, val_valid),
            zcap,
            room_bound,
        )
        if done is None:
            return redo()
        kp, vp = done
        h = hkp = hvp = 0
        hk_off = hk_data = hv_off = hv_data = hv_valid = _NO_SCRATCH
    else:
        res = K.decode_v2(
            *batches,
            include_headers,
            want_key,
            want_value,
            out_offset,
            out_ts,
            key_off,
            key_data,
            key_valid,
            val_off,
            val_data,
            val_valid,
            hl_off,
            np.empty(hcap, np.int32),
            np.empty(hcap * 4, np.uint8),
            np.empty(hcap, np.int32),
            np.empty(hcap * 4, np.uint8),
            np.empty(hcap, np.bool_),
            dctx,
            int(scratch.ctypes.data),
            zcap,
        )
        err, err_b, err_pos, _, kp, vp, h, hkp, hvp, hk_off, hk_data, hv_off, hv_data, hv_valid = (
            res
        )
        if err != C.OK:
            if fused:
                return redo()
            k = int(idx[err_b])
            where = int(positions[k])
            if src[err_b] == 0:
                raise CorruptRecordError(_KERNEL_ERRORS[err], path=path, position=int(err_pos))
            raise CorruptRecordError(
                f"{_KERNEL_ERRORS[err]} at byte {int(err_pos) - int(starts[err_b])} of the "
                "decompressed records",
                path=path,
                position=where + HEADER_SIZE,
            )
    columns: list[pa.Array] = []
    if want_key:
        columns.append(_binary(total, key_off, key_data[:kp], key_valid))
    if want_value:
        columns.append(_binary(total, val_off, val_data[:vp], val_valid))
    if opts.topic is not None:
        assert opts.partition is not None
        topic_partition = _topic_partition(opts.topic, opts.partition, total)
        columns += [
            a
            for a, name in zip(topic_partition, ("topic", "partition"), strict=True)
            if opts.wants(name)
        ]
    if opts.wants("offset"):
        columns.append(pa.array(out_offset, pa.int64()))
    if opts.wants("timestamp"):
        columns.append(
            _timestamps(
                out_ts, opts.timestamp_unit, lambda i: _batch_of(i, sel_counts, positions), path
            )
        )
    if opts.wants("timestampType"):
        ts_type = np.where(fixed, 1, 0).astype(np.int32)
        columns.append(pa.array(np.repeat(ts_type, sel_counts), pa.int32()))
    if include_headers:
        columns.append(
            _headers(total, hl_off, h, hk_off, hk_data[:hkp], hv_off, hv_data[:hvp], hv_valid)
        )
    for name in opts.metadata:
        columns.append(_metadata(name, fields[idx], positions[idx], sel_counts))
    batch = pa.RecordBatch.from_arrays(columns, schema=opts.schema)
    control = (attrs & 0x20) != 0
    if opts.control_records == "skip" and control.any():
        batch = batch.filter(pa.array(np.repeat(~control, sel_counts)))
    return batch


def _decode_chunks(
    threads: int,
    src_addrs: np.ndarray,
    src: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    counts: np.ndarray,
    base_offsets: np.ndarray,
    base_ts: np.ndarray,
    max_ts: np.ndarray,
    fixed: np.ndarray,
    out: tuple[np.ndarray, ...],
    zcap: np.ndarray,
    room: np.ndarray,
) -> tuple[int, int] | None:
    """``decompress_threads`` for batches the kernel inflates: the kernel runs on contiguous runs
    of batches at once, one per thread (it holds no GIL), each writing its own slice of the
    columns -- records at their final index (counts are known), key and value bytes from where
    the byte bounds of the batches before put them. The byte slices are then closed up, and their
    offsets shifted, into the columns one decode would have made. Returns the key and value byte
    totals, or None if any run failed (the caller re-decodes the per-batch way for the error).
    Not used with headers, whose buffers grow inside the kernel.
    """
    out_offset, out_ts, key_off, key_data, key_valid, val_off, val_data, val_valid = out
    work = np.cumsum(room)
    cuts = np.searchsorted(work, work[-1] * np.arange(1, threads) / threads) + 1
    edges = np.unique(np.concatenate(([0], np.minimum(cuts, len(counts)), [len(counts)])))
    rec = np.concatenate(([0], np.cumsum(counts)))
    cap = np.concatenate(([0], work))

    def run(run_range: tuple[int, int]) -> tuple[int, int, int, np.ndarray, np.ndarray]:
        b0, b1 = run_range
        rs, re, cs, ce = int(rec[b0]), int(rec[b1]), int(cap[b0]), int(cap[b1])
        koff = np.empty(re - rs + 1, np.int32)
        voff = np.empty(re - rs + 1, np.int32)
        dctx, scratch = _zstd_kernel_state(int(zcap[b0:b1].max()))
        res = K.decode_v2(
            src_addrs,
            src[b0:b1],
            starts[b0:b1],
            ends[b0:b1],
            counts[b0:b1],
            base_offsets[b0:b1],
            base_ts[b0:b1],
            max_ts[b0:b1],
            fixed[b0:b1],
            False,
            True,
            True,
            out_offset[rs:re],
            out_ts[rs:re],
            koff,
            key_data[cs:ce],
            key_valid[rs:re],
            voff,
            val_data[cs:ce],
            val_valid[rs:re],
            np.empty(1, np.int32),
            np.empty(1, np.int32),
            np.empty(4, np.uint8),
            np.empty(1, np.int32),
            np.empty(4, np.uint8),
            np.empty(1, np.bool_),
            dctx,
            int(scratch.ctypes.data),
            zcap[b0:b1],
        )
        return int(res[0]), int(res[4]), int(res[5]), koff, voff

    runs = list(itertools.pairwise(edges.tolist()))
    results = list(_pool(threads).map(run, runs))
    key_off[0] = 0
    val_off[0] = 0
    kbase = vbase = 0
    for (b0, b1), (err, kp, vp, koff, voff) in zip(runs, results, strict=True):
        if err != C.OK:
            return None
        rs, re, cs = int(rec[b0]), int(rec[b1]), int(cap[b0])
        # left moves within one buffer: memmove copies forward safely
        if kp and cs != kbase:
            ctypes.memmove(key_data.ctypes.data + kbase, key_data.ctypes.data + cs, kp)
        if vp and cs != vbase:
            ctypes.memmove(val_data.ctypes.data + vbase, val_data.ctypes.data + cs, vp)
        np.add(koff[1:], kbase, out=key_off[rs + 1 : re + 1], casting="unsafe")
        np.add(voff[1:], vbase, out=val_off[rs + 1 : re + 1], casting="unsafe")
        kbase += kp
        vbase += vp
    return kbase, vbase


def _batch_of(record: int, counts: np.ndarray, positions: np.ndarray) -> int:
    """Byte position of the batch holding the ``record``-th decoded record."""
    return int(positions[int(np.searchsorted(np.cumsum(counts), record, side="right"))])


_POOLS: dict[int, ThreadPoolExecutor] = {}


def _pool(threads: int) -> ThreadPoolExecutor:
    """A shared pool per size: zstd and zlib release the GIL while inflating, so batches of a
    range can be decompressed on several cores."""
    pool = _POOLS.get(threads)
    if pool is None:
        pool = _POOLS[threads] = ThreadPoolExecutor(threads, thread_name_prefix="kafkalog-inflate")
    return pool


def _plan_zstd(
    data: np.ndarray,
    codecs: np.ndarray,
    area_start: np.ndarray,
    area_end: np.ndarray,
    limits: Limits,
) -> np.ndarray | None:
    """Per batch, the output bound of a zstd payload the kernel can inflate itself, else -1;
    None when no batch qualifies (or libzstd is not reachable from the kernel)."""
    if not K.ZSTD_IN_KERNEL:
        return None
    zstd = np.flatnonzero(codecs == Compression.ZSTD)
    if not zstd.size:
        return None
    start = area_start[zstd]
    end = area_end[zstd]
    # Limits.decompressed_bound, for every payload at once
    bound = np.minimum(
        np.maximum(
            (end - start) * limits.max_decompression_ratio, limits.min_decompressed_allowance
        ),
        limits.max_decompressed_bytes,
    )
    caps = np.empty(zstd.size, np.int64)
    K.plan_zstd(data, start, end, bound, caps)
    if not (caps >= 0).any():
        return None
    zcap = np.full(len(codecs), -1, np.int64)
    zcap[zstd] = caps
    return zcap


#: Largest scratch buffer kept between calls (a batch inflates to ~1 MiB at most by default
#: producer settings; rarer larger ones get a buffer of their own for the call).
_SCRATCH_KEEP = 4 << 20


class _ZstdKernelState(threading.local):
    """Per thread (the kernel runs without the GIL): a libzstd context and the scratch buffer
    batches are inflated into, both reused from call to call."""

    dctx: Any = None
    dctx_address = 0
    scratch: np.ndarray | None = None


_ZSTD_STATE = _ZstdKernelState()
_NO_SCRATCH = np.empty(1, np.uint8)


def _zstd_kernel_state(need: int) -> tuple[int, np.ndarray]:
    """This thread's libzstd context (its address) and a scratch buffer of at least ``need``
    bytes, for a kernel call inflating batches of up to ``need`` bytes."""
    state = _ZSTD_STATE
    if state.dctx is None:
        from zstandard._cffi import ffi, lib

        state.dctx = ffi.gc(lib.ZSTD_createDCtx(), lib.ZSTD_freeDCtx)
        state.dctx_address = int(ffi.cast("uintptr_t", state.dctx))
    scratch = state.scratch
    if scratch is None or len(scratch) < need:
        scratch = np.empty(max(need, 1), np.uint8)
        if need <= _SCRATCH_KEEP:
            state.scratch = scratch
    return state.dctx_address, scratch


def _alloc(n: int, dtype: type) -> np.ndarray:
    """An uninitialised array in Arrow's memory pool.

    The pool (mimalloc/jemalloc) keeps freed pages, so decoding batch after batch reuses memory
    already faulted in instead of paying the kernel for fresh zeroed pages every time; and the
    Arrow arrays built on top share the allocation without a copy.
    """
    itemsize = np.dtype(dtype).itemsize
    size = max(itemsize, n * itemsize)
    return np.frombuffer(pa.allocate_buffer(size), dtype)[:n]


def _validity(valid: np.ndarray) -> tuple[pa.Buffer | None, int]:
    nulls = int(valid.size - np.count_nonzero(valid))
    if nulls == 0:
        return None, 0
    return pa.py_buffer(np.packbits(valid, bitorder="little")), nulls


def _binary(n: int, offsets: np.ndarray, data: np.ndarray, valid: np.ndarray) -> pa.Array:
    bitmap, nulls = _validity(valid[:n])
    return pa.Array.from_buffers(
        pa.binary(), n, [bitmap, pa.py_buffer(offsets[: n + 1]), pa.py_buffer(data)], nulls
    )


_MAX_US_MS = (2**63 - 1) // 1000


def _timestamps(
    ts_ms: np.ndarray,
    unit: TimestampUnit,
    locate: Callable[[int], int] | None = None,
    path: str | None = None,
) -> pa.Array:
    if unit == "us":
        too_far = np.flatnonzero((ts_ms > _MAX_US_MS) | (ts_ms < -_MAX_US_MS))
        if too_far.size:
            i = int(too_far[0])
            raise CorruptRecordError(
                f"timestamp {int(ts_ms[i])} ms cannot be represented in microseconds",
                path=path,
                position=None if locate is None else locate(i),
            )
    values = ts_ms if unit == "ms" else ts_ms * 1000
    return pa.Array.from_buffers(
        pa.timestamp(unit, tz="UTC"), len(values), [None, pa.py_buffer(values)]
    )


_TOPIC_COLUMNS: dict[tuple[str, int], list[pa.Array]] = {}


def _topic_partition(topic: str, partition: int, n: int) -> list[pa.Array]:
    """The topic and partition columns, the same value in every row: the longest built so far
    is kept (for the last partition asked) and sliced, not rebuilt batch after batch."""
    cached = _TOPIC_COLUMNS.get((topic, partition))
    if cached is not None and len(cached[0]) >= n:
        return [a.slice(0, n) for a in cached]
    raw = topic.encode("utf-8")
    data = np.frombuffer(raw * n, np.uint8) if n and raw else np.empty(0, np.uint8)
    offsets = (np.arange(n + 1, dtype=np.int64) * len(raw)).astype(np.int32)
    topics = pa.Array.from_buffers(
        pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )
    built = [topics, pa.array(np.full(n, partition, np.int32), pa.int32())]
    _TOPIC_COLUMNS.clear()
    _TOPIC_COLUMNS[(topic, partition)] = built
    return built


def _headers(
    n: int,
    list_off: np.ndarray,
    h: int,
    hk_off: np.ndarray,
    hk_data: np.ndarray,
    hv_off: np.ndarray,
    hv_data: np.ndarray,
    hv_valid: np.ndarray,
) -> pa.Array:
    keys = pa.Array.from_buffers(
        pa.string(), h, [None, pa.py_buffer(hk_off[: h + 1]), pa.py_buffer(hk_data)]
    )
    try:
        keys.validate(full=True)
    except pa.ArrowInvalid:
        # Java decodes header keys leniently (invalid UTF-8 becomes U+FFFD); so do we.
        raw = pa.Array.from_buffers(
            pa.binary(), h, [None, pa.py_buffer(hk_off[: h + 1]), pa.py_buffer(hk_data)]
        )
        keys = pa.array([b.decode("utf-8", "replace") for b in raw.to_pylist()], pa.string())
    vals = _binary(h, hv_off, hv_data, hv_valid)
    structs = pa.StructArray.from_arrays([keys, vals], fields=list(HEADERS_TYPE.value_type))
    offs = list_off[: n + 1]
    has = offs[1:] != offs[:-1]
    bitmap, nulls = _validity(has)
    return pa.Array.from_buffers(
        HEADERS_TYPE, n, [bitmap, pa.py_buffer(offs)], nulls, children=[structs]
    )


def _metadata(name: str, fields: np.ndarray, positions: np.ndarray, counts: np.ndarray) -> pa.Array:
    attrs = fields[:, F_ATTRS]
    per_batch: dict[str, tuple[np.ndarray, pa.DataType]] = {
        "producerId": (fields[:, F_PID], pa.int64()),
        "producerEpoch": (fields[:, F_PEPOCH].astype(np.int32), pa.int32()),
        "leaderEpoch": (fields[:, F_EPOCH].astype(np.int32), pa.int32()),
        "isControl": ((attrs & 0x20) != 0, pa.bool_()),
        "isTransactional": ((attrs & 0x10) != 0, pa.bool_()),
        "batchPosition": (positions.astype(np.int64), pa.int64()),
    }
    values, dtype = per_batch[name]
    return pa.array(np.repeat(values, counts), dtype)


def _decode_legacy(
    data: np.ndarray, positions: np.ndarray, fields: np.ndarray, opts: _Options
) -> pa.RecordBatch:
    """Magic 0/1 entries are rare (logs older than Kafka 0.11): decoded through the object API."""
    schema, path, limits, verify_crc = opts.schema, opts.path, opts.limits, opts.verify_crc
    topic, partition, timestamp_unit, metadata = (
        opts.topic,
        opts.partition,
        opts.timestamp_unit,
        opts.metadata,
    )
    start = int(positions[0])
    end = int(positions[-1] + LOG_OVERHEAD + fields[-1, F_LENGTH])
    reader = LogReader(
        data.data, path=path, start=start, end=end, limits=limits, verify_crc=verify_crc
    )
    # every column is gathered (legacy entries are rare); only the schema's are built
    rows: dict[str, list[Any]] = {name: [] for name in (*RECORD_COLUMNS, *metadata)}
    for entry in reader:
        ts_type = entry.timestamp_type
        for rec in entry.records(limits):
            rows["key"].append(rec.key)
            rows["value"].append(rec.value)
            rows["offset"].append(rec.offset)
            if timestamp_unit == "us" and abs(rec.timestamp) > _MAX_US_MS:
                raise CorruptRecordError(
                    f"timestamp {rec.timestamp} ms cannot be represented in microseconds",
                    path=path,
                    position=entry.position,
                )
            ts = rec.timestamp if timestamp_unit == "ms" else rec.timestamp * 1000
            rows["timestamp"].append(ts)
            rows["timestampType"].append(int(ts_type))
            rows["headers"].append(None)
            if topic is not None:
                rows["topic"].append(topic)
                rows["partition"].append(partition)
            for name in metadata:
                rows[name].append(
                    {
                        "producerId": -1,
                        "producerEpoch": -1,
                        "leaderEpoch": -1,
                        "isControl": False,
                        "isTransactional": False,
                        "batchPosition": entry.position,
                    }[name]
                )
    arrays = []
    for f in schema:
        if f.name == "timestamp":
            # already scaled to the unit above (range-checked), so the cast only relabels
            arrays.append(pa.array(np.asarray(rows["timestamp"], np.int64)).cast(f.type))
        else:
            arrays.append(pa.array(rows[f.name], f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


__all__ = [
    "HEADERS_TYPE",
    "METADATA_COLUMNS",
    "RECORD_COLUMNS",
    "DecodedRange",
    "TimestampType",
    "arrow_schema",
    "decode_arrow",
    "decode_range",
]
