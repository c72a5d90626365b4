"""A broker's duties in ``kafkalog serve`` (issue 25) as each of the three real clients sees
them, for the points the other ``test_serve_*`` files prove with one or two clients only:
validation (a keyless record on a compacted topic, all three clients), retention under a
reading confluent-kafka and aiokafka consumer, configs altered through aiokafka's and
kafka-python's admin clients, ACLs against aiokafka, static membership with aiokafka and
kafka-python, and the background cleaner read through kafka-python and aiokafka. Each client is
used through its public API only, unchanged."""

from __future__ import annotations

import asyncio
import contextlib
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
from kafkalog.log import Log
from kafkalog.server import ServerThread


def create_topic(bootstrap: str, name: str, configs: dict[str, str], partitions: int = 1) -> None:
    admin = AdminClient(rdkafka(bootstrap))
    admin.create_topics([NewTopic(name, partitions, config=configs)])[name].result(10)


def stored(data_dir: Path, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    """What partition 0 holds, read from the data directory (read-only, beside the server)."""
    with Log(data_dir / f"{topic}-0", writable=False) as log:
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


# -- 2. retention while a consumer reads ----------------------------------------------------------

RETENTION = config(
    log_retention_check_interval_ms=100,
    topic_defaults={"retention.ms": "2000", "segment.bytes": "2048"},
)
RECORDS = 150


def produce_one_batch_each(bootstrap: str, topic: str) -> float:
    """``RECORDS`` records stamped now, one batch each: several segments that all pass
    ``retention.ms`` a couple of seconds later. Returns when (``time.monotonic()``) every
    segment that retention will take has been taken: then the log start stays put."""
    producer = Producer(rdkafka(bootstrap, **{"linger.ms": 0}))
    for i in range(RECORDS):
        producer.produce(topic, b"value %d" % i)
        producer.flush(10)
    retention_s = int(RETENTION.topic_defaults["retention.ms"]) / 1000
    return time.monotonic() + retention_s + 0.5


def read_on(offsets: list[int], read_before: int, start: int) -> None:
    """After the pause, the consumer may still hand out what it had fetched before (offsets
    below ``read_before + 1``); then it goes on from the new log start, with no gap, to the
    fresh record at ``RECORDS``."""
    later = [o for o in offsets if o > read_before]
    assert later == list(range(start, RECORDS + 1)), (start, offsets[:5], offsets[-3:])


def test_retention_under_a_confluent_kafka_consumer(data_dir: Path) -> None:
    """librdkafka reads a few records, pauses while retention deletes the segments under its
    position, and on resuming gets OFFSET_OUT_OF_RANGE, which ``auto.offset.reset=earliest``
    turns into a reset to the new log start: it reads on from there, no error surfaced."""
    with ServerThread(str(data_dir), RETENTION) as server:
        boot = server.bootstrap
        settled = produce_one_batch_each(boot, "aged")
        consumer = Consumer(consumer_settings(boot, "retention-ck"))
        tp = CkTopicPartition("aged", 0, 0)
        consumer.assign([tp])
        offsets: list[int] = []
        errors: list[Any] = []
        try:
            while len(offsets) < 5:
                msg = consumer.poll(0.2)
                if msg is not None and msg.error() is None:
                    offsets.append(msg.offset())
            assert offsets == [0, 1, 2, 3, 4]
            consumer.pause([tp])
            low = lambda: consumer.get_watermark_offsets(tp, timeout=5)[0]  # noqa: E731
            assert wait_until(lambda: time.monotonic() > settled and low() > 10, 15)
            start = low()
            producer = Producer(rdkafka(boot))
            producer.produce("aged", b"fresh")
            assert producer.flush(10) == 0
            consumer.resume([tp])
            deadline = time.monotonic() + 15
            while offsets[-1] != RECORDS and time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                if msg.error() is not None:
                    errors.append(msg.error())
                else:
                    offsets.append(msg.offset())
        finally:
            consumer.close()
        read_on(offsets, 4, start)
        assert errors == []


def test_retention_under_an_aiokafka_consumer(data_dir: Path) -> None:
    """aiokafka reads a few records, pauses while retention deletes the segments under its
    position, and on resuming its fetch gets OFFSET_OUT_OF_RANGE, which
    ``auto_offset_reset="earliest"`` turns into a reset to the new log start."""

    async def main(boot: str, settled: float) -> tuple[list[int], int]:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=boot,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            fetch_max_wait_ms=100,
            max_partition_fetch_bytes=64,  # a batch a fetch: little read ahead of the position
        )
        await consumer.start()
        tp = AioTopicPartition("aged", 0)
        try:
            consumer.assign([tp])
            offsets = [(await asyncio.wait_for(consumer.getone(), 10)).offset for _ in range(5)]
            assert offsets == [0, 1, 2, 3, 4]
            consumer.pause(tp)

            async def low() -> int:
                return int((await consumer.beginning_offsets([tp]))[tp])

            deadline = time.monotonic() + 15
            while not (time.monotonic() > settled and await low() > 10):
                assert time.monotonic() < deadline, "retention did not move the log start"
                await asyncio.sleep(0.05)
            start = await low()
            producer = AIOKafkaProducer(bootstrap_servers=boot)
            await producer.start()
            try:
                await producer.send_and_wait("aged", b"fresh")
            finally:
                await producer.stop()
            consumer.resume(tp)
            deadline = time.monotonic() + 15
            while offsets[-1] != RECORDS and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    offsets.extend(r.offset for r in records)
            return offsets, start
        finally:
            await consumer.stop()

    with ServerThread(str(data_dir), RETENTION) as server:
        settled = produce_one_batch_each(server.bootstrap, "aged")
        offsets, start = asyncio.run(main(server.bootstrap, settled))
    read_on(offsets, 4, start)


