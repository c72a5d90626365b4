"""A segment's entries read a chunk at a time into one reused buffer, checked as the segment's
own walk checks them, for the cleaner's compiled passes (:mod:`._chunk_kernels`).

Why a walk of its own: ``LogSegment.entries`` makes an object per batch (the Python the
compiled passes are there to avoid) and reads into a fresh 4 MiB ``bytes`` per chunk, two of
them alive at a chunk's end, so a cleaning's peak memory followed the segments' sizes. Here
the buffers are allocated once per cleaning (:class:`ReadBuffers`): one chunk (grown only for
an entry larger than it, up to ``Limits.max_batch_bytes``), the header fields of up to
:data:`MAX_ENTRIES` entries and one batch's record scratch.

Every check of the segment's walk is made here too (entry sizes, magic, offsets that grow, CRC
of every v2 batch, a legacy entry's own checks), and this walk raises only for a file cut
short under the open log (a read that returns fewer bytes than the log holds: an error naming
the byte, where waiting for them would spin for ever); otherwise at the first
entry that fails one, or a cut-off entry at the segment's end, it stops and names the position
(:attr:`ChunkWalk.fallback_at`) from which the caller hands over to the segment's own walk,
which raises (or, for a torn tail, ends) exactly as a cleaning always did.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from kafkalog.errors import KafkalogError
from kafkalog.log.cleaner._chunk_kernels import (
    F_ATTRS,
    F_BASE,
    F_COUNT,
    F_DELTA,
    F_LENGTH,
    F_MAGIC,
    OTHER,
    PLAIN,
)
from kafkalog.log.segment import LogSegment
from kafkalog.records._kernels import scan_entries
from kafkalog.records.crc import crc32c_c
from kafkalog.records.reader import LogEntry, LogReader
from kafkalog.records.record_codes import OK
from kafkalog.records.types import Limits

#: False sends every entry through the per-batch path, the reference the compiled passes are
#: held to (``tests/log/test_cleaner_compiled.py`` compares the files both write)
COMPILED = True
#: bytes read at a time (a larger entry grows the buffer to its size)
CHUNK = 1024 * 1024
#: input bytes per append of the cleaned segment (half of Kafka's default
#: ``log.cleaner.io.buffer.size`` for one thread): its index entries fall where a broker's
#: cleaner puts them
OUT_CHUNK = 256 * 1024
#: entries handed to a compiled pass at a time
MAX_ENTRIES = 2048
#: records of one batch the compiled passes take (a larger batch goes to the Python path)
MAX_RECORDS = 8192
_FIELDS = 13
# attribute bits that send a v2 batch to the Python path: codec, transactional, control
_NOT_PLAIN = 0x07 | 0x10 | 0x20


class ReadBuffers:
    """The buffers one cleaning reuses for every segment it reads: each starts small and grows
    to what the segments need, never past :data:`CHUNK` (or one entry), :data:`MAX_ENTRIES`
    headers, :data:`MAX_RECORDS` records and one append's output."""

    def __init__(self) -> None:
        self.data = np.empty(0, np.uint8)
        self.positions = np.empty(0, np.int64)
        self.fields = np.empty((0, _FIELDS), np.int64)
        self.keep = np.empty(0, np.bool_)
        self.h1 = self.h2 = np.empty(0, np.uint64)
        self.delta = self.flags = self.start = self.end = np.empty(0, np.int64)
        self.records(1024)
        # the filter pass's output: one append's kept bytes and the ranges of the batches
        # whose CRC it stamps (both grown by the filter pass as it needs)
        self.out = np.empty(65536, np.uint8)
        self.crcs = np.empty(256, np.int64)

    def reserve(self, size: int, entries: int) -> None:
        """A read buffer of ``size`` bytes at least (an entry larger than :data:`CHUNK`,
        whose size the walk has bounded, or the rest of a smaller segment) and room for
        ``entries`` headers (at most :data:`MAX_ENTRIES`)."""
        if size > len(self.data):
            self.data = np.empty(size, np.uint8)
        entries = min(entries, MAX_ENTRIES)
        if entries > len(self.positions):
            self.positions = np.empty(entries, np.int64)
            self.fields = np.empty((entries, _FIELDS), np.int64)

    def records(self, n: int) -> None:
        """Record scratch for a batch of ``n`` records (at most :data:`MAX_RECORDS`; a larger
        batch goes to the Python path)."""
        n = min(n, MAX_RECORDS)
        if n > len(self.keep):
            n = max(n, min(2 * len(self.keep), MAX_RECORDS))
            self.h1 = np.empty(n, np.uint64)
            self.h2 = np.empty(n, np.uint64)
            self.delta = np.empty(n, np.int64)
            self.flags = np.empty(n, np.int64)
            self.start = np.empty(n, np.int64)
            self.end = np.empty(n, np.int64)
            self.keep = np.empty(n, np.bool_)

    def scratch(self) -> tuple[np.ndarray, ...]:
        """The record scratch, in the compiled passes' argument order."""
        return self.h1, self.h2, self.delta, self.flags, self.start, self.end


