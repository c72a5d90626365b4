"""Walking the log entries of a ``.log`` file or any buffer of them (spec §8.9).

Kafka stops silently when fewer than 18 bytes remain or the last entry is cut off; kafkalog does
the same but *records* the cut-off tail (:class:`IncompleteTail`) so tools can tell a crash or an
in-flight append from clean end-of-data, and refuses impossible sizes with a positioned error.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Union

from kafkalog import files
from kafkalog.errors import (
    BatchTooLargeError,
    CorruptRecordError,
    IncompleteTailError,
    _PositionedError,
)
from kafkalog.records.batch import HEADER_SIZE, LOG_OVERHEAD, RecordBatch
from kafkalog.records.types import DEFAULT_LIMITS, Limits

if TYPE_CHECKING:
    from kafkalog.records.legacy import LegacyEntry

LogEntry = Union[RecordBatch, "LegacyEntry"]

_OFFSET_SIZE = struct.Struct(">qi")
MAGIC_OFFSET = 16
HEADER_SIZE_UP_TO_MAGIC = 17
MIN_ENTRY_SIZE = 14  # Kafka's LegacyRecord.RECORD_OVERHEAD_V0
MAX_MAGIC = 2  # the newest log format (RecordBatch.CURRENT_MAGIC_VALUE)


def bad_magic_reason(magic: int) -> str:
    """Why an entry whose magic byte (read unsigned) is ``magic`` cannot be read.

    Kafka's file reader takes any magic above 1 for a v2 batch, so a flipped magic byte would
    be decoded as a batch it may not be; no Kafka release writes anything but 0, 1 or 2, so
    every reader here (the object walk and the columnar kernels alike) refuses it, and a tool
    can name it instead of showing it as a valid batch."""
    if magic >= 128:  # Java reads the magic as a signed byte: no format is negative
        return f"invalid magic byte {magic - 256} (negative as Kafka reads it)"
    return f"invalid magic byte {magic}: Kafka's log formats are magic 0, 1 and 2"


@dataclass(frozen=True, slots=True)
class IncompleteTail:
    """The cut-off last entry of a buffer: where it starts, what it claims, what is there."""

    position: int
    declared_size: int | None  # None when not even the 12-byte entry header is complete
    available: int


def read_only_buffer(path: str | os.PathLike[str]) -> memoryview:
    """Map a file read-only: needs only read permission and never changes the file. A file
    behind a pyarrow.fs URI is fetched whole instead."""
    if files.is_remote(path):
        return memoryview(files.read_bytes(os.fspath(path)))
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return memoryview(b"")
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    return memoryview(mm)


class LogReader:
    """Iterates the entries of a buffer, as ``FileRecords.batchesFrom`` does.

    After iteration, :attr:`incomplete_tail` tells whether the data ended mid-entry and
    :attr:`end_position` where the last complete entry ended. With ``strict_tail=True`` a cut-off
    tail raises :class:`IncompleteTailError` instead. ``verify_crc`` checks every entry's CRC
    while walking (Kafka's readers leave that to the consumer). ``base_position`` is where the
    buffer starts in its file: entry positions, the tail and errors are reported in file terms,
    so a file can be walked in chunks.
    """

    def __init__(
        self,
        buffer: bytes | bytearray | memoryview,
        *,
        path: str | None = None,
        start: int = 0,
        end: int | None = None,
        limits: Limits = DEFAULT_LIMITS,
        verify_crc: bool = False,
        strict_tail: bool = False,
        base_position: int = 0,
    ) -> None:
        self.base_position = base_position
        self.buffer = memoryview(buffer)
        self.path = path
        self.start = start
        self.end = len(self.buffer) if end is None else min(end, len(self.buffer))
        self.limits = limits
        self.verify_crc = verify_crc
        self.strict_tail = strict_tail
        self.incomplete_tail: IncompleteTail | None = None
        self.end_position = start

    @classmethod
    def open(cls, path: str | os.PathLike[str], **kwargs: object) -> LogReader:
        """A reader over a file mapped read-only (see :func:`read_only_buffer`)."""
        return cls(read_only_buffer(path), path=os.fspath(path), **kwargs)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[LogEntry]:
        if not self.base_position:
            yield from self._walk()
            return
        base = self.base_position
        try:
            for entry in self._walk():
                # the entry was just made by the walk and is seen by no one else: its
                # position is set in place (dataclasses.replace cost ~30 us an entry, more
                # than the walk itself, on every segment read past byte 0)
                object.__setattr__(entry, "position", entry.position + base)
                yield entry
        except _PositionedError as e:
            raise e.located(self.path, base) from e
        finally:
            self.end_position += base
            if self.incomplete_tail is not None:
                tail = self.incomplete_tail
                self.incomplete_tail = IncompleteTail(
                    tail.position + base, tail.declared_size, tail.available
                )

    def _walk(self) -> Iterator[LogEntry]:
        buf = self.buffer
        pos = self.start
        end = self.end
        self.incomplete_tail = None
        max_size = self.limits.max_batch_bytes
        while True:
            self.end_position = pos
            remaining = end - pos
            if remaining <= 0:
                return
            if remaining < HEADER_SIZE_UP_TO_MAGIC + 1:
                self._tail(pos, None if remaining < LOG_OVERHEAD else self._size_at(pos), remaining)
                return
            _, size = _OFFSET_SIZE.unpack_from(buf, pos)
            if size < MIN_ENTRY_SIZE:
                raise CorruptRecordError(
                    f"record size {size} is smaller than the minimum record overhead "
                    f"({MIN_ENTRY_SIZE})",
                    path=self.path,
                    position=pos + 8,
                )
            if size + LOG_OVERHEAD > max_size:
                raise BatchTooLargeError(
                    f"entry size {size + LOG_OVERHEAD} exceeds the maximum batch size "
                    f"{max_size} (raise Limits.max_batch_bytes if this is intended)",
                    path=self.path,
                    position=pos + 8,
                )
            if size > remaining - LOG_OVERHEAD:
                self._tail(pos, size + LOG_OVERHEAD, remaining)
                return
            magic = buf[pos + MAGIC_OFFSET]
            if magic > MAX_MAGIC:
                raise CorruptRecordError(
                    bad_magic_reason(magic), path=self.path, position=pos + MAGIC_OFFSET
                )
            entry = self._parse(pos, magic)
            if self.verify_crc:
                entry.ensure_valid()
            yield entry
            pos += LOG_OVERHEAD + size

    def _size_at(self, pos: int) -> int:
        return int(_OFFSET_SIZE.unpack_from(self.buffer, pos)[1]) + LOG_OVERHEAD

    def _parse(self, pos: int, magic: int) -> LogEntry:
        if magic >= 2:
            if self.end - pos < HEADER_SIZE:
                raise CorruptRecordError(
                    "record batch shorter than its 61-byte header", path=self.path, position=pos
                )
            return RecordBatch.parse(self.buffer[: self.end], pos, self.path)
        from kafkalog.records.legacy import LegacyEntry

        return LegacyEntry.parse(self.buffer[: self.end], pos, self.path)

    def _tail(self, pos: int, declared: int | None, available: int) -> None:
        self.incomplete_tail = IncompleteTail(pos, declared, available)
        if self.strict_tail:
            what = "entry header" if declared is None else f"entry of {declared} bytes"
            raise IncompleteTailError(
                f"incomplete {what} at the end: only {available} bytes present",
                path=self.path,
                position=pos,
            )


def iter_entries(
    buffer: bytes | bytearray | memoryview,
    *,
    path: str | None = None,
    start: int = 0,
    end: int | None = None,
    limits: Limits = DEFAULT_LIMITS,
    verify_crc: bool = False,
) -> Iterator[LogEntry]:
    """Entries of ``buffer`` from ``start``; a cut-off tail ends the iteration quietly."""
    return iter(
        LogReader(buffer, path=path, start=start, end=end, limits=limits, verify_crc=verify_crc)
    )
