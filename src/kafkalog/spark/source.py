"""The PySpark data source ``kafkalog``: ``spark.read.format("kafkalog")`` over Kafka log
directories, with the schema and options of Spark's own Kafka source.

Register it with :func:`register` (or import ``pyspark_kafkalog``, which Spark finds on its own).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceWriter,
    Filter,
    InputPartition,
)
from pyspark.sql.types import StructType

from kafkalog.spark.columns import HEADERS, SCHEMA, Columns, choose_columns, full_schema
from kafkalog.spark.options import OptionError, ReadOptions, parse_read_options

if TYPE_CHECKING:
    from kafkalog.spark.pushdown import Bounds

# Each call Spark makes into this source runs in a Python worker that imports this module
# first: ``load()``'s schema needs the options alone, planning the log layer, the tasks the
# columnar decoder (numba). So the planner's and the tasks' modules are imported where they are
# used, and ``load()`` does not pay for them (bench/RESULTS.md, time to the first answer).

logger = logging.getLogger("kafkalog.spark")

#: the configuration that lets Spark push filters to a Python data source
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


class KafkaLogDataSource(DataSource):
    """``format("kafkalog")``: Kafka log directories as DataFrames (filters not pushed down)."""

    @classmethod
    def name(cls) -> str:
        return "kafkalog"

    def schema(self) -> str:
        # load(): the one call Spark makes before an action or start(), batch or stream alike.
        # Raised from this frame alone (see read_options); a comment on the raise line would
        # underline it with carets in the traceback the user reads.
        opts = read_options(self.options, streaming=None)
        if isinstance(opts, OptionError):
            raise opts
        problem = load_problem(opts)
        if problem is not None:
            raise problem
        return full_schema(opts.include_headers, opts.columns)

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = read_options(self.options, streaming=False)
        if isinstance(opts, OptionError):
            raise opts
        return KafkaLogReader(opts, choose_columns(schema, opts.include_headers))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from kafkalog.spark.stream import KafkaLogStreamReader, RefusedStreamReader

        opts = read_options(self.options, streaming=True)
        if isinstance(opts, OptionError):
            return RefusedStreamReader(opts)
        return KafkaLogStreamReader(opts, choose_columns(schema, opts.include_headers))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from kafkalog.spark.writer import KafkaLogWriter, parse_write_options

        refused: OptionError | None = None
        try:
            return KafkaLogWriter(parse_write_options(self.options), schema, overwrite)
        except OptionError as problem:
            # as read_options: a write's refusal (no topic, a wrong column type, a partition
            # directory as path) followed 5 to 8 traceback lines through the writer's checks
            refused = problem.with_traceback(None)
        raise refused


def read_options(options: Any, *, streaming: bool | None) -> ReadOptions | OptionError:
    """The options parsed, or their :class:`OptionError` stripped of its traceback, for the
    method Spark called to raise (``raise`` there puts that one frame in front of it).

    PySpark hands a data source's exception to the user as its Python traceback after Spark's
    prefix (``[PYTHON_DATA_SOURCE_ERROR] Failed to create Python data source instance:``); a
    traceback through the option parser put 8 to 17 lines before kafkalog's message. Raised
    from the method Spark called, the message follows a two-line traceback, and with
    ``spark.sql.execution.pyspark.udf.hideTraceback.enabled`` Spark's prefix alone.
    """
    try:
        return parse_read_options(options, streaming=streaming)
    except OptionError as problem:
        return problem.with_traceback(None)


def load_problem(opts: ReadOptions) -> OptionError | None:
    """What ``load()`` finds wrong with the directory the options name (a missing path, one
    holding no Kafka partitions, an unknown topic or partition, an incomplete offsets JSON;
    ``selection.check_at_load``), stripped of its traceback as :func:`read_options` does."""
    from kafkalog.spark.selection import check_at_load

    try:
        check_at_load(opts)
    except OptionError as problem:
        return problem.with_traceback(None)
    return None


class KafkaLogPushdownSource(KafkaLogDataSource):
    """``format("kafkalog")`` for a session with ``spark.sql.python.filterPushdown.enabled``:
    its batch reader takes Spark's filters (PySpark refuses, at planning, a reader that
    implements ``pushFilters`` while that setting is off, so the two are separate classes and
    :func:`register` picks one)."""

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = read_options(self.options, streaming=False)
        if isinstance(opts, OptionError):
            raise opts
        return PushdownReader(opts, choose_columns(schema, opts.include_headers))


class KafkaLogReader(DataSourceReader):
    def __init__(self, opts: ReadOptions, columns: Columns | None = None) -> None:
        self.opts = opts
        self.columns = columns
        self.bounds: Bounds | None = None

    def partitions(self) -> list[InputPartition]:
        from kafkalog.spark.partitions import pack
        from kafkalog.spark.plan import plan_read, task_timestamps

        splits, aborted = plan_read(self.opts, self.bounds)
        return pack(splits, self.opts, aborted, task_timestamps(self.bounds))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from kafkalog.spark.partitions import SplitPartition
        from kafkalog.spark.stats import ReadStats, recorded

        assert isinstance(partition, SplitPartition)
        if self.opts.stats_dir is None:
            return partition.read(self.opts.include_headers, self.columns)
        stats = ReadStats()
        rows = partition.read(self.opts.include_headers, self.columns, stats)
        return recorded(rows, stats, self.opts.stats_dir)


class PushdownReader(KafkaLogReader):
    """The reader Spark gives filters to (only when ``spark.sql.python.filterPushdown.enabled``,
    as PySpark documents for ``DataSourceReader.pushFilters``)."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        from kafkalog.spark.pushdown import bounds_from_filters

        filters = list(filters)
        if self.opts.pushdown:  # pushdown=false: a real full scan, the filters left to Spark
            self.bounds = bounds_from_filters(filters)
        # Spark still evaluates every filter on the rows read: pruning only needs to be safe
        return filters


