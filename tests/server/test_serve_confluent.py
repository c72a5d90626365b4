"""librdkafka (confluent-kafka), unchanged, against ``kafkalog serve``: produce with every codec,
consume from every kind of start position, groups, admin, DeleteRecords; then the directory
passes ``kafkalog verify`` and ``Log`` reads exactly what was produced."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

from clirun import kafkalog_here
from kafka_clients import config, consumer_settings, rdkafka
from kafkalog.log import LogDir
from kafkalog.server import ServerThread

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def produce(bootstrap: str, topic: str, messages: list[dict[str, Any]], **extra: Any) -> list[Any]:
    """Produce and return the delivery reports (errors included), in order."""
    reports: list[Any] = []
    producer = Producer(rdkafka(bootstrap, **extra))
    for m in messages:
        producer.produce(topic, on_delivery=lambda err, msg: reports.append((err, msg)), **m)
    assert producer.flush(15) == 0
    return reports


def consume(consumer: Consumer, count: int, timeout: float = 15) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        assert msg.error() is None, msg.error()
        got.append(msg)
    return got


def read_partition(data_dir: Path, topic: str, partition: int = 0) -> list[tuple[Any, ...]]:
    with LogDir(str(data_dir)) as logdir:
        log = logdir.log(topic, partition)
        return [
            (r.offset, r.key, r.value, [(h.key, h.value) for h in r.headers])
            for r in log.records(log.log_start_offset)
        ]


def test_every_codec_keys_headers_null_values_round_trip(
    server: ServerThread, data_dir: Path
) -> None:
    expected = []
    for codec in CODECS:
        messages = []
        for i in range(40):
            key = f"{codec}-{i}".encode()
            value = None if i % 7 == 0 else (f"value {i} " * (i + 1)).encode()
            headers = [("codec", codec.encode()), ("n", str(i).encode()), ("empty", None)]
            messages.append({"key": key, "value": value, "headers": headers})
        reports = produce(
            server.bootstrap,
            "codecs",
            messages,
            **{"compression.type": codec, "linger.ms": 5, "enable.idempotence": True},
        )
        assert [err for err, _ in reports] == [None] * 40
        expected.extend(messages)

    consumer = Consumer(consumer_settings(server.bootstrap, "unused"))
    consumer.assign([TopicPartition("codecs", 0, OFFSET_BEGINNING)])
    got = consume(consumer, len(expected))
    consumer.close()
    assert [m.offset() for m in got] == list(range(len(expected)))
    assert [(m.key(), m.value()) for m in got] == [(e["key"], e["value"]) for e in expected]
    assert [m.headers() for m in got] == [e["headers"] for e in expected]
    server.stop()

    result = kafkalog_here("verify", str(data_dir))
    assert result.returncode == 0, result.stdout + result.stderr
    stored = read_partition(data_dir, "codecs")
    assert [(o, k, v) for o, k, v, _ in stored] == [
        (i, e["key"], e["value"]) for i, e in enumerate(expected)
    ]
    assert [h for *_, h in stored] == [e["headers"] for e in expected]


def test_consume_from_earliest_latest_offset_and_timestamp(server: ServerThread) -> None:
    base = 1_700_000_000_000
    produce(
        server.bootstrap,
        "times",
        [{"value": f"r{i}".encode(), "timestamp": base + 1000 * i} for i in range(10)],
    )
    consumer = Consumer(consumer_settings(server.bootstrap, "unused"))
    try:
        # by timestamp: the first record at or after it, through the time index
        found = consumer.offsets_for_times([TopicPartition("times", 0, base + 4500)], 10)
        assert found[0].offset == 5
        past = consumer.offsets_for_times([TopicPartition("times", 0, base + 99_000)], 10)
        assert past[0].offset == -1  # nothing that late: Kafka answers offset -1
        low, high = consumer.get_watermark_offsets(TopicPartition("times", 0), 10)
        assert (low, high) == (0, 10)

        consumer.assign([TopicPartition("times", 0, found[0].offset)])
        got = consume(consumer, 5)
        assert [m.value() for m in got] == [f"r{i}".encode() for i in range(5, 10)]
        assert [m.timestamp()[1] for m in got] == [base + 1000 * i for i in range(5, 10)]

        consumer.assign([TopicPartition("times", 0, 7)])
        assert [m.offset() for m in consume(consumer, 3)] == [7, 8, 9]

        consumer.assign([TopicPartition("times", 0, OFFSET_END)])
        assert consume(consumer, 1, timeout=0.5) == []
        produce(server.bootstrap, "times", [{"value": b"late"}])
        late = consume(consumer, 1)
        assert [(m.offset(), m.value()) for m in late] == [(10, b"late")]
    finally:
        consumer.close()


def test_a_long_poll_is_woken_by_an_append(server: ServerThread) -> None:
    produce(server.bootstrap, "poll", [{"value": b"first"}])
    consumer = Consumer(
        consumer_settings(server.bootstrap, "unused", **{"fetch.wait.max.ms": 4000})
    )
    try:
        consumer.assign([TopicPartition("poll", 0, 1)])
        assert consume(consumer, 1, timeout=1.0) == []  # a fetch is now parked at the server
        start = time.monotonic()
        produce(server.bootstrap, "poll", [{"value": b"second"}])
        got = consume(consumer, 1, timeout=10)
        assert [m.value() for m in got] == [b"second"]
        assert time.monotonic() - start < 2.5  # not the 4 s max wait
    finally:
        consumer.close()


def test_out_of_range_offset_resets_as_configured(server: ServerThread) -> None:
    produce(server.bootstrap, "range", [{"value": str(i).encode()} for i in range(5)])
    consumer = Consumer(
        consumer_settings(server.bootstrap, "unused", **{"auto.offset.reset": "error"})
    )
    try:
        consumer.assign([TopicPartition("range", 0, 50)])
        deadline = time.monotonic() + 10
        error = None
        while error is None and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is not None:
                error = msg.error()
        assert error is not None and error.code() == KafkaError._AUTO_OFFSET_RESET
    finally:
        consumer.close()


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient(rdkafka(bootstrap))


def test_admin_create_describe_partitions_delete(server: ServerThread, data_dir: Path) -> None:
    admin = _admin(server.bootstrap)
    futures = admin.create_topics(
        [
            NewTopic("orders", 3, 1, config={"retention.ms": "3600000"}),
            NewTopic("appendtime", 1, 1, config={"message.timestamp.type": "LogAppendTime"}),
        ]
    )
    for f in futures.values():
        f.result(10)
    again = admin.create_topics([NewTopic("orders", 1, 1)])["orders"]
    with pytest.raises(Exception, match=r"TOPIC_ALREADY_EXISTS|already exists"):
        again.result(10)
    bad = admin.create_topics([NewTopic("bad", 1, 1, config={"retention.ms": "soon"})])["bad"]
    with pytest.raises(Exception, match=r"INVALID_CONFIG|retention\.ms"):
        bad.result(10)

    metadata = admin.list_topics(timeout=10)
    assert len(metadata.topics["orders"].partitions) == 3
    assert {d.name for d in data_dir.iterdir() if d.name.startswith("orders-")} == {
        "orders-0",
        "orders-1",
        "orders-2",
    }

    resource = ConfigResource(ConfigResource.Type.TOPIC, "orders")
    configs = admin.describe_configs([resource])[resource].result(10)
    assert configs["retention.ms"].value == "3600000"
    assert not configs["retention.ms"].is_default
    assert configs["segment.bytes"].value == "1073741824"
    assert configs["segment.bytes"].is_default

    admin.create_partitions([NewPartitions("orders", 5)])["orders"].result(10)
    assert len(admin.list_topics(timeout=10).topics["orders"].partitions) == 5

    # LogAppendTime: the broker stamps the batch, and the consumer sees the stamp
    before = int(time.time() * 1000)
    produce(server.bootstrap, "appendtime", [{"value": b"x", "timestamp": 1000}])
    consumer = Consumer(consumer_settings(server.bootstrap, "unused"))
    consumer.assign([TopicPartition("appendtime", 0, OFFSET_BEGINNING)])
    (msg,) = consume(consumer, 1)
    consumer.close()
    kind, stamp = msg.timestamp()
    assert kind == 2 and stamp >= before  # TIMESTAMP_LOG_APPEND_TIME

    admin.delete_topics(["orders"])["orders"].result(10)
    assert "orders" not in admin.list_topics(timeout=10).topics
    assert not [d for d in data_dir.iterdir() if d.name.startswith("orders-")]


def test_delete_records_moves_the_log_start(server: ServerThread, data_dir: Path) -> None:
    produce(server.bootstrap, "trim", [{"value": str(i).encode()} for i in range(10)])
    admin = _admin(server.bootstrap)
    (result,) = admin.delete_records([TopicPartition("trim", 0, 6)]).values()
    assert result.result(10).low_watermark == 6
    consumer = Consumer(consumer_settings(server.bootstrap, "unused"))
    try:
        assert consumer.get_watermark_offsets(TopicPartition("trim", 0), 10) == (6, 10)
        consumer.assign([TopicPartition("trim", 0, OFFSET_BEGINNING)])
        assert [m.offset() for m in consume(consumer, 4)] == [6, 7, 8, 9]
    finally:
        consumer.close()
    server.stop()
    with LogDir(str(data_dir)) as logdir:
        assert logdir.log_start_offsets[("trim", 0)] == 6


def test_a_batch_over_max_message_bytes_is_refused(server: ServerThread) -> None:
    admin = _admin(server.bootstrap)
    topic = NewTopic("small", 1, 1, config={"max.message.bytes": "2000"})
    admin.create_topics([topic])["small"].result(10)
    reports = produce(
        server.bootstrap, "small", [{"value": b"x" * 5000}], **{"message.send.max.retries": 0}
    )
    ((err, _),) = reports
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE
    ok = produce(server.bootstrap, "small", [{"value": b"y" * 100}])
    assert ok[0][0] is None and ok[0][1].offset() == 0


def test_group_rebalances_and_offsets_survive_a_restart(data_dir: Path) -> None:
    group = "readers"
    with ServerThread(str(data_dir), config()) as server:
        admin = _admin(server.bootstrap)
        admin.create_topics([NewTopic("events", 3, 1)])["events"].result(10)
        produce(
            server.bootstrap,
            "events",
            [{"key": str(i).encode(), "value": str(i).encode()} for i in range(60)],
        )
        consumers = [Consumer(consumer_settings(server.bootstrap, group)) for _ in range(2)]
        seen: set[bytes] = set()
        try:
            for c in consumers:
                c.subscribe(["events"])
            deadline = time.monotonic() + 20
            while len(seen) < 60 and time.monotonic() < deadline:
                for c in consumers:
                    msg = c.poll(0.1)
                    if msg is not None and msg.error() is None:
                        seen.add(msg.value())
            assert len(seen) == 60
            owned = [{tp.partition for tp in c.assignment()} for c in consumers]
            assert owned[0] | owned[1] == {0, 1, 2} and not owned[0] & owned[1]
            for c in consumers:
                c.commit(asynchronous=False)

            third = Consumer(consumer_settings(server.bootstrap, group))
            third.subscribe(["events"])
            consumers.append(third)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                for c in consumers:
                    c.poll(0.05)
                sizes = sorted(len(c.assignment()) for c in consumers)
                if sizes == [1, 1, 1]:
                    break
            assert sorted(len(c.assignment()) for c in consumers) == [1, 1, 1]
            owned = [{tp.partition for tp in c.assignment()} for c in consumers]
            assert set.union(*owned) == {0, 1, 2}
        finally:
            for c in consumers:
                c.close()

    with ServerThread(str(data_dir), config()) as server:
        produce(server.bootstrap, "events", [{"key": b"new", "value": b"after restart"}])
        consumer = Consumer(consumer_settings(server.bootstrap, group))
        consumer.subscribe(["events"])
        try:
            got = consume(consumer, 1, timeout=20)
            assert [m.value() for m in got] == [b"after restart"]
            assert consume(consumer, 1, timeout=1) == []  # nothing before the commits again
            committed = consumer.committed([TopicPartition("events", p) for p in range(3)], 10)
            assert sum(tp.offset for tp in committed) == 60
        finally:
            consumer.close()


def test_spark_reads_exactly_what_the_clients_produced(data_dir: Path, spark: Any) -> None:
    expected = {}
    with ServerThread(str(data_dir), config()) as server:
        admin = _admin(server.bootstrap)
        admin.create_topics([NewTopic("sparked", 2, 1)])["sparked"].result(10)
        messages = []
        for i in range(100):
            value = None if i % 9 == 0 else f"value-{i}".encode()
            messages.append({"key": f"k{i}".encode(), "value": value, "partition": i % 2})
        reports = produce(server.bootstrap, "sparked", messages, **{"compression.type": "zstd"})
        for err, msg in reports:
            assert err is None
            expected[(msg.partition(), msg.offset())] = (msg.key(), msg.value())
    rows = (
        spark.read.format("kafkalog")
        .option("path", str(data_dir))
        .option("subscribe", "sparked")
        .load()
        .select("partition", "offset", "key", "value")
        .collect()
    )
    got = {
        (r.partition, r.offset): (bytes(r.key), None if r.value is None else bytes(r.value))
        for r in rows
    }
    assert got == expected


def test_auto_create_off_refuses_unknown_topics(data_dir: Path) -> None:
    with ServerThread(str(data_dir), config(auto_create_topics_enable=False)) as server:
        reports = produce(
            server.bootstrap,
            "nowhere",
            [{"value": b"x"}],
            **{"message.timeout.ms": 1500, "topic.metadata.propagation.max.ms": 200},
        )
        ((err, _),) = reports
        assert err is not None
        assert err.code() in (
            KafkaError.UNKNOWN_TOPIC_OR_PART,
            KafkaError._UNKNOWN_TOPIC,
            KafkaError._MSG_TIMED_OUT,
        )
        assert "nowhere" not in _admin(server.bootstrap).list_topics(timeout=10).topics
    assert not (data_dir / "nowhere-0").exists()


def test_groups_are_listed_and_described(server: ServerThread) -> None:
    produce(server.bootstrap, "listed", [{"value": b"x"}])
    consumer = Consumer(consumer_settings(server.bootstrap, "visible"))
    consumer.subscribe(["listed"])
    try:
        assert len(consume(consumer, 1)) == 1
        admin = _admin(server.bootstrap)
        listed = admin.list_consumer_groups().result(10)
        assert [g.group_id for g in listed.valid] == ["visible"]
        described = admin.describe_consumer_groups(["visible"])["visible"].result(10)
        assert str(described.state).endswith("STABLE")
        (member,) = described.members
        assert [tp.topic for tp in member.assignment.topic_partitions] == ["listed"]
        assert described.partition_assignor == "range"
    finally:
        consumer.close()
