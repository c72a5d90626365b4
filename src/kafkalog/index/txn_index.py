"""Kafka's aborted-transaction index (``<base offset>.txnindex``), byte for byte.

A ``.txnindex`` file is a plain sequence of 34-byte :class:`AbortedTxn` entries, one per
transaction that was *aborted* in the segment, in the order the ABORT markers were written. A
READ_COMMITTED consumer needs them to drop the aborted records it is sent; the broker finds them
with :meth:`TransactionIndex.collect_aborted_txns` (spec §5.3, used by the fetch path of §7.4).

Unlike the offset and time indexes this file is not memory-mapped, not preallocated and not
trimmed: Kafka only ever appends to it, truncates it, or reads it from the start.

File handling, and why:

* **Lazy creation.** Most segments never see an aborted transaction, and Kafka does not create
  the file until the first append. A :class:`TransactionIndex` on a missing path is simply empty.
* **Reads never modify anything.** Every read goes through a file descriptor opened read-only
  (``O_RDONLY``), or, when this object already holds its write descriptor, through positional
  reads (``pread``) on it. Reading never creates, truncates, writes, or touches the mtime, so a
  live broker's directory or a backup can be inspected safely.
* **Reads always see the disk.** Nothing is cached: entries appended earlier through the same
  object (or by another writer) are visible to the next :meth:`~TransactionIndex.all_aborted_txns`
  or :meth:`~TransactionIndex.collect_aborted_txns`.
* **One write descriptor, opened on demand.** A writable index opens ``O_RDWR | O_APPEND`` on the
  first mutating call (``O_CREAT`` only for :meth:`~TransactionIndex.append`), so every append
  lands at the end of the file exactly like Kafka's channel positioned at the end.
* **``close`` is final.** Afterwards every read and write raises
  :class:`~kafkalog.errors.ClosedError` naming the file: a closed index is one whose segment is
  closed or deleted, and reading a deleted ``.txnindex`` as "no file, so no aborted
  transaction" would hand a ``read_committed`` reader the records of aborted transactions.
  Reads in other threads that use the write descriptor finish before it is closed, and none
  starts after (:class:`~kafkalog.files.HandleUsers`).
* **Read-only means read-only.** ``writable=False`` never opens the file for writing at all;
  every mutating method raises :class:`~kafkalog.errors.ReadOnlyError` naming the file.
"""

from __future__ import annotations

import os
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any, ClassVar, Self

from kafkalog import files
from kafkalog.errors import (
    ClosedError,
    CorruptIndexError,
    InvalidOffsetError,
    InvalidRecordError,
    ReadOnlyError,
    unreadable_file,
)
from kafkalog.index.base import REBUILT_FROM_THE_LOG

__all__ = ["AbortedTxn", "TransactionIndex", "TxnIndexSearchResult"]

_INT16_MIN, _INT16_MAX = -(2**15), 2**15 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

# Writing: int16 version, then four int64 (pid, first, last, lso), big-endian.
_WRITE = struct.Struct(">hqqqq")
# Reading: Kafka reads the version as ONE signed byte (the high byte of the int16) and never
# looks at the low byte, hence "b" + pad byte "x".
_READ = struct.Struct(">bxqqqq")
assert _WRITE.size == _READ.size == 34

