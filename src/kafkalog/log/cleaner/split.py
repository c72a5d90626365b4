"""A segment whose offsets overflow its 32-bit relative offsets, split in several (Kafka's
``LogSplitter`` / ``UnifiedLog.splitOverflowedSegment``).

Why: old brokers (before Kafka 0.11's rule) could leave one segment holding offsets more than
2^31-1 past its base offset. Such a segment reads well, but a cleaning cannot write it back as
one segment (an index entry cannot name the offset), so every cleaning of it failed. Kafka's
cleaner splits it and aborts that cleaning; the next one cleans the pieces. So does kafkalog.

The pieces are written as ``.cleaned`` segments, each starting at the base offset of its first
batch (the first keeps the old segment's base, so that a crash during the swap is completed by
the loader as a cleaner's swap is: every ``.swap`` renamed first, the old segment then taken
out and renamed ``.deleted``, the ``.swap`` suffixes dropped last). Every batch is copied as
it is: no record changes, is dropped or moves to another offset.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from kafkalog import files
from kafkalog.index.base import INT32_MAX
from kafkalog.log.layout import CLEANED_SUFFIX, SEGMENT_SUFFIXES, SWAP_SUFFIX, segment_file
from kafkalog.log.segment import LogSegment


def overflows(seg: LogSegment) -> bool:
    """Whether the segment holds an offset past its base + 2^31-1."""
    return seg.read_next_offset() - 1 - seg.base_offset > INT32_MAX


def cleaned_segment(log: Any, base: int) -> LogSegment:
    """A new, empty ``.cleaned`` segment at ``base`` for ``log``, the leftovers of a crashed
    cleaning or split at that base removed first (a cleaning's and a split's output alike)."""
    for suffix in SEGMENT_SUFFIXES:
        with contextlib.suppress(FileNotFoundError):
            os.remove(segment_file(log.directory, base, suffix + CLEANED_SUFFIX))
    return LogSegment(
        log.directory,
        base,
        log.config,
        writable=True,
        suffix=CLEANED_SUFFIX,
        clock=log.clock,
        limits=log.limits,
    )


def split_overflowed(log: Any, seg: LogSegment, lock: Any) -> list[LogSegment]:
    """Split ``seg`` (of ``log``, a writable log) into segments whose offsets fit, swapped in
    for it under ``lock``; returns the new segments. Nothing changes when it does not
    overflow, and on any error before the swap the pieces are removed."""
    local = log.local
    pieces: list[LogSegment] = []
    try:
        for entry in seg.entries(0, verify_crc=True):
            cur = pieces[-1] if pieces else None
            if cur is None or not cur.offset_index.get().can_append_offset(entry.last_offset):
                base = seg.base_offset if cur is None else entry.base_offset
                cur = cleaned_segment(log, base)
                pieces.append(cur)
            cur.append(entry.last_offset, entry.max_timestamp, entry.last_offset, entry.buffer)
        # the old segment's .txnindex entries, each to the piece holding its abort marker
        end = seg.read_next_offset()
        own = [
            t
            for t in local.aborted_transactions(seg.base_offset, end)
            if seg.base_offset <= t.last_offset < end
        ]
        for k, piece in enumerate(pieces):
            upper = pieces[k + 1].base_offset if k + 1 < len(pieces) else end
            for txn in own:
                if piece.base_offset <= txn.last_offset < upper:
                    piece.txn_index.append(txn)
        for piece in pieces:
            piece.on_become_inactive()
            piece.flush()
            piece.set_last_modified(seg.last_modified)
    except BaseException:
        for piece in pieces:
            piece.delete_if_exists()
        raise
    with lock:
        if local.segments.get(seg.base_offset) is not seg or seg.closed:
            for piece in pieces:
                piece.delete_if_exists()
            return []
        for piece in pieces:
            piece.change_file_suffixes(CLEANED_SUFFIX, SWAP_SUFFIX)
        files.fsync_dir(log.directory)
        for piece in pieces:
            local.segments.add(piece)  # the first takes the old segment's place
        local.deleter.delete([seg], [], log.config.file_delete_delay_ms)
        for piece in pieces:
            piece.change_file_suffixes(SWAP_SUFFIX, "")
        files.fsync_dir(log.directory)
    return pieces
