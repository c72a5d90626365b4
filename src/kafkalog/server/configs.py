"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs: topic and dynamic broker configs.

A topic's overrides and the dynamic broker configs are saved in ``.kafkalog-serve.json`` (see
:class:`~kafkalog.server.topics.TopicRegistry`) before they apply, and apply live: every open
log of the topic takes the new :class:`~kafkalog.log.TopicConfig` at once, so the next append,
roll and retention pass use it (Kafka's ``updateConfig``).

The answers follow Kafka's: a topic config that does not parse or validate is INVALID_CONFIG
with the reason; an unknown topic UNKNOWN_TOPIC_OR_PARTITION; a malformed request (an unknown
operation, a key given twice, a resource named twice, a broker id that is not this broker's)
INVALID_REQUEST; a broker config that cannot change while running is refused as Kafka's
KRaft brokers refuse it (INVALID_REQUEST, "Cannot update these configs dynamically"). The
dynamic broker configs are the broker-level names of the topic configs (``log.retention.ms``,
``log.segment.bytes``, ``log.cleanup.policy``...): the defaults of every topic that has no
override of its own.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kafkalog.errors import KafkalogError
from kafkalog.log.config import BROKER_SYNONYMS, TOPIC_CONFIG_KEYS, TopicConfig
from kafkalog.server import errors as E
from kafkalog.server.topics import Topic, TopicError

if TYPE_CHECKING:
    from kafkalog.server.broker_interface import BrokerInterface as Broker

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
# Kafka's ConfigSource ids
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_DYNAMIC_BROKER = 2
SOURCE_DYNAMIC_DEFAULT_BROKER = 3
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
# IncrementalAlterConfigs operations
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3

_DEFAULT = TopicConfig()
#: the topic configs of Kafka's LIST type: the only ones APPEND and SUBTRACT may change
LIST_CONFIGS = frozenset(
    name for name, attr in TOPIC_CONFIG_KEYS.items() if isinstance(getattr(_DEFAULT, attr), tuple)
)
_TOPIC_OF_BROKER = {topic: broker for broker, topic in BROKER_SYNONYMS.items()}


class ResourceError(KafkalogError):
    """One resource of a request refused; ``code`` is the Kafka error to answer it with."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Change:
    """One config change of a request: the legacy AlterConfigs is a SET of every key given
    (and a DELETE of every override not given)."""

    name: str
    op: int
    value: str | None


# -- describing ---------------------------------------------------------------------------------
def render(config: TopicConfig, name: str) -> str:
    value = getattr(config, TOPIC_CONFIG_KEYS[name])
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(value)
    return str(value)


def _default_source(broker: Broker, topic_name: str) -> int:
    """Where a topic config without an override comes from."""
    registry = broker.registry
    broker_name = _TOPIC_OF_BROKER.get(topic_name)
    if broker_name in registry.dynamic["node"]:
        return SOURCE_DYNAMIC_BROKER
    if broker_name in registry.dynamic["cluster"]:
        return SOURCE_DYNAMIC_DEFAULT_BROKER
    if topic_name in registry.static_defaults:
        return SOURCE_STATIC_BROKER
    return SOURCE_DEFAULT


def topic_config_entries(broker: Broker, topic: Topic) -> list[tuple[str, str, int]]:
    """Every topic config Kafka names, with its value and where it came from."""
    config = broker.registry.config(topic)
    out = []
    for name in sorted(TOPIC_CONFIG_KEYS):
        source = SOURCE_DYNAMIC_TOPIC if name in topic.overrides else _default_source(broker, name)
        out.append((name, render(config, name), source))
    return out


def _broker_config_entries(broker: Broker) -> list[dict[str, Any]]:
    """The broker's configs: the dynamic topic defaults (with their effective values), then
    the settings fixed at start."""
    defaults = TopicConfig.from_properties(broker.registry.defaults, ignore_unmodelled=True)
    entries = []
    for name, topic_name in sorted(BROKER_SYNONYMS.items()):
        source = _default_source(broker, topic_name)
        entries.append(
            {
                "name": name,
                "value": render(defaults, topic_name),
                "read_only": False,
                "config_source": source,
                "is_default": source == SOURCE_DEFAULT,
                "is_sensitive": False,
            }
        )
    for name, value in sorted(read_only_broker_configs(broker).items()):
        entries.append(
            {
                "name": name,
                "value": value,
                "read_only": True,
                "config_source": SOURCE_STATIC_BROKER,
                "is_default": False,
                "is_sensitive": False,
            }
        )
    return entries


def read_only_broker_configs(broker: Broker) -> dict[str, str]:
    """The broker settings a running ``kafkalog serve`` keeps (Kafka's read-only ones)."""
    c = broker.config
    return {
        "auto.create.topics.enable": str(c.auto_create_topics_enable).lower(),
        "broker.id": str(c.node_id),
        "node.id": str(c.node_id),
        "num.partitions": str(c.num_partitions),
        "socket.request.max.bytes": str(c.socket_request_max_bytes),
        "offsets.topic.num.partitions": str(c.offsets_topic_num_partitions),
        "offsets.topic.segment.bytes": str(c.offsets_topic_segment_bytes),
        "transaction.state.log.num.partitions": str(c.transaction_state_num_partitions),
        "log.retention.check.interval.ms": str(c.log_retention_check_interval_ms),
        "log.cleaner.enable": str(c.log_cleaner_enable).lower(),
        "log.cleaner.backoff.ms": str(c.log_cleaner_backoff_ms),
        "log.cleaner.dedupe.buffer.size": str(c.log_cleaner_dedupe_buffer_size),
        "producer.id.expiration.ms": str(c.producer_id_expiration_ms),
        "log.flush.offset.checkpoint.interval.ms": str(c.log_flush_offset_checkpoint_interval_ms),
        "replica.high.watermark.checkpoint.interval.ms": str(
            c.replica_high_watermark_checkpoint_interval_ms
        ),
        "group.initial.rebalance.delay.ms": str(c.group_initial_rebalance_delay_ms),
        "group.min.session.timeout.ms": str(c.group_min_session_timeout_ms),
        "group.max.session.timeout.ms": str(c.group_max_session_timeout_ms),
    }


async def describe_configs(broker: Broker, body: Any, version: int) -> dict[str, Any]:
    results = []
    for res in body.resources:
        entry: dict[str, Any] = {
            "resource_type": res.resource_type,
            "resource_name": res.resource_name,
            "error_code": E.NONE,
            "configs": [],
        }
        keys = set(res.configuration_keys) if res.configuration_keys else None
        if int(res.resource_type) == RESOURCE_TOPIC:
            topic = broker.registry.get(res.resource_name)
            if topic is None:
                entry.update(error_code=E.UNKNOWN_TOPIC_OR_PARTITION, error_message="unknown topic")
            else:
                entry["configs"] = [
                    {
                        "name": k,
                        "value": v,
                        "read_only": False,
                        "config_source": src,
                        "is_default": src == SOURCE_DEFAULT,
                        "is_sensitive": False,
                    }
                    for k, v, src in topic_config_entries(broker, topic)
                    if keys is None or k in keys
                ]
        elif int(res.resource_type) == RESOURCE_BROKER:
            entry["configs"] = [
                e for e in _broker_config_entries(broker) if keys is None or e["name"] in keys
            ]
        else:
            entry.update(error_code=E.INVALID_REQUEST, error_message="unsupported resource type")
        results.append(entry)
    return {"results": results}


# -- altering -----------------------------------------------------------------------------------
def _apply_changes(
    current: dict[str, str], effective: TopicConfig, changes: list[Change]
) -> dict[str, str]:
    """The overrides after ``changes`` (topic names). APPEND and SUBTRACT start from the
    current value (the override, else the default the topic has now)."""
    out = dict(current)
    for change in changes:
        if change.op == OP_DELETE:
            out.pop(change.name, None)
            continue
        if change.value is None:
            raise ResourceError(E.INVALID_REQUEST, f"Null value not supported for : {change.name}")
        if change.op == OP_SET:
            out[change.name] = change.value
            continue
        verb = "append" if change.op == OP_APPEND else "subtract"
        if change.name not in LIST_CONFIGS:
            raise ResourceError(
                E.INVALID_CONFIG,
                f"Config value {verb} is not allowed for config key: {change.name}",
            )
        base = out.get(change.name)
        values = (
            [v for v in base.split(",") if v.strip()]
            if base is not None
            else list(getattr(effective, TOPIC_CONFIG_KEYS[change.name]))
        )
        given = [v.strip() for v in change.value.split(",") if v.strip()]
        if change.op == OP_APPEND:
            values += [v for v in given if v not in values]
        else:
            values = [v for v in values if v not in given]
        out[change.name] = ",".join(values)
    return out


def _check_changes(changes: list[Change]) -> None:
    for change in changes:
        if change.op not in (OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT):
            raise ResourceError(E.INVALID_REQUEST, f"unknown config operation {change.op}")
    dupes = sorted(n for n, c in Counter(c.name for c in changes).items() if c > 1)
    if dupes:
        raise ResourceError(E.INVALID_REQUEST, f"Error due to duplicate config keys: {dupes}")


def _alter_topic(
    broker: Broker, name: str, changes: list[Change], *, incremental: bool, validate_only: bool
) -> None:
    topic = broker.registry.get(name)
    if topic is None:
        raise ResourceError(E.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name}")
    current = dict(topic.overrides) if incremental else {}
    merged = {**broker.registry.defaults, **topic.overrides}
    try:
        effective = TopicConfig.from_properties(merged, ignore_unmodelled=True)
        overrides = _apply_changes(current, effective, changes)
        broker.registry.set_overrides(topic, overrides, validate_only=validate_only)
    except TopicError as e:
        raise ResourceError(e.code, str(e)) from None


def _layer(broker: Broker, name: str) -> str:
    """``""`` is the cluster-wide default; this broker's id its own layer."""
    if name == "":
        return "cluster"
    if name == str(broker.config.node_id):
        return "node"
    raise ResourceError(
        E.INVALID_REQUEST,
        f"Unexpected broker id, expected {broker.config.node_id} or empty string, "
        f"but received {name}",
    )


def _alter_broker(
    broker: Broker, name: str, changes: list[Change], *, incremental: bool, validate_only: bool
) -> None:
    layer = _layer(broker, name)
    fixed = sorted(c.name for c in changes if c.name not in BROKER_SYNONYMS)
    if fixed:
        raise ResourceError(
            E.INVALID_REQUEST,
            f"Invalid config value for resource ConfigResource(type=BROKER, name='{name}'): "
            f"Cannot update these configs dynamically: {fixed}",
        )
    registry = broker.registry
    current = dict(registry.dynamic[layer]) if incremental else {}
    # the changes in topic names, so that lists and validation are the topic configs'
    as_topic = {BROKER_SYNONYMS[k]: v for k, v in current.items()}
    effective = TopicConfig.from_properties(registry.defaults, ignore_unmodelled=True)
    renamed = [Change(BROKER_SYNONYMS[c.name], c.op, c.value) for c in changes]
    try:
        after = _apply_changes(as_topic, effective, renamed)
        configs = {_TOPIC_OF_BROKER[k]: v for k, v in after.items()}
        registry.set_dynamic_defaults(layer, configs, validate_only=validate_only)
    except TopicError as e:
        raise ResourceError(
            E.INVALID_REQUEST,
            f"Invalid config value for resource ConfigResource(type=BROKER, name='{name}'): {e}",
        ) from None


def _alter(broker: Broker, body: Any, *, incremental: bool) -> list[dict[str, Any]]:
    validate_only = bool(body.validate_only)
    seen = Counter((int(r.resource_type), r.resource_name) for r in body.resources)
    results = []
    for res in body.resources:
        kind, name = int(res.resource_type), res.resource_name
        entry: dict[str, Any] = {
            "resource_type": kind,
            "resource_name": name,
            "error_code": E.NONE,
            "error_message": None,
        }
        try:
            if seen[(kind, name)] > 1:
                raise ResourceError(E.INVALID_REQUEST, "Error due to duplicate resources")
            changes = [
                Change(c.name, int(c.config_operation) if incremental else OP_SET, c.value)
                for c in res.configs
            ]
            _check_changes(changes)
            if kind == RESOURCE_TOPIC:
                _alter_topic(
                    broker, name, changes, incremental=incremental, validate_only=validate_only
                )
            elif kind == RESOURCE_BROKER:
                _alter_broker(
                    broker, name, changes, incremental=incremental, validate_only=validate_only
                )
            else:
                raise ResourceError(E.INVALID_REQUEST, f"unsupported resource type {kind}")
        except ResourceError as e:
            entry.update(error_code=e.code, error_message=str(e))
        results.append(entry)
    return results


async def alter_configs(broker: Broker, body: Any, version: int) -> dict[str, Any]:
    """The legacy AlterConfigs: each resource's configs replaced by the ones given."""
    return {"responses": _alter(broker, body, incremental=False)}


async def incremental_alter_configs(broker: Broker, body: Any, version: int) -> dict[str, Any]:
    """SET, DELETE, APPEND and SUBTRACT of single keys (KIP-339)."""
    return {"responses": _alter(broker, body, incremental=True)}