def register(spark: Any, *, pushdown: bool = True) -> None:
    """Make ``format("kafkalog")`` available in ``spark``, with filter pushdown.

    Filters reach a Python data source only when the session's
    ``spark.sql.python.filterPushdown.enabled`` is true (PySpark's default is false), so this
    turns it on: ``where`` filters on timestamp, offset, partition and topic then prune what is
    read through the indexes (exactly: every filter is still evaluated by Spark on the rows
    read, and bounded reads equal full scans filtered, tests/test_read_path_differential.py).
    ``pushdown=False`` registers the source without pushdown and leaves the setting as it is;
    the ``pushdown=false`` option turns it off for one query."""
    if pushdown:
        spark.conf.set(PUSHDOWN_CONF, "true")
    from kafkalog.spark.jvm_path import use_jvm

    chosen = KafkaLogPushdownSource if pushdown else KafkaLogDataSource
    spark.conf.set(PUSHDOWN_USED_CONF, "true" if pushdown else "false")  # the JVM source's
    first = not _python_sources_seen
    sources = _python_sources(spark, chosen)
    spark.conf.set(PATH_USED_CONF, use_jvm(spark, sources, alongside_jar=first))


_python_sources_seen = False


def _python_sources(spark: Any, chosen: type[DataSource]) -> Callable[[bool], None]:
    """The Python sources' registration, told whether the JVM source goes in front, for
    :func:`~kafkalog.spark.jvm_path.use_jvm` to run alongside ``ADD JAR`` the first time in
    this interpreter: Spark's first Python data source registration starts a Python worker to
    look up installed ``pyspark_*`` sources (~1-2 s that Parquet never pays), which then
    overlaps the first ``spark.sql`` (``ADD JAR``, the SQL parser's start). Later calls
    register on the calling thread, before ``ADD JAR``, as before."""
    global _python_sources_seen
    _python_sources_seen = True

    def run(jvm: bool) -> None:
        _register_python(spark, _behind_jvm(chosen) if jvm else chosen)
        spark.dataSource.register(_python_named(chosen))

    return run


