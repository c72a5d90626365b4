"""Filter pushdown: the same rows with and without ``spark.sql.python.filterPushdown.enabled``,
on randomized queries over logs with out-of-order timestamps; and pruning that really prunes."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from kafkalog.log import Log, TopicConfig
from kafkalog.records import Record
from kafkalog.spark import register
from kafkalog.spark.options import parse_read_options
from kafkalog.spark.source import KafkaLogReader, PushdownReader
from pushdown_rows import CONF, rows_where, set_pushdown

T0 = 1_767_225_600_000


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pushdown") / "data"
    rng = random.Random(7)
    config = TopicConfig(segment_bytes=20_000, index_interval_bytes=512)
    for topic, parts in (("a", 3), ("b", 2)):
        for p in range(parts):
            with Log(root / f"{topic}-{p}", config) as log:
                ts = T0
                for i in range(0, 3000, 10):
                    batch = []
                    for j in range(10):
                        ts += rng.randint(0, 2000)
                        late = rng.random() < 0.05  # some records arrive out of order
                        stamp = ts - rng.randint(0, 60_000) if late else ts
                        batch.append(Record.of(b"v%d" % (i + j), b"k", stamp))
                    log.append_records(batch)
    return root


def _ts(ms: int) -> str:
    import datetime as dt

    return (
        "timestamp'"
        + dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
        + "'"
    )


def test_randomized_queries_samerows_where(pushdown: Any, data: Path) -> None:
    rng = random.Random(11)
    span = 3000 * 1000
    for _ in range(12):
        lo = T0 + rng.randint(0, span)
        hi = lo + rng.randint(1000, span // 4)
        o1 = rng.randint(0, 2500)
        clauses = [
            f"timestamp >= {_ts(lo)} and timestamp < {_ts(hi)}",
            f"offset > {o1} and offset <= {o1 + rng.randint(0, 400)}",
            f"partition in (0, 2) and timestamp > {_ts(lo)}",
            f"topic = 'b' and offset = {o1}",
            f"timestamp = {_ts(lo)} or offset < 3",
            f"partition >= 1 and timestamp <= {_ts(hi)} and topic in ('a', 'zzz')",
        ]
        where = rng.choice(clauses)
        assert rows_where(pushdown, data, where, True) == rows_where(
            pushdown, data, where, False
        ), where


def test_pruning_reads_less(pushdown: Any, data: Path) -> None:
    set_pushdown(pushdown, True)
    narrow = (
        pushdown.read.format("kafkalog")
        .option("path", str(data))
        .option("maxBytesPerSplit", "4000")
        .load()
        .where("topic = 'a' and partition = 1 and offset >= 1000 and offset < 1010")
    )
    wide = (
        pushdown.read.format("kafkalog")
        .option("path", str(data))
        .option("maxBytesPerSplit", "4000")
        .load()
    )
    assert narrow.rdd.getNumPartitions() <= 2 < wide.rdd.getNumPartitions()
    assert sorted(r.offset for r in narrow.collect()) == list(range(1000, 1010))


def test_timestamp_windows_skip_batches_exactly(pushdown: Any, data: Path, tmp_path: Path) -> None:
    """A timestamp window skips every batch its headers rule out, for both bounds: the rows
    of no pushdown, while the tasks yield a fraction of the topic's rows. The retired
    ``maxTimestampLatenessMs`` changes nothing (a lateness below the data's once lost rows)."""
    from kafkalog.spark.stats import collect

    lo, hi = T0 + 1_000_000, T0 + 1_100_000
    where = f"timestamp >= {_ts(lo)} and timestamp < {_ts(hi)}"
    exact = rows_where(pushdown, data, where, False)
    assert exact and rows_where(pushdown, data, where, True) == exact
    assert rows_where(pushdown, data, where, True, maxTimestampLatenessMs="1") == exact
    stats = tmp_path / "stats"
    rows_where(pushdown, data, where, True, statsDir=str(stats))
    yielded = collect(str(stats)).records
    assert len(exact) <= yielded < 3 * 3000 // 10, yielded  # of 15,000 rows in all


def test_register_follows_the_pushdown_setting(spark: Any, data: Path) -> None:
    """On: the filters reach the source, which plans fewer bytes; off: nothing is pushed (the
    same tasks as without the filter), the same rows. ``register`` learns the setting (PySpark
    tells a data source nothing of it) or sets it; ``pushdown=False`` reads without pushdown
    whatever the setting, without the planning error PySpark raises for a pushdown reader."""
    where = "topic = 'a' and partition = 1 and offset >= 1000 and offset < 1010"

    def frame() -> Any:
        reader = spark.read.format("kafkalog").option("path", str(data))
        return reader.option("maxBytesPerSplit", "4000").load()

    everything = frame().rdd.getNumPartitions()
    want = list(range(1000, 1010))
    for setting, pushed in ((True, True), (False, False)):
        set_pushdown(spark, setting)
        narrow = frame().where(where)
        tasks = narrow.rdd.getNumPartitions()
        assert (tasks <= 2 < everything) if pushed else tasks == everything
        assert sorted(r.offset for r in narrow.collect()) == want
    spark.conf.unset(CONF)
    register(spark, pushdown=True)
    assert spark.conf.get(CONF) == "true"
    assert frame().where(where).rdd.getNumPartitions() <= 2
    register(spark, pushdown=False)
    narrow = frame().where(where)
    assert narrow.rdd.getNumPartitions() == everything
    assert sorted(r.offset for r in narrow.collect()) == want


def test_pushed_filters_plan_fewer_bytes(data: Path) -> None:
    """The readers without Spark: the one Spark pushes filters to plans only the bytes the
    bounds allow; the other has no ``pushFilters`` of its own (PySpark's default keeps every
    filter), so PySpark never refuses it when pushdown is off."""
    from pyspark.sql.datasource import DataSourceReader, EqualTo, GreaterThanOrEqual, LessThan

    opts = parse_read_options({"path": str(data)})
    filters = [
        EqualTo(("topic",), "a"),
        EqualTo(("partition",), 1),
        GreaterThanOrEqual(("offset",), 1000),
        LessThan(("offset",), 1010),
    ]

    def planned(reader: Any) -> int:
        return sum(s.size for t in reader.partitions() for s in t.splits)

    pushing = PushdownReader(opts)
    assert list(pushing.pushFilters(filters)) == filters  # Spark still checks every row
    plain = KafkaLogReader(opts)
    assert type(plain).pushFilters is DataSourceReader.pushFilters
    assert 0 < planned(pushing) * 20 < planned(plain)


def test_pushdown_false_reads_everything_and_stats_dir_counts_what_tasks_read(
    spark: Any, data: Path, tmp_path: Path
) -> None:
    """``pushdown=false`` turns pushdown off for one query (a real full scan, Spark still
    filters), and ``statsDir`` sums what the tasks really read: every byte of every ``.log``
    for the full scan, a small part of them for the pushed query."""
    from kafkalog.spark.stats import collect

    where = "topic = 'a' and partition = 1 and offset >= 1000 and offset < 1010"
    total_bytes = sum(f.stat().st_size for f in data.glob("*/*.log"))
    total_records = 5 * 3000
    set_pushdown(spark, True)
    try:
        got = {}
        for pushdown in ("true", "false"):
            stats = tmp_path / pushdown
            df = (
                spark.read.format("kafkalog")
                .option("path", str(data))
                .option("pushdown", pushdown)
                .option("statsDir", str(stats))
                .load()
                .where(where)
            )
            assert sorted(r.offset for r in df.collect()) == list(range(1000, 1010))
            got[pushdown] = collect(str(stats))
        assert got["false"].bytes_read == total_bytes  # the whole topic, nothing skipped
        assert got["false"].records == total_records
        assert 0 < got["true"].bytes_read * 20 < total_bytes  # one partition's index seek
        assert got["true"].records == 10
        assert got["true"].segments >= 1
    finally:
        set_pushdown(spark, False)
        spark.conf.unset(CONF)


def test_pushdown_option_must_be_a_boolean(spark: Any, data: Path) -> None:
    from pyspark.errors import PySparkException

    reader = spark.read.format("kafkalog").option("path", str(data)).option("pushdown", "maybe")
    with pytest.raises(PySparkException, match="pushdown"):
        reader.load().count()


def test_capped_splits_read_only_their_own_bytes(spark: Any, data: Path, tmp_path: Path) -> None:
    """``maxRecordsPerPartition`` cuts a partition's offsets into tasks of at most that many;
    each task reads the bytes of its own offsets (through the log's read path), not its
    parent range's: the whole read is the log's bytes plus at most a batch per cut."""
    from kafkalog.spark.stats import collect

    total_bytes = sum(f.stat().st_size for f in data.glob("a-1/*.log"))
    stats = tmp_path / "capped"
    df = (
        spark.read.format("kafkalog")
        .option("path", str(data))
        .option("assign", '{"a": [1]}')
        .option("maxRecordsPerPartition", "300")
        .option("statsDir", str(stats))
        .option("batchSummaries", "false")  # else a count of batches checked before reads headers
        .load()
    )
    assert df.count() == 3000
    got = collect(str(stats))
    assert got.records == 3000
    assert total_bytes <= got.bytes_read < total_bytes * 1.2  # 10 tasks, not 10 times the log


def test_register_turns_pushdown_on_by_default(spark: Any, data: Path) -> None:
    """Once bounded reads are exact, pushdown is register's default: the setting PySpark needs
    is turned on, and a where on offset reads a small part of the topic with the same rows."""
    where = "topic = 'a' and partition = 1 and offset >= 1000 and offset < 1010"
    spark.conf.unset(CONF)
    register(spark)
    assert spark.conf.get(CONF) == "true"
    reader = spark.read.format("kafkalog").option("path", str(data))
    narrow = reader.option("maxBytesPerSplit", "4000").load().where(where)
    assert narrow.rdd.getNumPartitions() <= 2
    assert sorted(r.offset for r in narrow.collect()) == list(range(1000, 1010))
