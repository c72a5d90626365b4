"""One definition of where a log's valid bytes end, and whether what follows is a torn tail or
damage.

A crash can leave only one thing behind: the last batch of the last segment written in part
(cut off, zero-filled, or with a CRC that no longer matches), with nothing valid after it.
That is the end of the log: a read stops there and a writable open's recovery cuts it, as
Kafka does. Anything else that is not whole, valid batches is damage (a flipped byte, a hole,
garbage, an absurd length, bytes that fail where valid batches follow, a bad segment that is not
the last): Kafka can afford to truncate there because a follower refills the log from its
leader; kafkalog has no replica, so it raises :class:`~kafkalog.errors.DamagedLogError` naming
the file and the byte, and leaves the bytes where they are for ``kafkalog repair``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from kafkalog.errors import (
    BatchTooLargeError,
    CorruptRecordError,
    DamagedLogError,
    KafkalogError,
)
from kafkalog.log.layout import segment_file
from kafkalog.log.segment import (
    LogSegment,
    held_is_damaged,
    jumped_ahead,
    offset_order_problem,
    torn_absurd_entry,
    wrapper_inner_offsets,
    wrapper_offset_problem,
)
from kafkalog.records.batch import RecordBatch
from kafkalog.records.reader import IncompleteTail, LogEntry, LogReader
from kafkalog.records.resync import next_valid_entry

logger = logging.getLogger("kafkalog.log")


@dataclass(frozen=True)
class Problem:
    """The first place in a segment where its bytes stop being whole, valid batches."""

    path: str
    position: int  # the first byte of the entry that is not whole and valid
    reason: str
    expected_offset: int | None  # the offset the entry there should start at, when known
    declared_size: int | None = None  # for an entry cut off by the end of the file
    absurd: bool = False  # a length no writer can have written (larger than any batch)
    # why it cannot be a torn tail though nothing valid follows: a whole, valid last batch
    # whose offsets the segment's own evidence proves wrong (LogSegment.end_problem)
    proven: bool = False

    def describe(self) -> str:
        if self.expected_offset is None:
            return self.reason
        return f"{self.reason} (expected a batch from offset {self.expected_offset})"


def first_problem(
    seg: LogSegment, start: int = 0, expected_offset: int | None = None
) -> Problem | None:
    """Walk the entries of ``seg`` from byte ``start`` (an entry boundary), every CRC checked;
    the first entry that is not whole and valid, or None when the file ends on a whole one."""
    tail: list[IncompleteTail | None] = []
    position = start
    expected = seg.base_offset if start == 0 and expected_offset is None else expected_offset
    previous = seg.base_offset - 1 if expected is None else expected - 1
    # the entry before the last, for an offset that is out of order: a base offset is outside
    # the CRC, and when the entry before goes back into line without the last one, the last
    # one is the damaged one (its flipped offset only shows at the next entry)
    before: tuple[int, int, int | None] | None = None  # (position, previous, expected) then
    last_entry: LogEntry | None = None
    try:
        for entry in seg.log.entries(start, limits=seg.limits, verify_crc=True, tail=tail):
            wrong = offset_order_problem(entry, previous, seg.base_offset)
            if wrong is not None:
                if (
                    before is not None
                    and last_entry is not None
                    and held_is_damaged(last_entry, entry, before[1], seg.base_offset)
                    and not seg.is_proven_last(entry)
                ):
                    at, _, was_expected = before
                    return Problem(
                        seg.log.path,
                        at,
                        f"non-consecutive offsets: the batch at byte {at} holds offsets past "
                        f"the batch after it ({wrong})",
                        was_expected,
                    )
                # out of line at the end of the log's last segment after kafkalog's own clean
                # close recorded no append since: no crash tore it, so it is no torn tail
                closed = seg.is_last and seg.next_base is None and seg.closed_cleanly()
                return Problem(seg.log.path, position, wrong, expected, proven=closed)
            before = (position, previous, expected)
            last_entry = entry
            previous = entry.last_offset
            position = entry.position + entry.size_in_bytes
            expected = entry.last_offset + 1
    except CorruptRecordError as e:
        absurd = isinstance(e, BatchTooLargeError)
        if absurd and torn_absurd_entry(
            seg.log.read, seg.size, position, expected, seg.is_last, seg.limits, True
        ):
            claimed = int.from_bytes(seg.log.read(position + 8, 4), "big", signed=True) + 12
            return Problem(
                seg.log.path,
                position,
                f"incomplete entry of {claimed} bytes (a size no batch has): only "
                f"{seg.size - position} bytes before the end of the file",
                expected,
                declared_size=claimed,
            )
        return Problem(seg.log.path, position, e.reason, expected, absurd=absurd)
    upper = seg.next_base
    if before is not None and upper is not None and previous >= upper:
        at, _, was_expected = before
        return Problem(
            seg.log.path,
            at,
            f"non-consecutive offsets: the batch at byte {at} holds offsets up to {previous}, "
            f"at or past the next segment's base offset {upper}",
            was_expected,
        )
    cut = tail[0] if tail else None
    if cut is None:
        if before is not None and last_entry is not None and upper is None:
            wrong = seg.end_problem(last_entry)
            if wrong is not None:
                return Problem(seg.log.path, before[0], wrong, before[2], proven=True)
        return None
    declared = cut.declared_size
    what = "entry header" if declared is None else f"entry of {declared} bytes"
    return Problem(
        seg.log.path,
        cut.position,
        f"incomplete {what}: only {cut.available} bytes before the end of the file",
        expected,
        declared_size=declared,
    )


def check_tail(seg: LogSegment, problem: Problem, *, is_last: bool, directory: str) -> None:
    """Return when ``problem`` is a torn tail (see the module doc); raise
    :class:`DamagedLogError` otherwise."""
    if problem.proven:
        why: str | None = "a whole, valid batch, not a torn tail"
    elif problem.absurd:
        why = "with a length no writer can have written"
    elif not is_last:
        why = "in a segment that is not the last one (later segments follow it)"
    else:
        # a Problem comes from first_problem's walk, every CRC checked
        why = seg.cut_off_damage(problem.position, problem.expected_offset, crc_checked=True)
    if why is not None:
        raise damaged(problem, directory, why)


def damaged(problem: Problem, directory: str, why: str) -> DamagedLogError:
    return DamagedLogError.found(
        f"{problem.describe()}, {why}",
        path=problem.path,
        position=problem.position,
        partition=directory,
    )


@dataclass(frozen=True)
class SkippedBytes:
    """Damaged bytes a read skipped because its caller asked it to (Spark's
    ``failOnDataLoss=false``, ``kafkalog cat --skip-damaged``, ``on_damage=``): where, why,
    and which offsets their records could have held (the offsets between the last record read
    before them and the first read after; compaction may have left fewer)."""

    path: str
    start: int
    end: int
    reason: str
    first_offset: int | None = None
    last_offset: int | None = None  # None: up to the log's end

    @property
    def size(self) -> int:
        return self.end - self.start

    def describe(self) -> str:
        offsets = ""
        if self.first_offset is not None:
            upper = "the log end" if self.last_offset is None else str(self.last_offset)
            offsets = f", offsets {self.first_offset} to {upper}"
            if self.last_offset is not None:
                offsets += f" (at most {self.last_offset - self.first_offset + 1} records)"
        return (
            f"skipped damaged bytes {self.start} to {self.end} of {self.path} "
            f"({self.size} bytes{offsets}): {self.reason}"
        )


class OffsetOrder:
    """Offsets only grow, so an entry whose offsets do not is damage; but a base offset is
    outside the batch CRC, and a flipped one (too high) shows only at the *next* entry. Fed
    the entries in file order, this holds each back until the next one tells whether it or
    the next one is the damaged one."""

    def __init__(self, previous: int, segment_base: int, last_of: LogSegment | None = None) -> None:
        self.previous = previous  # the last offset of the entries released
        self.base = segment_base
        # the segment, when its last entry may be proven out of line (LogSegment.end_problem)
        self.last_of = last_of
        self.held: LogEntry | None = None

    @property
    def last(self) -> int:
        """The last offset of the entries read and not found damaged."""
        return self.previous if self.held is None else self.held.last_offset

    def push(self, entry: LogEntry) -> tuple[LogEntry | None, LogEntry | None, int]:
        """(an entry now known to be in order, an entry found out of order, the last offset of
        the good entries before the one found out of order)."""
        held = self.held
        if held is None:
            if offset_order_problem(entry, self.previous, self.base) is None:
                self.held = entry
                return None, None, self.previous
            return None, entry, self.previous
        if offset_order_problem(entry, held.last_offset, self.base) is None:
            self.previous, self.held = held.last_offset, entry
            return held, None, self.previous
        if held_is_damaged(held, entry, self.previous, self.base) and not (
            self.last_of is not None and self.last_of.is_proven_last(entry)
        ):
            self.held = entry  # the held one jumped ahead: it is the damaged one
            return None, held, self.previous
        return None, entry, held.last_offset

    def finish(self, upper: int | None) -> tuple[LogEntry | None, LogEntry | None, int]:
        """The held entry at the end of the segment, checked against the next segment's base
        ``upper`` (its offsets must stay below it); as :meth:`push`."""
        held, self.held = self.held, None
        if held is None:
            return None, None, self.previous
        if upper is not None and held.last_offset >= upper:
            return None, held, self.previous
        if self.last_of is not None and self.last_of.is_proven_last(held):
            return None, held, self.previous  # the log's last batch, proven out of line
        self.previous = held.last_offset
        return held, None, self.previous


def skip_damage(
    seg: LogSegment,
    start: int,
    previous: int,
    on_damage: Callable[[SkippedBytes], None],
    *,
    verify_crc: bool = True,
    next_base: int | None = None,
) -> Iterator[LogEntry]:
    """The entries of ``seg`` from byte ``start`` (whose offsets follow ``previous``), damage
    skipped to the next whole, valid batch whose offsets go on from the ones read, each skip
    handed to ``on_damage``: what a reader that asked to skip damage walks."""
    order = OffsetOrder(previous, seg.base_offset, seg)
    # entries found out of order, said once the next good entry tells where their offsets end
    pending: list[tuple[LogEntry, int, str]] = []

    def say_pending(upper: int | None, before: int | None = None) -> None:
        while pending and (before is None or pending[0][0].position < before):
            entry, first, why = pending.pop(0)
            last = None if upper is None else max(upper - 1, first - 1)
            end = entry.position + entry.size_in_bytes
            on_damage(SkippedBytes(seg.log.path, entry.position, end, why, first, last))

    def release(good: LogEntry | None, bad: LogEntry | None, after: int) -> Iterator[LogEntry]:
        if good is not None:
            say_pending(first_offset(good), before=good.position)
            yield good
        if bad is not None:
            why = offset_order_problem(bad, after, seg.base_offset) or "offsets out of order"
            pending.append((bad, after + 1, why))

    position = start
    while position < seg.size:
        try:
            for entry in seg.entries(position, verify_crc=verify_crc, check_order=False):
                yield from release(*order.push(entry))
            break
        except DamagedLogError as e:
            at = position if e.position is None else max(position, e.position)
            resume = next_valid_entry(seg.log.read, seg.size, at + 1, seg.limits)
            last: int | None = None if next_base is None else next_base - 1
            if resume is not None:
                last = int.from_bytes(seg.log.read(resume, 8), "big", signed=True) - 1
            first = order.last + 1
            upper = None if last is None else max(last, first - 1)
            end = seg.size if resume is None else resume
            say_pending(first)
            on_damage(SkippedBytes(seg.log.path, at, end, e.reason, first, upper))
            if resume is None:
                break
            position = resume
    yield from release(*order.finish(next_base))
    say_pending(next_base)


def fetched_offsets_problem(
    data: bytes, position: int, previous: int, upper: int
) -> tuple[int, str] | None:
    """Where and why the whole entries of ``data`` (bytes of a ``.log`` from ``position``,
    read for a Fetch; a last entry cut off by the size limit is the client's to drop) have
    offsets that are not growing from ``previous`` and below ``upper`` (the next segment's
    base, or the log end), or None. A base offset is outside the batch CRC, which the client
    checks: a flipped one would hand the client records at offsets they do not have. Of two
    entries out of line, the one named is the one :func:`held_is_damaged` finds (a v0/v1
    wrapper's first offset is its first inner message's, decompressed)."""
    at, size = 0, len(data)
    held: tuple[int, int, int, int] | None = None  # (byte, first, last, previous) of the last
    while at + 27 <= size:
        length = int.from_bytes(data[at + 8 : at + 12], "big", signed=True)
        end = at + 12 + length
        if length < 14 or end > size:
            break  # cut off by the size limit (or a length the client's CRC check refuses)
        first = last = int.from_bytes(data[at : at + 8], "big", signed=True)
        if data[at + 16] == 2:
            last = first + int.from_bytes(data[at + 23 : at + 27], "big", signed=True)
        elif data[at + 17] & 0x07:  # a compressed v0/v1 wrapper: its offset is its last
            wrapper = _wrapper(data[at:end])
            inner = None if wrapper is None else wrapper_inner_offsets(wrapper)
            if wrapper is not None and inner is not None:
                first = inner[0]
                wrong = wrapper_offset_problem(replace(wrapper, position=position + at), inner)
                if wrong is not None:
                    return position + at, wrong
        if not previous < first <= last < upper:
            if held is not None and first <= last < upper:
                ahead = jumped_ahead(position + held[0], *held[1:], first)
                if ahead is not None:
                    return position + held[0], ahead
            return position + at, (
                f"non-consecutive offsets: the batch at byte {position + at} holds offsets "
                f"{first}..{last} after one ending at offset {previous} (offsets below "
                f"{upper} expected)"
            )
        held = (at, first, last, previous)
        previous = last
        at = end
    return None


def _wrapper(entry: bytes) -> LogEntry | None:
    """A compressed v0/v1 wrapper read from its bytes, or None when it cannot be (the
    client's checks say why)."""
    try:
        return next(iter(LogReader(entry)))
    except (KafkalogError, StopIteration):
        return None


def end_past_damage(seg: LogSegment) -> int:
    """The offset after the last valid batch of ``seg`` (its base when there is none), damage
    passed over: where a read-only open puts the end of a log whose last segment is damaged
    (reads through the damage still raise, unless they asked to skip it)."""
    last = seg.base_offset - 1
    for entry in skip_damage(seg, 0, seg.base_offset - 1, lambda _: None):
        last = entry.last_offset
    return last + 1


def first_offset(entry: LogEntry) -> int:
    """The first offset of ``entry`` as its header says (a v0/v1 entry names its last)."""
    return entry.base_offset if isinstance(entry, RecordBatch) else entry.last_offset


def log_cut(problem: Problem, seg: LogSegment) -> str | None:
    """Every byte recovery cuts is said, with the file, where and why, and kept: the bytes
    after ``problem.position`` are copied first to ``<segment>.log.torn-<byte>-<UTC time>``
    beside the segment (a name Kafka's and kafkalog's loaders leave alone), unless they are
    all zeros (a preallocating writer's space: nothing is lost). Returns the copy's path."""
    size = seg.size
    copy: str | None = None
    chunk = 1 << 20
    position, zeros = problem.position, True
    while position < size and zeros:
        data = seg.log.read(position, min(chunk, size - position))
        if not data:
            break
        zeros = not any(data)
        position += len(data)
    if not zeros:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        copy = f"{seg.log.path}.torn-{problem.position}-{stamp}"
        with open(copy, "wb") as out:
            position = problem.position
            while position < size:
                data = seg.log.read(position, min(chunk, size - position))
                if not data:
                    break
                out.write(data)
                position += len(data)
            out.flush()
            os.fsync(out.fileno())
        fd = os.open(os.path.dirname(copy) or ".", os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    logger.warning(
        "cutting the torn tail of %s: %d bytes from byte %d (%s); %s",
        problem.path,
        size - problem.position,
        problem.position,
        problem.describe(),
        "all zeros, nothing kept" if copy is None else f"the cut bytes are copied to {copy}",
    )
    return copy


@dataclass(frozen=True)
class LostSegment:
    """Offsets no segment holds, though a segment held them: an index file is left at
    ``base`` without its ``.log`` (deleted by hand, lost), after a segment that ends before
    it. Not a gap compaction leaves (a cleaned segment covers the offsets of the segments
    it replaced, and removes their index files), nor retention's or DeleteRecords' (they
    delete from the front: an index below the first segment is ignored)."""

    first: int  # the lost segment's base offset
    last: int | None  # the offset before the next segment's base (None: the log's end)
    evidence: str  # the index file left
    #: why the segment cannot be read when its ``.log`` is there but cannot be opened (a
    #: directory, no permission): then ``evidence`` is that ``.log``
    unreadable: str = ""

    def describe(self) -> str:
        upper = "the end of the log" if self.last is None else str(self.last)
        if self.unreadable:
            return (
                f"records unreadable: offsets {self.first} to {upper} are in "
                f"{os.path.basename(self.evidence)}, which cannot be read ({self.unreadable})"
            )
        return (
            f"records lost: offsets {self.first} to {upper} are in no segment, but "
            f"{os.path.basename(self.evidence)} is left of the segment that held them (its "
            ".log is missing: deleted by hand, or lost)"
        )

    def error(self, directory: str) -> DamagedLogError:
        if self.unreadable:
            return DamagedLogError(
                f"{self.describe()}; make it a readable file again (its permissions, or move "
                "what is there out of the partition directory and restore the segment)",
                path=self.evidence,
                position=0,
            )
        return DamagedLogError(
            f"{self.describe()}; `kafkalog repair {directory}` moves the leftover index files "
            "into a quarantine folder once the loss is accepted (nothing is deleted)",
            path=self.evidence,
            position=0,
        )

    def skipped(self) -> SkippedBytes:
        return SkippedBytes(self.evidence, 0, 0, self.describe(), self.first, self.last)

    def overlaps(self, lo: int, hi: int) -> bool:
        return self.first < hi and (self.last is None or self.last >= lo)


def shows_compaction(directory: str, compact_policy: bool = False) -> bool:
    """Whether a partition shows compaction, which explains offsets in no batch between two
    segments: a compact ``cleanup.policy`` the log was opened with, a topic Kafka always
    compacts, or an entry for the partition in its data directory's
    ``cleaner-offset-checkpoint`` (the cleaner has cleaned it). An unreadable checkpoint is no
    evidence either way (``verify`` names it)."""
    from kafkalog import files
    from kafkalog.log.cleaner_checkpoint import read_checkpoint
    from kafkalog.log.layout import parse_partition_dir

    if compact_policy:
        return True
    try:
        key = parse_partition_dir(directory)
    except ValueError:
        return False
    if key[0] in ("__consumer_offsets", "__transaction_state"):
        return True
    if files.is_remote(directory):
        return False
    try:
        return key in read_checkpoint(os.path.dirname(os.path.abspath(directory)))
    except (KafkalogError, OSError, ValueError):
        return False


def gap_between_segments(before: str, end: int, nxt: int) -> str:
    """What a read says of offsets [end, nxt) in no batch between the segment ``before`` and
    the one based at ``nxt``. Kafka's cleaner leaves such gaps in a compacted topic (a cleaned
    group keeps its first segment's base offset and may lose its last batches; a follower
    copies its leader's); in a topic never compacted they are records lost (a segment removed
    or emptied). Nothing in a partition directory tells the two apart for sure, so a read
    goes on across the gap, as Kafka's fetch does, and says it."""
    directory = os.path.dirname(before)
    return (
        f"{directory}: offsets {end}..{nxt - 1} ({nxt - end}) are in no batch between "
        f"{os.path.basename(before)} (its batches end before {end}) and "
        f"{os.path.basename(segment_file(directory, nxt, '.log'))}: records lost (a segment "
        "removed or emptied) unless the topic is compacted, and this directory shows no "
        "compaction (no cleaner-offset-checkpoint entry for it, no compact cleanup.policy); "
        "read on past them"
    )
