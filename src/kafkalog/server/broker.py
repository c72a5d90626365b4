"""One broker: the data directory, its topics, the group coordinator and the request table."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kafkalog.errors import KafkalogError
from kafkalog.index import _search
from kafkalog.log import AppendOrigin, Log, LogDir
from kafkalog.log.cleaner_checkpoint import create_checkpoint
from kafkalog.log.damage import SkippedBytes
from kafkalog.log.dir_identity import claim, verify
from kafkalog.records import RecordBatch, record_walk
from kafkalog.records.types import DEFAULT_LIMITS
from kafkalog.server import acl_apis, acls, admin, configs, data, user_credentials
from kafkalog.server import errors as E
from kafkalog.server.config import ServerConfig
from kafkalog.server.groups import GroupCoordinator
from kafkalog.server.offset_store import (
    CommittedOffset,
    ConsumerOffsetsTopic,
    OffsetRecordCodec,
    partition_for_group,
)
from kafkalog.server.scram import ScramStore
from kafkalog.server.topics import OFFSETS_TOPIC, TRANSACTION_TOPIC, Topic, TopicRegistry
from kafkalog.server.transactions import TransactionCoordinator

_logger = logging.getLogger("kafkalog.server")

Handler = Callable[["Broker", Any, int], Awaitable[dict[str, Any]]]

# the internal topics as Kafka creates them: compacted, 100 MiB segments (offsets.topic.*,
# transaction.state.log.*)
INTERNAL_TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "segment.bytes": "104857600",
    "compression.type": "producer",
}


def _load_kernels() -> None:
    """Produce walks every record of a batch (Kafka's LogValidator) with a compiled walk, and
    once numba is loaded the index lookups switch to their compiled kernels too: both are
    loaded here, on the broker's worker thread, at start. A short benchmark's first produce
    paid for them (produce of 100-byte records measured 18% slower over 3 million records)."""
    record_walk.load_compiled()
    _search.warm()


class Broker:
    """Everything a request handler needs; handlers run on the event loop, one at a time, so
    the logs are never appended to concurrently."""

    def __init__(
        self,
        data_dir: str,
        config: ServerConfig,
        *,
        offset_codec: OffsetRecordCodec | None = None,
    ) -> None:
        # the log cleaner's rounds run here, off the event loop; closing waits for a round
        self.background = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kafkalog-cleaner")
        # the compiled kernels a broker uses on every request, loaded off the event loop now
        # rather than by the first large Produce (~0.3-0.5 s of numba in a fresh process)
        self.kernels = self.background.submit(_load_kernels)
        # refused before the directory is opened, so a refusal writes nothing (as Kafka's)
        verify(data_dir, node_id=config.node_id, cluster_id=config.cluster_id)
        # a batch is bounded by the request that carries it (socket.request.max.bytes), not by
        # the reader's 8 MiB default: a topic may set max.message.bytes above that, and the
        # answer beyond a topic's limit is MESSAGE_TOO_LARGE, not CORRUPT_MESSAGE
        limits = dataclasses.replace(
            DEFAULT_LIMITS,
            max_batch_bytes=max(DEFAULT_LIMITS.max_batch_bytes, config.socket_request_max_bytes),
        )
        self.logdir = LogDir(data_dir, writable=True, high_watermarks=True, limits=limits)
        try:
            # the directory's meta.properties names the node and the cluster (written for a
            # new directory); handlers read them from the config
            self.identity = claim(data_dir, node_id=config.node_id, cluster_id=config.cluster_id)
            self.config = config = dataclasses.replace(
                config, node_id=self.identity.node_id, cluster_id=self.identity.cluster_id
            )
            if config.log_cleaner_enable:
                create_checkpoint(self.logdir.path)
            self.registry = TopicRegistry(
                self.logdir,
                config.topic_defaults,
                {
                    OFFSETS_TOPIC: config.offsets_topic_num_partitions,
                    TRANSACTION_TOPIC: config.transaction_state_num_partitions,
                },
                {
                    OFFSETS_TOPIC: self._internal_configs(OFFSETS_TOPIC),
                    TRANSACTION_TOPIC: self._internal_configs(TRANSACTION_TOPIC),
                },
            )
            # the coordinators hash over the internal topics' partitions as they are, as
            # Kafka's do (offsets.topic.num.partitions only sizes a topic being created): a
            # directory whose __consumer_offsets has 4 partitions keeps its groups where they are
            self.config = config = dataclasses.replace(
                config,
                offsets_topic_num_partitions=self._partition_count(
                    OFFSETS_TOPIC, config.offsets_topic_num_partitions
                ),
                transaction_state_num_partitions=self._partition_count(
                    TRANSACTION_TOPIC, config.transaction_state_num_partitions
                ),
            )
            self.scram = ScramStore(self.logdir.path)
            self.authorizer = (
                acls.Authorizer(
                    self.logdir.path,
                    super_users=frozenset(config.super_users),
                    allow_if_no_acl=config.allow_everyone_if_no_acl_found,
                )
                if config.authorizer
                else None
            )
            # recovery in Kafka's order: the logs are open (above); the coordinators load their
            # topics (below, writing nothing); then the transactions the last run left
            # half-ended are finished, their markers written through this broker, which must
            # be whole by then; the listener opens only after this constructor returns
            self._appended = asyncio.Event()
            self._lso: dict[tuple[str, int], data.LastStableOffset] = {}
            self.offsets = ConsumerOffsetsTopic(
                config.offsets_topic_num_partitions,
                self._append_offsets,
                self._read_offsets,
                offset_codec,
            )
            self.groups = GroupCoordinator(
                self.offsets,
                initial_rebalance_delay=config.group_initial_rebalance_delay_ms / 1000,
                min_session_timeout=config.group_min_session_timeout_ms / 1000,
                max_session_timeout=config.group_max_session_timeout_ms / 1000,
                topic_exists=self._partition_exists,
                offsets_partitions=config.offsets_topic_num_partitions,
            )
            self.transactions = TransactionCoordinator(
                partitions=config.transaction_state_num_partitions,
                offsets_partitions=config.offsets_topic_num_partitions,
                append_state=self._append_txn_state,
                read_state=self._read_txn_state,
                append_marker=self._append_marker,
                partition_exists=self._partition_exists,
                store_offsets=self.groups.store_transactional,
                complete_offsets=self.groups.complete_transaction,
                next_producer_id=self.registry.next_producer_id,
            )
            self.transactions.recover()
        except BaseException:
            self.logdir.close()
            raise
        self.advertised: tuple[str, int] = (config.advertised_host or config.host, config.port)

    # -- append notifications (the long poll) -------------------------------------------------
    def append_waiter(self) -> asyncio.Event:
        return self._appended

    def appended(self) -> None:
        """Wake every fetch waiting for data; later waiters get a fresh event."""
        self._appended.set()
        self._appended = asyncio.Event()

    # -- the offsets topic ---------------------------------------------------------------------
    def _partition_count(self, name: str, configured: int) -> int:
        topic = self.registry.get(name)
        return configured if topic is None else topic.partitions

    def _internal_topic(self, name: str, partitions: int) -> Topic:
        topic = self.registry.get(name)
        if topic is None:
            topic = self.registry.create(name, partitions, self._internal_configs(name))
        return topic

    def coordinator_offline(self, key_type: int, key: str) -> bool:
        """Whether the internal partition that holds a group's offsets (``key_type`` 0) or a
        transactional id's state (1) is offline (its log could not open): this broker is then
        no coordinator for it, as a Kafka broker that has not loaded that partition answers
        COORDINATOR_NOT_AVAILABLE, and the clients ask again later. Its appends would fail
        (the connection closed under every other request of the client)."""
        if key_type == 0:
            name, count = OFFSETS_TOPIC, self.config.offsets_topic_num_partitions
        else:
            name, count = TRANSACTION_TOPIC, self.config.transaction_state_num_partitions
        return (name, partition_for_group(key, count)) in self.registry.offline

    def _internal_configs(self, name: str) -> dict[str, str]:
        """An internal topic's configs, as Kafka creates it."""
        configs = dict(INTERNAL_TOPIC_CONFIGS)
        if name == OFFSETS_TOPIC:  # offsets.topic.segment.bytes
            configs["segment.bytes"] = str(self.config.offsets_topic_segment_bytes)
        return configs

    def _append_offsets(self, partition: int, batch: bytes) -> int:
        topic = self._internal_topic(OFFSETS_TOPIC, self.config.offsets_topic_num_partitions)
        epoch = self.registry.leader_epoch(topic.name, partition)
        info = self.registry.log(topic, partition).append(
            batch, leader_epoch=epoch, origin=AppendOrigin.COORDINATOR
        )
        return info.first_offset

    def _append_txn_state(self, partition: int, batch: bytes) -> None:
        topic = self._internal_topic(
            TRANSACTION_TOPIC, self.config.transaction_state_num_partitions
        )
        epoch = self.registry.leader_epoch(topic.name, partition)
        self.registry.log(topic, partition).append(
            batch, leader_epoch=epoch, origin=AppendOrigin.COORDINATOR
        )

    def _append_marker(self, topic_name: str, partition: int, marker: bytes) -> None:
        topic = self.registry.get(topic_name)
        if topic is None:
            return  # deleted while the transaction was open
        epoch = self.registry.leader_epoch(topic_name, partition)
        self.registry.log(topic, partition).append(
            marker, leader_epoch=epoch, origin=AppendOrigin.COORDINATOR
        )
        self.appended()

    def _read_offsets(self) -> Iterator[Iterator[RecordBatch]]:
        """Each ``__consumer_offsets`` partition's batches, one partition after the other (a
        transaction's marker only ends it in its own partition)."""
        topic = self.registry.get(OFFSETS_TOPIC)
        if topic is None:
            return
        for p in range(topic.partitions):
            yield self._read_partition(topic, p)

    def _read_txn_state(self) -> Iterator[RecordBatch]:
        return self._read_internal(TRANSACTION_TOPIC)

    def _read_internal(self, name: str) -> Iterator[RecordBatch]:
        topic = self.registry.get(name)
        if topic is None:
            return
        for p in range(topic.partitions):
            yield from self._read_partition(topic, p)

    def _read_partition(self, topic: Topic, partition: int) -> Iterator[RecordBatch]:
        """An internal partition's batches for its coordinator to load. Damage loses only what
        is damaged: damaged bytes are skipped (each skip logged with file and byte) and the
        groups or transactions stored elsewhere load; a partition that cannot open is offline
        (logged), and the rest of the broker starts."""

        def skipped(skip: SkippedBytes) -> None:
            _logger.error("loading %s-%d: %s", topic.name, partition, skip.describe())

        try:
            log = self.registry.log(topic, partition)
        except (KafkalogError, OSError) as e:
            _logger.error(
                "%s-%d cannot open, offline (what it stores is not loaded): %s",
                topic.name,
                partition,
                e,
            )
            return
        for batch in log.batches(log.log_start_offset, on_damage=skipped):
            if isinstance(batch, RecordBatch):
                yield batch

    def last_stable_offset(self, log: Log) -> int:
        key = (log.topic, log.partition)
        tracker = self._lso.get(key)
        if tracker is None:
            tracker = self._lso[key] = data.LastStableOffset()
        return tracker.of(log)

    def _partition_exists(self, topic: str, partition: int) -> bool:
        t = self.registry.get(topic)
        return t is not None and 0 <= partition < t.partitions

    def forget_topic(self, name: str) -> None:
        """Drop the committed offsets of a deleted topic, as Kafka's coordinator does."""
        self._lso = {k: v for k, v in self._lso.items() if k[0] != name}
        for group in self.groups.groups.values():
            for tp in [tp for tp in group.offsets if tp[0] == name]:
                del group.offsets[tp]
            for pending in group.txn_offsets.values():
                for tp in [tp for tp in pending if tp[0] == name]:
                    del pending[tp]

    def close(self) -> None:
        self.background.shutdown(wait=True)
        self.logdir.close()


async def _find_coordinator(broker: Broker, body: Any, version: int) -> dict[str, Any]:
    host, port = broker.advertised
    node = broker.config.node_id
    key_type = int(getattr(body, "key_type", 0))

    def answer(key: str) -> dict[str, Any]:
        code = E.NONE if key_type in (0, 1) else E.INVALID_REQUEST  # groups, transactions
        if code == E.NONE and broker.coordinator_offline(key_type, key):
            code = E.COORDINATOR_NOT_AVAILABLE
        return {"error_code": code, "node_id": node if code == E.NONE else -1, **where}

    where = {"host": host, "port": port}
    if hasattr(body, "coordinator_keys"):
        return {
            "coordinators": [
                {"key": k, "error_message": None, **answer(k)} for k in body.coordinator_keys
            ]
        }
    return answer(body.key)


def _coordinator(name: str) -> Handler:
    async def handle(broker: Broker, body: Any, version: int) -> dict[str, Any]:
        result: dict[str, Any] = await getattr(broker.groups, name)(body, version)
        return result

    return handle


async def _init_producer_id(broker: Broker, body: Any, version: int) -> dict[str, Any]:
    if body.transactional_id is None:
        return await admin.init_producer_id(broker, body, version)
    timeout = int(body.transaction_timeout.total_seconds() * 1000)
    return broker.transactions.init_producer_id(body.transactional_id, timeout)


async def _add_partitions_to_txn(broker: Broker, body: Any, version: int) -> dict[str, Any]:
    wanted = [(t.name, [int(p) for p in t.partitions]) for t in body.v3_and_below_topics]
    results = broker.transactions.add_partitions(
        body.v3_and_below_transactional_id,
        int(body.v3_and_below_producer_id),
        int(body.v3_and_below_producer_epoch),
        wanted,
    )
    return {"results_by_topic_v3_and_below": results}


async def _add_offsets_to_txn(broker: Broker, body: Any, version: int) -> dict[str, Any]:
    code = broker.transactions.add_offsets(
        body.transactional_id, int(body.producer_id), int(body.producer_epoch), body.group_id
    )
    return {"error_code": code}


async def _end_txn(broker: Broker, body: Any, version: int) -> dict[str, Any]:
    code = broker.transactions.end_txn(
        body.transactional_id, int(body.producer_id), int(body.producer_epoch), body.committed
    )
    broker.appended()  # markers move the last stable offset: wake read_committed fetches
    return {"error_code": code}


async def _offset_commit(broker: Broker, body: Any, version: int) -> dict[str, Any]:
    if broker.coordinator_offline(0, body.group_id):
        return _all_partitions(body, E.COORDINATOR_NOT_AVAILABLE)
    result: dict[str, Any] = await broker.groups.commit(body, version)
    return result


def _all_partitions(body: Any, code: int) -> dict[str, Any]:
    """An OffsetCommit or TxnOffsetCommit answer: ``code`` for every partition asked."""
    return {
        "topics": [
            {
                "name": t.name,
                "partitions": [
                    {"partition_index": p.partition_index, "error_code": code} for p in t.partitions
                ],
            }
            for t in body.topics
        ]
    }


async def _txn_offset_commit(broker: Broker, body: Any, version: int) -> dict[str, Any]:
    if broker.coordinator_offline(0, body.group_id):
        return _all_partitions(body, E.COORDINATOR_NOT_AVAILABLE)
    now = int(time.time() * 1000)
    offsets = {
        (t.name, int(p.partition_index)): CommittedOffset(
            int(p.committed_offset),
            int(getattr(p, "committed_leader_epoch", -1)),
            p.committed_metadata,
            now,
        )
        for t in body.topics
        for p in t.partitions
    }
    code = broker.transactions.txn_offset_commit(
        body.transactional_id,
        int(body.producer_id),
        int(body.producer_epoch),
        body.group_id,
        offsets,
    )
    return _all_partitions(body, code)


HANDLERS: dict[int, Handler] = {
    0: data.produce,
    1: data.fetch,
    2: data.list_offsets,
    3: admin.metadata,
    8: _offset_commit,
    9: _coordinator("fetch_offsets"),
    10: _find_coordinator,
    12: _coordinator("heartbeat"),
    13: _coordinator("leave"),
    14: _coordinator("sync"),
    15: _coordinator("describe"),
    16: _coordinator("list_groups"),
    18: admin.api_versions,
    19: admin.create_topics,
    20: admin.delete_topics,
    21: data.delete_records,
    22: _init_producer_id,
    23: data.offset_for_leader_epoch,
    24: _add_partitions_to_txn,
    25: _add_offsets_to_txn,
    26: _end_txn,
    28: _txn_offset_commit,
    29: acl_apis.describe_acls,
    30: acl_apis.create_acls,
    31: acl_apis.delete_acls,
    32: configs.describe_configs,
    33: configs.alter_configs,
    37: admin.create_partitions,
    42: _coordinator("delete_groups"),
    44: configs.incremental_alter_configs,
    50: user_credentials.describe_user_scram_credentials,
    51: user_credentials.alter_user_scram_credentials,
    60: admin.describe_cluster,
    68: _coordinator("consumer_group_heartbeat"),
}
JOIN_GROUP = 11
