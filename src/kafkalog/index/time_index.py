"""The time index, ``.timeindex`` (spec §4): 12-byte entries of (timestamp, relative offset)."""

from __future__ import annotations

import struct
from typing import NamedTuple, NoReturn

import numpy as np

from kafkalog.errors import CorruptIndexError, IndexFullError, InvalidOffsetError
from kafkalog.index import _search
from kafkalog.index.base import INT32_MAX, MappedIndex

_ENTRY = struct.Struct(">qi")
NO_TIMESTAMP = -1
_new_tuple = tuple.__new__  # TimestampOffset(a, b) without its Python-level __new__
_NO_MIN = -(2**64)  # below any timestamp or offset: what an empty index asks of its next entry


class TimestampOffset(NamedTuple):
    """A timestamp and the offset after which every record is newer than it."""

    timestamp: int
    offset: int


class TimeIndex(MappedIndex):
    """Maps timestamps to offsets: entry ``(T, O)`` says the largest timestamp in the segment up
    to and including offset ``O`` is ``T``, so any record newer than ``T`` comes after ``O``.

    One slot is always kept free (``is_full`` is ``entries >= max_entries - 1``) so the final
    entry written when a segment is rolled or closed always fits.
    """

    ENTRY_SIZE = 12
    KEY_OFFSET = 0
    KEY_WIDTH = 8
    VALUE_OFFSET = 8
    VALUE_WIDTH = 4
    SPARE_ENTRIES = 1  # is_full at max_entries - 1: room for the final entry

    def _after_open(self) -> None:
        self._recompute_last()

    def _after_truncate(self) -> None:
        self._recompute_last()

    def _after_resize(self) -> None:
        self._recompute_last()

    def _recompute_last(self) -> None:
        last = (
            self.entry(self._entries - 1)
            if self._entries
            else TimestampOffset(NO_TIMESTAMP, self.base_offset)
        )
        # the last entry as two ints (an append replaces them without building a tuple), and
        # the least timestamp and offset the next entry may have (none while empty)
        self._last_timestamp, self._last_offset = last
        self._min_timestamp, self._min_offset = last if self._entries else (_NO_MIN, _NO_MIN)
        self._offset_max = self.base_offset + INT32_MAX  # relative offsets are 0..2^31-1

    @property
    def last_entry(self) -> TimestampOffset:
        """The last entry, or (-1, base offset) when the index is empty."""
        return _new_tuple(TimestampOffset, (self._last_timestamp, self._last_offset))

    def entry(self, n: int) -> TimestampOffset:
        if not 0 <= n < self._entries:
            raise IndexError(f"entry {n} is out of range: {self._path} has {self._entries}")
        ts, rel = self._entry_fields(_ENTRY, n)
        return TimestampOffset(ts, self.base_offset + rel)

    def __iter__(self):  # type: ignore[no-untyped-def]
        for n in range(self._entries):
            yield self.entry(n)

    def to_numpy(self) -> tuple[np.ndarray, np.ndarray]:
        """All valid entries as (timestamps, absolute offsets) arrays."""
        raw = self._entry_bytes()
        ts = raw.reshape(-1, 12)[:, :8].copy().view(">i8").ravel().astype(np.int64)
        rel = raw.reshape(-1, 12)[:, 8:].copy().view(">i4").ravel().astype(np.int64)
        return ts, rel + self.base_offset

    # -- appending --------------------------------------------------------------------------------
    # Every entry passes ``accepts``, the gate that states Kafka's rules: ``maybe_append`` is
    # that check and ``maybe_append_accepted``; the segment's fast paths call the two halves
    # apart, the check before they write the ``.log``, the entry after it. ``_refuse`` only
    # names the broken rule for the error; ``maybe_append_entries`` keeps the same bounds entry
    # by entry, and leaves any entry they refuse to ``maybe_append``.
    def accepts(self, timestamp: int, offset: int, final: bool = False) -> bool:
        """Whether :meth:`maybe_append` takes ``(timestamp, offset)`` (with ``final``: with
        ``skip_full_check``): the index is open for writing and, unless ``final``, not full
        (one slot stays free for the final entry of a roll or close); neither the offset nor
        the timestamp goes below the last entry's; and an entry it would add (a timestamp
        above the last one) fits the file and 32 bits of relative offset."""
        if final:
            if not self.writable or self._closed:
                return False
        elif self._entries >= self._full_at:  # (0 unless writable and open)
            return False
        return (
            offset >= self._min_offset
            and timestamp >= self._min_timestamp
            and (
                timestamp <= self._last_timestamp
                or (
                    self._entries < self._max_entries
                    and self.base_offset <= offset <= self._offset_max
                )
            )
        )

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Append ``(timestamp, offset)`` if the timestamp is a new maximum (Kafka's rules), or
        raise the error for the first rule it breaks."""
        if not self.accepts(timestamp, offset, skip_full_check):
            self._refuse(timestamp, offset, skip_full_check)
        self.maybe_append_accepted(timestamp, offset)

    def maybe_append_accepted(self, timestamp: int, offset: int) -> None:
        """:meth:`maybe_append` of an entry :meth:`accepts` has just passed, with nothing
        changing the index in between: the same bytes (an entry only for a new maximum
        timestamp), without checking again (the segment's per-append fast path)."""
        if timestamp > self._last_timestamp:
            entries = self._entries
            rel = offset - self.base_offset
            _ENTRY.pack_into(self._mm, entries * 12, timestamp, rel)  # type: ignore[arg-type]
            self._entries = entries + 1
            self._last_timestamp = self._min_timestamp = timestamp
            self._last_offset = self._min_offset = offset

    def maybe_append_entries(self, timestamps: np.ndarray, offsets: np.ndarray) -> None:
        """:meth:`maybe_append` of each ``(timestamps[i], offsets[i])`` in order, in one call:
        the same checks, bytes and errors (the entries before a refused one are kept, as with
        one call each). The buffered appends' run adds its time entries with it, once per
        run."""
        stamps = timestamps.tolist()
        offs = offsets.tolist()
        mm = self._mm
        base = self.base_offset
        high = self._offset_max
        full_at = self._full_at  # (0 unless writable and open)
        count = self._entries
        last_ts, last_offset = self._last_timestamp, self._last_offset
        min_ts, min_offset = self._min_timestamp, self._min_offset
        pack = _ENTRY.pack_into
        for timestamp, offset in zip(stamps, offs, strict=True):
            if (
                count >= full_at
                or offset < min_offset
                or timestamp < min_ts
                or (timestamp > last_ts and not base <= offset <= high)
            ):
                # written past the entries only, so not part of the index yet: redo them one
                # at a time, which raises the error maybe_append raises for this entry
                self._maybe_append_each(stamps, offs)
                return
            if timestamp > last_ts:
                pack(mm, count * 12, timestamp, offset - base)  # type: ignore[arg-type]
                count += 1
                last_ts = min_ts = timestamp
                last_offset = min_offset = offset
        self._entries = count
        self._last_timestamp, self._last_offset = last_ts, last_offset
        self._min_timestamp, self._min_offset = min_ts, min_offset

    def _maybe_append_each(self, timestamps: list[int], offsets: list[int]) -> None:
        for timestamp, offset in zip(timestamps, offsets, strict=True):
            self.maybe_append(timestamp, offset)

    def _refuse(self, timestamp: int, offset: int, final: bool) -> NoReturn:
        """Raise the error naming the rule :meth:`accepts` found broken, in Kafka's order."""
        self._require_writable("append to")
        if not final:
            self._check_room()
        last = self.last_entry
        if self._entries and offset < last.offset:
            raise InvalidOffsetError(
                f"attempt to append an offset ({offset}) smaller than the last offset appended "
                f"({last.offset}) to {self._path}"
            )
        if self._entries and timestamp < last.timestamp:
            raise InvalidOffsetError(
                f"attempt to append a timestamp ({timestamp}) smaller than the last timestamp "
                f"appended ({last.timestamp}) to {self._path}"
            )
        if self._entries >= self._max_entries:
            raise IndexFullError(f"no room left in {self._path} for a final entry")
        self.relative_offset(offset)  # raises IndexOffsetOverflowError
        raise AssertionError(f"{self._path}: accepts() refused ({timestamp}, {offset})")

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """The entry with the greatest timestamp <= target, or (-1, base offset)."""
        generation = self._generation
        slot, ts, rel = _search.time_floor(self._buf, self._entries, target_timestamp)
        if generation != self._generation or generation & 1:  # raced a remap, or closed
            slot, ts, rel = self._stable(_search.time_floor, target_timestamp)
        if slot < 0:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        return TimestampOffset(ts, self.base_offset + rel)

    def lookup_many(self, target_timestamps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`lookup` for many targets at once: (timestamps, offsets) arrays."""
        slots, ts, rel = self._floors(np.asarray(target_timestamps, np.int64))
        missing = slots < 0
        return (
            np.where(missing, NO_TIMESTAMP, ts),
            np.where(missing, self.base_offset, rel + self.base_offset),
        )

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= ``offset``."""
        self._require_writable("truncate")
        slot = self._slot(offset - self.base_offset, False, _search.LLB)
        if slot < 0:
            n = 0
        elif self.entry(slot).offset == offset:
            n = slot
        else:
            n = slot + 1
        self._truncate_to_entries(n)

    def sanity_check(self) -> None:
        """Kafka's check: last timestamp not before the first, last offset not before base."""
        if self._entries:
            first = self.entry(0)
            last = self.last_entry
            if last.timestamp < first.timestamp:
                raise CorruptIndexError(
                    f"corrupt time index found, time index file ({self._path}) has non-zero size "
                    f"but the last timestamp is {last.timestamp} which is less than the first "
                    f"timestamp {first.timestamp}",
                    path=self._path,
                    position=(self._entries - 1) * 12,
                )
            if last.offset < self.base_offset:
                raise CorruptIndexError(
                    f"corrupt time index found, time index file ({self._path}) has non-zero size "
                    f"but the last offset is {last.offset} which is less than the base offset "
                    f"{self.base_offset}",
                    path=self._path,
                    position=(self._entries - 1) * 12 + 8,
                )
        self._sanity_length()
