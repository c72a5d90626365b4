"""A broker's duties in ``kafkalog serve`` (issue 25) as each of the three real clients sees
them, for the points the other ``test_serve_*`` files prove with one or two clients only:
validation (a keyless record on a compacted topic), retention under a reading consumer, configs
altered through aiokafka's admin client, ACLs against aiokafka, static membership with aiokafka,
and the background cleaner read through kafka-python and aiokafka. Each client is used through
its public API only, unchanged."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import errors as aio_errors
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition
from kafka.errors import InvalidRecordError

from kafka_clients import config, consumer_settings, rdkafka, wait_until
from kafkalog.log import LogDir
from kafkalog.server import ServerThread


def create_topic(bootstrap: str, name: str, configs: dict[str, str], partitions: int = 1) -> None:
    admin = AdminClient(rdkafka(bootstrap))
    admin.create_topics([NewTopic(name, partitions, config=configs)])[name].result(10)


def stored(data_dir: Path, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    """What partition 0 holds, read from the data directory (beside the running server)."""
    with LogDir(str(data_dir)) as logdir:
        log = logdir.log(topic, 0)
        return [(r.key, r.value) for r in log.records(log.log_start_offset)]


# -- 1. validation: a compacted topic refuses a record without a key ------------------------------


def test_keyless_record_on_a_compacted_topic_is_invalid_record_for_each_client(
    server: ServerThread, data_dir: Path
) -> None:
    """Kafka's LogValidator refuses a keyless record on a ``cleanup.policy=compact`` topic with
    INVALID_RECORD (87), not retriable; each client fails that one send at once, nothing is
    written, and a keyed record to the same topic then succeeds."""
    boot = server.bootstrap
    for topic in ("ck", "kp", "aio"):
        create_topic(boot, topic, {"cleanup.policy": "compact"})

    # confluent-kafka: the delivery report carries the broker's code
    producer = Producer(rdkafka(boot, **{"linger.ms": 0}))
    reports: list[Any] = []
    producer.produce("ck", b"no key", on_delivery=lambda e, m: reports.append(e))
    producer.flush(10)
    [error] = reports
    assert error is not None and error.code() == KafkaError.INVALID_RECORD
    assert not error.retriable()
    producer.produce("ck", b"keyed", key=b"k", on_delivery=lambda e, m: reports.append(e))
    producer.flush(10)
    assert reports[1] is None

    # kafka-python: the send's future fails with InvalidRecordError and the broker's message
    # (KIP-467's record error). Not idempotent here: kafka-python 3's idempotent producer
    # classifies every non-retriable produce error as fatal to the producer (its own choice;
    # Java's fails only the batch), and the point is that the same producer goes on.
    kp = KafkaProducer(bootstrap_servers=boot, linger_ms=0, enable_idempotence=False)
    try:
        with pytest.raises(InvalidRecordError) as refused:
            kp.send("kp", b"no key").get(10)
        assert "without key" in str(refused.value)
        assert kp.send("kp", b"keyed", key=b"k").get(10).offset == 0
    finally:
        kp.close()

    # aiokafka: it has no class for error 87, so its send fails with UnknownError (not
    # retriable: at once, not after delivery.timeout.ms)
    async def aio() -> int:
        ap = AIOKafkaProducer(bootstrap_servers=boot, linger_ms=0)
        await ap.start()
        try:
            started = time.monotonic()
            with pytest.raises(aio_errors.UnknownError) as failed:
                await ap.send_and_wait("aio", b"no key")
            assert not failed.value.retriable
            assert time.monotonic() - started < 5
            return (await ap.send_and_wait("aio", b"keyed", key=b"k")).offset
        finally:
            await ap.stop()

    assert asyncio.run(aio()) == 0
    for topic in ("ck", "kp", "aio"):  # the refused record was never written
        assert stored(data_dir, topic) == [(b"k", b"keyed")], topic
