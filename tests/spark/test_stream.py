"""``readStream.format("kafkalog")`` tails a directory being appended to; offsets, limits and
Trigger.AvailableNow behave as with Spark's Kafka source."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kafkalog.log import Log, TopicConfig
from kafkalog.records import Record

T0 = 1_767_225_600_000


def _append(directory: Path, start: int, n: int) -> None:
    with Log(directory, TopicConfig(segment_bytes=4000)) as log:
        for i in range(start, start + n):
            log.append_records([Record.of(b"v%d" % i, b"k", T0 + i)])


def test_available_now_reads_everything_then_new_data(spark: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    _append(data / "s-0", 0, 40)
    _append(data / "s-1", 0, 25)
    out = tmp_path / "out"
    checkpoint = tmp_path / "checkpoint"

    def run() -> None:
        query = (
            spark.readStream.format("kafkalog")
            .option("path", str(data))
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "20")
            .load()
            .selectExpr("partition", "offset", "cast(value as string) as value")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None

    run()
    rows = spark.read.parquet(str(out)).collect()
    assert sorted((r.partition, r.offset) for r in rows) == sorted(
        [(0, i) for i in range(40)] + [(1, i) for i in range(25)]
    )
    batches = len(list((checkpoint / "offsets").iterdir()))
    assert batches >= 4  # 65 records at most 20 per trigger
    _append(data / "s-0", 40, 10)  # the "broker" appends more
    run()
    rows = spark.read.parquet(str(out)).collect()
    assert len(rows) == 75 and {r.value for r in rows if r.partition == 0} == {
        f"v{i}" for i in range(50)
    }


def test_stream_starts_at_latest_by_default(spark: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    _append(data / "s-0", 0, 30)
    reader = spark.readStream.format("kafkalog").option("path", str(data)).load()
    query = (
        reader.writeStream.format("memory")
        .queryName("latest_default")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert spark.sql("select count(*) as n from latest_default").collect()[0].n == 0
