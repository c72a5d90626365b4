"""The internal-topic decoders of ``kafka-dump-log.sh`` (DumpLogSegments' ``MessageParser``s).

Each turns one record into the ``key:`` and ``payload:`` texts Kafka's tool prints (None for a
part it does not print), with its wording for tombstones (``<DELETE>``) and for records it cannot
read (``Unknown record type N at offset O, skipping.``, ``Error at offset O, skipping. ...``).
The records are read through :mod:`kafkalog.records.internal_topics` (Kafka's own message
definitions); the JSON is the text of Kafka's generated JSON converters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kafkalog.errors import KafkalogError
from kafkalog.records import Record
from kafkalog.records.internal_topics import (
    CLUSTER_METADATA,
    CONSUMER_OFFSETS,
    REMOTE_LOG_METADATA,
    SHARE_GROUP_STATE,
    TRANSACTION_STATE,
    Message,
    UnknownRecordType,
)
from kafkalog.records.message_schema import kafka_json, schema

Parsed = tuple[str | None, str | None]
Parser = Callable[[Record], Parsed]

# Kafka's TransactionState ids and names (core/.../transaction/TransactionMetadata.scala)
TRANSACTION_STATES = (
    "Empty",
    "Ongoing",
    "PrepareCommit",
    "PrepareAbort",
    "CompleteCommit",
    "CompleteAbort",
    "Dead",
    "PrepareEpochFence",
)


def _error(rec: Record, e: Exception) -> str:
    reason = getattr(e, "reason", None) or str(e)
    return f"Error at offset {rec.offset}, skipping. {reason}"


def _typed(field: str, message: Message, tree: Any | None = None) -> str:
    body = schema(message.name).to_json_tree(message.data, message.version)
    return kafka_json({field: str(message.version), "data": body if tree is None else tree})


def _group_metadata_tree(message: Message) -> Any:
    """GroupMetadataValue with the consumer protocol's subscription and assignment decoded,
    as DumpLogSegments does for groups of protocol type ``consumer`` (kept as bytes when they
    do not parse)."""
    tree = schema(message.name).to_json_tree(message.data, message.version)
    if message.data.get("protocolType") != "consumer":
        return tree
    members = zip(message.data.get("members") or [], tree.get("members") or [], strict=True)
    for raw_member, member in members:
        for field, name in (
            ("subscription", "ConsumerProtocolSubscription"),
            ("assignment", "ConsumerProtocolAssignment"),
        ):
            raw = raw_member.get(field)
            if raw is None or len(raw) < 2:
                continue
            s = schema(name)
            version = min(int.from_bytes(raw[:2], "big", signed=True), s.valid_versions.high)
            try:
                if version < 0:
                    raise ValueError(version)
                data = s.decode(raw[2:], version, exact=False)
            except (KafkalogError, ValueError):
                continue
            member[field] = s.to_json_tree(data, version)
    return tree


def _keyed_messages(
    rec: Record, topic: Any, decoder: str
) -> tuple[Message, Message | None] | tuple[str, None]:
    """A keyed internal record's key and value messages, or the line DumpLogSegments prints
    instead (an unknown record type, an error); a missing key is the error it raises."""
    if rec.key is None:
        raise KafkalogError(
            f"Failed to decode message at offset {rec.offset} using {decoder} decoder "
            "(message had a missing key)"
        )
    try:
        key = topic.decode_key(rec.key)
        return key, topic.decode_value(key.version, rec.value)
    except UnknownRecordType as e:
        return f"Unknown record type {e.record_type} at offset {rec.offset}, skipping.", None
    except KafkalogError as e:
        return _error(rec, e), None


def offsets_parser(rec: Record) -> Parsed:
    """``--offsets-decoder`` (``__consumer_offsets``)."""
    key, value = _keyed_messages(rec, CONSUMER_OFFSETS, "offset topic")
    if isinstance(key, str):
        return key, None
    key_text = _typed("type", key)
    if value is None:
        return key_text, "<DELETE>"
    tree = _group_metadata_tree(value) if value.name == "GroupMetadataValue" else None
    return key_text, _typed("version", value, tree)


def share_group_state_parser(rec: Record) -> Parsed:
    """``--share-group-state-decoder`` (``__share_group_state``)."""
    key, value = _keyed_messages(rec, SHARE_GROUP_STATE, "share group state topic")
    if isinstance(key, str):
        return key, None
    return _typed("type", key), "<DELETE>" if value is None else _typed("type", value)


def transaction_log_parser(rec: Record) -> Parsed:
    """``--transaction-log-decoder`` (``__transaction_state``), in TransactionLog's words."""
    if rec.key is None or len(rec.key) < 2:
        raise KafkalogError(f"record at offset {rec.offset} has no transaction log key")
    version = int.from_bytes(rec.key[:2], "big", signed=True)
    if version != 0:
        return f"unknown::version={version}", None
    key = TRANSACTION_STATE.decode_key(rec.key)
    txn_id = key.data["transactionalId"]
    value = TRANSACTION_STATE.decode_value(key.version, rec.value)
    if value is None:
        return f"transaction_metadata::transactionalId={txn_id}", "<DELETE>"
    v = value.data
    status = v["transactionStatus"]
    state = TRANSACTION_STATES[status] if 0 <= status < len(TRANSACTION_STATES) else str(status)
    partitions: list[str] = []
    if state != "Empty":
        for entry in v["transactionPartitions"] or []:
            partitions.extend(f"{entry['topic']}-{p}" for p in entry["partitionIds"])
    text = (
        f"producerId:{v['producerId']},producerEpoch:{v['producerEpoch']},state={state},"
        f"partitions=[{','.join(partitions)}],"
        f"txnLastUpdateTimestamp={v['transactionLastUpdateTimestampMs']},"
        f"txnTimeoutMs={v['transactionTimeoutMs']}"
    )
    return f"transaction_metadata::transactionalId={txn_id}", text


