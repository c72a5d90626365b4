"""The cleaner's two passes compiled over a chunk of many batches at a time.

Why: the per-batch kernels of :mod:`._kernels` left ~20 us of Python around every batch in
each pass (header parse, numpy masks, the call's dispatch), more than the records' own work.
Here one call walks every plain batch of a chunk (magic 2, uncompressed, neither control nor
transactional: what a compacted topic holds almost only) and returns at the first one it
leaves to Python (any other batch, a malformed one, a full map), so Python runs only for the
rare batches, with the same per-batch code as before (:mod:`.batch_filter`).

A batch this code cannot judge is never half-done: its records are walked (and found sound)
before anything of it is put in the map, counted or written, so the Python path that takes it
over raises the same error at the same byte as before.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from kafkalog.log.cleaner._kernels import (
    HAS_KEY,
    HAS_VALUE,
    rebuild_records,
    scan_records,
    slot_of,
    table_get,
)
from kafkalog.records._kernels import _put_be

# how a call ended: (batch index, reason, record index)
DONE = 0
PYTHON = 1  # the batch at the index goes to the Python path
GROW = 2  # the map's table must grow before the batch's record at the index is put
FULL = 3  # the offset map is full at the batch (the round ends before it)
FLUSH = 4  # the batch starts a new append of the cleaned segment
ROOM = 5  # the output buffer needs room for the batch

# entry kinds (set by the chunk walk)
PLAIN = 0
OTHER = 1

# header field columns (kafkalog.records._kernels.scan_entries)
F_BASE, F_LENGTH, F_MAGIC, F_ATTRS, F_DELTA, F_BASE_TS, F_MAX_TS, F_PID, F_COUNT = (
    0,
    1,
    3,
    5,
    6,
    7,
    8,
    9,
    12,
)

# counters of the filter pass (FilterStats fields, in this order)
STAT_NAMES = (
    "batches_read",
    "bytes_read",
    "records_read",
    "records_kept",
    "bytes_kept",
    "batches_rewritten",
    "batches_emptied",
    "records_superseded",
    "tombstones_removed",
    "horizons_set",
    "keyless_removed",
)
(
    S_BATCHES,
    S_BYTES,
    S_RECORDS,
    S_KEPT,
    S_BYTES_KEPT,
    S_REWRITTEN,
    S_EMPTIED,
    S_SUPERSEDED,
    S_TOMBSTONES,
    S_HORIZONS,
    S_KEYLESS,
) = range(len(STAT_NAMES))

# the append group of the filter pass: [chunk start (file position), max timestamp, its
# shallow offset, max offset, bytes in the output buffer, CRC ranges to stamp]
G_START, G_MAX_TS, G_SHALLOW, G_MAX_OFFSET, G_OUT, G_CRCS = range(6)

_HEADER = 61
_IO_OVERHEAD = 12
_ATTR_DELETE_HORIZON = 0x40
_ATTR_LOG_APPEND = 0x08


@njit(cache=True, nogil=True)
def _scan(buf, p, f, seed, h1, h2, delta, flags, start, end):  # type: ignore[no-untyped-def]
    """Walk the records of the plain batch at ``p``; their count, or -1 when Python must
    judge it (a count that cannot fit, a malformed record: Python raises as before)."""
    count = f[F_COUNT]
    a = p + _HEADER
    b = p + _IO_OVERHEAD + f[F_LENGTH]
    if count < 0 or count * 7 > b - a or count > len(h1):
        return -1
    got = scan_records(buf[a:b], b - a, count, seed, h1, h2, delta, flags, start, end)
    return got if got >= 0 else -1


@njit(cache=True, nogil=True)
def map_batches(  # type: ignore[no-untyped-def]
    buf,
    positions,
    fields,
    kinds,
    first,
    first_record,
    n,
    start,
    seed,
    slot_h1,
    slot_h2,
    slot_offset,
    state,
    can_grow,
    h1,
    h2,
    delta,
    flags,
    rstart,
    rend,
):
    """The offset map pass (``Round._map_segment``) over the plain batches ``first..n-1``:
    every keyed record at or past ``start`` put (as ``OffsetMap.put_many``), then the map's
    latest offset moved to the batch's last. Returns (batch index, reason, record index)."""
    r0 = first_record
    slots = len(slot_offset)
    for i in range(first, n):
        if kinds[i] != PLAIN:
            return i, PYTHON, 0
        f = fields[i]
        base = f[F_BASE]
        last = base + f[F_DELTA]
        if last >= start:
            count = _scan(buf, positions[i], f, seed, h1, h2, delta, flags, rstart, rend)
            if count < 0:
                return i, PYTHON, 0
            for j in range(r0, count):
                off = base + delta[j]
                if (flags[j] & HAS_KEY) == 0 or off < start:
                    continue
                if state[0] >= state[2]:
                    return i, GROW if can_grow else FULL, j
                # (map_put's probe, written out here: a call inlined by numba cost ~1/3)
                a = h1[j]
                b = h2[j]
                idx = slot_of(a, slots)
                probes = 0
                while True:
                    if slot_offset[idx] < 0:
                        slot_h1[idx] = a
                        slot_h2[idx] = b
                        slot_offset[idx] = off
                        state[0] += 1
                        break
                    if slot_h1[idx] == a and slot_h2[idx] == b:
                        slot_offset[idx] = off
                        break
                    probes += 1
                    if probes == slots:  # every slot taken by another key: the map is full
                        return i, GROW if can_grow else FULL, j
                    idx += 1
                    if idx == slots:
                        idx = 0
                state[1] = off  # as map_put: a full map's reach is its last put
            state[1] = last
        r0 = 0
    return n, DONE, 0


