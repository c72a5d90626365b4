"""A data directory written by a Kafka broker can hold transactional offset commits in
``__consumer_offsets`` (TxnOffsetCommit before EndTxn): the server loads them as Kafka's
coordinator does, only once their COMMIT marker follows, and agrees with ``kafkalog groups``."""

from __future__ import annotations

import json
from pathlib import Path

from kafka import KafkaAdminClient, TopicPartition

from clirun import kafkalog_here
from kafka_clients import config
from kafkalog.log import Log
from kafkalog.records import Record, encode_batch
from kafkalog.records.batch import encode_control_batch
from kafkalog.records.model import ControlType
from kafkalog.server import ServerThread
from kafkalog.server.offset_store import CommittedOffset, KafkaOffsetCodec, partition_for_group

PARTITIONS = 3
TS = 1_767_268_800_000


def _commit(group: str, topic: str, partition: int, offset: int) -> Record:
    codec = KafkaOffsetCodec()
    return Record.of(
        codec.encode_value(CommittedOffset(offset, -1, "", TS)),
        key=codec.encode_key(group, topic, partition),
        timestamp=TS,
    )


def _write_offsets_log(data: Path, group: str) -> None:
    for p in range(PARTITIONS):
        Log(str(data / f"__consumer_offsets-{p}")).close()
    log = Log(str(data / f"__consumer_offsets-{partition_for_group(group, PARTITIONS)}"))
    try:
        log.append(encode_batch([_commit(group, "t", 0, 1)]))  # a plain commit
        # producer 7 commits t-0 at 5 and aborts; producer 8 commits t-1 at 9 and commits;
        # producer 9 commits t-2 at 3 and never ends its transaction
        for pid, partition, offset in ((7, 0, 5), (8, 1, 9), (9, 2, 3)):
            log.append(
                encode_batch(
                    [_commit(group, "t", partition, offset)],
                    producer_id=pid,
                    producer_epoch=0,
                    base_sequence=0,
                    is_transactional=True,
                )
            )
        for pid, kind in ((7, ControlType.ABORT), (8, ControlType.COMMIT)):
            log.append(
                encode_control_batch(
                    kind, offset=0, timestamp=TS, producer_id=pid, producer_epoch=0
                ),
                origin="coordinator",
            )
    finally:
        log.close()


def test_server_and_groups_command_apply_only_committed_transactions(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for p in range(2):
        Log(str(data / f"t-{p}")).close()
    Log(str(data / "t-2")).close()
    _write_offsets_log(data, "g")
    want = {("t", 0): 1, ("t", 1): 9}

    shown = kafkalog_here("groups", str(data), "--group", "g", "--json")
    rows = [r for r in map(json.loads, shown.stdout.splitlines()) if r["type"] == "offset"]
    assert {(r["topic"], r["partition"]): r["offset"] for r in rows} == want

    with ServerThread(str(data), config(offsets_topic_num_partitions=PARTITIONS)) as server:
        admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=10000)
        try:
            offsets = admin.list_group_offsets("g")["g"]
        finally:
            admin.close()
    assert {(tp.topic, tp.partition): om.offset for tp, om in offsets.items()} == {
        ("t", 0): 1,
        ("t", 1): 9,
    }
    assert TopicPartition("t", 2) not in offsets
