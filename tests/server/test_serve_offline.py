"""One bad partition never takes ``kafkalog serve`` down (issue 32 point 5): a partition that
cannot open is offline as Kafka answers one (Metadata: no leader, this broker its offline
replica; Fetch: KAFKA_STORAGE_ERROR) while the other topics serve; a Fetch that meets damage
answers the records before it, then CORRUPT_MESSAGE, which real clients raise to the
application instead of retrying for ever; damage in ``__consumer_offsets`` loses only the
groups whose records it holds."""

from __future__ import annotations

import logging
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as RdTopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as PyTopicPartition
from kafka.errors import KafkaError

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_serve_produce_checks import produce
from test_serve_validation import create
from test_serve_wire import call

from damage_kinds import DAMAGES, flip, written
from kafka_clients import config, consumer_settings, rdkafka
from kafkalog.records import Record, encode_batch
from kafkalog.server import ServerThread
from kafkalog.server.offset_store import partition_for_group

CORRUPT_MESSAGE = 2
LEADER_NOT_AVAILABLE = 5
KAFKA_STORAGE_ERROR = 56


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return written(tmp_path_factory.mktemp("offline"))  # topic "written", offsets 0..299


def _damaged_copy(source: Path, tmp_path: Path, *, clean: bool) -> Path:
    """The base offset of a batch in the middle segment flipped (outside the CRC: only the
    log's offset checks see it): after a crash the recovery refuses the partition, after a
    clean stop a Fetch meets it at offset 175."""
    data = tmp_path / "data"
    data.mkdir()
    d = data / source.name
    shutil.copytree(source, d)
    for extra in d.glob(".kafkalog*"):
        extra.unlink()
    DAMAGES["flip base offset"][0](d)
    if clean:
        (data / ".kafka_cleanshutdown").write_text("")
    return data


def _fetch(server: ServerThread, topic: str, offset: int) -> Any:
    reply = call(
        server,
        1,
        12,
        {
            "replica_id": -1,
            "max_wait_ms": 10,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [
                        {
                            "partition": 0,
                            "fetch_offset": offset,
                            "partition_max_bytes": 1 << 20,
                            "log_start_offset": -1,
                            "current_leader_epoch": -1,
                        }
                    ],
                }
            ],
        },
    )
    return reply.responses[0].partitions[0]


