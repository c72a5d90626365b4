"""One walk over the records of a v2 batch, for the broker's validation of an append.

Kafka's ``LogValidator`` reads every record of every batch a client appends (the uncompressed
records in place, a compressed batch's records from its decompressed stream, skipping keys and
values): the record count, each record's structure, its offset delta, whether it has a key and
its timestamp. :func:`walk` reads the same fields without building a record and returns what it
found as numbers (it never raises). The walk is written once, :func:`walk_records`, in plain
Python that numba can compile: it runs interpreted for a batch of a few records (a script's few
appends never pay for loading numba) and compiled (:mod:`kafkalog.records._walk_kernel`, ~8 ns
a record against ~1 us) for larger batches or once numba is loaded anyway
(``tests/records/test_record_walk.py`` holds the two calls against each other and against the
full decoders).

``walk(buf, start, end, count, ...)`` reads ``buf[start:end]`` (a batch's records area) and
checks:

- ``count`` records, each of a length that stays inside the area, whose fields (attributes,
  timestamp delta, offset delta, key, value, headers) fill exactly that length, and nothing left
  after the last one (Kafka's "Incorrect declared batch size");
- the offset delta of record ``i`` is ``i``, its (unused) attributes byte 0;
- with ``need_key``, every record has a key (a compacted topic);
- with ``check_ts``, every timestamp other than -1 lies in ``[ts_lo, ts_hi]``.

A structural problem stops the walk: ``(code, record index, position in buf, ...)``. A missing
key or a timestamp out of bounds does not (Kafka lists every such record): they are counted, and
with ``collect`` (an int8 array of ``count`` entries, else :data:`NO_COLLECT`) each record's
code is written there. The largest timestamp is returned so the batch header's can be checked.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
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

#: ``collect`` when nothing is to be collected (one shared, empty array: no allocation per call).
NO_COLLECT = np.empty(0, np.int8)

#: Up to this many records a batch is walked in Python unless numba is loaded already.
PYTHON_MAX_RECORDS = 16

WalkResult = tuple[int, int, int, int, int, int]
_I64 = 1 << 64
_I64_MIN = -(1 << 63)
_kernel: Callable[..., WalkResult] | None = None
_plain_kernel: Callable[..., tuple[int, int]] | None = None


def walk(
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
    collect: np.ndarray = NO_COLLECT,
) -> WalkResult:
    """(code, record index, position, records with a problem, first such record, largest
    timestamp) of the records in ``buf[start:end]``; code 0 when their structure is sound."""
    global _kernel
    kernel = _kernel
    if kernel is None and (count > PYTHON_MAX_RECORDS or "numba" in sys.modules):
        from kafkalog.records._walk_kernel import walk_v2_records

        kernel = _kernel = walk_v2_records
    if kernel is None:
        return walk_python(
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
        )
    if not isinstance(buf, (bytearray, np.ndarray)):
        buf = np.frombuffer(buf, np.uint8)
    result: WalkResult = kernel(
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
    )
    return result


def walk_plain(
    buf: bytearray, start: int, end: int, count: int, base_ts: int, need_key: bool
) -> tuple[int, int]:
    """:func:`walk` without timestamp bounds or collection, for ``Log.append``'s fast path:
    (0 when the records are sound and keyed where required, else non-zero; their largest
    timestamp)."""
    global _plain_kernel
    kernel = _plain_kernel
    if kernel is None:
        if count <= PYTHON_MAX_RECORDS and "numba" not in sys.modules:
            r = walk_python(buf, start, end, count, base_ts, 0, False, need_key, False, 0, 0)
            return r[0] | r[3], r[5]
        from kafkalog.records._walk_kernel import walk_v2_plain

        kernel = _plain_kernel = walk_v2_plain
    return kernel(buf, start, end, count, base_ts, need_key)


def wrap_long(n: int) -> int:
    """``n`` as Java's long arithmetic leaves it: Python's integers do not wrap, so the
    interpreted walk wraps explicitly; compiled, the sum is already a wrapping int64 and
    :mod:`_walk_kernel` compiles this as the identity."""
    return ((n - _I64_MIN) % _I64) + _I64_MIN


def walk_python(
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
    collect: np.ndarray = NO_COLLECT,
) -> WalkResult:
    """:func:`walk` interpreted (see the module's docstring): any buffer of bytes."""
    if not isinstance(buf, (bytes, bytearray)):
        buf = memoryview(buf).cast("B")
    return walk_records(
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
    )


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
    """The walk, once: plain Python that numba compiles as it stands (no ``isinstance``, only
    the shared readers of ``records/varint.py`` and :func:`wrap_long`), so the interpreted and
    the compiled results are the same code's."""
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