# Entries per positional read: bounded memory for big files, few syscalls for small ones.
_CHUNK_ENTRIES = 1024
_O_BINARY = getattr(os, "O_BINARY", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def _check_range(name: str, value: int, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"AbortedTxn.{name} must be an int, got {type(value).__name__}")
    if not low <= value <= high:
        raise InvalidRecordError(f"AbortedTxn.{name}={value} does not fit in [{low}, {high}]")


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One aborted transaction as stored in a ``.txnindex`` file (34 bytes, spec §5.1).

    ``first_offset`` may lie in an earlier segment (a transaction can span a roll);
    ``last_offset`` is the offset of the ABORT control record and is what orders the index;
    ``last_stable_offset`` is the LSO when the abort was written, which lets a fetch stop
    scanning later segments (see :meth:`TransactionIndex.collect_aborted_txns`).
    """

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int
    version: int = 0

    SIZE: ClassVar[int] = 34
    CURRENT_VERSION: ClassVar[int] = 0

    def __post_init__(self) -> None:
        # Validate up front so to_bytes() can never fail half-way through an append.
        _check_range("producer_id", self.producer_id, _INT64_MIN, _INT64_MAX)
        _check_range("first_offset", self.first_offset, _INT64_MIN, _INT64_MAX)
        _check_range("last_offset", self.last_offset, _INT64_MIN, _INT64_MAX)
        _check_range("last_stable_offset", self.last_stable_offset, _INT64_MIN, _INT64_MAX)
        _check_range("version", self.version, _INT16_MIN, _INT16_MAX)

    def to_bytes(self) -> bytes:
        """The 34 on-disk bytes: ``int16 version | int64 pid | first | last | lso`` (big-endian)."""
        return _WRITE.pack(
            self.version,
            self.producer_id,
            self.first_offset,
            self.last_offset,
            self.last_stable_offset,
        )

    @classmethod
    def from_bytes(
        cls,
        data: bytes | bytearray | memoryview,
        position: int = 0,
        path: str | os.PathLike[str] | None = None,
    ) -> AbortedTxn:
        """Parse the entry starting at ``data[position]`` the way Kafka reads it.

        Kafka's quirk is reproduced on purpose: the version is the single *signed* byte at the
        start of the entry (the high byte of the int16 that was written), so a stored short
        ``0x0001`` reads as version 0 and ``0xFFxx`` as version -1, both accepted; a version
        byte above 0 is rejected, as Kafka rejects it. ``path`` and ``position`` only serve to
        make the error point at the bad bytes.
        """
        if position < 0:
            raise ValueError(f"position must be >= 0, got {position}")
        where = None if path is None else os.fspath(path)
        available = len(data) - position
        if available < cls.SIZE:
            raise CorruptIndexError(
                f"truncated aborted transaction entry: {max(available, 0)} of {cls.SIZE} bytes",
                path=where,
                position=position,
            )
        version, pid, first, last, lso = _READ.unpack_from(data, position)
        if version > cls.CURRENT_VERSION:
            raise CorruptIndexError(
                f"Unexpected aborted transaction version {version} "
                f"(only version {cls.CURRENT_VERSION} is known)",
                path=where,
                position=position,
            )
        return cls(pid, first, last, lso, version)


@dataclass(frozen=True)
class TxnIndexSearchResult:
    """What :meth:`TransactionIndex.collect_aborted_txns` found in one segment.

    ``is_complete`` tells the fetch path it may stop: an entry's LSO reached the upper bound,
    so no later segment can hold an aborted transaction overlapping the fetched range.
    Otherwise the caller continues with the next segment (spec §7.4).
    """

    aborted: list[AbortedTxn]
    is_complete: bool


class TransactionIndex:
    """The aborted-transaction index of one segment (Kafka's ``TransactionIndex``).

    Kafka behaviours kept on purpose (spec §5.2):

    * the file is created by the first :meth:`append`, not by the constructor;
    * entries are read from byte 0 in 34-byte steps and a trailing partial entry is ignored
      (exposed as :attr:`trailing_bytes` so tools can still report it);
    * the in-memory last offset is *not* restored from the file when it is opened, so the first
      append after a reopen is not checked for monotonicity;
    * appends go at the very end of the file, even after a partial trailing entry (which then
      misaligns every later entry, exactly as it would in Kafka).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        base_offset: int,
        writable: bool = True,
    ) -> None:
        self._path = os.fspath(path)
        self._base_offset = base_offset
        self._writable = writable
        self._fd: int | None = None  # write descriptor; only ever set when writable
        self._last_offset: int | None = None
        self._users = files.HandleUsers()  # reads through ``_fd`` in flight (module doc)
        # held across a rename's move and path update, so a read that found no file can tell
        # "renamed under me" from "no file" (taken only on that error path)
        self._renaming = threading.Lock()
        self._renames = 0  # moves so far: a read compares it, not the path (A -> B -> A)

    # -- properties ----------------------------------------------------------------------------
    @property
    def path(self) -> str:
        return self._path

    @property
    def base_offset(self) -> int:
        return self._base_offset

    @property
    def writable(self) -> bool:
        return self._writable

    @property
    def last_offset(self) -> int | None:
        """Last offset appended through this object (``None`` after open/reset, as Kafka)."""
        return self._last_offset

    @property
    def trailing_bytes(self) -> int:
        """Bytes after the last complete entry, which every read ignores (Kafka does too).

        Non-zero means a torn write or a file that is not a transaction index.
        """
        return self._size() % AbortedTxn.SIZE

    def __len__(self) -> int:
        """Number of complete 34-byte entries in the file (none of them parsed)."""
        return self._size() // AbortedTxn.SIZE

    @property
    def closed(self) -> bool:
        return self._users.closed

    def _check_open(self, action: str = "read") -> None:
        if self._users.closed:
            raise ClosedError(self._path, action)

    # -- reading -------------------------------------------------------------------------------
    def _size(self) -> int:
        self._check_open()
        if self._fd is not None:
            return _GuardedHandle(self).size()
        while True:
            renames, path = self._renames, self._path  # this order: see rename_to
            try:
                return files.getsize(path)
            except FileNotFoundError:
                self._check_open()  # gone because the segment was deleted meanwhile: not "empty"
                with self._renaming:  # a rename in progress has finished
                    moved = self._renames != renames
                if not moved:
                    return 0
                # renamed under us (``.deleted``, a swap): the file is under its new name

    @contextmanager
    def _reader(self) -> Iterator[files.ReadHandle | None]:
        """What to read from, or ``None`` when there is no file (an empty index).

        Never opens anything for writing: either this object's own write descriptor (so reads
        see exactly what was appended through it) or a fresh read-only handle (a local file or
        a pyarrow.fs URI).
        """
        self._check_open()
        if self._fd is not None:
            yield _GuardedHandle(self)
            return
        while True:
            renames, path = self._renames, self._path  # this order: see rename_to
            try:
                handle = files.open_read(path)
                break
            except (IsADirectoryError, PermissionError) as e:
                raise unreadable_file(os.fspath(path), e.strerror, then=REBUILT_FROM_THE_LOG) from e
            except FileNotFoundError:
                self._check_open()  # gone because the segment was deleted meanwhile: not "empty"
                with self._renaming:  # a rename in progress has finished
                    moved = self._renames != renames
                if not moved:
                    yield None
                    return
                # renamed under us (``.deleted``, a swap): open it under its new name
        try:
            yield handle
        finally:
            handle.close()

    def _entries(self) -> Iterator[tuple[int, AbortedTxn]]:
        """``(byte position, entry)`` in file order, parsed lazily.

        Lazy on purpose: Kafka's scans stop early (collect, truncate), and a corrupt entry past
        the stopping point is then never looked at, so it must not raise here either.
        """
        with self._reader() as handle:
            if handle is None:
                return
            size = handle.size()
            end = size - size % AbortedTxn.SIZE  # a trailing partial entry is ignored
            chunk_size = AbortedTxn.SIZE * _CHUNK_ENTRIES
            position = 0
            while position < end:
                chunk = _read_fully(handle, min(chunk_size, end - position), position)
                usable = len(chunk) - len(chunk) % AbortedTxn.SIZE
                if usable == 0:  # the file shrank under us: what is left is all there is
                    return
                for start in range(0, usable, AbortedTxn.SIZE):
                    try:
                        txn = AbortedTxn.from_bytes(chunk, start)
                    except CorruptIndexError as e:
                        raise e.located(self._path, position) from None
                    yield position + start, txn
                position += usable

    def positioned_entries(self) -> list[tuple[int, AbortedTxn]]:
        """``(byte position, entry)`` of every entry, in file order (for tools naming bytes)."""
        return list(self._entries())

    def all_aborted_txns(self) -> list[AbortedTxn]:
        """Every entry in file order."""
        return [txn for _, txn in self._entries()]

    def collect_aborted_txns(
        self, fetch_offset: int, upper_bound_offset: int
    ) -> TxnIndexSearchResult:
        """The aborted transactions overlapping ``[fetch_offset, upper_bound_offset)`` (spec §5.3).

        An entry is included iff ``last_offset >= fetch_offset and first_offset <
        upper_bound_offset``. After considering an entry, if its ``last_stable_offset >=
        upper_bound_offset`` the search is complete: every transaction aborted later started at
        or after that LSO, so it cannot overlap the range, and later segments need not be read.
        Reaching the end of the file returns ``is_complete=False`` (continue with the next
        segment).
        """
        aborted: list[AbortedTxn] = []
        for _, txn in self._entries():
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                aborted.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return TxnIndexSearchResult(aborted, True)
        return TxnIndexSearchResult(aborted, False)

    def sanity_check(self) -> None:
        """Raise :class:`CorruptIndexError` if an entry ended before this segment began.

        Every ABORT marker of this segment has an offset >= the segment's base offset, so an
        entry with a smaller ``last_offset`` means the file belongs elsewhere or is damaged
        (Kafka's loader then rebuilds the segment's indexes).
        """
        for position, txn in self._entries():
            if txn.last_offset < self._base_offset:
                raise CorruptIndexError(
                    f"last offset {txn.last_offset} of aborted transaction {txn} is less than "
                    f"the segment base offset {self._base_offset}",
                    path=self._path,
                    position=position,
                )

    # -- writing -------------------------------------------------------------------------------
    def _require_writable(self, what: str) -> None:
        if not self._writable:
            raise ReadOnlyError(
                f"cannot {what} transaction index {self._path}: it was opened read-only"
            )
        self._check_open(what)

    def _write_fd(self, create: bool) -> int | None:
        """The write descriptor, opening it if needed; ``None`` if there is no file to open and
        ``create`` is false (reset/truncate must not bring the file into existence)."""
        if self._fd is None:
            flags = os.O_RDWR | os.O_APPEND | _O_BINARY | _O_CLOEXEC
            if create:
                flags |= os.O_CREAT
            try:
                self._fd = os.open(self._path, flags, 0o666)
            except FileNotFoundError:
                if create:
                    raise
                return None
        return self._fd

    def append(self, txn: AbortedTxn) -> None:
        """Write ``txn`` at the end of the file, creating the file on the first append.

        Raises :class:`InvalidOffsetError` if ``txn.last_offset`` is not greater than the last
        offset appended through this object (Kafka's IllegalArgumentException). Only offsets
        appended since the open/reset are known, see the class docstring.
        """
        self._require_writable("append to")
        if self._last_offset is not None and self._last_offset >= txn.last_offset:
            raise InvalidOffsetError(
                f"{self._path}: the last offset of appended aborted transactions must increase, "
                f"but {txn.last_offset} is not greater than the current last offset "
                f"{self._last_offset}"
            )
        data = memoryview(txn.to_bytes())
        fd = self._write_fd(create=True)
        assert fd is not None
        while data:
            written = os.write(fd, data)
            data = data[written:]
        self._last_offset = txn.last_offset

    def truncate_to(self, offset: int) -> None:
        """Remove the first entry (in file order) with ``last_offset >= offset`` and all after it.

        The in-memory last offset becomes the previous entry's (or unknown). If no entry
        qualifies nothing changes, not even a trailing partial entry (as Kafka).
        """
        self._require_writable("truncate")
        previous: int | None = None
        for position, txn in self._entries():
            if txn.last_offset >= offset:
                fd = self._write_fd(create=False)
                if fd is not None:
                    os.ftruncate(fd, position)
                self._last_offset = previous
                return
            previous = txn.last_offset

    def reset(self) -> None:
        """Empty the file (if it exists; it is never created) and forget the last offset."""
        self._require_writable("reset")
        fd = self._write_fd(create=False)
        if fd is not None:
            os.ftruncate(fd, 0)
        self._last_offset = None

    def flush(self) -> None:
        """fsync the file if this object has it open for writing (nothing to do otherwise)."""
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        """The final close (idempotent): wait for reads in flight, release the write
        descriptor; every later read or write raises :class:`ClosedError`."""
        self._users.close()
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def delete_if_exists(self) -> bool:
        """Close, then delete the file; ``False`` if there was none (normal: lazy creation).

        Refused on a read-only index, whose point is never to change what it looks at.
        """
        if not self._writable:
            raise ReadOnlyError(
                f"cannot delete transaction index {self._path}: it was opened read-only"
            )
        self.close()
        try:
            os.remove(self._path)
        except FileNotFoundError:
            return False
        return True

    def rename_to(self, new_path: str | os.PathLike[str]) -> None:
        """Move the file to ``new_path`` if it exists; the path is updated in every case.

        A missing file is normal (no aborted transaction yet), so only the path changes, and the
        next append creates the file under its new name. As Kafka, the in-memory path follows
        even if the move fails. An open write descriptor stays valid across the move.
        """
        self._require_writable("rename")
        target = os.fspath(new_path)
        with self._renaming:
            try:
                if os.path.lexists(self._path):
                    os.replace(self._path, target)
            finally:
                self._path = target
                self._renames += 1

    # -- protocol ------------------------------------------------------------------------------
    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "rw" if self._writable else "r"
        return (
            f"TransactionIndex(path={self._path!r}, base_offset={self._base_offset}, "
            f"mode={mode!r}, last_offset={self._last_offset})"
        )


class _GuardedHandle:
    """Reads through the index's own write descriptor, each one counted so that ``close``
    waits for it (and refused once the index is closed)."""

    __slots__ = ("_index",)

    def __init__(self, index: TransactionIndex) -> None:
        self._index = index

    def _call(self, read: Any) -> Any:
        index = self._index
        index._users.enter(index._path)
        try:
            fd = index._fd
            if fd is None:  # closed between the check and here: enter() would have refused
                raise ClosedError(index._path)
            return read(fd)
        finally:
            index._users.leave()

    def size(self) -> int:
        return self._call(lambda fd: os.fstat(fd).st_size)  # type: ignore[no-any-return]

    def pread(self, length: int, position: int) -> bytes:
        if length <= 0:
            return b""
        return self._call(lambda fd: os.pread(fd, length, position))  # type: ignore[no-any-return]

    def pread_into(self, buffer: memoryview, position: int) -> int:
        return files.pread_into_by_copy(self, buffer, position)

    def identity(self) -> tuple[int, int] | None:
        return self._call(lambda fd: (os.fstat(fd).st_dev, os.fstat(fd).st_ino))  # type: ignore[no-any-return]

    def close(self) -> None:
        pass  # the descriptor is the index's


def _read_fully(handle: files.ReadHandle, length: int, offset: int) -> bytes:
    """Up to ``length`` bytes at ``offset`` (short only at the end of the file)."""
    out = bytearray()
    while len(out) < length:
        part = handle.pread(length - len(out), offset + len(out))
        if not part:
            break
        out += part
    return bytes(out)
