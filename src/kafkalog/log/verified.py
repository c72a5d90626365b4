"""CRC checks of fetched bytes, paid once per byte.

``kafkalog serve`` sends stored batches to the socket unread, and librdkafka (confluent-kafka)
checks no CRC by default (``check.crcs=false``): a record byte flipped on disk would reach such
a consumer as a wrong record, with no error anywhere. So a fetch that asks for it
(``Log.fetch(verify_crcs=True)``) checks the CRC of every whole batch it returns with the
batches' own checkers (:meth:`RecordBatch.ensure_valid`, CRC-32C; :meth:`LegacyEntry.ensure_valid`,
CRC-32 of a v0/v1 message or wrapper) before it hands the bytes out.

A writable segment file remembers, in memory, the byte ranges whose whole batches passed
(:class:`VerifiedRanges`): this process is their only writer, a sealed segment never changes
and the active one only grows, so a consumer reading again, or many groups reading the same
data, pay the check once. Every change of bytes a writer makes goes through
:class:`~kafkalog.log.segment.SegmentFile`, whose ``truncate_to`` (truncation, recovery's cut)
and logical-size cut forget the ranges at and past the cut; a cleaner's swap or a split brings
a new file object with nothing verified. A read-only file (a live broker may truncate and
append again between two looks) remembers nothing: every fetch checks what it returns.
Damage made by another program to a file this process has already verified is not seen again
(as a broker does not re-check what it served); a client's own CRC check still sees it.
"""

from __future__ import annotations

import bisect

from kafkalog.errors import CorruptRecordError, DamagedLogError
from kafkalog.records.reader import LogReader
from kafkalog.records.types import Limits

#: more disjoint ranges than this (consumers scattered over one segment) drops the smallest
MAX_RANGES = 64


class VerifiedRanges:
    """Disjoint, sorted byte ranges [start, end) of one ``.log`` file whose whole batches were
    CRC-checked; adjacent or overlapping ranges are merged."""

    __slots__ = ("ends", "starts")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []

    def covers(self, start: int, end: int) -> bool:
        """Whether bytes [start, end) all lie in one verified range."""
        k = bisect.bisect_right(self.starts, start) - 1
        return k >= 0 and end <= self.ends[k]

    def add(self, start: int, end: int) -> None:
        if end <= start:
            return
        lo = bisect.bisect_left(self.ends, start)  # the first range ending at or after start
        hi = bisect.bisect_right(self.starts, end)  # past the last range starting by end
        if lo < hi:
            start = min(start, self.starts[lo])
            end = max(end, self.ends[hi - 1])
        self.starts[lo:hi] = [start]
        self.ends[lo:hi] = [end]
        if len(self.starts) > MAX_RANGES:
            k = min(range(len(self.starts)), key=lambda i: self.ends[i] - self.starts[i])
            del self.starts[k], self.ends[k]

    def cut(self, size: int) -> None:
        """The file now ends at ``size`` (a truncation, recovery's cut): bytes past it may be
        written again, so nothing at or past it counts as verified."""
        k = bisect.bisect_left(self.starts, size)
        del self.starts[k:], self.ends[k:]
        if self.ends and self.ends[-1] > size:
            self.ends[-1] = size

    def clear(self) -> None:
        self.starts.clear()
        self.ends.clear()

    def __repr__(self) -> str:
        return f"VerifiedRanges({list(zip(self.starts, self.ends, strict=True))})"


def check_fetched_crcs(
    data: bytes,
    position: int,
    *,
    path: str,
    partition: str,
    limits: Limits,
    verified: VerifiedRanges | None,
) -> None:
    """Raise :class:`DamagedLogError` (file and byte) at the first whole entry of ``data``
    (bytes of ``path`` from ``position``, as a fetch returns them) that is not a valid entry
    or whose CRC does not match; entries inside ``verified`` are not checked again, and the
    whole entries checked are added to it. A last entry cut off by the size limit is not
    checked (the client drops it and fetches from it next)."""
    reader = LogReader(data, path=path, limits=limits, base_position=position)
    try:
        for entry in reader:
            at = entry.position
            if verified is None or not verified.covers(at, at + entry.size_in_bytes):
                entry.ensure_valid()
    except CorruptRecordError as e:
        raise DamagedLogError.found(
            e.reason, path=path, position=e.position or position, partition=partition
        ) from None
    if verified is not None:
        verified.add(position, reader.end_position)
