"""The internal topics' keys and values, through the vendored Kafka message definitions.

* every record of the real ``__consumer_offsets`` and ``__cluster_metadata`` partitions (and the
  KRaft snapshot ``.checkpoint``) in the fixtures decodes, and re-encodes to the same bytes;
* consumer-protocol subscriptions and assignments written by aiokafka's consumer-group code
  decode with our interpreter (and ours decode with aiokafka);
* offset commits, group metadata and transaction state round-trip through every version;
* corrupt bytes fail with a positioned ``CorruptRecordError``, never another exception.
"""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path

import pytest
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)

from kafkalog.errors import CorruptRecordError
from kafkalog.records import LogReader
from kafkalog.records.internal_topics import (
    CLUSTER_METADATA,
    CONSUMER_OFFSETS,
    CONTROL_SCHEMAS,
    SHARE_GROUP_STATE,
    TRANSACTION_STATE,
    UnknownRecordType,
    decode_control,
    decode_offsets_record,
    encode_control,
    group_metadata_record,
    offset_commit_record,
)
from kafkalog.records.message_schema import kafka_uuid, parse_kafka_uuid, schema, schema_names
from kafkalog.records.reader import read_only_buffer
from provenance import FIXTURES


def _records(path: Path):  # type: ignore[no-untyped-def]
    for entry in LogReader(read_only_buffer(str(path)), path=str(path)):
        for rec in entry.records():
            yield entry, rec


def test_every_vendored_schema_parses() -> None:
    names = schema_names()
    assert {"OffsetCommitKey", "GroupMetadataValue", "TopicRecord", "VotersRecord"} <= set(names)
    for name in names:  # the file name is the message name, but for one renamed record
        assert schema(name).name in (name, "ZkMigrationStateRecord")


def test_real_consumer_offsets_decode_and_reencode_byte_for_byte() -> None:
    kinds: Counter[tuple[str, int | None]] = Counter()
    for path in sorted(FIXTURES.glob("*/__consumer_offsets-*/*.log")):
        for entry, rec in _records(path):
            if getattr(entry, "is_control", False):
                continue
            assert rec.key is not None
            r = decode_offsets_record(rec.key, rec.value, what=str(path))
            kinds[(r.key.name, None if r.value is None else r.value.version)] += 1
            assert CONSUMER_OFFSETS.encode_key(r.key.name, r.key.data, r.key.version) == rec.key
            if r.value is None:
                assert rec.value is None
            else:
                again = CONSUMER_OFFSETS.encode_value(r.value.name, r.value.data, r.value.version)
                assert again == rec.value
    # brokers from 0.9 to 3.7: offset commit values v1-v4, group metadata v0-v3, tombstones
    assert {v for (k, v) in kinds if k == "OffsetCommitKey"} >= {1, 2, 3, None}
    assert {v for (k, v) in kinds if k == "GroupMetadataKey"} >= {0, 2, 3, None}
    assert sum(kinds.values()) > 9000


def test_real_cluster_metadata_and_snapshot_decode_and_reencode() -> None:
    names: Counter[str] = Counter()
    paths = sorted(FIXTURES.glob("*/__cluster_metadata-*/*.log")) + sorted(
        FIXTURES.glob("*/__cluster_metadata-*/*.checkpoint")
    )
    assert paths
    for path in paths:
        for entry, rec in _records(path):
            assert rec.value is not None
            if getattr(entry, "is_control", False):
                assert rec.key is not None
                type_id = int.from_bytes(rec.key[2:4], "big")
                if type_id in CONTROL_SCHEMAS:
                    m = decode_control(type_id, rec.value)
                    assert encode_control(type_id, m.data) == rec.value
                    names[m.name] += 1
                continue
            _api_key, m = CLUSTER_METADATA.decode_value(rec.value)
            assert CLUSTER_METADATA.encode_value(m.name, m.data, m.version) == rec.value
            names[m.name] += 1
    for expected in (
        "TopicRecord",
        "PartitionRecord",
        "RegisterBrokerRecord",
        "FeatureLevelRecord",
        "PartitionChangeRecord",
        "SnapshotHeaderRecord",
        "SnapshotFooterRecord",
        "KRaftVersionRecord",
        "VotersRecord",
        "LeaderChangeMessage",
    ):
        assert names[expected] > 0, expected


