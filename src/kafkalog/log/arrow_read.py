"""Byte ranges of segment files into Arrow record batches, chunk by chunk: what ``Log``'s
columnar reads and each Spark task share.

A segment is read by position in bounded chunks (never mapped: a live broker may truncate its
active segment under a reader) and decoded by the columnar path; a batch cut off at the end of
the range (one a broker is still writing) simply ends it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafkalog import files
from kafkalog.errors import DamagedLogError, _PositionedError
from kafkalog.records import decode_range
from kafkalog.records.resync import next_valid_entry
from kafkalog.records.types import DEFAULT_LIMITS, Limits

CHUNK_BYTES = 16 * 1024 * 1024


def decode_file(
    handle: files.ReadHandle,
    start: int,
    end: int,
    *,
    path: str,
    last_offset: int | None = None,
    chunk_bytes: int = CHUNK_BYTES,
    **decode: Any,
) -> Iterator[pa.RecordBatch]:
    """The records of bytes [start, end) of an open segment file (``decode`` goes to
    :func:`~kafkalog.records.decode_range`), stopping after the chunk that reaches
    ``last_offset``. Errors name ``path`` and the byte in the file. The chunks are read into
    one reused buffer: nothing decoded refers to it (keys and values are copied out)."""
    position = start
    want = chunk_bytes
    # one buffer for every chunk (the decoded batches copy what they keep out of it)
    buffer = memoryview(bytearray(min(want, max(0, end - start))))
    while position < end:
        length = min(want, end - position)
        if length > len(buffer):
            buffer = memoryview(bytearray(length))
        data = buffer[: handle.pread_into(buffer[:length], position)]
        try:
            result = decode_range(data, path=path, **decode)
        except _PositionedError as e:
            raise e.located(path, position) from e
        if result.next_position == 0:
            tail = result.incomplete_tail
            if tail is None:
                return
            if position + len(data) >= end:
                # the end of the range: a batch still being written, unless valid batches
                # follow the cut-off one inside the range (then records would go unread)
                limits = decode.get("limits", DEFAULT_LIMITS)
                _check_cut_off(handle, position + tail.position, end, path, limits)
                return
            # a batch longer than a chunk: read it whole (still bounded by ``end``)
            want = max(want * 2, tail.declared_size or 0)
            continue
        yield result.batch
        offsets = result.batch.column("offset")
        if last_offset is not None and len(offsets) and pc.max(offsets).as_py() >= last_offset:
            return
        position += result.next_position


def _check_cut_off(handle: files.ReadHandle, at: int, end: int, path: str, limits: Limits) -> None:
    after = next_valid_entry(lambda p, n: handle.pread(n, p), end, at + 1, limits)
    if after is not None:
        raise DamagedLogError(
            f"damaged log: an entry cut off at byte {at} with a valid batch after it at byte "
            f"{after}; run `kafkalog repair` on the partition to move the damaged bytes into a "
            "quarantine folder (nothing is deleted)",
            path=path,
            position=at,
        )


def offsets_within(batch: pa.RecordBatch, start: int, end: int) -> np.ndarray:
    """Which rows of ``batch`` have offsets in [start, end)."""
    offsets = batch.column("offset").to_numpy()
    return (offsets >= start) & (offsets < end)  # type: ignore[no-any-return]


def keep_rows(batch: pa.RecordBatch, mask: np.ndarray) -> pa.RecordBatch:
    return batch if mask.all() else batch.filter(pa.array(mask))
