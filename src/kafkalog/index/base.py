"""The memory-mapped machinery shared by the offset and time indexes (Kafka's AbstractIndex).

Two ways to open a file, because kafkalog has two kinds of users:

* **writable** (a log kafkalog owns): Kafka's exact semantics — a new file is created and
  preallocated to ``max_index_size`` rounded down to whole entries, an existing file is assumed
  to be full of valid entries, and ``close`` trims it to its entries.
* **read-only** (a live broker's directory, a backup): only read permission is needed; the file
  is never created, resized, truncated or written, so its bytes and mtime stay as they were. A
  live broker's active index is preallocated with an all-zero tail, so the read-only open finds
  the real entries instead of trusting the file length (see ``valid_prefix``).

Closing, and readers in other threads. ``close`` is final: every later read raises
:class:`~kafkalog.errors.ClosedError` naming the file, and nothing reads the unmapped pages (a
lookup on a closed index of millions of entries used to read far outside an empty buffer and
die of SIGSEGV). Lookups take no lock, because they are the hot path (a lock costs as much as a
sixth of a lookup): each hands the compiled kernel the buffer itself, which pins the mapping
(``mmap.close`` refuses while a view of it exists) and bounds every read, and it checks a
generation counter that every remap and the close move (odd while the mapping changes, and for
good once closed). A lookup that raced with one redoes itself under the lock, where the mapping
is stable, or raises ``ClosedError``. A remap waits for the lookups still inside the old mapping
before it cuts the file, so none of them can touch a page past the new end (SIGBUS).
"""

from __future__ import annotations

import mmap
import os
import struct
import threading
import time
from types import TracebackType
from typing import Any, ClassVar, Self

import numpy as np

from kafkalog import files
from kafkalog.errors import (
    ClosedError,
    CorruptIndexError,
    IndexFullError,
    IndexOffsetOverflowError,
    ReadOnlyError,
)
from kafkalog.index import _search

#: what rebuilds an index file once an unreadable one is moved out (said by every index kind)
REBUILT_FROM_THE_LOG = " (`kafkalog rebuild-index` then writes it from the .log)"

DEFAULT_MAX_INDEX_SIZE = 10 * 1024 * 1024
_SORTED_BATCH = 64  # from this many targets on, sorting them first pays off
INT32_MAX = 2**31 - 1
_EMPTY = np.empty(0, np.uint8)
_EMPTY.flags.writeable = False
_PIN_WAIT_S = 5.0  # a remap waits this long at most for lookups still inside the old mapping


