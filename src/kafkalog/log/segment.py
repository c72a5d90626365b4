"""One log segment: a ``.log`` of batches with its lazy ``.index``/``.timeindex`` and its
``.txnindex``, behaving as Kafka's LogSegment does (spec §6).

The ``.log`` is read with ``pread`` in chunks rather than mapped: a segment that is truncated while
a mapping of it is alive would kill the process with SIGBUS on the next touch, and a live broker's
active segment is appended to (and occasionally truncated) under our feet.

A segment's ``close`` (and ``close_handlers``, and ``delete_if_exists``, which a delayed
deletion runs) is final: every later read or write raises :class:`~kafkalog.errors.ClosedError`
naming the file. Reads in other threads that are inside a ``pread`` finish first, and none
starts after, so a descriptor number is never read once it may name another file.
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, TypeVar

from kafkalog import files
from kafkalog.errors import (
    BatchTooLargeError,
    ClosedError,
    CorruptRecordError,
    DamagedLogError,
    IndexOffsetOverflowError,
    KafkalogError,
    ReadOnlyError,
)
from kafkalog.index import (
    AbortedTxn,
    LazyIndex,
    OffsetIndex,
    TimeIndex,
    TimestampOffset,
    TransactionIndex,
)
from kafkalog.index.base import INT32_MAX
from kafkalog.index.offset_index import OffsetPosition
from kafkalog.log import last_batch
from kafkalog.log.batch_indexer import BatchIndexer
from kafkalog.log.index_interval import entry_due
from kafkalog.log.layout import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    segment_file,
)
from kafkalog.log.producer_state import ProducerStateManager
from kafkalog.log.verified import VerifiedRanges
from kafkalog.records import LegacyEntry, LogReader, RecordBatch
from kafkalog.records.batch import batch_at
from kafkalog.records.reader import IncompleteTail, LogEntry
from kafkalog.records.resync import next_valid_entry
from kafkalog.records.types import DEFAULT_LIMITS, Limits

_CHUNK = 4 * 1024 * 1024
_FIRST_CHUNK = 64 * 1024
_UNKNOWN = TimestampOffset(-1, -1)
_I = TypeVar("_I", OffsetIndex, TimeIndex)
_pwrite = os.pwrite
_new_tuple = tuple.__new__  # TimestampOffset(a, b) without its Python-level __new__

_logger = logging.getLogger("kafkalog.log")


class BatchRun(NamedTuple):
    """Batches back to back with what :meth:`LogSegment.append_run` needs of each (numpy
    arrays, one element per batch), already checked and with their offsets stamped."""

    data: memoryview
    positions: Any
    sizes: Any
    last_offsets: Any
    max_timestamps: Any
    max_batch: int  # the largest batch the topic accepts (a larger one takes the general path)


class SegmentOverflowError(IndexOffsetOverflowError):
    """An append whose offsets do not fit this segment's 32-bit relative offsets."""


class SegmentFullError(KafkalogError, ValueError):
    """An append that would grow a ``.log`` past 2^31-1 bytes, which its 32-bit positions (and
    Kafka's FileRecords) cannot address: the segment must be rolled first."""


class SegmentConfig(Protocol):
    """What a segment needs of the topic configuration (``kafkalog.log.config.TopicConfig``)."""

    @property
    def segment_bytes(self) -> int: ...

    @property
    def segment_index_bytes(self) -> int: ...

    @property
    def index_interval_bytes(self) -> int: ...

    @property
    def preallocate(self) -> bool: ...

    @property
    def max_segment_ms(self) -> int: ...

    def random_segment_jitter(self, rng: random.Random | None = None) -> int: ...


class LogOffsetPosition(NamedTuple):
    """Where a batch is: its last offset, start position and size (Kafka's translateOffset)."""

    offset: int
    position: int
    size: int


@dataclass(frozen=True)
class FileRegion:
    """A range of a segment file that has not been read: :meth:`read` copies it; a server sends
    it with ``sendfile`` from :meth:`SegmentFile.duplicate_fd` (Kafka's zero-copy fetch)."""

    file: SegmentFile
    position: int
    length: int

    def read(self) -> bytes:
        return self.file.read(self.position, self.length)

    def __len__(self) -> int:
        return self.length


@dataclass(frozen=True)
class FetchData:
    """What :meth:`LogSegment.read` returns: where reading started and the raw bytes."""

    start_offset: int
    segment_base_offset: int
    position: int
    records: bytes | FileRegion
    first_entry_incomplete: bool = False


class TimestampAndOffset(NamedTuple):
    timestamp: int
    offset: int
    leader_epoch: int | None


@dataclass(frozen=True)
class RollParams:
    max_segment_ms: int
    max_segment_bytes: int
    max_timestamp_in_messages: int
    max_offset_in_messages: int
    messages_size: int
    now: int


class TxnState(ProducerStateManager):
    """A producer state held in memory only (no snapshot files): what :meth:`LogSegment.recover`
    needs to rebuild ``.txnindex`` entries when it recovers segments one after another (spec
    §5.1, §6.5). Kept for callers that recover segments by hand; the log's loader passes its
    :class:`ProducerStateManager` rebuilt up to each segment's base offset."""

    def __init__(self) -> None:
        super().__init__("", writable=False)

    @property
    def ongoing(self) -> dict[int, int]:
        """Open transactions: producer id -> first offset."""
        return self.ongoing_transactions()