# -- 3. configs through aiokafka's admin client ---------------------------------------------------


def test_aiokafka_admin_alters_and_describes_topic_configs(data_dir: Path) -> None:
    """aiokafka's AIOKafkaAdminClient sends the legacy AlterConfigs (the whole set of
    overrides) and DescribeConfigs: a lowered ``segment.bytes`` rolls the next produces, a
    lowered ``retention.ms`` lets the next retention pass delete, both described as dynamic
    topic configs; an invalid value is refused with INVALID_CONFIG and changes nothing."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    part = data_dir / "cfg-0"
    old = int(time.time() * 1000) - 60_000  # a minute old: kept under the default 7 days

    def segments() -> int:
        return len(list(part.glob("*.log")))

    async def produce(producer: AIOKafkaProducer, count: int) -> None:
        for i in range(count):  # one batch each
            await producer.send_and_wait("cfg", b"v" * 200 + b"%d" % i, timestamp_ms=old)

    def topic(configs: dict[str, Any]) -> ConfigResource:
        return ConfigResource(ConfigResourceType.TOPIC, "cfg", configs)

    async def alter(admin: AIOKafkaAdminClient, configs: dict[str, str]) -> tuple[int, Any]:
        [response] = await admin.alter_configs([topic(configs)])
        [(code, message, _, name)] = response.resources
        assert name == "cfg"
        return code, message

    async def described(admin: AIOKafkaAdminClient) -> dict[str, tuple[str, int]]:
        wanted: dict[str, Any] = {"segment.bytes": None, "retention.ms": None}
        [response] = await admin.describe_configs([topic(wanted)])
        [(code, _, _, _, entries)] = response.resources
        assert code == 0
        return {name: (value, source) for name, value, _, source, _, _ in entries}

    async def main(boot: str) -> int:
        admin = AIOKafkaAdminClient(bootstrap_servers=boot)
        producer = AIOKafkaProducer(bootstrap_servers=boot, linger_ms=0)
        consumer = AIOKafkaConsumer(bootstrap_servers=boot)
        await admin.start()
        await producer.start()
        await consumer.start()
        tp = AioTopicPartition("cfg", 0)
        try:
            await admin.create_topics([NewTopic("cfg", 1, 1)])
            await produce(producer, 5)
            assert segments() == 1  # 1 GiB segments
            assert await alter(admin, {"segment.bytes": "1024"}) == (0, None)
            await produce(producer, 20)
            assert segments() >= 4  # rolled at 1 KiB
            await asyncio.sleep(0.5)  # retention passes at the default retention.ms: none goes
            assert (await consumer.beginning_offsets([tp]))[tp] == 0
            code, message = await alter(admin, {"segment.bytes": "1024", "retention.ms": "x"})
            assert code == 40 and "retention.ms" in message  # INVALID_CONFIG
            assert await described(admin) == {
                "segment.bytes": ("1024", 1),  # DYNAMIC_TOPIC_CONFIG
                "retention.ms": ("604800000", 5),  # DEFAULT_CONFIG: the refusal changed nothing
            }
            # the legacy API replaces every override: segment.bytes is given again
            ok = await alter(admin, {"segment.bytes": "1024", "retention.ms": "1000"})
            assert ok == (0, None)
            assert await described(admin) == {
                "segment.bytes": ("1024", 1),
                "retention.ms": ("1000", 1),
            }
            deadline = time.monotonic() + 15
            while (start := (await consumer.beginning_offsets([tp]))[tp]) == 0:
                assert time.monotonic() < deadline, "retention.ms=1000 deleted nothing"
                await asyncio.sleep(0.05)
            return int(start)
        finally:
            await consumer.stop()
            await producer.stop()
            await admin.close()

    settings = config(log_retention_check_interval_ms=100)
    with ServerThread(str(data_dir), settings) as server:
        start = asyncio.run(main(server.bootstrap))
        assert start > 0 and not (part / "00000000000000000000.log").exists()


def test_kafka_python_admin_alters_topic_configs_and_they_take_effect(data_dir: Path) -> None:
    """kafka-python's admin client (IncrementalAlterConfigs, which it prefers when the broker
    offers it): a lowered ``segment.bytes`` rolls the next produces, a lowered ``retention.ms``
    lets the next retention pass delete the old segments, APPEND adds to a list config,
    reset_configs (DELETE) drops an override; an invalid value is refused with its reason."""
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource, ConfigResourceType
    from kafka.admin import NewTopic as KpNewTopic

    part = data_dir / "kcfg-0"
    old = int(time.time() * 1000) - 60_000  # a minute old: kept under the default 7 days

    def topic(configs: Any) -> ConfigResource:
        return ConfigResource(ConfigResourceType.TOPIC, "kcfg", configs)

    def produce(count: int) -> None:
        producer = KafkaProducer(bootstrap_servers=server.bootstrap, linger_ms=0)
        for i in range(count):  # one batch each
            producer.send("kcfg", b"v" * 200 + b"%d" % i, timestamp_ms=old).get(10)
        producer.close()

    with ServerThread(str(data_dir), config(log_retention_check_interval_ms=100)) as server:
        admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
        consumer = KafkaConsumer(bootstrap_servers=server.bootstrap)
        tp = KpTopicPartition("kcfg", 0)
        try:
            admin.create_topics([KpNewTopic("kcfg", 1, 1)])
            produce(5)
            assert len(list(part.glob("*.log"))) == 1
            assert admin.alter_configs([topic({"segment.bytes": "1024"})]) == {
                "topic": {"kcfg": "OK"}
            }
            produce(20)
            assert len(list(part.glob("*.log"))) >= 4
            refused = admin.alter_configs([topic({"retention.ms": "soon"})])["topic"]["kcfg"]
            assert "InvalidConfigurationError" in str(refused) and "retention.ms" in str(refused)
            assert consumer.beginning_offsets([tp])[tp] == 0
            admin.alter_configs([topic({"retention.ms": "1000"})])
            assert wait_until(lambda: consumer.beginning_offsets([tp])[tp] > 0, 15)
            admin.alter_configs([topic({"cleanup.policy": ("APPEND", "compact")})])
            admin.reset_configs([topic(["retention.ms"])])
            described = admin.describe_configs([topic(None)])["topic"]["kcfg"]
            assert described["cleanup.policy"]["value"] == "delete,compact"
            assert described["segment.bytes"]["value"] == "1024"
            assert described["segment.bytes"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
            retention = described.get("retention.ms", {"config_source": "DEFAULT_CONFIG"})
            assert retention["config_source"] == "DEFAULT_CONFIG"
        finally:
            consumer.close()
            admin.close()


# -- 4. ACLs against aiokafka ------------------------------------------------------------------


def test_aiokafka_unauthorised_is_refused_and_authorised_succeeds(data_dir: Path) -> None:
    """SASL/PLAIN principals with the authorizer on (the setup of ``test_serve_acls``):
    aiokafka's producer and consumer without ACLs fail at once with
    TopicAuthorizationFailedError (a group member without READ on its group with
    GroupAuthorizationFailedError); with the ACLs granted the same calls succeed."""
    from confluent_kafka.admin import AclOperation, ResourcePatternType, ResourceType
    from test_serve_acls import USERS, admin_of, allow, create, make_topic, secured

    def auth(user: str) -> dict[str, Any]:
        return {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN",
            "sasl_plain_username": user,
            "sasl_plain_password": USERS[user],
        }

    async def produce(boot: str, user: str) -> int:
        producer = AIOKafkaProducer(bootstrap_servers=boot, request_timeout_ms=5000, **auth(user))
        await producer.start()
        try:
            return (await producer.send_and_wait("orders", b"v")).offset
        finally:
            await producer.stop()

    async def consume(boot: str, user: str, group: str | None) -> bytes | None:
        # the topic given to the constructor, as aiokafka's users do: start() looks it up and
        # raises its refusal. (A consumer that assign()s or subscribe()s after start() only
        # logs the refusal and waits, against Kafka too, whose metadata for an unauthorised
        # topic lists no partitions.)
        consumer = AIOKafkaConsumer(
            "orders",
            bootstrap_servers=boot,
            group_id=group,
            auto_offset_reset="earliest",
            **auth(user),
        )
        try:
            await consumer.start()
            return (await asyncio.wait_for(consumer.getone(), 10)).value
        finally:
            await consumer.stop()

    def refused(call: Any, error: type[Exception]) -> str:
        started = time.monotonic()
        with pytest.raises(error) as failed:
            asyncio.run(call)
        assert time.monotonic() - started < 5  # at once, not at a timeout
        return str(failed.value)

    with ServerThread(str(data_dir), secured()) as server:
        boot = server.bootstrap
        make_topic(boot, "orders")  # the super user may create
        topic_denied = aio_errors.TopicAuthorizationFailedError
        assert "orders" in refused(produce(boot, "alice"), topic_denied)
        assert "orders" in refused(consume(boot, "bob", "readers"), topic_denied)
        assert "orders" in refused(consume(boot, "bob", None), topic_denied)
        admin = admin_of(boot)
        create(admin, [allow("orders", "bob", AclOperation.READ)])
        # READ on the topic, none on the group: refused at the group
        group_denied = aio_errors.GroupAuthorizationFailedError
        assert "readers" in refused(consume(boot, "bob", "readers"), group_denied)
        group_acl = allow(
            "read", "bob", AclOperation.READ, ResourceType.GROUP, ResourcePatternType.PREFIXED
        )
        create(admin, [allow("orders", "alice", AclOperation.WRITE), group_acl])
        assert asyncio.run(produce(boot, "alice")) == 0
        assert asyncio.run(consume(boot, "bob", "readers")) == b"v"
        assert asyncio.run(consume(boot, "bob", None)) == b"v"
        # alice may write, not read
        assert "orders" in refused(consume(boot, "alice", None), topic_denied)


# -- 5. static membership with aiokafka ----------------------------------------------------------
# (A KIP-848 consumer cannot be asked of aiokafka 0.14 or kafka-python 3: neither has a
# ``group.protocol`` setting nor sends ConsumerGroupHeartbeat; they speak the classic protocol
# only. The fail-fast answer to a KIP-848 client is proven with librdkafka in
# test_serve_group_protocols.py.)


def test_aiokafka_static_member_restarted_in_its_session_keeps_its_assignment(
    server: ServerThread,
) -> None:
    """Two aiokafka members with ``group_instance_id`` share four partitions; the group's
    leader stops (a static member sends no LeaveGroup) and a new consumer with the same
    instance id starts within the session timeout: it gets the same partitions, the group
    keeps its generation, and the other member's rebalance listener is never called again."""
    from aiokafka import ConsumerRebalanceListener
    from test_serve_group_protocols import produce as create_and_fill

    from kafkalog.server.groups import STABLE

    class Events(ConsumerRebalanceListener):
        def __init__(self, events: list[tuple[str, str, list[int]]], name: str) -> None:
            self.events, self.name = events, name

        async def on_partitions_revoked(self, revoked: Any) -> None:
            self.events.append((self.name, "revoke", sorted(p.partition for p in revoked)))

        async def on_partitions_assigned(self, assigned: Any) -> None:
            self.events.append((self.name, "assign", sorted(p.partition for p in assigned)))

    events: list[tuple[str, str, list[int]]] = []

    async def member(instance: str, name: str) -> AIOKafkaConsumer:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=server.bootstrap,
            group_id="static-aio",
            group_instance_id=instance,
            session_timeout_ms=6000,
            heartbeat_interval_ms=100,
            enable_auto_commit=False,
        )
        await consumer.start()
        consumer.subscribe(["s"], listener=Events(events, name))
        return consumer

    def held(consumer: AIOKafkaConsumer) -> list[int]:
        return sorted(p.partition for p in consumer.assignment())

    async def until(done: Any, within: float = 20) -> None:
        deadline = time.monotonic() + within
        while not done():
            assert time.monotonic() < deadline, events
            await asyncio.sleep(0.05)

    async def main() -> None:
        broker = server.server.broker
        assert broker is not None
        members = {i: await member(i, i) for i in ("i1", "i2")}
        again = None
        try:
            # each holds some partitions, together all four: the second join's rebalance is done
            one, two = members.values()
            await until(lambda: held(one) and held(two) and len(held(one) + held(two)) == 4)
            group = broker.groups.groups["static-aio"]
            await asyncio.sleep(0.3)  # a few heartbeats: the group stays as it is
            # the leader restarts: the harder case (it must not assign again, KIP-814)
            assert group.leader is not None
            leader = group.leader.split("-")[0]
            other = "i2" if leader == "i1" else "i1"
            generation, kept = group.generation, held(members[leader])
            events_of_other = [e for e in events if e[0] == other]
            await members[leader].stop()
            again = await member(leader, "again")
            await until(lambda: bool(held(again)))
            await asyncio.sleep(0.5)  # heartbeats of both: no rebalance follows
            assert held(again) == kept
            assert held(members[other]) == sorted({0, 1, 2, 3} - set(kept))
            assert group.generation == generation and group.state == STABLE
            assert [e for e in events if e[0] == other] == events_of_other
            assert sorted(m.group_instance_id for m in group.members.values()) == ["i1", "i2"]
        finally:
            for consumer in (again, *members.values()):
                if consumer is not None:
                    await consumer.stop()

    create_and_fill(server.bootstrap, "s", 4)
    asyncio.run(main())


