"""What a partition directory proves about where its log ends: the evidence the last batch of
the last segment is judged by (it has no batch and no segment after it to show that its base
offset, outside the CRC, is in line).

Only *upper* bounds can prove a base offset flipped too high, and most of what a directory
holds is a *lower* bound on its log end: a live broker writes its checkpoints every few
seconds, a snapshot is taken at a roll, an index entry keys an offset that exists. What is an
upper bound:

* a clean close's record: a standalone log's ``.kafkalog-clean-shutdown`` (its recovery point
  is the log end it flushed at close), or a data directory's ``.kafka_cleanshutdown`` with the
  partition's ``recovery-point-offset-checkpoint`` entry (a broker flushes every log, then
  writes the checkpoint, then the marker) and the producer-state snapshot a close takes at the
  log end. It holds only while nothing was appended since: the marker must be at least as new
  as the ``.log`` (an append after it changes the ``.log``'s mtime);
* the segment itself: an index keys offsets relative to the segment's base in 4 bytes, so
  every writer rolls before an offset reaches ``base + 2**31``.
"""

from __future__ import annotations

import os

from kafkalog import files
from kafkalog.log.checkpoints import (
    CLEAN_SHUTDOWN_FILE,
    LOG_CLEAN_SHUTDOWN_FILE,
    LogCleanShutdown,
    OffsetCheckpoint,
)
from kafkalog.log.layout import SNAPSHOT_SUFFIX, is_offset_prefix, parse_partition_dir

#: every offset of a segment is below its base offset plus this (Kafka's
#: ``canConvertToRelativeOffset``: a segment rolls before)
RELATIVE_SPAN = 2**31
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"


#: data directories whose ``.kafka_cleanshutdown`` a writable open of this process removed
#: before loading their logs (a crash must then count as unclean), and the mtime it had
_REMOVED_MARKERS: dict[str, int] = {}


def marker_removed(log_dir: str, mtime_ns: int) -> None:
    """Keep, for this process, the mtime of a data directory's clean-shutdown marker that a
    writable open is about to remove: the logs it loads are still judged by the close the
    marker recorded (and only while their ``.log`` is not newer)."""
    _REMOVED_MARKERS[os.path.abspath(log_dir)] = mtime_ns


def _mtime(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def _snapshot_end(directory: str) -> int | None:
    """The highest offset a producer-state snapshot is named by (the log end when taken)."""
    best: int | None = None
    try:
        names = os.listdir(directory)
    except OSError:
        return None
    for name in names:
        stem = name[: -len(SNAPSHOT_SUFFIX)]
        if name.endswith(SNAPSHOT_SUFFIX) and is_offset_prefix(stem):
            best = max(best or 0, int(stem))
    return best


def closed_log_end(directory: str, log_path: str) -> tuple[int, str] | None:
    """(the log end a clean close recorded, what recorded it), while it still holds (see the
    module doc); None when the directory proves no end."""
    if files.is_remote(directory):
        return None
    log_mtime = _mtime(log_path)
    if log_mtime is None:
        return None
    own = os.path.join(directory, LOG_CLEAN_SHUTDOWN_FILE)
    own_mtime = _mtime(own)
    if own_mtime is not None and own_mtime >= log_mtime:
        point = LogCleanShutdown.read(directory)
        if point is not None:
            return point, f"the recovery point {point} of {own} (a clean close's log end)"
    if own_mtime is not None:
        return None  # a standalone writer's marker older than its .log: appended since
    parent = os.path.dirname(os.path.abspath(directory))
    marker = os.path.join(parent, CLEAN_SHUTDOWN_FILE)
    marker_mtime = _mtime(marker)
    if marker_mtime is None:
        marker_mtime = _REMOVED_MARKERS.get(parent)
    if marker_mtime is None or marker_mtime < log_mtime:
        return None
    ends: list[tuple[int, str]] = []
    try:
        key = parse_partition_dir(os.path.basename(os.path.abspath(directory)))
        points = OffsetCheckpoint.read(os.path.join(parent, RECOVERY_POINT_CHECKPOINT))
    except Exception:  # a file unreadable is no evidence, never an error
        points = {}
        key = ("", -1)
    if key in points:
        ends.append(
            (points[key], f"{RECOVERY_POINT_CHECKPOINT} ({points[key]}) with {marker} present")
        )
    snap = _snapshot_end(directory)
    if snap is not None:
        ends.append((snap, f"the snapshot {snap:020d}{SNAPSHOT_SUFFIX} with {marker} present"))
    if not ends:
        return None
    # each says the log end at the close; the larger is the safer bound
    return max(ends)


def past_span(segment_base: int, last_offset: int) -> bool:
    """Whether a batch ending at ``last_offset`` reaches past what a segment based at
    ``segment_base`` can span."""
    return last_offset - segment_base >= RELATIVE_SPAN


def past_proven_end(
    directory: str, log_path: str, segment_base: int, last_offset: int, *, at_end: bool = True
) -> str | None:
    """Why a batch ending at ``last_offset``, the last of the last segment (based at
    ``segment_base``) when ``at_end``, holds offsets the log cannot have: past the span a
    segment can hold, or (``at_end``) at or past the log end a clean close recorded."""
    if past_span(segment_base, last_offset):
        return (
            f"2**31 or more past the segment's base offset {segment_base} (a segment rolls before)"
        )
    if at_end:
        end = closed_log_end(directory, log_path)
        # a clean close's log end is the offset after the last batch, exactly
        if end is not None and last_offset >= end[0]:
            return f"at or past the log end {end[0]} proved by {end[1]}"
        if end is not None and last_offset + 1 < end[0]:
            return f"ending before the log end {end[0]} proved by {end[1]}"
    return None
