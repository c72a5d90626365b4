"""What kafkalog serve does not implement of consumer groups fails at once, never silently:
a KIP-848 consumer (``group.protocol=consumer``) and static membership (``group.instance.id``)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer

from kafka_clients import consumer_settings
from kafkalog.server import ServerThread


def produce_one(bootstrap: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce("t", b"x")
    assert producer.flush(10) == 0


def first_error(consumer: Consumer, within: float) -> tuple[KafkaError | None, float]:
    """The first error poll() returns, and after how many seconds."""
    start = time.monotonic()
    while time.monotonic() - start < within:
        message = consumer.poll(0.2)
        if message is not None and message.error() is not None:
            return message.error(), time.monotonic() - start
    return None, within


def test_kip848_consumer_fails_fast_with_a_fatal_error(server: ServerThread) -> None:
    produce_one(server.bootstrap)
    settings: dict[str, Any] = consumer_settings(server.bootstrap, "kip848")
    settings["group.protocol"] = "consumer"
    for classic_only in ("session.timeout.ms", "heartbeat.interval.ms"):
        settings.pop(classic_only, None)  # librdkafka refuses them with the consumer protocol
    consumer = Consumer(settings)
    try:
        consumer.subscribe(["t"])
        error, after = first_error(consumer, 10)
    finally:
        consumer.close()
    assert error is not None, "a group.protocol=consumer client hung without an error"
    assert error.code() == KafkaError._FATAL and "ConsumerGroupHeartbeat" in error.str()
    assert "API version not supported" in error.str()
    assert after < 5


def test_static_member_is_refused_by_confluent_kafka(server: ServerThread) -> None:
    produce_one(server.bootstrap)
    settings = consumer_settings(server.bootstrap, "static", **{"group.instance.id": "i1"})
    consumer = Consumer(settings)
    try:
        consumer.subscribe(["t"])
        error, after = first_error(consumer, 10)
    finally:
        consumer.close()
    assert error is not None and error.code() == KafkaError.UNSUPPORTED_VERSION
    assert "JoinGroup" in error.str()
    assert after < 5


def test_static_member_is_refused_by_kafka_python(server: ServerThread) -> None:
    from kafka import KafkaConsumer
    from kafka.errors import UnsupportedVersionError

    produce_one(server.bootstrap)
    consumer = KafkaConsumer(
        "t",
        bootstrap_servers=server.bootstrap,
        group_id="static",
        group_instance_id="i1",
        consumer_timeout_ms=5000,
    )
    try:
        with pytest.raises(UnsupportedVersionError):
            list(consumer)
    finally:
        consumer.close()


def test_dynamic_member_of_the_same_client_still_joins(server: ServerThread) -> None:
    """The refusal is of group.instance.id only: the same consumer without it is served."""
    produce_one(server.bootstrap)
    consumer = Consumer(consumer_settings(server.bootstrap, "dynamic"))
    try:
        consumer.subscribe(["t"])
        deadline = time.monotonic() + 15
        got = None
        while got is None and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                got = message.value()
    finally:
        consumer.close()
    assert got == b"x"