# -- 6. the cleaner, read through kafka-python and aiokafka -------------------------------------


@pytest.mark.usefixtures("compiled_cleaner")  # its wait for a cleaning: see the fixture
def test_kafka_python_and_aiokafka_read_the_latest_value_per_key_after_cleaning(
    data_dir: Path,
) -> None:
    """A compacted topic written in many segments (two keys ending in a tombstone), cleaned by
    the server in the background: kafka-python and aiokafka, each from offset 0, read far fewer
    records than were written, over the offset gaps compaction leaves, and end with the latest
    value of every key (None for a deleted one)."""
    settings = config(log_cleaner_backoff_ms=100)
    part = data_dir / "table-0"
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    written = 2000

    def size() -> int:
        total = 0
        for path in part.glob("*.log"):
            with contextlib.suppress(FileNotFoundError):  # swapped out by the cleaner
                total += path.stat().st_size
        return total

    def check(read: list[tuple[int, bytes | None, bytes | None]]) -> None:
        offsets = [offset for offset, _, _ in read]
        assert offsets == sorted(set(offsets))  # in order, each once, over the gaps
        assert len(read) < written / 4, len(read)  # what the cleaner removed is not served
        last: dict[bytes, tuple[int, bytes | None]] = {}
        for offset, key, value in read:
            assert key is not None
            last[key] = (offset, value)
        assert last == latest

    with ServerThread(str(data_dir), settings) as server:
        boot = server.bootstrap
        create_topic(
            boot,
            "table",
            {
                "cleanup.policy": "compact",
                "segment.bytes": "4096",
                "min.cleanable.dirty.ratio": "0.01",
            },
        )
        producer = KafkaProducer(bootstrap_servers=boot, linger_ms=0)
        for i in range(written):
            key = b"key-%d" % (i % 20)
            value = None if i >= written - 20 and i % 20 in (3, 7) else b"value %d" % i
            producer.send("table", value, key=key)
            latest[key] = (i, value)
            if i % 50 == 0:
                producer.flush()
        producer.flush()
        producer.close()
        full = size()
        assert wait_until(lambda: size() < full / 4, 20), (size(), full)

        consumer = KafkaConsumer(
            bootstrap_servers=boot, enable_auto_commit=False, fetch_max_wait_ms=100
        )
        tp = KpTopicPartition("table", 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        by_kafka_python: list[tuple[int, bytes | None, bytes | None]] = []
        try:
            deadline = time.monotonic() + 15
            while (not by_kafka_python or by_kafka_python[-1][0] < written - 1) and (
                time.monotonic() < deadline
            ):
                for records in consumer.poll(timeout_ms=200).values():
                    by_kafka_python.extend((r.offset, r.key, r.value) for r in records)
        finally:
            consumer.close()
        check(by_kafka_python)

        async def aio() -> list[tuple[int, bytes | None, bytes | None]]:
            consumer = AIOKafkaConsumer(
                bootstrap_servers=boot, enable_auto_commit=False, fetch_max_wait_ms=100
            )
            await consumer.start()
            read: list[tuple[int, bytes | None, bytes | None]] = []
            try:
                tp = AioTopicPartition("table", 0)
                consumer.assign([tp])
                consumer.seek(tp, 0)
                deadline = time.monotonic() + 15
                while (not read or read[-1][0] < written - 1) and time.monotonic() < deadline:
                    for records in (await consumer.getmany(timeout_ms=200)).values():
                        read.extend((r.offset, r.key, r.value) for r in records)
            finally:
                await consumer.stop()
            return read

        by_aiokafka = asyncio.run(aio())
        check(by_aiokafka)
        # the cleaner goes on between the two reads: it only ever takes records away
        assert len(by_aiokafka) <= len(by_kafka_python)


def _joined(membership: Any, generation: int) -> bool:
    """A kafka-python member's ``group_metadata()`` says it completed ``generation``'s join
    (state STABLE: it took the SyncGroup answer of that generation)."""
    from kafka.structs import MemberState

    return (
        membership is not None
        and membership.state == MemberState.STABLE
        and membership.generation_id == generation
    )


def _await_partitions(consumer: KafkaConsumer, topic: str) -> None:
    """Before a kafka-python 3 member's first poll: its subscribed topic's partitions in its
    metadata, so that, as leader, it assigns them at its first join.

    Otherwise it assigns before its metadata has the topic, and the metadata that comes later
    makes it join again (its ``need_rejoin`` compares the metadata it assigned with to the
    latest). In kafka-python 3.0.12 that join can be lost: when a short ``poll()`` returns
    while the JoinGroup is awaited, the assignment done inside that join makes ``need_rejoin``
    false, so no later ``poll()`` takes the join's SyncGroup answer. The leader then holds
    nothing and sends no heartbeat, and the server drops it after its session timeout. The
    client does this against Kafka too; the server answers that join as Kafka does (the Stable
    group rebalances for its leader)."""
    partitions = consumer.partitions_for_topic(topic)
    assert partitions, (topic, partitions)


def test_kafka_python_static_member_restarted_in_its_session_keeps_its_assignment(
    server: ServerThread,
) -> None:
    """The same with kafka-python (which, like Java's client, sends no LeaveGroup for a
    member with ``group_instance_id``), restarting the follower: the restarted member gets its
    partitions back, the generation stays, the other member sees no rebalance. (Not the
    leader: kafka-python 3 sends JoinGroup v7, before KIP-814's ``skip_assignment``, so a
    restarted static leader assigns again, before it has the topic's metadata, then joins
    again to correct that, and a leader's join rebalances a Stable group, on Kafka too.)
    Each member polls in its own thread, as an application's consumer does."""
    import threading

    from kafka import ConsumerRebalanceListener
    from test_serve_group_protocols import produce as create_and_fill

    from kafkalog.server.groups import STABLE

    events: list[tuple[str, str, list[int]]] = []

    class Member(threading.Thread):
        def __init__(self, instance: str, name: str) -> None:
            super().__init__(name=name, daemon=True)
            self.instance, self.stop = instance, threading.Event()
            self.held: list[int] = []
            self.membership: Any = None  # its last group_metadata()

        def run(self) -> None:
            consumer = KafkaConsumer(
                bootstrap_servers=server.bootstrap,
                group_id="static-kp",
                group_instance_id=self.instance,
                session_timeout_ms=6000,
                heartbeat_interval_ms=100,
                enable_auto_commit=False,
                fetch_max_wait_ms=100,
            )
            consumer.subscribe(["s"], listener=Events(self.name))
            # the topic's partitions known before the first join: see _await_partitions
            _await_partitions(consumer, "s")
            try:
                while not self.stop.is_set():
                    consumer.poll(timeout_ms=100)
                    self.held = sorted(p.partition for p in consumer.assignment())
                    self.membership = consumer.group_metadata()
            finally:
                consumer.close()  # a static member: no LeaveGroup

        def close(self) -> None:
            self.stop.set()
            self.join(10)
            assert not self.is_alive()

    class Events(ConsumerRebalanceListener):
        def __init__(self, name: str) -> None:
            self.name = name

        def on_partitions_revoked(self, revoked: Any) -> None:
            events.append((self.name, "revoke", sorted(p.partition for p in revoked)))

        def on_partitions_assigned(self, assigned: Any) -> None:
            events.append((self.name, "assign", sorted(p.partition for p in assigned)))

    def started(instance: str, name: str) -> Member:
        member = Member(instance, name)
        member.start()
        return member

    create_and_fill(server.bootstrap, "s", 4)
    broker = server.server.broker
    assert broker is not None
    members = {i: started(i, i) for i in ("i1", "i2")}
    again = None
    try:
        one, two = members.values()

        def both() -> bool:
            """Each holds partitions, 4 in all, of the group's current generation: a member
            keeps its previous assignment while it joins again (eager protocol), so the
            partitions alone may be those of a generation the group is leaving."""
            group = broker.groups.groups.get("static-kp")
            return (
                bool(one.held and two.held and len(one.held + two.held) == 4)
                and group is not None
                and group.state == STABLE
                and all(_joined(m.membership, group.generation) for m in (one, two))
            )

        assert wait_until(both, 20), events
        group = broker.groups.groups["static-kp"]
        time.sleep(0.3)  # a few heartbeats: the group stays as it is
        assert group.leader is not None
        leader = group.leader.split("-")[0]
        follower = "i2" if leader == "i1" else "i1"
        generation, kept = group.generation, members[follower].held
        events_of_leader = [e for e in events if e[0] == leader]
        members[follower].close()
        again = started(follower, "again")
        assert wait_until(lambda: bool(again.held), 20), events
        time.sleep(0.5)  # heartbeats and polls of both: no rebalance follows
        assert again.held == kept
        assert members[leader].held == sorted({0, 1, 2, 3} - set(kept))
        assert group.generation == generation and group.state == STABLE
        assert [e for e in events if e[0] == leader] == events_of_leader
        assert sorted(m.group_instance_id for m in group.members.values()) == ["i1", "i2"]
    finally:
        for member in (again, *members.values()):
            if member is not None:
                member.close()
