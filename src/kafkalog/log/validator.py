"""What a broker checks in a batch before it appends it (Kafka's ``LogValidator`` and the client
checks of ``UnifiedLog.analyzeAndValidateRecords``), for every append that is not a replica's.

Why here, in the log: a batch whose header does not match its records (``lastOffsetDelta`` -1,
999 on one record, a record count of 0 or of 5 with one record) was written as it came, gave two
records one offset or moved the log end by a thousand, and made the partition unreadable for
kafkalog's reader, for Kafka's clients and for ``kafkalog verify``. Every append from a client
(``kafkalog serve``'s Produce, the embedded API, the Spark writer) goes through
:meth:`kafkalog.log.Log.append`, so it is checked there once.

For each batch, as Kafka does (``LogValidator.validateBatch`` / ``validateRecord``):

- from a client: a record count above 0 that matches ``lastOffsetDelta + 1``; no control batch
  (transaction markers come from the coordinator); a producer id with a sequence;
- a known compression codec;
- every record walked (a compressed batch's after a bounded decompression, as Kafka reads its
  stream): the declared count of whole records filling the batch exactly, offset deltas
  ``0..n-1`` in order (Kafka rebuilds a compressed batch with other inner offsets and does not
  look at an uncompressed batch's; kafkalog refuses both, since its readers and Kafka's clients
  take a record's offset from its delta), a key on a compacted topic, a CreateTime timestamp
  within ``message.timestamp.before.max.ms`` / ``after.max.ms`` of now, no LogAppendTime claimed
  by a producer;
- the batch's max timestamp set from its records (Kafka's ``setMaxTimestamp``), and the batch
  re-compressed where the topic's ``compression.type`` differs from the producer's codec.

A refused batch raises :class:`~kafkalog.errors.InvalidRecordError` (or its
:class:`~kafkalog.errors.InvalidTimestampError`) with Kafka's per-record errors and nothing of
the append is written.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import numpy as np

from kafkalog.errors import InvalidRecordError, InvalidTimestampError, RecordError
from kafkalog.records import record_codes as C
from kafkalog.records import record_walk as W
from kafkalog.records.batch import ATTR_TIMESTAMP_TYPE, HEADER_SIZE, RecordBatch
from kafkalog.records.types import Compression, Limits

LONG_MAX = 2**63 - 1


class AppendOrigin(enum.Enum):
    """Who appends (Kafka's ``AppendOrigin``): what a batch is checked for depends on it."""

    #: a producer (Produce, the embedded API, the Spark writer): every check
    CLIENT = "client"
    #: the group or transaction coordinator: may write control batches (transaction markers)
    COORDINATOR = "coordinator"
    #: a follower copying a leader's batches (``assign_offsets=False``): no record checks
    REPLICATION = "replication"


@dataclass(frozen=True)
class Bounds:
    """What an append's records are checked against, read once per append."""

    need_key: bool
    check_ts: bool
    ts_lo: int
    ts_hi: int
    log_append_time: bool

    @classmethod
    def of(cls, config: Any, now: int) -> Bounds:
        """The topic's rules at ``now`` (ms); a config that is not a ``TopicConfig`` (no
        compaction, no timestamp bounds) checks structure only."""
        log_append = getattr(config, "message_timestamp_type", "CreateTime") == "LogAppendTime"
        before = getattr(config, "effective_message_timestamp_before_max_ms", LONG_MAX)
        after = getattr(config, "effective_message_timestamp_after_max_ms", LONG_MAX)
        check = not log_append and (before != LONG_MAX or after != LONG_MAX)
        return cls(
            need_key=bool(getattr(config, "compact", False)),
            check_ts=check,
            ts_lo=max(now - before, -(2**63)),
            ts_hi=min(now + after, LONG_MAX),
            log_append_time=log_append,
        )


@dataclass(frozen=True)
class Validated:
    """What the validation of one batch found: its records' largest timestamp, whether the
    header must be rewritten (a max timestamp other than the records', a producer's
    LogAppendTime flag), and the codec (and level) it must be re-compressed with, if any."""

    max_timestamp: int
    rewrite_header: bool
    recompress: tuple[Compression, int | None] | None


def validate_batch(
    batch: RecordBatch,
    batch_index: int,
    *,
    config: Any,
    origin: AppendOrigin,
    bounds: Bounds,
    limits: Limits,
    where: str,
) -> Validated:
    """Check one batch of an append (see the module's docstring); ``where`` names the partition
    in the messages, as Kafka's name the topic partition."""
    client = origin is AppendOrigin.CLIENT
    count = batch.records_count
    delta = batch.last_offset_delta
    if delta < 0:
        raise InvalidRecordError(
            f"Batch has an invalid offset range: [{batch.base_offset}, {batch.last_offset}] "
            f"(lastOffsetDelta {delta}) in {where}"
        )
    if count <= 0:
        raise InvalidRecordError(f"Invalid reported count for record batch: {count} in {where}")
    if count != delta + 1:
        raise InvalidRecordError(
            f"Inconsistent batch offset range [{batch.base_offset}, {batch.last_offset}] and "
            f"count of records {count} in {where}"
        )
    if client and batch.is_control:
        raise InvalidRecordError(f"Clients are not allowed to write control records in {where}")
    if client and batch.producer_id >= 0 and batch.base_sequence < 0:
        raise InvalidRecordError(
            f"Invalid sequence number {batch.base_sequence} in record batch with producerId "
            f"{batch.producer_id} in {where}"
        )
    codec_id = batch.compression_id
    if codec_id > Compression.ZSTD:
        raise InvalidRecordError(
            f"unknown compression codec id {codec_id} in the batch attributes in {where}"
        )
    source = Compression(codec_id)
    lat_batch = batch.timestamp_type.name == "LOG_APPEND_TIME"
    if lat_batch and (bounds.log_append_time or batch.max_timestamp == -1):
        # Kafka's validateTimestamp: every record of such a batch is in error
        raise _timestamp_errors(
            [
                RecordError(
                    batch_index,
                    i,
                    "Invalid timestamp type in message: producer should not set timestamp type "
                    "to LogAppendTime",
                )
                for i in range(count)
            ]
        )
    buf = batch.records_area(limits) if source is not Compression.NONE else batch.buffer
    start = HEADER_SIZE if source is Compression.NONE else 0
    result = _walk(batch, buf, start, bounds, lat_batch, W.NO_COLLECT)
    code, index, position, bad = result[0], result[1], result[2], result[3]
    if code in (C.ERR_TOO_FEW_BYTES, C.ERR_BATCH_TRAILING):  # the batch's count, not a record
        raise InvalidRecordError(
            f"{C.MESSAGES[code]}: {count} records declared in {len(buf) - start} bytes of "
            f"records in {where}"
        )
    if code != C.OK:
        inside = "the batch" if source is Compression.NONE else "the decompressed records"
        message = f"{C.MESSAGES[code]} at record {index} (byte {position} of {inside})"
        raise InvalidRecordError(
            f"{message} in {where}", record_errors=[RecordError(batch_index, index, message)]
        )
    if bad:
        collect = np.zeros(count, np.int8)
        _walk(batch, buf, start, bounds, lat_batch, collect)
        raise _record_errors(batch, batch_index, collect, bounds, where, limits)
    max_ts = int(result[5])
    target: tuple[Compression, int | None] = (
        config.target_compression(source)
        if hasattr(config, "target_compression")
        else (source, None)
    )
    recompress = None
    if target[0] is not source and not (batch.is_control and source is Compression.NONE):
        recompress = target
    rewrite = not bounds.log_append_time and (lat_batch or max_ts != batch.max_timestamp)
    return Validated(max_ts, rewrite, recompress)


def _walk(
    batch: RecordBatch,
    buf: Any,
    start: int,
    bounds: Bounds,
    lat_batch: bool,
    collect: np.ndarray,
) -> tuple[int, int, int, int, int, int]:
    return W.walk(
        buf,
        start,
        len(buf),
        batch.records_count,
        batch.base_timestamp,
        batch.max_timestamp,
        lat_batch,
        bounds.need_key and not batch.is_control,
        bounds.check_ts,
        bounds.ts_lo,
        bounds.ts_hi,
        collect,
    )


def _record_errors(
    batch: RecordBatch,
    batch_index: int,
    collect: np.ndarray,
    bounds: Bounds,
    where: str,
    limits: Limits,
) -> InvalidRecordError:
    """Kafka's ``processRecordErrors``: every record at fault, one error for the batch."""
    records = None
    errors: list[RecordError] = []
    any_ts = False
    for i in np.flatnonzero(collect).tolist():
        if collect[i] == C.REC_NO_KEY:
            errors.append(
                RecordError(
                    batch_index, i, f"Compacted topic cannot accept message without key in {where}"
                )
            )
            continue
        any_ts = True
        if records is None:  # only on this failure path: the records themselves, for the values
            records = batch.records(limits)
        ts = records[i].timestamp
        errors.append(
            RecordError(
                batch_index,
                i,
                f"Timestamp {ts} of message with offset {i} is out of range. The timestamp should "
                f"be within [{bounds.ts_lo}, {bounds.ts_hi}]",
            )
        )
    if any_ts:
        return _timestamp_errors(errors)
    shown = ", ".join(f"record {e.record_index}: {e.message}" for e in errors[:3])
    return InvalidRecordError(
        f"One or more records have been rejected due to {len(errors)} record errors in total, "
        f"and only showing the first three errors at most: [{shown}]",
        record_errors=errors,
    )


def _timestamp_errors(errors: list[RecordError]) -> InvalidTimestampError:
    return InvalidTimestampError(
        "One or more records have been rejected due to invalid timestamp: "
        + "; ".join(f"record {e.record_index}: {e.message}" for e in errors[:3]),
        record_errors=errors,
    )


def clear_log_append_time(attributes: int) -> int:
    """The attributes of a batch stored as CreateTime (Kafka's ``setMaxTimestamp(CREATE_TIME)``
    on a producer's batch that claimed LogAppendTime on a CreateTime topic)."""
    return attributes & ~ATTR_TIMESTAMP_TYPE