class SegmentFile:
    """The ``.log`` file: a logical size, appends at the end, reads at any position."""

    def __init__(
        self,
        path: str,
        writable: bool,
        *,
        exists: bool,
        init_size: int = 0,
        preallocate: bool = False,
        listed_size: int | None = None,
    ) -> None:
        self.path = path
        self.writable = writable
        self._reader: files.ReadHandle | None = None
        self._users = files.HandleUsers()  # reads in flight, so that close waits for them
        self.fd = -1
        # the byte ranges whose whole batches a fetch found valid (log/verified.py): only for
        # a file this process writes (another writer may rewrite bytes between two looks)
        self.verified: VerifiedRanges | None = VerifiedRanges() if writable else None
        if not writable and listed_size is not None:
            # the size came with the directory listing: open on the first read, so opening a
            # log of many segments in an object store costs one listing, not a request each
            self.size = listed_size
        elif writable:
            flags = os.O_RDWR | (0 if exists else os.O_CREAT | os.O_EXCL)
            self.fd = os.open(path, flags, 0o644)
            if not exists and preallocate and init_size > 0:
                os.ftruncate(self.fd, init_size)
                self.size = 0
            else:
                self.size = os.fstat(self.fd).st_size
        else:
            self._reader = files.open_read(path)  # a local file or a pyarrow.fs URI
            self.size = self._reader.size()
        if self.size > 2**31 - 1:
            raise CorruptRecordError(
                f"segment file of {self.size} bytes is larger than Kafka allows (2 GiB)",
                path=path,
            )

    @property
    def closed(self) -> bool:
        return self._users.closed

    def refresh(self) -> int:
        """Re-read the length of a file another process appends to (read-only segments)."""
        if not self.writable:
            self._users.enter(self.path)
            try:
                self.size = self._handle().size()
            finally:
                self._users.leave()
        return self.size

    def _handle(self) -> files.ReadHandle:
        if self._reader is None:
            self._reader = files.open_read(self.path)
        return self._reader

    def read(self, position: int, length: int) -> bytes:
        users = self._users
        if users.closed:
            raise ClosedError(self.path)
        length = max(0, min(length, self.size - position))
        if not length:
            return b""
        users.enter(self.path)
        try:
            if self.fd >= 0:
                return os.pread(self.fd, length, position)
            return self._handle().pread(length, position)
        finally:
            users.leave()

    def read_into(self, buffer: memoryview, position: int) -> int:
        """Fill ``buffer`` from ``position`` (up to the logical end); the bytes read."""
        users = self._users
        if users.closed:
            raise ClosedError(self.path)
        length = max(0, min(len(buffer), self.size - position))
        if not length:
            return 0
        users.enter(self.path)
        try:
            if self.fd >= 0:
                done = 0
                while done < length:
                    n = os.preadv(self.fd, [buffer[done:length]], position + done)
                    if n <= 0:
                        break
                    done += n
                return done
            return self._handle().pread_into(buffer[:length], position)
        finally:
            users.leave()

    def cut_short(self, position: int) -> DamagedLogError:
        """The file ends at ``position``, before the size the open log holds (cut by something
        else while open): an error naming the byte, never a walk that waits for bytes that will
        not come."""
        return DamagedLogError.found(
            f"the file ends at byte {position}, short of the {self.size} bytes the open log "
            "holds (it was cut while open)",
            path=self.path,
            position=position,
            partition=os.path.dirname(self.path),
        )

    def region(self, position: int, length: int) -> FileRegion:
        """Bytes [position, position + length) of this file (cut at the logical end), not read:
        a fetch sends them to a socket without copying them through Python."""
        return FileRegion(self, position, max(0, min(length, self.size - position)))

    def duplicate_fd(self) -> int:
        """A new descriptor of this local file that the caller owns and must close (-1 for a
        file read through ``pyarrow.fs``): a ``sendfile`` that outlives an ``await`` uses it,
        so closing the segment meanwhile (retention, shutdown) neither waits for it nor hands
        its number to another file."""
        users = self._users
        users.enter(self.path)
        try:
            return os.dup(self.fd) if self.fd >= 0 else -1
        finally:
            users.leave()

    def identity(self) -> tuple[int, int] | None:
        """Which file (device, inode) this segment holds open: the one its sizes and positions
        describe, even once retention deleted it or the cleaner swapped another in under its
        name (a ``stat`` of the path would then fail, or name the other file). None for a
        remote store."""
        users = self._users
        users.enter(self.path)
        try:
            if self.fd >= 0:
                st = os.fstat(self.fd)
                return st.st_dev, st.st_ino
            return self._handle().identity()
        finally:
            users.leave()

    def read_handle(self) -> files.ReadHandle:
        """This file as a :class:`~kafkalog.files.ReadHandle` that reads through
        :meth:`read` (so it stops with ClosedError when the segment is closed); closing the
        handle leaves the file open."""
        return _SegmentReadHandle(self)

    def append(self, data: bytes | bytearray | memoryview) -> None:
        """Write ``data`` (bytes-like) at the logical end, which moves only once every byte is
        in: a reader takes the size as the end of whole batches. One ``pwrite`` in the usual
        case, with no view made (every append comes through here)."""
        size = len(data)
        written = _pwrite(self.fd, data, self.size)
        while written < size:
            written += _pwrite(self.fd, memoryview(data)[written:], self.size + written)
        self.size += size

    def truncate_to(self, size: int) -> int:
        """Cut the logical (and physical) size to ``size``; returns the bytes removed."""
        if size < 0 or size > self.size:
            raise ValueError(f"cannot truncate {self.path} of {self.size} bytes to {size}")
        removed = self.size - size
        if os.fstat(self.fd).st_size > size:
            os.ftruncate(self.fd, size)
        self.size = size
        if self.verified is not None:
            self.verified.cut(size)  # bytes appended here next are new: check them again
        return removed

    def trim(self) -> None:
        if self.writable and os.fstat(self.fd).st_size > self.size:
            os.ftruncate(self.fd, self.size)

    def flush(self) -> None:
        if self.writable:
            os.fsync(self.fd)

    def close(self) -> None:
        if self.fd >= 0 and not self._users.closed:
            self.flush()
            self.trim()
        self.close_handle()

    def close_handle(self) -> None:
        """Release the file without flushing (a segment about to be deleted or renamed), once
        the reads in flight in other threads are done; later reads raise ClosedError."""
        self._users.close()
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def entries(
        self,
        start: int = 0,
        end: int | None = None,
        *,
        limits: Limits = DEFAULT_LIMITS,
        verify_crc: bool = False,
        tail: list[IncompleteTail | None] | None = None,
    ) -> Iterator[LogEntry]:
        """Walk the entries from ``start`` (an entry boundary) in chunks, positions in file terms.

        A cut-off last entry ends the walk (Kafka's rule); ``tail`` receives it, if given.
        """
        stop = self.size if end is None else min(end, self.size)
        pos = start
        want = _FIRST_CHUNK  # most walks (lookups) stop within a batch or two: read small first
        while pos < stop:
            asked = min(want, stop - pos)
            chunk = self.read(pos, asked)
            if len(chunk) < asked:
                raise self.cut_short(pos + len(chunk))
            reader = LogReader(
                chunk, path=self.path, limits=limits, verify_crc=verify_crc, base_position=pos
            )
            yield from reader
            cut = reader.incomplete_tail
            if cut is None:
                if pos + len(chunk) >= stop:
                    return
                # the chunk ended exactly on an entry boundary: carry on after it
                pos = reader.end_position
                want = min(want * 4, _CHUNK)
                continue
            if pos + len(chunk) >= stop:
                if tail is not None:
                    tail.append(cut)
                return
            if cut.position == pos:  # one entry larger than the chunk: read it whole
                want = max(want * 2, cut.declared_size or 0)
            else:
                want = min(want * 4, _CHUNK)
            pos = cut.position


class _SegmentReadHandle:
    """A :class:`SegmentFile` read by position as :func:`files.open_read` handles are."""

    __slots__ = ("_file",)

    def __init__(self, file: SegmentFile) -> None:
        self._file = file

    def size(self) -> int:
        return self._file.size

    def pread(self, length: int, position: int) -> bytes:
        return self._file.read(position, length)

    def pread_into(self, buffer: memoryview, position: int) -> int:
        return self._file.read_into(buffer, position)

    def identity(self) -> tuple[int, int] | None:
        return None

    def close(self) -> None:
        pass  # the file is the segment's


def wrapper_inner_offsets(entry: LogEntry) -> tuple[int, int] | None:
    """A compressed v0/v1 wrapper's first and last inner offsets, decompressed once, as Kafka's
    ``baseOffset()`` reads them (the wrapper's own offset field is its last, outside the CRC:
    moved, it moves every inner offset of a v1 wrapper with it); None for any other entry, or
    a wrapper that cannot be decompressed (damage its reader reports)."""
    if not isinstance(entry, LegacyEntry) or not entry.compression_id:
        return None
    try:
        inner = entry.inner_entries()
    except KafkalogError:
        return None
    return inner[0].offset, inner[-1].offset


def first_offset_held(entry: LogEntry) -> int:
    """The first offset ``entry`` holds: a v2 batch's base offset, a compressed v0/v1
    wrapper's first inner message's (:func:`wrapper_inner_offsets`), else its own offset."""
    return _first_held(entry, wrapper_inner_offsets(entry))


