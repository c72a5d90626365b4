"""Committed offsets and group metadata, kept in ``__consumer_offsets`` as Kafka keeps them.

:class:`OffsetStore` is what the group coordinator needs (load everything at start, append
commits and group metadata); :class:`ConsumerOffsetsTopic` implements it on the
``__consumer_offsets`` partitions of the data directory, one record per committed partition and
one per group change, keyed and valued in Kafka's own record formats through the schema-driven
codec generated from Kafka's message definitions (:mod:`kafkalog.records.internal_topics`, the
one ``kafkalog dump`` and ``kafkalog groups`` read with), so they and a real broker read what
this server wrote.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from kafkalog.log.internal_replay import entries_of, in_effect
from kafkalog.records import Record, RecordBatch, encode_batch
from kafkalog.records.internal_topics import (
    UnknownRecordType,
    decode_offsets_record,
    group_metadata_record,
    offset_commit_record,
    offset_commit_tombstone_key,
)

TopicPartition = tuple[str, int]
OFFSETS_TOPIC = "__consumer_offsets"


@dataclass(frozen=True)
class CommittedOffset:
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""
    commit_timestamp: int = -1


class OffsetCommitRecord(NamedTuple):
    """A committed offset read back (``committed`` None: its tombstone)."""

    group: str
    partition: TopicPartition
    committed: CommittedOffset | None


class GroupMetadataRecord(NamedTuple):
    """A classic group's metadata read back, as ``GroupMetadataValue`` fields (None: its
    tombstone)."""

    group: str
    value: dict[str, Any] | None


class OffsetRecordCodec(Protocol):
    """Keys and values of ``__consumer_offsets`` records: offset commits and classic groups'
    metadata."""

    def encode_key(self, group: str, topic: str, partition: int) -> bytes: ...

    def encode_value(self, committed: CommittedOffset) -> bytes: ...

    def decode_record(
        self, key: bytes, value: bytes | None
    ) -> OffsetCommitRecord | GroupMetadataRecord | None:
        """An offset commit or a group's metadata (value None: a tombstone), decoded once;
        None for any other record kind."""
        ...


class OffsetStore(Protocol):
    def load(self) -> dict[str, dict[TopicPartition, CommittedOffset]]: ...

    def load_groups(self) -> dict[str, dict[str, Any]]:
        """Each classic group's last ``GroupMetadataValue`` fields, tombstones applied."""
        ...

    def commit(self, group: str, offsets: dict[TopicPartition, CommittedOffset]) -> None: ...

    def store_group(self, group: str, value: dict[str, Any] | None) -> None:
        """Append the group's metadata (``GroupMetadataValue`` fields), or its tombstone."""
        ...

    def delete_offsets(self, group: str, partitions: list[TopicPartition]) -> None:
        """Append tombstones for the group's committed offsets of ``partitions``."""
        ...