def test_a_fetch_meeting_damage_answers_the_records_before_it_then_corrupt_message(
    source: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = _damaged_copy(source, tmp_path, clean=True)
    caplog.set_level(logging.ERROR, logger="kafkalog.server")
    with ServerThread(str(data), config()) as server:
        part = _fetch(server, "written", 175)
        assert (part.error_code, len(part.records or b"")) == (CORRUPT_MESSAGE, 0)
        # librdkafka: every record before the damage, in order, then a non-retriable error
        consumer = Consumer(consumer_settings(server.bootstrap, "rd"))
        consumer.assign([RdTopicPartition("written", 0, 0)])
        got: list[tuple[int, bytes | None]] = []
        error = None
        deadline = time.monotonic() + 20
        while error is None and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error():
                error = message.error()
            else:
                got.append((message.offset(), message.value()))
        consumer.close()
        assert got == [(o, b"value %05d" % o) for o in range(175)]
        assert error is not None and error.code() == CORRUPT_MESSAGE and not error.retriable()
        # kafka-python: the same records, then the error raised from poll
        py = KafkaConsumer(
            bootstrap_servers=server.bootstrap, enable_auto_commit=False, fetch_max_wait_ms=50
        )
        tp = PyTopicPartition("written", 0)
        py.assign([tp])
        py.seek(tp, 0)
        offsets: list[int] = []
        raised: KafkaError | None = None
        try:
            while raised is None and time.monotonic() < deadline + 20:
                try:
                    polled = py.poll(timeout_ms=100)
                except KafkaError as e:
                    raised = e
                for messages in polled.values() if raised is None else []:
                    offsets += [m.offset for m in messages]
        finally:
            py.close()
        assert offsets == list(range(175)) and raised is not None
    said = [r.getMessage() for r in caplog.records]
    assert any("00000000000000000150.log at byte 2025" in m for m in said), said


def test_a_partition_that_cannot_open_is_offline_and_the_rest_serve(
    source: Path, tmp_path: Path
) -> None:
    data = _damaged_copy(source, tmp_path, clean=False)
    with ServerThread(str(data), config()) as server:
        # the first request naming it finds it offline (its log is opened then, as a Kafka
        # broker has loaded every log before it answers)
        meta = call(
            server,
            3,
            12,
            {
                "topics": [{"name": "written"}, {"name": "healthy"}],
                "allow_auto_topic_creation": True,
                "include_topic_authorized_operations": False,
            },
        )
        node = meta.brokers[0].node_id
        offline = meta.topics[0].partitions[0]
        assert (offline.error_code, offline.leader_id) == (LEADER_NOT_AVAILABLE, -1)
        assert (list(offline.offline_replicas), list(offline.isr_nodes)) == ([node], [])
        healthy = meta.topics[1].partitions[0]
        assert (healthy.error_code, healthy.leader_id) == (0, node)
        assert _fetch(server, "written", 0).error_code == KAFKA_STORAGE_ERROR
        assert _fetch(server, "written", 0).error_code == KAFKA_STORAGE_ERROR  # stays offline
        refused = produce(server, "written", encode_batch([Record.of(b"more")]))
        assert refused.error_code == KAFKA_STORAGE_ERROR  # nothing appended to it either
        healthy_serves(server)


def healthy_serves(server: ServerThread) -> None:
    """The topic ``healthy`` takes a record from confluent-kafka and gives it back: the server
    serves on beside an offline partition."""
    producer = Producer(rdkafka(server.bootstrap))
    producer.produce("healthy", b"fine")
    assert producer.flush(10) == 0
    consumer = Consumer(consumer_settings(server.bootstrap, "unused"))
    consumer.assign([RdTopicPartition("healthy", 0, 0)])
    got = None
    for _ in range(100):
        got = consumer.poll(0.1)
        if got is not None and not got.error():
            break
    consumer.close()
    assert got is not None and got.value() == b"fine"


def _commit(server: ServerThread, group: str, offset: int) -> None:
    reply = call(
        server,
        8,
        8,
        {
            "group_id": group,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": [
                {
                    "name": "in",
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": offset,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "",
                        }
                    ],
                }
            ],
        },
    )
    assert reply.topics[0].partitions[0].error_code == 0


def _committed(server: ServerThread, group: str) -> int:
    reply = call(
        server,
        9,
        7,
        {
            "group_id": group,
            "topics": [{"name": "in", "partition_indexes": [0]}],
            "require_stable": False,
        },
    )
    return int(reply.topics[0].partitions[0].committed_offset)


