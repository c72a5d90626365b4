"""One cleaning round of one log (Kafka's ``Cleaner.doClean``): the offset map built over the
dirty section, then the log from its start to the map's end rewritten in groups of segments,
each group into one ``.cleaned`` segment swapped in for the group.

Concurrency: the round reads only segments below the first uncleanable offset, never the
active one, and writes only its own ``.cleaned`` files, so appends go on meanwhile. What it
reads of the log's state (the segment list, the producers, the last stable offset) and the
swap itself run under ``lock`` (the lock the caller serialises the log's writers with, as
Kafka swaps under the log's lock); before a swap it checks that the group's segments are
still the log's (retention or truncation meanwhile aborts the group, its ``.cleaned`` files
removed, and nothing is lost).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from kafkalog.errors import CorruptRecordError, DamagedLogError, KafkalogError
from kafkalog.index.txn_index import AbortedTxn
from kafkalog.log.cleaner import _chunk_kernels as CK
from kafkalog.log.cleaner.batch_filter import BatchFilter, FilterStats, LastRecord, scan_batch
from kafkalog.log.cleaner.batch_filter import _Scratch as Scratch
from kafkalog.log.cleaner.chunk_walk import ChunkWalk, ReadBuffers
from kafkalog.log.cleaner.dirty import group_by_size, segments_between
from kafkalog.log.cleaner.filter_pass import FilterPass
from kafkalog.log.cleaner.offset_map import OffsetMap
from kafkalog.log.cleaner.split import cleaned_segment, overflows, split_overflowed
from kafkalog.log.cleaner.txn import CleanedTransactions, TxnIndexContradiction
from kafkalog.log.layout import CLEANED_SUFFIX
from kafkalog.log.local_log import LocalLog
from kafkalog.log.segment import LogSegment, SegmentOverflowError
from kafkalog.records import RecordBatch
from kafkalog.records.reader import LogEntry

#: told each step of a swap ("cleaned-written", "swap-renamed", "old-deleted:<base>",
#: "swapped", "checkpointed"): the crash tests stop the process there
crash_hook: Callable[[str], None] | None = None

OnStep = Callable[[str], None]
"""``on_step(step)``: told in the cleaning thread as a round reaches each step of a group's
swap: ``"cleaned-written"`` (the ``.cleaned`` segment is complete; the log's lock is not held
yet), then under the lock ``"swap-renamed"``, ``"old-deleted:<base>"`` for each old segment,
``"swapped"``; and ``"checkpointed"`` when the cleaner checkpoint moved. For programs that
watch a cleaning, and the seam the concurrency tests interleave other work at."""

Progress = Callable[[str, int, int], None]
"""``progress(phase, done_bytes, total_bytes)``: phase ``"map"`` then ``"clean"``."""


def step(name: str) -> None:
    if crash_hook is not None:
        crash_hook(name)


class CleaningAborted(KafkalogError):
    """The log changed under a cleaning (segments deleted or truncated): nothing swapped."""


class SegmentsSplit(CleaningAborted):
    """A segment of the group had offsets overflowing its 32-bit relative offsets: it was
    split (Kafka's ``splitOverflowedSegment``) and the round ends; the next round cleans the
    pieces (:func:`~kafkalog.log.cleaner.clean_log` starts it at once)."""


class CleanableLog(Protocol):
    """What a cleaning needs of a :class:`~kafkalog.log.log.Log` (kept as a protocol so the
    cleaner does not import the facade that offers ``Log.compact``)."""

    directory: str
    topic: str
    partition: int
    config: Any
    limits: Any
    clock: Callable[[], float]
    producer_state: Any

    @property
    def local(self) -> LocalLog: ...

    def last_stable_offset(self) -> int: ...


@dataclass
class RoundResult:
    """What one round did: where the next starts (the new checkpoint) and its counts."""

    first_dirty: int
    end_offset: int
    stats: FilterStats
    groups: list[tuple[int, int]] = field(default_factory=list)  # (base, segments) per group
    map_full: bool = False


def _entries(seg: LogSegment, position: int) -> Iterator[LogEntry]:
    """Every entry of a segment from ``position``, its CRC checked: a cleaning re-stamps
    CRCs on what it rewrites, so damage it did not check would be hidden forever."""
    try:
        yield from seg.entries(position, verify_crc=True)
    except CorruptRecordError as e:
        if isinstance(e, DamagedLogError):
            raise
        raise DamagedLogError.found(
            e.reason, path=e.path or seg.log.path, position=e.position or 0, partition=seg.directory
        ) from e


class Round:
    """One cleaning round of one log."""

    def __init__(
        self,
        log: CleanableLog,
        offset_map: OffsetMap,
        *,
        now: int,
        lock: Any = None,
        progress: Progress | None = None,
        dry_run: bool = False,
        record_removed: bool = False,
        on_step: OnStep | None = None,
        buffers: ReadBuffers | None = None,
    ) -> None:
        self.log = log
        self.on_step = on_step
        self.local = log.local
        self.map = offset_map
        self.now = now
        self.lock = lock if lock is not None else contextlib.nullcontext()
        self.progress = progress
        self.dry_run = dry_run
        self.record_removed = record_removed
        self.scratch = Scratch()
        self.buffers = buffers if buffers is not None else ReadBuffers()
        self.filter_pass: FilterPass | None = None
        self.truncations = 0  # the log's truncation count when the round read it

    def step(self, name: str) -> None:
        step(name)
        if self.on_step is not None:
            self.on_step(name)

    # -- the offset map ---------------------------------------------------------------------------
    def build_offset_map(self, start: int, end: int, segments: list[LogSegment]) -> bool:
        """Kafka's ``buildOffsetMap``: every keyed record of [start, end) outside aborted
        transactions, until the map is full (True then)."""
        self.map.clear()
        dirty = [s for s in segments if s.base_offset < end]
        dirty = [
            s
            for i, s in enumerate(dirty)
            if i + 1 == len(dirty) or dirty[i + 1].base_offset > start
        ]
        txns = CleanedTransactions(self.log.limits)
        txns.add_aborted(self.local.aborted_transactions(start, end), start)
        total = sum(s.size for s in dirty)
        done = 0
        for k, seg in enumerate(dirty):
            next_start = dirty[k + 1].base_offset if k + 1 < len(dirty) else end
            if self._map_segment(seg, start, txns):
                return True
            self.map.update_latest_offset(next_start - 1)
            done += seg.size
            if self.progress is not None:
                self.progress("map", done, total)
        return False

    def _map_segment(self, seg: LogSegment, start: int, txns: CleanedTransactions) -> bool:
        """One segment into the map: its plain batches a chunk at a time in compiled code,
        the others (and everything from a damaged entry on) through :meth:`_map_entry`."""
        first = seg.scan_start(start)
        offset_map = self.map
        bufs = self.buffers
        walk = ChunkWalk(seg, first, self.log.limits, bufs)
        for chunk in walk:
            i, r = 0, 0
            while i < chunk.n:
                table = offset_map.table()
                i, why, r = CK.map_batches(
                    chunk.buf,
                    chunk.positions,
                    chunk.fields,
                    chunk.kinds,
                    i,
                    r,
                    chunk.n,
                    start,
                    offset_map.seed,
                    *table,
                    offset_map.can_grow,
                    *bufs.scratch(),
                )
                if why == CK.GROW:
                    offset_map.grow()
                elif why == CK.FULL:
                    return True
                elif why == CK.PYTHON:
                    if self._map_entry(chunk.entry(i), start, txns):
                        return True
                    i, r = i + 1, 0
        if walk.fallback_at is not None:
            for entry in _entries(seg, first):
                if entry.position >= walk.fallback_at and self._map_entry(entry, start, txns):
                    return True
        return False

    def _map_entry(self, entry: LogEntry, start: int, txns: CleanedTransactions) -> bool:
        """One entry into the map the per-batch way (True when the map filled up)."""
        offset_map = self.map
        limits = self.log.limits
        if isinstance(entry, RecordBatch):
            if entry.is_control:
                txns.on_control_batch(entry)
            elif not txns.on_batch(entry) and entry.last_offset >= start:
                scanned = scan_batch(entry, self.scratch, offset_map.seed, limits)
                keyed = scanned.keyed & (scanned.offsets >= start)
                s = self.scratch
                n = scanned.records
                offsets = np.ascontiguousarray(scanned.offsets)
                if offset_map.put_many(s.h1, s.h2, offsets, keyed, n) < n:
                    return True
        else:
            for rec in entry.records(limits):
                if rec.key is not None and rec.offset >= start:
                    if offset_map.is_full:
                        return True
                    offset_map.put(rec.key, rec.offset)
        if entry.last_offset >= start:
            offset_map.update_latest_offset(entry.last_offset)
        return False

    # -- the round --------------------------------------------------------------------------------
    def run(self, first_dirty: int, first_uncleanable: int) -> RoundResult:
        try:
            return self._run(first_dirty, first_uncleanable)
        except TxnIndexContradiction as e:
            raise self._contradicted(e) from None

    def _contradicted(self, e: TxnIndexContradiction) -> DamagedLogError:
        """The error naming the ``.txnindex`` entry the walk contradicted (its file and
        byte): nothing was swapped in for the group it was found in."""
        path, position = None, 0
        txn = e.txn
        for seg in self.local.segments:
            try:
                entries = seg.txn_index.positioned_entries()
            except (KafkalogError, OSError):
                continue
            if txn is None:  # missing: where the marker's segment would hold it, at its end
                if seg.base_offset <= e.marker:
                    path, position = seg.txn_index.path, len(entries) * AbortedTxn.SIZE
                continue
            found = [at for at, t in entries if t == txn]
            if found:
                path, position = seg.txn_index.path, found[0]
                break
        what = (
            "a .txnindex entry is missing"
            if txn is None
            else f"the .txnindex entry of producer {txn.producer_id} (offsets "
            f"{txn.first_offset}..{txn.last_offset}) is contradicted by the batches"
        )
        return DamagedLogError.found(
            f"{what}: {e.what}; cleaning by it would delete committed records, or keep aborted "
            "ones as committed (`kafkalog verify` names the entries, `kafkalog rebuild-index` "
            "rewrites the index from the .log)",
            path=path or self.log.directory,
            position=position,
            partition=self.log.directory,
        )

    def _run(self, first_dirty: int, first_uncleanable: int) -> RoundResult:
        log = self.log
        with self.lock:
            segments = list(self.local.segments)
            self.truncations = self.local.truncations
            producers = {
                pid: LastRecord(
                    e.last_data_offset if e.last_data_offset >= 0 else None, e.producer_epoch
                )
                for pid, e in log.producer_state.producers.items()
            }
        below = [s for s in segments if s.base_offset < first_dirty]
        config = log.config
        legacy_horizon = below[-1].last_modified - config.delete_retention_ms if below else 0
        full = self.build_offset_map(first_dirty, first_uncleanable, segments)
        end = self.map.latest_offset + 1
        stats = FilterStats()
        result = RoundResult(first_dirty, end, stats, map_full=full)
        to_clean = [s for s in segments if s.base_offset < end]
        groups = group_by_size(
            to_clean, config.segment_bytes, config.segment_index_bytes, first_uncleanable
        )
        txns = CleanedTransactions(log.limits)
        filt = BatchFilter(
            self.map,
            txns,
            now=self.now,
            delete_retention_ms=config.delete_retention_ms,
            producers=producers,
            upper_bound=first_uncleanable,
            limits=log.limits,
            stats=stats,
            record_removed=self.record_removed,
        )
        total = sum(s.size for s in to_clean)
        done = [0, total]
        self.filter_pass = FilterPass(filt, self.buffers, _entries, _progress(self.progress, done))
        for group in groups:
            self._clean_group(group, filt, txns, legacy_horizon, done)
            result.groups.append((group[0].base_offset, len(group)))
        return result

    def _clean_group(
        self,
        group: list[LogSegment],
        filt: BatchFilter,
        txns: CleanedTransactions,
        legacy_horizon: int,
        done: list[int],
    ) -> None:
        """Kafka's ``cleanSegments``: the group into one ``.cleaned`` segment, swapped in."""
        log = self.log
        base = group[0].base_offset
        cleaned: LogSegment | None = None
        if not self.dry_run:
            cleaned = cleaned_segment(log, base)  # a crashed cleaning's leftovers removed
            txns.on_kept_abort = cleaned.txn_index.append
        else:
            txns.on_kept_abort = None
        try:
            for k, seg in enumerate(group):
                upper = group[k + 1].base_offset if k + 1 < len(group) else seg.read_next_offset()
                txns.add_aborted(
                    self.local.aborted_transactions(seg.base_offset, upper), seg.base_offset
                )
                retain_legacy = seg.last_modified > legacy_horizon
                try:
                    self._clean_into(seg, cleaned, filt, retain_legacy, done)
                except SegmentOverflowError:
                    if self.dry_run or not overflows(seg):
                        raise
                    if cleaned is not None:
                        cleaned.delete_if_exists()
                        cleaned = None
                    pieces = split_overflowed(log, seg, self.lock)
                    raise SegmentsSplit(
                        f"segment {seg.log.path} held offsets past its base + 2^31-1 (a legacy "
                        f"log): split into {len(pieces)} segments, to be cleaned next"
                    ) from None
            if cleaned is None:
                return
            cleaned.on_become_inactive()
            cleaned.flush()
            cleaned.set_last_modified(group[-1].last_modified)
            self.step("cleaned-written")
            with self.lock:
                self._check_unchanged(group)
                self.local.replace_segments(cleaned, group, on_step=self.step)
        except BaseException:
            if cleaned is not None and cleaned.has_suffix(CLEANED_SUFFIX):
                cleaned.delete_if_exists()
            raise

    def _check_unchanged(self, group: list[LogSegment]) -> None:
        """Under the lock, before a swap: the log is still as the round read it (Kafka aborts
        a cleaning when retention or a truncation changes its log). Retention takes the
        group's segments out; a truncation anywhere (counted by the local log) may have cut
        the records that superseded what the group drops, so no group of the round is
        swapped in after one."""
        if self.local.truncations != self.truncations:
            raise CleaningAborted(f"{self.log.directory} was truncated during its cleaning")
        for seg in group:
            if self.local.segments.get(seg.base_offset) is not seg or seg.closed:
                raise CleaningAborted(
                    f"segment {seg.log.path} left {self.log.directory} during its cleaning"
                )

    def _clean_into(
        self,
        seg: LogSegment,
        dest: LogSegment | None,
        filt: BatchFilter,
        retain_legacy: bool,
        done: list[int],
    ) -> None:
        """Kafka's ``cleanInto``: the segment's batches through the filter, a chunk of input
        (:data:`.filter_pass.IO_CHUNK`) at a time, each chunk's kept batches one append to
        ``dest`` (``done`` counts the input read, for progress)."""
        assert self.filter_pass is not None and self.filter_pass.filt is filt
        self.filter_pass.run(seg, dest, retain_legacy)


def _progress(report: Progress | None, done: list[int]) -> Callable[[int], None]:
    """The filter pass's progress: ``done[0]`` input bytes of ``done[1]`` read."""

    def told(read: int) -> None:
        done[0] += read
        if report is not None:
            report("clean", min(done[0], done[1]), done[1])

    return told


def segments_below(local: LocalLog, end: int) -> list[LogSegment]:
    return segments_between(local, 0, end)
