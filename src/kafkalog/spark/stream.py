"""``spark.readStream.format("kafkalog")``: tail a data directory a broker (or kafkalog) appends
to, micro-batch by micro-batch, with Spark's Kafka offsets JSON and ``maxOffsetsPerTrigger``.

Offsets are ``{"topic": {"partition": next offset}}`` as Spark's Kafka source writes them to its
checkpoint. Each trigger re-reads the partitions' ends (read-only: a live broker's directory is
only looked at); partitions that appear later start at their earliest offset.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from kafkalog.log import Log
from kafkalog.spark.columns import Columns
from kafkalog.spark.options import EARLIEST, LATEST, ReadOptions
from kafkalog.spark.partitions import SplitPartition, pack
from kafkalog.spark.plan import (
    Aborted,
    DataLossError,
    PartitionRange,
    Split,
    plan_open,
    start_by_timestamp,
)
from kafkalog.spark.selection import (
    check_partitions_named,
    partition_directories,
    select_partitions,
)

Offsets = dict[str, dict[str, int]]

logger = logging.getLogger("kafkalog.spark")


Ends = dict[tuple[str, int], tuple[str, int, int]]


def _ends(opts: ReadOptions, then: Any = None) -> Ends:
    """(directory, log start, readable end) of every selected partition, now. With ``then``,
    each partition's log is handed, still open, to ``then(ends, logs)`` before it is closed."""
    out = {}
    logs: dict[tuple[str, int], Log] = {}
    chosen = select_partitions(
        partition_directories(opts.path, opts.location), replace(opts, fail_on_data_loss=False)
    )
    try:
        for (topic, partition), directory in sorted(chosen.items()):
            log = logs[(topic, partition)] = Log(directory, writable=False)
            end = log.last_stable_offset() if opts.read_committed else log.log_end_offset
            out[(topic, partition)] = (directory, log.log_start_offset, end)
        if then is not None:
            then(out, logs)
    finally:
        for log in logs.values():
            log.close()
    return out


class RefusedStreamReader(DataSourceStreamReader):
    """The stream reader of options a stream refuses (an ``endingOffsets``, say): it raises
    their error at Spark's first question, ``initialOffset``.

    Raising in ``streamReader()`` itself shows the user PySpark's own ``UnboundLocalError``
    (its stream runner's ``finally: reader.stop()`` has no reader to stop), with kafkalog's
    message buried in the exception chain; raised here, the stream fails with that message."""

    def __init__(self, problem: Exception) -> None:
        self.problem = problem  # without a traceback: each raise shows its own frame alone

    def initialOffset(self) -> dict[str, Any]:
        raise self.problem

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        raise self.problem

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        raise self.problem

    def read(self, partition: InputPartition) -> Iterator[Any]:
        raise self.problem


@dataclass(frozen=True)
class _Planned:
    """A micro-batch planned when its end was chosen (``latestOffset``), with the logs open
    then, for ``partitions`` to use when Spark asks for that same batch: one opening of each
    log per trigger. ``firsts`` are the log starts seen, ``splits`` cover each partition from
    where the batch starts (or its log start, if later) to where it ends."""

    begin: dict[tuple[str, int], int]
    stop: dict[tuple[str, int], int]
    firsts: dict[tuple[str, int], int]
    splits: list[Split]
    aborted: Aborted  # with read_committed, each range's aborted transactions


def _flat(offsets: Offsets) -> dict[tuple[str, int], int]:
    return {(t, int(p)): int(o) for t, parts in offsets.items() for p, o in parts.items()}


def _nest(flat: dict[tuple[str, int], int]) -> Offsets:
    out: Offsets = {}
    for (t, p), o in sorted(flat.items()):
        out.setdefault(t, {})[str(p)] = o
    return out


def _data_lost(opts: ReadOptions, what: str) -> None:
    """Spark's Kafka source fails a stream whose next offsets are gone, unless
    ``failOnDataLoss=false``, when it goes on from what is there, with a WARNING saying what
    it skipped (as Spark's does)."""
    if opts.fail_on_data_loss:
        raise DataLossError(
            f"{what}; some data may have been lost. Set failOnDataLoss=false to go on from the "
            "earliest offset still there"
        )
    logger.warning("kafkalog: %s; the stream goes on without them (failOnDataLoss=false)", what)


class KafkaLogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: ReadOptions, columns: Columns | None = None) -> None:
        self.opts = opts
        self.columns = columns
        self.target: dict[tuple[str, int], int] | None = None
        self.planned: _Planned | None = None
        # when the last micro-batch was let through (minOffsetsPerTrigger); 0: the first is
        # never held back, as in Spark's KafkaMicroBatchStream
        self.last_trigger_ms = 0.0

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: what is there now is the target; later appends wait."""
        self.target = {tp: last for tp, (_, _, last) in _ends(self.opts).items()}

    def initialOffset(self) -> dict[str, Any]:
        """Where a new query starts, with Spark's precedence: ``startingTimestamp`` or
        ``startingOffsetsByTimestamp`` through each partition's time index (no match: error or
        latest, per ``startingOffsetsByTimestampStrategy``), else ``startingOffsets``."""
        opts = self.opts
        ends = _ends(opts)
        check_partitions_named(set(ends), opts)
        flat = {}
        for (topic, partition), (directory, first, last) in ends.items():
            if opts.starting_by_timestamp is not None:
                log = Log(directory, writable=False)
                try:
                    flat[(topic, partition)] = start_by_timestamp(log, topic, partition, last, opts)
                finally:
                    log.close()
                continue
            spec = opts.starting_offsets
            value = spec.get(topic, {}).get(partition, LATEST) if isinstance(spec, dict) else spec
            if 0 <= value < first:
                _data_lost(
                    opts,
                    f"{topic}-{partition}: starting offsets {value} to {first - 1} are gone "
                    f"(the log starts at {first})",
                )
            flat[(topic, partition)] = (
                first if value == EARLIEST else last if value == LATEST else max(first, value)
            )
        return _nest(flat)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = _flat(start)
        chosen: dict[tuple[str, int], int] = {}
        held: list[bool] = []

        def plan(ends: Ends, logs: dict[tuple[str, int], Log]) -> None:
            if self._hold_back(begin, ends):
                held.append(True)
                return
            chosen.update(self._choose(begin, ends, limit))
            self.planned = self._plan(begin, chosen, ends, logs)

        _ends(self.opts, plan)
        return start if held else _nest(chosen)

    def _hold_back(self, begin: dict[tuple[str, int], int], ends: Ends) -> bool:
        """Spark's ``minOffsetsPerTrigger``: no micro-batch until at least that many new offsets
        are there (all partitions together), or ``maxTriggerDelay`` has passed since the last
        one (KafkaMicroBatchStream.delayBatch). Trigger.AvailableNow reads what is there
        without waiting: nothing more may come."""
        minimum = self.opts.min_offsets_per_trigger
        if minimum is None or self.target is not None:
            return False
        now = time.time() * 1000
        if now - self.last_trigger_ms >= self.opts.max_trigger_delay_ms:
            self.last_trigger_ms = now
            return False
        new = sum(max(0, last - begin.get(tp, first)) for tp, (_, first, last) in ends.items())
        if new < minimum:
            return True
        self.last_trigger_ms = now
        return False

    def _choose(
        self, begin: dict[tuple[str, int], int], ends: Ends, limit: ReadLimit
    ) -> dict[tuple[str, int], int]:
        """The end of the next micro-batch, per partition."""
        available = {}
        for tp, (_, first, last) in ends.items():
            if self.target is not None:
                if tp not in self.target:
                    continue
                last = min(last, self.target[tp])
            from_offset = begin.get(tp, first)  # a new partition starts at its earliest offset
            available[tp] = (max(from_offset, first), max(last, from_offset))
        if isinstance(limit, ReadMaxRows):
            total = sum(max(0, hi - lo) for lo, hi in available.values())
            if total > limit.max_rows:
                # as Spark's Kafka source (KafkaMicroBatchStream.rateLimit): the budget split in
                # proportion to what each has, a share under one rounded up ("don't completely
                # starve small partitions"), so a stream always advances, also when the limit
                # is below the number of partitions
                flat = {}
                for tp, (lo, hi) in available.items():
                    prorate = limit.max_rows * ((hi - lo) / total)
                    share = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
                    flat[tp] = min(hi, lo + max(0, share))
                return flat
        return {tp: hi for tp, (lo, hi) in available.items()}

    def _plan(
        self,
        begin: dict[tuple[str, int], int],
        stop: dict[tuple[str, int], int],
        ends: Ends,
        logs: dict[tuple[str, int], Log],
    ) -> _Planned:
        ranges = []
        for tp, hi in sorted(stop.items()):
            directory, first, _ = ends[tp]
            lo = max(begin.get(tp, first), first)
            if hi > lo:
                ranges.append(PartitionRange(tp[0], tp[1], directory, lo, hi))
        splits, aborted = plan_open(
            ranges, {r.directory: logs[(r.topic, r.partition)] for r in ranges}, self.opts
        )
        firsts = {tp: first for tp, (_, first, _) in ends.items()}
        return _Planned(begin, stop, firsts, splits, aborted)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, stop = _flat(start), _flat(end)
        dirs = partition_directories(self.opts.path)
        for tp, lo in sorted(begin.items()):
            # a partition read before is gone now, with offsets still to read
            if tp not in dirs and (tp not in stop or stop[tp] > lo):
                _data_lost(self.opts, f"partition {tp[0]}-{tp[1]} is gone from {self.opts.path}")
        planned = self.planned
        if planned is None or planned.begin != begin or planned.stop != stop:
            # not the batch latestOffset chose (a batch replayed after a restart): plan it now
            planned = self._plan_now(begin, stop, dirs)
        for tp in sorted(stop):
            first = planned.firsts.get(tp)
            if first is None or tp not in dirs:
                continue
            lo = begin.get(tp, first)  # a new partition starts at its earliest offset
            if lo < first:
                _data_lost(
                    self.opts,
                    f"{tp[0]}-{tp[1]}: offsets {lo} to {first - 1} are gone (retention or "
                    f"deletion) before this query read them",
                )
        return pack(planned.splits, self.opts, planned.aborted)

    def _plan_now(
        self,
        begin: dict[tuple[str, int], int],
        stop: dict[tuple[str, int], int],
        dirs: dict[tuple[str, int], str],
    ) -> _Planned:
        chosen = {tp: dirs[tp] for tp in stop if tp in dirs}
        ends: Ends = {}
        logs: dict[tuple[str, int], Log] = {}
        try:
            for tp, directory in sorted(chosen.items()):
                log = logs[tp] = Log(directory, writable=False)
                ends[tp] = (directory, log.log_start_offset, log.log_end_offset)
            return self._plan(begin, {tp: stop[tp] for tp in chosen}, ends, logs)
        finally:
            for log in logs.values():
                log.close()

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, SplitPartition)
        return partition.read(self.opts.include_headers, self.columns)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to acknowledge: the files are only read."""
