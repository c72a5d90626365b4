"""The offset index, ``.index`` (spec §3): 8-byte entries of (relative offset, position)."""

from __future__ import annotations

import struct
from typing import NamedTuple, NoReturn

import numpy as np

from kafkalog.errors import CorruptIndexError, InvalidOffsetError
from kafkalog.index import _search
from kafkalog.index.base import INT32_MAX, MappedIndex

_ENTRY = struct.Struct(">ii")


class OffsetPosition(NamedTuple):
    """An offset and the byte position in the ``.log`` of the batch it was indexed at."""

    offset: int
    position: int


class OffsetIndex(MappedIndex):
    """Maps offsets to ``.log`` positions; one entry per ``index.interval.bytes`` appended.

    An entry ``(O, P)`` says: the batch starting at byte ``P`` (the first of the append that
    ended at offset ``O``) holds offsets up to ``O``; to read offset ``X``, start scanning at the
    position of the greatest indexed offset <= X.
    """

    ENTRY_SIZE = 8
    KEY_OFFSET = 0
    KEY_WIDTH = 4
    VALUE_OFFSET = 4
    VALUE_WIDTH = 4

    def _after_open(self) -> None:
        self._recompute_last()

    def _after_truncate(self) -> None:
        self._recompute_last()

    def _recompute_last(self) -> None:
        self._last_offset = (
            self.entry(self._entries - 1).offset if self._entries else (self.base_offset)
        )
        # the offsets the next entry may have (accepts): above the last, and 0..2^31-1 relative
        # to the base offset (a last entry below the base, from a corrupt file, does not widen it)
        base = self.base_offset
        self._next_min = max(self._last_offset + 1, base) if self._entries else base
        self._next_max = base + INT32_MAX

    @property
    def last_offset(self) -> int:
        """Offset of the last entry, or the base offset when the index is empty."""
        return self._last_offset

    def entry(self, n: int) -> OffsetPosition:
        if not 0 <= n < self._entries:
            raise IndexError(f"entry {n} is out of range: {self._path} has {self._entries}")
        rel, pos = self._entry_fields(_ENTRY, n)
        return OffsetPosition(self.base_offset + rel, pos)

    def __iter__(self):  # type: ignore[no-untyped-def]
        for n in range(self._entries):
            yield self.entry(n)

    def to_numpy(self) -> tuple[np.ndarray, np.ndarray]:
        """All valid entries as (absolute offsets, positions) arrays."""
        raw = self._entry_bytes().view(">i4").reshape(-1, 2)
        return raw[:, 0].astype(np.int64) + self.base_offset, raw[:, 1].astype(np.int64)

    # -- appending --------------------------------------------------------------------------------
    # Every entry passes ``accepts``, the gate that states Kafka's rules: ``append`` is that
    # check and ``append_accepted``; the segment's fast paths call the two halves apart, the
    # check before they write the ``.log`` (an append they cannot finish goes the general way
    # with nothing touched), the entry after it, as Kafka's LogSegment.append orders them.
    # ``_refuse`` only names the broken rule for the error; ``append_entries`` keeps the same
    # bounds (``_next_min``, ``_next_max``, ``_full_at``) entry by entry, and leaves any entry
    # they refuse to ``append``.
    def accepts(self, offset: int, position: int) -> bool:
        """Whether :meth:`append` takes ``(offset, position)``: the index is open for writing
        and not full, the offset is above the last entry's (strictly: Kafka's rule) and fits
        32 bits relative to the base offset, and the position fits the 32-bit field."""
        return (
            self._entries < self._full_at  # (0 unless writable and open)
            and self._next_min <= offset <= self._next_max
            and 0 <= position <= INT32_MAX
        )

    def has_room_for(self, offset: int) -> bool:
        """:meth:`has_room` and :meth:`can_append_offset` in one call: what an append ending at
        ``offset`` needs of the index even when it adds no entry (else a roll is due)."""
        return self._entries < self._full_at and self.base_offset <= offset <= self._next_max

    def append(self, offset: int, position: int) -> None:
        """Add ``(offset, position)``, or raise the error for the first of Kafka's rules it
        breaks (read-only or closed, full, offsets not strictly increasing, a position or a
        relative offset beyond 32 bits)."""
        if not self.accepts(offset, position):
            self._refuse(offset, position)
        self.append_accepted(offset, position)

    def append_accepted(self, offset: int, position: int) -> None:
        """:meth:`append` of an entry :meth:`accepts` has just passed, with nothing changing
        the index in between: the same bytes, without checking again (the segment's
        per-append fast path, which checks before it writes the ``.log``)."""
        entries = self._entries
        rel = offset - self.base_offset
        _ENTRY.pack_into(self._mm, entries * 8, rel, position)  # type: ignore[arg-type]
        self._entries = entries + 1
        self._last_offset = offset
        self._next_min = offset + 1

    def append_entries(self, offsets: np.ndarray, positions: np.ndarray) -> None:
        """:meth:`append` of each ``(offsets[i], positions[i])`` in order, in one call: the
        same checks, bytes and errors (the entries before a refused one are kept, as with
        one call each). The buffered appends' run adds the entries of all its batches with
        it, once per run: one call per entry would cost more than the rest of the run."""
        offs = offsets.tolist()
        poss = positions.tolist()
        count = self._entries
        if not offs:
            return
        if len(offs) > self._full_at - count:  # full on the way, or read-only or closed
            self._append_each(offs, poss)
            return
        mm = self._mm
        base = self.base_offset
        low = self._next_min
        high = self._next_max
        pack = _ENTRY.pack_into
        for offset, position in zip(offs, poss, strict=True):
            if not low <= offset <= high or not 0 <= position <= INT32_MAX:
                # written past the entries only, so not part of the index yet: redo them one
                # at a time, which raises the error append raises for this entry
                self._append_each(offs, poss)
                return
            pack(mm, count * 8, offset - base, position)  # type: ignore[arg-type]
            count += 1
            low = offset + 1
        self._entries = count
        self._last_offset = low - 1
        self._next_min = low

    def _append_each(self, offsets: list[int], positions: list[int]) -> None:
        for offset, position in zip(offsets, positions, strict=True):
            self.append(offset, position)

    def _refuse(self, offset: int, position: int) -> NoReturn:
        """Raise the error naming the rule :meth:`accepts` found broken, in Kafka's order."""
        self._require_writable("append to")
        self._check_room()
        if self._entries and offset <= self._last_offset:
            raise InvalidOffsetError(
                f"attempt to append an offset ({offset}) no larger than the last offset "
                f"appended ({self._last_offset}) to {self._path}"
            )
        if not 0 <= position <= INT32_MAX:
            raise InvalidOffsetError(
                f"position {position} does not fit a 32-bit .log position in {self._path}"
            )
        self.relative_offset(offset)  # raises IndexOffsetOverflowError
        raise AssertionError(f"{self._path}: accepts() refused ({offset}, {position})")

    # -- lookups ----------------------------------------------------------------------------------
    def lookup(self, target_offset: int) -> OffsetPosition:
        """Greatest indexed offset <= target and its position, or (base offset, 0)."""
        target = target_offset - self.base_offset
        generation = self._generation
        slot, rel, pos = _search.offset_floor(self._buf, self._entries, target)
        if generation != self._generation or generation & 1:  # raced a remap, or closed
            slot, rel, pos = self._stable(_search.offset_floor, target)
        if slot < 0:
            return OffsetPosition(self.base_offset, 0)
        return OffsetPosition(self.base_offset + rel, pos)

    def lookup_within(self, target_offset: int, log_size: int) -> OffsetPosition:
        """:meth:`lookup`, stepping back to earlier entries while the one found points at or
        past the end of a ``.log`` of ``log_size`` bytes: damage (no CRC covers an index; a
        scan from there finds nothing and would skip the offsets it keys), or a live writer's
        append not yet in the size seen. Ends at (base offset, 0) at worst."""
        found = self.lookup(target_offset)
        while 0 < found.position >= log_size:
            found = self.lookup(found.offset - 1)  # a smaller offset, or (base, 0)
        return found

    def lookup_ceiling(self, target_offset: int) -> OffsetPosition | None:
        """Kafka's smallest-upper-bound search by offset (None when no entry is >= target).

        Result-identical to Kafka, quirk included: an exact match sitting at the search's initial
        lower bound is skipped in favour of the next entry (spec §2.5); the result is always an
        indexed offset >= target.
        """
        slot = self._slot(target_offset - self.base_offset, True, _search.SUB)
        return None if slot < 0 else self.entry(slot)

    def fetch_upper_bound_offset(
        self, start_position: int, fetch_size: int
    ) -> OffsetPosition | None:
        """The first entry whose position is >= start + fetch size (Kafka's SUB by value)."""
        slot = self._slot(start_position + fetch_size, False, _search.SUB)
        return None if slot < 0 else self.entry(slot)

    def lookup_many(self, target_offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`lookup` for many targets at once: (offsets, positions) arrays."""
        targets = np.asarray(target_offsets, np.int64) - self.base_offset
        slots, rel, pos = self._floors(targets)
        missing = slots < 0
        offsets = np.where(missing, self.base_offset, rel + self.base_offset)
        positions = np.where(missing, 0, pos)
        return offsets, positions

    # -- truncation ---------------------------------------------------------------------------
    def truncate_to(self, offset: int) -> None:
        """Remove every entry with offset >= ``offset``."""
        self._require_writable("truncate")
        rel = offset - self.base_offset
        slot = self._slot(rel, True, _search.LLB)
        if slot < 0:
            n = 0
        elif self.entry(slot).offset == offset:
            n = slot
        else:
            n = slot + 1
        self._truncate_to_entries(n)

    def sanity_check(self) -> None:
        """Kafka's check: the last entry may not precede the base offset; whole entries only."""
        if self._entries and self._last_offset < self.base_offset:
            raise CorruptIndexError(
                f"corrupt index found, index file ({self._path}) has non-zero size but the last "
                f"offset is {self._last_offset} which is less than the base offset "
                f"{self.base_offset}",
                path=self._path,
                position=(self._entries - 1) * 8,
            )
        self._sanity_length()
