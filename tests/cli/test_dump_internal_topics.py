"""``kafkalog dump`` with DumpLogSegments' internal-topic decoders, and ``--json``.

The real ``__consumer_offsets`` and ``__cluster_metadata`` partitions and the KRaft snapshot of
the fixtures decode completely (no ``Error at`` / ``Unknown record type`` line), the lines have
Kafka's shape (spec §9.2: ``key: {"type":"<n>","data":...}``, ``payload: {"version":"<n>",...}``,
``<DELETE>`` for tombstones, ``payload: {"type":"TOPIC_RECORD","version":0,"data":...}``,
``SnapshotHeader {json}``), and ``--json`` prints JSON objects only.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clirun import kafkalog_here
from kafkalog.records import Record, encode_batch
from kafkalog.records.internal_topics import TRANSACTION_STATE, offset_commit_record
from provenance import FIXTURES

OFFSETS = sorted(FIXTURES.glob("*/__consumer_offsets-*/*.log"))
METADATA = sorted(FIXTURES.glob("*/__cluster_metadata-*/*.log"))
SNAPSHOT = next(FIXTURES.glob("*/__cluster_metadata-*/*.checkpoint"))


def _record_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("|")]


@pytest.mark.parametrize("path", [p for p in OFFSETS if p.stat().st_size], ids=str)
def test_real_consumer_offsets_decode_fully(path: Path) -> None:
    result = kafkalog_here("dump", "--offsets-decoder", "--files", str(path))
    assert result.returncode == 0, result.stderr
    lines = _record_lines(result.stdout)
    assert lines
    for line in lines:
        assert "Error at" not in line and "Unknown record type" not in line, line
        assert ' key: {"type":"' in line
        assert ' payload: {"version":"' in line or line.endswith(" payload: <DELETE>")


def test_offsets_lines_have_kafkas_shape() -> None:
    path = FIXTURES / "volodymyrzee-kafka-2020/__consumer_offsets-17/00000000000000000000.log"
    result = kafkalog_here("dump", "--offsets-decoder", "--files", str(path))
    first = _record_lines(result.stdout)[0]
    assert first.startswith(
        "| offset: 0 CreateTime: 1587577981573 keySize: 26 valueSize: 313 sequence: -1 "
        'headerKeys: [] key: {"type":"2","data":{"group":"console-consumer-48266"}} '
        'payload: {"version":"3","data":{"protocolType":"consumer","generation":1,'
    )
    # the consumer protocol's subscription and assignment decoded, as DumpLogSegments does
    assert '"subscription":{"topics":["first_topic"],"userData":null,"ownedPartitions":[]}' in first
    assert '"assignment":{"assignedPartitions":[{"topic":"first_topic","partitions":[0,1,2]}]' in (
        first
    )


@pytest.mark.parametrize("path", [*METADATA, SNAPSHOT], ids=str)
def test_real_cluster_metadata_decodes_fully(path: Path) -> None:
    result = kafkalog_here("dump", "--cluster-metadata-decoder", "--files", str(path))
    assert result.returncode == 0, result.stderr
    lines = _record_lines(result.stdout)
    assert lines
    payloads = [line for line in lines if " payload: " in line]
    assert payloads
    for line in payloads:
        assert ' payload: {"type":"' in line and "Error at" not in line, line


def test_kraft_snapshot_lines() -> None:
    result = kafkalog_here("dump", "--cluster-metadata-decoder", "--files", str(SNAPSHOT))
    out = result.stdout.splitlines()
    assert out[1] == "Snapshot end offset: 1734780, epoch: 1"
    lines = _record_lines(result.stdout)
    assert lines[0].endswith(
        ' headerKeys: [] SnapshotHeader {"version":0,"lastContainedLogTimestamp":1767084411992}'
    )
    assert lines[1].endswith(' KRaftVersion {"version":0,"kRaftVersion":1}')
    assert ' KRaftVoters {"version":0,"voters":[{"voterId":1,' in lines[2]
    assert lines[-1].endswith(' SnapshotFooter {"version":0}')
    assert (
        ' payload: {"type":"FEATURE_LEVEL_RECORD","version":0,"data":{"name":"metadata.'
        in (lines[3])
    )


def test_offsets_tombstone_and_transaction_log(tmp_path: Path) -> None:
    key, value = offset_commit_record("g", "t", 0, 5, commit_timestamp=1000)
    txn_key = TRANSACTION_STATE.encode_key("TransactionLogKey", {"transactionalId": "tx"})
    txn_value = TRANSACTION_STATE.encode_value(
        "TransactionLogValue",
        {
            "producerId": 7,
            "producerEpoch": 1,
            "transactionTimeoutMs": 60000,
            "transactionStatus": 1,
            "transactionPartitions": [{"topic": "orders", "partitionIds": [3]}],
            "transactionLastUpdateTimestampMs": 2000,
            "transactionStartTimestampMs": 1500,
        },
        0,
    )
    offsets = tmp_path / "__consumer_offsets-0" / "00000000000000000000.log"
    offsets.parent.mkdir()
    offsets.write_bytes(
        encode_batch([Record.of(value, key=key, timestamp=1000), Record.of(None, key=key)])
    )
    result = kafkalog_here("dump", "--offsets-decoder", "--files", str(offsets))
    lines = _record_lines(result.stdout)
    assert lines[0].endswith(
        'key: {"type":"1","data":{"group":"g","topic":"t","partition":0}} '
        'payload: {"version":"3","data":{"offset":5,"leaderEpoch":-1,"metadata":"",'
        '"commitTimestamp":1000}}'
    )
    assert lines[1].endswith(" payload: <DELETE>")
    txn = tmp_path / "__transaction_state-0" / "00000000000000000000.log"
    txn.parent.mkdir()
    txn.write_bytes(encode_batch([Record.of(txn_value, key=txn_key), Record.of(None, key=txn_key)]))
    result = kafkalog_here("dump", "--transaction-log-decoder", "--files", str(txn))
    lines = _record_lines(result.stdout)
    assert lines[0].endswith(
        " key: transaction_metadata::transactionalId=tx payload: producerId:7,producerEpoch:1,"
        "state=Ongoing,partitions=[orders-3],txnLastUpdateTimestamp=2000,txnTimeoutMs=60000"
    )
    assert lines[1].endswith(" key: transaction_metadata::transactionalId=tx payload: <DELETE>")
    # --json: objects only, the decoded key and value as JSON
    result = kafkalog_here("dump", "--json", "--offsets-decoder", "--files", str(offsets))
    objects = [json.loads(line) for line in result.stdout.splitlines()]
    assert [o["type"] for o in objects] == ["file", "batch", "record", "record"]
    assert objects[0] == {"type": "file", "file": str(offsets), "logStartOffset": 0}
    assert objects[2]["key"] == {
        "type": "1",
        "data": {"group": "g", "topic": "t", "partition": 0},
    }
    assert objects[2]["value"]["data"]["offset"] == 5
    assert objects[3]["value"] == "<DELETE>"


def test_json_mode_prints_json_only() -> None:
    files = [OFFSETS[-1], SNAPSHOT]
    result = kafkalog_here(
        "dump", "--json", "--deep-iteration", "--files", ",".join(str(f) for f in files)
    )
    assert result.returncode == 0, result.stderr
    objects = [json.loads(line) for line in result.stdout.splitlines()]
    assert {o["type"] for o in objects} >= {"file", "batch", "record"}
    assert all(isinstance(o["file"], str) for o in objects)
    snapshot_file = next(o for o in objects if o["type"] == "file" and o["file"] == str(SNAPSHOT))
    assert snapshot_file["snapshotEndOffset"] == 1734780
    controls = [o["control"] for o in objects if "control" in o]
    assert controls[0].startswith("SnapshotHeader {")
