"""The keys and values of Kafka's internal topics, through the vendored message definitions.

Each internal topic frames its records its own way; the schemas themselves are interpreted by
:mod:`kafkalog.records.message_schema`:

* ``__consumer_offsets`` (:data:`CONSUMER_OFFSETS`) and ``__share_group_state``
  (:data:`SHARE_GROUP_STATE`), ``__transaction_state`` (:data:`TRANSACTION_STATE`): the key is
  an int16 *record type* (the key schema's version: 0/1 offset commit, 2 group metadata, 3-8
  KIP-848 consumer groups, 9-15 share groups) then the key struct; the value is an int16 version
  then the value struct of the same record type; a null value is a tombstone.
* ``__cluster_metadata`` (:data:`CLUSTER_METADATA`) and ``__remote_log_metadata``
  (:data:`REMOTE_LOG_METADATA`): no key; the value is ``uvarint frame version (1), uvarint api
  key, uvarint version`` then the record.
* KRaft control records (:func:`decode_control`): the value is the record at version 0, typed by
  the control record's key.

``decode_key``/``decode_value``/``encode_key``/``encode_value`` round-trip every record; the
convenience functions (:func:`offset_commit_record`, :func:`decode_offsets_record`) are what a
group coordinator needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from kafkalog.errors import CorruptRecordError
from kafkalog.records.message_schema import (
    MessageSchema,
    _put_uvarint,
    _Reader,
    schema,
    schema_names,
)


@dataclass(frozen=True)
class Message:
    """One decoded key or value: the schema it was read with, its version and its fields."""

    name: str
    version: int
    data: dict[str, Any]

    def to_json(self) -> str:
        """Kafka's JSON converter text of ``data``."""
        return schema(self.name).to_json(self.data, self.version)


class VersionedTopic:
    """A topic whose keys are ``int16 type + struct`` and values ``int16 version + struct``."""

    def __init__(self, topic: str, key_schemas: tuple[str, ...]) -> None:
        self.topic = topic
        self._key_names = key_schemas

    @property
    def key_schemas(self) -> dict[int, str]:
        """Record type (the key version) -> key schema name."""
        return _key_map(self._key_names)

    def value_schema(self, record_type: int) -> str:
        return self.key_schemas[record_type][: -len("Key")] + "Value"

    def decode_key(self, data: bytes | memoryview, *, what: str = "") -> Message:
        """The key; UnknownRecordType for a record type no schema defines."""
        r = _Reader(memoryview(data).cast("B"), what or f"{self.topic} key")
        record_type: int = r.fixed("int16")
        name = self.key_schemas.get(record_type)
        if name is None:
            raise UnknownRecordType(record_type)
        body = schema(name).decode(r.buf[2:], record_type, what=r.what)
        return Message(name, record_type, body)

    def decode_value(
        self, record_type: int, data: bytes | memoryview | None, *, what: str = ""
    ) -> Message | None:
        """The value of a record of ``record_type``; None for a tombstone."""
        if data is None:
            return None
        name = self.value_schema(record_type)
        r = _Reader(memoryview(data).cast("B"), what or f"{self.topic} value")
        version: int = r.fixed("int16")
        return Message(name, version, schema(name).decode(r.buf[2:], version, what=r.what))

    def encode_key(self, name: str, data: dict[str, Any], record_type: int | None = None) -> bytes:
        """The key bytes of schema ``name`` (its lowest record type unless one is given)."""
        s = schema(name)
        version = s.valid_versions.high if record_type is None else record_type
        return version.to_bytes(2, "big", signed=True) + s.encode(data, version)

    def encode_value(self, name: str, data: dict[str, Any], version: int) -> bytes:
        return version.to_bytes(2, "big", signed=True) + schema(name).encode(data, version)


class UnknownRecordType(CorruptRecordError):
    """A key whose record type no vendored schema defines (Kafka skips such records)."""

    def __init__(self, record_type: int) -> None:
        super().__init__(f"unknown record type {record_type}")
        self.record_type = record_type


