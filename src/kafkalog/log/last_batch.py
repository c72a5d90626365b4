"""The log's last batch (issue 32 §1): no batch or segment after it shows that its base offset,
outside the CRC, is in line, so it is judged only by evidence that cannot be wrong on any
real writer's directory.

Sound (no false alarm on any writer's shape):

* **its own segment's indexes.** Every entry of a ``.index`` or ``.timeindex`` keys an offset
  that a batch of that segment holds: an offset-index entry keys an offset of the append that
  starts at its position (the append's first offset for Kafka before 2.0, its largest since,
  each batch's last offset since 3.x and in recovery), a time-index entry the offset of a
  batch with the largest timestamp so far (a cleaner rebuilds both from what it keeps). Both
  grow, so the last entry keys the largest. When it keys an offset *after* the batch before
  the last one and *before* the last batch's base offset, it keys an offset no batch holds:
  the base offset was flipped upwards. (A compaction gap is never keyed; an index ahead of a
  live writer's visible bytes, or a crash's stale entries, keys offsets past the last batch.)
  A v0/v1 wrapper names its last offset and an index may key an inner one, so a wrapper's
  first inner offset is the one below which nothing may be keyed (a v1 wrapper's inner
  offsets are relative to its own: a flipped one moves them all).
  An entry keying the segment's base offset is not used (a preallocated file's zeros read so).
* **kafkalog's own clean close.** A standalone log's ``.kafkalog-clean-shutdown`` holds the
  log end offset it flushed at close (written last; removed by the next writable open before
  any append). While the marker is at least as new as the ``.log`` (an append by any writer
  changes the ``.log``'s mtime), the last batch ends exactly there.

Not used, because real directories contradict them: a broker's recovery-point checkpoint or
producer snapshot beside ``.kafka_cleanshutdown`` (a Kafka 2.8 clean shutdown left both below
its log end: they are lower bounds only); a segment's 2**31-offset span (legacy segments that
overflow it are real, KAFKA-6264); the previous batch's last offset + 1 (compaction leaves
gaps: a base offset above it is legal; one at or below it is already out of order).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass

from kafkalog import files
from kafkalog.index import OffsetIndex, TimeIndex
from kafkalog.log.checkpoints import LOG_CLEAN_SHUTDOWN_FILE, LogCleanShutdown
from kafkalog.records.batch import RecordBatch
from kafkalog.records.reader import LogEntry


@dataclass(frozen=True)
class Keyed:
    """The largest offset an index file of the segment keys, and the file."""

    offset: int
    path: str


def marker_end(directory: str, log_path: str, seen_size: int | None = None) -> int | None:
    """The log end offset kafkalog's own clean close recorded, while no append came after it:
    the marker names this ``.log`` (the last segment's base) and its size then, and is at
    least as new; a marker without them (an older kafkalog) must be strictly newer. None
    otherwise. ``seen_size``: where the caller's view of the ``.log`` ends; the record speaks
    only for a view of the closed log (a reader that read a live log's bytes before the last
    appends and the close, then finds the marker, saw an earlier end than it records)."""
    if files.is_remote(directory):
        return None
    try:
        marker = os.stat(os.path.join(directory, LOG_CLEAN_SHUTDOWN_FILE)).st_mtime_ns
        log = os.stat(log_path)
    except OSError:
        return None
    found = LogCleanShutdown.read_end(directory)
    if found is None:
        return None
    end, base, size = found
    if base is None or size is None:
        return end if marker > log.st_mtime_ns else None
    name_base = int(os.path.basename(log_path)[:20])
    if marker < log.st_mtime_ns or base != name_base or size != log.st_size:
        return None
    if seen_size is not None and seen_size != size:
        return None
    return end


def problem(
    entry: LogEntry,
    *,
    previous_last: int,
    segment_base: int,
    keyed: list[Keyed],
    end: int | None,
    end_source: str,
) -> str | None:
    """Why ``entry``, the last whole batch of the log's last segment with nothing valid after
    it, cannot hold the offsets its header says (None when nothing proves it): see the module
    doc. ``previous_last`` is the last offset of the batch before it in the segment (the
    segment's base - 1 when it is the first), ``keyed`` the largest offsets the segment's
    indexes key, ``end`` the log end a clean close recorded."""
    first = entry.base_offset if isinstance(entry, RecordBatch) else _first_inner(entry)
    claim = (
        f"non-consecutive offsets: the batch at byte {entry.position} (the log's last) holds "
        f"offsets {first}..{entry.last_offset}"
    )
    blame = ": its base offset (outside the batch CRC) is wrong"
    if end is not None and entry.last_offset + 1 != end:
        return (
            f"{claim}, but the log ended at offset {end} at its clean close ({end_source}){blame}"
        )
    for k in keyed:
        if k.offset > segment_base and previous_last < k.offset < first:
            return (
                f"{claim}, but {k.path} keys offset {k.offset}, which no batch then "
                f"holds (the batch before ends at offset {previous_last}){blame}"
            )
    return None


def _first_inner(entry: LogEntry) -> int:
    """A v0/v1 entry's first offset: its first inner message's for a compressed wrapper (a v1
    wrapper's inner offsets are relative to its own, outside every CRC, so a flipped one moves
    them all: only an index keying an offset below them tells), its own for a message; its
    last offset when the wrapper cannot be read (no evidence then)."""
    try:
        inner = entry.records()
    except Exception:  # damage the walk names; here, no evidence
        return entry.last_offset
    return inner[0].offset if inner else entry.last_offset


def previous_last_offset(
    entries: Callable[[int, int], list[LogEntry]],
    index_positions: list[int],
    position: int,
    segment_base: int,
) -> int | None:
    """The last offset of the entry before the one at ``position``: a walk from the last
    index position below it (``entries(start, end)`` lists the entries between); None when
    the bytes do not parse there (no evidence)."""
    start = max((p for p in index_positions if p < position), default=0)
    with contextlib.suppress(Exception):
        before = entries(start, position)
        if before:
            return before[-1].last_offset
        return segment_base - 1 if start == 0 else None
    return None


def _tail_entries(path: str, size: int, wanted: int = 64) -> list[bytes]:
    """The last (at most ``wanted``) entries of an index file of ``size``-byte entries, in
    file order, with no read of the whole file: a live broker's preallocated index ends in
    zeros, found by a binary search (its entries are a non-zero prefix; an all-zero entry
    after the first is the preallocated space)."""
    with open(path, "rb") as f:
        count = os.fstat(f.fileno()).st_size // size

        def entry(n: int) -> bytes:
            return os.pread(f.fileno(), size, n * size)

        lo, hi = 0, count  # entries [0, lo) are real; the answer is in [lo, hi]
        if count and not any(entry(0)):
            # a first entry of zeros: the one at relative offset 0, position 0, or nothing
            lo, hi = 1, count
            if count == 1 or not any(entry(1)):
                return []
        while lo < hi:
            mid = (lo + hi) // 2
            if any(entry(mid)):
                lo = mid + 1
            else:
                hi = mid
        first = max(0, lo - wanted)
        data = os.pread(f.fileno(), (lo - first) * size, first * size)
    return [data[k : k + size] for k in range(0, len(data), size)]


def _ordered(pairs: list[tuple[int, int]], *, strict: bool) -> bool:
    """Whether both fields of ``pairs`` grow (strictly, or never fall), none negative."""
    if any(a < 0 or b < 0 for a, b in pairs):
        return False
    steps = list(itertools.pairwise(pairs))
    if strict:
        return all(b[0] > a[0] and b[1] > a[1] for a, b in steps)
    return all(b[0] >= a[0] and b[1] >= a[1] for a, b in steps)


def judge_files(
    directory: str,
    segment_base: int,
    entry: LogEntry,
    entries: Callable[[int, int], list[LogEntry]],
    loaded: dict[str, OffsetIndex | TimeIndex] | None = None,
    *,
    suffix: str = "",
) -> str | None:
    """:func:`problem` for ``entry``, the last whole batch of the log's last segment (based at
    ``segment_base`` in ``directory``), with the evidence read from its files: ``entries(start,
    end)`` lists the segment's entries between two byte positions; ``loaded`` holds the index
    objects a segment already has open (by suffix), the others are read read-only (never
    created: a reader and a failing open change nothing). ``suffix``: the segment's files'
    suffix after their kind (``.swap`` for a cleaner's output), so that its own indexes are the
    evidence, never those of the segment of the same base it replaces."""
    from kafkalog.log.layout import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, segment_file

    keyed: list[Keyed] = []
    positions: list[int] = []
    for kind_suffix, kind in ((INDEX_SUFFIX, OffsetIndex), (TIME_INDEX_SUFFIX, TimeIndex)):
        path = segment_file(directory, segment_base, kind_suffix + suffix)
        index = (loaded or {}).get(kind_suffix)
        if index is None:
            if files.is_remote(path) or not os.path.exists(path):
                continue
            try:  # read from its end only (a reader polling a live log asks at every poll)
                found = _tail_entries(path, 8 if kind is OffsetIndex else 12)
            except OSError:
                continue  # an index that cannot be read is no evidence, never an error
            if not found:
                continue
            # entries out of order are a damaged index (rebuilt by a writable open): no evidence
            if kind is OffsetIndex:
                pairs = [struct.unpack(">ii", e) for e in found]
                if _ordered(pairs, strict=True):
                    keyed.append(Keyed(segment_base + pairs[-1][0], path))
                    below = [at for _, at in pairs if at < entry.position]
                    positions = below[-1:]
            else:
                stamps = [struct.unpack(">qi", e) for e in found]
                if _ordered([(rel, ts) for ts, rel in stamps], strict=False):
                    keyed.append(Keyed(segment_base + stamps[-1][1], path))
            continue
        try:
            if not index.entries:
                continue
            if isinstance(index, OffsetIndex):
                keyed.append(Keyed(index.last_offset, path))
                # the last entry below the batch (entries past it: an index ahead of a live
                # writer's visible bytes, or a torn append's)
                for k in range(index.entries - 1, max(-1, index.entries - 65), -1):
                    at = index.entry(k).position
                    if at < entry.position:
                        positions = [at]
                        break
            else:
                keyed.append(Keyed(index.last_entry.offset, path))
        except Exception:  # an index that cannot be read is no evidence, never an error
            keyed = [k for k in keyed if k.path != path]
    previous = previous_last_offset(entries, positions, entry.position, segment_base)
    if previous is None:
        keyed, previous = [], segment_base - 1
    return problem(
        entry,
        previous_last=previous,
        segment_base=segment_base,
        keyed=keyed,
        # the closed log's last batch ends where the marker says the file ended (a marker
        # speaks of the log's last ``.log``, never of a cleaner's output beside it)
        end=None
        if suffix
        else marker_end(
            directory,
            segment_file(directory, segment_base, LOG_SUFFIX),
            entry.position + entry.size_in_bytes,
        ),
        end_source=LOG_CLEAN_SHUTDOWN_FILE,
    )
