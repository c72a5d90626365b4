"""Exactly-once across crashes: a consume-transform-produce loop of each real client
(confluent-kafka, aiokafka, kafka-python) runs against ``kafkalog serve`` while serve is SIGKILLed
at seeded points of a transaction's path (around AddPartitionsToTxn, the transactional Produce,
AddOffsetsToTxn, TxnOffsetCommit, EndTxn, between the states and markers EndTxn writes, inside
the recovery that finishes a half-ended transaction at start) and restarted on the same port.
Each client recovers as its documentation says (retry what is retriable, abort and rewind what
must be aborted, else a new producer with the same transactional id, which fences and aborts
the old one). Then the output read with read_committed holds each input record's transform
exactly once, in order, the group's committed offset is the input's end, and ``kafkalog verify``
accepts the directory.

The loop also aborts every third transaction on purpose (and rewinds), so aborts' markers and
states are on the path too. ``__consumer_offsets`` rolls every few commits and is cleaned
often, so rolls and the cleaner's swaps are kill points too. By default the kill-point
templates are dealt out among the clients (each runs once: 27 kill points in all);
``KAFKALOG_CRASH_POINTS=all`` runs every template for each client (the long mode, ~75 kill
points)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from crashing_serve import CrashingServe

from kafka_clients import consumer_settings, rdkafka
from kafkalog.cli.main import main as kafkalog

IN, OUT, GROUP = "in", "out", "transform"
BATCH = 3
SEED = 36

#: kill points, each a list of points met in a row (the second of a pair kills the restart
#: that recovers from the first); ``#N``: the N-th such event of one serve process
TEMPLATES: list[list[str]] = [
    ["before:AddPartitionsToTxn#1"],
    ["after:AddPartitionsToTxn#2"],
    ["before:Produce#1"],
    ["after:Produce#2"],
    ["before:AddOffsetsToTxn#2"],
    ["after:AddOffsetsToTxn#1"],
    ["before:TxnOffsetCommit#1"],
    ["after:TxnOffsetCommit#2"],
    ["before:EndTxn#2"],
    ["after:EndTxn#1"],
    ["state:PREPARE_COMMIT#1"],
    ["state:PREPARE_COMMIT#2", "marker#1"],  # killed again while recovery writes the markers
    ["marker#1"],  # between a transaction's two markers (its output and its offsets)
    ["marker#3"],
    ["state:COMPLETE_COMMIT#1"],
    ["state:PREPARE_ABORT#1"],
    ["state:PREPARE_ABORT#1", "marker#2"],
    ["state:COMPLETE_ABORT#1"],
    # ``__consumer_offsets`` in small segments, cleaned often (SERVE_ARGS): a roll of the
    # segment the transactional offsets go to, and the cleaner's swap of its segments, killed
    # (the seeded campaign, serve_campaign.py, found a kill mid-swap took the partition, and
    # every group in it, offline)
    ["before:roll#2"],
    ["roll#1"],
    ["before:swap#1"],
    ["after:swap#1"],
]
#: the internal offsets topic rolls every few commits and is cleaned every 0.2 s
SERVE_CONFIG = {"offsets_topic_segment_bytes": 1024, "log_cleaner_backoff_ms": 200}
#: librdkafka (2.x) "re-bootstraps" when every broker has been down a while: it decommissions the
#: broker handle, and a TxnOffsetCommit waiting for the group coordinator then waits on the
#: decommissioned handle until its timeout (seen after serve's restarts); one broker that comes
#: back on the same address needs no re-bootstrap
NO_REBOOTSTRAP = {"metadata.recovery.strategy": "none"}

#: every run starts with a crash whose InitProducerId answer is lost
FIRST = "after:InitProducerId#1"


def kill_points(client: str) -> list[str]:
    """The client's kill points: by default the templates shuffled (seeded) and dealt out
    among the clients, so that every template runs once; in the long mode every template, in a
    seeded order of the client's own."""
    clients = list(LOOPS)
    if os.environ.get("KAFKALOG_CRASH_POINTS") == "all":
        templates = list(TEMPLATES)
        random.Random(f"{SEED}-{client}").shuffle(templates)
    else:
        dealt = list(TEMPLATES)
        random.Random(SEED).shuffle(dealt)
        templates = dealt[clients.index(client) :: len(clients)]
    return [FIRST, *(point for template in templates for point in template)]