@njit(cache=True, nogil=True, inline="always")
def _producers_last(pids, last_offsets, pid, last):  # type: ignore[no-untyped-def]
    """Whether the batch ending at ``last`` is producer ``pid``'s last data batch (``pids``
    sorted; a producer without one has the offset -2, which no batch ends at)."""
    k = np.searchsorted(pids, pid)
    return k < len(pids) and pids[k] == pid and last_offsets[k] == last


@njit(cache=True, nogil=True)
def filter_batches(  # type: ignore[no-untyped-def]
    buf,
    base_position,
    positions,
    fields,
    kinds,
    first,
    n,
    seed,
    slot_h1,
    slot_h2,
    slot_offset,
    map_latest,
    now,
    delete_retention_ms,
    upper_bound,
    pids,
    last_offsets,
    io_chunk,
    group,
    out,
    crcs,
    stats,
    keep,
    h1,
    h2,
    delta,
    flags,
    rstart,
    rend,
):
    """The filter pass (``BatchFilter.filter_v2`` and ``Round._clean_into``) over the plain
    batches ``first..n-1``: each batch kept whole (its bytes copied), rebuilt with the records
    it keeps (CRC left to stamp: ``crcs`` gets its range), emptied or dropped, into ``out``
    after ``group[G_OUT]`` bytes; ``group`` gathers the append's bookkeeping. Returns (batch
    index, reason, 0): FLUSH when the batch starts a new append (``_clean_into``'s rule),
    ROOM when ``out`` cannot hold what it may write."""
    for i in range(first, n):
        p = positions[i]
        f = fields[i]
        size = _IO_OVERHEAD + f[F_LENGTH]
        file_pos = base_position + p
        if file_pos + size - group[G_START] > io_chunk and file_pos > group[G_START]:
            return i, FLUSH, 0
        if kinds[i] != PLAIN:
            return i, PYTHON, 0
        count = _scan(buf, p, f, seed, h1, h2, delta, flags, rstart, rend)
        if count < 0:
            return i, PYTHON, 0
        o = group[G_OUT]
        # (the count is bounded by the batch's bytes now: at least 7 a record)
        if o + size + 9 * count + 16 > len(out) or group[G_CRCS] + 2 > len(crcs):
            return i, ROOM, 0
        stats[S_BATCHES] += 1
        stats[S_BYTES] += size
        stats[S_RECORDS] += count
        base = f[F_BASE]
        last = base + f[F_DELTA]
        attrs = f[F_ATTRS]
        has_horizon = (attrs & _ATTR_DELETE_HORIZON) != 0
        horizon = f[F_BASE_TS]
        retain_deletes = (not has_horizon) or now < horizon
        pid = f[F_PID]
        retain_empty = (pid >= 0 and _producers_last(pids, last_offsets, pid, last)) or (
            last + 1 == upper_bound
        )
        kept = 0
        tombstones = False
        max_offset = np.int64(-1)
        for j in range(count):
            off = base + delta[j]
            fl = flags[j]
            k = off > map_latest
            if not k and (fl & HAS_KEY) != 0:
                found = table_get(slot_h1, slot_h2, slot_offset, h1[j], h2[j])
                k = off >= found and ((fl & HAS_VALUE) != 0 or retain_deletes)
            keep[j] = k
            if k:
                kept += 1
                if off > max_offset:
                    max_offset = off
                if (fl & HAS_VALUE) == 0:
                    tombstones = True
            elif (fl & HAS_KEY) == 0:
                stats[S_KEYLESS] += 1
            elif (fl & HAS_VALUE) == 0:
                stats[S_TOMBSTONES] += 1
            else:
                stats[S_SUPERSEDED] += 1
        max_ts = f[F_MAX_TS]
        if kept:
            need_horizon = tombstones and not has_horizon
            if kept == count and not need_horizon:
                out[o : o + size] = buf[p : p + size]
                written = size
                shallow = last
                max_offset = last
            else:
                if need_horizon:
                    horizon = now + delete_retention_ms
                    has_horizon = True
                    stats[S_HORIZONS] += 1
                log_append = (attrs & _ATTR_LOG_APPEND) != 0
                fixed = max_ts if log_append else -1
                body, rec_max_ts, base_ts = rebuild_records(
                    buf[p + _HEADER : p + size],
                    rstart,
                    rend,
                    keep,
                    count,
                    f[F_BASE_TS],
                    horizon if has_horizon else -1,
                    not has_horizon,
                    fixed,
                    out[o + _HEADER :],
                )
                if not log_append:
                    max_ts = rec_max_ts
                written = _HEADER + body
                out[o : o + _HEADER] = buf[p : p + _HEADER]
                new_attrs = (attrs & 0x3F) | (_ATTR_DELETE_HORIZON if has_horizon else 0)
                _put_be(out, o + 8, written - _IO_OVERHEAD, 4)
                _put_be(out, o + 21, new_attrs, 2)
                _put_be(out, o + 27, base_ts, 8)
                _put_be(out, o + 35, max_ts, 8)
                _put_be(out, o + 57, kept, 4)
                crcs[group[G_CRCS]] = o
                crcs[group[G_CRCS] + 1] = o + written
                group[G_CRCS] += 2
                shallow = last if max_ts != -1 else -1
                stats[S_REWRITTEN] += 1
            stats[S_KEPT] += kept
        elif retain_empty:
            written = _HEADER
            out[o : o + _HEADER] = buf[p : p + _HEADER]
            _put_be(out, o + 8, _HEADER - _IO_OVERHEAD, 4)
            _put_be(out, o + 21, attrs & 0x38, 2)
            _put_be(out, o + 27, -1, 8)
            _put_be(out, o + 57, 0, 4)
            crcs[group[G_CRCS]] = o
            crcs[group[G_CRCS] + 1] = o + written
            group[G_CRCS] += 2
            shallow = last
            max_offset = last
            stats[S_EMPTIED] += 1
        else:
            continue
        stats[S_BYTES_KEPT] += written
        group[G_OUT] = o + written
        if max_ts > group[G_MAX_TS]:
            group[G_MAX_TS] = max_ts
            group[G_SHALLOW] = shallow
        if max_offset > group[G_MAX_OFFSET]:
            group[G_MAX_OFFSET] = max_offset
    return n, DONE, 0
