"""What the cleaner keeps of one batch, to the letter of Kafka's cleaner
(``LogCleaner.cleanInto``'s filter over ``MemoryRecords.filterTo``).

Per batch (magic 2):

- its transaction decides first (:mod:`kafkalog.log.cleaner.txn`): a batch of an aborted
  transaction goes whole; a marker goes once its transaction has nothing left *and* the delete
  horizon stamped on it by an earlier cleaning has passed;
- the last batch of a producer still active stays, emptied if need be (an empty batch keeps
  the producer id, epoch, base sequence and offsets, so idempotence and fencing survive); so
  does the batch ending just before the round's first uncleanable offset, so the log keeps
  its last offset;
- a record stays when its offset is past the offset map's reach, or it is the latest of its
  key and either has a value or is a tombstone whose batch horizon has not passed; a record
  without a key goes;
- a batch keeping every record, and needing no horizon, is written as it was (same bytes); any
  other is rebuilt as Kafka's builder does: same base offset, last offset, producer fields,
  attributes, leader epoch and codec (re-compressed, default level), the base timestamp the
  first kept record's, or the delete horizon (now + ``delete.retention.ms``) when it keeps a
  tombstone or is a marker that may go, with the horizon attribute bit set.

Legacy entries (magic 0/1) keep a record on the same rule, a tombstone only while its segment
is newer than the legacy delete horizon; a compressed wrapper keeping some records is rebuilt
from the first kept offset. They are never kept empty (they cannot be).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from kafkalog.errors import CorruptRecordError
from kafkalog.log.cleaner import _kernels as K
from kafkalog.log.cleaner.offset_map import OffsetMap
from kafkalog.log.cleaner.txn import CleanedTransactions
from kafkalog.records import RecordBatch
from kafkalog.records import compression as codecs
from kafkalog.records.batch import (
    ATTR_DELETE_HORIZON,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    assemble_batch,
)
from kafkalog.records.crc import crc32c
from kafkalog.records.legacy import LegacyEntry, encode_message_set
from kafkalog.records.model import Record
from kafkalog.records.types import Compression, Limits, TimestampType

_CRC = struct.Struct(">I")


class LastRecord(NamedTuple):
    """What the cleaner needs of a producer still active (Kafka's ``LastRecord``): the last
    offset of its last data batch (None when it has none) and its epoch."""

    last_data_offset: int | None
    producer_epoch: int


@dataclass
class Kept:
    """What a batch leaves in the cleaned segment: its bytes and Kafka's bookkeeping of them
    (``FilterResult.updateRetainedBatchMetadata``) for the segment's index entries."""

    data: bytes | memoryview
    max_timestamp: int
    shallow_offset_of_max_timestamp: int
    max_offset: int
    records: int


@dataclass
class FilterStats:
    """Counts of one cleaning (Kafka's ``CleanerStats`` and what ``--dry-run`` reports)."""

    batches_read: int = 0
    bytes_read: int = 0
    records_read: int = 0
    records_kept: int = 0
    bytes_kept: int = 0
    batches_rewritten: int = 0
    batches_emptied: int = 0
    records_superseded: int = 0  # an older value of a key
    tombstones_removed: int = 0
    aborted_removed: int = 0  # records of aborted transactions
    markers_removed: int = 0
    horizons_set: int = 0
    keyless_removed: int = 0
    removed_offsets: list[int] = field(default_factory=list)  # kept only when asked

    def add(self, other: FilterStats) -> None:
        for name in self.__dataclass_fields__:
            if name == "removed_offsets":
                self.removed_offsets.extend(other.removed_offsets)
            else:
                setattr(self, name, getattr(self, name) + getattr(other, name))


class _Scratch:
    """Per-record arrays reused across batches (grown to the largest batch seen)."""

    def __init__(self) -> None:
        self.size = 0
        self._grow(1024)

    def _grow(self, n: int) -> None:
        self.size = n
        self.h1 = np.zeros(n, np.uint64)
        self.h2 = np.zeros(n, np.uint64)
        self.delta = np.zeros(n, np.int64)
        self.flags = np.zeros(n, np.int64)
        self.start = np.zeros(n, np.int64)
        self.end = np.zeros(n, np.int64)
        self.found = np.zeros(n, np.int64)

    def ensure(self, n: int) -> None:
        if n > self.size:
            self._grow(max(n, self.size * 2))


class Scanned(NamedTuple):
    """The records of one v2 batch as the compiled walk saw them."""

    area: Any  # numpy uint8 view of the (decompressed) records
    records: int
    offsets: Any
    keyed: Any
    has_value: Any


def scan_batch(batch: RecordBatch, scratch: _Scratch, seed: Any, limits: Limits) -> Scanned:
    """Decompress (bounded) and walk a v2 batch's records; a malformed one is an error naming
    the file and the batch."""
    count = batch.records_count
    raw = batch.records_area(limits)
    area = np.frombuffer(raw, dtype=np.uint8) if len(raw) else np.zeros(0, np.uint8)
    if count < 0 or count * 7 > len(area):
        raise CorruptRecordError(
            f"record count {count} cannot fit in {len(area)} bytes of records",
            path=batch.path,
            position=batch.position + 57,
        )
    scratch.ensure(count)
    s = scratch
    got = K.scan_records(area, len(area), count, seed, s.h1, s.h2, s.delta, s.flags, s.start, s.end)
    if got < 0:
        inner = -got - 1
        where = "decompressed records" if batch.compression is not Compression.NONE else "records"
        raise CorruptRecordError(
            f"malformed record at byte {inner} of the batch's {where}",
            path=batch.path,
            position=batch.position + HEADER_SIZE,
        )
    flags = s.flags[:count]
    return Scanned(
        area,
        count,
        batch.base_offset + s.delta[:count],
        (flags & K.HAS_KEY) != 0,
        (flags & K.HAS_VALUE) != 0,
    )


class BatchFilter:
    """The filter of one cleaning round (one offset map, one clock reading)."""

    def __init__(
        self,
        offset_map: OffsetMap,
        txns: CleanedTransactions,
        *,
        now: int,
        delete_retention_ms: int,
        producers: dict[int, LastRecord],
        upper_bound: int,
        limits: Limits,
        stats: FilterStats,
        record_removed: bool = False,
    ) -> None:
        self.map = offset_map
        self.txns = txns
        self.now = now
        self.delete_retention_ms = delete_retention_ms
        self.producers = producers
        self.upper_bound = upper_bound
        self.limits = limits
        self.stats = stats
        self.record_removed = record_removed
        self.scratch = _Scratch()

    # -- magic 2 ---------------------------------------------------------------------------------
    def _is_producers_last(self, batch: RecordBatch) -> bool:
        last = self.producers.get(batch.producer_id)
        if last is None:
            return False
        if last.last_data_offset is not None:
            return batch.last_offset == last.last_data_offset
        return batch.is_control and batch.producer_epoch == last.producer_epoch

    def filter_v2(self, batch: RecordBatch) -> Kept | None:
        stats = self.stats
        stats.batches_read += 1
        stats.bytes_read += batch.size_in_bytes
        control = batch.is_control
        can_discard = self.txns.on_control_batch(batch) if control else self.txns.on_batch(batch)
        horizon = batch.delete_horizon_ms
        if control:
            discard_records = can_discard and horizon is not None and horizon <= self.now
        else:
            discard_records = can_discard
        if batch.producer_id >= 0 and self._is_producers_last(batch):
            retention = "retain-empty"
        elif batch.next_offset == self.upper_bound:
            retention = "retain-empty"  # the round's last batch keeps the log's last offset
        elif discard_records:
            retention = "delete"
        else:
            retention = "delete-empty"
        marker_for_empty_txn = can_discard and control
        if retention == "delete":
            stats.records_read += max(batch.records_count, 0)
            self._count_removed(batch, control, can_discard)
            return None
        scanned = scan_batch(batch, self.scratch, self.map.seed, self.limits)
        count = scanned.records
        stats.records_read += count
        if discard_records:
            keep = np.zeros(count, np.bool_)
        elif control:
            keep = np.ones(count, np.bool_)
        else:
            keep = self._keep_records(scanned, horizon)
        kept = int(keep.sum())
        if kept:
            tombstones = bool((keep & ~scanned.has_value).any()) if not control else False
            need_horizon = (tombstones or marker_for_empty_txn) and horizon is None
            if kept == count and not need_horizon:
                stats.records_kept += kept
                stats.bytes_kept += batch.size_in_bytes
                return Kept(
                    batch.buffer, batch.max_timestamp, batch.last_offset, batch.last_offset, kept
                )
            if need_horizon:
                horizon = self.now + self.delete_retention_ms
                stats.horizons_set += 1
            if kept < count:
                self._removed_records(scanned, keep, control, can_discard)
            return self._rebuild(batch, scanned, keep, kept, horizon)
        self._removed_records(scanned, keep, control, can_discard)
        if retention == "retain-empty":
            stats.batches_emptied += 1
            stats.bytes_kept += HEADER_SIZE
            return Kept(
                empty_batch(batch), batch.max_timestamp, batch.last_offset, batch.last_offset, 0
            )
        if control:
            stats.markers_removed += 1
        return None

    def _keep_records(self, scanned: Scanned, horizon: int | None) -> Any:
        count = scanned.records
        offsets = scanned.offsets
        past = offsets > self.map.latest_offset
        found = self.scratch.found
        self.map.get_many(self.scratch.h1, self.scratch.h2, scanned.keyed, count, found)
        latest = offsets >= found[:count]
        retain_deletes = horizon is None or self.now < horizon
        value_ok = scanned.has_value if not retain_deletes else np.ones(count, np.bool_)
        return past | (scanned.keyed & latest & value_ok)

    def _count_removed(self, batch: RecordBatch, control: bool, aborted: bool) -> None:
        n = max(batch.records_count, 0)
        if control:
            self.stats.markers_removed += 1
        elif aborted:
            self.stats.aborted_removed += n
        if self.record_removed and not control:
            self.stats.removed_offsets.extend(range(batch.base_offset, batch.last_offset + 1))

    def _removed_records(
        self, scanned: Scanned, keep: Any, control: bool, can_discard: bool
    ) -> None:
        gone = ~keep
        n = int(gone.sum())
        if not n or control:
            return
        stats = self.stats
        if can_discard:
            stats.aborted_removed += n
        else:
            keyless = int((gone & ~scanned.keyed).sum())
            tombstones = int((gone & scanned.keyed & ~scanned.has_value).sum())
            stats.keyless_removed += keyless
            stats.tombstones_removed += tombstones
            stats.records_superseded += n - keyless - tombstones
        if self.record_removed:
            stats.removed_offsets.extend(int(o) for o in scanned.offsets[gone])

    def _rebuild(
        self,
        batch: RecordBatch,
        scanned: Scanned,
        keep: Any,
        kept: int,
        horizon: int | None,
    ) -> Kept:
        """Kafka's ``buildRetainedRecordsInto`` for magic 2."""
        count = scanned.records
        s = self.scratch
        log_append = batch.timestamp_type is TimestampType.LOG_APPEND_TIME
        fixed = batch.max_timestamp if log_append else -1
        out = np.empty(len(scanned.area) + 9 * count + 16, np.uint8)
        written, max_ts, base_ts = K.rebuild_records(
            scanned.area,
            s.start,
            s.end,
            keep,
            count,
            batch.base_timestamp,
            -1 if horizon is None else horizon,
            horizon is None,
            fixed,
            out,
        )
        if written < 0:
            raise CorruptRecordError(
                f"malformed record at byte {-written - 1} of the batch's records",
                path=batch.path,
                position=batch.position + HEADER_SIZE,
            )
        codec = batch.compression
        area = out[:written].tobytes()
        payload: bytes = (
            area if codec is Compression.NONE else codecs.compress(codec, area, magic=2)
        )
        # the builder's attributes: codec, timestamp type, transactional, control (bits 0-5)
        attributes = batch.attributes & 0x3F
        if horizon is not None:
            attributes |= ATTR_DELETE_HORIZON
        max_timestamp = fixed if log_append else int(max_ts)
        data = assemble_batch(
            payload,
            base_offset=batch.base_offset,
            last_offset_delta=batch.last_offset_delta,
            records_count=kept,
            base_timestamp=int(base_ts),
            max_timestamp=max_timestamp,
            attributes=attributes,
            partition_leader_epoch=batch.partition_leader_epoch,
            producer_id=batch.producer_id,
            producer_epoch=batch.producer_epoch,
            base_sequence=batch.base_sequence,
        )
        stats = self.stats
        stats.records_kept += kept
        stats.bytes_kept += len(data)
        stats.batches_rewritten += 1
        max_offset = int(scanned.offsets[keep].max())
        shallow = batch.last_offset if max_timestamp != -1 else -1
        return Kept(data, max_timestamp, shallow, max_offset, kept)

    # -- magic 0 and 1 ---------------------------------------------------------------------------
    def filter_legacy(self, entry: LegacyEntry, retain_deletes: bool) -> Kept | None:
        """A v0/v1 entry (a message, or a compressed wrapper of several)."""
        stats = self.stats
        stats.batches_read += 1
        stats.bytes_read += entry.size_in_bytes
        records = entry.records(self.limits)
        stats.records_read += len(records)
        latest = self.map.latest_offset
        kept: list[Record] = []
        rewrite = False
        inner_magic_ok = True
        if entry.compression is not Compression.NONE:
            inner_magic_ok = all(e.magic == entry.magic for e in entry.inner_entries(self.limits))
        for rec in records:
            if rec.offset > latest:
                keep = True
            elif rec.key is None:
                keep = False
                stats.keyless_removed += 1
            else:
                newest = rec.offset >= self.map.get(rec.key)
                keep = newest and (rec.value is not None or retain_deletes)
                if not keep:
                    if newest:
                        stats.tombstones_removed += 1
                    else:
                        stats.records_superseded += 1
            if keep:
                kept.append(rec)
            else:
                rewrite = True
                if self.record_removed:
                    stats.removed_offsets.append(rec.offset)
        if not kept:
            return None
        stats.records_kept += len(kept)
        if not rewrite and inner_magic_ok:
            stats.bytes_kept += entry.size_in_bytes
            ts = entry.max_timestamp
            return Kept(entry.buffer, ts, entry.last_offset, entry.last_offset, len(kept))
        log_append = entry.timestamp_type is TimestampType.LOG_APPEND_TIME
        data = encode_message_set(
            kept,
            magic=entry.magic,
            base_offset=kept[0].offset,
            compression=entry.compression,
            timestamp_type=TimestampType.LOG_APPEND_TIME
            if log_append
            else TimestampType.CREATE_TIME,
            log_append_time=entry.timestamp if log_append else None,
        )
        stats.bytes_kept += len(data)
        stats.batches_rewritten += 1
        last = kept[-1].offset
        if log_append:
            max_ts = entry.timestamp
        elif entry.magic == 0:
            max_ts = -1
        else:
            max_ts = max(r.timestamp for r in kept)
        return Kept(data, max_ts, last if max_ts != -1 else -1, last, len(kept))


def empty_batch(batch: RecordBatch) -> bytes:
    """Kafka's ``DefaultRecordBatch.writeEmptyHeader``: the batch's offsets, producer fields,
    leader epoch, timestamp type, transactional and control bits and max timestamp, no
    records, no compression, base timestamp -1, no delete horizon."""
    attributes = batch.attributes & 0x38  # timestamp type, transactional, control
    out = bytearray(HEADER_SIZE)
    HEADER.pack_into(
        out,
        0,
        batch.base_offset,
        HEADER_SIZE - LOG_OVERHEAD,
        batch.partition_leader_epoch,
        2,
        0,
        attributes,
        batch.last_offset_delta,
        -1,
        batch.max_timestamp,
        batch.producer_id,
        batch.producer_epoch,
        batch.base_sequence,
        0,
    )
    _CRC.pack_into(out, 17, crc32c(memoryview(out)[21:]))
    return bytes(out)
