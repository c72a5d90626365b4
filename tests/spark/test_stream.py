"""``readStream.format("kafkalog")`` tails a directory being appended to; offsets, limits and
Trigger.AvailableNow behave as with Spark's Kafka source."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from kafkalog.log import Log, TopicConfig
from kafkalog.records import Record

T0 = 1_767_225_600_000


def _append(directory: Path, start: int, n: int) -> None:
    with Log(directory, TopicConfig(segment_bytes=4000)) as log:
        for i in range(start, start + n):
            log.append_records([Record.of(b"v%d" % i, b"k", T0 + i)])


def _run_available_now(
    spark: Any,
    data: Path,
    out: Path,
    checkpoint: Path,
    columns: tuple[str, ...] = ("partition", "offset"),
    **options: str,
) -> None:
    """One Trigger.AvailableNow run of a stream over ``data`` into Parquet files in ``out``."""
    reader = spark.readStream.format("kafkalog").option("path", str(data))
    for k, v in options.items():
        reader = reader.option(k, v)
    query = (
        reader.load()
        .selectExpr(*columns)
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None


def _available_now(spark: Any, data: Path, checkpoint: Path, name: str, **options: str) -> Any:
    """(partition, offset) of every row one run reads, written beside ``checkpoint`` (a memory
    sink cannot resume from a checkpoint)."""
    out = checkpoint.parent / f"out-{name}"
    _run_available_now(spark, data, out, checkpoint, **options)
    parts = sorted(out.glob("part-*.parquet"))  # the files, not the sink's log of another run
    if not parts:
        return []
    rows = spark.read.parquet(*map(str, parts)).collect()
    return sorted((r.partition, r.offset) for r in rows)


def test_available_now_reads_everything_then_new_data(spark: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    _append(data / "s-0", 0, 40)
    _append(data / "s-1", 0, 25)
    out = tmp_path / "out"
    checkpoint = tmp_path / "checkpoint"

    def run() -> None:
        _run_available_now(
            spark,
            data,
            out,
            checkpoint,
            ("partition", "offset", "cast(value as string) as value"),
            startingOffsets="earliest",
            maxOffsetsPerTrigger="20",
        )

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


def test_stream_starts_at_a_timestamp(spark: Any, tmp_path: Path) -> None:
    """startingTimestamp and startingOffsetsByTimestamp start a stream through the time index,
    as in Spark's Kafka source (record i has timestamp T0 + i)."""
    data = tmp_path / "data"
    _append(data / "s-0", 0, 50)
    _append(data / "s-1", 0, 30)
    got = _available_now(spark, data, tmp_path / "c1", "from_ts", startingTimestamp=str(T0 + 20))
    assert got == [(0, i) for i in range(20, 50)] + [(1, i) for i in range(20, 30)]
    got = _available_now(
        spark,
        data,
        tmp_path / "c2",
        "by_ts",
        startingOffsetsByTimestamp=f'{{"s": {{"0": {T0 + 45}, "1": {T0 + 99}}}}}',
        startingOffsetsByTimestampStrategy="latest",
    )
    assert got == [(0, i) for i in range(45, 50)]  # partition 1 has nothing that late: latest
    with pytest.raises(Exception, match=r"startingOffsetsByTimestampStrategy=error"):
        _available_now(spark, data, tmp_path / "c3", "ts_error", startingTimestamp=str(T0 + 99))


def test_stream_fails_on_data_loss_unless_told_not_to(spark: Any, tmp_path: Path) -> None:
    """Records deleted (retention) before a running query read them fail it, as Spark's Kafka
    source does; with failOnDataLoss=false it goes on from the earliest offset still there."""
    data = tmp_path / "data"
    _append(data / "s-0", 0, 40)
    checkpoint = tmp_path / "checkpoint"
    got = _available_now(spark, data, checkpoint, "loss_1", startingOffsets="earliest")
    assert got == [(0, i) for i in range(40)]
    _append(data / "s-0", 40, 40)
    with Log(
        data / "s-0", TopicConfig(segment_bytes=4000, retention_bytes=1000, retention_ms=-1)
    ) as log:
        log.delete_old_segments()
        first = log.log_start_offset
    assert 40 < first < 80
    with pytest.raises(Exception, match=f"offsets 40 to {first - 1} are gone"):
        _available_now(spark, data, checkpoint, "loss_2")
    got = _available_now(spark, data, checkpoint, "loss_3", failOnDataLoss="false")
    assert got == [(0, i) for i in range(first, 80)]


