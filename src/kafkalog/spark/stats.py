"""What each Spark task really read, for ``statsDir``: segment bytes fetched, records yielded.

Spark gives a Python data source no channel for custom task metrics, and an accumulator cannot
reach the reader (Spark builds the data source in a Python worker from the class and its string
options, so nothing made on the driver is handed to it). So each task that was given
``statsDir`` leaves one small JSON file there when it ends, and :func:`collect` sums them. The
directory must be one every executor can write (local mode: any local directory; a cluster: a
shared mount), and one per query: files of an earlier query would be counted too.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from kafkalog import files


@dataclass
class ReadStats:
    """Counters of one task: bytes returned by the segment reads, and the rows yielded."""

    bytes_read: int = 0
    records: int = 0
    segments: int = 0

    def counting(self, handle: files.ReadHandle) -> files.ReadHandle:
        self.segments += 1
        return _CountingHandle(handle, self)


class _CountingHandle:
    """A :class:`kafkalog.files.ReadHandle` that adds what every ``pread`` returned."""

    __slots__ = ("_handle", "_stats")

    def __init__(self, handle: files.ReadHandle, stats: ReadStats) -> None:
        self._handle = handle
        self._stats = stats

    def size(self) -> int:
        return self._handle.size()

    def pread(self, length: int, position: int) -> bytes:
        data = self._handle.pread(length, position)
        self._stats.bytes_read += len(data)
        return data

    def pread_into(self, buffer: memoryview, position: int) -> int:
        done = self._handle.pread_into(buffer, position)
        self._stats.bytes_read += done
        return done

    def identity(self) -> tuple[int, int] | None:
        return self._handle.identity()

    def close(self) -> None:
        self._handle.close()


def recorded(
    batches: Iterator[pa.RecordBatch], stats: ReadStats, directory: str
) -> Iterator[pa.RecordBatch]:
    """``batches`` passed through, counting rows; the task's file is written when they end
    (also when Spark stops early, as under a ``limit``)."""
    try:
        for batch in batches:
            stats.records += batch.num_rows
            yield batch
    finally:
        write(directory, stats)


def write(directory: str, stats: ReadStats) -> None:
    os.makedirs(directory, exist_ok=True)
    name = os.path.join(directory, f"task-{uuid.uuid4().hex}.json")
    with open(name + ".tmp", "w") as f:
        json.dump(
            {"bytes_read": stats.bytes_read, "records": stats.records, "segments": stats.segments},
            f,
        )
    os.replace(name + ".tmp", name)  # a reader never sees half a file


def collect(directory: str) -> ReadStats:
    """The sum over every task file in ``directory`` (none yet: zeros)."""
    total = ReadStats()
    if not os.path.isdir(directory):
        return total
    for name in sorted(os.listdir(directory)):
        if name.startswith("task-") and name.endswith(".json"):
            with open(os.path.join(directory, name)) as f:
                one = json.load(f)
            total.bytes_read += int(one["bytes_read"])
            total.records += int(one["records"])
            total.segments += int(one["segments"])
    return total
