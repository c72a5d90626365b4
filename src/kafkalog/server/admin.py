"""ApiVersions, Metadata, DescribeCluster, topic administration and InitProducerId."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkalog.server import errors as E
from kafkalog.server.codec import SUPPORTED
from kafkalog.server.configs import topic_config_entries
from kafkalog.server.topics import Topic, TopicError, check_topic_name

if TYPE_CHECKING:
    from kafkalog.server.broker_interface import BrokerInterface as Broker

ENDPOINT_BROKERS = 1  # DescribeCluster's endpoint_type
#: every operation on the cluster resource (Kafka's AclOperation bits: CREATE, ALTER,
#: DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE,
#: CREATE_TOKENS, DESCRIBE_TOKENS): no authorizer, everything is allowed
CLUSTER_OPERATIONS = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12, 13, 14))


async def api_versions(broker: Broker, body: Any, version: int) -> dict[str, Any]:
    return {
        "error_code": E.NONE,
        "api_keys": [
            {"api_key": k, "min_version": lo, "max_version": hi}
            for k, (lo, hi) in sorted(SUPPORTED.items())
        ],
    }


def _partition_metadata(broker: Broker, topic: Topic, p: int) -> dict[str, Any]:
    """A partition as Kafka's metadata cache describes it. One whose log could not be opened
    is offline: its only replica is this broker's, so it has no leader (LEADER_NOT_AVAILABLE,
    leader -1, no ISR) and this broker is listed as its offline replica."""
    node = broker.config.node_id
    epoch = broker.registry.leader_epoch(topic.name, p)
    if not broker.registry.online(topic, p):
        return {
            "error_code": E.LEADER_NOT_AVAILABLE,
            "partition_index": p,
            "leader_id": -1,
            "leader_epoch": epoch,
            "replica_nodes": [node],
            "isr_nodes": [],
            "offline_replicas": [node],
        }
    return {
        "error_code": E.NONE,
        "partition_index": p,
        "leader_id": node,
        "leader_epoch": epoch,
        "replica_nodes": [node],
        "isr_nodes": [node],
    }


def _topic_metadata(broker: Broker, topic: Topic) -> dict[str, Any]:
    return {
        "error_code": E.NONE,
        "name": topic.name,
        "topic_id": topic.uuid,
        "is_internal": topic.internal,
        "partitions": [_partition_metadata(broker, topic, p) for p in range(topic.partitions)],
    }


async def metadata(broker: Broker, body: Any, version: int) -> dict[str, Any]:
    registry = broker.registry
    requested = body.topics
    if requested is None or (version == 0 and len(requested) == 0):
        topics = [_topic_metadata(broker, t) for t in sorted(registry.topics.values(), key=_name)]
    else:
        allow = bool(getattr(body, "allow_auto_topic_creation", True))
        topics = []
        for item in requested:
            name = item.name
            if name is None:  # by id (v10+)
                wanted = getattr(item, "topic_id", None)
                found = next((t for t in registry.topics.values() if t.uuid == wanted), None)
                if found is None:
                    topics.append({"error_code": 100, "name": None, "topic_id": wanted})
                else:
                    topics.append(_topic_metadata(broker, found))
                continue
            topic = registry.get(name)
            if topic is None and allow and broker.config.auto_create_topics_enable:
                try:
                    topic = registry.create(name, broker.config.num_partitions, {})
                except TopicError as e:
                    topics.append({"error_code": e.code, "name": name, "partitions": []})
                    continue
            if topic is None:
                code = E.UNKNOWN_TOPIC_OR_PARTITION
                try:
                    check_topic_name(name)
                except TopicError as e:
                    code = e.code
                topics.append({"error_code": code, "name": name, "partitions": []})
            else:
                topics.append(_topic_metadata(broker, topic))
    host, port = broker.advertised
    return {
        "brokers": [{"node_id": broker.config.node_id, "host": host, "port": port}],
        "cluster_id": broker.config.cluster_id,
        "controller_id": broker.config.node_id,
        "topics": topics,
    }


def _name(t: Topic) -> str:
    return t.name


async def create_topics(broker: Broker, body: Any, version: int) -> dict[str, Any]:
    results = []
    validate_only = bool(getattr(body, "validate_only", False))
    for ct in body.topics:
        result: dict[str, Any] = {"name": ct.name, "error_code": E.NONE}
        try:
            count = int(ct.num_partitions)
            if count == -1:
                count = broker.config.num_partitions
            if int(ct.replication_factor) not in (-1, 1) or ct.assignments:
                raise TopicError(
                    E.INVALID_REPLICATION_FACTOR,
                    f"replication factor {ct.replication_factor} on a single broker",
                )
            configs = {c.name: c.value for c in ct.configs if c.value is not None}
            topic = broker.registry.create(ct.name, count, configs, validate_only=validate_only)
            result.update(
                topic_id=topic.uuid,
                num_partitions=count,
                replication_factor=1,
                configs=[
                    {"name": k, "value": v, "read_only": False, "config_source": src}
                    for k, v, src in topic_config_entries(broker, topic)
                ],
            )
        except TopicError as e:
            result.update(error_code=e.code, error_message=str(e))
        results.append(result)
    return {"topics": results}


async def delete_topics(broker: Broker, body: Any, version: int) -> dict[str, Any]:
    registry = broker.registry
    if hasattr(body, "topic_names"):
        wanted = [(n, None) for n in body.topic_names]
    else:
        wanted = [(t.name, t.topic_id) for t in body.topics]
    results = []
    for name, topic_id in wanted:
        topic = registry.get(name) if name is not None else None
        if topic is None and topic_id is not None:
            topic = next((t for t in registry.topics.values() if t.uuid == topic_id), None)
        entry: dict[str, Any] = {"name": name, "topic_id": topic_id}
        if topic is None:
            entry["error_code"] = E.UNKNOWN_TOPIC_OR_PARTITION if name else 100
        elif topic.internal:
            entry.update(error_code=E.INVALID_TOPIC_EXCEPTION, error_message="internal topic")
        else:
            entry.update(name=topic.name, topic_id=topic.uuid, error_code=E.NONE)
            broker.forget_topic(topic.name)
            registry.delete(topic)
        results.append(entry)
    return {"responses": results}


async def create_partitions(broker: Broker, body: Any, version: int) -> dict[str, Any]:
    results = []
    for ct in body.topics:
        entry: dict[str, Any] = {"name": ct.name, "error_code": E.NONE}
        topic = broker.registry.get(ct.name)
        try:
            if topic is None:
                raise TopicError(E.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {ct.name}")
            broker.registry.add_partitions(
                topic, int(ct.count), validate_only=bool(body.validate_only)
            )
        except TopicError as e:
            entry.update(error_code=e.code, error_message=str(e))
        results.append(entry)
    return {"results": results}


async def describe_cluster(broker: Broker, body: Any, version: int) -> dict[str, Any]:
    """The one node, the cluster id and the controller (this node: KRaft's combined mode)."""
    host, port = broker.advertised
    node = broker.config.node_id
    if int(getattr(body, "endpoint_type", ENDPOINT_BROKERS)) != ENDPOINT_BROKERS:
        return {
            "error_code": E.MISMATCHED_ENDPOINT_TYPE,
            "error_message": "The request was sent to an endpoint of type BROKER, "
            "but we wanted an endpoint of type CONTROLLER",
            "cluster_id": broker.config.cluster_id,
            "controller_id": -1,
            "brokers": [],
        }
    operations = CLUSTER_OPERATIONS if body.include_cluster_authorized_operations else -(2**31)
    return {
        "error_code": E.NONE,
        "endpoint_type": ENDPOINT_BROKERS,
        "cluster_id": broker.config.cluster_id,
        "controller_id": node,
        "brokers": [{"broker_id": node, "host": host, "port": port, "is_fenced": False}],
        "cluster_authorized_operations": operations,
    }


async def init_producer_id(broker: Broker, body: Any, version: int) -> dict[str, Any]:
    """A fresh producer id at epoch 0 for an idempotent producer (Kafka's answer when there is
    no transactional id; the transaction coordinator answers the others)."""
    return {
        "error_code": E.NONE,
        "producer_id": broker.registry.next_producer_id(),
        "producer_epoch": 0,
    }
