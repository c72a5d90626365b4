"""The group coordinator's state machine, driven directly: member ids handed out, rebalances on
join, leave and a missed session timeout, and the errors Kafka answers stale members with."""

from __future__ import annotations

import asyncio
from typing import Any

from kio.index import load_request_schema

from kafkalog.server import errors as E
from kafkalog.server.codec import build
from kafkalog.server.groups import COMPLETING, EMPTY, PREPARING, STABLE, GroupCoordinator
from kafkalog.server.offset_store import CommittedOffset, PendingOffsets, TopicPartition


class MemoryStore:
    def __init__(self) -> None:
        self.commits: list[tuple[str, dict[TopicPartition, CommittedOffset]]] = []
        self.metadata: list[tuple[str, dict[str, Any] | None]] = []  # store_group calls

    def load(self) -> dict[str, dict[TopicPartition, CommittedOffset]]:
        return {}

    def load_groups(self) -> dict[str, dict[str, Any]]:
        return {}

    def load_pending(self) -> dict[str, PendingOffsets]:
        return {}

    def commit(self, group: str, offsets: dict[TopicPartition, CommittedOffset]) -> None:
        self.commits.append((group, offsets))

    def commit_transactional(
        self, group: str, pid: int, epoch: int, offsets: dict[TopicPartition, CommittedOffset]
    ) -> None:
        self.commits.append((group, offsets))

    def store_group(self, group: str, value: dict[str, Any] | None) -> None:
        self.metadata.append((group, value))

    def delete_offsets(self, group: str, partitions: list[TopicPartition]) -> None:
        self.commits.append((group, dict.fromkeys(partitions)))  # type: ignore[arg-type]


def request(api_key: int, version: int, **fields: Any) -> Any:
    return build(load_request_schema(api_key, version), fields)


def join_body(member_id: str = "", protocols: tuple[str, ...] = ("range",)) -> Any:
    return request(
        11,
        5,
        group_id="g",
        session_timeout=300,
        rebalance_timeout=2000,
        member_id=member_id,
        protocol_type="consumer",
        protocols=[{"name": p, "metadata": p.encode()} for p in protocols],
    )


def coordinator() -> GroupCoordinator:
    return GroupCoordinator(
        MemoryStore(),
        initial_rebalance_delay=0,
        min_session_timeout=0.1,
        max_session_timeout=30,
        topic_exists=lambda topic, partition: True,
    )


async def join(c: GroupCoordinator, member_id: str = "", **kw: Any) -> dict[str, Any]:
    first = await c.join(join_body(member_id, **kw), 5, "client", "127.0.0.1")
    if first["error_code"] == E.MEMBER_ID_REQUIRED:
        return await c.join(join_body(first["member_id"], **kw), 5, "client", "127.0.0.1")
    return first


async def sync(c: GroupCoordinator, member: str, generation: int, plan: dict[str, bytes]) -> Any:
    body = request(
        14,
        3,
        group_id="g",
        generation_id=generation,
        member_id=member,
        assignments=[{"member_id": m, "assignment": a} for m, a in plan.items()],
    )
    return await c.sync(body, 3)


async def heartbeat(c: GroupCoordinator, member: str, generation: int) -> int:
    body = request(12, 3, group_id="g", generation_id=generation, member_id=member)
    return int((await c.heartbeat(body, 3))["error_code"])


def test_join_rebalance_session_timeout_and_leave() -> None:
    async def main() -> None:
        c = coordinator()
        c.start()
        try:
            a = await join(c)
            assert a["error_code"] == E.NONE and a["generation_id"] == 1
            assert a["leader"] == a["member_id"] and len(a["members"]) == 1
            a_id = a["member_id"]
            done = await sync(c, a_id, 1, {a_id: b"all"})
            assert done == {
                "error_code": E.NONE,
                "assignment": b"all",
                "protocol_type": "consumer",
                "protocol_name": "range",
            }
            assert c.groups["g"].state == STABLE

            # a second member joins: the first is told to rejoin by its heartbeat
            b_task = asyncio.ensure_future(join(c))
            await asyncio.sleep(0.05)
            assert c.groups["g"].state == PREPARING
            assert await heartbeat(c, a_id, 1) == E.REBALANCE_IN_PROGRESS
            a2 = await join(c, a_id)
            b = await b_task
            assert a2["generation_id"] == b["generation_id"] == 2
            assert a2["leader"] == a_id and {m["member_id"] for m in a2["members"]} == {
                a_id,
                b["member_id"],
            }
            assert b["members"] == []  # only the leader gets the member list
            b_id = b["member_id"]
            follower = asyncio.ensure_future(sync(c, b_id, 2, {}))
            await asyncio.sleep(0.02)
            assert not follower.done()  # waits for the leader's assignment
            await sync(c, a_id, 2, {a_id: b"p0", b_id: b"p1"})
            assert (await follower)["assignment"] == b"p1"
            # the completed rebalance was stored as Kafka's GroupMetadataValue, before answering
            store = c.store
            assert isinstance(store, MemoryStore)
            group, stored = store.metadata[-1]
            assert group == "g" and stored is not None
            assert (stored["generation"], stored["leader"], stored["protocol"]) == (
                2,
                a_id,
                "range",
            )
            assigned = {m["memberId"]: m["assignment"] for m in stored["members"]}
            assert assigned == {a_id: b"p0", b_id: b"p1"}
            assert await heartbeat(c, a_id, 1) == E.ILLEGAL_GENERATION
            assert await heartbeat(c, "nobody", 2) == E.UNKNOWN_MEMBER_ID

            # b goes silent: after its session timeout (0.3 s) the group rebalances without it
            for _ in range(10):
                await asyncio.sleep(0.1)
                code = await heartbeat(c, a_id, 2)
                if code != E.NONE:
                    break
            assert code == E.REBALANCE_IN_PROGRESS
            assert b_id not in c.groups["g"].members
            a3 = await join(c, a_id)
            assert a3["generation_id"] == 3 and [m["member_id"] for m in a3["members"]] == [a_id]

            # a member whose protocols share nothing with the group's is refused
            odd = await join(c, protocols=("sticky-only",))
            assert odd["error_code"] == E.INCONSISTENT_GROUP_PROTOCOL

            left = await c.leave(request(13, 3, group_id="g", members=[{"member_id": a_id}]), 3)
            assert left["error_code"] == E.NONE
            assert c.groups["g"].state == EMPTY and not c.groups["g"].members
            # Kafka stores the now Empty group too (its members gone, its generation moved on)
            _, empty = store.metadata[-1]
            assert empty is not None and empty["members"] == [] and empty["generation"] == 4
        finally:
            await c.stop()

    asyncio.run(main())


