"""Tailing readers: follow a partition log as it grows, like a consumer's ``poll``.

A :class:`TailReader` starts at an offset or a timestamp (found through the indexes by a
read-only :class:`Log`), then reads the segment files itself: it keeps the current segment open
(a read-only descriptor, so retention deleting the file under it does not cut the read short),
``fstat``\\s it for new bytes, and hands out every whole batch's records, CRCs checked. A
batch still being written (fewer bytes than its length says) is left for the next poll. When
the segment stops growing it looks for the next one: first the file named after the next
offset (where a roll puts it), then, now and then, a directory listing (a roll to a later
offset, or retention having deleted segments the reader had not reached yet: it continues at
the first segment left, and counts the offsets it never saw in :attr:`TailReader.skipped`).

Writers in other processes wake nobody, so waiting is polling with a short backoff (0.2 ms
doubling to ``max_wait_ms``, 5 ms by default): an ``fstat`` per poll, so cheap that a reader
waiting a whole second costs ~200 system calls. The reader never writes, renames, locks or
``touch``\\es anything: it opens files ``O_RDONLY`` and reads them with ``pread``.

:class:`AsyncTailReader` is the same for ``asyncio``: ``await poll()`` and ``async for``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import time
from collections.abc import AsyncIterator, Iterator

from kafkalog.errors import BatchTooLargeError, CorruptRecordError, DamagedLogError, KafkalogError
from kafkalog.log import last_batch
from kafkalog.log.layout import (
    LOG_SUFFIX,
    SWAP_SUFFIX,
    is_segment_log,
    offset_from_filename,
    segment_file,
)
from kafkalog.log.log import Log
from kafkalog.log.segment import (
    cut_off_damage,
    first_offset_held,
    jumped_ahead,
    offset_order_problem,
    torn_absurd_entry,
)
from kafkalog.records import DEFAULT_LIMITS, Limits, LogReader, Record
from kafkalog.records.reader import LogEntry

_CHUNK = 1 << 20  # bytes read per pread when that many are there

logger = logging.getLogger("kafkalog.log")
_LIST_EVERY = 0.1  # seconds between directory listings while the log does not grow


def _unreadable(path: str, base: int, why: str) -> DamagedLogError:
    """A segment's ``.log`` that cannot be read, as a read of a :class:`Log` names it."""
    return DamagedLogError(
        f"records unreadable: offsets from {base} are in {os.path.basename(path)}, which "
        f"cannot be read ({why}); make it a readable file again",
        path=path,
        position=0,
    )


class OffsetOutOfRangeError(KafkalogError):
    """The start offset is not in the log (``on_gap="error"``)."""