def round_down(n: int, factor: int) -> int:
    return factor * (n // factor)


class MappedIndex:
    """A file of fixed-size big-endian entries, mapped into memory."""

    ENTRY_SIZE: ClassVar[int]
    KEY_OFFSET: ClassVar[int]
    KEY_WIDTH: ClassVar[int]
    VALUE_OFFSET: ClassVar[int]
    VALUE_WIDTH: ClassVar[int]
    # entries kept free for a final append that ignores fullness (the time index keeps one)
    SPARE_ENTRIES: ClassVar[int] = 0

    def __init__(
        self,
        path: str | os.PathLike[str],
        base_offset: int,
        max_index_size: int = DEFAULT_MAX_INDEX_SIZE,
        writable: bool = True,
    ) -> None:
        self._path = os.fspath(path)
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        self.writable = writable
        self._file: object = None
        self._mm: mmap.mmap | None = None
        self._buf: np.ndarray = _EMPTY
        # entries at which an append is refused: is_full's limit while mapped, else 0 (read-only,
        # closed), so the appends' hot path tests one number
        self._full_at = 0
        self._closed = False
        # even: the mapping is stable; odd: being remapped, or closed for good (module doc)
        self._generation = 0
        self._lock = threading.Lock()
        self._ordered_entries = -1
        self._keys_ordered = False
        self.warm_entries = _search.WARM_BYTES // self.ENTRY_SIZE
        if writable:
            self._open_writable()
        else:
            self._open_read_only()
        self._after_open()

    # -- opening ----------------------------------------------------------------------------
    def _open_writable(self) -> None:
        newly_created = not os.path.exists(self._path)
        if newly_created:
            if self.max_index_size < self.ENTRY_SIZE:
                raise ValueError(
                    f"invalid max index size {self.max_index_size} for {self._path}: "
                    f"smaller than one {self.ENTRY_SIZE}-byte entry"
                )
            with open(self._path, "xb") as new:
                new.truncate(round_down(self.max_index_size, self.ENTRY_SIZE))
        handle = open(self._path, "r+b")  # noqa: SIM115 - kept open for the mapping's lifetime
        self._file = handle
        length = os.fstat(handle.fileno()).st_size
        self._map(length)
        self._entries = (
            0 if newly_created else round_down(length, self.ENTRY_SIZE) // (self.ENTRY_SIZE)
        )

    def _open_read_only(self) -> None:
        """Read the real entries into memory, in chunks, stopping at the first invalid one.

        Not mapped: a broker trims its index when it rolls the segment, and touching a mapped
        page past the new end of the file kills the reader with SIGBUS. Reading only up to the
        zero-filled tail also keeps a live 10 MiB preallocated index down to its real size.
        """
        chunks: list[bytes] = []
        handle = files.open_read(self._path)  # a local file or a pyarrow.fs URI
        try:
            length = handle.size()
            max_entries = length // self.ENTRY_SIZE
            read = 0
            entries = 0
            step = 8192 * self.ENTRY_SIZE
            while read < max_entries * self.ENTRY_SIZE:
                chunk = handle.pread(min(step, max_entries * self.ENTRY_SIZE - read), read)
                if not chunk:
                    break
                chunks.append(chunk)
                read += len(chunk)
                buf = np.frombuffer(b"".join(chunks), np.uint8)
                entries = int(
                    _search.valid_prefix(
                        buf,
                        len(buf) // self.ENTRY_SIZE,
                        self.ENTRY_SIZE,
                        self.KEY_OFFSET,
                        self.KEY_WIDTH,
                        self.VALUE_OFFSET,
                        self.VALUE_WIDTH,
                    )
                )
                if entries < len(buf) // self.ENTRY_SIZE:
                    break
                step *= 2
        finally:
            handle.close()
        data = b"".join(chunks)[: entries * self.ENTRY_SIZE]
        self._length = length
        self._buf = np.frombuffer(data, np.uint8) if data else np.empty(0, np.uint8)
        self._max_entries = max_entries
        self._entries = entries

    def _map(self, length: int) -> None:
        """(Re)map the first ``length`` bytes of the writable file."""
        self._unmap()
        if length:
            self._mm = mmap.mmap(self._file.fileno(), length)  # type: ignore[attr-defined]
            self._buf = np.frombuffer(self._mm, np.uint8)
        self._length = length
        self._max_entries = length // self.ENTRY_SIZE
        if self._mm is not None:
            self._full_at = self._max_entries - self.SPARE_ENTRIES

    def _unmap(self) -> None:
        """Drop the buffer and close the mapping once no lookup still reads it.

        A lookup running in another thread holds a view of the buffer, and ``mmap.close``
        refuses (BufferError) while one exists: wait for it, briefly, since the caller may cut
        the file next. A view still held after that (one kept by something else than a lookup)
        keeps the mapping alive until it goes; only our reference is dropped.
        """
        self._buf = _EMPTY
        self._full_at = 0
        mm, self._mm = self._mm, None
        if mm is None:
            return
        deadline = time.monotonic() + _PIN_WAIT_S
        pause = 1e-6
        while True:
            try:
                mm.close()
                return
            except BufferError:
                if time.monotonic() >= deadline:
                    return
                time.sleep(pause)
                pause = min(pause * 2, 1e-3)

    def _begin_remap(self) -> None:
        self._generation += 1  # odd: lookups from now on redo themselves under the lock

    def _end_remap(self) -> None:
        if not self._closed:
            self._generation += 1

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(self._path)

    def _after_open(self) -> None:
        """Subclasses recompute their cached last entry here."""

    # -- state --------------------------------------------------------------------------------
    @property
    def path(self) -> str:
        return self._path

    @property
    def entries(self) -> int:
        """Number of valid entries."""
        return self._entries

    @property
    def max_entries(self) -> int:
        return self._max_entries

    @property
    def length(self) -> int:
        """Current file (and mapping) length in bytes."""
        return self._length

    @property
    def size_in_bytes(self) -> int:
        return self._entries * self.ENTRY_SIZE

    def is_full(self) -> bool:
        return self._entries >= self._max_entries - self.SPARE_ENTRIES

    def has_room(self) -> bool:
        """Whether one more entry can be appended: open for writing and not :meth:`is_full`.
        An append that adds no entry still needs this of both indexes (else a roll is due):
        the segment's per-append fast path asks it on every call."""
        return self._entries < self._full_at

    def room(self) -> int:
        """How many more entries the index takes before :meth:`is_full`: 0 when it is full,
        read-only or closed. An append path that adds many entries at once (the buffered
        appends' run) stops its run there, as one append at a time would have rolled."""
        return max(self._full_at - self._entries, 0)

    def relative_offset(self, offset: int) -> int:
        rel = offset - self.base_offset
        if not 0 <= rel <= INT32_MAX:
            raise IndexOffsetOverflowError(
                f"offset {offset} cannot be stored relative to base offset {self.base_offset} "
                f"in {self._path}: the difference does not fit 32 bits"
            )
        return rel

    def can_append_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT32_MAX

    # -- searching ------------------------------------------------------------------------------
    def _slot(self, target: int, by_key: bool, kind: int) -> int:
        off, width = (
            (self.KEY_OFFSET, self.KEY_WIDTH) if by_key else (self.VALUE_OFFSET, self.VALUE_WIDTH)
        )
        args = (self.ENTRY_SIZE, off, width, target, kind, self.warm_entries)
        generation = self._generation
        slot = _search.search(self._buf, self._entries, *args)
        if generation != self._generation or generation & 1:
            with self._lock:
                self._check_open()
                slot = _search.search(self._buf, self._entries, *args)
        return int(slot)

    def _slots(self, targets: np.ndarray, by_key: bool, kind: int) -> np.ndarray:
        off, width = (
            (self.KEY_OFFSET, self.KEY_WIDTH) if by_key else (self.VALUE_OFFSET, self.VALUE_WIDTH)
        )
        targets = np.ascontiguousarray(targets, np.int64)
        out = np.empty(len(targets), np.int64)
        if kind == _search.LLB and by_key and len(targets) >= _SORTED_BATCH and self._ordered():
            # many floor lookups: answer them in key order in one pass over the index
            order = np.argsort(targets, kind="stable")
            slots = np.empty(len(targets), np.int64)
            self._stable(_search.floor_sorted, self.ENTRY_SIZE, off, width, targets[order], slots)
            out[order] = slots
            return out
        self._stable(
            _search.search_many,
            self.ENTRY_SIZE,
            off,
            width,
            targets,
            kind,
            self.warm_entries,
            out,
        )
        return out

    def _stable(self, kernel: Any, *args: Any) -> Any:
        """``kernel(buffer, entries, *args)`` over a mapping that did not change meanwhile (the
        protocol of the module doc); kernels that fill ``out`` arrays simply fill them again."""
        generation = self._generation
        result = kernel(self._buf, self._entries, *args)
        if generation != self._generation or generation & 1:
            with self._lock:
                self._check_open()
                result = kernel(self._buf, self._entries, *args)
        return result

    def _entry_fields(self, fmt: struct.Struct, n: int) -> tuple[int, int]:
        """The two fields of entry ``n`` (already checked to be < ``entries``)."""
        generation = self._generation
        try:
            a, b = fmt.unpack_from(self._buf.data, n * self.ENTRY_SIZE)
        except struct.error:  # the buffer was swapped for an empty one meanwhile
            generation = -1
        if generation != self._generation or generation & 1:
            with self._lock:
                self._check_open()
                a, b = fmt.unpack_from(self._buf.data, n * self.ENTRY_SIZE)
        return a, b

    def _entry_bytes(self) -> np.ndarray:
        """A copy of the valid entries' bytes (never a view of the mapping)."""
        generation = self._generation
        raw = self._buf[: self._entries * self.ENTRY_SIZE].copy()
        if generation != self._generation or generation & 1:
            with self._lock:
                self._check_open()
                raw = self._buf[: self._entries * self.ENTRY_SIZE].copy()
        return raw

    def _floors(self, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Floor slots of many key targets with both fields of each found entry."""
        targets = np.ascontiguousarray(targets, np.int64)
        if len(targets) >= _SORTED_BATCH and self._ordered():
            order = np.argsort(targets)
            keys = np.empty(len(targets), np.int64)
            values = np.empty(len(targets), np.int64)
            slots = self._stable(
                _search.floor_sorted_fields,
                self.ENTRY_SIZE,
                self.KEY_OFFSET,
                self.KEY_WIDTH,
                self.VALUE_OFFSET,
                self.VALUE_WIDTH,
                targets[order],
                keys,
                values,
            )
            out_slots = np.empty_like(slots)
            out_keys = np.empty_like(keys)
            out_values = np.empty_like(values)
            out_slots[order] = slots
            out_keys[order] = keys
            out_values[order] = values
            return out_slots, out_keys, out_values
        slots = self._slots(targets, True, _search.LLB)
        return slots, self._fields(slots, True), self._fields(slots, False)

    def _ordered(self) -> bool:
        """Whether the keys strictly increase (true unless a crashed file was opened writable
        and its zero tail taken for entries, as Kafka does); checked once, then kept up."""
        if self._ordered_entries != self._entries:
            valid = self._stable(
                _search.valid_prefix,
                self.ENTRY_SIZE,
                self.KEY_OFFSET,
                self.KEY_WIDTH,
                self.VALUE_OFFSET,
                self.VALUE_WIDTH,
            )
            self._keys_ordered = valid == self._entries or (self._entries == 1)
            self._ordered_entries = self._entries
        return self._keys_ordered

    def _fields(self, slots: np.ndarray, by_key: bool) -> np.ndarray:
        off, width = (
            (self.KEY_OFFSET, self.KEY_WIDTH) if by_key else (self.VALUE_OFFSET, self.VALUE_WIDTH)
        )
        out = np.empty(len(slots), np.int64)
        self._stable(_search.fields_at_slots, slots, self.ENTRY_SIZE, off, width, out)
        return out

    # -- writing -------------------------------------------------------------------------------
    def _require_writable(self, what: str) -> None:
        if not self.writable:
            raise ReadOnlyError(f"cannot {what} {self._path}: the index was opened read-only")
        if self._closed:
            raise ClosedError(self._path, what)

    def _check_room(self) -> None:
        if self.is_full():
            raise IndexFullError(f"attempt to append to a full index {self._path}")

    def resize(self, new_size: int) -> bool:
        """Set the file length to ``new_size`` rounded down to whole entries (entries unchanged)."""
        self._require_writable("resize")
        rounded = round_down(new_size, self.ENTRY_SIZE)
        if rounded == self._length:
            return False
        with self._lock:
            self._begin_remap()
            try:
                self._unmap()
                self._file.truncate(rounded)  # type: ignore[attr-defined]
                self._map(rounded)
            finally:
                self._end_remap()
        self._after_resize()
        return True

    def _after_resize(self) -> None:
        """TimeIndex re-reads its last entry after a resize."""

    def trim_to_valid_size(self) -> bool:
        return self.resize(self.ENTRY_SIZE * self._entries)

    def reset(self) -> None:
        """Drop every entry and give the file back its full preallocated size."""
        self._require_writable("reset")
        self._truncate_to_entries(0)
        self.resize(self.max_index_size)

    def truncate(self) -> None:
        self._truncate_to_entries(0)

    def truncate_to_entries(self, n: int) -> None:
        """Keep the first ``n`` entries (never grows the count)."""
        self._truncate_to_entries(min(max(n, 0), self._entries))

    def _truncate_to_entries(self, n: int) -> None:
        self._require_writable("truncate")
        self._entries = n
        self._after_truncate()

    def _after_truncate(self) -> None:
        """Subclasses recompute their cached last entry here."""

    def flush(self) -> None:
        if self.writable and self._mm is not None:
            self._mm.flush()

    def close(self) -> None:
        """Trim (writable only) and unmap. A read-only index is never trimmed."""
        if self._closed:
            return
        if self.writable:
            self.trim_to_valid_size()
        self._release()

    def close_handler(self) -> None:
        """Unmap without trimming (Kafka's path when a disk failed)."""
        self._release()

    def _release(self) -> None:
        """The final close: later reads raise ClosedError (module doc)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                if not self._generation & 1:
                    self._generation += 1  # odd for good
            self._unmap()
            if self._file is not None:
                self._file.close()  # type: ignore[attr-defined]
                self._file = None

    @property
    def closed(self) -> bool:
        return self._closed

    def delete_if_exists(self) -> bool:
        self._release()
        try:
            os.remove(self._path)
        except FileNotFoundError:
            return False
        return True

    def rename_to(self, new_path: str | os.PathLike[str]) -> None:
        """Move the file; the in-memory path follows even if the move fails (as Kafka)."""
        self._require_writable("rename")
        target = os.fspath(new_path)
        try:
            os.replace(self._path, target)
        finally:
            self._path = target

    def _sanity_length(self) -> None:
        if self._length % self.ENTRY_SIZE != 0:
            raise CorruptIndexError(
                f"index file length {self._length} is not a multiple of the "
                f"{self.ENTRY_SIZE}-byte entry size",
                path=self._path,
                position=round_down(self._length, self.ENTRY_SIZE),
            )

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __len__(self) -> int:
        return self._entries

    def __repr__(self) -> str:
        mode = "rw" if self.writable else "r"
        return (
            f"{type(self).__name__}({self._path!r}, base_offset={self.base_offset}, "
            f"entries={self._entries}, max_entries={self._max_entries}, mode={mode!r})"
        )
