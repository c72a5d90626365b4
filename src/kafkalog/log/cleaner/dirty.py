"""Which part of a log a cleaning may touch, and how dirty a log is (Kafka's
``LogCleanerManager.cleanableOffsets`` / ``calculateCleanableBytes`` / ``maxCompactionDelay``
and ``LogToClean``).

The *dirty section* runs from the cleaner checkpoint (the first offset no cleaning has seen) to
the first *uncleanable* offset: the lowest of the last stable offset (an open transaction's
records cannot be judged yet), the active segment's base offset (it is still written) and the
base offset of the first segment holding a record newer than ``min.compaction.lag.ms``. A
cleaning stops at the start of the segment holding that offset. The *dirty ratio* is the
share of the log's bytes in the dirty section; a log is cleaned once it passes
``min.cleanable.dirty.ratio``, or at once when a record has waited longer than
``max.compaction.lag.ms``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kafkalog.log.local_log import LocalLog
from kafkalog.log.segment import LogSegment


@dataclass(frozen=True)
class DirtySection:
    """One log's cleanable range and its bytes (Kafka's ``LogToClean``)."""

    first_dirty: int
    #: the first offset a cleaning may not pass: the base offset of a segment
    first_uncleanable: int
    clean_bytes: int
    cleanable_bytes: int
    #: how long the oldest dirty record has waited past ``max.compaction.lag.ms`` (0: not)
    compaction_delay_ms: int
    #: the checkpoint was below the log start or past the log end and was reset
    checkpoint_reset: bool

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def dirty_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0

    @property
    def needs_compaction_now(self) -> bool:
        return self.compaction_delay_ms > 0

    def is_cleanable(self, min_ratio: float) -> bool:
        """Kafka's test for a log the cleaner picks: past the dirty ratio, or overdue."""
        if self.total_bytes <= 0:
            return False
        return (
            self.needs_compaction_now and self.cleanable_bytes > 0
        ) or self.dirty_ratio > min_ratio


def segments_between(local: LocalLog, lo: int, hi: int) -> list[LogSegment]:
    """Kafka's ``logSegments(from, to)``: the segment holding ``lo`` (the floor) and every
    later one whose base offset is below ``hi``."""
    return [seg for seg, _ in local.segments.from_floor(lo) if seg.base_offset < hi]


def non_active_from(local: LocalLog, lo: int) -> list[LogSegment]:
    active = local.segments.active
    end = active.base_offset if active is not None else lo
    return segments_between(local, lo, end)


def first_batch_timestamp(seg: LogSegment) -> int | None:
    """The first batch's max timestamp (Kafka's ``getFirstBatchTimestamp``), None without."""
    for entry in seg.entries(0):
        return entry.max_timestamp
    return None


def dirty_section(
    local: LocalLog, config: Any, checkpoint: int | None, last_stable_offset: int, now: int
) -> DirtySection:
    start = local.log_start_offset
    dirty = start if checkpoint is None else checkpoint
    reset = False
    if dirty < start or dirty > local.log_end_offset:
        dirty, reset = start, True
    active = local.segments.active
    assert active is not None
    bounds = [last_stable_offset, active.base_offset]
    lag = max(config.min_compaction_lag_ms, 0)
    if lag > 0:
        for seg in non_active_from(local, dirty):
            if seg.largest_timestamp > now - lag:
                bounds.append(seg.base_offset)
                break
    uncleanable = max(dirty, min(bounds))
    # calculateCleanableBytes: a cleaning stops at the start of the segment holding it
    following = non_active_from(local, uncleanable)
    first_uncleanable = following[0].base_offset if following else active.base_offset
    cleanable = sum(
        seg.size
        for seg in segments_between(local, min(dirty, first_uncleanable), first_uncleanable)
    )
    clean = sum(seg.size for seg in local.segments if seg.base_offset < dirty)
    # maxCompactionDelay
    delay = 0
    max_lag = max(config.max_compaction_lag_ms, 0)
    firsts = [first_batch_timestamp(seg) for seg in non_active_from(local, dirty)]
    earliest = min((t for t in firsts if t is not None and t > 0), default=None)
    until = now - max_lag
    if earliest is not None and earliest < until:
        delay = until - earliest
    return DirtySection(dirty, first_uncleanable, clean, cleanable, delay, reset)


def group_by_size(
    segments: list[LogSegment], max_size: int, max_index_size: int, first_uncleanable: int
) -> list[list[LogSegment]]:
    """Kafka's ``groupSegmentsBySize``: consecutive segments whose logs, offset indexes and
    time indexes each fit one segment, and whose offsets fit one segment's 32-bit relative
    offsets, become one cleaned segment (so cleaning does not leave many tiny ones)."""
    groups: list[list[LogSegment]] = []
    rest = list(segments)
    while rest:
        first = rest.pop(0)
        group = [first]
        log_size = first.size
        index_size, time_size = _index_sizes(first)
        while rest:
            nxt = rest[0]
            o, t = _index_sizes(nxt)
            last = rest[1].base_offset - 1 if len(rest) > 1 else first_uncleanable - 1
            if not (
                log_size + nxt.size <= max_size
                and index_size + o <= max_index_size
                and time_size + t <= max_index_size
                and (nxt.size == 0 or last - group[0].base_offset <= 2**31 - 1)
            ):
                break
            group.append(rest.pop(0))
            log_size += nxt.size
            index_size += o
            time_size += t
        groups.append(group)
    return groups


def _index_sizes(seg: LogSegment) -> tuple[int, int]:
    """The bytes of a segment's offset and time index entries."""
    from kafkalog import files

    sizes = []
    for lazy in (seg.offset_index, seg.time_index):
        loaded = lazy.loaded
        if loaded is not None:
            sizes.append(loaded.entries * loaded.ENTRY_SIZE)
        else:
            try:
                sizes.append(files.getsize(lazy.path))
            except FileNotFoundError:
                sizes.append(0)
    return sizes[0], sizes[1]
