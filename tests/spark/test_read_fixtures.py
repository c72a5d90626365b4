"""DataFrames read through ``format("kafkalog")`` from every fixture partition equal what the
object API decodes (offsets, keys, values, timestamps, types, headers), and Spark's option
semantics hold on real data."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from kafkalog.log import Log
from kafkalog.log.layout import parse_partition_dir
from provenance import FIXTURES, fixture_partitions

JAVA = FIXTURES / "kafka-4.0-snapshot-javacode"


def _expected(directory: Path) -> list[tuple[Any, ...]]:
    log = Log(directory, writable=False)
    rows = []
    for entry in log.batches():
        if entry.is_control:
            continue
        if entry.magic < 2 and entry.compression.label == "zstd":
            continue
        ts_type = int(entry.timestamp_type)
        for r in entry.records():
            headers = [(h.key, h.value) for h in r.headers] or None
            rows.append((r.offset, r.key, r.value, r.timestamp, ts_type, headers))
    log.close()
    return rows


def _ms(ts: dt.datetime) -> int:
    return round(ts.replace(tzinfo=dt.UTC).timestamp() * 1000)


@pytest.mark.parametrize(
    "directory", list(fixture_partitions()), ids=lambda p: str(p.relative_to(FIXTURES))
)
def test_fixture_partition_as_dataframe(spark: Any, directory: Path) -> None:
    expected = _expected(directory)
    if any(e[3] < 0 for e in expected):
        pass  # v0: timestamps -1 read as 1969-12-31T23:59:59.999 as Spark's Kafka source does
    df = (
        spark.read.format("kafkalog")
        .option("path", str(directory))
        .option("includeHeaders", "true")
        .load()
    )
    topic, partition = parse_partition_dir(directory.name)
    rows = sorted(df.collect(), key=lambda r: r.offset)
    got = [
        (
            r.offset,
            r.key,
            r.value,
            _ms(r.timestamp),
            r.timestampType,
            None if r.headers is None else [(h.key, h.value) for h in r.headers],
        )
        for r in rows
    ]
    assert got == [(o, k, v, t, tt, h) for o, k, v, t, tt, h in expected]
    assert {(r.topic, r.partition) for r in rows} <= {(topic, partition)}


def test_option_semantics(spark: Any) -> None:
    def offsets(**options: str) -> list[int]:
        # DataFrameReader.option mutates the reader: a fresh one per query
        reader = spark.read.format("kafkalog").option("path", str(JAVA))
        for k, v in options.items():
            reader = reader.option(k, v)
        return sorted(r.offset for r in reader.load().select("offset").collect())

    assert offsets(subscribe="v2-none") == list(range(112))
    assert offsets(assign='{"v2-none":[0]}') == list(range(112))
    assert offsets(subscribePattern="v2-n.*") == list(range(112))
    assert offsets(subscribe="v2-none", startingOffsets='{"v2-none":{"0":100}}') == list(
        range(100, 112)
    )
    assert offsets(subscribe="v2-none", endingOffsets='{"v2-none":{"0":5}}') == list(range(5))
    assert offsets(
        subscribe="v2-none", startingOffsets='{"v2-none":{"0":-2}}', endingOffsets="latest"
    ) == list(range(112))
    t0 = 1700000000000
    # by timestamp: the first record at or after, through the indexes (batch 4 starts at T0+3000)
    assert offsets(subscribe="v2-none", startingTimestamp=str(t0 + 3000))[0] == 9
    assert offsets(
        subscribe="v2-none",
        startingOffsetsByTimestamp=json.dumps({"v2-none": {"0": t0 + 1002}}),
        endingOffsetsByTimestamp=json.dumps({"v2-none": {"0": t0 + 2001}}),
    ) == [3, 4, 5, 6]
    # precedence: startingTimestamp beats startingOffsets
    assert (
        offsets(subscribe="v2-none", startingTimestamp=str(t0 + 3000), startingOffsets="earliest")[
            0
        ]
        == 9
    )
    # a timestamp after every record: strategy error (default) fails, latest reads nothing
    with pytest.raises(Exception, match="no offset for starting timestamp"):
        offsets(subscribe="v2-none", startingTimestamp=str(t0 + 10**9))
    assert (
        offsets(
            subscribe="v2-none",
            startingTimestamp=str(t0 + 10**9),
            startingOffsetsByTimestampStrategy="latest",
        )
        == []
    )


def test_option_errors_name_the_option(spark: Any) -> None:
    def base() -> Any:
        return spark.read.format("kafkalog").option("path", str(JAVA))

    for key, value, message in [
        ("bogus", "1", "unknown option 'bogus'"),
        ("startingOffsets", "latest", "startingOffsets=latest"),
        ("endingOffsets", "earliest", "endingOffsets=earliest"),
        ("isolationLevel", "serializable", "isolationLevel"),
        ("startingOffsets", "{nope", "startingOffsets is not valid JSON"),
    ]:
        with pytest.raises(Exception, match=message):
            base().option(key, value).load().count()
    with pytest.raises(Exception, match="contradict"):
        base().option("subscribe", "a").option("assign", '{"a":[0]}').load().count()


def test_fail_on_data_loss_both_ways(spark: Any) -> None:
    big = "v2-bigoffset"  # its log starts at 4294968296: offsets below are gone

    def base(start: int) -> Any:
        return (
            spark.read.format("kafkalog")
            .option("path", str(JAVA))
            .option("assign", f'{{"{big}":[0]}}')
            .option("startingOffsets", f'{{"{big}":{{"0":{start}}}}}')
        )

    with pytest.raises(Exception, match="starting offset 0 is gone"):
        base(0).load().count()
    assert base(0).option("failOnDataLoss", "false").load().count() == 20
    # a start after the end is an error either way, as in Spark (KafkaSourceRDD.compute)
    for fail in ("true", "false"):
        with pytest.raises(Exception, match="after the end offset 4294968316"):
            base(4294968999).option("failOnDataLoss", fail).load().count()


def test_read_committed_drops_aborted_transactions(spark: Any) -> None:
    def base() -> Any:
        return spark.read.format("kafkalog").option("path", str(JAVA)).option("subscribe", "v2-txn")

    everything = sorted(r.offset for r in base().load().select("offset").collect())
    committed = sorted(
        r.offset
        for r in base().option("isolationLevel", "read_committed").load().select("offset").collect()
    )
    markers = {9, 13, 27, 28}
    assert not markers & set(everything)  # control records are never returned
    aborted = {5, 6, 10, 11} | set(range(14, 26))  # pid 2001 (txn B) and pid 2002 (txn C)
    open_txn = {29}  # txn E (pid 2004) never ended: past the last stable offset
    assert set(committed) == set(everything) - aborted - open_txn
    assert len(everything) == 26


def test_splits_by_bytes_and_min_partitions(spark: Any) -> None:
    d = FIXTURES / "real-kafka2.1-snapshot-zk-large-index-william0423" / "__consumer_offsets-28"
    df = spark.read.format("kafkalog").option("path", str(d)).option("minPartitions", "8").load()
    assert df.rdd.getNumPartitions() >= 8
    offsets = sorted(r.offset for r in df.select("offset").collect())
    assert offsets == list(range(8202))
    capped = (
        spark.read.format("kafkalog")
        .option("path", str(d))
        .option("maxRecordsPerPartition", "1000")
        .load()
    )
    assert capped.rdd.getNumPartitions() >= 9 and capped.count() == 8202