@pytest.mark.parametrize(
    ("field", "clean"),
    [(70, True), (70, False), (7, False)],
    ids=["records flipped, clean stop", "records flipped, crash", "base offset flipped, crash"],
)
def test_consumer_offsets_damage_loses_only_the_damaged_groups(
    tmp_path: Path, field: int, clean: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """A damaged batch of one ``__consumer_offsets`` partition: read around (its one group
    lost, the server log naming file and byte), or, where recovery refuses the partition
    (a base offset that contradicts its neighbours), that partition offline: its groups
    lost, every other partition's groups keep their offsets and the broker starts."""
    data = tmp_path / "data"
    data.mkdir()
    settings = config(offsets_topic_num_partitions=3)
    groups = [f"group-{i}" for i in range(24)]
    with ServerThread(str(data), settings) as server:
        create(server, "in")
        for i, group in enumerate(groups):
            _commit(server, group, 100 + i)  # one batch each, in its group's partition
    hit = 1
    in_hit = [g for g in groups if partition_for_group(g, 3) == hit]
    damaged = data / f"__consumer_offsets-{hit}"
    flip(field)(damaged)  # in the middle batch of the partition's one segment
    if not clean:
        for marker in damaged.glob(".kafkalog-clean-shutdown"):
            marker.unlink()
    caplog.set_level(logging.ERROR, logger="kafkalog.server")
    with ServerThread(str(data), settings) as server:
        found = {g: _committed(server, g) for g in groups}
    gone = {g for g, offset in found.items() if offset == -1}
    expected = set(in_hit) if field == 7 else {in_hit[len(in_hit) // 2]}
    assert gone == expected
    assert all(found[g] == 100 + i for i, g in enumerate(groups) if g not in expected)
    said = [r.getMessage() for r in caplog.records]
    assert any(str(damaged) in m and "byte" in m for m in said), said


@pytest.mark.usefixtures("compiled_cleaner")  # its wait for a cleaning: see the fixture
def test_an_offline_compacted_partition_leaves_the_cleaner_and_retention_running(
    source: Path, tmp_path: Path
) -> None:
    """Every topic compacted: the offline one is left out of the cleaner's passes (which it
    failed whole before), and another compacted topic is cleaned."""
    from kafka_clients import wait_until
    from kafkalog.log.checkpoints import OffsetCheckpoint

    data = _damaged_copy(source, tmp_path, clean=False)
    settings = config(
        topic_defaults={
            "cleanup.policy": "compact",
            "segment.bytes": "1024",
            "min.cleanable.dirty.ratio": "0.01",
        },
        log_cleaner_backoff_ms=100,
        log_retention_check_interval_ms=100,
    )
    with ServerThread(str(data), settings) as server:
        create(server, "keyed")
        for i in range(60):
            batch = encode_batch([Record.of(b"v%d" % i + bytes(100), key=b"k%d" % (i % 5))])
            assert produce(server, "keyed", batch).error_code == 0
        checkpoint = data / "cleaner-offset-checkpoint"
        assert wait_until(
            lambda: checkpoint.exists() and ("keyed", 0) in OffsetCheckpoint.read(str(checkpoint))
        )
        broker = server.server.broker
        assert broker is not None and ("written", 0) in broker.registry.offline


def test_a_group_whose_offsets_partition_is_offline_has_no_coordinator(tmp_path: Path) -> None:
    """The groups of an offline ``__consumer_offsets`` partition get COORDINATOR_NOT_AVAILABLE
    from FindCoordinator, OffsetCommit and TxnOffsetCommit (a Kafka broker that has not loaded
    the partition is no coordinator for them; the clients retry), while the groups of the
    other partitions are served. Before, their commits raised through the handler and the
    connection was closed under every other request of the client (confluent-kafka's
    consume-transform-produce retried its TxnOffsetCommit for ever: the seeded campaign,
    tests/server/serve_campaign.py)."""
    data = tmp_path / "data"
    data.mkdir()
    settings = config(offsets_topic_num_partitions=3)
    with ServerThread(str(data), settings) as server:
        create(server, "in")
        for i in range(24):
            _commit(server, f"group-{i}", 100 + i)
    damaged = data / "__consumer_offsets-1"
    flip(7)(damaged)  # a base offset: recovery after a crash refuses the partition
    for marker in damaged.glob(".kafkalog-clean-shutdown"):
        marker.unlink()
    lost = next(f"group-{i}" for i in range(24) if partition_for_group(f"group-{i}", 3) == 1)
    kept = next(f"group-{i}" for i in range(24) if partition_for_group(f"group-{i}", 3) != 1)
    with ServerThread(str(data), settings) as server:
        found = call(server, 10, 4, {"key_type": 0, "coordinator_keys": [lost, kept]})
        codes = {c.key: (c.error_code, c.node_id) for c in found.coordinators}
        assert codes[lost] == (15, -1) and codes[kept][0] == 0 and codes[kept][1] >= 0
        commit = {
            "group_id": lost,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": [
                {
                    "name": "in",
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": 5,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "",
                        }
                    ],
                }
            ],
        }
        reply = call(server, 8, 8, commit)
        assert reply.topics[0].partitions[0].error_code == 15
        txn = {
            "transactional_id": "t",
            "group_id": lost,
            "producer_id": 1,
            "producer_epoch": 0,
            "generation_id": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": [
                {
                    "name": "in",
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": 5,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "",
                        }
                    ],
                }
            ],
        }
        assert call(server, 28, 3, txn).topics[0].partitions[0].error_code == 15
        _commit(server, kept, 7)  # the other partitions' groups are served
        assert _committed(server, kept) == 7
