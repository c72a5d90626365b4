"""Batch option semantics checked against Spark 4's Kafka source, on real Kafka-written fixtures.

Planned without Spark (``parse_read_options`` then ``resolve_ranges``, what the data source does
on the driver); one test reads through ``format("kafkalog")`` to show the options arrive.
Each test names the Spark file that fixes the behaviour.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from kafkalog.spark.options import OptionError, parse_read_options
from kafkalog.spark.plan import DataLossError, UnknownPartitionError, resolve_ranges
from provenance import FIXTURES

JAVA = FIXTURES / "kafka-4.0-snapshot-javacode"
T0 = 1700000000000  # v2-none: batch 4 starts at T0+3000 (offset 9), T0+2001 is offset 7


def ranges(**options: str) -> list[tuple[str, int, int, int]]:
    opts = parse_read_options({"path": str(JAVA), **options})
    return [(r.topic, r.partition, r.start, r.end) for r in resolve_ranges(opts)]


def offsets_json(spec: dict[str, dict[int, int]]) -> str:
    return json.dumps({t: {str(p): o for p, o in parts.items()} for t, parts in spec.items()})


# KafkaSourceProvider.getKafkaOffsetRangeLimit: the option that loses is never read


def test_a_losing_offset_option_is_not_checked() -> None:
    assert ranges(
        subscribe="v2-none", startingTimestamp=str(T0 + 3000), startingOffsets="latest"
    ) == [("v2-none", 0, 9, 112)]
    assert ranges(
        subscribe="v2-none", endingTimestamp=str(T0 + 2001), endingOffsets="earliest"
    ) == [("v2-none", 0, 0, 7)]
    assert ranges(
        subscribe="v2-none",
        startingOffsetsByTimestamp=offsets_json({"v2-none": {0: T0 + 3000}}),
        startingOffsets="{not json",
    ) == [("v2-none", 0, 9, 112)]


# KafkaSourceProvider.validateGeneralOptions / convertToSpecifiedParams: kafka.* options go to
# the consumer; a few are refused; kafka.isolation.level is honoured (KafkaOffsetReaderAdmin)


def test_kafka_consumer_options_are_accepted() -> None:
    assert ranges(
        subscribe="v2-none",
        **{"kafka.bootstrap.servers": "b:9092", "kafka.security.protocol": "SASL_SSL"},
        **{"kafka.sasl.jaas.config": "x", "KAFKA.ssl.truststore.location": "/t"},
    ) == [("v2-none", 0, 0, 112)]


@pytest.mark.parametrize(
    "key",
    [
        "kafka.auto.offset.reset",
        "kafka.key.deserializer",
        "kafka.value.deserializer",
        "kafka.enable.auto.commit",
        "kafka.interceptor.classes",
    ],
)
def test_kafka_options_spark_refuses_are_refused(key: str) -> None:
    with pytest.raises(OptionError, match=f"option {key} is not supported"):
        ranges(subscribe="v2-none", **{key: "x"})


def test_kafka_isolation_level_is_honoured() -> None:
    uncommitted = ranges(subscribe="v2-txn")
    committed = ranges(subscribe="v2-txn", **{"kafka.isolation.level": "read_committed"})
    assert committed == ranges(subscribe="v2-txn", isolationLevel="read_committed")
    assert committed[0][3] < uncommitted[0][3]  # stops at the last stable offset
    with pytest.raises(OptionError, match=r"kafka\.isolation\.level=.serializable."):
        ranges(subscribe="v2-txn", **{"kafka.isolation.level": "serializable"})
    with pytest.raises(OptionError, match="contradict"):
        ranges(
            subscribe="v2-txn",
            isolationLevel="read_committed",
            **{"kafka.isolation.level": "read_uncommitted"},
        )


def test_streaming_only_options_are_ignored_in_batch() -> None:
    # KafkaSourceProvider.validateBatchOptions: "minOffsetsPerTrigger option ignored in batch"
    assert ranges(subscribe="v2-none", minOffsetsPerTrigger="10", maxTriggerDelay="5m") == [
        ("v2-none", 0, 0, 112)
    ]
    with pytest.raises(OptionError, match="unknown option 'startingoffset'"):
        ranges(subscribe="v2-none", startingOffset="earliest")  # a typo is still caught


# KafkaOffsetReaderAdmin.fetchPartitionOffsets / fetchSpecificTimestampBasedOffsets: per-partition
# JSON must name every partition read and no other


@pytest.mark.parametrize(
    "option",
    ["startingOffsets", "endingOffsets", "startingOffsetsByTimestamp", "endingOffsetsByTimestamp"],
)
def test_per_partition_json_names_every_partition_read(option: str) -> None:
    value = T0 + 1000 if "Timestamp" in option else 5
    with pytest.raises(OptionError, match=f"option {option} must give every partition.*v2-gzip-0"):
        ranges(subscribe="v2-none,v2-gzip", **{option: offsets_json({"v2-none": {0: value}})})
    with pytest.raises(OptionError, match=f"option {option} must give.*not read v2-gzip-0"):
        ranges(
            subscribe="v2-none",
            **{option: offsets_json({"v2-none": {0: value}, "v2-gzip": {0: value}})},
        )
    both = offsets_json({"v2-none": {0: value}, "v2-gzip": {0: value}})
    assert len(ranges(subscribe="v2-none,v2-gzip", **{option: both})) == 2


# KafkaSourceProvider.checkOffsetLimitValidity


def test_starting_and_ending_json_must_agree() -> None:
    with pytest.raises(OptionError, match="name different partitions"):
        ranges(
            assign='{"v2-none":[0]}',
            startingOffsets=offsets_json({"v2-none": {0: 3}}),
            endingOffsets=offsets_json({"v2-gzip": {0: 5}}),
        )
    with pytest.raises(OptionError, match="v2-none-0 starts at 9, after its endingOffsets 3"):
        ranges(
            subscribe="v2-none",
            startingOffsets=offsets_json({"v2-none": {0: 9}}),
            endingOffsets=offsets_json({"v2-none": {0: 3}}),
        )
    with pytest.raises(OptionError, match="after its endingOffsetsByTimestamp"):
        ranges(
            subscribe="v2-none",
            startingOffsetsByTimestamp=offsets_json({"v2-none": {0: T0 + 3000}}),
            endingOffsetsByTimestamp=offsets_json({"v2-none": {0: T0 + 2001}}),
        )


# KafkaSourceRDD.compute (batch reads use the V1 relation: kafka is in
# spark.sql.sources.useV1SourceList): a resolved start after the end fails, failOnDataLoss or not


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_a_start_after_the_end_fails_whatever_fail_on_data_loss(fail_on_data_loss: str) -> None:
    with pytest.raises(OptionError, match="gives offset 999, after the end offset 112"):
        ranges(
            subscribe="v2-none",
            startingOffsets=offsets_json({"v2-none": {0: 999}}),
            failOnDataLoss=fail_on_data_loss,
        )
    with pytest.raises(OptionError, match=r"starting timestamp gives offset 9.* end offset 7"):
        ranges(
            subscribe="v2-none",
            startingTimestamp=str(T0 + 3000),
            endingTimestamp=str(T0 + 2001),
            failOnDataLoss=fail_on_data_loss,
        )


def test_offsets_outside_the_log_follow_fail_on_data_loss() -> None:
    big = "v2-bigoffset"  # the log starts at 4294968296 and ends at 4294968316
    below = {"startingOffsets": offsets_json({big: {0: 0}})}
    with pytest.raises(DataLossError, match="starting offset 0 is gone"):
        ranges(subscribe=big, **below)
    assert ranges(subscribe=big, failOnDataLoss="false", **below) == [
        (big, 0, 4294968296, 4294968316)
    ]
    # a range wholly before the log start: nothing (KafkaDataConsumer skips to no offset)
    assert ranges(
        subscribe=big, failOnDataLoss="false", endingOffsets=offsets_json({big: {0: 5}}), **below
    ) == [(big, 0, 4294968296, 4294968296)]
    past = {
        "startingOffsets": offsets_json({"v2-none": {0: 200}}),
        "endingOffsets": offsets_json({"v2-none": {0: 300}}),
    }
    with pytest.raises(DataLossError, match="starting offset 200 is beyond the log end 112"):
        ranges(subscribe="v2-none", **past)
    assert ranges(subscribe="v2-none", failOnDataLoss="false", **past) == [("v2-none", 0, 112, 112)]


# ConsumerStrategy.SubscribePatternStrategy (admin-based offset fetching, Spark's default since
# 3.4): the regex is found anywhere in a topic's name; internal topics are never listed


def test_subscribe_pattern_is_found_anywhere_in_the_name() -> None:
    assert [r[0] for r in ranges(subscribePattern="v2-n")] == ["v2-none"]
    assert [r[0] for r in ranges(subscribePattern="none")] == ["v0-none", "v1-none", "v2-none"]
    assert [r[0] for r in ranges(subscribePattern="^v2-(none|gzip)$")] == ["v2-gzip", "v2-none"]
    assert [r[0] for r in ranges(subscribePattern=" v1-gzip ")] == ["v1-gzip"]  # trimmed
    with pytest.raises(OptionError, match="option subscribePattern is empty"):
        ranges(subscribePattern="  ")


def test_subscribe_pattern_skips_internal_topics() -> None:
    data = FIXTURES / "real-kraft-ronem123"
    every = parse_read_options({"path": str(data), "subscribePattern": ".*"})
    assert resolve_ranges(every) == []  # only internal topics there
    named = parse_read_options({"path": str(data), "subscribe": "__consumer_offsets"})
    assert resolve_ranges(named)  # subscribe still names them


def test_options_reach_the_data_source(spark: Any) -> None:
    def read(**options: str) -> list[int]:
        reader = spark.read.format("kafkalog").option("path", str(JAVA))
        for k, v in options.items():
            reader = reader.option(k, v)
        return sorted(r.offset for r in reader.load().select("offset").collect())

    committed = read(subscribe="v2-txn", **{"kafka.isolation.level": "read_committed"})
    assert committed == read(subscribe="v2-txn", isolationLevel="read_committed")
    assert len(committed) < len(read(subscribe="v2-txn"))
    assert read(
        subscribePattern="v2-n", startingTimestamp=str(T0 + 3000), startingOffsets="latest"
    ) == list(range(9, 112))
    with pytest.raises(Exception, match="option startingOffsets must give every partition"):
        read(subscribe="v2-none,v2-gzip", startingOffsets='{"v2-none":{"0":5}}')


def test_a_missing_topic_without_fail_on_data_loss_is_said_not_silent(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """failOnDataLoss=false reads what is there; a subscribed topic or an assigned partition
    that is not there gives no rows, and a warning naming it (it returned 0 rows silently)."""
    with caplog.at_level("WARNING", logger="kafkalog.spark"):
        assert ranges(subscribe="no-such-topic", failOnDataLoss="false") == []
        assert ranges(assign='{"v2-none": [7]}', failOnDataLoss="false") == []
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "no-such-topic" in said and "v2-none-7" in said
    # not data loss: nothing of it was ever there (issue 34 §3)
    with pytest.raises(UnknownPartitionError, match="no topic no-such-topic"):
        ranges(subscribe="no-such-topic")
