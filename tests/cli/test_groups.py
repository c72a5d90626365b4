"""``kafkalog groups`` against what real consumer-group clients committed (issue 15's proof).

kafka-python and aiokafka, unchanged, commit offsets through ``kafkalog serve`` (so the
``__consumer_offsets`` records are written by the coordinator path Kafka clients drive); the
server is stopped and ``kafkalog groups`` reads the directory alone. The oracle is independent of
kafkalog's decoder: the offsets the test told the clients to commit, and a brute-force count and
scan of every record of the topic for log end offsets, lag and the first offset at a time.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import OffsetAndMetadata as AioOffset
from aiokafka.structs import TopicPartition as AioTP
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.structs import OffsetAndMetadata

from clirun import kafkalog_here, tree_snapshot
from kafka_clients import config
from kafkalog.log import Log
from kafkalog.server import ServerThread

BASE = 1_700_000_000_000
RECORDS = 40  # per partition, record i at BASE + i seconds


def _kafka_python_commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        consumer.commit(
            {
                TopicPartition(t, p): OffsetAndMetadata(o, f"m{o}", -1)
                for (t, p), o in offsets.items()
            }
        )
    finally:
        consumer.close()


def _aiokafka_commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    async def go() -> None:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False
        )
        await consumer.start()
        try:
            consumer.assign([AioTP(t, p) for t, p in offsets])
            await consumer.commit({AioTP(t, p): AioOffset(o, "") for (t, p), o in offsets.items()})
        finally:
            await consumer.stop()

    asyncio.run(go())


def _brute_force(data: Path, topic: str, partition: int) -> list[tuple[int, int]]:
    """(offset, timestamp) of every record, read from the log start."""
    with Log(data / f"{topic}-{partition}", writable=False) as log:
        return [(r.offset, r.timestamp) for r in log.records(log.log_start_offset)]


def _lines(*args: str) -> list[dict[str, Any]]:
    result = kafkalog_here("groups", *args)
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]  # nothing but JSON


def test_groups_reports_what_real_clients_committed(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    with ServerThread(str(data), config()) as server:
        admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
        admin.create_topics([NewTopic("orders", 2, 1)])
        admin.close()
        producer = KafkaProducer(bootstrap_servers=server.bootstrap)
        for p in range(2):
            for i in range(RECORDS - 10 * p):  # 40 records in orders-0, 30 in orders-1
                producer.send("orders", value=b"v%d" % i, partition=p, timestamp_ms=BASE + i * 1000)
        producer.flush()
        producer.close()
        first = {("orders", 0): 10, ("orders", 1): 5}
        _kafka_python_commit(server.bootstrap, "billing", first)
        time.sleep(0.05)
        between = int(time.time() * 1000)
        time.sleep(0.05)
        _kafka_python_commit(server.bootstrap, "billing", {("orders", 0): 25})
        _aiokafka_commit(server.bootstrap, "audit", {("orders", 1): 7})
        # a subscribing member: the coordinator writes the group's metadata too
        member = KafkaConsumer(
            "orders",
            bootstrap_servers=server.bootstrap,
            group_id="live",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            consumer_timeout_ms=1500,
            fetch_max_wait_ms=100,
        )
        assert len(list(member)) == 70
        member.commit()
        member.close()
    before = tree_snapshot(data)

    ends = {p: len(_brute_force(data, "orders", p)) for p in range(2)}
    assert ends == {0: 40, 1: 30}
    rows = _lines(str(data), "--json")
    offsets = {(r["group"], r["partition"]): r for r in rows if r["type"] == "offset"}
    expected = {("billing", 0): 25, ("billing", 1): 5, ("audit", 1): 7, ("live", 0): 40}
    expected[("live", 1)] = 30
    assert {k: v["offset"] for k, v in offsets.items()} == expected
    for (_group, p), row in offsets.items():
        assert row["topic"] == "orders"
        assert row["logEndOffset"] == ends[p]
        assert row["lag"] == ends[p] - row["offset"]
    assert offsets[("billing", 1)]["metadata"] == "m5"
    summaries = {r["group"]: r for r in rows if r["type"] == "group"}
    assert summaries["billing"]["totalLag"] == (40 - 25) + (30 - 5)
    assert summaries["audit"]["totalLag"] == 30 - 7
    assert summaries["live"]["totalLag"] == 0
    assert summaries["live"]["protocolType"] == "consumer"  # its GroupMetadata record
    assert summaries["billing"]["lastCommitTimestamp"] >= between

    # --at: the replay stops at a time, before the second round of commits
    earlier = _lines(str(data), "--json", "--at", str(between))
    offsets_then = {
        (r["group"], r["partition"]): r["offset"] for r in earlier if r["type"] == "offset"
    }
    assert offsets_then == {("billing", 0): 10, ("billing", 1): 5}

    # --offsets-for-time: the first offset at or after a time, from a scan of every record
    at = BASE + 17_500
    csv = kafkalog_here("groups", str(data), "--group", "billing", "--offsets-for-time", str(at))
    assert csv.returncode == 0, csv.stderr
    want = []
    for p in range(2):
        first_at = next((o for o, ts in _brute_force(data, "orders", p) if ts >= at), ends[p])
        want.append(f"orders,{p},{first_at}")
    assert csv.stdout.splitlines() == want

    text = kafkalog_here("groups", str(data), "--group", "billing")
    assert text.returncode == 0
    assert text.stdout.splitlines()[0].split() == [
        "GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "COMMITTED",
    ]  # fmt: skip
    assert "billing: 2 partitions, total lag 40" in text.stdout
    assert tree_snapshot(data) == before  # read only
