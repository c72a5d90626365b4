"""Committed offsets, kept in ``__consumer_offsets`` as Kafka keeps them.

:class:`OffsetStore` is what the group coordinator needs (load everything at start, append
commits); :class:`ConsumerOffsetsTopic` implements it on the ``__consumer_offsets`` partitions of
the data directory, one record per committed partition, keyed and valued in Kafka's own record
formats through an :class:`OffsetRecordCodec` (the schema-driven codec of the ``ops`` work plugs
in there), so ``kafkalog dump`` and a real broker read what this server wrote.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from kafkalog.errors import KafkalogError
from kafkalog.records import Record, RecordBatch, encode_batch

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class CommittedOffset:
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""
    commit_timestamp: int = -1


class OffsetRecordCodec(Protocol):
    """Keys and values of ``__consumer_offsets`` offset-commit records."""

    def encode_key(self, group: str, topic: str, partition: int) -> bytes: ...

    def encode_value(self, committed: CommittedOffset) -> bytes: ...

    def decode(
        self, key: bytes, value: bytes | None
    ) -> tuple[str, TopicPartition, CommittedOffset | None] | None:
        """An offset commit (value None: a tombstone); None for any other record kind."""
        ...


class OffsetStore(Protocol):
    def load(self) -> dict[str, dict[TopicPartition, CommittedOffset]]: ...

    def commit(self, group: str, offsets: dict[TopicPartition, CommittedOffset]) -> None: ...


def _string(value: str | None) -> bytes:
    if value is None:
        return struct.pack(">h", -1)
    raw = value.encode("utf-8")
    return struct.pack(">h", len(raw)) + raw


class _Cursor:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, fmt: str) -> int:
        s = struct.Struct(fmt)
        if self.pos + s.size > len(self.data):
            raise KafkalogError(f"offset record cut short at byte {self.pos}")
        (v,) = s.unpack_from(self.data, self.pos)
        self.pos += s.size
        return int(v)

    def string(self) -> str | None:
        return self._text(self.take(">h"))

    def compact_string(self) -> str | None:
        """A flexible version's string: unsigned varint length + 1 (0 is null)."""
        n = shift = 0
        while True:
            if self.pos >= len(self.data) or shift > 28:
                raise KafkalogError(f"offset record varint cut short at byte {self.pos}")
            b = self.data[self.pos]
            self.pos += 1
            n |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        return self._text(n - 1)

    def _text(self, n: int) -> str | None:
        if n < 0:
            return None
        if self.pos + n > len(self.data):
            raise KafkalogError(f"offset record string cut short at byte {self.pos}")
        raw = self.data[self.pos : self.pos + n]
        self.pos += n
        return raw.decode("utf-8")


class KafkaOffsetCodec:
    """``OffsetCommitKey`` version 1 and ``OffsetCommitValue`` version 3 (non-flexible), the
    formats Kafka's group coordinator writes for classic groups; reads key versions 0/1 and
    value versions 0..4 (4 is flexible: compact metadata string, tagged fields after)."""

    def encode_key(self, group: str, topic: str, partition: int) -> bytes:
        return struct.pack(">h", 1) + _string(group) + _string(topic) + struct.pack(">i", partition)

    def encode_value(self, committed: CommittedOffset) -> bytes:
        return (
            struct.pack(">hqi", 3, committed.offset, committed.leader_epoch)
            + _string(committed.metadata)
            + struct.pack(">q", committed.commit_timestamp)
        )

    def decode(
        self, key: bytes, value: bytes | None
    ) -> tuple[str, TopicPartition, CommittedOffset | None] | None:
        c = _Cursor(key)
        version = c.take(">h")
        if version not in (0, 1):
            return None  # group metadata (2) and anything newer
        group = c.string() or ""
        topic = c.string() or ""
        partition = c.take(">i")
        if value is None:
            return group, (topic, partition), None
        v = _Cursor(value)
        vv = v.take(">h")
        offset = v.take(">q")
        epoch = v.take(">i") if vv >= 3 else -1
        metadata = v.compact_string() if vv >= 4 else v.string()
        ts = v.take(">q")  # v0 timestamp, v1..4 commit timestamp
        return group, (topic, partition), CommittedOffset(offset, epoch, metadata, ts)


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

    ``append(partition, batch_bytes)`` and ``read_all()`` come from the server's topic registry
    so this module stays free of how partitions are opened.
    """

    def __init__(
        self,
        partitions: int,
        append: Callable[[int, bytes], None],
        read_all: Callable[[], Iterable[RecordBatch]],
        codec: OffsetRecordCodec | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.partitions = partitions
        self._append = append
        self._read_all = read_all
        self.codec: OffsetRecordCodec = codec if codec is not None else KafkaOffsetCodec()
        self.clock = clock

    def load(self) -> dict[str, dict[TopicPartition, CommittedOffset]]:
        groups: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        for batch in self._read_all():
            if batch.is_control:
                continue
            for rec in batch.records():
                if rec.key is None:
                    continue
                found = self.codec.decode(rec.key, rec.value)
                if found is None:
                    continue
                group, tp, committed = found
                if committed is None:
                    groups.get(group, {}).pop(tp, None)
                else:
                    groups.setdefault(group, {})[tp] = committed
        return groups

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