@cache
def _key_map(names: tuple[str, ...]) -> dict[int, str]:
    out: dict[int, str] = {}
    for name in names:
        v = schema(name).valid_versions
        for t in range(v.low, v.high + 1):
            out[t] = name
    return out


_GROUP_KEYS = (
    "OffsetCommitKey",
    "GroupMetadataKey",
    "ConsumerGroupMetadataKey",
    "ConsumerGroupPartitionMetadataKey",
    "ConsumerGroupMemberMetadataKey",
    "ConsumerGroupTargetAssignmentMetadataKey",
    "ConsumerGroupTargetAssignmentMemberKey",
    "ConsumerGroupCurrentMemberAssignmentKey",
    "ShareGroupPartitionMetadataKey",
    "ShareGroupMemberMetadataKey",
    "ShareGroupMetadataKey",
    "ShareGroupTargetAssignmentMetadataKey",
    "ShareGroupTargetAssignmentMemberKey",
    "ShareGroupCurrentMemberAssignmentKey",
    "ShareGroupStatePartitionMetadataKey",
)

CONSUMER_OFFSETS = VersionedTopic("__consumer_offsets", _GROUP_KEYS)
TRANSACTION_STATE = VersionedTopic("__transaction_state", ("TransactionLogKey",))
SHARE_GROUP_STATE = VersionedTopic("__share_group_state", ("ShareSnapshotKey", "ShareUpdateKey"))


class FramedTopic:
    """A topic of keyless records framed as ``uvarint frame, uvarint api key, uvarint version``
    (Kafka's ``AbstractApiMessageSerde``)."""

    FRAME_VERSION = 1

    def __init__(self, topic: str, remote: bool) -> None:
        self.topic = topic
        self._remote = remote

    @property
    def by_api_key(self) -> dict[int, str]:
        return _api_keys(self._remote)

    def type_name(self, api_key: int) -> str:
        """Kafka's ``MetadataRecordType`` constant: ``TopicRecord`` -> ``TOPIC_RECORD``."""
        return _snake_upper(schema(self.by_api_key[api_key]).name)

    def decode_value(self, data: bytes | memoryview, *, what: str = "") -> tuple[int, Message]:
        """(api key, message) of one record value."""
        r = _Reader(memoryview(data).cast("B"), what or f"{self.topic} record")
        frame = r.uvarint()
        if frame != self.FRAME_VERSION:
            raise CorruptRecordError(
                f"unknown frame version {frame} (only {self.FRAME_VERSION} is supported)",
                path=r.what,
                position=0,
            )
        api_key = r.uvarint()
        version = r.uvarint()
        name = self.by_api_key.get(api_key)
        if name is None:
            raise CorruptRecordError(f"unknown record type {api_key}", path=r.what, position=1)
        body = schema(name).decode(r.buf[r.pos :], version, what=r.what)
        return api_key, Message(name, version, body)

    def encode_value(self, name: str, data: dict[str, Any], version: int) -> bytes:
        s = schema(name)
        assert s.api_key is not None, f"{name} has no api key"
        out = bytearray()
        _put_uvarint(out, self.FRAME_VERSION)
        _put_uvarint(out, s.api_key)
        _put_uvarint(out, version)
        return bytes(out) + s.encode(data, version)


@cache
def _api_keys(remote: bool) -> dict[int, str]:
    out: dict[int, str] = {}
    for name in schema_names():
        if name.startswith("Remote") != remote:
            continue
        s: MessageSchema = schema(name)
        if s.type == "metadata" and s.api_key is not None:
            out[s.api_key] = name
    return out


def _snake_upper(name: str) -> str:
    """Kafka's ``MessageGenerator.toSnakeCase`` upper-cased."""
    out: list[str] = []
    previous_upper = True
    for ch in name:
        if ch.isupper():
            if not previous_upper:
                out.append("_")
            out.append(ch.lower())
            previous_upper = True
        else:
            out.append(ch)
            previous_upper = False
    return "".join(out).upper()


