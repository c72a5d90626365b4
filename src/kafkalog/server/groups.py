"""The classic consumer-group protocol: a group coordinator for every group, on this broker.

JoinGroup / SyncGroup / Heartbeat / LeaveGroup drive each group through Kafka's states (Empty,
PreparingRebalance, CompletingRebalance, Stable): a rebalance starts when a member joins, leaves
or misses its session timeout, completes when every known member has rejoined (or the rebalance
timeout dropped the rest), and the leader's assignment is handed out in SyncGroup. As in Kafka,
a known member joining again with an unchanged subscription (a follower of a Stable group, or
anyone while the leader's assignment is awaited) gets the current generation, not a rebalance.
Committed offsets go to an :class:`OffsetStore` (``__consumer_offsets``) and are read back at
start.

Offsets sent to a transaction (TxnOffsetCommit) are written as the producer's transactional
batch before they are answered and held as the group's *pending* transactional offsets, as
Kafka's GroupMetadataManager holds them: the transaction's COMMIT marker in the group's
``__consumer_offsets`` partition makes them the committed offsets (unless a later commit is
already in effect), its ABORT drops them (:meth:`GroupCoordinator.complete_transaction`). After a
restart those without a marker are pending again, until the transaction coordinator ends their
transaction. OffsetFetch with ``require_stable`` answers UNSTABLE_OFFSET_COMMIT for a partition
with pending offsets, so a consumer does not start from an offset about to change.

As Kafka's GroupMetadataManager does, the group's metadata (protocol type, generation, protocol,
leader, members with their subscriptions and assignments) is stored as a ``GroupMetadata``
record when a rebalance completes (the leader's SyncGroup) and when a group becomes Empty, and a
tombstone when the group is deleted. At start each stored group comes back Empty, with its
generation and protocol type (its members, gone with the old server's connections, rejoin), so
ListGroups and DescribeGroups show it after a restart as they do on a restarted broker.

Static membership (KIP-345, ``group.instance.id``): a static member gets its member id without
the MEMBER_ID_REQUIRED round; one that comes back with an empty member id while its instance id
is still a member (a client restarted within its session timeout) takes the old member's place
under a new member id, and in a Stable group with an unchanged subscription keeps its
assignment without a rebalance; the old member id is then answered FENCED_INSTANCE_ID.

ConsumerGroupHeartbeat (KIP-848) is refused: see :meth:`GroupCoordinator.consumer_group_heartbeat`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

from kafkalog.server import errors as E
from kafkalog.server.offset_store import (
    CommittedOffset,
    OffsetStore,
    PendingOffsets,
    TopicPartition,
    partition_for_group,
)

EMPTY = "Empty"
PREPARING = "PreparingRebalance"
COMPLETING = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"
UNSTABLE_OFFSET_COMMIT = 88

log = logging.getLogger("kafkalog.server")


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout: float
    rebalance_timeout: float
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    last_seen: float = field(default_factory=time.monotonic)
    assignment: bytes = b""
    join_future: asyncio.Future[dict[str, Any]] | None = None
    sync_future: asyncio.Future[dict[str, Any]] | None = None

    def metadata_for(self, protocol: str | None) -> bytes:
        return next((m for n, m in self.protocols if n == protocol), b"")


@dataclass
class Group:
    group_id: str
    state: str = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending: dict[str, float] = field(default_factory=dict)  # member ids handed out, deadline
    static: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    offsets: dict[TopicPartition, CommittedOffset] = field(default_factory=dict)
    # offsets of transactions not ended yet, by producer id
    txn_offsets: PendingOffsets = field(default_factory=dict)
    timer: asyncio.TimerHandle | None = None
    initial_delay_until: float = 0.0


def _instance(body: Any) -> str | None:
    """A request's ``group_instance_id`` (None before the versions that carry it)."""
    value = getattr(body, "group_instance_id", None)
    return str(value) if value else None


