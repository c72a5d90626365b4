"""kafka-python and aiokafka, unchanged, against ``kafkalog serve``: each produces with every codec
and consumes (from an offset, by timestamp, in a group), and kafka-python's admin client
manages topics."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition as AioTopicPartition
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions, NewTopic
from kafka.errors import TopicAlreadyExistsError
from kafka.structs import MemberState

from kafkalog.log import LogDir
from kafkalog.server import ServerThread
from kafkalog.server.groups import STABLE

# kafka-python 3 and aiokafka take these codec names
CODECS = [None, "gzip", "snappy", "lz4", "zstd"]


def stored(data_dir: Path, topic: str, partition: int = 0) -> list[tuple[bytes | None, ...]]:
    with LogDir(str(data_dir)) as logdir:
        log = logdir.log(topic, partition)
        return [(r.key, r.value) for r in log.records(log.log_start_offset)]


def test_kafka_python_produce_consume_and_offsets_for_times(
    server: ServerThread, data_dir: Path
) -> None:
    base = 1_600_000_000_000
    expected = []
    for n, codec in enumerate(CODECS):
        producer = KafkaProducer(bootstrap_servers=server.bootstrap, compression_type=codec)
        for i in range(20):
            key = f"{codec}-{i}".encode()
            value = None if i == 3 else f"v{i}".encode() * 20
            ts = base + (n * 20 + i) * 10
            producer.send(
                "kp", key=key, value=value, headers=[("i", str(i).encode())], timestamp_ms=ts
            )
            expected.append((key, value, ts))
        producer.flush()
        producer.close()

    consumer = KafkaConsumer(
        bootstrap_servers=server.bootstrap, consumer_timeout_ms=1000, fetch_max_wait_ms=100
    )
    tp = TopicPartition("kp", 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got = [(m.key, m.value, m.timestamp) for m in consumer]
    assert got == expected
    found = consumer.offsets_for_times({tp: base + 505})
    assert found[tp].offset == 51 and found[tp].timestamp == base + 510
    assert consumer.beginning_offsets([tp]) == {tp: 0}
    assert consumer.end_offsets([tp]) == {tp: 100}
    consumer.seek(tp, 98)
    assert [m.offset for m in consumer] == [98, 99]
    consumer.close()
    server.stop()
    assert stored(data_dir, "kp") == [(k, v) for k, v, _ in expected]


def test_kafka_python_group_commits(server: ServerThread) -> None:
    producer = KafkaProducer(bootstrap_servers=server.bootstrap)
    for i in range(30):
        producer.send("kgroup", value=str(i).encode())
    producer.flush()
    producer.close()

    def member() -> KafkaConsumer:
        return KafkaConsumer(
            "kgroup",
            bootstrap_servers=server.bootstrap,
            group_id="kg",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            consumer_timeout_ms=1000,
            fetch_max_wait_ms=100,
            session_timeout_ms=6000,
            heartbeat_interval_ms=200,
        )

    first = member()
    assert [m.value for m in first] == [str(i).encode() for i in range(20)] + [
        str(i).encode() for i in range(20, 30)
    ]
    first.commit()
    first.close()
    second = member()
    assert list(second) == []  # resumes at the committed 30
    assert second.committed(TopicPartition("kgroup", 0)) == 30
    second.close()


def test_kafka_python_admin(server: ServerThread) -> None:
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        admin.create_topics([NewTopic("adm", 2, 1, topic_configs={"cleanup.policy": "compact"})])
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([NewTopic("adm", 2, 1)])
        assert "adm" in admin.list_topics()
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "adm")])
        configs = described["topic"]["adm"]
        assert configs["cleanup.policy"]["value"] == "compact"
        assert configs["cleanup.policy"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
        admin.create_partitions({"adm": NewPartitions(4)})
        (meta,) = admin.describe_topics(["adm"])
        assert len(meta["partitions"]) == 4
        admin.delete_topics(["adm"])
        assert "adm" not in admin.list_topics()
    finally:
        admin.close()


def test_aiokafka_every_codec_and_a_group(server: ServerThread, data_dir: Path) -> None:
    async def main() -> list[tuple[bytes | None, bytes | None]]:
        expected: list[tuple[bytes | None, bytes | None]] = []
        for codec in CODECS:
            producer = AIOKafkaProducer(
                bootstrap_servers=server.bootstrap, compression_type=codec, linger_ms=5
            )
            await producer.start()
            try:
                for i in range(15):
                    key = f"{codec}-{i}".encode()
                    value = None if i == 0 else f"{codec} {i}".encode()
                    await producer.send("aio", key=key, value=value, headers=[("h", b"1")])
                    expected.append((key, value))
                await producer.flush()
            finally:
                await producer.stop()
        consumer = AIOKafkaConsumer(
            "aio",
            bootstrap_servers=server.bootstrap,
            group_id="aio-group",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            fetch_max_wait_ms=100,
            session_timeout_ms=6000,
            heartbeat_interval_ms=200,
        )
        await consumer.start()
        try:
            got: list[tuple[bytes | None, bytes | None]] = []
            deadline = time.monotonic() + 15
            while len(got) < len(expected) and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=200)
                for messages in batches.values():
                    got.extend((m.key, m.value) for m in messages)
            assert got == expected
            await consumer.commit()
            committed = await consumer.committed(AioTopicPartition("aio", 0))
            assert committed == len(expected)
        finally:
            await consumer.stop()
        return expected

    expected = asyncio.run(main())
    server.stop()
    assert stored(data_dir, "aio") == expected


def test_kafka_python_members_polled_in_turn_settle(server: ServerThread) -> None:
    """Two kafka-python members polled in turn by one thread, each poll() short: kafka-python
    3 joins again with the same subscription when its poll() timed out before its JoinGroup
    answer came. The server answers such a join with the current generation, as Kafka does, so
    the group settles; it once rebalanced on each (about 30 generations in 4 s, for ever)."""
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        admin.create_topics([NewTopic("turns", 4, 1)])
    finally:
        admin.close()

    def member() -> KafkaConsumer:
        consumer = KafkaConsumer(
            bootstrap_servers=server.bootstrap,
            group_id="turns",
            enable_auto_commit=False,
            session_timeout_ms=6000,
            heartbeat_interval_ms=100,
            fetch_max_wait_ms=100,
        )
        consumer.subscribe(["turns"])
        return consumer

    one, two = member(), member()
    broker = server.server.broker
    assert broker is not None
    try:

        def settled() -> bool:
            """Each holds partitions, 4 in all, and has completed the join of the group's
            current generation (``group_metadata()``): a member keeps its previous assignment
            while it joins again, and kafka-python 3.0.12 joins again, as a new JoinGroup,
            when its join was answered between two of its polls; from the leader, that join
            rebalances a Stable group (as on Kafka)."""
            held = [len(c.assignment()) for c in (one, two)]
            group = broker.groups.groups.get("turns")
            return (
                all(held)
                and sum(held) == 4
                and group is not None
                and group.state == STABLE
                and all(
                    m.state == MemberState.STABLE and m.generation_id == group.generation
                    for m in (one.group_metadata(), two.group_metadata())
                )
            )

        deadline = time.monotonic() + 20
        while not settled() and time.monotonic() < deadline:
            one.poll(timeout_ms=50)
            two.poll(timeout_ms=50)
        assert settled()
        group = broker.groups.groups["turns"]
        generation = group.generation
        for _ in range(20):  # two seconds more of turns: no further rebalance
            one.poll(timeout_ms=50)
            two.poll(timeout_ms=50)
        assert group.generation == generation and settled()
    finally:
        one.close()
        two.close()