CLUSTER_METADATA = FramedTopic("__cluster_metadata", remote=False)
REMOTE_LOG_METADATA = FramedTopic("__remote_log_metadata", remote=True)

# KRaft control records (ControlRecordType id -> schema), read at their current version 0
CONTROL_SCHEMAS = {
    2: ("LeaderChange", "LeaderChangeMessage"),
    3: ("SnapshotHeader", "SnapshotHeaderRecord"),
    4: ("SnapshotFooter", "SnapshotFooterRecord"),
    5: ("KRaftVersion", "KRaftVersionRecord"),
    6: ("KRaftVoters", "VotersRecord"),
}


def decode_control(type_id: int, value: bytes | memoryview, *, what: str = "") -> Message:
    """A KRaft control record's value (Kafka's ``ControlRecordUtils``: version 0, no prefix)."""
    name = CONTROL_SCHEMAS[type_id][1]
    return Message(name, 0, schema(name).decode(value, 0, what=what or name))


def encode_control(type_id: int, data: dict[str, Any]) -> bytes:
    return schema(CONTROL_SCHEMAS[type_id][1]).encode(data, 0)


# -- what a group coordinator needs ------------------------------------------------------------
OFFSET_COMMIT_KEY_VERSION = 1  # what Kafka writes (0 and 1 are the same struct)
GROUP_METADATA_KEY_VERSION = 2


def offset_commit_record(
    group: str,
    topic: str,
    partition: int,
    offset: int,
    *,
    commit_timestamp: int,
    metadata: str = "",
    leader_epoch: int = -1,
    expire_timestamp: int | None = None,
) -> tuple[bytes, bytes]:
    """(key, value) of an offset commit, in the versions a current broker writes them: value
    version 1 when an expire timestamp is given (the only version that has one), else 3."""
    key = CONSUMER_OFFSETS.encode_key(
        "OffsetCommitKey",
        {"group": group, "topic": topic, "partition": partition},
        OFFSET_COMMIT_KEY_VERSION,
    )
    data: dict[str, Any] = {
        "offset": offset,
        "leaderEpoch": leader_epoch,
        "metadata": metadata,
        "commitTimestamp": commit_timestamp,
    }
    if expire_timestamp is not None:
        data["expireTimestamp"] = expire_timestamp
        return key, CONSUMER_OFFSETS.encode_value("OffsetCommitValue", data, 1)
    return key, CONSUMER_OFFSETS.encode_value("OffsetCommitValue", data, 3)


def offset_commit_tombstone_key(group: str, topic: str, partition: int) -> bytes:
    return CONSUMER_OFFSETS.encode_key(
        "OffsetCommitKey",
        {"group": group, "topic": topic, "partition": partition},
        OFFSET_COMMIT_KEY_VERSION,
    )


def group_metadata_record(
    group: str, value: dict[str, Any] | None, version: int = 3
) -> tuple[bytes, bytes | None]:
    """(key, value) of a classic group's metadata; ``value`` None makes the tombstone."""
    key = CONSUMER_OFFSETS.encode_key("GroupMetadataKey", {"group": group}, 2)
    if value is None:
        return key, None
    return key, CONSUMER_OFFSETS.encode_value("GroupMetadataValue", value, version)


@dataclass(frozen=True)
class OffsetsRecord:
    """One ``__consumer_offsets`` record: its key and value (None for a tombstone)."""

    key: Message
    value: Message | None

    @property
    def is_offset_commit(self) -> bool:
        return self.key.name == "OffsetCommitKey"

    @property
    def is_group_metadata(self) -> bool:
        return self.key.name == "GroupMetadataKey"


def decode_offsets_record(
    key: bytes | memoryview, value: bytes | memoryview | None, *, what: str = ""
) -> OffsetsRecord:
    k = CONSUMER_OFFSETS.decode_key(key, what=what)
    return OffsetsRecord(k, CONSUMER_OFFSETS.decode_value(k.version, value, what=what))
