"""A partition's segments and every read of them (Kafka's ``LocalLog``).

The one place that turns offsets into byte positions of segment files. A reader asks here for
the bytes holding offsets [start, end) (:meth:`LocalLog.ranges`), for a fetch's bytes bounded by
a last stable offset or high watermark *by position* (:meth:`LocalLog.fetch`), for the aborted
transactions of a range (:meth:`LocalLog.aborted_transactions`), or for the batches, records or
Arrow rows of a range; nothing above the log layer re-derives them. The rule they all rest on
(spec §4): an offset-index entry names the byte position where the *append* holding its offset
starts; the batch holding the offset may be any later batch of that append, so every lookup
scans forward from the entry, and a range ends at the first batch whose *first* offset is past
it, never at the end of the batch an entry points at.

The :class:`~kafkalog.log.log.Log` facade owns a ``LocalLog`` and adds validation, producer
state and the append paths; the loader (:mod:`kafkalog.log.loader`) fills one.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import itertools
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from kafkalog import files
from kafkalog.errors import CorruptRecordError, DamagedLogError, KafkalogError
from kafkalog.index.txn_index import AbortedTxn
from kafkalog.log.abort_markers import fetched_unlisted
from kafkalog.log.damage import (
    LostSegment,
    SkippedBytes,
    check_tail,
    fetched_offsets_problem,
    first_problem,
    gap_between_segments,
    shows_compaction,
    skip_damage,
)
from kafkalog.log.deletion import SegmentDeleter
from kafkalog.log.layout import (
    CLEANED_SUFFIX,
    SNAPSHOT_SUFFIX,
    SWAP_SUFFIX,
    is_segment_log,
    offset_from_filename,
    segment_file,
)
from kafkalog.log.segment import FileRegion, LogSegment
from kafkalog.log.segment_facts import SegmentFacts
from kafkalog.log.segment_set import SegmentSet
from kafkalog.log.verified import check_fetched_crcs
from kafkalog.records import Record
from kafkalog.records.reader import LogEntry
from kafkalog.records.types import Limits, TimestampUnit

logger = logging.getLogger("kafkalog.log")


@dataclass(frozen=True)
class SegmentRange:
    """Bytes [start_position, end_position) of one segment's ``.log``, holding every record of
    the segment with an offset in [start_offset, end_offset). The bytes are whole batches, and
    the first and last of them may hold other offsets too (a reader drops those rows)."""

    path: str
    base_offset: int
    start_position: int
    end_position: int
    start_offset: int
    end_offset: int
    # the segment as it was when the range was made: its size and which file it was (device,
    # inode; None remotely), so a later reader can tell a segment cut or swapped since then
    segment_size: int = -1
    identity: tuple[int, int] | None = None
    # whether the segment was its log's last: only there may the bytes end in a batch cut off
    last_segment: bool = True

    @property
    def size(self) -> int:
        return max(0, self.end_position - self.start_position)

    def cut(self, target_bytes: int) -> list[SegmentRange]:
        """This range in parts of about ``target_bytes``, cut only where the segment's offset
        index names a batch start (so no batch is split). Each part keeps the whole range's
        offsets: the parts' bytes are disjoint, every batch lies in exactly one of them."""
        if self.size <= target_bytes:
            return [self]
        cuts = [
            p
            for p in batch_starts(self.path, self.base_offset)
            if self.start_position < p < self.end_position
        ]
        parts = -(-self.size // target_bytes)
        chosen: list[int] = []
        for k in range(1, parts):
            goal = self.start_position + self.size * k / parts
            i = bisect.bisect_left(cuts, goal)
            if i < len(cuts) and (not chosen or cuts[i] > chosen[-1]):
                chosen.append(int(cuts[i]))
        bounds = [self.start_position, *chosen, self.end_position]
        return [
            dataclasses.replace(self, start_position=a, end_position=b)
            for a, b in itertools.pairwise(bounds)
        ]


def batch_starts(segment_path: str, base_offset: int) -> list[int]:
    """The batch starts a segment's ``.index`` names (empty without one), read-only: what a
    range of the segment can be cut at, without opening its log."""
    from kafkalog.index import OffsetIndex

    index_path = segment_path[: -len(".log")] + ".index"
    if not segment_path.endswith(".log") or not files.exists(index_path):
        return []
    with OffsetIndex(index_path, base_offset, writable=False) as index:
        _, positions = index.to_numpy()
    return [int(p) for p in positions.tolist()]


@dataclass(frozen=True)
class FetchInfo:
    """What :meth:`LocalLog.fetch` returns: the bytes (a range of one segment file, not yet
    read; None when there is nothing) and, when asked for, the aborted transactions that
    overlap them."""

    region: FileRegion | None
    aborted: list[AbortedTxn] | None = None


def _txns_of(
    segments: list[tuple[LogSegment, int | None]], start: int, end: int
) -> list[AbortedTxn]:
    found: list[AbortedTxn] = []
    for seg, _ in segments:
        result = seg.txn_index.collect_aborted_txns(start, end)
        found.extend(result.aborted)
        if result.is_complete:
            break
    return found


class LocalLog:
    """The segments of one partition directory, its offsets, and the reads of its bytes."""

    def __init__(
        self,
        directory: str,
        config: Any,
        *,
        writable: bool,
        clock: Callable[[], float],
        limits: Limits,
    ) -> None:
        self.directory = directory
        self.config = config
        self.writable = writable
        self.clock = clock
        self.limits = limits
        self.segments = SegmentSet()
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.recovery_point = 0
        # damage found in the last segment by a read-only open, which then ends the log after
        # its last valid batch: a read to the end raises it (see :meth:`ranges`)
        self.damage_at_end: DamagedLogError | None = None
        # segments lost (an index left without its .log after a segment ending before it):
        # a read across their offsets raises, or with ``on_damage`` says it skips them
        self.lost: list[LostSegment] = []
        self.deleter = SegmentDeleter()  # segments renamed .deleted, removed after the delay
        # how many truncations the log has had: a cleaner's round that saw it change since it
        # read the log swaps nothing more in (what it drops may have been superseded by
        # records the truncation removed)
        self.truncations = 0
        #: sealed segments' verified ends kept by a long-lived reader across opens (a read-only
        #: log's; None: every check made): see :mod:`kafkalog.log.segment_facts`
        self.facts: SegmentFacts | None = None
        #: gaps between segments already said (each once per open), and whether the directory
        #: shows compaction, which explains them (None: not looked at yet)
        self._gaps_said: set[tuple[int, int]] = set()
        self._compacted: bool | None = None

    # -- the segment set -------------------------------------------------------------------------
    def open_segment(
        self, base: int, *, exists: bool, listed_size: int | None = None, suffix: str = ""
    ) -> LogSegment:
        return LogSegment(
            self.directory,
            base,
            self.config,
            writable=self.writable,
            file_already_exists=exists,
            suffix=suffix,
            clock=self.clock,
            limits=self.limits,
            listed_size=listed_size,
        )

    def read_next_offset(self, active: LogSegment) -> int:
        """The offset after ``active``'s last batch. A read-only log whose active segment ends
        in a torn tail (preallocated zeros, a torn write: what a writable open's recovery
        cuts) ends where recovery would cut it, with the file left as it is; damage there is
        a :class:`~kafkalog.errors.DamagedLogError`."""
        try:
            return active.read_next_offset()
        except CorruptRecordError:
            if self.writable:
                raise
            problem = first_problem(active)
            if problem is None:
                raise
        # a torn tail is where the log ends; anything else is an error (damage module)
        check_tail(active, problem, is_last=True, directory=self.directory)
        active.log.size = problem.position
        if active.log.verified is not None:  # (a read-only file keeps none; never stale)
            active.log.verified.cut(problem.position)
        return active.read_next_offset()

    def delete_segment(self, seg: LogSegment) -> None:
        """Take ``seg`` out, rename its files ``.deleted`` and remove them
        ``file.delete.delay.ms`` later, with the segment's producer snapshot
        (UnifiedLog.deleteProducerSnapshots); a reader holding the segment keeps reading it
        until then (:mod:`kafkalog.log.deletion`). Only ``seg`` itself leaves the set, never
        another segment at its base offset (a cleaned one swapped in for it)."""
        if self.segments.get(seg.base_offset) is seg:
            self.segments.remove(seg.base_offset)
        snapshot = segment_file(self.directory, seg.base_offset, SNAPSHOT_SUFFIX)
        self.deleter.delete([seg], [snapshot], self.config.file_delete_delay_ms)

    def replace_segments(
        self,
        new: LogSegment,
        old: list[LogSegment],
        on_step: Callable[[str], None] | None = None,
    ) -> None:
        """Swap ``new`` (a segment written with the ``.cleaned`` suffix) in for ``old``
        (Kafka's ``LocalLog.replaceSegments``), in the order the loader can finish or undo
        after a crash at any point: ``.cleaned`` renamed ``.swap`` (from here the loader
        completes the swap), the new segment put in the set, each old one taken out and
        renamed ``.deleted`` (removed after ``file.delete.delay.ms``; a reader holding one
        keeps reading it), and last the ``.swap`` suffix dropped. The producer snapshots of
        the old segments that no new one replaces go with them. ``on_step`` is told each step
        (the crash tests stop the process there)."""
        step = on_step or (lambda _: None)
        new.change_file_suffixes(CLEANED_SUFFIX, SWAP_SUFFIX)
        files.fsync_dir(self.directory)
        step("swap-renamed")
        self.segments.add(new)
        for seg in old:
            if seg.base_offset != new.base_offset:
                self.segments.remove(seg.base_offset)
                snapshots = [segment_file(self.directory, seg.base_offset, SNAPSHOT_SUFFIX)]
            else:
                snapshots = []
            self.deleter.delete([seg], snapshots, self.config.file_delete_delay_ms)
            step(f"old-deleted:{seg.base_offset}")
        new.change_file_suffixes(SWAP_SUFFIX, "")
        files.fsync_dir(self.directory)
        step("swapped")

    def refresh(self) -> None:
        """Read-only: pick up what a broker appended or rolled since the log was opened."""
        names = files.listdir(self.directory)
        # gone first: a segment seen as ``.swap`` that the broker renamed is then opened again
        for seg in list(self.segments):
            if not files.exists(seg.log.path):
                self.segments.remove(seg.base_offset)
        for base in sorted(offset_from_filename(n) for n in names if is_segment_log(n)):
            if base not in self.segments:
                self.segments.add(self.open_segment(base, exists=True))
        for seg in self.segments:
            seg.refresh()
        active = self.segments.active
        if active is not None:
            self.log_end_offset = self.read_next_offset(active)
            self.log_start_offset = max(self.log_start_offset, self.segments.bases[0])

    def close(self) -> None:
        for seg in self.segments:
            seg.close()
        self.deleter.close()

    # -- reads -----------------------------------------------------------------------------------
    def _check_in_range(self, offset: int) -> None:
        if offset > self.log_end_offset or offset < self.log_start_offset:
            raise KafkalogError(
                f"offset {offset} is out of range [{self.log_start_offset}, "
                f"{self.log_end_offset}] of {self.directory}"
            )

    def ranges(
        self, start: int | None = None, end: int | None = None, *, past_damage: bool = False
    ) -> list[SegmentRange]:
        """The byte ranges of segment files holding every record with an offset in
        [start, end) (clamped to the log's offsets), in offset order: from the batch holding
        ``start`` (or the first after it) to the first batch whose first offset is ``end`` or
        more. Segments with nothing in the range (gaps left by compaction) give none.

        A read to the end of a log whose last segment a read-only open found damaged raises
        that damage (the records after it would be missing), unless ``past_damage``: a caller
        that says what it skips (:attr:`damage_at_end`)."""
        return [r for _, r in self._segment_ranges(start, end, past_damage)]

    def _segment_ranges(
        self, start: int | None, end: int | None, past_damage: bool = False
    ) -> list[tuple[LogSegment, SegmentRange]]:
        """:meth:`ranges`, each with the segment it is a range of: a read holds the segment
        itself, never looks it up again by base offset (a cleaner's swap may have put another
        segment there since, whose bytes the range's positions do not describe)."""
        lo = self.log_start_offset if start is None else max(start, self.log_start_offset)
        hi = self.log_end_offset if end is None else min(end, self.log_end_offset)
        if self.damage_at_end is not None and hi >= self.log_end_offset and not past_damage:
            raise self.damage_at_end
        out: list[tuple[LogSegment, SegmentRange]] = []
        # a read to the end also meets a lost segment past the log's end (the last one lost)
        upper = 2**63 if hi >= self.log_end_offset else hi
        for lost in self.lost:
            if lost.overlaps(lo, upper):
                if not past_damage:
                    raise lost.error(self.directory)
                logger.warning(
                    "kafkalog: %s: %s; skipped, the caller asked to read past damage",
                    self.directory,
                    lost.describe(),
                )
        if lo >= hi:
            return out
        for seg, nxt in self.segments.from_floor(lo):
            if seg.base_offset >= hi:
                break
            upper = self.log_end_offset if nxt is None else nxt
            if upper <= lo:
                continue
            first, last = max(lo, seg.base_offset), min(hi, upper)
            if nxt is not None and last >= upper:
                self._check_end_below(seg, nxt, past_damage)
            if first > seg.base_offset:
                found = seg.translate_offset(first)
                if found is None:
                    continue  # nothing in this segment at or after ``first``
                start_pos = found.position
            else:
                start_pos = 0
            end_pos = seg.size if last >= upper else seg.end_position(last)
            if end_pos > start_pos:
                path = seg.log.path
                out.append(
                    (
                        seg,
                        SegmentRange(
                            path,
                            seg.base_offset,
                            start_pos,
                            end_pos,
                            first,
                            last,
                            segment_size=seg.size,
                            identity=seg.log.identity(),
                            last_segment=nxt is None,
                        ),
                    )
                )
        return out

    def _check_end_below(self, seg: LogSegment, nxt: int, past_damage: bool) -> None:
        """A segment read to its end holds offsets below the next one's base ``nxt``: a last
        batch whose base offset (outside the CRC) was flipped past it would otherwise reach
        a reader that decodes the bytes itself (a Spark task) and be dropped unsaid. Checked
        once per segment and next base, from its last index entry (a short walk)."""
        if seg.end_checked_for == nxt:
            return
        facts = self.facts if not self.writable and not files.is_remote(seg.log.path) else None
        stamps = facts.stamps(seg.log.path, seg.offset_index.path) if facts else None
        if facts and stamps and stamps[0][2] == seg.size:
            known = facts.end(seg.log.path, stamps)
            if known is not None and known <= nxt:
                seg.end_checked_for = nxt  # verified under these very files before
                self.say_gap(seg, known, nxt)
                return
        try:
            end = seg.read_next_offset()  # its walk checks the last batch against ``nxt``
        except DamagedLogError as e:
            error = e
        except CorruptRecordError as e:
            error = DamagedLogError.found(
                e.reason, path=seg.log.path, position=e.position or 0, partition=self.directory
            )
        else:
            if end <= nxt:
                seg.end_checked_for = nxt
                if facts and stamps and stamps[0][2] == seg.size:
                    facts.keep(seg.log.path, stamps, end)
                self.say_gap(seg, end, nxt)
            return
        if not past_damage:
            raise error
        logger.warning("kafkalog: %s; skipped, the caller asked to read past damage", error)

    def say_gap(self, seg: LogSegment, end: int, nxt: int) -> None:
        """Offsets [end, nxt) in no batch between ``seg`` and the segment based at ``nxt``:
        said once per open with a WARNING unless the directory shows compaction (see
        :func:`~kafkalog.log.damage.gap_between_segments`); the read goes on across it."""
        if end >= nxt or (seg.base_offset, nxt) in self._gaps_said:
            return
        self._gaps_said.add((seg.base_offset, nxt))
        if self._compacted is None:
            self._compacted = shows_compaction(self.directory, self.config.compact)
        if not self._compacted:
            logger.warning("kafkalog: %s", gap_between_segments(seg.log.path, end, nxt))

    def fetch(
        self,
        start: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_message: bool = True,
        include_aborted: bool = False,
        verify_crcs: bool = False,
    ) -> FetchInfo:
        """Kafka's ``LocalLog.read``: the bytes of whole batches from the one holding ``start``,
        at most ``max_bytes`` (at least the first batch with ``min_one_message``), and none at
        or past the batch where ``max_offset`` (a high watermark or last stable offset; default
        the log end) begins: the bound is a byte position, so no batch is parsed to cut there.
        With ``include_aborted``, the aborted transactions overlapping what is returned.

        With ``verify_crcs``, every whole batch returned has had its CRC checked (a mismatch
        is a :class:`DamagedLogError` naming file and byte, as any damage): bytes a fetch of
        this process already verified in a file it writes are neither read nor checked again
        (:mod:`kafkalog.log.verified`)."""
        self._check_in_range(start)
        for lost in self.lost:
            if lost.overlaps(start, start + 1) or (
                start >= self.log_end_offset and lost.last is None
            ):
                raise lost.error(self.directory)
        if self.damage_at_end is not None and start >= self.log_end_offset:
            # the records after the damage would never come: a consumer must not wait for them
            raise self.damage_at_end
        bound = self.log_end_offset if max_offset is None else min(max_offset, self.log_end_offset)
        aborted: list[AbortedTxn] | None = [] if include_aborted else None
        segments = self.segments.from_floor(start)
        for k, (seg, nxt) in enumerate(segments):
            if seg.base_offset >= bound:
                break
            found = seg.translate_offset(start)
            if found is None:
                if nxt is not None and (seg.base_offset, nxt) not in self._gaps_said:
                    # a fetch into a gap between segments: said, as every read says it (damage
                    # there: the read of the segment's bytes names it)
                    with contextlib.suppress(KafkalogError):
                        self.say_gap(seg, seg.read_next_offset(), nxt)
                continue  # past this segment's last batch: the next one holds it
            for lost in self.lost:
                if seg.base_offset > start and lost.overlaps(start, seg.base_offset):
                    raise lost.error(self.directory)  # never past a lost segment unsaid
            upper = self.log_end_offset if nxt is None else nxt
            limit = seg.size if bound >= upper else seg.end_position(bound)
            if found.position >= limit:
                break
            adjusted = max(max_bytes, found.size) if min_one_message else max_bytes
            length = min(limit - found.position, adjusted)
            if length <= 0:
                break
            region = seg.log.region(found.position, length)
            if not region.length:
                break
            verified = seg.log.verified if verify_crcs else None
            data: bytes | None = None
            if verified is None or not verified.covers(
                found.position, found.position + region.length
            ):
                # (bytes verified before had their offsets checked too, against bounds that
                # only a truncation lowers, and it forgets them)
                data = seg.log.read(found.position, region.length)
                wrong = fetched_offsets_problem(data, found.position, seg.base_offset - 1, upper)
                if wrong is not None:
                    raise DamagedLogError.found(
                        wrong[1], path=seg.log.path, position=wrong[0], partition=seg.directory
                    )
                if verify_crcs:
                    check_fetched_crcs(
                        data,
                        found.position,
                        path=seg.log.path,
                        partition=seg.directory,
                        limits=seg.limits,
                        verified=verified,
                    )
            if include_aborted:
                # Kafka's fetchUpperBoundOffset: an offset of the first indexed append after the
                # bytes returned (every offset returned is below it), else the next segment's
                following = seg.fetch_upper_bound_offset(found.position, length)
                end = min(bound, upper if following is None else following)
                aborted = _txns_of(segments[k:], start, end)
                # the ABORT markers of the bytes against the entries answered: a .txnindex
                # deleted or cut short must not hand aborted records out as committed
                if data is None:
                    data = seg.log.read(found.position, region.length)
                aborted += fetched_unlisted(data, found.position, start, aborted, seg.log.path)
            return FetchInfo(region, aborted)
        return FetchInfo(None, aborted)

    def aborted_transactions(self, start: int, end: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping offsets [start, end), from the ``.txnindex`` of
        the segment holding ``start`` on, stopping where an entry's last stable offset shows
        no later one can overlap (Kafka's collectAbortedTransactions)."""
        if start >= end or not self.segments:
            return []
        return _txns_of(self.segments.from_floor(start), start, end)

    def batches(
        self,
        start: int | None = None,
        end: int | None = None,
        *,
        check_crcs: bool = True,
        on_damage: Callable[[SkippedBytes], None] | None = None,
    ) -> Iterator[LogEntry]:
        """The batches holding offsets in [start, end), across segments, in offset order, each
        CRC checked unless ``check_crcs`` is false (Kafka's consumers check them by default,
        ``check.crcs=true``): a damaged batch is an error, never a record read wrong; or, with
        ``on_damage``, skipped to the next valid batch and handed to it (never in silence).

        The segments and byte ranges read are chosen by the call, not by the first step of
        the iteration: a caller holding the log's lock for the call (as every
        :class:`~kafkalog.log.log.Log` read does) gets the log as it was then, whatever
        retention or a cleaner's swap does while it iterates (a segment taken out stays
        readable until ``file.delete.delay.ms`` has passed, see :mod:`kafkalog.log.deletion`)."""
        if on_damage is not None:
            lo = self.log_start_offset if start is None else max(start, self.log_start_offset)
            hi = self.log_end_offset if end is None else min(end, self.log_end_offset)
            if self.damage_at_end is not None and end is None:
                hi = 2**63  # valid batches may follow the damage: walk to the end of the files
            segments = self.segments.from_floor(lo) if lo < hi else []
            upper = 2**63 if hi >= self.log_end_offset else hi
            for lost in self.lost:
                if lost.overlaps(lo, upper):
                    on_damage(lost.skipped())
            return self._batches_skipping(segments, lo, hi, check_crcs, on_damage)
        return _entries_of(self._segment_ranges(start, end), check_crcs)

    def _batches_skipping(
        self,
        segments: list[tuple[LogSegment, int | None]],
        lo: int,
        hi: int,
        check_crcs: bool,
        on_damage: Callable[[SkippedBytes], None],
    ) -> Iterator[LogEntry]:
        """:meth:`batches` that skips damage: whole segments walked from the index entry below
        ``lo`` (no byte range is worked out ahead, since working it out reads through the
        damage), batches outside [lo, hi) dropped."""
        read_to: int | None = None  # past the last batch of the segment before
        for seg, next_base in segments:
            if seg.base_offset >= hi:
                return
            end = seg.base_offset  # past the last batch walked
            position = seg.scan_start(lo) if seg.base_offset <= lo else 0
            if position > seg.size:
                position = 0  # an index entry past the end of its .log (damage too)
            # a skip at the segment's first byte covers the offsets from the end of what was
            # read before it: a batch there below the segment's base (a file renamed) held
            # them, and a skip report must say so (not only the gap said between files)
            previous = min(seg.base_offset, read_to if read_to is not None else seg.base_offset)
            for entry in skip_damage(
                seg,
                position,
                previous - 1,
                on_damage,
                verify_crc=check_crcs,
                next_base=next_base,
            ):
                end = entry.last_offset + 1
                if entry.last_offset < lo:
                    continue
                if entry.base_offset >= hi:
                    return
                yield entry
            if next_base is not None and next_base < hi:
                self.say_gap(seg, end, next_base)
            read_to = end

    def records(
        self,
        start: int | None = None,
        end: int | None = None,
        *,
        include_control: bool = False,
        check_crcs: bool = True,
        on_damage: Callable[[SkippedBytes], None] | None = None,
    ) -> Iterator[Record]:
        """Records with offsets in [start, end), control records skipped unless asked; damage
        skipped and handed to ``on_damage`` when it is given (see :meth:`batches`, also for
        when the segments read are chosen)."""
        lo = self.log_start_offset if start is None else start
        entries = self.batches(start, end, check_crcs=check_crcs, on_damage=on_damage)
        return _records_of(entries, lo, end, include_control, self.limits)

    def read_arrow(
        self,
        start: int | None,
        end: int | None,
        *,
        topic: str,
        partition: int,
        include_headers: bool,
        timestamp_unit: TimestampUnit,
    ) -> Any:
        """Records with offsets in [start, end) as one ``pyarrow.Table`` with the columns of
        Spark's Kafka source, control records skipped, through the columnar decoder."""
        import pyarrow as pa

        from kafkalog.log.arrow_read import decode_file, keep_rows, offsets_within
        from kafkalog.records import arrow_schema

        schema = arrow_schema(
            include_headers=include_headers, timestamp_unit=timestamp_unit, topic_partition=True
        )
        batches: list[Any] = []
        for seg, r in self._segment_ranges(start, end):
            handle = seg.log.read_handle()  # ClosedError, not a reopen, once the log is closed
            try:
                for batch in decode_file(
                    handle,
                    r.start_position,
                    r.end_position,
                    path=r.path,
                    last_offset=r.end_offset - 1,
                    include_headers=include_headers,
                    timestamp_unit=timestamp_unit,
                    topic=topic,
                    partition=partition,
                    limits=self.limits,
                    last_segment=r.last_segment,
                    first_offset=r.base_offset,
                ):
                    nxt = seg.next_base  # (the last segment may grow under a live writer)
                    if nxt is not None and r.end_offset >= nxt and batch.num_rows:
                        _check_below(seg, r, batch)
                    kept = keep_rows(batch, offsets_within(batch, r.start_offset, r.end_offset))
                    if kept.num_rows:
                        batches.append(kept)
            finally:
                handle.close()
        return pa.Table.from_batches(batches, schema=schema)

    def first_offset_at_or_after(self, timestamp: int) -> int | None:
        """The first offset holding a record with timestamp >= ``timestamp`` (>= 0), every
        record before it being older; None when no record has one.

        Not Kafka's ListOffsets (``Log.offsets_for_times``), which answers from the first
        segment whose largest timestamp reaches the target, which for a segment without
        timestamps (v0 messages, an emptied segment) is its file's mtime: a segment that then
        has no such record makes it answer "none" though later segments have them. Segments
        are searched on their records' timestamps here, and on to the next when one has none.
        """
        for seg in self.segments:
            if seg.has_time_index() and seg.max_timestamp_so_far < timestamp:
                continue  # no record of it reaches the target (without a time index: search it)
            found = seg.find_offset_by_timestamp(timestamp, self.log_start_offset)
            if found is not None:
                return found.offset
        return None

    def size_in_bytes(self) -> int:
        return sum(seg.size for seg in self.segments)


def _check_below(seg: LogSegment, r: SegmentRange, batch: Any) -> None:
    """Rows read to the end of a segment hold offsets below ``r.end_offset`` (the next
    segment's base, or the log end): one at or past it is a batch whose base offset (outside
    the CRC) is wrong, named at its byte by the segment's own walk, never dropped unsaid."""
    import pyarrow.compute as pc

    if pc.max(batch.column("offset")).as_py() < r.end_offset:
        return
    problem = first_problem(seg)
    position = 0 if problem is None else problem.position
    what = (
        f"a batch holds offsets at or past {r.end_offset}, where the next segment starts"
        if problem is None
        else problem.describe()
    )
    raise DamagedLogError.found(what, path=r.path, position=position, partition=seg.directory)


def _entries_of(
    plan: list[tuple[LogSegment, SegmentRange]], check_crcs: bool
) -> Iterator[LogEntry]:
    for seg, r in plan:
        yield from seg.entries(r.start_position, end=r.end_position, verify_crc=check_crcs)


def _records_of(
    entries: Iterator[LogEntry],
    lo: int,
    end: int | None,
    include_control: bool,
    limits: Limits,
) -> Iterator[Record]:
    for entry in entries:
        if entry.is_control and not include_control:
            continue
        for rec in entry.records(limits):
            if rec.offset < lo:
                continue
            if end is not None and rec.offset >= end:
                return
            yield rec
