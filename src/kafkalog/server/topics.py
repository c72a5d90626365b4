"""Which topics exist, with how many partitions, under which id and with which configs.

A broker keeps this in its metadata log; ``kafkalog serve`` derives partitions and topic ids from
the data directory itself (``<topic>-<n>`` directories and their ``partition.metadata``), so a
directory written by Kafka, the Spark writer or ``kafkalog ingest`` is served as it is, and keeps
only what the directory cannot say (per-topic config overrides, the next producer id) in
``.kafkalog-serve.json`` beside the partitions.
"""

from __future__ import annotations

import json
import logging
import os
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from kafkalog.errors import KafkalogError
from kafkalog.log import Log, LogDir, TopicConfig
from kafkalog.log.checkpoints import PartitionMetadata, decode_uuid, new_topic_id
from kafkalog.log.config import BROKER_SYNONYMS

STATE_FILE = ".kafkalog-serve.json"
OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_TOPIC = "__transaction_state"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_TOPIC})
#: a KRaft broker's metadata log (``__cluster_metadata-0``): the quorum's, never a topic its
#: log manager loads, lists or runs retention on, so not one a directory served here has
METADATA_TOPIC = "__cluster_metadata"
_LEGAL = re.compile(r"[a-zA-Z0-9._-]{1,249}")
_PRODUCER_ID_BLOCK = 1000

#: the dynamic broker config layers, lowest precedence first
DYNAMIC_LAYERS = ("cluster", "node")


class TopicError(KafkalogError):
    """A topic request Kafka refuses; ``code`` is the Kafka error code to answer with."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def check_topic_name(name: str) -> None:
    """Kafka's ``Topic.validate``: 1..249 of ``[a-zA-Z0-9._-]``, never ``.`` or ``..``."""
    if name in (".", "..") or not _LEGAL.fullmatch(name):
        raise TopicError(17, f"invalid topic name {name!r}")  # INVALID_TOPIC_EXCEPTION


@dataclass
class Topic:
    name: str
    topic_id: str
    partitions: int
    overrides: dict[str, str] = field(default_factory=dict)

    @property
    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=decode_uuid(self.topic_id))

    @property
    def internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