def transform(value: bytes) -> bytes:
    return b"out-" + value.removeprefix(b"in-")


def produce_input(bootstrap: str, n: int) -> None:
    producer = Producer(rdkafka(bootstrap, **{"message.timeout.ms": 30000}))
    for i in range(n):
        producer.produce(IN, f"in-{i}".encode())
    assert producer.flush(30) == 0


def check_exactly_once(bootstrap: str, n: int) -> None:
    consumer = Consumer(
        consumer_settings(bootstrap, "checker", **{"isolation.level": "read_committed"})
    )
    try:
        consumer.assign([TopicPartition(OUT, 0, OFFSET_BEGINNING)])
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(got) < n and time.monotonic() < deadline:
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        assert consumer.poll(0.5) is None
        assert got == [f"out-{i}".encode() for i in range(n)]
    finally:
        consumer.close()
    group = Consumer(consumer_settings(bootstrap, GROUP, **{"isolation.level": "read_committed"}))
    try:
        (committed,) = group.committed([TopicPartition(IN, 0)], 20)
        assert (committed.offset, committed.error) == (n, None), (committed, n)
    finally:
        group.close()


class Deadline:
    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def check(self, what: str) -> None:
        assert time.monotonic() < self.end, f"the loop did not finish in time ({what})"


# -- confluent-kafka ----------------------------------------------------------------------------
def confluent_loop(bootstrap: str, n: int, deadline: Deadline) -> None:
    attempts = 0
    tp = TopicPartition(IN, 0)
    while True:
        deadline.check("confluent-kafka")
        producer = Producer(
            rdkafka(
                bootstrap,
                **{
                    "transactional.id": "crash-confluent",
                    "transaction.timeout.ms": 15000,
                    **NO_REBOOTSTRAP,
                },
            )
        )
        consumer = Consumer(
            consumer_settings(
                bootstrap, GROUP, **{"isolation.level": "read_committed", **NO_REBOOTSTRAP}
            )
        )
        try:
            producer.init_transactions(30)
            consumer.assign([tp])  # from the group's committed offset
            while True:
                deadline.check("confluent-kafka")
                msgs = [m for m in consumer.consume(BATCH, 0.5) if m.error() is None]
                if not msgs:
                    (position,) = consumer.position([tp])
                    if position.offset >= n:
                        return
                    continue
                attempts += 1
                try:
                    producer.begin_transaction()
                    for m in msgs:
                        producer.produce(OUT, transform(m.value()))
                    end = TopicPartition(IN, 0, msgs[-1].offset() + 1)
                    producer.send_offsets_to_transaction(
                        [end], consumer.consumer_group_metadata(), 30
                    )
                    if attempts % 3 == 0:
                        producer.abort_transaction(30)
                        consumer.seek(TopicPartition(IN, 0, msgs[0].offset()))
                        continue
                    while True:
                        try:
                            producer.commit_transaction(30)
                            break
                        except KafkaException as e:
                            if not e.args[0].retriable():
                                raise
                except KafkaException as e:
                    if not e.args[0].txn_requires_abort():
                        raise
                    producer.abort_transaction(30)
                    consumer.seek(TopicPartition(IN, 0, msgs[0].offset()))
        except KafkaException:
            pass  # fatal: a new producer (fencing this one) and a consumer from the committed
        finally:
            consumer.close()


