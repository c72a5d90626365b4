"""The compiled (numba) form of :func:`kafkalog.records.record_walk.walk_python`: the same
walk, the same results, at ~8 ns a record instead of ~1 us (see :mod:`record_walk`)."""

from __future__ import annotations

import numpy as np
from numba import njit

from kafkalog.records.walk_codes import (
    ERR_BATCH_TRAILING,
    ERR_HEADER_COUNT,
    ERR_HEADER_KEY,
    ERR_HEADER_VALUE,
    ERR_KEY_LENGTH,
    ERR_OFFSET_DELTA,
    ERR_RECORD_ATTRIBUTES,
    ERR_RECORD_LENGTH,
    ERR_RECORD_TRAILING,
    ERR_TOO_FEW_BYTES,
    ERR_VALUE_LENGTH,
    ERR_VARINT,
    OK,
    REC_NO_KEY,
    REC_TIMESTAMP,
)

_U32 = np.int64(0xFFFFFFFF)


@njit(cache=True, nogil=True, inline="always")
def _varint(buf, pos, end):  # type: ignore[no-untyped-def]
    """Zig-zag 32-bit varint at ``pos``: (value, next position), next position -1 on error."""
    if pos >= end:
        return np.int64(0), -1
    result = np.int64(buf[pos])
    if result < 0x80:  # one byte: most lengths and deltas
        return (result >> 1) ^ -(result & 1), pos + 1
    result = np.int64(0)
    shift = 0
    while True:
        if pos >= end:
            return np.int64(0), -1
        b = np.int64(buf[pos])
        pos += 1
        if shift == 28:
            if b & 0x80:
                return np.int64(0), -1
            result |= (b & 0x0F) << 28
            break
        result |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
    result &= _U32
    return (result >> 1) ^ -(result & 1), pos


@njit(cache=True, nogil=True, inline="always")
def _varlong(buf, pos, end):  # type: ignore[no-untyped-def]
    """Zig-zag 64-bit varint (at most 10 bytes): (value, next position), -1 on error."""
    if pos >= end:
        return np.int64(0), -1
    first = np.int64(buf[pos])
    if first < 0x80:
        return (first >> 1) ^ -(first & 1), pos + 1
    result = np.uint64(0)
    shift = np.uint64(0)
    while True:
        if pos >= end or shift > np.uint64(63):
            return np.int64(0), -1
        b = np.uint64(buf[pos])
        pos += 1
        result |= (b & np.uint64(0x7F)) << shift
        if b < np.uint64(0x80):
            break
        shift += np.uint64(7)
    v = np.int64(result >> np.uint64(1))
    if result & np.uint64(1):
        v = ~v
    return v, pos


@njit(cache=True, nogil=True)
def walk_v2_records(  # type: ignore[no-untyped-def]
    buf,
    start,
    end,
    count,
    base_ts,
    fixed_ts,
    use_fixed_ts,
    need_key,
    check_ts,
    ts_lo,
    ts_hi,
    collect,
):
    """Walk ``count`` records in ``buf[start:end]``.

    Returns (code, record index, position, records with a problem, first such record,
    largest timestamp); code 0 when the structure is sound.
    """
    pos = start
    bad = 0
    first_bad = -1
    max_ts = np.int64(-1)
    keep = collect.shape[0] > 0
    if count < 0 or count * 7 > end - start:
        return ERR_TOO_FEW_BYTES, 0, pos, bad, first_bad, max_ts
    for i in range(count):
        rstart = pos
        length, pos = _varint(buf, pos, end)
        if pos < 0:
            return ERR_VARINT, i, rstart, bad, first_bad, max_ts
        if length < 6 or length > end - pos:
            return ERR_RECORD_LENGTH, i, rstart, bad, first_bad, max_ts
        rend = pos + length
        if buf[pos] != 0:  # unused, written 0 by every producer (see ERR_RECORD_ATTRIBUTES)
            return ERR_RECORD_ATTRIBUTES, i, rstart, bad, first_bad, max_ts
        pos += 1
        ts_delta, pos = _varlong(buf, pos, rend)
        if pos < 0:
            return ERR_VARINT, i, rstart, bad, first_bad, max_ts
        offset_delta, pos = _varint(buf, pos, rend)
        if pos < 0:
            return ERR_VARINT, i, rstart, bad, first_bad, max_ts
        if offset_delta != i:
            return ERR_OFFSET_DELTA, i, rstart, bad, first_bad, max_ts
        key_len, pos = _varint(buf, pos, rend)
        if pos < 0:
            return ERR_VARINT, i, rstart, bad, first_bad, max_ts
        problem = 0
        if key_len >= 0:
            if key_len > rend - pos:
                return ERR_KEY_LENGTH, i, rstart, bad, first_bad, max_ts
            pos += key_len
        elif key_len == -1:
            if need_key:
                problem = REC_NO_KEY
        else:
            return ERR_KEY_LENGTH, i, rstart, bad, first_bad, max_ts
        value_len, pos = _varint(buf, pos, rend)
        if pos < 0:
            return ERR_VARINT, i, rstart, bad, first_bad, max_ts
        if value_len >= 0:
            if value_len > rend - pos:
                return ERR_VALUE_LENGTH, i, rstart, bad, first_bad, max_ts
            pos += value_len
        elif value_len != -1:
            return ERR_VALUE_LENGTH, i, rstart, bad, first_bad, max_ts
        headers, pos = _varint(buf, pos, rend)
        if pos < 0:
            return ERR_VARINT, i, rstart, bad, first_bad, max_ts
        if headers < 0 or headers > rend - pos:
            return ERR_HEADER_COUNT, i, rstart, bad, first_bad, max_ts
        for _ in range(headers):
            hk, pos = _varint(buf, pos, rend)
            if pos < 0:
                return ERR_VARINT, i, rstart, bad, first_bad, max_ts
            if hk < 0 or hk > rend - pos:
                return ERR_HEADER_KEY, i, rstart, bad, first_bad, max_ts
            pos += hk
            hv, pos = _varint(buf, pos, rend)
            if pos < 0:
                return ERR_VARINT, i, rstart, bad, first_bad, max_ts
            if hv >= 0:
                if hv > rend - pos:
                    return ERR_HEADER_VALUE, i, rstart, bad, first_bad, max_ts
                pos += hv
            elif hv != -1:
                return ERR_HEADER_VALUE, i, rstart, bad, first_bad, max_ts
        if pos != rend:
            return ERR_RECORD_TRAILING, i, rstart, bad, first_bad, max_ts
        ts = fixed_ts if use_fixed_ts else base_ts + ts_delta  # wraps as Java's long does
        if ts > max_ts:
            max_ts = ts
        if check_ts and problem == 0 and ts != -1 and (ts < ts_lo or ts > ts_hi):
            problem = REC_TIMESTAMP
        if problem != 0:
            if first_bad < 0:
                first_bad = i
            bad += 1
            if keep:
                collect[i] = problem
    if pos != end:
        return ERR_BATCH_TRAILING, count, pos, bad, first_bad, max_ts
    return OK, count, pos, bad, first_bad, max_ts


@njit(cache=True, nogil=True)
def walk_v2_plain(buf, start, end, count, base_ts, need_key):  # type: ignore[no-untyped-def]
    """The append fast path's walk (no timestamp bounds, nothing collected), with six
    arguments: numba's dispatch costs per argument. Returns (0 when sound, largest
    timestamp)."""
    result = walk_v2_records(
        buf, start, end, count, base_ts, 0, False, need_key, False, 0, 0, np.empty(0, np.int8)
    )
    return result[0] | result[3], result[5]
