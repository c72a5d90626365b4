"""The Spark source over ``s3://`` URIs: the same DataFrames as over the local copy of the same
directories, with index seeks, read_committed and pushdown, planned on the driver and read by
Python workers that resolve the store again from the URI."""

from __future__ import annotations

import json
from typing import Any

import pytest

from provenance import FIXTURES
from pushdown_rows import set_pushdown

JAVA = "kafka-4.0-snapshot-javacode"
T0 = 1700000000000


def _rows(spark: Any, path: str, **options: str) -> list[tuple[Any, ...]]:
    reader = spark.read.format("kafkalog").option("path", path).option("includeHeaders", "true")
    for k, v in options.items():
        reader = reader.option(k, v)
    return sorted((tuple(r) for r in reader.load().collect()), key=lambda r: (r[2], r[3], r[4]))


@pytest.mark.parametrize(
    ("relative", "options"),
    [
        (JAVA, {}),
        (JAVA, {"subscribe": "v2-none", "startingTimestamp": str(T0 + 3000)}),
        (
            JAVA,
            {
                "subscribe": "v2-none",
                "startingOffsetsByTimestamp": json.dumps({"v2-none": {"0": T0 + 1002}}),
                "endingOffsetsByTimestamp": json.dumps({"v2-none": {"0": T0 + 2001}}),
            },
        ),
        (f"{JAVA}/v2-txn-0", {"isolationLevel": "read_committed"}),
        (f"{JAVA}/v2-txn-0", {"isolationLevel": "read_uncommitted"}),
        ("real-kraft-ronem123", {"minPartitions": "3"}),
        ("real-kafka2.8.0-zk-snappy-seanorth", {}),
    ],
)
def test_s3_reads_as_local(
    spark: Any, s3_store: Any, relative: str, options: dict[str, str]
) -> None:
    before = s3_store.listing()
    local = _rows(spark, str(FIXTURES / relative), **options)
    assert local, "every case reads some rows"
    assert _rows(spark, s3_store.uri(relative), **options) == local
    assert s3_store.listing() == before


def test_s3_read_with_pushed_filters(spark: Any, s3_store: Any) -> None:
    query = (
        "SELECT offset, timestamp FROM {t} WHERE timestamp >= timestamp_millis({lo}) "
        "AND timestamp < timestamp_millis({hi}) AND partition = 0"
    )
    local = spark.read.format("kafkalog").option("path", str(FIXTURES / JAVA)).load()
    remote = spark.read.format("kafkalog").option("path", s3_store.uri(JAVA)).load()
    local.createOrReplaceTempView("local_java")
    remote.createOrReplaceTempView("remote_java")
    for enabled in ("true", "false"):
        set_pushdown(spark, enabled == "true")
        try:
            got = {
                name: sorted(spark.sql(query.format(t=name, lo=T0 + 1000, hi=T0 + 3000)).collect())
                for name in ("local_java", "remote_java")
            }
        finally:
            set_pushdown(spark, False)
        assert got["local_java"] and got["remote_java"] == got["local_java"]


def test_s3_streaming_available_now(spark: Any, s3_store: Any, tmp_path: Any) -> None:
    def run(path: str, name: str) -> list[tuple[Any, ...]]:
        stream = (
            spark.readStream.format("kafkalog")
            .option("path", path)
            .option("startingOffsets", "earliest")
            .load()
        )
        query = (
            stream.writeStream.format("memory")
            .queryName(name)
            .option("checkpointLocation", str(tmp_path / name))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        rows = spark.sql(f"SELECT * FROM {name}").collect()
        return sorted((tuple(r) for r in rows), key=lambda r: (r[2], r[3], r[4]))

    local = run(str(FIXTURES / JAVA / "v2-none-0"), "stream_local")
    assert local and run(s3_store.uri(f"{JAVA}/v2-none-0"), "stream_s3") == local


def test_s3_unreachable_store_is_a_clear_error(spark: Any) -> None:
    uri = "s3://testing:testing@nobucket/d?endpoint_override=http://127.0.0.1:9&region=us-east-1"
    with pytest.raises(Exception, match=r"cannot stat s3://nobucket/d") as caught:
        spark.read.format("kafkalog").option("path", uri).load().count()
    assert "testing:testing" not in str(caught.value)  # no credentials in messages
