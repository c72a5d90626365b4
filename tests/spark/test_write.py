"""``df.write.format("kafkalog")``: valid Kafka partitions, read back by us and by independent
decoders; Kafka's key partitioning; appends continue offsets; a failed job leaves nothing."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from aiokafka.record.memory_records import MemoryRecords as AioMemoryRecords
from kafka.partitioner.default import murmur2 as kafka_murmur2
from kafka.record.memory_records import MemoryRecords

from kafkalog.index import OffsetIndex, TimeIndex
from kafkalog.log import Log

T0 = 1_700_000_000_000


def _frame(spark: Any, n: int, *, headers: bool = False) -> Any:
    cols = [
        "cast(concat('key-', id % 13) as binary) as key",
        "cast(concat('value-', id) as binary) as value",
        f"timestamp_millis({T0} + id) as timestamp",
    ]
    if headers:
        cols.append("array(named_struct('key', 'h', 'value', cast(id as string))) as headers")
    return spark.range(0, n, numPartitions=3).selectExpr(*cols)


def _write(df: Any, path: Path, **options: str) -> None:
    writer = df.write.format("kafkalog").option("path", str(path)).mode("append")
    for k, v in options.items():
        writer = writer.option(k, v)
    writer.save()


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_round_trip_and_independent_decoders(spark: Any, tmp_path: Path, codec: str) -> None:
    data = tmp_path / "data"
    _write(
        _frame(spark, 3000, headers=True),
        data,
        topic="events",
        numPartitions="3",
        compression=codec,
        **{"segment.bytes": "20000", "index.interval.bytes": "1000"},
    )
    assert not (tmp_path / "data.kafkalog-staging").exists()
    back = (
        spark.read.format("kafkalog")
        .option("path", str(data))
        .option("includeHeaders", "true")
        .load()
        .collect()
    )
    assert len(back) == 3000
    seen = sorted((r.value, r.key, r.headers[0].value) for r in back)
    assert seen == sorted(
        (f"value-{i}".encode(), f"key-{i % 13}".encode(), str(i).encode()) for i in range(3000)
    )
    for r in back:  # the Java producer's default partitioner placed every key
        assert r.partition == (kafka_murmur2(bytearray(r.key)) & 0x7FFFFFFF) % 3
    for p in range(3):
        directory = data / f"events-{p}"
        log = Log(directory, writable=False)
        offsets = [rec.offset for rec in log.records()]
        assert offsets == list(range(len(offsets)))  # contiguous from 0
        for seg in log.segments:
            with OffsetIndex(seg.offset_index.path, seg.base_offset, writable=False) as ix:
                ix.sanity_check()
            with TimeIndex(seg.time_index.path, seg.base_offset, writable=False) as tx:
                tx.sanity_check()
            raw = Path(seg.log.path).read_bytes()
            decoded = MemoryRecords(raw)  # kafka-python reads our segment files
            theirs = []
            while (batch := decoded.next_batch()) is not None:
                assert batch.validate_crc()
                theirs.extend((r.offset, bytes(r.value)) for r in batch)
            ours = [(r.offset, r.value) for e in seg.entries(0) for r in e.records()]
            assert theirs == ours and ours
            aio = AioMemoryRecords(raw)  # and aiokafka (its C extension)
            theirs_aio = []
            while (batch := aio.next_batch()) is not None:
                assert batch.validate_crc()
                theirs_aio.extend((r.offset, bytes(r.value)) for r in batch)
            assert theirs_aio == ours
        log.close()
        assert (directory / "partition.metadata").exists()
        assert (directory / "leader-epoch-checkpoint").read_text().startswith("0\n")
    assert (data / "recovery-point-offset-checkpoint").exists()


def test_append_continues_offsets(spark: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    _write(_frame(spark, 500), data, topic="t")
    _write(_frame(spark, 700), data, topic="t")
    log = Log(data / "t-0", writable=False)
    assert [r.offset for r in log.records()] == list(range(1200))
    log.close()


def test_topic_and_partition_columns(spark: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    df = spark.range(0, 100).selectExpr(
        "cast(id as string) as value",
        "case when id % 2 = 0 then 'even' else 'odd' end as topic",
        "cast(id % 2 as int) as partition",
    )
    _write(df, data, numPartitions="2")
    rows = spark.read.format("kafkalog").option("path", str(data)).load().collect()
    assert {(r.topic, r.partition) for r in rows} == {("even", 0), ("odd", 1)}
    assert len(rows) == 100
    assert sorted(os.listdir(data / "even-1")) != []  # new topics get all their partitions


def test_failed_job_leaves_nothing(spark: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    data = tmp_path / "data"
    _write(_frame(spark, 50), data, topic="t")
    bad = _frame(spark, 1000).withColumn(
        "value",
        F.when(F.col("value") == F.lit(b"value-777"), F.raise_error("boom")).otherwise(
            F.col("value")
        ),
    )
    with pytest.raises(Exception, match="boom"):
        _write(bad, data, topic="t")
    log = Log(data / "t-0", writable=False)
    assert log.log_end_offset == 50
    log.close()
    staging = tmp_path / "data.kafkalog-staging"
    assert not staging.exists() or not any(staging.rglob("*.batches"))


def test_locked_directory_refused(spark: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    _write(_frame(spark, 10), data, topic="t")
    holder = Log(data / "t-0")  # another writer holds the partition
    try:
        with pytest.raises(Exception, match=r"(?i)lock"):
            _write(_frame(spark, 10), data, topic="t")
    finally:
        holder.close()
    log = Log(data / "t-0", writable=False)
    assert log.log_end_offset == 10
    log.close()


def test_write_option_errors(spark: Any, tmp_path: Path) -> None:
    df = _frame(spark, 5)
    for options, message in [
        ({"bogus": "1", "topic": "t"}, "unknown option 'bogus'"),
        ({"topik": "t"}, "unknown option 'topik' for writing format kafkalog: did you mean topic"),
        ({"topic": "t", "segment.byte": "5"}, "did you mean segment.bytes"),
        ({"topic": "t", "compression": "brotli"}, "compression"),
        ({"topic": "t", "segment.bytes": "5"}, "segment.bytes"),
        ({}, "option topic or a 'topic' column"),
        ({"topic": "t", "kafka.value.serializer": "x"}, "kafka.value.serializer is not supported"),
        (
            {"topic": "t", "compression": "lz4", "kafka.compression.type": "zstd"},
            "compression and kafka.compression.type contradict",
        ),
    ]:
        with pytest.raises(Exception, match=message):
            _write(df, tmp_path / "x", **options)


def test_a_partition_directory_as_path_is_refused_before_anything_is_written(
    spark: Any, tmp_path: Path
) -> None:
    """A newcomer points ``path`` at the partition just written (``data/t-0``) to add to it:
    the writer would nest a topic and the data directory's root files inside the partition.
    Refused on the driver, naming the data directory to give instead; nothing changes."""
    data = tmp_path / "data"
    _write(_frame(spark, 5), data, topic="t")
    before = sorted(p.name for p in (data / "t-0").iterdir())
    with pytest.raises(Exception, match="is a partition directory") as caught:
        _write(_frame(spark, 5), data / "t-0", topic="t")
    assert f"write into its data directory, {data}" in str(caught.value)
    assert sorted(p.name for p in (data / "t-0").iterdir()) == before
    assert not (tmp_path / "data" / "t-0.kafkalog-staging").exists()


def test_a_new_partition_name_in_a_data_directory_as_path_is_refused(
    spark: Any, tmp_path: Path
) -> None:
    """``path`` at ``data/t-1``, not made yet, beside the data directory's checkpoints: the job
    made a data directory inside it, which a read of ``data`` took for an empty partition t-1
    (its rows never seen). Refused on the driver, naming the data directory; nothing is made."""
    data = tmp_path / "data"
    _write(_frame(spark, 5), data, topic="t")
    before = sorted(p.name for p in data.iterdir())
    with pytest.raises(Exception, match="names a partition directory of the data directory"):
        _write(_frame(spark, 5), data / "t-1", topic="t")
    assert sorted(p.name for p in data.iterdir()) == before
    _write(_frame(spark, 5), tmp_path / "data-0", topic="t")  # a name alone is not refused
    assert (tmp_path / "data-0" / "t-0").is_dir()


def test_producer_options_of_spark_code_are_taken(spark: Any, tmp_path: Path) -> None:
    """Code written for Spark's Kafka sink carries producer settings: they are taken (there is no
    broker), and kafka.compression.type compresses as the option compression does."""
    from kafkalog.records import LogReader

    data = tmp_path / "data"
    options = {
        "topic": "t",
        "kafka.bootstrap.servers": "broker:9092",
        "kafka.acks": "all",
        "kafka.compression.type": "zstd",
    }
    _write(_frame(spark, 50), data, **options)
    log = Log(data / "t-0", writable=False)
    codecs = {e.compression.label for s in log.segments for e in LogReader.open(s.log.path)}
    assert codecs == {"zstd"} and log.log_end_offset == 50
    log.close()


def test_file_uris_for_path_and_remote_writes_refused(spark: Any, tmp_path: Path) -> None:
    data = tmp_path / "data dir"  # percent-encoded in the URI
    df = _frame(spark, 300)
    df.write.format("kafkalog").mode("append").option("path", data.as_uri()).option(
        "topic", "t"
    ).save()
    by_uri = spark.read.format("kafkalog").option("path", data.as_uri()).load()
    by_path = spark.read.format("kafkalog").option("path", str(data)).load()
    assert sorted(r.offset for r in by_uri.select("offset").collect()) == list(range(300))
    assert by_uri.orderBy("offset").collect() == by_path.orderBy("offset").collect()
    assert not (tmp_path / "data dir.kafkalog-staging").exists() or not any(
        (tmp_path / "data dir.kafkalog-staging").iterdir()
    )
    with pytest.raises(Exception, match=r"option path='nosuch://b/d': .*pyarrow.fs resolves"):
        spark.read.format("kafkalog").option("path", "nosuch://b/d").load().collect()
    with pytest.raises(Exception, match=r"option path='gs://b/d': writing to gs:// is not"):
        df.write.format("kafkalog").mode("append").option("path", "gs://b/d").option(
            "topic", "t"
        ).save()


def test_input_column_types_checked_on_the_driver(spark: Any, tmp_path: Path) -> None:
    """Spark's Kafka sink takes key/value as string or binary, partition as int, topic as
    string; anything else is refused before a task runs, naming the column and its type."""
    for select, message in [
        ("1 as key, 'x' as value", r"column 'key' must be string or binary.*not int"),
        ("1 as value", r"column 'value' must be string or binary.*not int"),
        ("'x' as value, cast(0 as bigint) as partition", r"column 'partition' must be int"),
        ("'x' as value, 'not a time' as timestamp", r"column 'timestamp' must be timestamp"),
        ("'x' as value, array('h') as headers", r"column 'headers' must be array<struct"),
        ("'x' as Value", r"a 'value' column is required"),  # names match exactly, as in Spark
    ]:
        with pytest.raises(Exception, match=message):
            _write(spark.sql(f"select {select}"), tmp_path / "x", topic="t")
    assert not (tmp_path / "x").exists()
    # extra columns are ignored, as the sink ignores them
    _write(spark.sql("select 'x' as value, 42 as extra"), tmp_path / "y", topic="t")
    assert [
        r.value
        for r in spark.read.format("kafkalog").option("path", str(tmp_path / "y")).load().collect()
    ] == [b"x"]


def test_illegal_topic_names_refused_and_nothing_written_outside(
    spark: Any, tmp_path: Path
) -> None:
    """A topic name is a directory name: Kafka's rules (letters, digits, '.', '_', '-', at
    most 249, not '.' or '..') also keep '../x' from writing outside the data directory."""
    data = tmp_path / "data"
    for topic in ["../evil", "a/b", "..", "", "x" * 250, "sp ace"]:
        with pytest.raises(Exception, match=r"option topic: topic name .* is illegal"):
            _write(spark.sql("select 'x' as value"), data, topic=topic)
    with pytest.raises(Exception, match=r"topic name '\.\./evil' is illegal"):
        _write(spark.sql("select 'x' as value, '../evil' as topic"), data)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no data dir, no staging, no evil-0
    legal = "Legal.topic_name-1"
    _write(spark.sql(f"select 'x' as value, '{legal}' as topic"), data)
    assert os.listdir(data / f"{legal}-0")


def test_null_partitions_go_by_key_like_the_producer(spark: Any, tmp_path: Path) -> None:
    """A row whose partition is null is placed by Kafka's partitioner (murmur2 of its key), as
    Spark's Kafka sink hands it to the producer; the other rows keep their given partition."""
    data = tmp_path / "data"
    rows = [(f"k{i}", f"v{i}", (i % 4 if i % 3 else None)) for i in range(60)]
    df = spark.createDataFrame(rows, "key string, value string, partition int").coalesce(1)
    _write(df, data, topic="t", numPartitions="4")
    got = {
        r.value.decode(): r.partition
        for r in spark.read.format("kafkalog").option("path", str(data)).load().collect()
    }
    for key, value, partition in rows:
        want = (
            partition if partition is not None else (kafka_murmur2(key.encode()) & 0x7FFFFFFF) % 4
        )
        assert got[value] == want, (key, partition)


@pytest.mark.parametrize(
    ("columns", "options", "said"),
    [
        (["key", "value"], {}, "give option topic or a 'topic' column"),
        (["key", "length(value) as value"], {"topic": "t"}, "column 'value' must be string or bin"),
    ],
)
def test_a_refused_write_says_why_after_one_traceback_frame(
    spark: Any, tmp_path: Path, columns: list[str], options: dict[str, str], said: str
) -> None:
    """A write's refusal followed a traceback through the writer's checks (5 to 8 lines
    before the message); it now has the one frame of the method Spark called, as a read's."""
    from pyspark.errors import PySparkException

    frame = _frame(spark, 3).selectExpr(*columns)
    with pytest.raises(PySparkException) as caught:
        _write(frame, tmp_path / "data", **options)
    worker = str(caught.value.getMessageParameters()["msg"]).strip().splitlines()
    assert worker[-1].startswith("kafkalog.spark.options.OptionError: ") and said in worker[-1]
    assert len([line for line in worker if line.startswith("  File ")]) <= 1, worker
    assert not (tmp_path / "data").exists()