class TopicRegistry:
    """The topics of one writable :class:`LogDir`, and the logs of their partitions."""

    def __init__(
        self,
        logdir: LogDir,
        defaults: dict[str, str],
        internal_partitions: dict[str, int] | None = None,
        internal_configs: dict[str, dict[str, str]] | None = None,
    ) -> None:
        self.logdir = logdir
        #: the server's ``topic_defaults`` (its static broker config)
        self.static_defaults = dict(defaults)
        self._state_path = os.path.join(logdir.path, STATE_FILE)
        self._state = self._read_state()
        #: dynamic broker configs by layer (``cluster``: the cluster-wide default, ``node``:
        #: this broker's own), under Kafka's broker names (``log.retention.ms``)
        saved_dynamic = self._state.get("broker_configs", {})
        self.dynamic: dict[str, dict[str, str]] = {
            layer: dict(saved_dynamic.get(layer, {})) for layer in DYNAMIC_LAYERS
        }
        self.defaults: dict[str, str] = self._merged_defaults(self.dynamic)
        self.topics: dict[str, Topic] = {}
        counts: dict[str, int] = {}
        present: dict[str, set[int]] = {}
        for topic, partition in logdir.partitions():
            if topic != METADATA_TOPIC:
                counts[topic] = max(counts.get(topic, 0), partition + 1)
                present.setdefault(topic, set()).add(partition)
        for name, configured in (internal_partitions or {}).items():
            # one broker's directory of a cluster holds only its replicas' partitions of an
            # internal topic (a broker's __consumer_offsets-16 alone): the topic had the
            # configured count, and a group hashing to a partition this directory lacks
            # failed its every request. Partitions 0..n-1 all here are the whole topic.
            if name in counts and len(present[name]) < counts[name]:
                counts[name] = max(counts[name], configured)
        saved = self._state.setdefault("topics", {})
        for name, count in counts.items():
            if name in saved or name not in (internal_configs or {}):
                overrides = dict(saved.get(name, {}).get("configs", {}))
            else:
                # a broker's own __consumer_offsets: its configs (compacted) were in the
                # cluster's metadata, not in this directory; taken for the broker defaults
                # (cleanup.policy=delete), retention deleted every group's commits a week on
                overrides = dict((internal_configs or {})[name])
            count = max(count, int(saved.get(name, {}).get("partitions", 0)))
            self.topics[name] = Topic(name, self._topic_id_on_disk(name), count, overrides)
        self._record_topic_ids(logdir.partitions())
        self._epochs: dict[tuple[str, int], int] = {}
        self._led: set[tuple[str, int]] = set()  # the partitions whose logs were opened
        #: partitions whose log could not be opened (damage, the disk): offline until the
        #: broker restarts, as Kafka keeps a failed replica offline, with the reason
        self.offline: dict[tuple[str, int], str] = {}
        self._next_pid = int(self._state.get("next_producer_id", 0))
        self._pid_limit = self._next_pid

    # -- state file ------------------------------------------------------------------------------
    def _read_state(self) -> dict[str, Any]:
        try:
            with open(self._state_path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            raise KafkalogError(f"{self._state_path}: unreadable server state ({e})") from None
        if not isinstance(data, dict):
            raise KafkalogError(f"{self._state_path}: server state is not a JSON object")
        return data

    def _write_state(self) -> None:
        self._state["broker_configs"] = {k: v for k, v in self.dynamic.items() if v}
        self._state["topics"] = {
            t.name: {"configs": t.overrides, "partitions": t.partitions}
            for t in self.topics.values()
        }
        tmp = self._state_path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(self._state, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._state_path)

    def _topic_id_on_disk(self, name: str) -> str:
        for topic, partition in self.logdir.partitions():
            if topic == name:
                path = os.path.join(self.logdir.path, f"{topic}-{partition}", "partition.metadata")
                try:
                    return PartitionMetadata.read(path).topic_id
                except (OSError, KafkalogError):
                    continue
        return new_topic_id()

    def _record_topic_ids(self, partitions: list[tuple[str, int]]) -> None:
        """Give every partition directory without a ``partition.metadata`` (written by
        ``kafkalog ingest``, the Spark writer, or a broker older than Kafka 2.8) its topic's
        id, as a broker does for the logs it hosts: the id Metadata answers with then stays
        the same across restarts, and Kafka's tools find it."""
        for topic_name, partition in partitions:
            topic = self.topics.get(topic_name)
            if topic is None:
                continue
            path = os.path.join(self.logdir.path, f"{topic_name}-{partition}", "partition.metadata")
            if not os.path.exists(path):
                PartitionMetadata.write(path, topic.topic_id)

    # -- producer ids ----------------------------------------------------------------------------
    def next_producer_id(self) -> int:
        """A producer id never handed out before, also across restarts: ids are reserved in
        blocks (as Kafka's controller hands them to brokers) and the block's end is saved
        before any id in it is used."""
        if self._next_pid >= self._pid_limit:
            self._pid_limit = self._next_pid + _PRODUCER_ID_BLOCK
            self._state["next_producer_id"] = self._pid_limit
            self._write_state()
        pid = self._next_pid
        self._next_pid += 1
        return pid

    # -- leadership ------------------------------------------------------------------------------
    def leader_epoch(self, topic: str, partition: int) -> int:
        """This broker's leader epoch for a partition: the latest one its
        ``leader-epoch-checkpoint`` records (a directory a Kafka broker wrote keeps its epochs
        increasing), else 0. Stamped into appended batches and told to clients in Metadata."""
        key = (topic, partition)
        epoch = self._epochs.get(key)
        if epoch is None:
            from kafkalog.log.checkpoints import LeaderEpochCheckpoint

            path = os.path.join(self.logdir.path, f"{topic}-{partition}", "leader-epoch-checkpoint")
            try:
                entries = LeaderEpochCheckpoint.read(path)
            except (OSError, KafkalogError):
                entries = []
            epoch = self._epochs[key] = max((e.epoch for e in entries), default=0)
        return epoch

    # -- topics ----------------------------------------------------------------------------------
    def get(self, name: str) -> Topic | None:
        return self.topics.get(name)

    def config(self, topic: Topic) -> TopicConfig:
        merged = {**self.defaults, **topic.overrides}
        return TopicConfig.from_properties(merged, ignore_unmodelled=True)

    def exists(self, topic: Topic, partition: int) -> bool:
        """Whether the partition has a directory (a log is made only when first used)."""
        return os.path.isdir(os.path.join(self.logdir.path, f"{topic.name}-{partition}"))

    def log(self, topic: Topic, partition: int) -> Log:
        """The partition's log, created (with the topic's id) if its directory is missing."""
        if not 0 <= partition < topic.partitions:
            raise TopicError(3, f"{topic.name} has no partition {partition}")
        directory = os.path.join(self.logdir.path, f"{topic.name}-{partition}")
        key = (topic.name, partition)
        failed = self.offline.get(key)
        if failed is not None:
            raise TopicError(56, f"{topic.name}-{partition} is offline: {failed}")
        existed = os.path.isdir(directory)
        opened = key in self._led
        try:
            log = self.logdir.log(topic.name, partition, create=True, config=self.config(topic))
        except (KafkalogError, OSError) as e:
            # one partition that cannot open is offline; the broker and the rest serve on
            self.offline[key] = str(e)
            raise
        if not existed:
            PartitionMetadata.write(os.path.join(directory, "partition.metadata"), topic.topic_id)
        if not opened:
            self._lead(log, topic.name, partition)
        return log

    def online(self, topic: Topic, partition: int) -> bool:
        """Whether the partition serves: an existing partition's log is opened now if it was
        not yet (as a Kafka broker has every log loaded before it answers), so that one that
        cannot open is known offline from the first Metadata that names it."""
        key = (topic.name, partition)
        if key in self.offline:
            return False
        if key in self._led or not self.exists(topic, partition):
            return True  # opened already, or made when first used
        try:
            self.log(topic, partition)
        except (KafkalogError, OSError) as e:  # recorded in offline, with the reason
            logging.getLogger("kafkalog.server").error(
                "cannot open %s-%d, offline: %s", topic.name, partition, e
            )
            return False
        return True

    def _lead(self, log: Log, topic: str, partition: int) -> None:
        """Become the partition's leader as Kafka's ``Partition.makeLeader`` does: its leader
        epoch starts at the log end offset (``maybeAssignEpochStartOffset``), written to the
        ``leader-epoch-checkpoint`` at once. A new partition's file so reads ``0 0`` before
        any append, as a real broker's does; a directory whose latest epoch is already this
        one is left as it is."""
        self._led.add((topic, partition))
        cache = log.leader_epochs
        if cache is None or not log.writable:
            return
        epoch = self.leader_epoch(topic, partition)
        if cache.latest_epoch is not None and cache.latest_epoch > epoch:
            # the loaded log knows a later epoch than the file said: never stamp below it
            epoch = self._epochs[(topic, partition)] = cache.latest_epoch
        if cache.latest_epoch != epoch and cache.assign(epoch, log.log_end_offset):
            log.write_checkpoints()

    def validate_configs(
        self, configs: dict[str, str], defaults: dict[str, str] | None = None
    ) -> None:
        base = self.defaults if defaults is None else defaults
        try:
            TopicConfig.from_properties({**base, **configs}, ignore_unmodelled=True)
        except KafkalogError as e:
            raise TopicError(40, str(e)) from None  # INVALID_CONFIG

    # -- changing configs (AlterConfigs, IncrementalAlterConfigs) --------------------------------
    def set_overrides(
        self, topic: Topic, overrides: dict[str, str], *, validate_only: bool = False
    ) -> None:
        """Replace the topic's overrides: validated as CreateTopics validates them, saved
        before they apply, then given to the partitions' open logs (a log opened later gets
        them from :meth:`config`)."""
        self.validate_configs(overrides)
        if validate_only:
            return
        topic.overrides = dict(overrides)
        self._write_state()
        self._apply(topic)

    def set_dynamic_defaults(
        self, layer: str, configs: dict[str, str], *, validate_only: bool = False
    ) -> None:
        """Replace one layer of dynamic broker configs (broker names, ``log.retention.ms``):
        the defaults of every topic without its own override, applied to every open log."""
        layers = {**self.dynamic, layer: dict(configs)}
        defaults = self._merged_defaults(layers)
        self.validate_configs({}, defaults)
        for topic in self.topics.values():
            self.validate_configs(topic.overrides, defaults)
        if validate_only:
            return
        self.dynamic = layers
        self.defaults = defaults
        self._write_state()
        for topic in self.topics.values():
            self._apply(topic)

    def _merged_defaults(self, layers: dict[str, dict[str, str]]) -> dict[str, str]:
        """Topic defaults by precedence: static, then the cluster-wide dynamic layer, then
        this broker's (Kafka's DYNAMIC_BROKER over DYNAMIC_DEFAULT_BROKER over STATIC)."""
        merged = dict(self.static_defaults)
        for layer in DYNAMIC_LAYERS:
            for name, value in layers.get(layer, {}).items():
                topic_name = BROKER_SYNONYMS.get(name)
                if topic_name is not None:
                    merged[topic_name] = value
        return merged

    def _apply(self, topic: Topic) -> None:
        config = self.config(topic)
        for log in self.logdir.open_logs():
            if log.topic == topic.name:
                log.reconfigure(config)

    def create(
        self, name: str, partitions: int, configs: dict[str, str], *, validate_only: bool = False
    ) -> Topic:
        check_topic_name(name)
        if name == METADATA_TOPIC:  # as a KRaft controller refuses it
            raise TopicError(42, f"Creation of internal topic {name} is prohibited.")
        if name in self.topics:
            raise TopicError(36, f"topic {name!r} already exists")  # TOPIC_ALREADY_EXISTS
        if partitions < 1:
            raise TopicError(37, f"number of partitions must be positive, not {partitions}")
        self.validate_configs(configs)
        topic = Topic(name, new_topic_id(), partitions, dict(configs))
        if validate_only:
            return topic
        self.topics[name] = topic
        self._write_state()
        for p in range(partitions):
            self.log(topic, p)
        self.logdir.checkpoint()
        return topic

    def add_partitions(self, topic: Topic, count: int, *, validate_only: bool = False) -> None:
        if count <= topic.partitions:
            raise TopicError(  # INVALID_PARTITIONS
                37, f"topic {topic.name} has {topic.partitions} partitions; {count} adds none"
            )
        if validate_only:
            return
        old = topic.partitions
        topic.partitions = count
        self._write_state()
        for p in range(old, count):
            self.log(topic, p)
        self.logdir.checkpoint()

    def delete(self, topic: Topic) -> None:
        for p in range(topic.partitions):
            self.logdir.remove_partition(topic.name, p)
            self._epochs.pop((topic.name, p), None)
            self._led.discard((topic.name, p))
            self.offline.pop((topic.name, p), None)
        del self.topics[topic.name]
        self._write_state()
        self.logdir.checkpoint()