def test_a_limit_below_the_partition_count_still_advances(spark: Any, tmp_path: Path) -> None:
    """maxOffsetsPerTrigger=2 over 3 partitions: each share (2/3) was floored to 0 and the
    stream never advanced; Spark's Kafka source rounds a share under one up, so each
    micro-batch takes at least one offset of every partition that has one."""
    data = tmp_path / "data"
    for p in range(3):
        _append(data / f"few-{p}", 0, 4)
    rows = _available_now(
        spark,
        data,
        tmp_path / "checkpoint",
        "few",
        startingOffsets="earliest",
        maxOffsetsPerTrigger="2",
    )
    assert rows == [(p, o) for p in range(3) for o in range(4)]
    commits = sorted((tmp_path / "checkpoint" / "commits").glob("[0-9]*"))
    assert len(commits) == 4  # one offset of each partition per micro-batch


def _memory_stream(spark: Any, data: Path, name: str, **options: str) -> Any:
    reader = spark.readStream.format("kafkalog").option("path", str(data))
    for k, v in options.items():
        reader = reader.option(k, v)
    return (
        reader.load()
        .selectExpr("partition", "offset")
        .writeStream.format("memory")
        .queryName(name)
        .trigger(processingTime="100 milliseconds")
        .start()
    )


def _batches_with_rows(query: Any) -> list[int]:
    return [int(p["numInputRows"]) for p in query.recentProgress if p["numInputRows"]]


def _wait_for(predicate: Any, seconds: float) -> bool:
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def test_min_offsets_per_trigger_waits_for_enough_new_offsets(spark: Any, tmp_path: Path) -> None:
    """As Spark's Kafka source: the first micro-batch goes at once, later ones wait for
    minOffsetsPerTrigger new offsets (a writer appending slowly), options accepted at load."""
    data = tmp_path / "data"
    _append(data / "slow-0", 0, 3)
    query = _memory_stream(
        spark,
        data,
        "slow_min",
        startingOffsets="earliest",
        minOffsetsPerTrigger="5",
        maxTriggerDelay="10m",
    )
    try:
        assert _wait_for(lambda: _batches_with_rows(query) == [3], 60)
        for i in range(3, 7):  # four new offsets: fewer than five, no micro-batch
            _append(data / "slow-0", i, 1)
        time.sleep(1.5)
        assert _batches_with_rows(query) == [3]
        _append(data / "slow-0", 7, 1)  # the fifth
        assert _wait_for(lambda: _batches_with_rows(query) == [3, 5], 60)
        rows = spark.sql("select offset from slow_min").collect()
        assert sorted(r.offset for r in rows) == list(range(8))
    finally:
        query.stop()


def test_max_trigger_delay_lets_a_small_batch_through(spark: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    _append(data / "late-0", 0, 2)
    query = _memory_stream(
        spark,
        data,
        "late_delay",
        startingOffsets="earliest",
        minOffsetsPerTrigger="1000",
        maxTriggerDelay="1s",
    )
    try:
        assert _wait_for(lambda: _batches_with_rows(query) == [2], 60)
        _append(data / "late-0", 2, 1)  # far fewer than 1000, but the delay passes
        assert _wait_for(lambda: _batches_with_rows(query) == [2, 1], 30)
    finally:
        query.stop()


def test_a_bad_trigger_delay_is_refused_at_load(spark: Any, tmp_path: Path) -> None:
    from pyspark.errors import PySparkException

    data = tmp_path / "data"
    _append(data / "x-0", 0, 1)
    reader = spark.readStream.format("kafkalog").option("path", str(data))
    with pytest.raises(PySparkException, match="maxTriggerDelay"):
        reader.option("maxTriggerDelay", "soon").load()
