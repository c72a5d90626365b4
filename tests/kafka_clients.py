"""Settings for tests that drive Kafka clients against ``kafkalog serve``: a server config on a
free loopback port, and client settings that keep librdkafka's timeouts short."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from typing import Any

from kafkalog.server import ServerConfig


def config(**overrides: Any) -> ServerConfig:
    settings: dict[str, Any] = {
        "port": 0,
        "group_initial_rebalance_delay_ms": 0,
        "offsets_topic_num_partitions": 3,
    }
    settings.update(overrides)
    return ServerConfig(**settings)


def rdkafka(bootstrap: str, **extra: Any) -> dict[str, Any]:
    """librdkafka settings for a local broker: small timeouts so a failure is quick."""
    settings: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "socket.timeout.ms": 5000,
        "message.timeout.ms": 10000,
        "reconnect.backoff.ms": 20,
        "reconnect.backoff.max.ms": 200,
        "retry.backoff.ms": 20,
        "topic.metadata.refresh.interval.ms": 1000,
    }
    settings.update(extra)
    return settings


def consumer_settings(bootstrap: str, group: str, **extra: Any) -> dict[str, Any]:
    return rdkafka(
        bootstrap,
        **{
            "group.id": group,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 100,
            "fetch.wait.max.ms": 100,
            "enable.auto.commit": False,
            **extra,
        },
    )


def wait_until(condition: Callable[[], object], timeout: float = 30.0) -> bool:
    """Whether ``condition()`` became true within ``timeout`` seconds (polled every 50 ms):
    for what a server does on its own schedule (retention, the cleaner, checkpoints)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def self_signed(cert: str, key: str, subject: str, *extra: str) -> None:
    """A self-signed certificate and its key (openssl, as an operator makes one), for two days;
    ``extra`` goes to ``openssl req`` (e.g. ``-addext subjectAltName=IP:127.0.0.1``)."""
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"),
            *("-subj", subject, *extra, "-keyout", key, "-out", cert),
        ],
        check=True,
        capture_output=True,
    )


#: what a certificate for the loopback listener needs beside its subject
LOOPBACK_SAN = ("-addext", "subjectAltName=IP:127.0.0.1")


def kafka_python_until_quiet(
    boot: str, topic: str, quiet_s: float, bound_s: float
) -> tuple[list[tuple[int, bytes | None]], Any]:
    """kafka-python reads partition 0 of ``topic`` from offset 0 until nothing came for
    ``quiet_s`` or it raised: the (offset, value) pairs it got and the error it raised (None
    when it went quiet). Never longer than ``bound_s``: a client that gets records without end
    fails the test rather than hang it."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import KafkaError

    got: list[tuple[int, bytes | None]] = []
    error: Any = None
    consumer = KafkaConsumer(
        bootstrap_servers=boot,
        enable_auto_commit=False,
        fetch_max_wait_ms=50,
        request_timeout_ms=5000,
    )
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        start = quiet_since = time.monotonic()
        while time.monotonic() - quiet_since < quiet_s:
            assert time.monotonic() - start < bound_s, f"{topic}: records without end"
            try:
                polled = consumer.poll(timeout_ms=100)
            except KafkaError as e:
                error = e
                break
            for messages in polled.values():
                got += [(m.offset, m.value) for m in messages]
                quiet_since = time.monotonic()
    finally:
        consumer.close()
    return got, error


def confluent_until_quiet(
    boot: str, topic: str, quiet_s: float, bound_s: float, **settings: Any
) -> tuple[list[tuple[int, bytes | None]], Any]:
    """confluent-kafka (librdkafka) reads partition 0 of ``topic`` from offset 0 until nothing
    came for ``quiet_s`` or it answered an error: the (offset, value) pairs and the error (None
    when it went quiet). ``settings`` go to librdkafka beside :func:`rdkafka`'s (``check.crcs``
    stays at librdkafka's default, false, unless given). Bounded by ``bound_s`` like
    :func:`kafka_python_until_quiet`."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    got: list[tuple[int, bytes | None]] = []
    error: Any = None
    consumer = Consumer(
        rdkafka(
            boot,
            **{
                "group.id": "until-quiet",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 50,
                **settings,
            },
        )
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        start = quiet_since = time.monotonic()
        while time.monotonic() - quiet_since < quiet_s:
            assert time.monotonic() - start < bound_s, f"{topic}: records without end"
            msg = consumer.poll(0.1)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                error = msg.error()
                break
            got.append((msg.offset(), msg.value()))
            quiet_since = time.monotonic()
    finally:
        consumer.close()
    return got, error
