"""Kafka's warm/cold binary search over index entries (spec §2.5).

Entries live big-endian in the mapped file. A search compares one field of each entry (the
*key*: offset or timestamp; or the *value*: position or offset) with the target and returns a
slot: LLB (largest lower bound, "floor") or SUB (smallest upper bound, "ceiling", with Kafka's
quirk of never examining the loop's initial ``lo``). The last ``8192`` bytes of entries (the
"warm" section) are searched first, so lookups of recent entries keep touching the same few
pages however large the index grows.

Two forms of the same search: plain Python over ``struct`` reads of the buffer, and compiled
kernels (``_kernels``, numba). Importing numba and loading its cached kernels costs a process
~0.4 s, more than a short command spends on everything else, so a single lookup runs in Python
until the process has made ``COMPILED_AFTER`` of them (or numba is loaded anyway, by the
columnar decoder); from then on, and for every many-targets call, the compiled kernels answer.
Both bound the entry count by the buffer's own length, so neither reads past the buffer.
:func:`search_reference` takes an entry reader, so tests can record which pages a search
touches.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

# re-exported: the indexes name them ``_search.LLB`` and so on
from kafkalog.index._search_constants import LLB as LLB
from kafkalog.index._search_constants import SUB as SUB
from kafkalog.index._search_constants import WARM_BYTES as WARM_BYTES

COMPILED_AFTER = 256  # single lookups answered in Python before the compiled search takes over

_FIELD = {4: struct.Struct(">i"), 8: struct.Struct(">q")}
_compiled: ModuleType | None = None
_python_lookups = 0

# the many-targets kernels, always compiled (``_search.NAME`` loads them on first use)
_BATCH_KERNELS = frozenset(
    {"search_many", "floor_sorted", "floor_sorted_fields", "fields_at", "fields_at_slots"}
)


def kernels() -> ModuleType:
    """The compiled kernels, importing numba on first use."""
    global _compiled
    if _compiled is None:
        from kafkalog.index import _kernels

        _compiled = _kernels
    return _compiled


def warm() -> None:
    """Load the compiled single lookups for the buffers indexes hold (writable and read-only
    uint8 arrays: numba loads one specialisation per type, ~1 s in a fresh process). A server
    calls this at start, off its event loop, so that the first index lookup (a fetch, a log
    opened after a clean shutdown) does not pay for it while every client waits."""
    compiled = _switch()
    writable = np.zeros(24, np.uint8)
    readonly = np.frombuffer(bytes(24), np.uint8)
    for buf in (writable, readonly):
        compiled.offset_floor(buf, 1, 0)
        compiled.time_floor(buf, 1, 0)
        compiled.search(buf, 1, 8, 0, 4, 0, LLB, 1)


def __getattr__(name: str) -> Any:
    if name in _BATCH_KERNELS:
        return getattr(kernels(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _switch() -> ModuleType:
    """From now on the module's single-lookup names are the compiled kernels themselves (no
    dispatch left on the hot path: callers look ``_search.offset_floor`` up at each call)."""
    compiled = kernels()
    module = sys.modules[__name__]
    for name in ("search", "offset_floor", "time_floor"):
        setattr(module, name, getattr(compiled, name))
    return compiled


def _python_turn() -> bool:
    """Whether this single lookup still runs in Python (else the kernels were switched in)."""
    global _python_lookups
    _python_lookups += 1
    if _python_lookups > COMPILED_AFTER or "numba" in sys.modules:
        _switch()
        return False
    return True


def _reader(buf: Any, entry_size: int, offset: int, width: int) -> Callable[[int], int]:
    unpack = _FIELD[width].unpack_from

    def read(slot: int) -> int:
        return int(unpack(buf, slot * entry_size + offset)[0])

    return read


def search_python(
    buf: Any,
    entries: int,
    entry_size: int,
    offset: int,
    width: int,
    target: int,
    kind: int,
    warm_entries: int,
) -> int:
    """Kafka's ``indexSlotRangeFor`` in plain Python: the LLB or SUB slot, or -1."""
    entries = max(0, min(entries, len(buf) // entry_size))
    read = _reader(buf, entry_size, offset, width)
    return search_reference(read, entries, target, kind, warm_entries)


def _floor_python(
    buf: Any, entries: int, target: int, entry_size: int, key_width: int
) -> tuple[int, int, int]:
    entries = max(0, min(entries, len(buf) // entry_size))
    slot = search_reference(
        _reader(buf, entry_size, 0, key_width), entries, target, LLB, WARM_BYTES // entry_size
    )
    if slot < 0:
        return slot, 0, 0
    key = int(_FIELD[key_width].unpack_from(buf, slot * entry_size)[0])
    value = int(_FIELD[4].unpack_from(buf, slot * entry_size + key_width)[0])
    return slot, key, value


def offset_floor_python(buf: Any, entries: int, target: int) -> tuple[int, int, int]:
    """OffsetIndex.lookup in plain Python: the floor slot for a relative offset with that
    entry's two fields (slot -1 and zeros when every entry is above the target)."""
    return _floor_python(buf, entries, target, 8, 4)


def time_floor_python(buf: Any, entries: int, target: int) -> tuple[int, int, int]:
    """TimeIndex.lookup in plain Python: the floor slot for a timestamp, with its two fields."""
    return _floor_python(buf, entries, target, 12, 8)


# The names callers use; each is replaced by its compiled kernel at the switch.
def search(
    buf: Any,
    entries: int,
    entry_size: int,
    offset: int,
    width: int,
    target: int,
    kind: int,
    warm_entries: int,
) -> int:
    """:func:`search_python` until the switch, then the compiled ``search``."""
    if _python_turn():
        return search_python(buf, entries, entry_size, offset, width, target, kind, warm_entries)
    return int(search(buf, entries, entry_size, offset, width, target, kind, warm_entries))


def offset_floor(buf: Any, entries: int, target: int) -> tuple[int, int, int]:
    """:func:`offset_floor_python` until the switch, then the compiled ``offset_floor``."""
    if _python_turn():
        return offset_floor_python(buf, entries, target)
    return offset_floor(buf, entries, target)


def time_floor(buf: Any, entries: int, target: int) -> tuple[int, int, int]:
    """:func:`time_floor_python` until the switch, then the compiled ``time_floor``."""
    if _python_turn():
        return time_floor_python(buf, entries, target)
    return time_floor(buf, entries, target)


def valid_prefix(
    buf: np.ndarray,
    max_entries: int,
    entry_size: int,
    key_off: int,
    key_width: int,
    val_off: int,
    val_width: int,
) -> int:
    """How many leading entries of a possibly preallocated file are real.

    A running broker's active index is preallocated and zero-filled past its entries. Real
    entries have strictly increasing keys (relative offsets, or timestamps) and non-decreasing
    values; the first entry that breaks that ends the valid prefix. A lone all-zero first entry
    counts as absent (an all-zero file is an empty index): dropping a (base, 0) entry cannot
    change any lookup, which falls back to (base offset, position 0) anyway. Values (a position
    in the log, or an offset relative to the base) are never negative: a corrupt entry with a
    negative one ends the prefix too, else a lookup would read the log before its first byte.
    (Vectorised with numpy: it runs on every read-only open.)
    """
    max_entries = min(max_entries, len(buf) // entry_size)
    if max_entries <= 0:
        return 0
    layout = np.dtype(
        {
            "names": ["k", "v"],
            "formats": [f">i{key_width}", f">i{val_width}"],
            "offsets": [key_off, val_off],
            "itemsize": entry_size,
        }
    )
    entries = np.frombuffer(buf, layout, count=max_entries)
    keys = entries["k"].astype(np.int64)
    values = entries["v"].astype(np.int64)
    if values[0] < 0:
        return 0
    broken = np.flatnonzero((keys[1:] <= keys[:-1]) | (values[1:] < values[:-1]))
    n = int(broken[0]) + 1 if broken.size else max_entries
    if n == 1 and keys[0] == 0 and values[0] == 0:
        return 0
    return n


def search_reference(
    read: Callable[[int], int],
    entries: int,
    target: int,
    kind: int,
    warm_entries: int,
    *,
    warm: bool = True,
) -> int:
    """The same search in plain Python over ``read(slot)``; ``warm=False`` gives a plain binary
    search over all entries, for comparison."""
    if entries == 0:
        return -1

    def binary(lo: int, hi: int) -> int:
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            v = read(mid)
            if v > target:
                hi = mid - 1
            elif v < target:
                lo = mid
            else:
                return mid
        if kind == LLB:
            return lo
        return -1 if lo == entries - 1 else lo + 1

    if warm:
        first_hot = max(0, entries - 1 - warm_entries)
        if read(first_hot) < target:
            return binary(first_hot, entries - 1)
    if read(0) > target:
        return -1 if kind == LLB else 0
    return binary(0, max(0, entries - 1 - warm_entries) if warm else entries - 1)
