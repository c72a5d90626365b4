"""The time index, ``.timeindex`` (spec §4): 12-byte entries of (timestamp, relative offset)."""

from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np

from kafkalog.errors import CorruptIndexError, IndexFullError, InvalidOffsetError
from kafkalog.index import _search
from kafkalog.index.base import MappedIndex

_ENTRY = struct.Struct(">qi")
NO_TIMESTAMP = -1


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

    def _after_open(self) -> None:
        self._recompute_last()

    def _after_truncate(self) -> None:
        self._recompute_last()

    def _after_resize(self) -> None:
        self._recompute_last()

    def _recompute_last(self) -> None:
        self._last_entry = (
            self.entry(self._entries - 1)
            if self._entries
            else TimestampOffset(NO_TIMESTAMP, self.base_offset)
        )

    @property
    def last_entry(self) -> TimestampOffset:
        """The last entry, or (-1, base offset) when the index is empty."""
        return self._last_entry

    def is_full(self) -> bool:
        return self._entries >= self._max_entries - 1

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

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Append ``(timestamp, offset)`` if the timestamp is a new maximum (Kafka's rules)."""
        self._require_writable("append to")
        if not skip_full_check:
            self._check_room()
        last = self._last_entry
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
        if timestamp > last.timestamp:
            if self._entries >= self._max_entries:
                raise IndexFullError(f"no room left in {self._path} for a final entry")
            rel = self.relative_offset(offset)
            _ENTRY.pack_into(self._mm, self._entries * 12, timestamp, rel)  # type: ignore[arg-type]
            self._entries += 1
            self._last_entry = TimestampOffset(timestamp, offset)

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
            last = self._last_entry
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