@dataclass
class Chunk:
    """``n`` entries of a segment, all sound, in ``buf`` from file position ``base``."""

    buf: np.ndarray
    base: int
    positions: np.ndarray
    fields: np.ndarray
    kinds: np.ndarray
    n: int
    path: str
    limits: Limits
    #: the legacy entries, parsed and checked already (the others are parsed when asked for)
    others: dict[int, LogEntry] = field(default_factory=dict)

    def entry(self, i: int) -> LogEntry:
        """Entry ``i`` as the segment's walk makes it (its checks already passed)."""
        found = self.others.get(i)
        if found is None:
            p = int(self.positions[i])
            end = p + 12 + int(self.fields[i, F_LENGTH])
            reader = LogReader(
                self.buf.data[p:end],
                path=self.path,
                limits=self.limits,
                base_position=self.base + p,
            )
            found = next(iter(reader))
        return found


class ChunkWalk:
    """The entries of ``seg`` from ``start`` (an entry boundary), as chunks."""

    def __init__(self, seg: LogSegment, start: int, limits: Limits, buffers: ReadBuffers):
        self.seg = seg
        self.start = start
        self.limits = limits
        self.buffers = buffers
        #: where the segment's own walk must take over (None: the walk reached the end)
        self.fallback_at: int | None = None

    def __iter__(self) -> Iterator[Chunk]:
        seg, bufs = self.seg, self.buffers
        file = seg.log
        size = file.size
        pos = self.start
        prev_last = seg.base_offset - 1
        max_entry = self.limits.max_batch_bytes
        if not COMPILED:
            self.fallback_at = pos
            return
        while pos < size:
            # (a smallest entry is 26 bytes: room for every header a chunk can hold)
            bufs.reserve(min(CHUNK, size - pos), min(CHUNK, size - pos) // 26 + 1)
            data = bufs.data
            want = min(len(data), size - pos)
            got = file.read_into(data.data[:want], pos)
            if got < want:  # the file was cut under the open log: name the byte, never spin
                raise file.cut_short(pos + got)
            at_end = pos + got >= size
            q = 0
            while True:
                code, n, reached, _ = scan_entries(
                    data, q, got, max_entry, bufs.positions, bufs.fields
                )
                if n:
                    chunk, bad, prev_last = self._classify(data, pos, n, prev_last)
                    if chunk.n:
                        yield chunk
                    if bad is not None:
                        self.fallback_at = bad
                        return
                if code != OK:
                    self.fallback_at = pos + reached
                    return
                if n == len(bufs.positions) and reached < got:
                    q = reached
                    continue
                break
            if pos + reached >= size:
                return
            if at_end:  # a cut-off entry, or less than a header left: the segment's walk judges
                self.fallback_at = pos + reached
                return
            if reached == 0:  # one entry larger than the buffer (its size already bounded)
                bufs.reserve(int.from_bytes(data[8:12].tobytes(), "big") + 12, 1)
                continue
            pos += reached

    def _classify(
        self, data: np.ndarray, base: int, n: int, prev_last: int
    ) -> tuple[Chunk, int | None, int]:
        """The chunk of entries 0..n-1 up to the first that fails a check, that one's file
        position (None when all pass) and the last offset of the chunk's last entry."""
        bufs = self.buffers
        f = bufs.fields[:n]
        positions = bufs.positions[:n]
        magic = f[:, F_MAGIC]
        v2 = magic == 2
        first = f[:, F_BASE]
        last = np.where(v2, first + f[:, F_DELTA], first)
        prev = np.empty(n, np.int64)
        prev[0] = prev_last
        prev[1:] = last[:-1]
        seg_base = self.seg.base_offset
        order_ok = (first > prev) & (last >= first) & (first >= seg_base)
        kinds = np.where(v2 & ((f[:, F_ATTRS] & _NOT_PLAIN) == 0), PLAIN, OTHER).astype(np.int8)
        limit = n if bool(order_ok.all()) else int(np.argmin(order_ok))
        if limit:
            bufs.records(int(f[:limit, F_COUNT].max()))
        # CRCs (the C function, one call a batch) and a legacy entry's own checks (a v2 batch
        # that passed these is one the segment's walk parses: it is made when asked for)
        view = data.data
        pos_l = positions[:limit].tolist()
        end_l = (positions[:limit] + 12 + f[:limit, F_LENGTH]).tolist()
        crc_l = f[:limit, 4].tolist()
        v2_l = v2[:limit].tolist()
        legacy_l = np.flatnonzero(~v2[:limit]).tolist()
        for k in range(limit):
            if v2_l[k] and crc32c_c(view[pos_l[k] + 21 : end_l[k]]) != crc_l[k]:
                limit = k
                break
        others: dict[int, LogEntry] = {}
        path = self.seg.log.path
        for k in legacy_l:
            if k >= limit:
                break
            try:
                reader = LogReader(
                    view[pos_l[k] : end_l[k]],
                    path=path,
                    limits=self.limits,
                    verify_crc=True,
                    base_position=base + pos_l[k],
                )
                others[k] = next(iter(reader))
            except KafkalogError:
                limit = k
                break
        bad = None if limit == n else base + int(positions[limit])
        chunk = Chunk(data, base, positions, f, kinds, limit, path, self.limits, others)
        return chunk, bad, int(last[limit - 1]) if limit else prev_last
