"""Consumer-group protocols beyond the classic dynamic member: a KIP-848 consumer
(``group.protocol=consumer``) fails at once, never silently; static membership
(``group.instance.id``, KIP-345) works as Kafka's: a member restarted within its session timeout
keeps its assignment without a rebalance, and the member id it replaced is fenced."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from test_serve_groups import coordinator, join_body, request, sync

from kafka_clients import consumer_settings
from kafkalog.server import ServerThread
from kafkalog.server import errors as E
from kafkalog.server.groups import STABLE


def produce(bootstrap: str, topic: str = "t", partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(10)
    producer = Producer({"bootstrap.servers": bootstrap})
    for p in range(partitions):
        producer.produce(topic, b"x%d" % p, partition=p)
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
    produce(server.bootstrap)
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


class Static:
    """A confluent-kafka consumer with a group.instance.id, recording its rebalance events."""

    def __init__(self, bootstrap: str, instance: str) -> None:
        settings = consumer_settings(bootstrap, "static", **{"group.instance.id": instance})
        self.consumer = Consumer(settings)
        self.events: list[tuple[str, list[int]]] = []
        self.consumer.subscribe(
            ["s"],
            on_assign=lambda c, ps: self.events.append(("assign", [p.partition for p in ps])),
            on_revoke=lambda c, ps: self.events.append(("revoke", [p.partition for p in ps])),
        )

    def poll_until(self, done: Any, within: float = 20) -> None:
        deadline = time.monotonic() + within
        while not done() and time.monotonic() < deadline:
            self.consumer.poll(0.1)
        assert done(), self.events


def test_static_member_restarted_in_its_session_keeps_its_assignment(
    server: ServerThread,
) -> None:
    produce(server.bootstrap, "s", 4)
    one, two = Static(server.bootstrap, "i1"), Static(server.bootstrap, "i2")
    try:

        def both() -> bool:
            # each member holds some partitions, together all four: the rebalance that let the
            # second member in is done (the first alone holds all four until then)
            mine, theirs = len(one.consumer.assignment()), len(two.consumer.assignment())
            return mine > 0 and theirs > 0 and mine + theirs == 4

        deadline = time.monotonic() + 30
        while not both() and time.monotonic() < deadline:
            one.consumer.poll(0.1)
            two.consumer.poll(0.1)
        assert both(), (one.events, two.events)
        kept = sorted(p.partition for p in one.consumer.assignment())
        assert kept and len(kept) < 4
        broker = server.server.broker
        assert broker is not None
        group = broker.groups.groups["static"]
        generation = group.generation
        events_of_two = list(two.events)
        one.consumer.close()  # a static member sends no LeaveGroup: its session holds its place
        again = Static(server.bootstrap, "i1")
        try:
            again.poll_until(lambda: bool(again.consumer.assignment()))
            for _ in range(10):  # the other member goes on, and sees no rebalance
                two.consumer.poll(0.1)
                again.consumer.poll(0.1)
            assert sorted(p.partition for p in again.consumer.assignment()) == kept
            assert group.generation == generation and group.state == STABLE
            assert two.events == events_of_two
            assert len(group.members) == 2
            assert {m.group_instance_id for m in group.members.values()} == {"i1", "i2"}
        finally:
            again.consumer.close()
    finally:
        two.consumer.close()


def test_static_member_with_kafka_python(server: ServerThread) -> None:
    from kafka import KafkaConsumer

    produce(server.bootstrap)
    consumer = KafkaConsumer(
        "t",
        bootstrap_servers=server.bootstrap,
        group_id="static-kp",
        group_instance_id="kp1",
        auto_offset_reset="earliest",
        consumer_timeout_ms=5000,
    )
    try:
        assert [m.value for m in consumer] == [b"x0"]
        broker = server.server.broker
        assert broker is not None
        members = broker.groups.groups["static-kp"].members.values()
        assert [m.group_instance_id for m in members] == ["kp1"]
    finally:
        consumer.close()


def static_join(member_id: str = "") -> Any:
    body = join_body(member_id)
    return request(
        11,
        5,
        group_id=body.group_id,
        session_timeout=body.session_timeout,
        rebalance_timeout=body.rebalance_timeout,
        member_id=member_id,
        group_instance_id="i1",
        protocol_type="consumer",
        protocols=[{"name": "range", "metadata": b"range"}],
    )


def test_the_replaced_member_id_is_fenced_and_an_expired_one_forgotten() -> None:
    async def main() -> None:
        c = coordinator()
        c.start()
        try:
            first = await c.join(static_join(), 5, "client", "127.0.0.1")
            assert first["error_code"] == E.NONE  # no MEMBER_ID_REQUIRED round
            old = first["member_id"]
            assert (await sync(c, old, 1, {old: b"mine"}))["assignment"] == b"mine"
            second = await c.join(static_join(), 5, "client", "127.0.0.1")
            new = second["member_id"]
            assert second["error_code"] == E.NONE and new != old
            assert second["generation_id"] == 1 and second["leader"] == new
            assert (await sync(c, new, 1, {}))["assignment"] == b"mine"
            body = request(
                12, 3, group_id="g", generation_id=1, member_id=old, group_instance_id="i1"
            )
            assert (await c.heartbeat(body, 3))["error_code"] == E.FENCED_INSTANCE_ID
            rejoin = await c.join(static_join(old), 5, "client", "127.0.0.1")
            assert rejoin["error_code"] == E.FENCED_INSTANCE_ID
            await asyncio.sleep(0.5)  # the 300 ms session passes without a heartbeat
            assert not c.groups["g"].members and not c.groups["g"].static
        finally:
            await c.stop()

    asyncio.run(main())
