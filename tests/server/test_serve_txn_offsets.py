"""Transactional offsets in ``__consumer_offsets``, as Kafka's GroupMetadataManager keeps them:
a TxnOffsetCommit is the producer's transactional batch; replay applies it at the producer's
COMMIT marker in the same partition (unless a later record is already in effect), drops it at
ABORT, and keeps it pending without a marker; the group coordinator holds pending offsets apart
from the committed ones, answers UNSTABLE_OFFSET_COMMIT for them to a require_stable fetch, and
applies or drops them when the marker is written."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from kio.index import load_request_schema

from kafkalog.log import AppendOrigin, Log
from kafkalog.records import ControlType, RecordBatch
from kafkalog.records.batch import encode_control_batch
from kafkalog.server.codec import build
from kafkalog.server.groups import UNSTABLE_OFFSET_COMMIT, GroupCoordinator
from kafkalog.server.offset_store import (
    CommittedOffset,
    ConsumerOffsetsTopic,
    partition_for_group,
)

PARTITIONS = 3
PID, EPOCH = 41, 2
TP = ("in", 0)


class Topic:
    """``__consumer_offsets`` partitions as real logs (offsets assigned, markers checked)."""

    def __init__(self, root: Path) -> None:
        self.logs = [
            Log(root / f"__consumer_offsets-{p}", writable=True) for p in range(PARTITIONS)
        ]

    def append(self, partition: int, batch: bytes) -> int:
        info = self.logs[partition].append(batch, origin=AppendOrigin.COORDINATOR)
        return info.first_offset

    def read_all(self) -> Any:
        for log in self.logs:
            yield (b for b in log.batches(log.log_start_offset) if isinstance(b, RecordBatch))

    def marker(self, group: str, commit: bool, pid: int = PID) -> int:
        kind = ControlType.COMMIT if commit else ControlType.ABORT
        batch = encode_control_batch(
            kind, offset=0, timestamp=1, producer_id=pid, producer_epoch=EPOCH
        )
        partition = partition_for_group(group, PARTITIONS)
        self.append(partition, batch)
        return partition

    def store(self) -> ConsumerOffsetsTopic:
        return ConsumerOffsetsTopic(PARTITIONS, self.append, self.read_all)

    def close(self) -> None:
        for log in self.logs:
            log.close()


def test_replay_commits_drops_and_keeps_pending(tmp_path: Path) -> None:
    topic = Topic(tmp_path)
    try:
        store = topic.store()
        # one transactional producer per group (a marker ends all its producer's records in
        # its partition, whichever group they are for)
        pids = {"committed": PID, "aborted": PID + 1, "pending": PID + 2, "later": PID + 3}
        for group, pid in pids.items():
            store.commit(group, {TP: CommittedOffset(1)})
            store.commit_transactional(group, pid, EPOCH, {TP: CommittedOffset(10)})
        # a plain commit after the transactional record, before its marker: it stays
        store.commit("later", {TP: CommittedOffset(5)})
        for group, commit in (("committed", True), ("aborted", False), ("later", True)):
            topic.marker(group, commit, pids[group])

        loaded = topic.store()
        offsets = loaded.load()
        assert {g: o[TP].offset for g, o in offsets.items()} == {
            "committed": 10,
            "aborted": 1,
            "pending": 1,
            "later": 5,
        }
        assert {g: {pid: o[TP].offset for pid, o in p.items()} for g, p in
                loaded.load_pending().items()} == {"pending": {PID + 2: 10}}  # fmt: skip
        # ``kafkalog groups`` reads the same offsets from the same records
        from kafkalog.cli.groups import offsets_entries, replay

        by_tool = {}
        for log in topic.logs:
            for (group, *_), commit in replay(offsets_entries(log)).offsets.items():
                by_tool[group] = commit.offset
        assert by_tool == {g: o[TP].offset for g, o in offsets.items()}
    finally:
        topic.close()


def fetch(coordinator: GroupCoordinator, group: str, stable: bool) -> tuple[int, int]:
    body = build(
        load_request_schema(9, 7),
        {
            "group_id": group,
            "topics": [{"name": TP[0], "partition_indexes": [TP[1]]}],
            "require_stable": stable,
        },
    )
    answer = asyncio.run(coordinator.fetch_offsets(body, 7))
    (part,) = answer["topics"][0]["partitions"]
    return part["error_code"], part["committed_offset"]


def coordinator(store: ConsumerOffsetsTopic) -> GroupCoordinator:
    return GroupCoordinator(
        store,
        initial_rebalance_delay=0,
        min_session_timeout=1,
        max_session_timeout=60,
        topic_exists=lambda t, p: True,
        offsets_partitions=PARTITIONS,
    )


def test_the_coordinator_holds_pending_offsets_until_the_marker(tmp_path: Path) -> None:
    topic = Topic(tmp_path)
    try:
        groups = coordinator(topic.store())
        pids = {"c": PID, "a": PID + 1, "restart": PID + 2}
        for group, pid in pids.items():
            groups.apply_commit(group, {TP: CommittedOffset(1)})
            groups.store_transactional(group, pid, EPOCH, {TP: CommittedOffset(10)})
            assert fetch(groups, group, stable=False) == (0, 1)
            assert fetch(groups, group, stable=True) == (UNSTABLE_OFFSET_COMMIT, -1)

        groups.complete_transaction(PID, topic.marker("c", True, PID), commit=True)
        groups.complete_transaction(PID + 1, topic.marker("a", False, PID + 1), commit=False)
        assert fetch(groups, "c", stable=True) == (0, 10)
        assert fetch(groups, "a", stable=True) == (0, 1)
        # a plain commit written after the transaction's record stays in effect
        groups.store_transactional("l", PID + 3, EPOCH, {TP: CommittedOffset(10)})
        groups.apply_commit("l", {TP: CommittedOffset(5)})
        groups.complete_transaction(PID + 3, topic.marker("l", True, PID + 3), commit=True)
        assert fetch(groups, "l", stable=True) == (0, 5)

        # a restart: "restart"'s offsets are pending again, then its marker commits them
        again = coordinator(topic.store())
        assert fetch(again, "restart", stable=True) == (UNSTABLE_OFFSET_COMMIT, -1)
        assert [fetch(again, g, stable=True) for g in ("c", "a")] == [(0, 10), (0, 1)]
        partition = topic.marker("restart", True, PID + 2)
        again.complete_transaction(PID + 2, partition, commit=True)
        assert fetch(again, "restart", stable=True) == (0, 10)
    finally:
        topic.close()
