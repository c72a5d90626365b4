"""The PySpark data source ``kafkalog``: ``spark.read.format("kafkalog")`` over Kafka log
directories, with the schema and options of Spark's own Kafka source.

Register it with :func:`register` (or import ``pyspark_kafkalog``, which Spark finds on its own).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceWriter,
    Filter,
    InputPartition,
)
from pyspark.sql.types import StructType

from kafkalog import files
from kafkalog.spark.options import ReadOptions, parse_read_options
from kafkalog.spark.plan import Split, make_splits, resolve_ranges, task_count
from kafkalog.spark.pushdown import Bounds, bounds_from_filters
from kafkalog.spark.stats import ReadStats, recorded
from kafkalog.spark.task import aborted_transactions, read_split

SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
HEADERS = ", headers array<struct<key:string,value:binary>>"


class SplitPartition(InputPartition):
    """Planned splits for one Spark task, read one after the other (small segments are packed
    together: every task costs Spark a round trip to a Python worker)."""

    def __init__(
        self,
        splits: list[Split],
        aborted: dict[str, list[tuple[int, int, int]]],
        location: str = "",
        fail_on_data_loss: bool = True,
    ) -> None:
        super().__init__(len(splits))
        self.splits = splits
        self.aborted = aborted
        self.location = location
        self.fail_on_data_loss = fail_on_data_loss

    def read(self, include_headers: bool, stats: ReadStats | None = None) -> Iterator[Any]:
        if files.is_remote(self.location):
            files.resolve(self.location)  # this worker process learns the store's settings
        for split in self.splits:
            yield from read_split(
                split,
                include_headers=include_headers,
                aborted=self.aborted.get(split.directory, []),
                fail_on_data_loss=self.fail_on_data_loss,
                stats=stats,
            )


def pack(
    splits: list[Split], opts: ReadOptions, aborted: dict[str, list[tuple[int, int, int]]]
) -> list[InputPartition]:
    """Splits, in order, dealt into :func:`~kafkalog.spark.plan.task_count` tasks of about equal
    bytes: each split goes to the task its middle byte falls in, so every task is within half a
    split (a quarter task at most, see ``make_splits``) of the even share."""
    if not splits:
        return [SplitPartition([], {})]
    if opts.max_records_per_partition:
        return [SplitPartition([s], aborted, opts.location, opts.fail_on_data_loss) for s in splits]
    total = sum(s.size for s in splits)
    count = task_count(total, opts)
    share = total / count if total else 1.0
    groups: list[list[Split]] = [[] for _ in range(count)]
    before = 0
    for split in splits:
        groups[min(count - 1, int((before + split.size / 2) // share))].append(split)
        before += split.size
    return [SplitPartition(g, aborted, opts.location, opts.fail_on_data_loss) for g in groups if g]


class KafkaLogDataSource(DataSource):
    """``format("kafkalog")``: Kafka log directories as DataFrames."""

    @classmethod
    def name(cls) -> str:
        return "kafkalog"

    def schema(self) -> str:
        opts = parse_read_options(self.options)
        return SCHEMA + (HEADERS if opts.include_headers else "")

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = parse_read_options(self.options)
        if _pushdown_enabled():
            return PushdownReader(opts)
        return KafkaLogReader(opts)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from kafkalog.spark.stream import KafkaLogStreamReader

        return KafkaLogStreamReader(parse_read_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from kafkalog.spark.writer import KafkaLogWriter, parse_write_options

        return KafkaLogWriter(parse_write_options(self.options), schema, overwrite)


class KafkaLogReader(DataSourceReader):
    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self.bounds: Bounds | None = None

    def partitions(self) -> list[InputPartition]:
        ranges = resolve_ranges(self.opts, self.bounds)
        splits = make_splits(ranges, self.opts)
        aborted: dict[str, list[tuple[int, int, int]]] = {}
        if self.opts.read_committed:
            for r in ranges:
                aborted[r.directory] = aborted_transactions(r.directory)
        return pack(splits, self.opts, aborted)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, SplitPartition)
        if self.opts.stats_dir is None:
            return partition.read(self.opts.include_headers)
        stats = ReadStats()
        return recorded(partition.read(self.opts.include_headers, stats), stats, self.opts.stats_dir)


class PushdownReader(KafkaLogReader):
    """The reader Spark gives filters to, when ``spark.sql.python.filterPushdown.enabled``."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        filters = list(filters)
        if self.opts.pushdown:  # pushdown=false: a real full scan, the filters left to Spark
            self.bounds = bounds_from_filters(filters)
        # Spark still evaluates every filter on the rows read: pruning only needs to be safe
        return filters


def _pushdown_enabled() -> bool:
    """Whether Spark will push filters to this reader.

    A reader that implements ``pushFilters`` fails at planning when
    ``spark.sql.python.filterPushdown.enabled`` is false, and the data source is not told the
    setting. PySpark asks for the reader from its filter-pushdown worker only when pushdown is
    on, and its planning worker holds the setting in a local of the caller (``enable_pushdown``):
    both are recognised here. Anywhere else (another PySpark), no pushdown: same rows.
    """
    frame = sys._getframe(1)
    for _ in range(8):
        if frame is None:
            break
        if str(frame.f_globals.get("__name__", "")).endswith("data_source_pushdown_filters"):
            return True
        value = frame.f_locals.get("enable_pushdown")
        if isinstance(value, bool):
            return value
        frame = frame.f_back  # type: ignore[assignment]
    return False


def register(spark: Any) -> None:
    """Make ``format("kafkalog")`` available in ``spark``."""
    spark.dataSource.register(KafkaLogDataSource)


__all__ = ["KafkaLogDataSource", "register"]

if "pyspark" not in sys.modules:  # pragma: no cover - imported without Spark
    raise ImportError("kafkalog.spark needs pyspark (pip install 'kafkalog[spark]')")
