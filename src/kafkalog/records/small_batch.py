"""Fast encoding of small v2 batches: the one- or few-record batches an embedded log appends.

:func:`~kafkalog.records.batch.encode_batch` builds a record field by field (a function call and
a ``bytearray`` append per varint), ~10 us for a one-record batch: more than the ``write`` that
stores it. Here a record is a handful of bytes concatenations, its varints taken from a table
of precomputed encodings (every length and delta below 8 KiB), and the 61-byte header one
``struct`` pack plus one C CRC call. The bytes are exactly :func:`encode_batch`'s (the tests
compare them, and decode them with kafka-python); anything this path does not cover (explicit
offsets, out-of-range timestamps, compression) goes to :func:`encode_batch`, which also raises
its errors.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence

import crc32c as _crc32c

from kafkalog.records import compression as _compression
from kafkalog.records.model import Header, Record
from kafkalog.records.types import Compression
from kafkalog.records.varint import write_unsigned

crc32c_c: Callable[..., int] = _crc32c.crc32c
"""The C CRC-32C, which continues a CRC given as its second argument: the header's part and
the records are CRC'd without joining them first."""
_TABLE_SIZE = 1 << 14  # every unsigned value of at most two varint bytes
_UVARINT: tuple[bytes, ...] = tuple(
    bytes([u]) if u < 0x80 else bytes([(u & 0x7F) | 0x80, u >> 7]) for u in range(_TABLE_SIZE)
)
_MINUS_ONE = b"\x01"  # zig-zag varint of -1: a null key or value
_NO_HEADERS = b"\x00"
_INT64_MAX = 2**63 - 1
# the header from the attributes on (what the CRC covers) and the part before the CRC
_TAIL = struct.Struct(">hiqqqhii")
_HEAD = struct.Struct(">qiibI")
_pack_tail = _TAIL.pack
_pack_head = _HEAD.pack
_BATCH_OVERHEAD = 49  # the batch length field counts the header after itself: 61 - 12


def _uvarint(u: int) -> bytes:
    if u < _TABLE_SIZE:
        return _UVARINT[u]
    out = bytearray()
    write_unsigned(out, u)
    return bytes(out)


def _varint(n: int) -> bytes:
    """A 32-bit zig-zag varint (lengths, counts, offset deltas)."""
    return _uvarint(((n << 1) ^ (n >> 31)) & 0xFFFFFFFF)