class TailReader:
    """Follows one partition directory from ``start_offset`` (default: the log start) or the
    first record at or after ``start_timestamp``; ``from_end=True`` starts at the log end.

    ``on_gap`` says what a start offset below the log start means: ``"earliest"`` (start at
    the log start, as a consumer with ``auto.offset.reset=earliest``) or ``"error"``.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        start_offset: int | None = None,
        start_timestamp: int | None = None,
        from_end: bool = False,
        on_gap: str = "earliest",
        include_control: bool = False,
        max_wait_ms: float = 5.0,
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        if on_gap not in ("earliest", "error"):
            raise ValueError(f"on_gap is 'earliest' or 'error', not {on_gap!r}")
        self.directory = os.fspath(directory)
        self.include_control = include_control
        self.limits = limits
        self.max_wait = max_wait_ms / 1000
        self.skipped = 0
        """Offsets never seen because retention deleted them before this reader got there."""
        self._fd = -1
        self._base = -1  # the open segment's base offset (-1: none open yet)
        self._compacted: bool | None = None  # whether the directory shows compaction
        self._pos = 0  # where the next unread batch of the open segment starts
        self._last_in_segment = -1  # the last offset read from the open segment
        self._want = _CHUNK  # bytes to read next time (more when a batch is larger)
        self._listed = 0.0
        self._said_swap: set[str] = set()  # the .swap files a wait was said for
        self.position = self._find_start(start_offset, start_timestamp, from_end, on_gap)
        """The offset of the next record this reader returns."""

    # -- where to start --------------------------------------------------------------------------
    def _find_start(
        self, offset: int | None, timestamp: int | None, from_end: bool, on_gap: str
    ) -> int:
        try:
            log = Log(self.directory, writable=False, limits=self.limits)
        except FileNotFoundError:
            return 0 if offset is None else offset  # the writer has not made it yet
        try:
            if from_end:
                offset = log.log_end_offset
            elif timestamp is not None:
                found = log.offsets_for_times(timestamp)
                offset = log.log_end_offset if found is None else found.offset
            elif offset is None:
                offset = log.log_start_offset
            elif offset < log.log_start_offset:
                if on_gap == "error":
                    raise OffsetOutOfRangeError(
                        f"offset {offset} is below the log start offset {log.log_start_offset} "
                        f"of {self.directory}"
                    )
                self.skipped += log.log_start_offset - offset
                offset = log.log_start_offset
            seg = log.floor_segment(offset)
            if seg is not None:
                found_at = seg.translate_offset(offset) if offset > seg.base_offset else None
                self._open(seg.base_offset, found_at.position if found_at is not None else 0)
            return offset
        finally:
            log.close()

    def _open(self, base: int, position: int = 0) -> bool:
        """Switch to the segment at ``base``; False when its file is gone already."""
        path = segment_file(self.directory, base, LOG_SUFFIX)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return False
        except PermissionError as e:
            raise _unreadable(path, base, e.strerror or "no permission") from e
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)  # a directory by a segment's name: no bytes to read (as Log says it)
            raise _unreadable(path, base, "not a regular file")
        self._close_fd()
        self._fd, self._base, self._pos = fd, base, position
        self._last_in_segment = base - 1  # offsets only grow within a segment
        self._next_base: int | None = None  # the next segment's, once one exists
        return True

    def _find_next_base(self) -> int | None:
        later = [
            offset_from_filename(n)
            for n in os.listdir(self.directory)
            if is_segment_log(n) and offset_from_filename(n) > self._base
        ]
        return min(later) if later else None

    def _close_fd(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    # -- reading ---------------------------------------------------------------------------------
    def _read_open_segment(self, out: list[Record], max_records: int) -> None:
        """Append the records of the open segment's new whole batches to ``out``."""
        fd = self._fd
        if self._next_base is None:
            self._next_base = self._find_next_base()
        while len(out) < max_records:
            available = os.fstat(fd).st_size - self._pos
            if available <= 0:
                return
            data = os.pread(fd, min(available, self._want), self._pos)
            reader = LogReader(
                data,
                path=segment_file(self.directory, self._base, LOG_SUFFIX),
                verify_crc=True,
                limits=self.limits,
                base_position=self._pos,
            )
            try:
                for entry in reader:
                    # a base offset is outside the CRC: a flipped one shows only here, and
                    # would otherwise drop records in silence (as the log's own reads refuse)
                    wrong = offset_order_problem(entry, self._last_in_segment, self._base)
                    upper = self._next_base
                    if wrong is None and upper is not None and entry.last_offset >= upper:
                        wrong = (
                            f"non-consecutive offsets: the batch at byte {entry.position} "
                            f"holds offsets up to {entry.last_offset}, at or past the next "
                            f"segment's base offset {self._next_base}"
                        )
                    if wrong is None:
                        # a batch after it already read: a base offset that jumped ahead
                        # shows there, before its records are handed out (segment.entries)
                        wrong = _ahead_of_next(
                            entry, data, reader.base_position, self._last_in_segment
                        )
                    if (
                        wrong is None
                        and upper is None
                        and entry.position + entry.size_in_bytes >= os.fstat(fd).st_size
                        and not self._later_segment_exists()
                    ):
                        # the log's last batch: no batch or segment after it shows its base
                        # offset in line; judged by its segment's own evidence (last_batch)
                        wrong = last_batch.judge_files(
                            self.directory, self._base, entry, self._entries_between
                        )
                    if wrong is not None:
                        raise DamagedLogError.found(
                            wrong,
                            path=segment_file(self.directory, self._base, LOG_SUFFIX),
                            position=entry.position,
                            partition=self.directory,
                        )
                    self._last_in_segment = entry.last_offset
                    self._take(entry.records(self.limits), entry.is_control, out)
                    self.position = max(self.position, entry.next_offset)
                    self._pos = entry.position + entry.size_in_bytes
                    if len(out) >= max_records:
                        return
            except CorruptRecordError as e:
                if _zeros(data, self._pos - reader.base_position):
                    return  # preallocated space after the last batch: nothing more yet
                if isinstance(e, BatchTooLargeError) and torn_absurd_entry(
                    lambda p, n: os.pread(fd, n, p),
                    os.fstat(fd).st_size,
                    self._pos,
                    self._last_in_segment + 1,
                    not self._later_segment_exists(),
                    self.limits,
                    True,
                ):
                    return  # a torn tail whose size field reads absurd: the end of the log
                raise
            tail = reader.incomplete_tail
            if tail is None:
                self._want = _CHUNK
                continue
            if tail.declared_size is not None and tail.declared_size > len(data):
                self._want = tail.declared_size  # a batch larger than one chunk: read it whole
                if available > len(data):
                    continue
            # judged on the file as it is after the later segments were listed: an append in
            # flight when the bytes were read may have ended, and the log rolled, since
            later = self._later_segment_exists()
            size = os.fstat(fd).st_size
            declared = tail.declared_size
            if size > self._pos + available or (
                declared is not None and tail.position + declared <= size
            ):
                self._want = max(self._want, declared or 0)
                continue  # the batch is whole in the file now: read it
            # the segments' one rule: a batch cut off in a segment the log has rolled past, or
            # followed by valid batches, is damage (waiting for it would stop the reader here
            # for good); at the end of the last segment it is an append in flight
            why = cut_off_damage(
                lambda p, n: os.pread(fd, n, p),
                size,
                tail.position,
                self._last_in_segment + 1,
                not later,
                self.limits,
                True,
            )
            if why is not None:
                raise DamagedLogError.found(
                    f"a batch cut off ({tail.available} bytes there) {why}",
                    path=segment_file(self.directory, self._base, LOG_SUFFIX),
                    position=tail.position,
                    partition=self.directory,
                )
            return  # a batch still being written: the next poll reads it

    def _entries_between(self, start: int, end: int) -> list[LogEntry]:
        """The entries of the open segment between two byte positions (headers only)."""
        data = os.pread(self._fd, end - start, start)
        return list(LogReader(data, limits=self.limits, base_position=start))

    def _later_segment_exists(self) -> bool:
        return any(
            is_segment_log(n) and offset_from_filename(n) > self._base
            for n in os.listdir(self.directory)
        )

    def _take(self, records: list[Record], control: bool, out: list[Record]) -> None:
        if control and not self.include_control:
            return
        start = self.position
        if records and records[0].offset < start:
            records = [r for r in records if r.offset >= start]
        out.extend(records)

    def _next_segment(self) -> bool:
        """After the open segment's last byte: open the segment that follows it, if any.
        True only when another segment was opened (so a poll never spins on one).

        A segment opened from a listing may itself be empty (compaction empties segments, and
        Kafka before 0.10.1 kept them): the next call lists again at once instead of waiting
        out the listing interval, so one poll crosses any number of them, ``timeout=0``
        included. Offsets between the open segment and the next one are skipped records only
        when the open segment's file is gone from the listing (retention deleted it and maybe
        more); while it is still there, nothing lay between them (the offsets were compacted
        away)."""
        if self._fd >= 0 and self.position > self._base and self._open(self.position):
            return True
        now = time.monotonic()
        if self._fd >= 0 and now - self._listed < _LIST_EVERY:
            return False
        self._listed = now
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return False
        swaps = sorted(n for n in names if n.endswith(LOG_SUFFIX + SWAP_SUFFIX))
        if swaps:
            # a cleaner's swap under way (or one a crash left, which the writer's next open
            # completes): the segments it replaces may be gone from the listing already and
            # the cleaned one not in it yet; reading on past the gap would skip its records
            if swaps[0] not in self._said_swap:  # never a silent wait: once per file
                self._said_swap.add(swaps[0])
                logger.warning(
                    "kafkalog: %s: %s: the next segment is not read until the swap is "
                    "completed (a log cleaner's output; a writable open completes one a crash "
                    "left, as Kafka's loader does)",
                    self.directory,
                    swaps[0],
                )
            return False
        bases = sorted(offset_from_filename(n) for n in names if is_segment_log(n))
        if self._fd >= 0 and self._continue_in_cleaned(bases):
            return True
        open_one_listed = self._fd >= 0 and self._base in bases
        for base in bases:
            if base <= self._base:
                continue
            if self._fd >= 0:
                # the open segment may have grown just before the roll: finish it first
                size = os.fstat(self._fd).st_size
                if size > self._pos:
                    return False  # (the next poll reads it; a torn tail never ends a wait)
            if base > self.position:
                if not open_one_listed:
                    self.skipped += base - self.position  # deleted before it was read
                else:
                    self._check_not_lost(names, self.position, base)
                    self._say_gap(self.position, base)
                self.position = base
            if self._open(base):
                self._listed = 0.0  # it may be empty too: look for the next one at once
                return True
        if self._fd >= 0 and self._base in bases:
            self._check_not_lost(names, self.position, 2**63)  # the last segment lost?
        if self._fd < 0 and bases:
            # nothing open yet (the log was empty, or its start segment went): the segment
            # holding the position, else the first one after it
            floor = [b for b in bases if b <= self.position]
            base = floor[-1] if floor else bases[0]
            if base > self.position:
                self.skipped += base - self.position
                self.position = base
            if self._open(base):
                self._listed = 0.0  # as above: an empty one is crossed in the same poll
                return True
        return False

    def _say_gap(self, start: int, base: int) -> None:
        """Offsets [start, base) in no batch between the open segment and the next: said
        with a WARNING unless the directory shows compaction (as every reader of the log
        says it, see :func:`~kafkalog.log.damage.gap_between_segments`)."""
        from kafkalog.log.damage import gap_between_segments, shows_compaction

        if self._compacted is None:
            self._compacted = shows_compaction(self.directory)
        if not self._compacted:
            before = segment_file(self.directory, self._base, LOG_SUFFIX)
            logger.warning("kafkalog: %s", gap_between_segments(before, start, base))

    def _check_not_lost(self, names: list[str], start: int, end: int) -> None:
        """Offsets [start, end) between the open segment and the next are a compaction gap,
        unless an index file is left there without its ``.log``: a segment lost (see
        :class:`~kafkalog.log.damage.LostSegment`), which raises rather than pass in silence."""
        from kafkalog.log.damage import LostSegment

        listed = set(names)
        for n in sorted(names):
            stem, _, suffix = n.partition(".")
            if suffix not in ("index", "timeindex", "txnindex") or not stem.isdigit():
                continue
            if len(stem) == 20 and start <= int(stem) < end and stem + LOG_SUFFIX not in listed:
                if any(stem + LOG_SUFFIX + s in listed for s in (".deleted", ".cleaned", ".swap")):
                    continue
                lost = LostSegment(int(stem), end - 1, os.path.join(self.directory, n))
                raise lost.error(self.directory)

    def _continue_in_cleaned(self, bases: list[int]) -> bool:
        """After the open segment's last byte: when the segment that now holds the position is
        another file than the one read (a cleaner's swap put a cleaned segment in for the open
        one, or for it and the ones after it: their records from the position on are in it),
        continue in that segment at the position (its offset index says where to start; the
        records before the position are dropped as read already)."""
        floor = [b for b in bases if b <= self.position]
        if not floor:
            return False
        base = floor[-1]
        path = segment_file(self.directory, base, LOG_SUFFIX)
        try:
            listed = os.stat(path)
        except FileNotFoundError:
            return False
        mine = os.fstat(self._fd)
        if (listed.st_dev, listed.st_ino) == (mine.st_dev, mine.st_ino):
            return False  # still the segment read: nothing was swapped in for it
        return self._open(base, _index_position(path, base, self.position))

    def poll(self, timeout: float = 0.0, max_records: int = 500) -> list[Record]:
        """The next records (at most ``max_records``), waiting up to ``timeout`` seconds for
        the first one; ``[]`` when none came in time."""
        deadline = time.monotonic() + timeout
        wait = 0.0002
        out: list[Record] = []
        while True:
            if self._fd >= 0:
                self._read_open_segment(out, max_records)
            if out:
                return out
            if self._next_segment():
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return out
            time.sleep(min(wait, remaining))
            wait = min(wait * 2, self.max_wait)

    def __iter__(self) -> Iterator[Record]:
        """Every record from the start, waiting for new ones forever."""
        while True:
            yield from self.poll(timeout=3600.0)

    def close(self) -> None:
        self._close_fd()

    def __enter__(self) -> TailReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self._close_fd()


