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
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple, Protocol

from kafkalog.log.internal_replay import COMMIT_MARKER, entries_of
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
    # where its record sits in ``__consumer_offsets`` (-1: not known). A committed transaction's
    # offset replaces the group's only if its record is later than the one in effect, as
    # Kafka's ``CommitRecordMetadataAndOffset.olderThan`` decides
    log_offset: int = field(default=-1, compare=False)

    def older_than(self, other: CommittedOffset) -> bool:
        return self.log_offset < other.log_offset


#: a group's transactional offsets not yet ended, by the producer id whose transaction holds them
PendingOffsets = dict[int, dict[TopicPartition, CommittedOffset]]


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

    def load_pending(self) -> dict[str, PendingOffsets]:
        """Each group's transactional offsets whose transaction has no marker yet."""
        ...

    def commit(self, group: str, offsets: dict[TopicPartition, CommittedOffset]) -> int | None:
        """Append the offsets; the log offset of the first record when known."""
        ...

    def commit_transactional(
        self,
        group: str,
        producer_id: int,
        producer_epoch: int,
        offsets: dict[TopicPartition, CommittedOffset],
    ) -> int | None:
        """Append the offsets of a TxnOffsetCommit as a transactional batch of the producer
        (in effect once its COMMIT marker follows); the log offset of its first record."""
        ...

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

    ``append(partition, batch_bytes)`` (the log offset of the batch's first record, if known)
    and ``read_all()`` (each partition's batches, partition
    by partition) come from the server's topic registry so this module stays free of how
    partitions are opened.
    """

    def __init__(
        self,
        partitions: int,
        append: Callable[[int, bytes], int | None],
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
        self._pending: dict[str, PendingOffsets] | None = None

    def load(self) -> dict[str, dict[TopicPartition, CommittedOffset]]:
        """Replay every partition as Kafka's coordinator loads it: the committed offsets
        (returned), each group's metadata (kept for :meth:`load_groups`) and the transactional
        offsets still waiting for their marker (kept for :meth:`load_pending`). Later records
        and tombstones win; a transactional offset takes effect at its producer's COMMIT marker
        in the same partition, unless a later record of the partition is already in effect
        (Kafka's ``olderThan``), and an ABORT drops it. ``kafkalog groups`` applies the same
        markers (:mod:`kafkalog.log.internal_replay`)."""
        groups: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        metadata: dict[str, dict[str, Any]] = {}
        open_txns: dict[str, PendingOffsets] = {}
        for batches in self._read_all():
            # producer id -> the (group, partition)s its open transaction wrote here
            held: dict[int, list[tuple[str, TopicPartition]]] = {}
            for entry in entries_of(batches):
                if entry.control is not None:
                    for group, tp in held.pop(entry.producer_id, []):
                        waiting = open_txns.get(group, {}).get(entry.producer_id, {})
                        committed = waiting.pop(tp, None)
                        if committed is None or entry.control != COMMIT_MARKER:
                            continue
                        current = groups.setdefault(group, {}).get(tp)
                        if current is None or current.older_than(committed):
                            groups[group][tp] = committed
                    continue
                if entry.key is None:
                    continue
                found = self.codec.decode_record(entry.key, entry.value)
                if isinstance(found, OffsetCommitRecord):
                    group, tp, committed = found
                    if committed is not None:
                        committed = replace(committed, log_offset=entry.log_offset)
                    if entry.transactional:
                        pending = open_txns.setdefault(group, {}).setdefault(entry.producer_id, {})
                        if committed is None:
                            pending.pop(tp, None)
                        else:
                            pending[tp] = committed
                            held.setdefault(entry.producer_id, []).append((group, tp))
                    elif committed is None:
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
        self._pending = {
            group: {pid: offsets for pid, offsets in by_pid.items() if offsets}
            for group, by_pid in open_txns.items()
            if any(by_pid.values())
        }
        return groups

    def load_groups(self) -> dict[str, dict[str, Any]]:
        if self._metadata is None:
            self.load()
        return dict(self._metadata or {})

    def load_pending(self) -> dict[str, PendingOffsets]:
        if self._pending is None:
            self.load()
        return {group: dict(by_pid) for group, by_pid in (self._pending or {}).items()}

    def commit(self, group: str, offsets: dict[TopicPartition, CommittedOffset]) -> int | None:
        return self._commit(group, offsets, {})

    def commit_transactional(
        self,
        group: str,
        producer_id: int,
        producer_epoch: int,
        offsets: dict[TopicPartition, CommittedOffset],
    ) -> int | None:
        # as Kafka's coordinator writes a TxnOffsetCommit: the producer's id and epoch, the
        # transactional bit, sequence 0 (a coordinator's append is not checked for sequences)
        batch = {
            "producer_id": producer_id,
            "producer_epoch": producer_epoch,
            "base_sequence": 0,
            "is_transactional": True,
        }
        return self._commit(group, offsets, batch)

    def _commit(
        self, group: str, offsets: dict[TopicPartition, CommittedOffset], batch: dict[str, Any]
    ) -> int | None:
        now = int(self.clock() * 1000)
        records = [
            Record.of(
                self.codec.encode_value(c),
                key=self.codec.encode_key(group, topic, partition),
                timestamp=now,
            )
            for (topic, partition), c in offsets.items()
        ]
        if not records:
            return None
        return self._append(
            partition_for_group(group, self.partitions), encode_batch(records, **batch)
        )

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
