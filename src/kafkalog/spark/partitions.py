"""The Spark input partitions a read is dealt into: a batch read's (``source``) and a
micro-batch's (``stream``) alike.

Here, not in ``source``, because both use them and ``source`` picks the stream reader: the two
would import each other.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import InputPartition

from kafkalog import files
from kafkalog.spark.columns import Columns
from kafkalog.spark.options import ReadOptions
from kafkalog.spark.plan import Aborted, Split, TimestampBounds, task_count
from kafkalog.spark.stats import ReadStats


class SplitPartition(InputPartition):
    """Planned splits for one Spark task, read one after the other (small segments are packed
    together: every task costs Spark a round trip to a Python worker)."""

    def __init__(
        self,
        splits: list[Split],
        aborted: Aborted,
        location: str = "",
        fail_on_data_loss: bool = True,
        timestamps: TimestampBounds = (None, None),
    ) -> None:
        super().__init__(len(splits))
        self.splits = splits
        self.aborted = aborted
        self.location = location
        self.fail_on_data_loss = fail_on_data_loss
        self.timestamps = timestamps

    def read(
        self,
        include_headers: bool,
        columns: Columns | None = None,
        stats: ReadStats | None = None,
    ) -> Iterator[Any]:
        # here, not at the top: the planner unpickles nothing of this module's and needs none of
        # the task's decoder (numba, the columnar kernels), whose loading costs a process ~1 s
        from kafkalog.spark.task import read_split

        if files.is_remote(self.location):
            files.resolve(self.location)  # this worker process learns the store's settings
        for split in self.splits:
            yield from read_split(
                split,
                include_headers=include_headers,
                columns=columns,
                aborted=self.aborted.get(split.directory),  # None: read_uncommitted
                fail_on_data_loss=self.fail_on_data_loss,
                stats=stats,
                timestamps=self.timestamps,
            )


def pack(
    splits: list[Split],
    opts: ReadOptions,
    aborted: Aborted,
    timestamps: TimestampBounds = (None, None),
) -> list[InputPartition]:
    """Splits, in order, dealt into :func:`~kafkalog.spark.plan.task_count` tasks of about equal
    bytes: each split goes to the task its middle byte falls in, so every task is within half a
    split (a quarter task at most, see ``make_splits``) of the even share. ``timestamps`` are
    the bounds the tasks skip batches by (:func:`~kafkalog.spark.plan.task_timestamps`)."""
    if not splits:
        return [SplitPartition([], {})]

    def task(group: list[Split]) -> SplitPartition:
        return SplitPartition(group, aborted, opts.location, opts.fail_on_data_loss, timestamps)

    if opts.max_records_per_partition:
        return [task([s]) for s in splits]
    total = sum(s.size for s in splits)
    count = task_count(total, opts)
    share = total / count if total else 1.0
    groups: list[list[Split]] = [[] for _ in range(count)]
    before = 0
    for split in splits:
        groups[min(count - 1, int((before + split.size / 2) // share))].append(split)
        before += split.size
    if opts.min_partitions:
        # minPartitions asks for Spark's Kafka source's tasks, and those never mix Kafka
        # partitions: a task dealt the end of one and the start of the next is cut in two
        # (so there may be more tasks than asked for, as Spark allows). Without it small
        # partitions share tasks: a Python task costs ~0.1 s to start, whatever it reads.
        groups = [run for g in groups for run in _by_partition(g)]
    return [task(g) for g in groups if g]


def _by_partition(group: list[Split]) -> list[list[Split]]:
    """``group`` cut where its splits pass from one Kafka partition to the next."""
    runs: list[list[Split]] = []
    for split in group:
        if not runs or (runs[-1][-1].topic, runs[-1][-1].partition) != (
            split.topic,
            split.partition,
        ):
            runs.append([])
        runs[-1].append(split)
    return runs
