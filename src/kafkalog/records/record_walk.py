"""One walk over the records of a v2 batch, for the broker's validation of an append.

Kafka's ``LogValidator`` reads every record of every batch a client appends (the uncompressed
records in place, a compressed batch's records from its decompressed stream, skipping keys and
values): the record count, each record's structure, its offset delta, whether it has a key and
its timestamp. :func:`walk` reads the same fields without building a record and returns what it
found as numbers (it never raises). The walk is written once
(:func:`kafkalog.records.walk_body.walk_records`), in plain Python that numba can compile: it
runs interpreted for a batch of a few records (a script's few appends never pay for loading
numba) and compiled (:mod:`kafkalog.records._walk_kernel`, ~8 ns a record against ~1 us) for
larger batches or once numba is loaded anyway
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

from kafkalog.records.walk_body import walk_records

#: ``collect`` when nothing is to be collected (one shared, empty array: no allocation per call).
NO_COLLECT = np.empty(0, np.int8)

#: Up to this many records a batch is walked in Python unless numba is loaded already.
PYTHON_MAX_RECORDS = 16

WalkResult = tuple[int, int, int, int, int, int]
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
    kernel = _kernel
    if kernel is None and (count > PYTHON_MAX_RECORDS or "numba" in sys.modules):
        load_compiled()
        kernel = _kernel
    if kernel is None:
        kernel = walk_records
        if not isinstance(buf, (bytes, bytearray)):
            buf = memoryview(buf).cast("B")
    elif not isinstance(buf, (bytearray, np.ndarray)):
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
    kernel = _plain_kernel
    if kernel is None:
        if count <= PYTHON_MAX_RECORDS and "numba" not in sys.modules:
            r = walk_records(
                buf, start, end, count, base_ts, 0, False, need_key, False, 0, 0, NO_COLLECT
            )
            return r[0] | r[3], r[5]
        load_compiled()
        kernel = _plain_kernel
    assert kernel is not None
    return kernel(buf, start, end, count, base_ts, need_key)


#: :func:`walk_plain` until it has loaded the compiled walk, then the compiled walk itself:
#: ``Log.append``'s fast path calls ``PLAIN_WALK[0]``, a Python call less per batch (~0.3 us
#: of a ~15 us append).
PLAIN_WALK: list[Callable[[bytearray, int, int, int, int, bool], tuple[int, int]]] = [walk_plain]


def load_compiled() -> None:
    """Load the compiled walk now (numba's import and its cached kernel, ~0.3-0.5 s in a fresh
    process), so that the first large append does not pay for it: ``kafkalog serve`` calls it
    on a worker thread at start (a short benchmark's first produce paid it, measured as an 18%
    slower produce over 3 million records). :func:`walk` and :func:`walk_plain` load it here
    too, the first time a batch is large enough or numba is loaded anyway."""
    global _kernel, _plain_kernel
    from kafkalog.records._walk_kernel import walk_v2_plain, walk_v2_records

    _kernel = walk_v2_records
    _plain_kernel = PLAIN_WALK[0] = walk_v2_plain
