"""The record walk's one definition (see :mod:`kafkalog.records.record_walk`, which calls it
interpreted or compiled): plain Python that numba compiles as it stands, in a module that
imports neither numba nor the compiled form."""

from __future__ import annotations

from typing import Any

import numpy as np

from kafkalog.records.record_codes import (
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
from kafkalog.records.varint import scan_varint, scan_varlong

WalkResult = tuple[int, int, int, int, int, int]
_I64 = 1 << 64
_I64_MIN = -(1 << 63)


def wrap_long(n: int) -> int:
    """``n`` as Java's long arithmetic leaves it: Python's integers do not wrap, so the
    interpreted walk wraps explicitly; compiled, the sum is already a wrapping int64 and
    :mod:`_walk_kernel` compiles this as the identity."""
    return ((n - _I64_MIN) % _I64) + _I64_MIN


def walk_records(
    buf: Any,
    start: int,
    end: int,
    count: int,
    base_ts: int,
    fixed_ts: int,
    use_fixed_ts: bool,
    need_key: bool,
    check_ts: bool,
    ts_lo: int,
    ts_hi: int,
    collect: np.ndarray,
) -> WalkResult:
    """(code, record index, position, records with a problem, first such record, largest
    timestamp) of the records in ``buf[start:end]`` (bytes, bytearray or a uint8 array); code 0
    when their structure is sound. Plain Python that numba compiles as it stands (no
    ``isinstance``, only the shared readers of ``records/varint.py`` and :func:`wrap_long`), so
    the interpreted and the compiled results are the same code's."""
    pos = start
    bad = 0
    first_bad = -1
    max_ts = -1
    keep = len(collect) > 0
    if count < 0 or count * 7 > end - start:
        return ERR_TOO_FEW_BYTES, 0, pos, bad, first_bad, max_ts
    for i in range(count):
        rstart = pos
        length, pos = scan_varint(buf, pos, end)
        if pos < 0:
            return ERR_VARINT, i, rstart, bad, first_bad, max_ts
        if length < 6 or length > end - pos:
            return ERR_RECORD_LENGTH, i, rstart, bad, first_bad, max_ts
        rend = pos + length
        if buf[pos] != 0:  # unused, written 0 by every producer (see ERR_RECORD_ATTRIBUTES)
            return ERR_RECORD_ATTRIBUTES, i, rstart, bad, first_bad, max_ts
        pos += 1
        ts_delta, pos = scan_varlong(buf, pos, rend)
        if pos < 0:
            return ERR_VARINT, i, rstart, bad, first_bad, max_ts
        offset_delta, pos = scan_varint(buf, pos, rend)
        if pos < 0:
            return ERR_VARINT, i, rstart, bad, first_bad, max_ts
        if offset_delta != i:
            return ERR_OFFSET_DELTA, i, rstart, bad, first_bad, max_ts
        key_len, pos = scan_varint(buf, pos, rend)
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
        value_len, pos = scan_varint(buf, pos, rend)
        if pos < 0:
            return ERR_VARINT, i, rstart, bad, first_bad, max_ts
        if value_len >= 0:
            if value_len > rend - pos:
                return ERR_VALUE_LENGTH, i, rstart, bad, first_bad, max_ts
            pos += value_len
        elif value_len != -1:
            return ERR_VALUE_LENGTH, i, rstart, bad, first_bad, max_ts
        headers, pos = scan_varint(buf, pos, rend)
        if pos < 0:
            return ERR_VARINT, i, rstart, bad, first_bad, max_ts
        if headers < 0 or headers > rend - pos:
            return ERR_HEADER_COUNT, i, rstart, bad, first_bad, max_ts
        for _ in range(headers):
            hk, pos = scan_varint(buf, pos, rend)
            if pos < 0:
                return ERR_VARINT, i, rstart, bad, first_bad, max_ts
            if hk < 0 or hk > rend - pos:
                return ERR_HEADER_KEY, i, rstart, bad, first_bad, max_ts
            pos += hk
            hv, pos = scan_varint(buf, pos, rend)
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
        ts = fixed_ts if use_fixed_ts else wrap_long(base_ts + ts_delta)
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