def cluster_metadata_parser(rec: Record) -> Parsed:
    """``--cluster-metadata-decoder`` (``__cluster_metadata`` and KRaft snapshots)."""
    try:
        if rec.value is None:
            raise KafkalogError("the record has no value")
        api_key, message = CLUSTER_METADATA.decode_value(rec.value)
        body = schema(message.name).to_json_tree(message.data, message.version)
        text = kafka_json(
            {"type": CLUSTER_METADATA.type_name(api_key), "version": message.version, "data": body}
        )
    except KafkalogError as e:
        text = f"Error at {rec.offset}, skipping. {getattr(e, 'reason', e)}"
    return None, text


def remote_log_metadata_parser(rec: Record) -> Parsed:
    """``--remote-log-metadata-decoder`` (``__remote_log_metadata``). Kafka prints the Java
    ``toString`` of its metadata objects; kafkalog prints the record as the cluster metadata
    decoder does (type, version, data as Kafka's JSON converter writes it)."""
    try:
        if rec.value is None:
            raise KafkalogError("the record has no value")
        api_key, message = REMOTE_LOG_METADATA.decode_value(rec.value)
        body = schema(message.name).to_json_tree(message.data, message.version)
        text = kafka_json(
            {
                "type": REMOTE_LOG_METADATA.type_name(api_key),
                "version": message.version,
                "data": body,
            }
        )
    except KafkalogError as e:
        text = f"Error at offset {rec.offset}, skipping. {getattr(e, 'reason', e)}"
    return None, text


PARSERS: dict[str, Parser] = {
    "offsets": offsets_parser,
    "transaction-log": transaction_log_parser,
    "cluster-metadata": cluster_metadata_parser,
    "remote-log-metadata": remote_log_metadata_parser,
    "share-group-state": share_group_state_parser,
}