#: whether the JVM source takes Spark's filters: ``register``'s ``pushdown``, as the Python one
PUSHDOWN_USED_CONF = "spark.kafkalog.pushdown"


#: which source ``register`` left in front of ``format("kafkalog")``: "jvm" or "python"
PATH_USED_CONF = "spark.kafkalog.pathInUse"


def path_in_use(spark: Any) -> str:
    """``"jvm"`` when :func:`register` put the JVM source in front of ``format("kafkalog")``
    (batch reads and streams on the calling thread), else ``"python"``."""
    return str(spark.conf.get(PATH_USED_CONF, "python"))


def _register_python(spark: Any, source: type[DataSource]) -> None:
    """``format("kafkalog")`` as the Python source, where no JVM source of that name is seen
    (Spark refuses the name once the jar is on this thread's class loader: it is registered
    before the jar is added, and stays registered for the threads that do not see the jar)."""
    try:
        spark.dataSource.register(source)
    except Exception as problem:
        if "DATA_SOURCE_ALREADY_EXISTS" not in str(problem):
            raise


class KafkaLogPythonSource(KafkaLogDataSource):
    """The Python source under the name ``kafkalog_python``: the JVM source hands writes to it,
    and a user can read through the Python source on purpose."""

    @classmethod
    def name(cls) -> str:
        return "kafkalog_python"


class KafkaLogPythonPushdownSource(KafkaLogPushdownSource):
    """:class:`KafkaLogPythonSource` with filter pushdown."""

    @classmethod
    def name(cls) -> str:
        return "kafkalog_python"


#: said (once per process) by the Python source when it serves ``format("kafkalog")`` behind
#: the JVM source, i.e. on a thread that does not see the jar
BEHIND_JVM = (
    "kafkalog: format('kafkalog') is read through the Python source, not the JVM one: "
    "kafkalog.spark.register added the jar with ADD JAR, which Spark applies to the calling "
    "thread only, and this query came from another thread; call kafkalog.spark.register(spark) "
    "on that thread too, or build the session with the jar in spark.jars "
    "(python -m kafkalog.spark.jar prints its path)"
)
_behind_jvm_said = False


def _say_behind_jvm() -> None:
    global _behind_jvm_said
    if not _behind_jvm_said:
        _behind_jvm_said = True
        logger.warning(BEHIND_JVM)


class _ServesBehindJvm(DataSource):
    """What ``format("kafkalog")``'s Python source adds where :func:`register` put the JVM
    source in front of it: Spark looks the JVM source up on the calling thread's class loader,
    which sees the jar only on threads that ran ``ADD JAR``; a read from any other thread
    reaches this source (same rows, slower), and it says so once (:data:`BEHIND_JVM`)."""

    def reader(self, schema: StructType) -> DataSourceReader:
        _say_behind_jvm()
        return super().reader(schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        _say_behind_jvm()
        return super().streamReader(schema)


class KafkaLogBehindJvmSource(_ServesBehindJvm, KafkaLogDataSource):
    """:class:`KafkaLogDataSource` behind the JVM source."""


class KafkaLogBehindJvmPushdownSource(_ServesBehindJvm, KafkaLogPushdownSource):
    """:class:`KafkaLogPushdownSource` behind the JVM source."""


def _behind_jvm(source: type[DataSource]) -> type[DataSource]:
    if source is KafkaLogPushdownSource:
        return KafkaLogBehindJvmPushdownSource
    return KafkaLogBehindJvmSource


def _python_named(source: type[DataSource]) -> type[DataSource]:
    if source is KafkaLogPushdownSource:
        return KafkaLogPythonPushdownSource
    return KafkaLogPythonSource


__all__ = [
    "HEADERS",
    "SCHEMA",
    "KafkaLogDataSource",
    "KafkaLogPushdownSource",
    "path_in_use",
    "register",
]

if "pyspark" not in sys.modules:  # pragma: no cover - imported without Spark
    raise ImportError("kafkalog.spark needs pyspark (pip install 'kafkalog[spark]')")
