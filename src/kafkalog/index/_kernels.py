"""The compiled (numba) forms of the index searches: many lookups in one call, and single
lookups once a process makes enough of them for numba's start-up to pay (see ``_search``).

The kernels read the mapped bytes directly (no copy of the index) and never trust the entry
count they are given: each bounds it by the buffer's own length first, so no caller mistake or
race (an index closed or remapped by another thread between reading its buffer and its count)
can make them read outside the buffer, which for an index of millions of entries meant a
SIGSEGV. The buffer they are handed keeps its mapping alive until they return.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from kafkalog.index._search_constants import LLB, WARM_BYTES


@njit(cache=True, nogil=True, inline="always")
def _field(buf, slot, entry_size, offset, width):  # type: ignore[no-untyped-def]
    """The big-endian signed field at ``offset`` (4 or 8 bytes wide) of entry ``slot``."""
    p = slot * entry_size + offset
    v = np.int64(0)
    for i in range(width):
        v = (v << 8) | np.int64(buf[p + i])
    if width == 4 and v >= 0x80000000:
        v -= 0x100000000
    return v


@njit(cache=True, nogil=True)
def search(buf, entries, entry_size, offset, width, target, kind, warm_entries):  # type: ignore[no-untyped-def]
    """Kafka's ``indexSlotRangeFor``: the LLB or SUB slot for ``target``, or -1."""
    entries = min(entries, buf.shape[0] // entry_size)  # never past the buffer (see module doc)
    if entries <= 0:
        return -1
    first_hot = max(0, entries - 1 - warm_entries)
    if _field(buf, first_hot, entry_size, offset, width) < target:
        lo = first_hot
        hi = entries - 1
    else:
        if _field(buf, 0, entry_size, offset, width) > target:
            return -1 if kind == LLB else 0
        lo = 0
        hi = first_hot
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        v = _field(buf, mid, entry_size, offset, width)
        if v > target:
            hi = mid - 1
        elif v < target:
            lo = mid
        else:
            return mid
    if kind == LLB:
        return lo
    return -1 if lo == entries - 1 else lo + 1


@njit(cache=True, nogil=True)
def offset_floor(buf, entries, target):  # type: ignore[no-untyped-def]
    """OffsetIndex.lookup in one call with few arguments (dispatch cost dominates a single
    lookup): the floor slot for a relative offset, with that entry's two fields."""
    slot = search(buf, entries, 8, 0, 4, target, LLB, WARM_BYTES // 8)
    if slot < 0:
        return slot, 0, 0
    return slot, _field(buf, slot, 8, 0, 4), _field(buf, slot, 8, 4, 4)


@njit(cache=True, nogil=True)
def time_floor(buf, entries, target):  # type: ignore[no-untyped-def]
    """TimeIndex.lookup in one call: the floor slot for a timestamp, with its two fields."""
    slot = search(buf, entries, 12, 0, 8, target, LLB, WARM_BYTES // 12)
    if slot < 0:
        return slot, 0, 0
    return slot, _field(buf, slot, 12, 0, 8), _field(buf, slot, 12, 8, 4)


@njit(cache=True, nogil=True)
def floor_sorted_fields(  # type: ignore[no-untyped-def]
    buf, entries, entry_size, key_off, key_width, val_off, val_width, targets, out_key, out_val
):
    """Floor lookups for ascending targets with both fields gathered (-1 slots give -1, -1)."""
    slots = np.empty(targets.shape[0], np.int64)
    floor_sorted(buf, entries, entry_size, key_off, key_width, targets, slots)
    for i in range(targets.shape[0]):
        s = slots[i]
        if s < 0:
            out_key[i] = -1
            out_val[i] = -1
        else:
            out_key[i] = _field(buf, s, entry_size, key_off, key_width)
            out_val[i] = _field(buf, s, entry_size, val_off, val_width)
    return slots


@njit(cache=True, nogil=True)
def search_many(buf, entries, entry_size, offset, width, targets, kind, warm_entries, out):  # type: ignore[no-untyped-def]
    """:func:`search` for every target, in one call (the vectorised form the Spark path uses)."""
    for i in range(targets.shape[0]):
        out[i] = search(buf, entries, entry_size, offset, width, targets[i], kind, warm_entries)


@njit(cache=True, nogil=True)
def floor_sorted(buf, entries, entry_size, offset, width, targets, out):  # type: ignore[no-untyped-def]
    """Floor slots (LLB) for ascending ``targets``, galloping from the previous answer.

    For strictly increasing keys every correct floor search returns the same slot, so this
    agrees with :func:`search`; walking the index once in order turns a batch of random
    lookups from cache misses into a near-sequential scan.
    """
    entries = min(entries, buf.shape[0] // entry_size)
    j = -1
    for i in range(targets.shape[0]):
        t = targets[i]
        if j + 1 < entries and _field(buf, j + 1, entry_size, offset, width) <= t:
            lo = j + 1
            step = 1
            while lo + step < entries and _field(buf, lo + step, entry_size, offset, width) <= t:
                lo += step
                step *= 2
            hi = min(lo + step, entries)
            while hi - lo > 1:
                mid = (lo + hi) >> 1
                if _field(buf, mid, entry_size, offset, width) <= t:
                    lo = mid
                else:
                    hi = mid
            j = lo
        out[i] = j


@njit(cache=True, nogil=True)
def fields_at(buf, slots, entry_size, offset, width, out):  # type: ignore[no-untyped-def]
    """Gather one field of many entries (slot -1 gives -1)."""
    available = buf.shape[0] // entry_size
    for i in range(slots.shape[0]):
        s = slots[i]
        out[i] = -1 if s < 0 or s >= available else _field(buf, s, entry_size, offset, width)


@njit(cache=True, nogil=True)
def fields_at_slots(buf, entries, slots, entry_size, offset, width, out):  # type: ignore[no-untyped-def]
    """:func:`fields_at` with the (buffer, entry count) head every other kernel has (the count
    is not needed: a slot past the buffer gives -1 there)."""
    fields_at(buf, slots, entry_size, offset, width, out)