def _first_held(entry: LogEntry, inner: tuple[int, int] | None) -> int:
    if inner is not None:
        return inner[0]
    return entry.base_offset if isinstance(entry, RecordBatch) else entry.last_offset


def wrapper_offset_problem(entry: LogEntry, inner: tuple[int, int] | None) -> str | None:
    """A compressed v0/v1 wrapper's offset field (outside its CRC) must be its last inner
    message's (``inner``: :func:`wrapper_inner_offsets`), as Kafka writes it: a v0 wrapper's
    inner offsets are absolute (inside the CRC), so a moved field shows against them, and the
    log's end would be wrong after it."""
    if inner is None or inner[1] == entry.last_offset:
        return None
    return (
        f"non-consecutive offsets: the message set at byte {entry.position} holds inner "
        f"offsets {inner[0]}..{inner[1]}, but its own offset field (outside the CRC) reads "
        f"{entry.last_offset}"
    )


def offset_order_problem(entry: LogEntry, previous_last: int, segment_base: int) -> str | None:
    """What is wrong with the offsets of ``entry`` after an entry ending at ``previous_last``
    in a segment starting at ``segment_base`` (None when nothing is): offsets only grow, and
    none is below the segment's base. A base offset is not covered by the batch's CRC, so a
    flipped byte there is found only this way (gaps are fine: compaction leaves them)."""
    last = entry.last_offset
    inner = wrapper_inner_offsets(entry)  # a wrapper decompressed once for both checks
    first = _first_held(entry, inner)
    if first > previous_last and last >= first and first >= segment_base:
        return wrapper_offset_problem(entry, inner)
    return (
        f"non-consecutive offsets: the batch at byte {entry.position} holds offsets "
        f"{first}..{last} after one ending at offset {previous_last} (segment base "
        f"{segment_base})"
    )


def held_is_damaged(held: LogEntry, entry: LogEntry, before_held: int, segment_base: int) -> bool:
    """Of two entries out of line (``entry`` right after ``held``, offsets not growing), whether
    ``held`` is the damaged one, not ``entry``. A base offset is outside the batch CRC, but a
    batch's span (its last offset delta) is inside it: ``held`` is to blame only when
    ``entry`` is in line with the entries before ``held`` (ending at ``before_held``) and
    ``held``'s span fits between them, where its true offsets must lie. A base offset flipped
    a little lower overlaps the batch before it and leaves no room for that batch's span, so
    it is ``entry`` that is out of line, not the good batch before it."""
    if offset_order_problem(entry, before_held, segment_base) is not None:
        return False
    return span_fits(
        first_offset_held(held), held.last_offset, first_offset_held(entry), before_held
    )


def span_fits(held_first: int, held_last: int, next_first: int, before_held: int) -> bool:
    """Whether an entry holding ``held_first..held_last`` (the span is inside the CRC, only
    the start may be wrong) fits between the entries around it, ending at ``before_held`` and
    starting at ``next_first``: :func:`held_is_damaged`'s test, on header fields."""
    return next_first - before_held - 1 > held_last - held_first


def jumped_ahead(position: int, first: int, last: int, before: int, following: int) -> str | None:
    """Why the entry at byte ``position`` holding ``first..last`` (after entries ending at
    ``before``) is the one out of line with the entry after it, which starts at offset
    ``following``: that one is in line with the entries before and this one's span fits under
    it (:func:`held_is_damaged`, on header fields: for readers that see the next entry's
    header only); None when it is not."""
    if not before < following <= last or not span_fits(first, last, following, before):
        return None
    return (
        f"non-consecutive offsets: the batch at byte {position} holds offsets {first}..{last}, "
        f"past the batch after it (offsets from {following}): its base offset (outside the "
        "batch CRC) is wrong"
    )


def cut_off_damage(
    read: Callable[[int, int], bytes],
    size: int,
    position: int,
    expected_offset: int | None,
    is_last: bool,
    limits: Limits,
    crc_checked: bool = False,
) -> str | None:
    """Why bytes of a ``.log`` (read by ``read(position, length)``, ``size`` long) that stop
    being whole, valid batches at ``position`` are damage, or None when they are the end of
    the log: what a crash leaves of the last append (or an append still in flight), found
    only in a log's last segment, looking like a torn write (zeros, a header too short to
    tell, or an entry starting at the offset the log goes on from: a ``.log`` of garbage or a
    length flipped in the middle is not that), with no valid batch after it. The one rule
    every reader of a segment applies (object walks, columnar reads, TailReader)."""
    if not is_last:
        return "in a segment that is not its log's last (later segments follow it)"
    head = read(position, 4096)
    # after whole batches whose CRCs were checked a crash can leave any bytes (the page of a
    # torn write holds what was there before); at a segment's first byte, or after batches
    # read without their CRCs (a damaged one may have put the walk out of step), a header
    # that is neither zeros nor the next offset is no append's
    strict = position == 0 or not crc_checked
    if strict and len(head) >= 8 and any(head) and expected_offset is not None:
        offset = int.from_bytes(head[:8], "big", signed=True)
        if not expected_offset <= offset < expected_offset + 2**31:
            return "with a header no append can have left (neither zeros nor the next offset)"
    after = next_valid_entry(read, size, position + 1, limits)
    if after is not None:
        return f"with a valid batch after it at byte {after}"
    return None


def _jumped_ahead(held: LogEntry, entry: LogEntry) -> str:
    first, then = first_offset_held(held), first_offset_held(entry)
    return (
        f"non-consecutive offsets: the batch at byte {held.position} holds offsets "
        f"{first}..{held.last_offset}, past the batch after it at byte {entry.position} "
        f"(offsets from {then}): its base offset (outside the batch CRC) is wrong"
    )


def torn_absurd_entry(
    read: Callable[[int, int], bytes],
    size: int,
    position: int,
    expected_offset: int | None,
    is_last: bool,
    limits: Limits,
    crc_checked: bool = False,
) -> bool:
    """Whether the entry at ``position``, whose size field reads larger than any batch, is a
    torn tail: it claims more bytes than the file holds (a size that fits in the file is a
    batch no writer can have written, damage) and :func:`cut_off_damage` finds nothing against
    it (the last segment, nothing valid after it). A crash can leave any bytes after the last
    whole batch, a size field reading 2 GB among them (Kafka's recovery cuts them)."""
    head = read(position, 12)
    if len(head) < 12:
        return False
    declared = int.from_bytes(head[8:12], "big", signed=True) + 12
    if position + declared <= size:
        return False
    why = cut_off_damage(read, size, position, expected_offset, is_last, limits, crc_checked)
    return why is None