def test_cluster_metadata_json_is_kafkas_converter_text() -> None:
    topic_id = uuid.UUID("81290f96-1c1b-4d1e-b54f-a9d4f1a6e0a3")
    value = CLUSTER_METADATA.encode_value("TopicRecord", {"name": "t", "topicId": topic_id}, 0)
    # frame version 1, api key 2, version 0, compact string, uuid, no tagged fields
    assert value[:3] == b"\x01\x02\x00"
    api_key, m = CLUSTER_METADATA.decode_value(value)
    assert CLUSTER_METADATA.type_name(api_key) == "TOPIC_RECORD"
    assert m.to_json() == f'{{"name":"t","topicId":"{kafka_uuid(topic_id)}"}}'
    assert parse_kafka_uuid(kafka_uuid(topic_id)) == topic_id
    # a tagged field appears only when it is not its default (Kafka's JsonConverter)
    feature = CLUSTER_METADATA.encode_value(
        "FeatureLevelRecord", {"name": "metadata.version", "featureLevel": 19}, 0
    )
    assert CLUSTER_METADATA.decode_value(feature)[1].to_json() == (
        '{"name":"metadata.version","featureLevel":19}'
    )


def test_aiokafka_subscription_and_assignment_decode_with_the_consumer_protocol_schemas() -> None:
    sub = ConsumerProtocolMemberMetadata(0, ["orders", "payments"], b"ud").encode()
    version = int.from_bytes(sub[:2], "big")
    got = schema("ConsumerProtocolSubscription").decode(sub[2:], version)
    assert got == {"topics": ["orders", "payments"], "userData": b"ud"}
    assignment = ConsumerProtocolMemberAssignment(0, [("orders", [0, 2]), ("payments", [1])], b"")
    raw = assignment.encode()
    got = schema("ConsumerProtocolAssignment").decode(raw[2:], int.from_bytes(raw[:2], "big"))
    assert got["assignedPartitions"] == [
        {"topic": "orders", "partitions": [0, 2]},
        {"topic": "payments", "partitions": [1]},
    ]
    # and the other way: ours decoded by aiokafka
    ours = b"\x00\x00" + schema("ConsumerProtocolSubscription").encode(
        {"topics": ["x"], "userData": None}, 0
    )
    theirs = ConsumerProtocolMemberMetadata.decode(ours)
    assert theirs.subscription == ["x"]


@pytest.mark.parametrize("expire", [None, 1_700_000_999_000])
def test_offset_commit_round_trip(expire: int | None) -> None:
    key, value = offset_commit_record(
        "g", "orders", 3, 42, commit_timestamp=1_700_000_000_000, expire_timestamp=expire
    )
    r = decode_offsets_record(key, value)
    assert r.is_offset_commit
    assert r.key.data == {"group": "g", "topic": "orders", "partition": 3}
    assert r.value is not None
    assert r.value.version == (1 if expire is not None else 3)
    assert r.value.data["offset"] == 42
    assert r.value.data["commitTimestamp"] == 1_700_000_000_000
    if expire is not None:
        assert r.value.data["expireTimestamp"] == expire
    else:
        assert r.value.data["leaderEpoch"] == -1


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_group_metadata_every_version_round_trips(version: int) -> None:
    member = {
        "memberId": "m-1",
        "groupInstanceId": "static-1" if version >= 3 else None,
        "clientId": "c",
        "clientHost": "/127.0.0.1",
        "rebalanceTimeout": 300000,
        "sessionTimeout": 45000,
        "subscription": b"\x00\x00sub",
        "assignment": b"\x00\x00asg",
    }
    value = {
        "protocolType": "consumer",
        "generation": 7,
        "protocol": None,
        "leader": "m-1",
        "currentStateTimestamp": 1_700_000_000_000,
        "members": [member],
    }
    key, raw = group_metadata_record("g", value, version)
    assert raw is not None
    r = decode_offsets_record(key, raw)
    assert r.is_group_metadata and r.value is not None and r.value.version == version
    back = r.value.data
    assert back["generation"] == 7 and back["protocol"] is None
    assert back["members"][0]["memberId"] == "m-1"
    assert ("currentStateTimestamp" in back) == (version >= 2)
    assert ("rebalanceTimeout" in back["members"][0]) == (version >= 1)
    tomb_key, tomb = group_metadata_record("g", None)
    assert tomb is None and decode_offsets_record(tomb_key, None).value is None


