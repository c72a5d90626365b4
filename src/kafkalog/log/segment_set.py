"""The segments of one partition log, ordered by base offset (Kafka's ``LogSegments``).

A plain container: it never opens, closes or deletes a file. The log that owns it
(:class:`~kafkalog.log.local_log.LocalLog`) decides what goes in and out; the loader fills one
and hands it over. Kept apart so that "which segment holds offset N" has one answer.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator

from kafkalog.log.segment import LogSegment


class SegmentSet:
    """Segments by base offset, with floor lookups. ``active`` is the last one (None when
    empty), kept as an attribute since every append asks for it."""

    __slots__ = ("_bases", "_by_base", "active")

    def __init__(self) -> None:
        self._bases: list[int] = []
        self._by_base: dict[int, LogSegment] = {}
        self.active: LogSegment | None = None

    # -- changes ---------------------------------------------------------------------------------
    def add(self, seg: LogSegment) -> None:
        """Add ``seg`` (replacing one of the same base offset)."""
        if seg.base_offset not in self._by_base:
            bisect.insort(self._bases, seg.base_offset)
        self._by_base[seg.base_offset] = seg
        self._set_active()
        if seg is not self.active:
            seg.is_last = False
        self._link(bisect.bisect_left(self._bases, seg.base_offset))

    def remove(self, base_offset: int) -> LogSegment | None:
        """Take the segment of ``base_offset`` out (nothing is closed); None if not there."""
        seg = self._by_base.pop(base_offset, None)
        if seg is not None:
            i = bisect.bisect_left(self._bases, base_offset)
            self._bases.remove(base_offset)
            self._set_active()
            self._link(i - 1)
        return seg

    def _link(self, i: int) -> None:
        """Tell the segments at ``i`` and before it the base offset of the one after them
        (``LogSegment.next_base``: every offset of a segment is below it)."""
        bases = self._bases
        for k in (i - 1, i):
            if 0 <= k < len(bases):
                nxt = bases[k + 1] if k + 1 < len(bases) else None
                self._by_base[bases[k]].next_base = nxt

    def _set_active(self) -> None:
        """The last segment is the active one, the only one whose bytes may end in a batch cut
        off (``LogSegment.is_last``)."""
        previous = self.active
        self.active = self._by_base[self._bases[-1]] if self._bases else None
        if previous is not None and previous is not self.active:
            previous.is_last = False
        if self.active is not None:
            self.active.is_last = True

    def clear(self) -> None:
        self._bases.clear()
        self._by_base.clear()
        self.active = None

    # -- lookups ---------------------------------------------------------------------------------
    @property
    def bases(self) -> tuple[int, ...]:
        return tuple(self._bases)

    @property
    def first(self) -> LogSegment | None:
        return self._by_base[self._bases[0]] if self._bases else None

    def get(self, base_offset: int) -> LogSegment | None:
        return self._by_base.get(base_offset)

    def __contains__(self, base_offset: object) -> bool:
        return base_offset in self._by_base

    def __len__(self) -> int:
        return len(self._bases)

    def __bool__(self) -> bool:
        return bool(self._bases)

    def __iter__(self) -> Iterator[LogSegment]:
        by_base = self._by_base
        return iter([by_base[b] for b in self._bases])

    def floor(self, offset: int) -> LogSegment | None:
        """The segment with the largest base offset at or below ``offset``."""
        i = bisect.bisect_right(self._bases, offset) - 1
        return self._by_base[self._bases[i]] if i >= 0 else None

    def from_floor(self, offset: int) -> list[tuple[LogSegment, int | None]]:
        """The segment that may hold ``offset`` (the floor, or the first when ``offset`` is
        below every base) and every later one, each with the next one's base offset (None for
        the last): a segment holds offsets below the next one's base."""
        bases = self._bases
        i = max(0, bisect.bisect_right(bases, offset) - 1)
        by_base = self._by_base
        return [
            (by_base[bases[k]], bases[k + 1] if k + 1 < len(bases) else None)
            for k in range(i, len(bases))
        ]

    def higher(self, base_offset: int) -> list[LogSegment]:
        """The segments whose base offset is above ``base_offset``."""
        bases = self._bases
        i = bisect.bisect_right(bases, base_offset)
        return [self._by_base[b] for b in bases[i:]]
