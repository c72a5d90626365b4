"""Planning a read: which partitions, which offset range in each (through the indexes), and how
to cut that into splits balanced by bytes.

Pure Python over the log layer, so it is tested without Spark. Starting and ending offsets resolve
through ``.index``; timestamps through ``.timeindex`` then ``.index`` (``Log.offsets_for_times``),
never by scanning a log from its start.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kafkalog import files
from kafkalog.errors import KafkalogError
from kafkalog.log import Log
from kafkalog.log.local_log import SegmentRange
from kafkalog.spark.options import EARLIEST, LATEST, MIN_TASK_BYTES, OptionError, ReadOptions

# the selection and load-time checks, here too for callers of the planner (a JVM front end)
from kafkalog.spark.selection import INTERNAL_TOPICS as INTERNAL_TOPICS
from kafkalog.spark.selection import UnknownPartitionError as UnknownPartitionError
from kafkalog.spark.selection import check_at_load as check_at_load
from kafkalog.spark.selection import check_partitions_named as check_partitions_named
from kafkalog.spark.selection import partition_directories as partition_directories
from kafkalog.spark.selection import select_partitions as select_partitions

if TYPE_CHECKING:
    from kafkalog.log.segment_facts import SegmentFacts
    from kafkalog.spark.plan_memo import PartitionMemo
    from kafkalog.spark.pushdown import Bounds


logger = logging.getLogger("kafkalog.spark")

#: an aborted transaction as a task drops its records: producer id, first offset, last offset
AbortedRange = tuple[int, int, int]
#: the aborted transactions of each planned partition (by directory), for read_committed
Aborted = dict[str, list[AbortedRange]]
#: [lo, hi) in ms (None: unbounded): the timestamps a task keeps batches for
TimestampBounds = tuple[int | None, int | None]


class DataLossError(KafkalogError):
    """Offsets asked for are gone (retention, compaction, a missing partition) and
    ``failOnDataLoss`` is true."""


@dataclass(frozen=True)
class PartitionRange:
    """Offsets [start, end) of one partition to read."""

    topic: str
    partition: int
    directory: str
    start: int
    end: int


@dataclass(frozen=True)
class Split:
    """A byte range of one segment file and the offsets of it to return (a Spark task)."""

    topic: str
    partition: int
    directory: str
    segment: str
    base_offset: int
    start_position: int
    end_position: int  # exclusive; -1 = to the end of the file as it is when read
    start_offset: int
    end_offset: int
    # the segment as planned: its size and which file it was (device, inode; None remotely),
    # so a task can tell a segment cut or swapped by the broker since then
    planned_size: int = -1
    identity: tuple[int, int] | None = None
    last_segment: bool = True  # only the last segment may end in a batch being written

    @property
    def size(self) -> int:
        return max(0, self.end_position - self.start_position)

    @classmethod
    def of(cls, r: PartitionRange, sr: SegmentRange) -> Split:
        return cls(
            r.topic,
            r.partition,
            r.directory,
            sr.path,
            sr.base_offset,
            sr.start_position,
            sr.end_position,
            sr.start_offset,
            sr.end_offset,
            planned_size=sr.segment_size,
            identity=sr.identity,
            last_segment=sr.last_segment,
        )

    def segment_range(self) -> SegmentRange:
        return SegmentRange(
            self.segment,
            self.base_offset,
            self.start_position,
            self.end_position,
            self.start_offset,
            self.end_offset,
            self.planned_size,
            self.identity,
            self.last_segment,
        )


def spec_value(spec: object, topic: str, partition: int, default: int) -> int:
    if isinstance(spec, int):
        return spec
    assert isinstance(spec, dict)
    return int(spec.get(topic, {}).get(partition, default))


def _by_timestamp(log: Log, ts: int) -> int | None:
    found = log.offsets_for_times(ts)
    return None if found is None else found.offset


def start_by_timestamp(log: Log, topic: str, partition: int, latest: int, opts: ReadOptions) -> int:
    """The starting offset of a by-timestamp start (batch or stream): the first offset at or
    after the timestamp, through the indexes; none there is an error or ``latest``, per
    ``startingOffsetsByTimestampStrategy``, as in Spark."""
    ts = spec_value(opts.starting_by_timestamp, topic, partition, -1)
    found = _by_timestamp(log, ts) if ts >= 0 else log.log_start_offset
    if found is not None:
        return found
    if opts.starting_strategy == "error":
        raise OptionError(
            f"no offset for starting timestamp {ts} in {topic}-{partition} "
            "(startingOffsetsByTimestampStrategy=error)"
        )
    return latest


def resolve_ranges(opts: ReadOptions, bounds: Bounds | None = None) -> list[PartitionRange]:
    """Offset range of every selected partition, with Spark's precedence and failOnDataLoss,
    narrowed by pushed-down filter ``bounds`` (through the indexes) when given."""
    return [r for r, _ in _resolved(opts, bounds)]


def plan_read(
    opts: ReadOptions,
    bounds: Bounds | None = None,
    memo: PartitionMemo | None = None,
    settle_ms: int = 2000,
) -> tuple[list[Split], Aborted]:
    """``make_splits(resolve_ranges(opts, bounds), opts)``, and with ``read_committed`` the
    aborted transactions of each range, opening each partition's log once: resolving the range
    and finding its byte ranges share the open log (a query's fixed cost, paid by every query).
    With ``memo`` (a long-lived planner's), a partition whose files stay as they were (and
    settled ``settle_ms`` before) is not planned again (:mod:`kafkalog.spark.plan_memo`), and
    in one planned again (a live log's) the sealed segments whose files stay as they were are
    not checked again (:mod:`kafkalog.log.segment_facts`)."""
    pieces: list[Split] = []
    aborted: Aborted = {}
    chosen = select_partitions(partition_directories(opts.path, opts.location), opts)
    check_partitions_named(set(chosen), opts)
    local = memo is not None and not files.is_remote(opts.location or opts.path)
    question = repr((opts, bounds)) if local else ""
    facts = memo.segments if local and memo is not None else None
    if memo is not None:
        memo.begin()
        memo.segments.settle_ms = settle_ms
    for (topic, partition), directory in sorted(chosen.items()):

        def make(t: str = topic, p: int = partition, d: str = directory) -> _PartitionPlan:
            return _plan_partition(t, p, d, opts, bounds, facts)

        part = memo.plan(directory, question, settle_ms, make) if local and memo else make()
        pieces.extend(part.pieces)
        if part.aborted is not None:
            aborted[directory] = list(part.aborted)
    return _splits_of(pieces, opts), aborted


@dataclass(frozen=True)
class _PartitionPlan:
    """One partition's share of a plan: its segment pieces and (read_committed) aborted
    transactions (None: not asked, or nothing to read)."""

    pieces: tuple[Split, ...]
    aborted: tuple[AbortedRange, ...] | None


def _plan_partition(
    topic: str,
    partition: int,
    directory: str,
    opts: ReadOptions,
    bounds: Bounds | None,
    facts: SegmentFacts | None = None,
) -> _PartitionPlan:
    """:func:`plan_read`'s work for one partition, its log open once (with ``facts``, a
    sealed segment whose files are as a former plan verified them is not checked again)."""
    log = Log(directory, writable=False)
    log.local.facts = facts
    try:
        # resolved before pruning: the options' errors (a start after the end, offsets
        # lost) are the query's answer without pushdown, so they stay its answer with it
        r = _resolve_one(log, topic, partition, directory, opts)
        _check_damage_at_end(log, r, opts)
        if bounds is not None and not bounds.allows_partition(topic, partition):
            return _PartitionPlan((), None)
        if bounds is not None:
            r = _narrow(log, r, bounds)
        pieces: list[Split] = []
        aborted: Aborted = {}
        _plan_range(r, log, opts, pieces, aborted)
        found = aborted.get(directory)
        return _PartitionPlan(tuple(pieces), None if found is None else tuple(found))
    finally:
        log.close()


def plan_open(
    ranges: list[PartitionRange], logs: dict[str, Log], opts: ReadOptions
) -> tuple[list[Split], Aborted]:
    """:func:`plan_read` for ranges resolved already, over logs the caller has open (by
    directory)."""
    pieces: list[Split] = []
    aborted: Aborted = {}
    for r in ranges:
        _plan_range(r, logs[r.directory], opts, pieces, aborted)
    return _splits_of(pieces, opts), aborted


def _plan_range(
    r: PartitionRange, log: Log, opts: ReadOptions, pieces: list[Split], aborted: Aborted
) -> None:
    """The pieces of range ``r`` (and its aborted transactions with read_committed), through
    the log's read path. Spark's ``maxRecordsPerPartition`` cuts the offsets first, so each
    capped piece reads only the bytes of its own offsets."""
    if r.end <= r.start:
        return
    if opts.read_committed:
        aborted[r.directory] = [
            (t.producer_id, t.first_offset, t.last_offset)
            for t in log.aborted_transactions(r.start, r.end)
        ]
    cap = opts.max_records_per_partition or (r.end - r.start)
    for lo in range(r.start, r.end, cap):
        sub = dataclasses.replace(r, start=lo, end=min(r.end, lo + cap))
        ranges = log.ranges(sub.start, sub.end, past_damage=not opts.fail_on_data_loss)
        pieces.extend(Split.of(sub, sr) for sr in ranges)


def _resolved(opts: ReadOptions, bounds: Bounds | None) -> Iterator[tuple[PartitionRange, Log]]:
    """Each selected partition's range, with its log open until the next one is asked for."""
    chosen = select_partitions(partition_directories(opts.path, opts.location), opts)
    check_partitions_named(set(chosen), opts)
    for (topic, partition), directory in sorted(chosen.items()):
        log = Log(directory, writable=False)
        try:
            # resolved before pruning: the options' errors (a start after the end, offsets
            # lost) are the query's answer without pushdown, so they stay its answer with it
            r = _resolve_one(log, topic, partition, directory, opts)
            _check_damage_at_end(log, r, opts)
            if bounds is not None and not bounds.allows_partition(topic, partition):
                continue
            if bounds is not None:
                r = _narrow(log, r, bounds)
            yield r, log
        finally:
            log.close()


def warn_lost(topic: str, partition: int, lo: int, hi: int, why: str) -> None:
    """Say that offsets [lo, hi) of a partition, asked for, are not in the result: what
    failOnDataLoss=false does instead of failing, never in silence (Spark's Kafka source logs
    a WARNING for each such skip too)."""
    if hi <= lo:
        return
    logger.warning(
        "kafkalog: %s-%d: offsets %d to %d were asked for but are not there (%s); they are not "
        "in the result (failOnDataLoss=false)",
        topic,
        partition,
        lo,
        hi - 1,
        why,
    )


def _check_damage_at_end(log: Log, r: PartitionRange, opts: ReadOptions) -> None:
    """A read to the end of a log whose last segment is damaged fails, or with
    failOnDataLoss=false says what it skips (the log ends before the damage)."""
    damage = log.damage_at_end
    if damage is None or r.end < log.log_end_offset:
        return
    if opts.fail_on_data_loss:
        raise damage
    logger.warning(
        "kafkalog: skipped the damaged end of %s (%s); the records after it are not in the "
        "result (failOnDataLoss=false; `kafkalog repair` moves the damaged bytes into a "
        "quarantine folder)",
        files.redacted(r.directory),
        damage,
    )


def _narrow(log: Log, r: PartitionRange, b: Bounds) -> PartitionRange:
    start, end = max(r.start, b.offset_lo), min(r.end, b.offset_hi)
    if b.ts_lo is not None and b.ts_lo >= 0 and start < end:
        # every record before it is older than ts_lo; records without a timestamp (-1) are not
        # in the time index and may be anywhere, so negative bounds never prune
        found = log.first_offset_at_or_after(b.ts_lo)  # every record before it is older than ts_lo
        start = end if found is None else max(start, found)
    # An upper timestamp bound ends no range: records may come in any timestamp order, and
    # no index holds a smallest timestamp. Tasks skip the batches it rules out instead, from
    # their headers (task_timestamps).
    return PartitionRange(r.topic, r.partition, r.directory, start, max(start, end))


def task_timestamps(bounds: Bounds | None) -> TimestampBounds:
    """The timestamps [lo, hi) (ms) a read's tasks keep batches for: every batch whose header
    proves all its records fall outside is skipped without being decoded, exactly for both
    bounds (:mod:`kafkalog.records.header_prune` says what each kind of header proves; a
    reader in another language applies the same rules). ``(None, None)`` without a
    timestamp filter."""
    if bounds is None:
        return (None, None)
    return (bounds.ts_lo, bounds.ts_hi)


def _resolve_one(
    log: Log, topic: str, partition: int, directory: str, opts: ReadOptions
) -> PartitionRange:
    """Spark's order: resolve both ends (earliest, latest, timestamps), refuse a start after
    the end whatever ``failOnDataLoss`` says (Spark asserts it in KafkaSourceRDD.compute: "You
    either provided an invalid fromOffset, ..."), then treat offsets outside the log as lost."""
    first, last = log.log_start_offset, log.log_end_offset
    # what a consumer sees as the end: under read_committed, the last stable offset
    latest = min(last, log.last_stable_offset()) if opts.read_committed else last
    # start
    if opts.starting_by_timestamp is not None:
        start = start_by_timestamp(log, topic, partition, latest, opts)
        start_name = "starting timestamp"
    else:
        requested = spec_value(opts.starting_offsets, topic, partition, EARLIEST)
        start, start_name = (first if requested == EARLIEST else requested), "startingOffsets"
        if requested == EARLIEST:
            start_name = "earliest offset"
    # end
    if opts.ending_by_timestamp is not None:
        ts = spec_value(opts.ending_by_timestamp, topic, partition, -1)
        found = _by_timestamp(log, ts) if ts >= 0 else None
        end, end_name = (latest if found is None else found), "ending timestamp"
    else:
        requested = spec_value(opts.ending_offsets, topic, partition, LATEST)
        end, end_name = (latest if requested == LATEST else requested), "endingOffsets"
    if start_name == "earliest offset" and end < first:
        # the whole range from the earliest offset to an ending offset is gone: retention
        # moved the log start past the end since the query was written (a live log), which is
        # lost data (failOnDataLoss), not a start after the end the user asked for
        if opts.fail_on_data_loss:
            raise DataLossError(
                f"{topic}-{partition}: ending offset {end} is gone (the log starts at {first}, "
                "so nothing from the earliest offset to it is left); set failOnDataLoss=false "
                "to read nothing of it"
            )
        logger.warning(
            "kafkalog: %s-%d: offsets before %d were asked for but are not there (the log "
            "starts at %d); they are not in the result (failOnDataLoss=false)",
            topic,
            partition,
            end,
            first,
        )
        return PartitionRange(topic, partition, directory, first, first)
    if start > end:
        raise OptionError(
            f"{topic}-{partition}: the {start_name} gives offset {start}, after the end "
            f"offset {end} from the {end_name} (log start {first}, log end {last})"
        )
    # offsets outside the log
    if start < first:
        if opts.fail_on_data_loss:
            raise DataLossError(
                f"{topic}-{partition}: starting offset {start} is gone (the log starts at "
                f"{first}); set failOnDataLoss=false to start at the earliest offset"
            )
        warn_lost(topic, partition, start, min(end, first), f"the log starts at {first}")
        start = first
    if end > last:
        if opts.fail_on_data_loss:
            what, offset = ("starting", start) if start > last else ("ending", end)
            raise DataLossError(
                f"{topic}-{partition}: {what} offset {offset} is beyond the log end {last}; "
                "set failOnDataLoss=false to read what is there"
            )
        warn_lost(topic, partition, max(start, last), end, f"the log ends at {last}")
        start, end = min(start, last), last
    if opts.read_committed:
        end = min(end, latest)  # nothing of an open transaction is visible
    return PartitionRange(topic, partition, directory, start, max(start, end))


def make_splits(ranges: list[PartitionRange], opts: ReadOptions) -> list[Split]:
    """Byte ranges of segments covering each partition's offsets, cut at offset-index entries
    (batch boundaries) so no split is larger than ``maxBytesPerSplit`` and there are at least
    ``minPartitions`` splits when the data allows."""
    pieces: list[Split] = []
    for r in ranges:
        if r.end > r.start:
            log = Log(r.directory, writable=False)
            try:
                _plan_range(r, log, opts, pieces, {})
            finally:
                log.close()
    return _splits_of(pieces, opts)


def _splits_of(pieces: list[Split], opts: ReadOptions) -> list[Split]:
    """Segment pieces cut into splits of about equal bytes (see :func:`make_splits`)."""
    total = sum(p.size for p in pieces)
    tasks = task_count(total, opts)
    # a quarter of a task: fine enough for tasks of equal size however segments fall
    target = opts.max_bytes_per_split if tasks == 1 else max(1, -(-total // (tasks * 4)))
    splits: list[Split] = []
    for piece in pieces:
        splits.extend(
            dataclasses.replace(
                piece, start_position=sr.start_position, end_position=sr.end_position
            )
            for sr in piece.segment_range().cut(target)
        )
    return splits


def task_count(total: int, opts: ReadOptions) -> int:
    """Spark tasks for ``total`` bytes: enough for tasks of at most ``maxBytesPerSplit``, at
    least ``minPartitions``, and at least four while each still gets 64 MiB (the cores of a
    laptop or a ``local[*]`` session busy, two rounds on two cores to even out); rounded up to
    a power of two below 8 and to a multiple of 8 above, so that tasks of equal size divide
    evenly over 1, 2, 4 or 8 cores. (Four 120 MB tasks and a 53 MB one on two cores leave one
    core idle for a third of the run; five of 103 MB do not divide either.)"""
    if total <= 0:
        return 1
    n = max(-(-total // opts.max_bytes_per_split), min(4, total // MIN_TASK_BYTES))
    if opts.min_partitions:
        n = max(n, opts.min_partitions)
    if n <= 1:
        return 1
    return 1 << (n - 1).bit_length() if n <= 8 else -(-n // 8) * 8
