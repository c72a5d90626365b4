"""Transactions through librdkafka, unchanged: commits and aborts read with both isolation
levels, offsets sent to a transaction committed with it (consume-transform-produce), a second
producer with the same transactional id fencing the first, and the coordinator's state
surviving a restart."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

from kafka_clients import config, consumer_settings, rdkafka
from kafkalog.log import LogDir
from kafkalog.server import ServerThread


def transactional(bootstrap: str, txn_id: str) -> Producer:
    producer = Producer(
        rdkafka(bootstrap, **{"transactional.id": txn_id, "transaction.timeout.ms": 10000})
    )
    producer.init_transactions(10)
    return producer


def read(bootstrap: str, topic: str, isolation: str, count: int) -> list[bytes]:
    consumer = Consumer(consumer_settings(bootstrap, "unused", **{"isolation.level": isolation}))
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got: list[bytes] = []
        deadline = time.monotonic() + 10
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        assert consumer.poll(0.3) is None
        return got
    finally:
        consumer.close()


def test_commit_and_abort_with_both_isolation_levels(data_dir: Path) -> None:
    cfg = config(transaction_state_num_partitions=3)
    with ServerThread(str(data_dir), cfg) as server:
        producer = transactional(server.bootstrap, "writer")
        producer.begin_transaction()
        for i in range(3):
            producer.produce("txns", f"committed-{i}".encode())
        producer.commit_transaction(10)
        producer.begin_transaction()
        for i in range(3):
            producer.produce("txns", f"aborted-{i}".encode())
        producer.flush(10)  # sent, so the abort has records to cover
        producer.abort_transaction(10)
        producer.begin_transaction()
        producer.produce("txns", b"last")
        producer.commit_transaction(10)

        committed = [b"committed-0", b"committed-1", b"committed-2", b"last"]
        assert read(server.bootstrap, "txns", "read_committed", 4) == committed
        everything = read(server.bootstrap, "txns", "read_uncommitted", 7)
        assert everything == [*committed[:3], b"aborted-0", b"aborted-1", b"aborted-2", b"last"]
    with LogDir(str(data_dir)) as logdir:
        log = logdir.log("txns", 0)
        (aborted,) = [t for seg in log.segments for t in seg.txn_index.all_aborted_txns()]
        assert (aborted.first_offset, aborted.last_offset) == (4, 7)  # records 4-6, marker 7


def test_offsets_commit_with_the_transaction(data_dir: Path) -> None:
    cfg = config(transaction_state_num_partitions=3)
    with ServerThread(str(data_dir), cfg) as server:
        plain = Producer(rdkafka(server.bootstrap))
        for i in range(5):
            plain.produce("input", str(i).encode())
        assert plain.flush(10) == 0
        consumer = Consumer(consumer_settings(server.bootstrap, "transform"))
        consumer.subscribe(["input"])
        producer = transactional(server.bootstrap, "transformer")
        try:
            seen: list[Any] = []
            deadline = time.monotonic() + 15
            while len(seen) < 5 and time.monotonic() < deadline:
                msg = consumer.poll(0.1)
                if msg is not None and msg.error() is None:
                    seen.append(msg)
            assert len(seen) == 5
            producer.begin_transaction()
            for msg in seen:
                producer.produce("output", msg.value() * 2)
            position = consumer.position(consumer.assignment())
            producer.send_offsets_to_transaction(position, consumer.consumer_group_metadata(), 10)
            producer.commit_transaction(10)
            committed = consumer.committed([TopicPartition("input", 0)], 10)
            assert committed[0].offset == 5
        finally:
            consumer.close()
        assert read(server.bootstrap, "output", "read_committed", 5) == [
            str(i).encode() * 2 for i in range(5)
        ]


def test_a_new_producer_fences_the_old_and_survives_a_restart(data_dir: Path) -> None:
    cfg = config(transaction_state_num_partitions=3)
    with ServerThread(str(data_dir), cfg) as server:
        old = transactional(server.bootstrap, "fenced")
        old.begin_transaction()
        old.produce("zombie", b"from the old producer")
        old.flush(10)
        new = transactional(server.bootstrap, "fenced")  # aborts what the old one left open
        new.begin_transaction()
        new.produce("zombie", b"from the new producer")
        new.commit_transaction(10)
        old.produce("zombie", b"too late")
        with pytest.raises(KafkaException):
            old.commit_transaction(5)
        assert read(server.bootstrap, "zombie", "read_committed", 1) == [b"from the new producer"]

    with ServerThread(str(data_dir), cfg) as server:
        again = transactional(server.bootstrap, "fenced")
        again.begin_transaction()
        again.produce("zombie", b"after the restart")
        again.commit_transaction(10)
        assert read(server.bootstrap, "zombie", "read_committed", 2) == [
            b"from the new producer",
            b"after the restart",
        ]


def test_a_transaction_left_open_by_a_restart_is_aborted_by_the_next_producer(
    data_dir: Path,
) -> None:
    cfg = config(transaction_state_num_partitions=3)
    with ServerThread(str(data_dir), cfg) as server:
        first = transactional(server.bootstrap, "interrupted")
        first.begin_transaction()
        first.produce("open", b"never committed")
        first.flush(10)
        # the server stops with the transaction open
    with ServerThread(str(data_dir), cfg) as server:
        assert read(server.bootstrap, "open", "read_committed", 0) == []  # held back by the LSO
        second = transactional(server.bootstrap, "interrupted")  # aborts the open one
        second.begin_transaction()
        second.produce("open", b"committed")
        second.commit_transaction(10)
        assert read(server.bootstrap, "open", "read_committed", 1) == [b"committed"]
        assert read(server.bootstrap, "open", "read_uncommitted", 2) == [
            b"never committed",
            b"committed",
        ]


def test_transaction_state_records_round_trip() -> None:
    from kafkalog.server.transactions import (
        ONGOING,
        TxnMetadata,
        decode_txn,
        encode_txn_key,
        encode_txn_value,
    )

    meta = TxnMetadata("tx", 42, 3, 60000, ONGOING, {("a", 0), ("a", 2), ("b", 1)}, 1234)
    key, value = encode_txn_key("tx"), encode_txn_value(meta, 5678)
    assert key == b"\x00\x00\x00\x02tx"
    assert value[:17] == bytes.fromhex("0000000000000000002a00030000ea6001")
    found = decode_txn(key, value)
    assert found is not None and found[1] == meta
    assert decode_txn(key, None) == ("tx", None)


def test_an_abandoned_transaction_is_aborted_after_its_timeout(data_dir: Path) -> None:
    cfg = config(transaction_state_num_partitions=3)
    with ServerThread(str(data_dir), cfg) as server:
        producer = Producer(
            rdkafka(
                server.bootstrap,
                **{
                    "transactional.id": "slow",
                    "transaction.timeout.ms": 1500,
                    "socket.timeout.ms": 1500,
                    "message.timeout.ms": 1500,
                },
            )
        )
        producer.init_transactions(10)
        producer.begin_transaction()
        producer.produce("abandoned", b"left open")
        producer.flush(10)
        plain = Producer(rdkafka(server.bootstrap))
        plain.produce("abandoned", b"after it")
        assert plain.flush(10) == 0
        # held back by the open transaction, then released by its abort after ~1.5 s
        assert read(server.bootstrap, "abandoned", "read_committed", 1) == [b"after it"]
        with pytest.raises(KafkaException):
            producer.commit_transaction(5)  # fenced: its epoch was bumped by the abort