class LogSegment:
    """A segment of a partition log (Kafka's LogSegment)."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        base_offset: int,
        config: SegmentConfig,
        *,
        writable: bool = True,
        file_already_exists: bool = False,
        suffix: str = "",
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        limits: Limits = DEFAULT_LIMITS,
        listed_size: int | None = None,
    ) -> None:
        self.directory = os.fspath(directory)
        self.base_offset = base_offset
        self.config = config
        self.writable = writable
        self.limits = limits
        self._clock = clock
        self.index_interval_bytes = config.index_interval_bytes
        # (no generator seeded per segment: without segment.jitter.ms none is drawn, and with it
        # the module's own draws as well; seeding one cost a tenth of a read-only open)
        self.roll_jitter_ms = config.random_segment_jitter(rng)
        exists = file_already_exists or not writable
        self.log = SegmentFile(
            segment_file(directory, base_offset, LOG_SUFFIX + suffix),
            writable,
            exists=exists,
            init_size=config.segment_bytes,
            preallocate=config.preallocate,
            listed_size=listed_size,
        )
        index_size = config.segment_index_bytes
        self.offset_index: LazyIndex[OffsetIndex] = LazyIndex(
            segment_file(directory, base_offset, INDEX_SUFFIX + suffix),
            base_offset,
            OffsetIndex,
            index_size,
            writable,
        )
        self.time_index: LazyIndex[TimeIndex] = LazyIndex(
            segment_file(directory, base_offset, TIME_INDEX_SUFFIX + suffix),
            base_offset,
            TimeIndex,
            index_size,
            writable,
        )
        self.txn_index = TransactionIndex(
            segment_file(directory, base_offset, TXN_INDEX_SUFFIX + suffix),
            base_offset,
            writable=writable,
        )
        self.bytes_since_last_index_entry = 0
        # whether this is its log's last segment (kept by the SegmentSet that holds it): only
        # there may the bytes end in a batch cut off (an append in flight, a crash's torn tail)
        self.is_last = True
        # the next segment's base offset (None for the last): every offset here is below it
        # (kept by the segment set, as ``is_last``)
        self.next_base: int | None = None
        # the next base its last batch was found to end below (LocalLog's reads check it once)
        self.end_checked_for: int | None = None
        # the last judgement of the log's last batch (end_problem), by entry and file size
        self._end_problem: tuple[tuple[int, int, int, int], str | None] | None = None
        self._max_ts_and_offset = _UNKNOWN
        self.rolling_based_timestamp: int | None = None
        self.created = self._now_ms()
        self._closed = False

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    # -- index access (read-only segments may lack index files: lookups then start at 0) -------
    def _offset_index(self) -> OffsetIndex | None:
        return self._index_if_present(self.offset_index)

    def _time_index(self) -> TimeIndex | None:
        return self._index_if_present(self.time_index)

    def _index_if_present(self, lazy: LazyIndex[_I]) -> _I | None:
        """The index, or None for a read-only segment without the file; the file is looked
        for until it is loaded, not on every lookup (a request each on an object store).
        Never opened (a writable one: created) once the segment is closed."""
        if self._closed:
            raise ClosedError(lazy.path)
        if not self.writable and not lazy.is_loaded and not files.exists(lazy.path):
            return None
        return lazy.get()

    def _require_writable(self, what: str) -> None:
        if not self.writable:
            raise ReadOnlyError(f"cannot {what} {self.log.path}: the segment was opened read-only")
        if self._closed:
            raise ClosedError(self.log.path, what)

    @property
    def closed(self) -> bool:
        return self._closed

    # -- sizes and timestamps -------------------------------------------------------------------
    @property
    def size(self) -> int:
        return self.log.size

    def refresh(self) -> int:
        """Pick up bytes another process appended (read-only segments of a live broker)."""
        return self.log.refresh()

    def _read_max_ts_and_offset(self) -> TimestampOffset:
        if self._max_ts_and_offset == _UNKNOWN:
            index = self._time_index()
            self._max_ts_and_offset = (
                index.last_entry if index is not None else TimestampOffset(-1, self.base_offset)
            )
            if not self.writable and index is not None:
                # a live segment's time index lags its log: include the batches after it
                self._max_ts_and_offset = self._read_largest_timestamp()
        return self._max_ts_and_offset

    @property
    def max_timestamp_so_far(self) -> int:
        return self._read_max_ts_and_offset().timestamp

    @property
    def shallow_offset_of_max_timestamp_so_far(self) -> int:
        return self._read_max_ts_and_offset().offset

    @property
    def largest_record_timestamp(self) -> int | None:
        ts = self.max_timestamp_so_far
        return ts if ts >= 0 else None

    @property
    def largest_timestamp(self) -> int:
        """Max record timestamp, else the ``.log`` mtime in ms (Kafka's fallback, spec §6.3)."""
        ts = self.max_timestamp_so_far
        return ts if ts >= 0 else self.last_modified

    @property
    def last_modified(self) -> int:
        if self._closed:
            raise ClosedError(self.log.path)
        return files.mtime_ms(self.log.path)

    def set_last_modified(self, ms: int) -> None:
        self._require_writable("touch")
        ns = ms * 1_000_000
        for path in (self.log.path, self.offset_index.path, self.time_index.path):
            if os.path.exists(path):
                os.utime(path, ns=(ns, ns))

    # -- appending -------------------------------------------------------------------------------
    def append(
        self,
        largest_offset: int,
        largest_timestamp: int,
        shallow_offset_of_max_timestamp: int,
        records: bytes | memoryview,
    ) -> None:
        """Append already-valid batches; index them per ``index.interval.bytes`` (spec §6.2)."""
        self._require_writable("append to")
        size = len(records)
        if size == 0:
            return
        position = self.log.size
        if size > INT32_MAX - position:
            # Kafka's FileRecords.append guard (try_append never gets here: segment.bytes is
            # an int, so its own size check sends such an append down this path)
            raise SegmentFullError(
                f"append of {size} bytes is too large for segment {self.log.path} with its "
                f"current file position at {position}: a .log may not exceed {INT32_MAX} bytes"
            )
        if position == 0:
            self.rolling_based_timestamp = largest_timestamp
        offset_index = self.offset_index.get()
        if not offset_index.can_append_offset(largest_offset):
            raise SegmentOverflowError(
                f"offset {largest_offset} does not fit segment {self.log.path} "
                f"(base offset {self.base_offset}); roll a new segment first"
            )
        self.log.append(records)
        if largest_timestamp > self.max_timestamp_so_far:
            self._max_ts_and_offset = TimestampOffset(
                largest_timestamp, shallow_offset_of_max_timestamp
            )
        due, since = entry_due(self.bytes_since_last_index_entry, size, self.index_interval_bytes)
        if due:
            offset_index.append(largest_offset, position)
            latest = self._max_ts_and_offset
            self.time_index.get().maybe_append(latest.timestamp, latest.offset)
        self.bytes_since_last_index_entry = since

    def try_append(
        self,
        records: bytearray | memoryview,
        largest_offset: int,
        largest_timestamp: int,
        shallow_offset_of_max_timestamp: int,
        segment_bytes: int,
        max_segment_ms: int,
        clock: Callable[[], float],
    ) -> bool:
        """:meth:`can_take` and :meth:`append` in one call for the usual append (no roll, both
        indexes open with room); False, with nothing touched, whenever anything is unusual,
        and the caller takes the general path, which decides and raises exactly as before.

        The roll age is :meth:`time_waited_for_roll`'s: the records' time since the segment's
        first batch, or, when that batch had no timestamp (-1, which Kafka accepts and keeps),
        the wall-clock age of the segment by ``clock`` (the log's, the one the general path's
        roll decision reads), read only then. Without the second case every append to a
        segment begun by a -1 batch took the general path (~30 us against ~5 us).

        It exists because the general pair costs ~2 us of calls per append against ~8 us for
        the ``write`` itself. When :func:`~kafkalog.log.index_interval.entry_due` gives the
        append index entries, the indexes are asked first whether they take them
        (:meth:`OffsetIndex.accepts`, :meth:`TimeIndex.accepts`), the ``.log`` is written, and
        the entries go in without the checks made again; without entries, only whether they
        have room (a full index means a roll). Tests compare the files with the general
        path's.
        """
        log = self.log
        position = log.size
        size = len(records)
        based = self.rolling_based_timestamp
        if not position or position + size > segment_bytes or based is None:
            return False
        if based >= 0:
            if largest_timestamp - based > max_segment_ms - self.roll_jitter_ms:
                return False
        elif int(clock() * 1000) - self.created > max_segment_ms - self.roll_jitter_ms:
            return False
        oindex = self.offset_index.loaded  # not opened here: the general path decides that
        tindex = self.time_index.loaded
        current = self._max_ts_and_offset
        if oindex is None or tindex is None or current == _UNKNOWN:
            return False
        latest = (
            _new_tuple(TimestampOffset, (largest_timestamp, shallow_offset_of_max_timestamp))
            if largest_timestamp > current[0]
            else current
        )
        due, since = entry_due(self.bytes_since_last_index_entry, size, self.index_interval_bytes)
        if due:
            ts, ts_offset = latest
            if not (oindex.accepts(largest_offset, position) and tindex.accepts(ts, ts_offset)):
                return False
            log.append(records)
            oindex.append_accepted(largest_offset, position)
            tindex.maybe_append_accepted(ts, ts_offset)
        elif oindex.has_room_for(largest_offset) and tindex.has_room():
            log.append(records)
        else:
            return False
        self.bytes_since_last_index_entry = since
        self._max_ts_and_offset = latest
        return True

    def append_run(self, run: BatchRun, first: int, segment_bytes: int, max_segment_ms: int) -> int:
        """Append as many of ``run``'s batches from ``first`` on as :meth:`try_append` would
        take one at a time, in one write, with the index entries those appends would have
        made; returns how many (0 when the first needs the general path: a roll, an empty
        segment, a full index). The embedded log's buffered appends come through here.

        The compiled walk decides where the run stops and which batches get entries (the
        same rule and checks as :meth:`try_append`); the indexes then add those entries in
        one call each, once per run, with their own checks."""
        import numpy as np  # here, not at the top: the CLI's light commands never need it

        from kafkalog.log import _run_kernel as R

        log = self.log
        position = log.size
        based = self.rolling_based_timestamp
        current = self._max_ts_and_offset
        if not position or based is None or based < 0 or current == _UNKNOWN:
            return 0
        oindex = self.offset_index.loaded
        tindex = self.time_index.loaded
        if oindex is None or tindex is None:
            return 0
        o_room = oindex.room()
        t_room = tindex.room()
        if not o_room or not t_room:
            return 0  # a roll is due (or the segment is closed): the general path
        count = len(run.sizes) - first
        room = min(count, o_room) + 1
        out_o_offset = np.empty(room, np.int64)
        out_o_pos = np.empty(room, np.int64)
        out_t_ts = np.empty(room, np.int64)
        out_t_offset = np.empty(room, np.int64)
        state = np.empty(R.STATE_FIELDS, np.int64)
        last_ts, last_ts_offset = tindex.last_entry
        R.plan_run(
            run.sizes, run.last_offsets, run.max_timestamps, first, count, run.max_batch,
            position, segment_bytes, based, max_segment_ms - self.roll_jitter_ms,
            self.base_offset, self.bytes_since_last_index_entry, self.index_interval_bytes,
            current[0], current[1], oindex.entries, o_room, oindex.last_offset,
            tindex.entries, t_room, last_ts, last_ts_offset,
            out_o_offset, out_o_pos, out_t_ts, out_t_offset, state,
        )  # fmt: skip
        taken, no, nt, since, max_ts, max_ts_offset, end = state.tolist()
        if not taken:
            return 0
        log.append(run.data[int(run.positions[first]) : int(run.positions[first]) + end - position])
        if no:
            oindex.append_entries(out_o_offset[:no], out_o_pos[:no])
        if nt:
            tindex.maybe_append_entries(out_t_ts[:nt], out_t_offset[:nt])
        self.bytes_since_last_index_entry = since
        if (max_ts, max_ts_offset) != current:
            self._max_ts_and_offset = TimestampOffset(max_ts, max_ts_offset)
        return int(taken)

    def update_txn_index(self, aborted: AbortedTxn) -> None:
        self._require_writable("append to")
        self.txn_index.append(aborted)

    # -- reading ---------------------------------------------------------------------------------
    def entries(self, start_position: int = 0, **kwargs: Any) -> Iterator[LogEntry]:
        """The entries from ``start_position`` (an entry boundary) on, for reading: a batch
        cut off where no append can be in flight or with valid batches after it is damage
        (:meth:`_walk`)."""
        return self._walk(start_position, **kwargs)

    def _walk(
        self,
        start: int,
        end: int | None = None,
        *,
        verify_crc: bool = False,
        tail: list[IncompleteTail | None] | None = None,
        check_order: bool = True,
    ) -> Iterator[LogEntry]:
        """Every read's walk over the ``.log``. The file may end in a cut-off batch only as its
        log's last segment does (an append in flight, or a torn tail a crash left), and only
        with nothing valid after it: anywhere else the records after it would be lost in
        silence, so it raises :class:`~kafkalog.errors.DamagedLogError` naming the byte.

        Offsets must grow (unless ``check_order`` is false: a caller that checks them itself,
        see :class:`~kafkalog.log.damage.OffsetOrder`). A base offset is outside the batch CRC,
        and a flipped one that is too high shows only at the batch after it: so each entry is
        handed out once the next one (or, for the last, the next segment's base, or the batch
        after the range) shows its offsets are in line, and the error names the batch whose
        offsets disagree with both neighbours, never a record at an offset never written."""
        tail = [] if tail is None else tail
        previous = self.base_offset - 1  # the last offset of the entries accepted so far
        before_held = previous  # ... and of those before ``held``
        held: LogEntry | None = None  # accepted, not yet handed out (see above)
        position = start
        try:
            for entry in self.log.entries(
                start, end, limits=self.limits, verify_crc=verify_crc, tail=tail
            ):
                if check_order:
                    wrong = offset_order_problem(entry, previous, self.base_offset)
                    if wrong:
                        if (
                            held is not None
                            and held_is_damaged(held, entry, before_held, self.base_offset)
                            and not self.is_proven_last(entry)
                        ):
                            raise self._damaged(_jumped_ahead(held, entry), held.position)
                        raise self._damaged(wrong, entry.position)
                    if held is not None:
                        yield held
                    held, before_held = entry, previous
                else:
                    yield entry
                previous = entry.last_offset
                position = entry.position + entry.size_in_bytes
        except DamagedLogError:
            raise
        except CorruptRecordError as e:
            if isinstance(e, BatchTooLargeError) and torn_absurd_entry(
                self.log.read,
                self.log.size,
                position,
                previous + 1,
                self.is_last,
                self.limits,
                verify_crc,
            ):
                if held is not None:
                    yield held
                return  # the end of the log: a torn tail whose size field reads absurd
            # named at the batch's first byte, with the offset it should start at
            raise self._damaged(
                f"{batch_at(self.log.read(position, 27))}: {e.reason} (at byte {e.position}; "
                f"expected a batch from offset {previous + 1})",
                position,
            ) from e
        if held is not None:
            self._check_last_held(held, position, end)
            yield held
        cut = tail[-1] if tail else None
        if cut is None:
            return
        why = self.cut_off_damage(cut.position, previous + 1, crc_checked=verify_crc)
        if why is None:
            return  # the end of the log: an append in flight, or a torn tail
        what = (
            "entry header" if cut.declared_size is None else f"entry of {cut.declared_size} bytes"
        )
        raise self._damaged(f"incomplete {what} ({cut.available} bytes there) {why}", cut.position)

    def _check_last_held(self, held: LogEntry, after: int, end: int | None) -> None:
        """The last entry a walk read must hold offsets below where the next one starts: the
        next batch in the file when the walk stopped before the end, else the next segment's
        base offset (:attr:`next_base`)."""
        upper: int | None
        what: str
        if end is not None and after < self.log.size:
            head = self.log.read(after, 17)
            if len(head) < 17:
                return
            upper = int.from_bytes(head[:8], "big", signed=True)
            if head[16] < 2:
                upper += 1  # a v0/v1 entry's offset is its last: only below it is certain
            what = f"the batch at byte {after} (offset field {upper})"
        else:
            upper = self.next_base
            what = f"the next segment (base offset {upper})"
            if upper is None and after >= self.log.size:
                wrong = self.end_problem(held)
                if wrong is not None:
                    raise self._damaged(wrong, held.position)
        if upper is not None and held.last_offset >= upper:
            first = first_offset_held(held)
            raise self._damaged(
                f"non-consecutive offsets: the batch at byte {held.position} holds offsets "
                f"{first}..{held.last_offset}, at or past {what}: its base offset (outside the "
                "batch CRC) is wrong",
                held.position,
            )

    def is_proven_last(self, entry: LogEntry) -> bool:
        """Whether ``entry`` ends this segment, the log's last, and is proven out of line
        (:meth:`end_problem`): then it, not the batch before it, is the damaged one."""
        return (
            entry.position + entry.size_in_bytes >= self.log.size
            and self.end_problem(entry) is not None
        )

    def closed_cleanly(self) -> bool:
        """Whether kafkalog's own clean close recorded this log's end with no append since
        (:func:`kafkalog.log.last_batch.marker_end`): then nothing at its end was torn."""
        return last_batch.marker_end(self.directory, self.log.path, self.log.size) is not None

    def end_problem(self, entry: LogEntry) -> str | None:
        """Why ``entry``, the last whole batch of the log's last segment (nothing valid after
        it), cannot hold the offsets its header says, or None (:mod:`kafkalog.log.last_batch`:
        this segment's own indexes, kafkalog's own clean-close record). Remembered for the
        entry and file size: a reader at the end of a live log asks again and again."""
        if self.next_base is not None or not self.is_last:
            return None
        key = (entry.position, entry.size_in_bytes, self.log.size, entry.base_offset)
        if self._end_problem is not None and self._end_problem[0] == key:
            return self._end_problem[1]
        answer = self._judge_last(entry)
        self._end_problem = (key, answer)
        return answer

    def _judge_last(self, entry: LogEntry) -> str | None:
        loaded: dict[str, OffsetIndex | TimeIndex] = {}
        if self.offset_index.is_loaded:
            loaded[INDEX_SUFFIX] = self.offset_index.get()
        if self.time_index.is_loaded:
            loaded[TIME_INDEX_SUFFIX] = self.time_index.get()
        # the segment's own index files: a ``.swap`` (a cleaner's output, judged before the
        # loader completes it) has its own ``.index.swap``; the ``.index`` of the same base
        # is a segment it replaces, keying offsets the cleaning may have removed
        path = self.log.path
        suffix = path[path.rindex(LOG_SUFFIX) + len(LOG_SUFFIX) :]
        return last_batch.judge_files(
            self.directory,
            self.base_offset,
            entry,
            lambda a, b: list(self.log.entries(a, b, limits=self.limits)),
            loaded,
            suffix=suffix,
        )

    def _damaged(self, what: str, position: int) -> DamagedLogError:
        return DamagedLogError.found(
            what, path=self.log.path, position=position, partition=self.directory
        )

    def cut_off_damage(
        self, position: int, expected_offset: int | None, *, crc_checked: bool = False
    ) -> str | None:
        """:func:`cut_off_damage` for this segment's ``.log``."""
        return cut_off_damage(
            self.log.read,
            self.log.size,
            position,
            expected_offset,
            self.is_last,
            self.limits,
            crc_checked,
        )

    def scan_start(self, offset: int) -> int:
        """Where a scan for ``offset`` starts: the position of the last offset-index entry at or
        below it, 0 without an index. Every batch before that position holds smaller offsets:
        an entry names the start of the *append* holding its offset (spec §4), and the batch
        holding ``offset`` may be any later batch of that append.

        So the batch at an entry's position holds its offset or a smaller one: an entry whose
        batch there starts past its offset (damage: no CRC covers an index) would skip the
        offsets between, and the entry before it is taken instead."""
        entry = self.offset_index_entry(offset)
        index = self._offset_index()
        while entry is not None and index is not None and entry.position > 0:
            if self._holds_at_most(entry.position, entry.offset):
                return entry.position
            entry = index.lookup_within(entry.offset - 1, self.log.size)
        return entry.position if entry is not None else 0

    def _holds_at_most(self, position: int, offset: int) -> bool:
        """Whether the entry at ``position`` starts at ``offset`` or below (or cannot be read:
        the scan from it names the damage). Its first 17 bytes tell in all but one case: a v2
        batch's base offset is its first, a v0/v1 entry's offset field its last (so its first is
        at most that); only a compressed wrapper whose last offset is past ``offset`` is opened
        for its first inner one. Every fetch asks this once: a full walk from the position would
        read two batches (a walk hands out each batch once the next one shows it in line)."""
        head = self.log.read(position, 17)
        if len(head) < 17 or head[16] > 2:
            return True
        if int.from_bytes(head[:8], "big", signed=True) <= offset:
            return True
        if head[16] == 2:
            return False
        try:
            found = next(iter(self._walk(position, check_order=False)), None)
        except KafkalogError:
            return True
        return found is None or first_offset_held(found) <= offset

    def end_position(self, offset: int) -> int:
        """The position of the first batch whose first offset is ``offset`` or more (the size
        when there is none): the bytes before it hold every offset of this segment below
        ``offset``, and no batch at or after it does. A batch's first offset is its base offset
        (for a compressed v0/v1 wrapper, whose own offset is its last, the first inner one,
        which costs a decompression of that wrapper only)."""
        for entry in self._walk(self.scan_start(offset)):
            if entry.last_offset >= offset and entry.base_offset >= offset:
                return entry.position
        return self.size

    def offset_index_entry(self, offset: int) -> OffsetPosition | None:
        """The offset-index entry a lookup of ``offset`` lands on (None without an index):
        what ``kafkalog lookup`` shows next to the batch the scan from it finds."""
        index = self._offset_index()
        if index is None:
            return None
        return index.lookup_within(offset, self.log.size)

    def time_index_entry(self, timestamp: int) -> TimestampOffset | None:
        """The time-index entry a lookup of ``timestamp`` lands on (None without an index)."""
        index = self._time_index()
        return index.lookup(timestamp) if index is not None else None

    def has_time_index(self) -> bool:
        """Whether the segment has a ``.timeindex`` (a read-only one may lack the file)."""
        return self._time_index() is not None

    def translate_offset(self, offset: int, starting_position: int = 0) -> LogOffsetPosition | None:
        """The first batch whose last offset is >= ``offset``: its last offset, start, size."""
        start = self.scan_start(offset)
        for entry in self._walk(max(start, starting_position)):
            if entry.last_offset >= offset:
                return LogOffsetPosition(entry.last_offset, entry.position, entry.size_in_bytes)
        return None

    def read(
        self,
        start_offset: int,
        max_size: int,
        max_position: int | None = None,
        min_one_message: bool = False,
        *,
        as_region: bool = False,
    ) -> FetchData | None:
        """Raw bytes from the batch holding ``start_offset`` (spec §6.4); None past the end.
        With ``as_region`` the records are a :class:`FileRegion`, not yet read."""
        if max_size < 0:
            raise ValueError(
                f"invalid max size {max_size} for log read from segment {self.log.path}"
            )
        found = self.translate_offset(start_offset)
        if found is None:
            return None
        limit = self.log.size if max_position is None else max_position
        adjusted = max(max_size, found.size) if min_one_message else max_size
        if adjusted == 0:
            return FetchData(start_offset, self.base_offset, found.position, b"")
        fetch = min(limit - found.position, adjusted)
        region = self.log.region(found.position, fetch)
        return FetchData(
            start_offset,
            self.base_offset,
            found.position,
            region if as_region else region.read(),
            adjusted < found.size,
        )

    def read_next_offset(self) -> int:
        """The offset after the last batch (base offset when empty).

        A read-only segment of a live broker may have an index entry newer than the log size it
        last saw (an append landed between the two reads): the scan then steps back to earlier
        entries until it finds a whole batch, so the end never appears to go backwards.
        """
        index = self._offset_index()
        found = index.lookup(index.last_offset) if index is not None else None
        start = found.position if found is not None else 0
        while True:
            last = None
            for entry in self._walk(start):
                last = entry
            if last is not None or start == 0 or index is None or found is None:
                return self.base_offset if last is None else last.last_offset + 1
            found = index.lookup(found.offset - 1)  # that batch is not wholly visible yet
            start = found.position

    def find_offset_by_timestamp(
        self, timestamp: int, starting_offset: int | None = None
    ) -> TimestampAndOffset | None:
        """First record with timestamp >= ``timestamp`` and offset >= ``starting_offset``,
        through the time index then the offset index then a short scan (spec §6.7)."""
        start_offset = self.base_offset if starting_offset is None else starting_offset
        tindex = self._time_index()
        entry = (
            tindex.lookup(timestamp)
            if tindex is not None
            else TimestampOffset(-1, self.base_offset)
        )
        if (
            tindex is not None
            # (none at or below the target reads as the base offset: a search from byte 0)
            and entry.offset > max(start_offset, self.base_offset)
            and not self._time_entry_holds(entry)
        ):
            _say_time_entry_damaged(tindex, entry)
            entry = TimestampOffset(-1, self.base_offset)  # scanned from the start instead
        position = self.scan_start(max(entry.offset, start_offset))
        # every batch whose timestamps decide the answer has its CRC checked: a flipped
        # timestamp would answer another offset, in silence (a read of the records refuses it)
        for batch in self._walk(position, verify_crc=True):
            if batch.max_timestamp >= timestamp:
                for rec in batch.records(self.limits):
                    if rec.timestamp >= timestamp and rec.offset >= start_offset:
                        epoch = batch.partition_leader_epoch
                        return TimestampAndOffset(
                            rec.timestamp, rec.offset, epoch if epoch >= 0 else None
                        )
        return None

    def _time_entry_holds(self, entry: TimestampOffset) -> bool:
        """Whether the ``.timeindex`` entry ``entry`` is what its writer wrote: the batch
        holding its offset has its timestamp as largest. A writer keys each entry by the
        largest timestamp so far and the offset of a batch holding it (Kafka's LogSegment
        append, its cleaner and recovery alike), and no CRC covers an index: an entry whose
        offset or timestamp was damaged would start the search past the record asked for
        (an offset too high, or a timestamp too low), and answer a later one in silence."""
        for batch in self._walk(self.scan_start(entry.offset), verify_crc=True):
            if batch.last_offset >= entry.offset:
                return batch.max_timestamp == entry.timestamp
        return False  # an offset no batch of the segment holds

    def fetch_upper_bound_offset(self, start_position: int, fetch_size: int) -> int | None:
        index = self._offset_index()
        if index is None:
            return None
        found = index.fetch_upper_bound_offset(start_position, fetch_size)
        return None if found is None else found.offset

    # -- recovery and truncation ---------------------------------------------------------------
    def recover(
        self,
        leader_epochs: Any = None,
        txn_state: ProducerStateManager | None = None,
    ) -> int:
        """Rebuild all three indexes from the log and cut it at the first invalid batch (spec
        §6.5); returns the bytes truncated. ``txn_state`` is the producer state as of the
        segment's base offset (Kafka's recover takes the ProducerStateManager): each batch
        updates it, and the ABORT markers of its open transactions become ``.txnindex``
        entries with their true first offset and LSO."""
        self._require_writable("recover")
        offset_index = self.offset_index.get()
        time_index = self.time_index.get()
        offset_index.reset()
        time_index.reset()
        self.txn_index.reset()
        state = txn_state if txn_state is not None else TxnState()
        indexer = BatchIndexer(
            self.index_interval_bytes,
            offset_index=offset_index,
            time_index=time_index,
            txn_index=self.txn_index,
            txn_state=state,
            limits=self.limits,
        )
        valid = 0
        try:
            for batch in self.log.entries(0, limits=self.limits):
                batch.ensure_valid()
                if not offset_index.can_append_offset(batch.last_offset):
                    raise SegmentOverflowError(
                        f"batch ending at offset {batch.last_offset} does not fit segment "
                        f"{self.log.path} (base offset {self.base_offset})"
                    )
                epoch = batch.partition_leader_epoch if isinstance(batch, RecordBatch) else -1
                if (
                    leader_epochs is not None
                    and epoch >= 0
                    and (leader_epochs.latest_epoch is None or epoch > leader_epochs.latest_epoch)
                ):
                    leader_epochs.assign(epoch, batch.base_offset)
                indexer.add(batch, valid)
                valid += batch.size_in_bytes
        except CorruptRecordError:
            pass  # everything from the first invalid batch on is cut, as Kafka does
        truncated = self.log.size - valid
        self.log.truncate_to(valid)
        offset_index.trim_to_valid_size()
        self._max_ts_and_offset = indexer.finish()
        time_index.trim_to_valid_size()
        self.bytes_since_last_index_entry = indexer.since
        return truncated

    def rebuild_time_index(self) -> None:
        """Rebuild only the ``.timeindex`` from the log (it was missing), with the entries
        :meth:`recover` would write; the ``.log``, ``.index`` and ``.txnindex`` are left as
        they are, since nothing says they are wrong."""
        self._require_writable("rebuild the time index of")
        time_index = self.time_index.get()
        time_index.reset()
        indexer = BatchIndexer(self.index_interval_bytes, time_index=time_index)
        try:
            for batch in self.log.entries(0, limits=self.limits):
                batch.ensure_valid()
                indexer.add(batch, 0)
        except CorruptRecordError:
            pass  # recovery (past the recovery point) decides what to cut
        self._max_ts_and_offset = indexer.finish()
        time_index.trim_to_valid_size()

    def _read_largest_timestamp(self) -> TimestampOffset:
        tindex = self._time_index()
        last = tindex.last_entry if tindex is not None else TimestampOffset(-1, self.base_offset)
        position = self.scan_start(last.offset)
        best = TimestampOffset(-1, -1)
        try:
            for batch in self.log.entries(position, limits=self.limits):
                if batch.max_timestamp > best.timestamp:
                    best = TimestampOffset(batch.max_timestamp, batch.last_offset)
        except KafkalogError:
            pass
        return best if best.timestamp > last.timestamp else last

    def truncate_to(self, offset: int) -> int:
        """Remove everything at or after ``offset`` (whole batches: the log is cut at the start
        of the batch holding ``offset``); returns the bytes removed (spec §6.6)."""
        self._require_writable("truncate")
        mapping = self.translate_offset(offset)
        offset_index = self.offset_index.get()
        time_index = self.time_index.get()
        offset_index.truncate_to(offset)
        time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        offset_index.resize(self.config.segment_index_bytes)
        time_index.resize(self.config.segment_index_bytes)
        removed = 0 if mapping is None else self.log.truncate_to(mapping.position)
        if self.log.size == 0:
            self.created = self._now_ms()
            self.rolling_based_timestamp = None
        self.bytes_since_last_index_entry = 0
        if self.max_timestamp_so_far >= 0:
            self._max_ts_and_offset = self._read_largest_timestamp()
        return removed

    # -- rolling ------------------------------------------------------------------------------
    def can_take(
        self,
        size: int,
        max_timestamp: int,
        last_offset: int,
        segment_bytes: int,
        max_segment_ms: int,
    ) -> bool:
        """A cheap "certainly no roll" for the append path; False means: ask :meth:`should_roll`
        (which decides exactly, the way Kafka does)."""
        based = self.rolling_based_timestamp
        if self.size + size > segment_bytes or based is None or based < 0:
            return False
        if max_timestamp - based > max_segment_ms - self.roll_jitter_ms:
            return False
        oindex = self.offset_index.get()
        return (
            not oindex.is_full()
            and oindex.can_append_offset(last_offset)
            and not self.time_index.get().is_full()
        )

    def time_waited_for_roll(self, now: int, message_timestamp: int) -> int:
        if self.rolling_based_timestamp is None:
            first = next(iter(self.log.entries(0, limits=self.limits)), None)
            if first is not None:
                self.rolling_based_timestamp = first.max_timestamp
        based = self.rolling_based_timestamp
        if based is not None and based >= 0:
            return message_timestamp - based
        return now - self.created

    def should_roll(self, params: RollParams) -> bool:
        """Kafka's rolling decision (spec §6.9): size, record-time age, full indexes, overflow."""
        reached_roll_ms = (
            self.time_waited_for_roll(params.now, params.max_timestamp_in_messages)
            > params.max_segment_ms - self.roll_jitter_ms
        )
        return (
            self.size > params.max_segment_bytes - params.messages_size
            or (self.size > 0 and reached_roll_ms)
            or self.offset_index.get().is_full()
            or self.time_index.get().is_full()
            or not self.offset_index.get().can_append_offset(params.max_offset_in_messages)
        )

    def on_become_inactive(self) -> None:
        """Called on the previous active segment when rolling: final time entry, trims."""
        self._require_writable("roll")
        latest = self._read_max_ts_and_offset()
        self.time_index.get().maybe_append(latest.timestamp, latest.offset, skip_full_check=True)
        self.offset_index.get().trim_to_valid_size()
        self.time_index.get().trim_to_valid_size()
        self.log.trim()

    def has_overflow(self) -> bool:
        next_offset = self.read_next_offset()
        return next_offset > self.base_offset and not self.offset_index.get().can_append_offset(
            next_offset - 1
        )

    # -- files ----------------------------------------------------------------------------------
    def flush(self) -> None:
        if not self.writable:
            return
        self.log.flush()
        if self.offset_index.is_loaded:
            self.offset_index.get().flush()
        if self.time_index.is_loaded:
            self.time_index.get().flush()
        self.txn_index.flush()

    def close(self) -> None:
        """Flush the last time index entry, trim and release every file: final."""
        if self._closed:
            return
        if self.writable and self._max_ts_and_offset != _UNKNOWN:
            try:
                latest = self._max_ts_and_offset
                self.time_index.get().maybe_append(
                    latest.timestamp, latest.offset, skip_full_check=True
                )
            except KafkalogError:
                pass
        self._closed = True
        self.offset_index.close()
        self.time_index.close()
        self.log.close()
        self.txn_index.close()

    def close_handlers(self) -> None:
        """Release every file without trimming or flushing (a segment being deleted): final."""
        self._closed = True
        self.offset_index.close_handler()
        self.time_index.close_handler()
        self.log.close_handle()
        self.txn_index.close()

    def delete_if_exists(self) -> None:
        if not self.writable:
            raise ReadOnlyError(f"cannot delete {self.log.path}: the segment was opened read-only")
        self.close_handlers()
        for path in (self.log.path, self.offset_index.path, self.time_index.path):
            if os.path.exists(path):
                os.remove(path)
        self.txn_index.delete_if_exists()
        self.offset_index.delete_if_exists()
        self.time_index.delete_if_exists()

    def change_file_suffixes(self, old: str, new: str) -> None:
        """Rename all four files (``.deleted``, ``.swap``...); a missing lazy index is fine."""
        self._require_writable("rename")

        def renamed(path: str) -> str:
            base = path[: -len(old)] if old and path.endswith(old) else path
            return base + new

        new_log = renamed(self.log.path)
        os.replace(self.log.path, new_log)
        self.log.path = new_log
        self.offset_index.rename_to(renamed(self.offset_index.path))
        self.time_index.rename_to(renamed(self.time_index.path))
        self.txn_index.rename_to(renamed(self.txn_index.path))

    def has_suffix(self, suffix: str) -> bool:
        return all(
            p.endswith(suffix)
            for p in (
                self.log.path,
                self.offset_index.path,
                self.time_index.path,
                self.txn_index.path,
            )
        )

    def __repr__(self) -> str:
        return (
            f"LogSegment(base_offset={self.base_offset}, size={self.size}, path={self.log.path!r})"
        )


def _say_time_entry_damaged(tindex: TimeIndex, entry: TimestampOffset) -> None:
    """A WARNING naming the ``.timeindex`` and the byte of an entry that does not hold (see
    :meth:`LogSegment._time_entry_holds`): the search goes on from the segment's first byte,
    right but slower, until ``kafkalog rebuild-index`` rewrites the index from the ``.log``."""
    slot = next((n for n, e in enumerate(tindex) if e == entry), -1)
    _logger.warning(
        "%s at byte %d: time index entry %d (timestamp %d, offset %d) is not what the .log "
        "holds (the batch at that offset has another largest timestamp, or there is none): "
        "searched by time from the segment's first byte instead; `kafkalog rebuild-index` "
        "rewrites the index from the .log",
        tindex.path,
        max(slot, 0) * TimeIndex.ENTRY_SIZE,
        slot,
        entry.timestamp,
        entry.offset,
    )
