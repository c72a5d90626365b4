"""A schema the user gives (``.schema("offset long, timestamp timestamp")``) reads only those
columns, the same rows as the whole read, in batch, streaming and pushed-down reads; keys and
values not asked for are never copied; any other schema is refused naming the columns allowed."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from kafkalog.errors import CorruptRecordError
from kafkalog.log import Log, TopicConfig
from kafkalog.records import Record, decode_range
from kafkalog.spark.columns import choose_columns
from kafkalog.spark.options import OptionError, parse_read_options
from kafkalog.spark.partitions import pack
from kafkalog.spark.plan import plan_read
from provenance import FIXTURES
from pushdown_rows import set_pushdown

JAVA = FIXTURES / "kafka-4.0-snapshot-javacode"
T0 = 1_767_225_600_000
VALUE = b"x" * 200


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("columns") / "data"
    config = TopicConfig(segment_bytes=30_000, index_interval_bytes=1024)
    for p in range(2):
        with Log(root / f"t-{p}", config) as log:
            for i in range(0, 2000, 20):
                log.append_records(
                    [Record.of(VALUE, b"key-%d" % (i + j), T0 + 1000 * (i + j)) for j in range(20)]
                )
    return root


def _full(spark: Any, path: Path, *columns: str, **options: str) -> list[tuple[Any, ...]]:
    reader = spark.read.format("kafkalog").option("path", str(path)).options(**options)
    return _sorted(reader.load().select(*columns).collect())


def _sorted(rows: Any) -> list[tuple[Any, ...]]:
    return sorted((tuple(r) for r in rows), key=repr)


def test_subset_schema_reads_those_columns_as_the_whole_read(spark: Any, data: Path) -> None:
    df = spark.read.format("kafkalog").schema("offset long, timestamp timestamp")
    df = df.option("path", str(data)).load()
    assert df.columns == ["offset", "timestamp"]
    got = _sorted(df.collect())
    assert got == _full(spark, data, "offset", "timestamp")
    assert len(got) == 4000


def test_subset_in_any_order_and_case(spark: Any, data: Path) -> None:
    schema = "Timestamp timestamp, PARTITION int, key binary, topic string"
    df = spark.read.format("kafkalog").schema(schema).option("path", str(data)).load()
    assert df.columns == ["Timestamp", "PARTITION", "key", "topic"]
    got = _sorted(df.collect())
    assert got == _full(spark, data, "timestamp", "partition", "key", "topic")


def test_subset_on_fixtures_with_every_codec_and_transactions(spark: Any) -> None:
    for options in ({}, {"isolationLevel": "read_committed"}):
        df = spark.read.format("kafkalog").schema("value binary, offset long, timestampType int")
        got = _sorted(df.options(path=str(JAVA), **options).load().collect())
        assert got == _full(spark, JAVA, "value", "offset", "timestampType", **options)
        assert got


def test_headers_in_a_subset(spark: Any) -> None:
    schema = "offset long, headers array<struct<key:string,value:binary>>"
    df = spark.read.format("kafkalog").schema(schema).option("includeHeaders", "true")
    got = _sorted(df.option("path", str(JAVA)).load().collect())
    assert got == _full(spark, JAVA, "offset", "headers", includeHeaders="true")
    assert any(h for _, h in got)


def test_subset_with_pushed_filters(spark: Any, data: Path) -> None:
    lo = dt.datetime.fromtimestamp((T0 + 500_000) / 1000, dt.UTC)
    where = f"timestamp >= timestamp'{lo:%Y-%m-%d %H:%M:%S}' and partition = 1"
    expected = [
        (r.offset, r.timestamp)
        for r in spark.read.format("kafkalog").option("path", str(data)).load().collect()
        if r.partition == 1 and r.timestamp >= lo.replace(tzinfo=None)
    ]
    for enabled in (True, False):
        set_pushdown(spark, enabled)
        df = spark.read.format("kafkalog").schema("offset long, timestamp timestamp, partition int")
        rows = df.option("path", str(data)).load().where(where).select("offset", "timestamp")
        assert _sorted(rows.collect()) == _sorted(expected)


def test_subset_in_a_stream(spark: Any, data: Path, tmp_path: Path) -> None:
    query = (
        spark.readStream.format("kafkalog")
        .schema("partition int, offset long")
        .option("path", str(data))
        .option("startingOffsets", "earliest")
        .load()
        .writeStream.format("memory")
        .queryName("kafkalog_columns_stream")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    got = _sorted(spark.sql("select * from kafkalog_columns_stream").collect())
    assert got == _full(spark, data, "partition", "offset")


@pytest.mark.parametrize(
    ("schema", "complaint"),
    [
        ("offset long, payload binary", "unknown column 'payload'"),
        ("offset int", "column 'offset' has type int, not bigint"),
        ("timestamp timestamp_ntz", "column 'timestamp' has type timestamp_ntz, not timestamp"),
        ("offset long, OFFSET long", "column 'OFFSET' given twice"),
        ("headers array<struct<key:string,value:binary>>", "unknown column 'headers'"),
    ],
)
def test_other_schemas_are_refused_naming_the_columns(
    spark: Any, data: Path, schema: str, complaint: str
) -> None:
    df = spark.read.format("kafkalog").schema(schema).option("path", str(data)).load()
    with pytest.raises(Exception, match="Allowed: key binary, value binary") as info:
        df.collect()
    assert complaint in str(info.value)


def test_choose_columns_without_spark() -> None:
    schema = StructType([StructField("ts", TimestampType()), StructField("offset", LongType())])
    with pytest.raises(OptionError, match="unknown column 'ts'"):
        choose_columns(schema, include_headers=False)
    schema = StructType([StructField("topic", StringType()), StructField("Offset", LongType())])
    assert choose_columns(schema, include_headers=False).fields == (
        ("topic", "topic"),
        ("Offset", "offset"),
    )
    assert [s for _, s in choose_columns(None, include_headers=True).fields][-1] == "headers"


def test_keys_and_values_not_asked_for_are_not_copied(data: Path) -> None:
    """What a task allocates: with only offset and timestamp, 16 bytes a record at most (the
    two columns), never the 200-byte values."""
    opts = parse_read_options({"path": str(data)})
    splits, _ = plan_read(opts)
    (task,) = pack(splits, opts, {})
    subset = choose_columns(
        StructType([StructField("offset", LongType()), StructField("timestamp", TimestampType())]),
        include_headers=False,
    )
    for columns, at_least, at_most in ((subset, 16, 17), (None, 16 + len(VALUE), 1000)):
        pool_before = pa.total_allocated_bytes()
        batches = list(task.read(False, columns))
        held = pa.total_allocated_bytes() - pool_before
        rows = sum(b.num_rows for b in batches)
        assert rows == 4000
        assert at_least * rows <= sum(b.nbytes for b in batches) <= at_most * rows
        assert held <= at_most * rows + 4096 * len(batches), (columns, held)
        if columns is not None:
            assert all(b.schema.names == ["offset", "timestamp"] for b in batches)


def test_decode_range_columns_checks_what_it_skips() -> None:
    """Skipped keys and values are still bounds-checked: a corrupt key length is an error."""
    from kafkalog.records import encode_batch

    data = bytearray(encode_batch([Record.of(b"value", b"key", T0)], base_offset=0))
    whole = decode_range(bytes(data), columns=("offset",))
    assert whole.batch.schema.names == ["offset"]
    assert whole.batch.column("offset").to_pylist() == [0]
    with pytest.raises(ValueError, match="unknown column"):
        decode_range(bytes(data), columns=("offset", "nope"))
    # record: length, attributes, timestamp delta, offset delta, then the key's length (3: 0x06)
    assert data[65] == 0x06
    data[65] = 0x7E  # 63: past the record's end
    for columns in (("offset",), None):
        with pytest.raises(CorruptRecordError, match="invalid key length"):
            decode_range(bytes(data), columns=columns, verify_crc=False)


def test_the_columns_option_reads_only_those_columns(spark: Any, tmp_path: Path) -> None:
    """``columns`` is ``.schema(...)`` by name: the source declares only those columns (Spark
    cannot prune a Python source's), in the order given; unknown names are refused at load."""
    from pyspark.errors import PySparkException

    directory = tmp_path / "narrow-0"
    with Log(directory) as log:
        log.append_records(
            [Record.of(b"v%d" % i, key=b"k", timestamp=1_700_000_000_000 + i) for i in range(50)]
        )
    df = (
        spark.read.format("kafkalog")
        .option("path", str(tmp_path))
        .option("columns", "offset, Timestamp,value")
        .load()
    )
    assert df.columns == ["offset", "timestamp", "value"]
    rows = df.orderBy("offset").collect()
    assert [(r.offset, bytes(r.value)) for r in rows] == [(i, b"v%d" % i) for i in range(50)]
    with pytest.raises(PySparkException, match="unknown column 'nope'"):
        spark.read.format("kafkalog").option("path", str(tmp_path)).option(
            "columns", "offset,nope"
        ).load()
