"""The filter pass of a cleaning over one segment (Kafka's ``cleanInto``): its batches through
the filter a chunk at a time, the kept ones gathered into appends of the cleaned segment.

Plain batches (magic 2, uncompressed, neither control nor transactional) are judged, copied,
rebuilt or emptied by one compiled call per chunk (:func:`._chunk_kernels.filter_batches`);
any other entry goes through :class:`~.batch_filter.BatchFilter` as before, and from a
damaged entry on the segment's own walk takes over (:mod:`.chunk_walk`), so the bytes written,
the counts and the errors are those of the per-batch path.

An append gathers the kept batches of :data:`IO_CHUNK` bytes of input, as Kafka's cleaner
reads: the cleaned segment's index entries fall where a broker's cleaner puts them. Its bytes
go into one reused output buffer (a rebuilt batch's CRC stamped at the append by the C CRC),
so memory stays bounded whatever the segment's size.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator

import numpy as np

from kafkalog.log.cleaner import _chunk_kernels as CK
from kafkalog.log.cleaner.batch_filter import BatchFilter, Kept
from kafkalog.log.cleaner.chunk_walk import OUT_CHUNK, ChunkWalk, ReadBuffers
from kafkalog.log.segment import LogSegment
from kafkalog.records import RecordBatch
from kafkalog.records.crc import crc32c_c
from kafkalog.records.legacy import LegacyEntry
from kafkalog.records.reader import LogEntry

IO_CHUNK = OUT_CHUNK

_CRC = struct.Struct(">I")
_NO_PRODUCERS = np.empty(0, np.int64)


class FilterPass:
    """The filter pass of one round: one filter, the round's buffers and progress."""

    def __init__(
        self,
        filt: BatchFilter,
        buffers: ReadBuffers,
        entries: Callable[[LogSegment, int], Iterator[LogEntry]],
        progress: Callable[[int], None],
    ) -> None:
        self.filt = filt
        self.buffers = buffers
        self.entries = entries  # the segment's own walk (errors as a cleaning reports them)
        self.progress = progress  # told the input bytes of every append's chunk
        self.group = np.zeros(6, np.int64)
        self.stats = np.zeros(len(CK.STAT_NAMES), np.int64)
        producers = sorted(filt.producers.items())
        self.pids = np.array([p for p, _ in producers], np.int64) if producers else _NO_PRODUCERS
        self.last_offsets = np.array(
            [
                -2 if last.last_data_offset is None else last.last_data_offset
                for _, last in producers
            ],
            np.int64,
        )
        self.dest: LogSegment | None = None

    # -- the append being gathered ----------------------------------------------------------------
    def _reset(self, start: int) -> None:
        g = self.group
        g[CK.G_START] = start
        g[CK.G_MAX_TS] = -1
        g[CK.G_SHALLOW] = -1
        g[CK.G_MAX_OFFSET] = -1
        g[CK.G_OUT] = 0
        g[CK.G_CRCS] = 0

    def _flush(self, position: int) -> None:
        """Append what the chunk kept and start the next chunk at ``position``."""
        g = self.group
        size = int(g[CK.G_OUT])
        if size and self.dest is not None:
            out = self.buffers.out
            view = out.data
            crcs = self.buffers.crcs[: int(g[CK.G_CRCS])].tolist()
            for k in range(0, len(crcs), 2):
                a, b = crcs[k], crcs[k + 1]
                _CRC.pack_into(view, a + 17, crc32c_c(view[a + 21 : b]))
            self.dest.append(
                int(g[CK.G_MAX_OFFSET]), int(g[CK.G_MAX_TS]), int(g[CK.G_SHALLOW]), view[:size]
            )
        self.progress(position - int(g[CK.G_START]))
        self._reset(position)

    def _room(self, extra: int) -> None:
        """Room for ``extra`` more output bytes and one more CRC range."""
        g = self.group
        need = int(g[CK.G_OUT]) + extra
        if need > len(self.buffers.out):
            grown = np.empty(max(need, 2 * len(self.buffers.out)), np.uint8)
            grown[: int(g[CK.G_OUT])] = self.buffers.out[: int(g[CK.G_OUT])]
            self.buffers.out = grown
        if int(g[CK.G_CRCS]) + 2 > len(self.buffers.crcs):
            self.buffers.crcs = np.concatenate(
                [self.buffers.crcs, np.empty(len(self.buffers.crcs), np.int64)]
            )

    def _python_entry(self, entry: LogEntry, retain_legacy: bool) -> None:
        """One entry through the per-batch filter, its kept bytes into the append."""
        g = self.group
        end = entry.position + entry.size_in_bytes
        if end - int(g[CK.G_START]) > IO_CHUNK and entry.position > int(g[CK.G_START]):
            self._flush(entry.position)
        kept: Kept | None
        if isinstance(entry, RecordBatch):
            kept = self.filt.filter_v2(entry)
        else:
            assert isinstance(entry, LegacyEntry)
            kept = self.filt.filter_legacy(entry, retain_legacy)
        if kept is None:
            return
        data = kept.data
        n = len(data)
        self._room(n)
        o = int(g[CK.G_OUT])
        self.buffers.out[o : o + n] = np.frombuffer(data, np.uint8)
        g[CK.G_OUT] = o + n
        if kept.max_timestamp > g[CK.G_MAX_TS]:
            g[CK.G_MAX_TS] = kept.max_timestamp
            g[CK.G_SHALLOW] = kept.shallow_offset_of_max_timestamp
        g[CK.G_MAX_OFFSET] = max(int(g[CK.G_MAX_OFFSET]), kept.max_offset)

    # -- one segment ------------------------------------------------------------------------------
    def run(self, seg: LogSegment, dest: LogSegment | None, retain_legacy: bool) -> None:
        self.dest = dest
        self._reset(0)
        filt = self.filt
        fallback_at: int | None = 0
        try:
            if not filt.record_removed:  # (removed offsets are listed by the per-batch path)
                walk = ChunkWalk(seg, 0, filt.limits, self.buffers)
                self._run_chunks(walk, retain_legacy)
                fallback_at = walk.fallback_at
            if fallback_at is not None:
                for entry in self.entries(seg, 0):
                    if entry.position >= fallback_at:
                        self._python_entry(entry, retain_legacy)
            self._flush(seg.size)
        finally:
            stats = filt.stats
            for name, value in zip(CK.STAT_NAMES, self.stats.tolist(), strict=True):
                setattr(stats, name, getattr(stats, name) + value)
            self.stats[:] = 0

    def _run_chunks(self, walk: ChunkWalk, retain_legacy: bool) -> None:
        filt = self.filt
        offset_map = filt.map
        slot_h1, slot_h2, slot_offsets, _ = offset_map.table()
        bufs = self.buffers
        for chunk in walk:
            i = 0
            while i < chunk.n:
                i, why, _ = CK.filter_batches(
                    chunk.buf,
                    chunk.base,
                    chunk.positions,
                    chunk.fields,
                    chunk.kinds,
                    i,
                    chunk.n,
                    offset_map.seed,
                    slot_h1,
                    slot_h2,
                    slot_offsets,
                    offset_map.latest_offset,
                    filt.now,
                    filt.delete_retention_ms,
                    filt.upper_bound,
                    self.pids,
                    self.last_offsets,
                    IO_CHUNK,
                    self.group,
                    self.buffers.out,
                    self.buffers.crcs,
                    self.stats,
                    bufs.keep,
                    *bufs.scratch(),
                )
                if why == CK.FLUSH:
                    self._flush(chunk.base + int(chunk.positions[i]))
                elif why == CK.ROOM:
                    size = 12 + int(chunk.fields[i, CK.F_LENGTH])
                    self._room(3 * size + 16)  # a rebuilt batch grows by <= 9 bytes a record
                elif why == CK.PYTHON:
                    self._python_entry(chunk.entry(i), retain_legacy)
                    i += 1
