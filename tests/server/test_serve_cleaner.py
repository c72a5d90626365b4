"""``kafkalog serve`` runs the log cleaner in the background (issue 24 §3): a compacted topic
and ``__consumer_offsets`` shrink while confluent-kafka clients keep producing, consuming and
committing; the latest value of every key stays; committed offsets survive a restart."""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kafka_clients import config, consumer_settings, rdkafka, wait_until
from kafkalog.log import Log
from kafkalog.server import ServerThread

# the cleaner's kernels compiled before a test waits for a cleaning (see the fixture)
pytestmark = pytest.mark.usefixtures("compiled_cleaner")


def _size(directory: Path) -> int:
    """The bytes of the partition's segments; one the cleaner swapped out between the listing
    and its stat counts nothing (its replacement is in the listing or the next call's)."""
    total = 0
    for p in directory.glob("*.log"):
        with contextlib.suppress(FileNotFoundError):
            total += p.stat().st_size
    return total


def _kept(directory: Path) -> int:
    """Records still in the partition (read-only, beside the server)."""
    with Log(directory, writable=False) as log:
        return sum(1 for _ in log.records())


def _appended(directory: Path) -> int:
    with Log(directory, writable=False) as log:
        return log.log_end_offset


def test_compacted_topics_shrink_while_clients_work(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    settings = config(
        log_cleaner_backoff_ms=200,
        offsets_topic_num_partitions=1,
        offsets_topic_segment_bytes=4096,
    )
    with ServerThread(str(data), settings) as server:
        admin = AdminClient(rdkafka(server.bootstrap))
        topic = NewTopic(
            "table",
            num_partitions=1,
            config={
                "cleanup.policy": "compact",
                "segment.bytes": "4096",
                "min.cleanable.dirty.ratio": "0.01",
            },
        )
        admin.create_topics([topic])["table"].result(timeout=20)
        producer = Producer(rdkafka(server.bootstrap, **{"linger.ms": 0}))
        latest: dict[bytes, bytes] = {}
        for i in range(2000):
            key, value = b"key-%d" % (i % 20), b"value %d" % i
            producer.produce("table", value, key)
            latest[key] = value
            if i % 50 == 0:
                producer.flush(10)
        producer.flush(10)
        part = data / "table-0"
        written = _size(part)
        # a consumer group committing after every poll: __consumer_offsets grows
        consumer = Consumer(consumer_settings(server.bootstrap, "readers"))
        consumer.assign([TopicPartition("table", 0, 0)])
        read: dict[bytes, bytes] = {}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and read != latest:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                read[msg.key()] = msg.value()
                consumer.commit(message=msg, asynchronous=False)
        assert read == latest
        offsets_dir = data / "__consumer_offsets-0"
        assert wait_until(lambda: _size(part) < written / 3), (_size(part), written)
        # more commits of the same group and partition: the cleaner keeps only the latest
        for _ in range(300):
            consumer.commit(offsets=[TopicPartition("table", 0, 1999)], asynchronous=False)
        assert wait_until(lambda: _kept(offsets_dir) < _appended(offsets_dir) / 4), (
            _kept(offsets_dir),
            _appended(offsets_dir),
        )
        consumer.close()
        # a new consumer from the start still reads the latest value of every key
        fresh = Consumer(consumer_settings(server.bootstrap, "fresh"))
        fresh.assign([TopicPartition("table", 0, 0)])
        again: dict[bytes, bytes] = {}
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and again != latest:
            msg = fresh.poll(0.2)
            if msg is not None and msg.error() is None:
                again[msg.key()] = msg.value()
        fresh.close()
        assert again == latest
    # committed offsets survive a restart, replayed from what cleaning left
    with ServerThread(str(data), settings) as server:
        consumer = Consumer(consumer_settings(server.bootstrap, "readers"))
        [tp] = consumer.committed([TopicPartition("table", 0)], timeout=20)
        consumer.close()
        assert tp.offset == 1999


def test_an_aborted_cleaning_is_said_at_info_and_the_next_pass_runs(
    tmp_path: Path, monkeypatch: Any, caplog: Any
) -> None:
    """Retention or a truncation taking segments of the group being cleaned aborts the round
    (``CleaningAborted``): an expected event, logged at info as Kafka does, never as a failed
    duty; the following passes run on their interval."""
    from kafkalog.log import cleaner

    calls: list[int] = []

    def aborting(*args: Any, **kwargs: Any) -> None:
        calls.append(1)
        raise cleaner.CleaningAborted("segments of the group changed (a test)")

    monkeypatch.setattr(cleaner, "clean_filthiest", aborting)
    data = tmp_path / "data"
    data.mkdir()
    caplog.set_level(logging.INFO, logger="kafkalog")
    with ServerThread(str(data), config(log_cleaner_backoff_ms=100)) as server:
        admin = AdminClient(rdkafka(server.bootstrap))
        topic = NewTopic("table", num_partitions=1, config={"cleanup.policy": "compact"})
        admin.create_topics([topic])["table"].result(timeout=20)
        assert wait_until(lambda: len(calls) >= 3), calls
    said = [r for r in caplog.records if "aborted" in r.getMessage()]
    assert said and all(r.levelno == logging.INFO for r in said)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


def test_a_damaged_partition_is_uncleanable_and_the_others_are_cleaned(
    tmp_path: Path, caplog: Any
) -> None:
    """Issue 32 §8 / 33 §3 through serve: one compacted partition with a damaged batch in a
    cleaned-up segment. Every cleaning pass raised on it and, it being the dirtiest, nothing
    else was cleaned again; now the duty marks it uncleanable with an ERROR line naming it (as
    Kafka's LogCleanerManager), leaves its bytes as they were, and cleans the other one."""
    data = tmp_path / "data"
    data.mkdir()
    quiet = config(log_cleaner_enable=False, offsets_topic_num_partitions=1)
    with ServerThread(str(data), quiet) as server:
        # (client timeouts for a loaded machine: this test is about the cleaner, not latency)
        admin = AdminClient(rdkafka(server.bootstrap, **{"socket.timeout.ms": 30000}))
        topic = NewTopic(
            "table",
            num_partitions=2,
            config={
                "cleanup.policy": "compact",
                "segment.bytes": "4096",
                "min.cleanable.dirty.ratio": "0.01",
            },
        )
        admin.create_topics([topic])["table"].result(timeout=20)
        producer = Producer(
            rdkafka(server.bootstrap, **{"linger.ms": 0, "socket.timeout.ms": 30000})
        )
        for i in range(1500):
            for p in (0, 1):
                producer.produce("table", b"value %d" % i, b"key-%d" % (i % 20), partition=p)
            if i % 50 == 0:
                producer.flush(10)
        producer.flush(10)
    damaged = data / "table-0"
    first = sorted(damaged.glob("*.log"))[0]
    raw = bytearray(first.read_bytes())
    raw[len(raw) // 2 : len(raw) // 2 + 40] = b"jogeajgoea" * 4
    first.write_bytes(bytes(raw))
    before = {p.name: p.read_bytes() for p in damaged.glob("*.log")}
    healthy = data / "table-1"
    written = _size(healthy)
    caplog.set_level(logging.ERROR, logger="kafkalog")
    settings = config(log_cleaner_backoff_ms=100, offsets_topic_num_partitions=1)
    with ServerThread(str(data), settings) as server:
        assert wait_until(lambda: _size(healthy) < written / 3), (_size(healthy), written)
        said = [r.getMessage() for r in caplog.records if "uncleanable" in r.getMessage()]
        assert len(said) == 1 and "table-0" in said[0] and str(first) in said[0], said
        producer = Producer(
            rdkafka(server.bootstrap, **{"linger.ms": 0, "socket.timeout.ms": 30000})
        )
        producer.produce("table", b"after", b"key-0", partition=1)
        assert producer.flush(10) == 0
    assert {p.name: p.read_bytes() for p in damaged.glob("*.log")} == before
