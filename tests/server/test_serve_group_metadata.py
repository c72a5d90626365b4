"""Group metadata survives a restart, as on a broker: the coordinator stores each group's
``GroupMetadata`` record in ``__consumer_offsets`` when a rebalance completes and when the group
becomes Empty, loads it at start, and a DeleteGroups writes the tombstones. Checked with
kafka-python's consumer and admin client, unchanged, and with ``kafkalog groups`` and ``dump``
reading the records from the files alone."""

from __future__ import annotations

import json
from pathlib import Path

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer

from clirun import kafkalog_here
from kafka_clients import config
from kafkalog.server import ServerThread


def _member(bootstrap: str, group: str) -> KafkaConsumer:
    return KafkaConsumer(
        "events",
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=1500,
        fetch_max_wait_ms=100,
        session_timeout_ms=6000,
        heartbeat_interval_ms=200,
    )


def test_groups_are_listed_after_a_restart_and_deleted_with_tombstones(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    with ServerThread(str(data), config()) as server:
        producer = KafkaProducer(bootstrap_servers=server.bootstrap)
        for i in range(10):
            producer.send("events", value=b"e%d" % i)
        producer.flush()
        producer.close()
        for group in ("keep", "drop"):
            member = _member(server.bootstrap, group)
            assert len(list(member)) == 10
            member.commit()
            member.close()  # leaves the group: it becomes Empty (stored again)
    # a new server on the same directory
    with ServerThread(str(data), config()) as server:
        admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
        try:
            listed = {g["group_id"]: g for g in admin.list_groups()}
            assert set(listed) == {"keep", "drop"}
            assert listed["keep"]["group_state"] == "Empty"
            assert listed["keep"]["protocol_type"] == "consumer"
            described = admin.describe_groups(["keep"])["keep"]
            assert described["group_state"] == "Empty" and described["error"] is None
            assert described["protocol_type"] == "consumer" and described["members"] == []
            member = _member(server.bootstrap, "drop")
            assert list(member) == []  # resumes at its committed 10: nothing new
            # a group with a live member cannot be deleted; an Empty one can; none: not found
            assert admin.delete_groups(["drop"]) == {"drop": "NonEmptyGroupError"}
            member.close()
            assert admin.delete_groups(["drop"]) == {"drop": "OK"}
            assert admin.delete_groups(["nobody"]) == {"nobody": "GroupIdNotFoundError"}
            assert [g["group_id"] for g in admin.list_groups()] == ["keep"]
        finally:
            admin.close()
    # from the files alone: the tombstones took "drop" away, "keep" is there with its offset
    result = kafkalog_here("groups", str(data), "--json")
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert {r["group"] for r in rows} == {"keep"}
    (offset,) = [r for r in rows if r["type"] == "offset"]
    assert offset["offset"] == 10 and offset["lag"] == 0
    (summary,) = [r for r in rows if r["type"] == "group"]
    assert summary["protocolType"] == "consumer" and summary["members"] == 0