def _index_position(log_path: str, base: int, offset: int) -> int:
    """Where a scan for ``offset`` starts in a segment, from its offset index read-only (0
    when there is none or it cannot be read: the scan is longer, never wrong)."""
    from kafkalog.index import OffsetIndex

    index_path = log_path[: -len(LOG_SUFFIX)] + ".index"
    try:
        size = os.path.getsize(log_path)
        with OffsetIndex(index_path, base, writable=False) as index:
            return int(index.lookup_within(offset, size).position)
    except (KafkalogError, OSError, ValueError):
        return 0


def _zeros(data: bytes, start: int) -> bool:
    """Nothing but zero bytes from ``start`` (at least a length field's worth)."""
    rest = data[start:]
    return len(rest) >= 12 and not rest.strip(b"\x00")


class AsyncTailReader:
    """:class:`TailReader` for ``asyncio``: the waiting is ``await asyncio.sleep``, so other
    tasks run meanwhile; reading a batch happens on the event loop (it is a ``pread`` and a
    decode, microseconds)."""

    def __init__(self, directory: str | os.PathLike[str], **options: object) -> None:
        self.reader = TailReader(directory, **options)  # type: ignore[arg-type]

    @property
    def position(self) -> int:
        return self.reader.position

    async def poll(self, timeout: float = 0.0, max_records: int = 500) -> list[Record]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        wait = 0.0002
        while True:
            out = self.reader.poll(0.0, max_records)
            remaining = deadline - loop.time()
            if out or remaining <= 0:
                return out
            await asyncio.sleep(min(wait, remaining))
            wait = min(wait * 2, self.reader.max_wait)

    async def __aiter__(self) -> AsyncIterator[Record]:
        while True:
            for record in await self.poll(timeout=3600.0):
                yield record

    def close(self) -> None:
        self.reader.close()

    async def __aenter__(self) -> AsyncTailReader:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


def _ahead_of_next(entry: LogEntry, data: bytes, start: int, previous: int) -> str | None:
    """Why ``entry`` (in ``data``, bytes of the segment from byte ``start``, after entries
    ending at offset ``previous``) is out of line with the entry that follows it in ``data``,
    when that entry is in line with ``previous`` and ``entry``'s span fits there
    (:func:`~kafkalog.log.segment.held_is_damaged`), or None."""
    at = entry.position + entry.size_in_bytes - start
    if at + 27 > len(data):
        return None
    following = int.from_bytes(data[at : at + 8], "big", signed=True)
    if data[at + 16] != 2 and data[at + 17] & 0x07:
        # a compressed v0/v1 wrapper's offset is its last: its first is inside it
        try:
            following = first_offset_held(next(iter(LogReader(data[at:], strict_tail=True))))
        except (KafkalogError, StopIteration):
            return None  # not whole yet, or damaged: its own turn tells
    first = first_offset_held(entry)
    return jumped_ahead(entry.position, first, entry.last_offset, previous, following)