def _varlong(n: int) -> bytes:
    """A 64-bit zig-zag varint of ``n`` wrapped as Java's ``long`` subtraction leaves it."""
    n = ((n + 2**63) & 0xFFFFFFFFFFFFFFFF) - 2**63
    return _uvarint(((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF)


def encode_record_body(record: Record, offset_delta: int, base_timestamp: int) -> bytes:
    """One record, length prefix included, as :func:`~kafkalog.records.batch.encode_record`
    writes it."""
    return _body(
        record.key, record.value, record.timestamp - base_timestamp, offset_delta, record.headers
    )


def _body(
    key: bytes | None,
    value: bytes | None,
    ts_delta: int,
    offset_delta: int,
    headers: Sequence[Header],
) -> bytes:
    parts = b"\x00" + (_UVARINT[ts_delta << 1] if 0 <= ts_delta < 8192 else _varlong(ts_delta))
    parts += _UVARINT[offset_delta << 1] if offset_delta < 8192 else _varint(offset_delta)
    if key is None:
        parts += _MINUS_ONE
    else:
        n = len(key)
        parts += (_UVARINT[n << 1] if n < 8192 else _varint(n)) + key
    if value is None:
        parts += _MINUS_ONE
    else:
        n = len(value)
        parts += (_UVARINT[n << 1] if n < 8192 else _varint(n)) + value
    parts += _headers(headers) if headers else _NO_HEADERS
    n = len(parts)
    return (_UVARINT[n << 1] if n < 8192 else _varint(n)) + parts


def _headers(headers: Sequence[Header]) -> bytes:
    out = _varint(len(headers))
    for h in headers:
        hk = h.key.encode("utf-8")
        out += _varint(len(hk)) + hk
        out += _MINUS_ONE if h.value is None else _varint(len(h.value)) + h.value
    return out


def encode_records_area(records: Sequence[Record], deltas: Sequence[int], base_ts: int) -> bytes:
    """The (uncompressed) records area of a batch: the records with their offset deltas."""
    if len(records) == 1:
        return encode_record_body(records[0], deltas[0], base_ts)
    return b"".join(
        [encode_record_body(r, d, base_ts) for r, d in zip(records, deltas, strict=True)]
    )


def encode_small_batch(
    records: Sequence[Record],
    base_offset: int = 0,
    missing_timestamp: Callable[[], int] | None = None,
) -> bytes | None:
    """An uncompressed CreateTime producer batch of ``records`` (no producer id, no
    transaction), byte for byte what ``encode_batch(records, base_offset=base_offset,
    missing_timestamp=missing_timestamp)`` returns; None when a record needs the general
    encoder (an explicit offset, a timestamp outside [-1, 2**63-1], no records at all): the
    caller then calls it, and gets its errors.

    A timestamp of -1 (none) is written as -1, as a client's bytes carry it, unless
    ``missing_timestamp`` is given: then it is called once, at the first such record, and its
    result (ms) is every such record's timestamp (an embedded log's append, stamping records
    as a Kafka producer does). Records with timestamps never call it: nothing is paid for it.
    """
    count = len(records)
    if not count or not 0 <= base_offset <= _INT64_MAX:
        return None
    if count == 1:
        rec = records[0]
        ts = rec.timestamp
        if rec.offset >= 0 or not 0 <= ts <= _INT64_MAX:
            if rec.offset >= 0 or ts != -1:
                return None
            if missing_timestamp is not None:
                ts = missing_timestamp()
        area = _body(rec.key, rec.value, 0, 0, rec.headers)
        max_ts = ts
    else:
        stamps = record_timestamps(records, missing_timestamp)
        if stamps is None:
            return None
        base_ts = stamps[0]
        max_ts = -1
        bodies = []
        for i, (rec, ts) in enumerate(zip(records, stamps, strict=True)):
            if ts > max_ts:
                max_ts = ts
            bodies.append(_body(rec.key, rec.value, ts - base_ts, i, rec.headers))
        area = b"".join(bodies)
        ts = base_ts
    tail = _pack_tail(0, count - 1, ts, max_ts, -1, -1, -1, count)
    crc = crc32c_c(area, crc32c_c(tail))
    return _pack_head(base_offset, _BATCH_OVERHEAD + len(area), -1, 2, crc) + tail + area


def record_timestamps(
    records: Sequence[Record], missing_timestamp: Callable[[], int] | None
) -> list[int] | None:
    """The timestamps ``records`` are written with: each record's own, -1 (none) replaced by
    one call of ``missing_timestamp`` when given; None when a record has an explicit offset or
    a timestamp outside [-1, 2**63-1] (the general encoder's to refuse)."""
    stamps = []
    now: int | None = None
    for rec in records:
        ts = rec.timestamp
        if rec.offset >= 0 or not 0 <= ts <= _INT64_MAX:
            if rec.offset >= 0 or ts != -1:
                return None
            if missing_timestamp is not None:
                if now is None:
                    now = missing_timestamp()
                ts = now
        stamps.append(ts)
    return stamps


Row = tuple[bytes | None, bytes | None, int, Sequence[Header]]
"""A record as a producer hands it over: key, value, timestamp (ms, >= 0), headers."""


def encode_rows(
    rows: Sequence[Row],
    *,
    compression: Compression = Compression.NONE,
    compression_level: int | None = None,
) -> bytes:
    """One CreateTime producer batch (base offset 0, no producer id) of ``rows``: the bytes
    :func:`~kafkalog.records.batch.encode_batch` writes for the same records and codec, without
    making a :class:`Record` per row. The caller (the batching writer) checked the
    timestamps."""
    count = len(rows)
    base_ts = rows[0][2]
    max_ts = -1
    bodies = []
    for i, (key, value, ts, headers) in enumerate(rows):
        if ts > max_ts:
            max_ts = ts
        bodies.append(_body(key, value, ts - base_ts, i, headers))
    area = b"".join(bodies)
    if compression is not Compression.NONE:
        area = _compression.compress(compression, area, magic=2, level=compression_level)
    tail = _pack_tail(int(compression), count - 1, base_ts, max_ts, -1, -1, -1, count)
    crc = crc32c_c(area, crc32c_c(tail))
    return _pack_head(0, _BATCH_OVERHEAD + len(area), -1, 2, crc) + tail + area


def _uvarint_size(u: int) -> int:
    size = 1
    while u >= 0x80:
        u >>= 7
        size += 1
    return size


def _bytes_size(b: bytes | None) -> int:
    """A key, value or header value with its length prefix (a null is one byte: -1)."""
    if b is None:
        return 1
    n = len(b)
    return (1 if n < 64 else 2 if n < 8192 else _uvarint_size(n << 1)) + n


def encoded_size(records: Sequence[Record], timestamps: Sequence[int] | None = None) -> int:
    """The size of ``encode_small_batch(records)`` without encoding: an embedded log's buffered
    append reports it (as :class:`~kafkalog.log.log.AppendInfo` ``size``) when the call returns,
    while the bytes are written later. ``timestamps`` are the records' as written (default:
    their own; a missing one stamped makes other deltas). The caller checked what
    ``encode_small_batch`` checks."""
    stamps = [r.timestamp for r in records] if timestamps is None else timestamps
    base_ts = stamps[0]
    total = _BATCH_OVERHEAD + 12
    for i, rec in enumerate(records):
        d = stamps[i] - base_ts
        d = ((d + 2**63) & 0xFFFFFFFFFFFFFFFF) - 2**63
        body = 1 + _uvarint_size(((d << 1) ^ (d >> 63)) & 0xFFFFFFFFFFFFFFFF)
        body += (1 if i < 64 else _uvarint_size(i << 1)) + _bytes_size(rec.key)
        body += _bytes_size(rec.value)
        headers = rec.headers
        body += _uvarint_size(len(headers) << 1)
        for h in headers:
            body += _bytes_size(h.key.encode("utf-8")) + _bytes_size(h.value)
        total += body + _uvarint_size(body << 1)
    return total