def test_a_rejoin_with_the_same_subscription_gets_the_current_generation() -> None:
    """As Kafka's GroupCoordinator: a follower of a Stable group, or any member while the
    leader's SyncGroup is awaited, joining again with unchanged protocols gets the current
    generation back and no rebalance starts (kafka-python rejoins so when its poll() timed out
    before its JoinGroup answer came; rebalancing on it let two such members rebalance each
    other for ever). A changed subscription, or the leader of a Stable group, rebalances."""

    async def main() -> None:
        c = coordinator()
        c.start()
        try:
            a_id = (await join(c))["member_id"]
            await sync(c, a_id, 1, {a_id: b"all"})
            b_task = asyncio.ensure_future(join(c))
            await asyncio.sleep(0.05)
            await join(c, a_id)
            b_id = (await b_task)["member_id"]
            follower = asyncio.ensure_future(sync(c, b_id, 2, {}))
            await sync(c, a_id, 2, {a_id: b"p0", b_id: b"p1"})
            assert (await follower)["assignment"] == b"p1"
            group = c.groups["g"]
            assert (group.state, group.generation, group.leader) == (STABLE, 2, a_id)

            again = await join(c, b_id)  # the follower, unchanged: no rebalance
            assert again["error_code"] == E.NONE and again["generation_id"] == 2
            assert again["leader"] == a_id and again["members"] == []
            assert (group.state, group.generation) == (STABLE, 2)
            assert await heartbeat(c, a_id, 2) == E.NONE
            assert (await sync(c, b_id, 2, {}))["assignment"] == b"p1"

            # a changed subscription rebalances; while the leader's SyncGroup is awaited, a
            # repeated join of either member answers the generation being completed
            changed = asyncio.ensure_future(join(c, b_id, protocols=("range", "sticky")))
            await asyncio.sleep(0.05)
            assert group.state == PREPARING
            assert await heartbeat(c, a_id, 2) == E.REBALANCE_IN_PROGRESS
            leader = await join(c, a_id)
            assert (await changed)["generation_id"] == leader["generation_id"] == 3
            assert group.state == COMPLETING
            repeat = await join(c, b_id, protocols=("range", "sticky"))
            assert (repeat["generation_id"], repeat["members"]) == (3, [])
            repeat = await join(c, a_id)
            assert repeat["generation_id"] == 3 and len(repeat["members"]) == 2
            assert (group.state, group.generation) == (COMPLETING, 3)
            await sync(c, a_id, 3, {a_id: b"p0", b_id: b"p1"})
            assert group.state == STABLE

            # the leader of a Stable group joining again asks for a new assignment: rebalance
            leader_again = asyncio.ensure_future(join(c, a_id))
            await asyncio.sleep(0.05)
            assert group.state == PREPARING
            await join(c, b_id, protocols=("range", "sticky"))
            assert (await leader_again)["generation_id"] == 4
        finally:
            await c.stop()

    asyncio.run(main())


def test_offset_commits_check_the_member_and_reach_the_store() -> None:
    async def main() -> None:
        c = coordinator()
        c.start()
        try:
            a = await join(c)
            a_id = a["member_id"]
            await sync(c, a_id, 1, {a_id: b""})

            def commit(member: str, generation: int) -> Any:
                return request(
                    8,
                    8,
                    group_id="g",
                    generation_id_or_member_epoch=generation,
                    member_id=member,
                    topics=[
                        {
                            "name": "t",
                            "partitions": [
                                {
                                    "partition_index": 0,
                                    "committed_offset": 42,
                                    "committed_metadata": "m",
                                }
                            ],
                        }
                    ],
                )

            stale = await c.commit(commit(a_id, 7), 8)
            assert stale["topics"][0]["partitions"][0]["error_code"] == E.ILLEGAL_GENERATION
            simple = await c.commit(commit("", -1), 8)  # the group has a live member
            assert simple["topics"][0]["partitions"][0]["error_code"] == E.UNKNOWN_MEMBER_ID
            ok = await c.commit(commit(a_id, 1), 8)
            assert ok["topics"][0]["partitions"][0]["error_code"] == E.NONE
            store = c.store
            assert isinstance(store, MemoryStore)
            assert [(g, o[("t", 0)].offset) for g, o in store.commits] == [("g", 42)]
            fetched = await c.fetch_offsets(
                request(9, 7, group_id="g", topics=[{"name": "t", "partition_indexes": [0, 1]}]),
                7,
            )
            parts = fetched["topics"][0]["partitions"]
            assert [(p["committed_offset"], p["metadata"]) for p in parts] == [(42, "m"), (-1, "")]
        finally:
            await c.stop()

    asyncio.run(main())