class KafkaOffsetCodec:
    """``OffsetCommitKey`` version 1 and ``OffsetCommitValue`` version 3, the formats Kafka's
    group coordinator writes for classic groups, through the schema-driven codec (which reads
    every version). A null metadata is stored as ``""``, as Kafka's coordinator stores it
    (``OffsetAndMetadata.NoMetadata``)."""

    def encode_key(self, group: str, topic: str, partition: int) -> bytes:
        return offset_commit_tombstone_key(group, topic, partition)

    def encode_value(self, committed: CommittedOffset) -> bytes:
        _, value = offset_commit_record(
            "",
            "",
            0,
            committed.offset,
            commit_timestamp=committed.commit_timestamp,
            metadata=committed.metadata or "",
            leader_epoch=committed.leader_epoch,
        )
        return value

    def decode_record(
        self, key: bytes, value: bytes | None
    ) -> OffsetCommitRecord | GroupMetadataRecord | None:
        try:
            found = decode_offsets_record(key, value, what=OFFSETS_TOPIC)
        except UnknownRecordType:
            return None  # records of newer group kinds: nothing of a classic group
        if found.is_group_metadata:
            data = None if found.value is None else dict(found.value.data)
            return GroupMetadataRecord(found.key.data["group"], data)
        if not found.is_offset_commit:
            return None
        k = found.key.data
        tp = (k["topic"], k["partition"])
        if found.value is None:
            return OffsetCommitRecord(k["group"], tp, None)
        v = found.value.data
        committed = CommittedOffset(
            v["offset"], v.get("leaderEpoch", -1), v["metadata"], v["commitTimestamp"]
        )
        return OffsetCommitRecord(k["group"], tp, committed)

    def decode(self, key: bytes, value: bytes | None) -> OffsetCommitRecord | None:
        """An offset commit (value None: a tombstone); None for any other record kind."""
        found = self.decode_record(key, value)
        return found if isinstance(found, OffsetCommitRecord) else None

    def decode_group(self, key: bytes, value: bytes | None) -> GroupMetadataRecord | None:
        """A group metadata record, as its fields (value None: a tombstone)."""
        found = self.decode_record(key, value)
        return found if isinstance(found, GroupMetadataRecord) else None


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    raw = text.encode("utf-16-be")
    for i in range(0, len(raw), 2):
        h = (31 * h + (raw[i] << 8 | raw[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for_group(group: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode) % offsets.topic.num.partitions``."""
    h = java_string_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


class ConsumerOffsetsTopic:
    """An :class:`OffsetStore` on ``__consumer_offsets`` partitions.

    ``append(partition, batch_bytes)`` and ``read_all()`` (each partition's batches, partition
    by partition) come from the server's topic registry so this module stays free of how
    partitions are opened.
    """

    def __init__(
        self,
        partitions: int,
        append: Callable[[int, bytes], None],
        read_all: Callable[[], Iterable[Iterable[RecordBatch]]],
        codec: OffsetRecordCodec | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.partitions = partitions
        self._append = append
        self._read_all = read_all
        self.codec: OffsetRecordCodec = codec if codec is not None else KafkaOffsetCodec()
        self.clock = clock
        self._metadata: dict[str, dict[str, Any]] | None = None

    def load(self) -> dict[str, dict[TopicPartition, CommittedOffset]]:
        """Replay every partition as Kafka's coordinator loads it: the committed offsets
        (returned) and each group's metadata (kept for :meth:`load_groups`), later records and
        tombstones winning, transactional commits only once their COMMIT marker follows (a
        directory written by a Kafka broker has them; this server writes commits only at
        EndTxn). The same replay as ``kafkalog groups`` (:mod:`kafkalog.log.internal_replay`)."""
        groups: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        metadata: dict[str, dict[str, Any]] = {}
        for batches in self._read_all():
            for entry in in_effect(entries_of(batches)):
                if entry.key is None:
                    continue
                found = self.codec.decode_record(entry.key, entry.value)
                if isinstance(found, OffsetCommitRecord):
                    group, tp, committed = found
                    if committed is None:
                        groups.get(group, {}).pop(tp, None)
                    else:
                        groups.setdefault(group, {})[tp] = committed
                elif found is not None:
                    name, value = found
                    if value is None:
                        metadata.pop(name, None)
                    else:
                        metadata[name] = value
        self._metadata = metadata
        return groups

    def load_groups(self) -> dict[str, dict[str, Any]]:
        if self._metadata is None:
            self.load()
        return dict(self._metadata or {})

    def commit(self, group: str, offsets: dict[TopicPartition, CommittedOffset]) -> None:
        now = int(self.clock() * 1000)
        records = [
            Record.of(
                self.codec.encode_value(c),
                key=self.codec.encode_key(group, topic, partition),
                timestamp=now,
            )
            for (topic, partition), c in offsets.items()
        ]
        if records:
            self._append(partition_for_group(group, self.partitions), encode_batch(records))

    def store_group(self, group: str, value: dict[str, Any] | None) -> None:
        key, data = group_metadata_record(group, value)
        record = Record.of(data, key=key, timestamp=int(self.clock() * 1000))
        self._append(partition_for_group(group, self.partitions), encode_batch([record]))

    def delete_offsets(self, group: str, partitions: list[TopicPartition]) -> None:
        now = int(self.clock() * 1000)
        records = [
            Record.of(None, key=self.codec.encode_key(group, topic, p), timestamp=now)
            for topic, p in partitions
        ]
        if records:
            self._append(partition_for_group(group, self.partitions), encode_batch(records))
