"""One broker: the data directory, its topics, the group coordinator and the request table."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from kafkalog.log import Log, LogDir
from kafkalog.records import RecordBatch
from kafkalog.server import admin, data
from kafkalog.server import errors as E
from kafkalog.server.config import ServerConfig
from kafkalog.server.groups import GroupCoordinator
from kafkalog.server.offset_store import ConsumerOffsetsTopic, OffsetRecordCodec
from kafkalog.server.topics import OFFSETS_TOPIC, Topic, TopicRegistry

Handler = Callable[["Broker", Any, int], Awaitable[dict[str, Any]]]

# the offsets topic as Kafka creates it: compacted, 100 MiB segments (offsets.topic.*)
OFFSETS_TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "segment.bytes": "104857600",
    "compression.type": "producer",
}


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
        self.config = config
        self.logdir = LogDir(data_dir, writable=True)
        try:
            self.registry = TopicRegistry(self.logdir, config.topic_defaults)
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
            )
        except BaseException:
            self.logdir.close()
            raise
        self._appended = asyncio.Event()
        self._lso: dict[tuple[str, int], data.LastStableOffset] = {}
        self.advertised: tuple[str, int] = (config.advertised_host or config.host, config.port)

    # -- append notifications (the long poll) -------------------------------------------------
    def append_waiter(self) -> asyncio.Event:
        return self._appended

    def appended(self) -> None:
        """Wake every fetch waiting for data; later waiters get a fresh event."""
        self._appended.set()
        self._appended = asyncio.Event()

    # -- the offsets topic ---------------------------------------------------------------------
    def _offsets_topic(self) -> Topic:
        topic = self.registry.get(OFFSETS_TOPIC)
        if topic is None:
            topic = self.registry.create(
                OFFSETS_TOPIC, self.config.offsets_topic_num_partitions, OFFSETS_TOPIC_CONFIGS
            )
        return topic

    def _append_offsets(self, partition: int, batch: bytes) -> None:
        topic = self._offsets_topic()
        epoch = self.registry.leader_epoch(topic.name, partition)
        self.registry.log(topic, partition).append(batch, leader_epoch=epoch)

    def _read_offsets(self) -> Iterator[RecordBatch]:
        topic = self.registry.get(OFFSETS_TOPIC)
        if topic is None:
            return
        for p in range(topic.partitions):
            log = self.registry.log(topic, p)
            for batch in log.batches(log.log_start_offset):
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

    def close(self) -> None:
        self.logdir.close()


async def _find_coordinator(broker: Broker, body: Any, version: int) -> dict[str, Any]:
    host, port = broker.advertised
    node = broker.config.node_id
    key_type = int(getattr(body, "key_type", 0))
    code = E.NONE if key_type == 0 else E.COORDINATOR_NOT_AVAILABLE  # no transactions yet
    found = {"node_id": node if code == E.NONE else -1, "host": host, "port": port}
    if hasattr(body, "coordinator_keys"):
        return {
            "coordinators": [
                {"key": k, "error_code": code, "error_message": None, **found}
                for k in body.coordinator_keys
            ]
        }
    return {"error_code": code, **found}


def _coordinator(name: str) -> Handler:
    async def handle(broker: Broker, body: Any, version: int) -> dict[str, Any]:
        result: dict[str, Any] = await getattr(broker.groups, name)(body, version)
        return result

    return handle


HANDLERS: dict[int, Handler] = {
    0: data.produce,
    1: data.fetch,
    2: data.list_offsets,
    3: admin.metadata,
    8: _coordinator("commit"),
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
    22: admin.init_producer_id,
    23: data.offset_for_leader_epoch,
    32: admin.describe_configs,
    37: admin.create_partitions,
}
JOIN_GROUP = 11
