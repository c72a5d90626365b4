"""AlterConfigs, IncrementalAlterConfigs and DescribeCluster in ``kafkalog serve`` (issue 25
§3): a topic config changed with confluent-kafka's AdminClient takes effect on the live logs
(a lowered ``segment.bytes`` rolls the next produce, a lowered ``retention.ms`` lets the
server's retention pass delete), is saved across a restart, is seen by kafka-python's
describe_configs; ``validate_only`` changes nothing; bad values, unknown topics, unknown
operations and read-only broker configs get Kafka's errors."""

from __future__ import annotations

import io
import json
import socket
import struct
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from kio.schema.incremental_alter_configs.v1.response import IncrementalAlterConfigsResponse
from kio.schema.request_header.v2.header import RequestHeader
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i8, i16, i32

from kafka_clients import config, rdkafka
from kafkalog.log.checkpoints import MetaProperties
from kafkalog.server import ServerThread
from kafkalog.server.topics import STATE_FILE

TOPIC = ConfigResource.Type.TOPIC
BROKER = ConfigResource.Type.BROKER


def _wait(condition: Any, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def _admin(server: ServerThread) -> AdminClient:
    return AdminClient(rdkafka(server.bootstrap))


def _incremental(
    admin: AdminClient,
    kind: ConfigResource.Type,
    name: str,
    ops: list[tuple[str, AlterConfigOpType, str | None]],
    *,
    validate_only: bool = False,
) -> None:
    resource = ConfigResource(
        kind,
        name,
        incremental_configs=[
            ConfigEntry(key, value, incremental_operation=op) for key, op, value in ops
        ],
    )
    (future,) = admin.incremental_alter_configs([resource], validate_only=validate_only).values()
    future.result(10)


def _described(admin: AdminClient, name: str) -> dict[str, Any]:
    resource = ConfigResource(TOPIC, name)
    return dict(admin.describe_configs([resource])[resource].result(10))


def _produce(server: ServerThread, topic: str, count: int, *, timestamp: int = 0) -> None:
    producer = Producer(rdkafka(server.bootstrap, **{"linger.ms": 0}))
    for i in range(count):
        producer.produce(topic, b"v" * 200 + b"%d" % i, timestamp=timestamp)
        producer.flush(10)  # one batch each
    assert producer.flush(10) == 0


def _segments(data: Path, topic: str) -> int:
    return len(list((data / f"{topic}-0").glob("*.log")))


def test_incremental_changes_apply_live_and_survive_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    settings = config(log_retention_check_interval_ms=200)
    old = int(time.time() * 1000) - 60_000  # a minute old: inside the default 7 days
    with ServerThread(str(data), settings) as server:
        admin = _admin(server)
        admin.create_topics([NewTopic("live", 1, 1)])["live"].result(10)
        _produce(server, "live", 5, timestamp=old)
        assert _segments(data, "live") == 1  # 1 GiB segments: one
        # segment.bytes lowered: the open log rolls on the next produces
        _incremental(admin, TOPIC, "live", [("segment.bytes", AlterConfigOpType.SET, "1024")])
        _produce(server, "live", 20, timestamp=old)
        assert _segments(data, "live") >= 4
        time.sleep(0.5)  # a few retention passes at the default retention.ms: nothing goes
        assert (data / "live-0" / "00000000000000000000.log").exists()
        # retention.ms lowered: the server's next retention pass deletes the old segments
        _incremental(admin, TOPIC, "live", [("retention.ms", AlterConfigOpType.SET, "1000")])
        assert _wait(lambda: _segments(data, "live") == 1)
        assert not (data / "live-0" / "00000000000000000000.log").exists()
        # a list config: APPEND and SUBTRACT from the value the topic has
        _incremental(
            admin, TOPIC, "live", [("cleanup.policy", AlterConfigOpType.APPEND, "compact")]
        )
        assert _described(admin, "live")["cleanup.policy"].value == "delete,compact"
        _incremental(
            admin, TOPIC, "live", [("cleanup.policy", AlterConfigOpType.SUBTRACT, "delete")]
        )
        described = _described(admin, "live")
        assert described["cleanup.policy"].value == "compact"
        assert described["retention.ms"].value == "1000"
        assert not described["retention.ms"].is_default
        # DELETE drops the override: the default comes back
        _incremental(admin, TOPIC, "live", [("retention.ms", AlterConfigOpType.DELETE, None)])
        assert _described(admin, "live")["retention.ms"].value == "604800000"
    saved = json.loads((data / STATE_FILE).read_text())["topics"]["live"]["configs"]
    assert saved == {"segment.bytes": "1024", "cleanup.policy": "compact"}
    # after a restart the stored configs are the topic's, as kafka-python describes them
    with ServerThread(str(data), settings) as server:
        kp = KafkaAdminClient(bootstrap_servers=server.bootstrap)
        try:
            described = kp.describe_configs([KpConfigResource(ConfigResourceType.TOPIC, "live")])
            entries = described["topic"]["live"]
        finally:
            kp.close()
        assert entries["segment.bytes"]["value"] == "1024"
        assert entries["segment.bytes"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
        assert entries["cleanup.policy"]["value"] == "compact"
        # the deleted override is gone (kafka-python lists only configs not at their default)
        assert entries.get("retention.ms", {}).get("config_source", "DEFAULT_CONFIG") == (
            "DEFAULT_CONFIG"
        )


def test_legacy_alter_configs_replaces_the_overrides(server: ServerThread) -> None:
    admin = _admin(server)
    new = NewTopic("legacy", 1, 1, config={"retention.ms": "3600000"})
    admin.create_topics([new])["legacy"].result(10)
    resource = ConfigResource(TOPIC, "legacy", set_config={"retention.bytes": "100000"})
    with pytest.warns(DeprecationWarning):  # deprecated in the client, still sent by many
        admin.alter_configs([resource])[resource].result(10)
    described = _described(admin, "legacy")
    assert described["retention.bytes"].value == "100000"
    assert described["retention.ms"].value == "604800000"  # not given: back to the default
    assert described["retention.ms"].is_default


def test_validate_only_and_refusals_change_nothing(server: ServerThread, data_dir: Path) -> None:
    admin = _admin(server)
    new = NewTopic("kept", 1, 1, config={"retention.ms": "3600000"})
    admin.create_topics([new])["kept"].result(10)
    state = (data_dir / STATE_FILE).read_bytes()
    _incremental(
        admin, TOPIC, "kept", [("retention.ms", AlterConfigOpType.SET, "5")], validate_only=True
    )
    # an invalid value is refused with the reason, even with validate_only
    for validate_only in (True, False):
        with pytest.raises(KafkaException, match=r"INVALID_CONFIG.*retention\.ms|retention\.ms"):
            _incremental(
                admin,
                TOPIC,
                "kept",
                [("retention.ms", AlterConfigOpType.SET, "soon")],
                validate_only=validate_only,
            )
    with pytest.raises(KafkaException) as info:
        _incremental(admin, TOPIC, "kept", [("segment.bytes", AlterConfigOpType.SET, "10")])
    assert info.value.args[0].name() == "INVALID_CONFIG"
    assert "segment.bytes" in info.value.args[0].str()
    with pytest.raises(KafkaException) as info:  # APPEND to a config that is not a list
        _incremental(admin, TOPIC, "kept", [("retention.ms", AlterConfigOpType.APPEND, "1")])
    assert info.value.args[0].name() == "INVALID_CONFIG"
    with pytest.raises(KafkaException) as info:  # an unknown topic config
        _incremental(admin, TOPIC, "kept", [("retention.msec", AlterConfigOpType.SET, "1")])
    assert info.value.args[0].name() == "INVALID_CONFIG"
    with pytest.raises(KafkaException) as info:
        _incremental(admin, TOPIC, "absent", [("retention.ms", AlterConfigOpType.SET, "1")])
    assert info.value.args[0].name() == "UNKNOWN_TOPIC_OR_PART"  # librdkafka's name
    assert (data_dir / STATE_FILE).read_bytes() == state
    assert _described(admin, "kept")["retention.ms"].value == "3600000"


def _raw_incremental(server: ServerThread, request: IncrementalAlterConfigsRequest) -> Any:
    buf = io.BytesIO()
    header = RequestHeader(
        request_api_key=i16(44), request_api_version=i16(1), correlation_id=i32(7), client_id="t"
    )
    entity_writer(RequestHeader)(buf, header)
    entity_writer(IncrementalAlterConfigsRequest)(buf, request)
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(struct.pack(">i", len(buf.getvalue())) + buf.getvalue())
        size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
        frame = sock.recv(size, socket.MSG_WAITALL)
    header_type = IncrementalAlterConfigsResponse.__header_schema__
    _, used = entity_reader(header_type)(frame, 0)
    body, _ = entity_reader(IncrementalAlterConfigsResponse)(frame, used)
    return body


def test_malformed_changes_are_invalid_requests(server: ServerThread) -> None:
    admin = _admin(server)  # kept: a client destroyed at once fails its own futures
    admin.create_topics([NewTopic("raw", 1, 1)])["raw"].result(10)

    def resource(*changes: tuple[str, int, str | None], name: str = "raw") -> Any:
        configs = tuple(
            AlterableConfig(name=n, config_operation=i8(op), value=v) for n, op, v in changes
        )
        return AlterConfigsResource(resource_type=i8(2), resource_name=name, configs=configs)

    body = _raw_incremental(
        server,
        IncrementalAlterConfigsRequest(
            resources=(
                resource(("retention.ms", 9, "1")),  # no such operation
                resource(("retention.ms", 0, "1"), ("retention.ms", 0, "2"), name="x"),
                resource(("retention.ms", 0, None), name="raw"),
            ),
            validate_only=False,
        ),
    )
    codes = [(r.resource_name, int(r.error_code), r.error_message) for r in body.responses]
    # "raw" is named twice: both are refused, as Kafka refuses duplicate resources
    assert [c[:2] for c in codes] == [("raw", 42), ("x", 42), ("raw", 42)]
    body = _raw_incremental(
        server,
        IncrementalAlterConfigsRequest(
            resources=(
                resource(("retention.ms", 9, "1")),
                resource(("a", 0, "1"), ("a", 1, None), name="x"),
            ),
            validate_only=False,
        ),
    )
    (first, second) = body.responses
    assert int(first.error_code) == 42 and "operation" in first.error_message
    assert int(second.error_code) == 42 and "duplicate config keys" in second.error_message


def test_dynamic_broker_configs_are_every_topic_s_defaults(
    server: ServerThread, data_dir: Path
) -> None:
    admin = _admin(server)
    admin.create_topics(
        [NewTopic("plain", 1, 1), NewTopic("own", 1, 1, config={"retention.ms": "5000"})]
    )["plain"].result(10)
    # the cluster-wide default ("": librdkafka refuses the empty name, so a raw request)
    cluster_wide = AlterConfigsResource(
        resource_type=i8(4),
        resource_name="",
        configs=(
            AlterableConfig(name="log.retention.ms", config_operation=i8(0), value="7200000"),
        ),
    )
    body = _raw_incremental(
        server, IncrementalAlterConfigsRequest(resources=(cluster_wide,), validate_only=False)
    )
    assert [int(r.error_code) for r in body.responses] == [0]
    assert _described(admin, "plain")["retention.ms"].value == "7200000"
    assert _described(admin, "plain")["retention.ms"].source == 3  # DYNAMIC_DEFAULT_BROKER
    assert _described(admin, "own")["retention.ms"].value == "5000"  # its own override wins
    # this broker's own layer over the cluster-wide one
    _incremental(admin, BROKER, "1", [("log.retention.ms", AlterConfigOpType.SET, "3600000")])
    assert _described(admin, "plain")["retention.ms"].value == "3600000"
    assert _described(admin, "plain")["retention.ms"].source == 2  # DYNAMIC_BROKER
    resource = ConfigResource(BROKER, "1")
    broker = admin.describe_configs([resource])[resource].result(10)
    assert broker["log.retention.ms"].value == "3600000"
    assert broker["log.retention.check.interval.ms"].is_read_only
    saved = json.loads((data_dir / STATE_FILE).read_text())["broker_configs"]
    assert saved == {
        "cluster": {"log.retention.ms": "7200000"},
        "node": {"log.retention.ms": "3600000"},
    }
    # read-only broker configs, another broker's id and bad values are refused
    for name, key, value in (
        ("1", "log.retention.check.interval.ms", "100"),
        ("1", "log.segment.bytes", "tiny"),
    ):
        with pytest.raises(KafkaException) as info:
            _incremental(admin, BROKER, name, [(key, AlterConfigOpType.SET, value)])
        assert info.value.args[0].name() == "INVALID_REQUEST", (name, key)
    other = AlterConfigsResource(  # librdkafka sends it to broker 7 only: a raw request
        resource_type=i8(4),
        resource_name="7",
        configs=(AlterableConfig(name="log.retention.ms", config_operation=i8(0), value="1"),),
    )
    body = _raw_incremental(
        server, IncrementalAlterConfigsRequest(resources=(other,), validate_only=False)
    )
    assert [int(r.error_code) for r in body.responses] == [42]
    assert "Unexpected broker id" in body.responses[0].error_message
    assert "dynamically" in _error_of(admin, "1", "log.retention.check.interval.ms")
    assert _described(admin, "plain")["retention.ms"].value == "3600000"


def _error_of(admin: AdminClient, name: str, key: str) -> str:
    try:
        _incremental(admin, BROKER, name, [(key, AlterConfigOpType.SET, "1")])
    except KafkaException as e:
        return str(e.args[0].str())
    raise AssertionError("accepted")


def test_describe_cluster(server: ServerThread, data_dir: Path) -> None:
    # the cluster id is the one the data directory's meta.properties holds
    cluster_id = MetaProperties.load(data_dir / "meta.properties").cluster_id
    assert cluster_id is not None and len(cluster_id) == 22
    admin = _admin(server)
    described = admin.describe_cluster(include_authorized_operations=True).result(10)
    assert described.cluster_id == cluster_id
    assert described.controller.id == 1
    (node,) = described.nodes
    assert (node.id, node.host, node.port) == (1, "127.0.0.1", server.port)
    # (librdkafka answers this from Metadata; kafka-python sends DescribeCluster)
    kp = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        cluster = kp.describe_cluster()
    finally:
        kp.close()
    assert cluster["cluster_id"] == cluster_id
    assert cluster["controller_id"] == 1
    assert [(b["broker_id"], b["port"]) for b in cluster["brokers"]] == [(1, server.port)]
    assert cluster["brokers"][0]["is_fenced"] is False  # DescribeCluster v2's field
    # no authorizer: every operation on the cluster resource
    assert set(cluster["authorized_operations"]) >= {"ALTER_CONFIGS", "DESCRIBE_CONFIGS", "CREATE"}