class GroupCoordinator:
    def __init__(
        self,
        store: OffsetStore,
        *,
        initial_rebalance_delay: float,
        min_session_timeout: float,
        max_session_timeout: float,
        topic_exists: Any,
        offsets_partitions: int = 50,
    ) -> None:
        self.store = store
        self.offsets_partitions = offsets_partitions
        self.initial_rebalance_delay = initial_rebalance_delay
        self.min_session_timeout = min_session_timeout
        self.max_session_timeout = max_session_timeout
        self.topic_exists = topic_exists
        self.groups: dict[str, Group] = {}
        for group_id, offsets in store.load().items():
            self.groups[group_id] = Group(group_id, offsets=dict(offsets))
        for group_id, meta in store.load_groups().items():
            group = self.groups.setdefault(group_id, Group(group_id))
            group.generation = int(meta.get("generation", 0))
            group.protocol_type = meta.get("protocolType") or None
        for group_id, pending in store.load_pending().items():
            self.groups.setdefault(group_id, Group(group_id)).txn_offsets = pending
        self._reaper: asyncio.Task[None] | None = None

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> None:
        self._reaper = asyncio.get_running_loop().create_task(self._expire_sessions())

    async def stop(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        for group in self.groups.values():
            if group.timer is not None:
                group.timer.cancel()
            for m in group.members.values():
                for fut in (m.join_future, m.sync_future):
                    if fut is not None and not fut.done():
                        fut.cancel()

    async def _expire_sessions(self) -> None:
        while True:
            await asyncio.sleep(0.1)
            now = time.monotonic()
            for group in list(self.groups.values()):
                for mid, deadline in list(group.pending.items()):
                    if now > deadline:
                        del group.pending[mid]
                expired = [
                    m
                    for m in group.members.values()
                    if m.join_future is None and now - m.last_seen > m.session_timeout
                ]
                for m in expired:
                    self._remove_member(group, m, E.UNKNOWN_MEMBER_ID)
                if expired:
                    self._member_left(group)

    # -- KIP-848 ----------------------------------------------------------------------------------
    async def consumer_group_heartbeat(self, body: Any, version: int) -> dict[str, Any]:
        """ConsumerGroupHeartbeat (KIP-848, ``group.protocol=consumer``) is answered
        UNSUPPORTED_VERSION, as Kafka answers it when the consumer protocol is disabled.

        The API is advertised only so that this answer is reached: librdkafka, finding it
        missing from ApiVersions, retries the coordinator forever without telling the
        application; with this answer it raises a fatal error at once.
        """
        log.warning(
            "refused ConsumerGroupHeartbeat of group %r: kafkalog serve supports only the"
            " classic group protocol (group.protocol=classic)",
            body.group_id,
        )
        return {
            "error_code": E.UNSUPPORTED_VERSION,
            "error_message": "kafkalog serve supports only the classic consumer group protocol:"
            " set group.protocol=classic",
            "member_epoch": -1,
            "heartbeat_interval": 0,
        }

    # -- join ------------------------------------------------------------------------------------
    async def join(self, body: Any, version: int, client_id: str, host: str) -> dict[str, Any]:
        session = body.session_timeout.total_seconds()
        rebalance = getattr(body, "rebalance_timeout", body.session_timeout).total_seconds()
        if rebalance <= 0:
            rebalance = session
        fail: dict[str, Any] = {
            "generation_id": -1,
            "protocol_name": None,
            "leader": "",
            "members": [],
        }
        if not self.min_session_timeout <= session <= self.max_session_timeout:
            return {**fail, "error_code": E.INVALID_SESSION_TIMEOUT, "member_id": body.member_id}
        group = self.groups.get(body.group_id)
        if group is None:
            group = self.groups[body.group_id] = Group(body.group_id)
        protocols = [(p.name, bytes(p.metadata)) for p in body.protocols]
        if not protocols or (
            group.members
            and (
                body.protocol_type != group.protocol_type
                or not self._candidates(group, {n for n, _ in protocols})
            )
        ):
            return {
                **fail,
                "error_code": E.INCONSISTENT_GROUP_PROTOCOL,
                "member_id": body.member_id,
            }
        member_id = body.member_id
        instance = getattr(body, "group_instance_id", None)
        if instance is not None:
            known = group.static.get(instance)
            if member_id == "" and known is not None and known in group.members:
                return await self._replace_static(group, group.members[known], body, protocols)
            if member_id == "":  # a static member needs no MEMBER_ID_REQUIRED round (KIP-345)
                member_id = f"{instance}-{uuid.uuid4()}"
                group.static[instance] = member_id
                group.pending[member_id] = time.monotonic() + session
            elif known != member_id:
                return {**fail, "error_code": E.FENCED_INSTANCE_ID, "member_id": member_id}
        if member_id == "":
            member_id = f"{client_id or 'member'}-{uuid.uuid4()}"
            if version >= 4:
                group.pending[member_id] = time.monotonic() + session
                return {**fail, "error_code": E.MEMBER_ID_REQUIRED, "member_id": member_id}
        elif member_id not in group.members and member_id not in group.pending:
            return {**fail, "error_code": E.UNKNOWN_MEMBER_ID, "member_id": member_id}
        group.pending.pop(member_id, None)
        member = group.members.get(member_id)
        if member is not None and member.protocols == protocols:
            current = self._rejoin_without_rebalance(group, member)
            if current is not None:
                return current
        if member is None:
            member = Member(
                member_id,
                getattr(body, "group_instance_id", None),
                client_id,
                host,
                session,
                rebalance,
                body.protocol_type,
                protocols,
            )
            group.members[member_id] = member
        else:
            member.protocols = protocols
            member.session_timeout, member.rebalance_timeout = session, rebalance
        member.last_seen = time.monotonic()
        if member.join_future is not None and not member.join_future.done():
            member.join_future.cancel()
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        member.join_future = future
        group.protocol_type = body.protocol_type
        if group.state != PREPARING:
            self._prepare_rebalance(group)
        self._try_complete_join(group)
        return await future

    def _rejoin_without_rebalance(self, group: Group, member: Member) -> dict[str, Any] | None:
        """A known member joining again with the subscription it has (a client that missed or
        dropped its JoinGroup answer, as kafka-python does when its poll() timed out before
        the answer came) gets the current generation back, without a rebalance: a follower of
        a Stable group, or anyone while the leader's SyncGroup is awaited. As Kafka's
        GroupCoordinator: otherwise each such rejoin starts a rebalance, whose rejoins make the
        next, and two members of one group can rebalance each other for ever. A Stable group's
        leader still rebalances it: that is how a leader asks for a new assignment (its
        topics' partitions changed). None when a rebalance is due."""
        is_leader = member.member_id == group.leader
        if not (group.state == COMPLETING or (group.state == STABLE and not is_leader)):
            return None
        member.last_seen = time.monotonic()
        return _join_answer(group, member.member_id, is_leader and group.state == COMPLETING)

    async def _replace_static(
        self, group: Group, old: Member, body: Any, protocols: list[tuple[str, bytes]]
    ) -> dict[str, Any]:
        """A static member back with an empty member id (a restarted client): it takes the
        old member's place under a new id, fencing the old one, and, when the group is Stable
        and its subscription unchanged, keeps its assignment without a rebalance (Kafka's
        ``updateStaticMemberAndRebalance``)."""
        instance = old.group_instance_id
        assert instance is not None
        new_id = f"{instance}-{uuid.uuid4()}"
        fenced = {"error_code": E.FENCED_INSTANCE_ID, "generation_id": -1, "member_id": ""}
        for fut in (old.join_future, old.sync_future):
            if fut is not None and not fut.done():
                fut.set_result(dict(fenced))
        old.join_future = old.sync_future = None
        del group.members[old.member_id]
        was_leader = group.leader == old.member_id
        unchanged = old.metadata_for(group.protocol_name) == next(
            (m for n, m in protocols if n == group.protocol_name), None
        )
        old.member_id = new_id
        old.protocols = protocols
        old.session_timeout = body.session_timeout.total_seconds()
        old.last_seen = time.monotonic()
        group.members[new_id] = old
        group.static[instance] = new_id
        if was_leader:
            group.leader = new_id
        if group.state == STABLE and unchanged:
            self._store_metadata(group)  # the new member id, as Kafka stores it
            # v9's skip_assignment: the leader need not assign again
            return {**_join_answer(group, new_id, was_leader), "skip_assignment": was_leader}
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        old.join_future = future
        if group.state != PREPARING:
            self._prepare_rebalance(group)
        self._try_complete_join(group)
        return await future

    def _candidates(self, group: Group, extra: set[str] | None = None) -> set[str]:
        sets = [{n for n, _ in m.protocols} for m in group.members.values()]
        if extra is not None:
            sets.append(extra)
        return set.intersection(*sets) if sets else set()

    def _prepare_rebalance(self, group: Group) -> None:
        loop = asyncio.get_running_loop()
        was_empty = group.state == EMPTY
        for m in group.members.values():
            if m.sync_future is not None and not m.sync_future.done():
                m.sync_future.set_result({"error_code": E.REBALANCE_IN_PROGRESS})
            m.sync_future = None
        group.state = PREPARING
        timeout = max((m.rebalance_timeout for m in group.members.values()), default=0.0)
        if was_empty and self.initial_rebalance_delay > 0:
            # group.initial.rebalance.delay.ms: let the first members of a new group arrive
            group.initial_delay_until = loop.time() + self.initial_rebalance_delay
            timeout = min(timeout, self.initial_rebalance_delay)
        else:
            group.initial_delay_until = 0.0
        if group.timer is not None:
            group.timer.cancel()
        group.timer = loop.call_later(timeout, self._rebalance_timed_out, group)

    def _rebalance_timed_out(self, group: Group) -> None:
        group.timer = None
        if group.state != PREPARING:
            return
        loop = asyncio.get_running_loop()
        if group.initial_delay_until and loop.time() >= group.initial_delay_until:
            group.initial_delay_until = 0.0
            if self._all_joined(group):
                self._complete_join(group)
                return
            timeout = max((m.rebalance_timeout for m in group.members.values()), default=0.0)
            group.timer = loop.call_later(timeout, self._rebalance_timed_out, group)
            return
        for m in [m for m in group.members.values() if m.join_future is None]:
            self._remove_member(group, m, E.UNKNOWN_MEMBER_ID)
        self._complete_join(group)

    def _all_joined(self, group: Group) -> bool:
        return all(
            m.join_future is not None and not m.join_future.done() for m in group.members.values()
        )

    def _try_complete_join(self, group: Group) -> None:
        if group.state != PREPARING or group.initial_delay_until:
            return
        if self._all_joined(group):
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        if group.timer is not None:
            group.timer.cancel()
            group.timer = None
        group.initial_delay_until = 0.0
        group.generation += 1
        if not group.members:
            group.state = EMPTY
            group.protocol_name = group.leader = None
            self._store_metadata(group)  # Kafka stores the now Empty group too
            return
        candidates = self._candidates(group)
        votes: dict[str, int] = {}
        for m in group.members.values():
            choice = next(n for n, _ in m.protocols if n in candidates)
            votes[choice] = votes.get(choice, 0) + 1
        group.protocol_name = max(sorted(votes), key=lambda n: votes[n])
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        group.state = COMPLETING
        for m in group.members.values():
            fut, m.join_future = m.join_future, None
            m.last_seen = time.monotonic()
            if fut is not None and not fut.done():
                fut.set_result(_join_answer(group, m.member_id, m.member_id == group.leader))

    def _remove_member(self, group: Group, member: Member, code: int) -> None:
        group.members.pop(member.member_id, None)
        instance = member.group_instance_id
        if instance is not None and group.static.get(instance) == member.member_id:
            del group.static[instance]
        for fut in (member.join_future, member.sync_future):
            if fut is not None and not fut.done():
                fut.set_result({"error_code": code, "generation_id": -1, "member_id": ""})
        if group.leader == member.member_id:
            group.leader = next(iter(group.members), None)

    def _member_left(self, group: Group) -> None:
        if group.state in (STABLE, COMPLETING, EMPTY):
            self._prepare_rebalance(group)
            group.initial_delay_until = 0.0
        self._try_complete_join(group)

    # -- sync, heartbeat, leave -----------------------------------------------------------------
    def _check_member(
        self, group_id: str, member_id: str, generation: int, instance: str | None = None
    ) -> tuple[int, Group]:
        group = self.groups.get(group_id)
        replaced = group is not None and instance is not None and instance in group.static
        if replaced and group is not None and group.static[str(instance)] != member_id:
            return E.FENCED_INSTANCE_ID, group  # a newer member has this instance id
        if group is None or member_id not in group.members:
            return E.UNKNOWN_MEMBER_ID, group or Group(group_id)
        group.members[member_id].last_seen = time.monotonic()
        if generation != group.generation:
            return E.ILLEGAL_GENERATION, group
        return E.NONE, group

    async def sync(self, body: Any, version: int) -> dict[str, Any]:
        code, group = self._check_member(
            body.group_id, body.member_id, int(body.generation_id), _instance(body)
        )
        if code != E.NONE:
            return {"error_code": code, "assignment": b""}
        if group.state == PREPARING:
            return {"error_code": E.REBALANCE_IN_PROGRESS, "assignment": b""}
        member = group.members[body.member_id]
        names = {"protocol_type": group.protocol_type, "protocol_name": group.protocol_name}
        if group.state == STABLE:
            return {"error_code": E.NONE, "assignment": member.assignment, **names}
        member.sync_future = asyncio.get_running_loop().create_future()
        future = member.sync_future
        if body.member_id == group.leader:
            given = {a.member_id: bytes(a.assignment) for a in body.assignments}
            group.state = STABLE
            for m in group.members.values():
                m.assignment = given.get(m.member_id, b"")
            self._store_metadata(group)  # before anyone is answered, as Kafka's storeGroup
            for m in group.members.values():
                fut, m.sync_future = m.sync_future, None
                if fut is not None and not fut.done():
                    fut.set_result({"error_code": E.NONE, "assignment": m.assignment, **names})
        result = await future
        result.setdefault("assignment", b"")
        return result

    async def heartbeat(self, body: Any, version: int) -> dict[str, Any]:
        code, group = self._check_member(
            body.group_id, body.member_id, int(body.generation_id), _instance(body)
        )
        if code == E.NONE and group.state == PREPARING:
            code = E.REBALANCE_IN_PROGRESS
        return {"error_code": code}

    async def leave(self, body: Any, version: int) -> dict[str, Any]:
        group = self.groups.get(body.group_id)
        ids = (
            [(body.member_id, None)]
            if hasattr(body, "member_id")
            else [(m.member_id, _instance(m)) for m in body.members]
        )
        results = []
        left = False
        for mid, instance in ids:
            known = group.static.get(instance) if group is not None and instance else None
            if known is not None and mid and mid != known:
                results.append(
                    {
                        "member_id": mid,
                        "group_instance_id": instance,
                        "error_code": E.FENCED_INSTANCE_ID,
                    }
                )
                continue
            if known is not None:
                mid = known  # a static member may leave by its instance id alone
            if group is None or mid not in group.members:
                results.append({"member_id": mid, "error_code": E.UNKNOWN_MEMBER_ID})
                continue
            self._remove_member(group, group.members[mid], E.UNKNOWN_MEMBER_ID)
            results.append({"member_id": mid, "error_code": E.NONE})
            left = True
        if group is not None and left:
            self._member_left(group)
        if hasattr(body, "member_id"):
            return {"error_code": results[0]["error_code"]}
        return {"error_code": E.NONE, "members": results}

    def _store_metadata(self, group: Group) -> None:
        """The group as a ``GroupMetadataValue`` (version 3, what Kafka 2.3+ writes)."""
        self.store.store_group(
            group.group_id,
            {
                "protocolType": group.protocol_type or "",
                "generation": group.generation,
                "protocol": group.protocol_name,
                "leader": group.leader,
                "currentStateTimestamp": int(time.time() * 1000),
                "members": [
                    {
                        "memberId": m.member_id,
                        "groupInstanceId": m.group_instance_id,
                        "clientId": m.client_id,
                        "clientHost": m.client_host,
                        "rebalanceTimeout": int(m.rebalance_timeout * 1000),
                        "sessionTimeout": int(m.session_timeout * 1000),
                        "subscription": m.metadata_for(group.protocol_name),
                        "assignment": m.assignment,
                    }
                    for m in group.members.values()
                ],
            },
        )

    async def delete_groups(self, body: Any, version: int) -> dict[str, Any]:
        """DeleteGroups: an Empty group's offsets and metadata go, as tombstones (Kafka's
        GroupCoordinator.handleDeleteGroups); a group with members is refused."""
        results = []
        for gid in body.groups_names:
            group = self.groups.get(gid)
            if group is None:
                code = E.GROUP_ID_NOT_FOUND
            elif group.members or group.state != EMPTY:
                code = E.NON_EMPTY_GROUP
            else:
                code = E.NONE
                if group.offsets:
                    self.store.delete_offsets(gid, list(group.offsets))
                self.store.store_group(gid, None)
                del self.groups[gid]
            results.append({"group_id": gid, "error_code": code})
        return {"results": results}

    # -- offsets ---------------------------------------------------------------------------------
    async def commit(self, body: Any, version: int) -> dict[str, Any]:
        generation = int(getattr(body, "generation_id_or_member_epoch", -1))
        group = self.groups.get(body.group_id)
        code = E.NONE
        if body.member_id or generation >= 0:
            code, group = self._check_member(
                body.group_id, body.member_id, generation, _instance(body)
            )
            if code == E.NONE and group.state == COMPLETING:
                code = E.REBALANCE_IN_PROGRESS
        elif group is not None and group.members:
            code = E.UNKNOWN_MEMBER_ID  # a "simple" commit into a group with live members
        now = int(time.time() * 1000)
        accepted: dict[TopicPartition, CommittedOffset] = {}
        topics = []
        for t in body.topics:
            parts = []
            for p in t.partitions:
                pcode = code
                if pcode == E.NONE and not self.topic_exists(t.name, int(p.partition_index)):
                    pcode = E.UNKNOWN_TOPIC_OR_PARTITION
                if pcode == E.NONE:
                    accepted[(t.name, int(p.partition_index))] = CommittedOffset(
                        int(p.committed_offset),
                        int(getattr(p, "committed_leader_epoch", -1)),
                        p.committed_metadata,
                        now,
                    )
                parts.append({"partition_index": p.partition_index, "error_code": pcode})
            topics.append({"name": t.name, "partitions": parts})
        if accepted:
            self.apply_commit(body.group_id, accepted)
        return {"topics": topics}

    def apply_commit(self, group_id: str, offsets: dict[TopicPartition, CommittedOffset]) -> None:
        """Store an OffsetCommit's offsets, in effect at once."""
        offsets = _placed(offsets, self.store.commit(group_id, offsets))
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id)
        group.offsets.update(offsets)

    def store_transactional(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        offsets: dict[TopicPartition, CommittedOffset],
    ) -> None:
        """A TxnOffsetCommit: written as the producer's transactional batch before it is
        answered, then pending until the transaction's marker (:meth:`complete_transaction`)."""
        placed = _placed(
            offsets,
            self.store.commit_transactional(group_id, producer_id, producer_epoch, offsets),
        )
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id)
        group.txn_offsets.setdefault(producer_id, {}).update(placed)

    def complete_transaction(self, producer_id: int, offsets_partition: int, commit: bool) -> None:
        """The producer's COMMIT or ABORT marker is in ``__consumer_offsets`` partition
        ``offsets_partition``: each of its groups' pending offsets of that producer become
        committed (where no later commit is in effect) or are dropped (Kafka's
        ``handleTxnCompletion``)."""
        for group in self.groups.values():
            if producer_id not in group.txn_offsets:
                continue
            if partition_for_group(group.group_id, self.offsets_partitions) != offsets_partition:
                continue
            pending = group.txn_offsets.pop(producer_id)
            if not commit:
                continue
            for tp, committed in pending.items():
                current = group.offsets.get(tp)
                if current is None or current.older_than(committed):
                    group.offsets[tp] = committed

    def has_pending(self, group_id: str, tp: TopicPartition) -> bool:
        group = self.groups.get(group_id)
        return group is not None and any(tp in o for o in group.txn_offsets.values())

    async def fetch_offsets(self, body: Any, version: int) -> dict[str, Any]:
        group = self.groups.get(body.group_id)
        offsets = group.offsets if group is not None else {}
        if body.topics is None:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in sorted(offsets):
                by_topic.setdefault(topic, []).append(partition)
            wanted = list(by_topic.items())
        else:
            wanted = [(t.name, [int(i) for i in t.partition_indexes]) for t in body.topics]
        # v7+: a partition with transactional offsets not ended yet is unstable (Kafka's
        # getOffsets with requireStable); without it the committed offset is answered
        stable = bool(getattr(body, "require_stable", False))
        topics = []
        for name, partitions in wanted:
            parts = []
            for p in partitions:
                if stable and self.has_pending(body.group_id, (name, p)):
                    parts.append(
                        {
                            "partition_index": p,
                            "committed_offset": -1,
                            "committed_leader_epoch": -1,
                            "metadata": "",
                            "error_code": UNSTABLE_OFFSET_COMMIT,
                        }
                    )
                    continue
                c = offsets.get((name, p))
                parts.append(
                    {
                        "partition_index": p,
                        "committed_offset": c.offset if c else -1,
                        "committed_leader_epoch": c.leader_epoch if c else -1,
                        "metadata": c.metadata if c else "",
                        "error_code": E.NONE,
                    }
                )
            topics.append({"name": name, "partitions": parts})
        return {"topics": topics, "error_code": E.NONE}

    # -- listing ----------------------------------------------------------------------------------
    async def describe(self, body: Any, version: int) -> dict[str, Any]:
        out = []
        for gid in body.groups:
            group = self.groups.get(gid)
            if group is None:
                out.append({"group_id": gid, "error_code": E.NONE, "group_state": DEAD})
                continue
            out.append(
                {
                    "group_id": gid,
                    "error_code": E.NONE,
                    "group_state": group.state,
                    "protocol_type": group.protocol_type or "",
                    "protocol_data": group.protocol_name or "",
                    "members": [
                        {
                            "member_id": m.member_id,
                            "group_instance_id": m.group_instance_id,
                            "client_id": m.client_id,
                            "client_host": m.client_host,
                            "member_metadata": m.metadata_for(group.protocol_name),
                            "member_assignment": m.assignment,
                        }
                        for m in group.members.values()
                    ],
                }
            )
        return {"groups": out}

    async def list_groups(self, body: Any, version: int) -> dict[str, Any]:
        states = set(getattr(body, "states_filter", ()) or ())
        return {
            "error_code": E.NONE,
            "groups": [
                {
                    "group_id": g.group_id,
                    "protocol_type": g.protocol_type or "",
                    "group_state": g.state,
                }
                for g in self.groups.values()
                if not states or g.state in states
            ],
        }


def _placed(
    offsets: dict[TopicPartition, CommittedOffset], first: int | None
) -> dict[TopicPartition, CommittedOffset]:
    """The offsets with the log offsets of their records (one record each, in order from
    ``first``), which decide between a transaction's offsets and a later commit."""
    if first is None:
        return dict(offsets)
    return {tp: replace(c, log_offset=first + i) for i, (tp, c) in enumerate(offsets.items())}


def _join_answer(group: Group, member_id: str, with_members: bool) -> dict[str, Any]:
    """The JoinGroup answer of the group's current generation for ``member_id``; the members
    and their subscriptions only to the leader, which assigns (``with_members``)."""
    everyone = (
        [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "metadata": m.metadata_for(group.protocol_name),
            }
            for m in group.members.values()
        ]
        if with_members
        else []
    )
    return {
        "error_code": E.NONE,
        "generation_id": group.generation,
        "protocol_type": group.protocol_type,
        "protocol_name": group.protocol_name,
        "leader": group.leader,
        "member_id": member_id,
        "members": everyone,
    }
