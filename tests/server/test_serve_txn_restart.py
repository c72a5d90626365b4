"""Transactional offsets across a SIGKILL of ``kafkalog serve`` (issue 36): offsets sent to a
transaction are in ``__consumer_offsets`` before TxnOffsetCommit is answered, so after a crash
and restart they are pending again — not yet the group's committed offset, unstable to a
read_committed consumer — and then committed with the transaction (visible), dropped with its
abort, or, for a transaction nobody ends, dropped when its timeout aborts it, as Kafka's
coordinators do. A crash inside EndTxn (after PREPARE_COMMIT, between its markers, or again
while the restart finishes it) never stops serve from starting, and the transaction ends
committed."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from crashing_serve import CrashingServe

from kafka_clients import consumer_settings, rdkafka, wait_until

NO_REBOOTSTRAP = {"metadata.recovery.strategy": "none"}  # see test_serve_txn_crash.py


def transactional(bootstrap: str, txn_id: str, timeout_ms: int = 30000) -> Producer:
    producer = Producer(
        rdkafka(
            bootstrap,
            **{
                "transactional.id": txn_id,
                "transaction.timeout.ms": timeout_ms,
                "message.timeout.ms": min(timeout_ms, 10000),
            },
            **NO_REBOOTSTRAP,
        )
    )
    producer.init_transactions(20)
    return producer


def group_consumer(bootstrap: str, group: str, isolation: str) -> Consumer:
    return Consumer(
        consumer_settings(bootstrap, group, **{"isolation.level": isolation}, **NO_REBOOTSTRAP)
    )


def committed(bootstrap: str, group: str) -> int:
    """The group's committed offset of ``in-0`` as a read_uncommitted consumer sees it (no
    require_stable: pending transactional offsets are not waited for)."""
    consumer = group_consumer(bootstrap, group, "read_uncommitted")
    try:
        (tp,) = consumer.committed([TopicPartition("in", 0)], 20)
        assert tp.error is None
        return int(tp.offset)
    finally:
        consumer.close()


def stable(bootstrap: str, group: str, timeout: float) -> int | None:
    """The offset a read_committed consumer gets (librdkafka asks with require_stable and waits
    while the broker answers UNSTABLE_OFFSET_COMMIT); None if it is still unstable."""
    consumer = group_consumer(bootstrap, group, "read_committed")
    try:
        (tp,) = consumer.committed([TopicPartition("in", 0)], timeout)
        return int(tp.offset)
    except KafkaException:
        return None
    finally:
        consumer.close()


def read_committed(bootstrap: str, topic: str, count: int) -> list[bytes]:
    consumer = group_consumer(bootstrap, "reader", "read_committed")
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got: list[bytes] = []
        deadline = time.monotonic() + 15
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        assert consumer.poll(0.5) is None
        return got
    finally:
        consumer.close()


def open_transaction(
    producer: Producer, group: str, topic: str, bootstrap: str, end: int = 10
) -> None:
    """Ten records to ``topic`` and ``in-0``'s offset ``end`` sent to the transaction for
    ``group``, all acknowledged."""
    meta = group_consumer(bootstrap, group, "read_committed")
    try:
        producer.begin_transaction()
        for i in range(10):
            producer.produce(topic, f"{topic}-{i}".encode())
        assert producer.flush(20) == 0
        producer.send_offsets_to_transaction(
            [TopicPartition("in", 0, end)], meta.consumer_group_metadata(), 20
        )
    finally:
        meta.close()


def test_pending_offsets_after_a_crash_commit_abort_and_time_out(data_dir: Path) -> None:
    serve = CrashingServe(data_dir, [])
    try:
        serve.wait_ready()
        bootstrap = serve.bootstrap
        plain = Producer(rdkafka(bootstrap))
        for i in range(20):
            plain.produce("in", f"in-{i}".encode())
        assert plain.flush(20) == 0
        for group in ("aborted", "abandoned"):  # an earlier plain commit each
            consumer = group_consumer(bootstrap, group, "read_committed")
            consumer.commit(offsets=[TopicPartition("in", 0, 2)], asynchronous=False)
            consumer.close()

        to_commit = transactional(bootstrap, "to-commit")
        open_transaction(to_commit, "committed", "out-committed", bootstrap)
        to_abort = transactional(bootstrap, "to-abort")
        open_transaction(to_abort, "aborted", "out-aborted", bootstrap)
        abandoned = transactional(bootstrap, "abandoned", timeout_ms=6000)
        open_transaction(abandoned, "abandoned", "out-abandoned", bootstrap)

        serve.crash()

        # pending again after the restart: not the committed offset, and unstable
        assert committed(bootstrap, "committed") == -1001  # OFFSET_INVALID: none yet
        assert committed(bootstrap, "aborted") == 2
        assert stable(bootstrap, "committed", 1.0) is None

        to_commit.commit_transaction(30)
        assert committed(bootstrap, "committed") == 10
        assert stable(bootstrap, "committed", 10) == 10
        assert read_committed(bootstrap, "out-committed", 10) == [
            f"out-committed-{i}".encode() for i in range(10)
        ]

        to_abort.abort_transaction(30)
        assert stable(bootstrap, "aborted", 10) == 2
        assert read_committed(bootstrap, "out-aborted", 0) == []

        # nobody ends the third: its timeout (counted from its start, kept in
        # __transaction_state) aborts it, and its offsets are dropped
        assert wait_until(lambda: stable(bootstrap, "abandoned", 1.0) == 2, 20)
        assert read_committed(bootstrap, "out-abandoned", 0) == []
        with pytest.raises(KafkaException):
            abandoned.commit_transaction(10)  # fenced by the abort's epoch bump

        serve.crash()  # and replayed from the log as they ended
        assert [committed(bootstrap, g) for g in ("committed", "aborted", "abandoned")] == [
            10,
            2,
            2,
        ]
    finally:
        serve.stop()


def test_a_crash_inside_end_txn_restarts_and_commits(data_dir: Path) -> None:
    # the first commit: killed after PREPARE_COMMIT, then again while the restart writes its
    # first marker; the second: killed between its two markers (the output's written, the
    # offsets' not), the restart having written the first commit's two markers again
    points = ["state:PREPARE_COMMIT#1", "marker#1", "marker#3"]
    serve = CrashingServe(data_dir, points)
    try:
        serve.wait_ready()
        bootstrap = serve.bootstrap
        producer = transactional(bootstrap, "ending")
        for end in (10, 20):
            open_transaction(producer, "ending", "out", bootstrap, end)
            producer.commit_transaction(60)  # killed inside; the client retries EndTxn
        assert serve.hit == points
        assert committed(bootstrap, "ending") == 20
        assert read_committed(bootstrap, "out", 20) == [
            f"out-{i}".encode() for _ in range(2) for i in range(10)
        ]
    finally:
        serve.stop()