# -- aiokafka -----------------------------------------------------------------------------------
def aiokafka_loop(bootstrap: str, n: int, deadline: Deadline) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as AioTP
    from aiokafka.errors import KafkaError

    tp = AioTP(IN, 0)

    async def run() -> None:
        attempts = 0
        while True:
            deadline.check("aiokafka")
            producer = AIOKafkaProducer(
                bootstrap_servers=bootstrap,
                transactional_id="crash-aiokafka",
                transaction_timeout_ms=15000,
                request_timeout_ms=5000,
                retry_backoff_ms=50,
            )
            consumer = AIOKafkaConsumer(
                bootstrap_servers=bootstrap,
                group_id=GROUP,
                isolation_level="read_committed",
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                request_timeout_ms=5000,
                retry_backoff_ms=50,
            )
            try:
                await asyncio.wait_for(producer.start(), 30)
                await asyncio.wait_for(consumer.start(), 30)
                consumer.assign([tp])
                while True:
                    deadline.check("aiokafka")
                    got = await consumer.getmany(tp, timeout_ms=500, max_records=BATCH)
                    msgs = got.get(tp, [])
                    if not msgs:
                        if await consumer.position(tp) >= n:
                            return
                        continue
                    attempts += 1
                    await producer.begin_transaction()
                    try:
                        for m in msgs:
                            await producer.send_and_wait(OUT, transform(m.value))
                        end = {tp: msgs[-1].offset + 1}
                        await producer.send_offsets_to_transaction(end, GROUP)
                    except KafkaError:
                        await producer.abort_transaction()
                        raise
                    if attempts % 3 == 0:
                        await producer.abort_transaction()
                        consumer.seek(tp, msgs[0].offset)
                    else:
                        await producer.commit_transaction()
            except (TimeoutError, KafkaError, OSError):
                pass  # a new producer (fencing this one) and a consumer from the committed
            finally:
                for client in (consumer, producer):
                    with contextlib.suppress(TimeoutError, KafkaError, OSError):
                        await asyncio.wait_for(client.stop(), 10)

    asyncio.run(run())


# -- kafka-python -------------------------------------------------------------------------------
def kafka_python_loop(bootstrap: str, n: int, deadline: Deadline) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP
    from kafka.errors import KafkaError
    from kafka.structs import OffsetAndMetadata

    tp = KTP(IN, 0)
    attempts = 0
    while True:
        deadline.check("kafka-python")
        producer: Any = None
        consumer: Any = None
        try:
            producer = KafkaProducer(
                bootstrap_servers=bootstrap,
                transactional_id="crash-kafka-python",
                transaction_timeout_ms=15000,
                request_timeout_ms=5000,
                retry_backoff_ms=50,
                reconnect_backoff_ms=20,
                reconnect_backoff_max_ms=200,
                max_block_ms=30000,
            )
            producer.init_transactions()
            consumer = KafkaConsumer(
                bootstrap_servers=bootstrap,
                group_id=GROUP,
                isolation_level="read_committed",
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                request_timeout_ms=5000,
                retry_backoff_ms=50,
                reconnect_backoff_ms=20,
                reconnect_backoff_max_ms=200,
            )
            consumer.assign([tp])
            while True:
                deadline.check("kafka-python")
                msgs = consumer.poll(500, max_records=BATCH).get(tp, [])
                if not msgs:
                    if consumer.position(tp) >= n:
                        return
                    continue
                attempts += 1
                producer.begin_transaction()
                for m in msgs:
                    producer.send(OUT, transform(m.value))
                end = {tp: OffsetAndMetadata(msgs[-1].offset + 1, "", -1)}
                producer.send_offsets_to_transaction(end, GROUP)
                if attempts % 3 == 0:
                    producer.abort_transaction()
                    consumer.seek(tp, msgs[0].offset)
                else:
                    producer.commit_transaction()
        except KafkaError:
            pass  # a new producer (fencing this one) and a consumer from the committed
        finally:
            if consumer is not None:
                consumer.close()
            if producer is not None:
                producer.close(timeout=1)


LOOPS: dict[str, Callable[[str, int, Deadline], None]] = {
    "confluent-kafka": confluent_loop,
    "aiokafka": aiokafka_loop,
    "kafka-python": kafka_python_loop,
}


@pytest.mark.parametrize("client", list(LOOPS))
def test_exactly_once_through_kill_points(client: str, data_dir: Path) -> None:
    points = kill_points(client)
    n = BATCH * (3 * len(points) + 3)
    serve = CrashingServe(data_dir, points, config=SERVE_CONFIG)
    try:
        serve.wait_ready()
        produce_input(serve.bootstrap, n)
        LOOPS[client](serve.bootstrap, n, Deadline(40 + 12 * len(points)))
        assert serve.hit == points, f"killed at {serve.hit}, of {points}"
        check_exactly_once(serve.bootstrap, n)
    finally:
        serve.stop()
    # what serve left after all those crashes and a clean stop verifies
    assert kafkalog(["verify", str(data_dir)]) == 0
