"""Byte ranges of segment files into Arrow record batches, chunk by chunk: what ``Log``'s
columnar reads and each Spark task share.

A segment is read by position in bounded chunks (never mapped: a live broker may truncate its
active segment under a reader) and decoded by the columnar path; a batch cut off at the end of
the range (one a broker is still writing) simply ends it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa

from kafkalog import files
from kafkalog.errors import (
    BatchTooLargeError,
    CorruptRecordError,
    DamagedLogError,
    _PositionedError,
)
from kafkalog.log.damage import OffsetOrder, SkippedBytes
from kafkalog.log.segment import cut_off_damage, jumped_ahead, torn_absurd_entry
from kafkalog.records import LogReader, decode_range
from kafkalog.records.batch import batch_at
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
    last_segment: bool = True,
    first_offset: int = 0,
    on_damage: Callable[[SkippedBytes], None] | None = None,
    **decode: Any,
) -> Iterator[pa.RecordBatch]:
    """:func:`_decode_file`, or, with ``on_damage``, the same read that skips damage instead
    of raising: from the damaged byte to the next whole, valid batch (a resync scan), each
    skip handed to ``on_damage`` so that it is reported, never silent. Either way the damage
    is located at its batch's first byte, searched from the end of the chunks already read
    (the columnar decoder names a byte inside the batch, and a chunk that fails yields none
    of its good batches: they are decoded again, up to the damage)."""
    limits = decode.get("limits", DEFAULT_LIMITS)
    position, floor = start, first_offset
    while position < end:
        # [the last offset read, the position after the chunks read]: where a failure starts
        seen = [floor - 1, position]
        try:
            yield from _decode_file(
                handle,
                position,
                end,
                path=path,
                last_offset=last_offset,
                chunk_bytes=chunk_bytes,
                last_segment=last_segment,
                first_offset=floor,
                seen=seen,
                **decode,
            )
            return
        except CorruptRecordError as e:
            if on_damage is None and isinstance(e, DamagedLogError):
                raise
            done = seen[1]
            at = _valid_run_end(handle, done, end, path, limits, seen[0], first_offset)
            if on_damage is None:
                raise DamagedLogError.found(
                    f"{batch_at(handle.pread(61, at))}: {e.reason} (at byte {e.position}; "
                    f"expected a batch from offset {seen[0] + 1})",
                    path=path,
                    position=at,
                    partition=os.path.dirname(path),
                ) from e
            if at > done:
                yield from _decode_file(
                    handle,
                    done,
                    at,
                    path=path,
                    last_offset=last_offset,
                    chunk_bytes=chunk_bytes,
                    last_segment=True,
                    first_offset=seen[0] + 1,
                    seen=seen,
                    **decode,
                )
            resume = next_valid_entry(lambda p, n: handle.pread(n, p), end, at + 1, limits)
            last = None
            if resume is not None:
                last = int.from_bytes(handle.pread(8, resume), "big", signed=True) - 1
            on_damage(
                SkippedBytes(
                    path,
                    at,
                    end if resume is None else resume,
                    e.reason,
                    seen[0] + 1,
                    None if last is None else max(last, seen[0]),
                )
            )
            if resume is None:
                return
            position, floor = resume, seen[0] + 1


def _valid_run_end(
    handle: files.ReadHandle,
    start: int,
    end: int,
    path: str,
    limits: Limits,
    previous: int,
    segment_base: int,
) -> int:
    """The end of the whole, valid batches (CRCs checked, offsets growing from ``previous``)
    from ``start``, before ``end``: where a skip starts (the columnar decoder names a byte
    inside a batch, or a chunk, not the damaged batch)."""
    order = OffsetOrder(previous, segment_base)
    position = start
    want = CHUNK_BYTES
    while position < end:
        data = handle.pread(min(want, end - position), position)
        reader = LogReader(data, path=path, limits=limits, verify_crc=True)
        try:
            for entry in reader:
                _, bad, _ = order.push(replace(entry, position=position + entry.position))
                if bad is not None:
                    return bad.position
        except CorruptRecordError:
            return position + reader.end_position
        if reader.incomplete_tail is None and reader.end_position == len(data):
            position += len(data)
            continue
        if reader.end_position == 0:
            if len(data) < want or position + len(data) >= end:
                return position  # cut off, or damaged in a way only the size field shows
            want *= 2
            continue
        position += reader.end_position
    return min(position, end)


def _decode_file(
    handle: files.ReadHandle,
    start: int,
    end: int,
    *,
    path: str,
    last_offset: int | None = None,
    chunk_bytes: int = CHUNK_BYTES,
    last_segment: bool = True,
    first_offset: int = 0,
    seen: list[int] | None = None,
    **decode: Any,
) -> Iterator[pa.RecordBatch]:
    """The records of bytes [start, end) of an open segment file (``decode`` goes to
    :func:`~kafkalog.records.decode_range`), stopping after the chunk that reaches
    ``last_offset``. Errors name ``path`` and the byte in the file. The chunks are read into
    one reused buffer: nothing decoded refers to it (keys and values are copied out).

    Damage is an error, never fewer rows (:mod:`kafkalog.log.damage`): offsets must grow from
    ``first_offset`` (the segment's base: a base offset is outside the batch CRC), and the
    range may end in a batch cut off only in its log's ``last_segment`` with nothing valid
    after it (an append in flight). ``seen``, if given, is kept as [the last offset yielded,
    the position after the chunks yielded]: where a caller looks for the damage."""
    position = start
    previous = first_offset - 1
    # the last entry's (byte, first, last offset) from its header, and the last before it
    held = (-1, first_offset - 1, first_offset - 1, first_offset - 1)
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
            located = e.located(path, position)
            if isinstance(located, BatchTooLargeError) and located.position is not None:
                at = located.position - 8  # the size field's entry
                if torn_absurd_entry(
                    lambda p, n: handle.pread(n, p),
                    handle.size(),
                    at,
                    previous + 1,
                    last_segment,
                    decode.get("limits", DEFAULT_LIMITS),
                    bool(decode.get("verify_crc", True)),
                ):
                    if at > position:
                        # the whole batches before it first (the next chunk starts at it)
                        end = at
                        continue
                    return  # the end of the log: a torn tail whose size field reads absurd
            raise located from e
        if result.next_position == 0:
            tail = result.incomplete_tail
            if tail is None:
                return
            if position + len(data) >= end or len(data) < length:
                # the end of the range (or of the file): a batch still being written, unless
                # valid batches follow the cut-off one, or later segments follow this one
                limits = decode.get("limits", DEFAULT_LIMITS)
                at = position + tail.position
                why = cut_off_damage(
                    lambda p, n: handle.pread(n, p),
                    position + len(data),
                    at,
                    previous + 1,
                    last_segment,
                    limits,
                    bool(decode.get("verify_crc", True)),
                )
                if why is not None:
                    raise DamagedLogError.found(
                        f"an entry cut off at byte {at} {why}",
                        path=path,
                        position=at,
                        partition=os.path.dirname(path),
                    )
                return
            # a batch longer than a chunk: read it whole (still bounded by ``end``)
            want = max(want * 2, tail.declared_size or 0)
            continue
        if result.header_offsets is not None and len(result.header_offsets):
            held = _headers_out_of_line(result.header_offsets, held, position, path)
            # the chunk's rows go out now: its last batch must not have jumped ahead of the
            # next one, which the next chunk's check would see too late
            _followed_in_line(handle, position + result.next_position, held, path)
        offsets = result.batch.column("offset")
        if len(offsets):
            values = offsets.to_numpy()
            if values[0] <= previous or (
                len(values) > 1 and bool((values[1:] <= values[:-1]).any())
            ):
                raise DamagedLogError.found(
                    f"non-consecutive offsets in the batches of bytes {position} to "
                    f"{position + result.next_position} (offsets must grow from {previous + 1})",
                    path=path,
                    position=position,
                    partition=os.path.dirname(path),
                )
            previous = int(values[-1])
            if seen is not None:
                seen[0] = previous
        yield _file_positions(result.batch, position)
        if last_offset is not None and len(offsets) and previous >= last_offset:
            return
        position += result.next_position
        if seen is not None:
            seen[1] = position


def _file_positions(batch: pa.RecordBatch, position: int) -> pa.RecordBatch:
    """``batch`` with its ``batchPosition`` column (when asked for) a byte of the file, not of
    the chunk it was decoded from."""
    if not position or "batchPosition" not in batch.schema.names:
        return batch
    k = batch.schema.get_field_index("batchPosition")
    moved = pa.array(batch.column(k).to_numpy() + position, pa.int64())
    return batch.set_column(k, "batchPosition", moved)


def offsets_within(batch: pa.RecordBatch, start: int, end: int) -> np.ndarray:
    """Which rows of ``batch`` have offsets in [start, end)."""
    offsets = batch.column("offset").to_numpy()
    return (offsets >= start) & (offsets < end)  # type: ignore[no-any-return]


def keep_rows(batch: pa.RecordBatch, mask: np.ndarray) -> pa.RecordBatch:
    return batch if mask.all() else batch.filter(pa.array(mask))


def _headers_out_of_line(
    heads: np.ndarray, held: tuple[int, int, int, int], position: int, path: str
) -> tuple[int, int, int, int]:
    """Raise :class:`DamagedLogError` when the entries' headers (``heads``: byte in the chunk
    at ``position``, first and last offset) do not grow from the ``held`` entry (byte, first,
    last, the last offset before it), naming the entry to blame as the log's walks do
    (:func:`~kafkalog.log.segment.held_is_damaged`); else the last entry, held. A control
    batch has no row, so a base offset moved onto one shows only here."""
    firsts, lasts = heads[:, 1], heads[:, 2]
    before = np.concatenate(([held[2]], lasts[:-1]))
    bad = np.flatnonzero((firsts <= before) | (lasts < firsts))
    if not bad.size:
        k = len(heads) - 1
        return (
            position + int(heads[k, 0]),
            int(firsts[k]),
            int(lasts[k]),
            int(before[k]),
        )
    k = int(bad[0])
    if k:
        held = (
            position + int(heads[k - 1, 0]),
            int(firsts[k - 1]),
            int(lasts[k - 1]),
            int(before[k - 1]),
        )
    first, last = int(firsts[k]), int(lasts[k])
    at = position + int(heads[k, 0])
    why = (
        f"non-consecutive offsets: the batch at byte {at} holds offsets {first}..{last} after "
        f"one ending at offset {int(before[k])}"
    )
    ahead = jumped_ahead(*held, first) if held[0] >= 0 and first <= last else None
    if ahead is not None:
        at, why = held[0], ahead
    raise DamagedLogError.found(why, path=path, position=at, partition=os.path.dirname(path))


def _followed_in_line(
    handle: files.ReadHandle, at: int, held: tuple[int, int, int, int], path: str
) -> None:
    """Raise :class:`DamagedLogError` naming ``held`` (byte, first, last offset, the last
    offset before it), a chunk's last entry, when the v2 batch at byte ``at`` (after the chunk,
    not read yet) shows its base offset jumped ahead: that batch is in line with the entries
    before ``held`` and ``held``'s span fits under it (:func:`~kafkalog.log.segment.jumped_ahead`).
    Anything else there is checked when its own chunk is read."""
    head = handle.pread(17, at)
    if len(head) < 17 or head[16] != 2:
        return
    ahead = jumped_ahead(*held, int.from_bytes(head[:8], "big", signed=True))
    if ahead is not None:
        raise DamagedLogError.found(
            ahead, path=path, position=held[0], partition=os.path.dirname(path)
        )