def test_transaction_state_round_trip_with_tagged_fields() -> None:
    key = TRANSACTION_STATE.encode_key("TransactionLogKey", {"transactionalId": "tx-1"})
    data = {
        "producerId": 1000,
        "producerEpoch": 3,
        "transactionTimeoutMs": 60000,
        "transactionStatus": 1,
        "transactionPartitions": [{"topic": "orders", "partitionIds": [0, 1]}],
        "transactionLastUpdateTimestampMs": 5,
        "transactionStartTimestampMs": 4,
    }
    for version in (0, 1):
        value = TRANSACTION_STATE.encode_value("TransactionLogValue", data, version)
        k = TRANSACTION_STATE.decode_key(key)
        v = TRANSACTION_STATE.decode_value(k.version, value)
        assert k.data == {"transactionalId": "tx-1"}
        assert v is not None and v.data["transactionPartitions"] == data["transactionPartitions"]
    tagged = TRANSACTION_STATE.encode_value(
        "TransactionLogValue", {**data, "previousProducerId": 999}, 1
    )
    v = TRANSACTION_STATE.decode_value(0, tagged)
    assert v is not None and v.data["previousProducerId"] == 999
    assert '"previousProducerId":999' in v.to_json()
    untagged = TRANSACTION_STATE.decode_value(
        0, TRANSACTION_STATE.encode_value("TransactionLogValue", data, 1)
    )
    assert untagged is not None and "previousProducerId" not in untagged.to_json()


def test_share_group_state_round_trip() -> None:
    topic_id = uuid.uuid4()
    key = SHARE_GROUP_STATE.encode_key(
        "ShareUpdateKey", {"groupId": "s", "topicId": topic_id, "partition": 2}
    )
    k = SHARE_GROUP_STATE.decode_key(key)
    assert k.name == "ShareUpdateKey" and k.data["topicId"] == topic_id


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\x00",
        b"\x00\x01\x00\x05ab",  # group string longer than the bytes left
        b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00\x01\xff",  # a byte after the struct
        b"\x00\x02\x7f\xff" + b"x" * 10,
    ],
)
def test_corrupt_keys_fail_with_a_positioned_error(raw: bytes) -> None:
    with pytest.raises(CorruptRecordError) as e:
        CONSUMER_OFFSETS.decode_key(raw, what="seg.log offset 7")
    assert "seg.log offset 7" in str(e.value)


def test_unknown_record_type_is_its_own_error() -> None:
    with pytest.raises(UnknownRecordType) as e:
        CONSUMER_OFFSETS.decode_key(b"\x00\x63\x00\x00")
    assert e.value.record_type == 99


def test_huge_array_length_is_refused_before_allocating() -> None:
    # PartitionRecord with a replicas array claiming 2^28 elements
    bad = b"\x01\x03\x00" + b"\x00\x00\x00\x00" + b"\x00" * 16 + b"\x80\x80\x80\x80\x01"
    with pytest.raises(CorruptRecordError):
        CLUSTER_METADATA.decode_value(bad)
