"""Record batches, magic 2: the object view (decode and encode).

Layout and rules: ``kafka-storage-spec.md`` §8.2-§8.6. The header is parsed eagerly (61 bytes);
records are decoded only when asked, so scanning a segment for offsets and timestamps costs one
``struct`` unpack per batch.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace

from kafkalog.errors import (
    CompressionError,
    CorruptRecordError,
    InvalidRecordError,
    _PositionedError,
)
from kafkalog.records import compression as _compression
from kafkalog.records.crc import crc32c
from kafkalog.records.model import (
    ControlRecord,
    ControlType,
    Header,
    Record,
    control_key,
    end_txn_marker_value,
    parse_control_record,
)
from kafkalog.records.types import DEFAULT_LIMITS, Compression, Limits, TimestampType
from kafkalog.records.varint import read_varint, read_varlong, write_varint, write_varlong

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61, Kafka's RECORD_BATCH_OVERHEAD
LOG_OVERHEAD = 12
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
MIN_RECORD_SIZE = 7  # length, attributes, ts delta, offset delta, key len, value len, header count

ATTR_COMPRESSION_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
NO_PRODUCER_ID = -1
NO_SEQUENCE = -1


def _increment_sequence(sequence: int, delta: int) -> int:
    """Producer sequences wrap past Integer.MAX_VALUE to 0, as Kafka's ``incrementSequence``."""
    if sequence == NO_SEQUENCE:
        return NO_SEQUENCE
    if sequence > 0x7FFFFFFF - delta:
        return delta - (0x7FFFFFFF - sequence) - 1
    return sequence + delta


@dataclass(frozen=True, slots=True)
class RecordBatch:
    """One magic-2 record batch, its header decoded, its body kept as a view of the source."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int
    position: int = 0
    path: str | None = None
    buffer: memoryview = field(default=memoryview(b""), repr=False, compare=False)

    @classmethod
    def parse(
        cls, buf: bytes | memoryview, position: int = 0, path: str | None = None
    ) -> RecordBatch:
        """Read the header of the batch starting at ``position`` of ``buf``.

        The caller (the log reader) has already checked that the whole batch is present.
        """
        view = memoryview(buf)
        if len(view) - position < HEADER_SIZE:
            raise CorruptRecordError(
                f"record batch needs {HEADER_SIZE} header bytes, "
                f"only {len(view) - position} available",
                path=path,
                position=position,
            )
        fields = HEADER.unpack_from(view, position)
        length = fields[1]
        if length < HEADER_SIZE - LOG_OVERHEAD:
            raise CorruptRecordError(
                f"record batch length {length} is smaller than the "
                f"{HEADER_SIZE - LOG_OVERHEAD}-byte minimum",
                path=path,
                position=position + 8,
            )
        size = LOG_OVERHEAD + length
        if position + size > len(view):
            raise CorruptRecordError(
                f"record batch of {size} bytes runs past the end of the data",
                path=path,
                position=position,
            )
        return cls(*fields, position, path, view[position : position + size])  # type: ignore[call-arg]

    # -- derived header values ------------------------------------------------------------
    @property
    def size_in_bytes(self) -> int:
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression_id(self) -> int:
        return self.attributes & ATTR_COMPRESSION_MASK

    @property
    def compression(self) -> Compression:
        try:
            return Compression(self.compression_id)
        except ValueError:
            raise self._error(
                f"unknown compression codec id {self.compression_id}", ATTRIBUTES_OFFSET
            ) from None

    @property
    def timestamp_type(self) -> TimestampType:
        if self.attributes & ATTR_TIMESTAMP_TYPE:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & ATTR_DELETE_HORIZON)

    @property
    def delete_horizon_ms(self) -> int | None:
        return self.base_timestamp if self.has_delete_horizon else None

    @property
    def last_sequence(self) -> int:
        return _increment_sequence(self.base_sequence, self.last_offset_delta)

    # -- validity -------------------------------------------------------------------------
    def compute_crc(self) -> int:
        return crc32c(self.buffer[ATTRIBUTES_OFFSET:])

    def is_valid(self) -> bool:
        return self.compute_crc() == self.crc

    def ensure_valid(self) -> None:
        """Raise :class:`CorruptRecordError` unless the stored CRC matches, as Kafka's check."""
        computed = self.compute_crc()
        if computed != self.crc:
            raise self._error(
                f"record batch CRC mismatch: stored {self.crc}, computed {computed}", CRC_OFFSET
            )

    def _error(self, reason: str, at: int = 0) -> CorruptRecordError:
        return CorruptRecordError(reason, path=self.path, position=self.position + at)

    # -- records --------------------------------------------------------------------------
    def records_area(self, limits: Limits = DEFAULT_LIMITS) -> bytes | memoryview:
        """The records bytes, decompressed when the batch is compressed."""
        body = self.buffer[HEADER_SIZE:]
        codec = self.compression
        if codec is Compression.NONE:
            return body
        try:
            return _compression.decompress_buffer(
                codec, body, magic=2, limit=limits.decompressed_bound(len(body))
            )
        except _PositionedError as e:
            raise CompressionError(
                f"{codec.label} payload: {e.reason}"
                + ("" if e.position is None else f" (at byte {e.position} of the payload)"),
                path=self.path,
                position=self.position + HEADER_SIZE,
            ) from e

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records())

    def records(self, limits: Limits = DEFAULT_LIMITS) -> list[Record]:
        """Decode every record, applying Kafka's reader rules (§8.4)."""
        count = self.records_count
        if count < 0:
            raise self._error(f"negative record count {count}", 57)
        area = self.records_area(limits)
        compressed = self.compression is not Compression.NONE
        # Positions in errors: inside the file for uncompressed batches; for compressed ones the
        # batch start, with the offset inside the decompressed stream in the message.
        base_pos = self.position + HEADER_SIZE
        end = len(area)
        if count * MIN_RECORD_SIZE > end:
            raise self._error(f"record count {count} cannot fit in {end} bytes of records", 57)
        log_append = self.timestamp_type is TimestampType.LOG_APPEND_TIME
        fixed_ts = self.max_timestamp if log_append else None
        out: list[Record] = []
        pos = 0
        try:
            for _ in range(count):
                rec, pos = _decode_record(
                    area,
                    pos,
                    end,
                    self.base_offset,
                    self.base_timestamp,
                    self.base_sequence,
                    fixed_ts,
                )
                out.append(rec)
        except CorruptRecordError as e:
            inner = e.position if e.position is not None else 0
            if compressed:
                raise self._error(
                    f"{e.reason} (at byte {inner} of the decompressed records)", HEADER_SIZE
                ) from e
            raise CorruptRecordError(e.reason, path=self.path, position=base_pos + inner) from e
        if pos != end:
            raise self._error(
                f"incorrect declared batch size: {end - pos} bytes left after {count} records",
                HEADER_SIZE,
            )
        return out

    def control_record(self, limits: Limits = DEFAULT_LIMITS) -> ControlRecord:
        """The control record of a control batch (its first record, as Kafka reads it)."""
        if not self.is_control:
            raise InvalidRecordError("not a control batch")
        recs = self.records(limits)
        if not recs:
            raise self._error("control batch without records")
        try:
            return parse_control_record(recs[0].key, recs[0].value)
        except CorruptRecordError as e:
            raise self._error(e.reason, HEADER_SIZE) from e


def _wrap64(n: int) -> int:
    """``n`` as Java's ``long`` arithmetic leaves it (two's complement wrap to 64 bits)."""
    return ((n - INT64_MIN) & 0xFFFFFFFFFFFFFFFF) + INT64_MIN


def _decode_record(
    area: bytes | memoryview,
    pos: int,
    end: int,
    base_offset: int,
    base_ts: int,
    base_seq: int,
    log_append_time: int | None = None,
) -> tuple[Record, int]:
    """Decode one record at ``pos``; returns it and the position after it.

    With ``log_append_time`` (LogAppendTime batches) the record takes that timestamp and its
    own delta is ignored, as Kafka's ``DefaultRecord.readFrom`` does: a base + delta beyond
    int64 is then not an error (the columnar kernel and both oracles read it the same way).
    """
    start = pos
    length, pos = read_varint(area, pos, end)
    if length < MIN_RECORD_SIZE - 1 or pos + length > end:
        raise CorruptRecordError(f"invalid record length {length}", position=start)
    rec_end = pos + length
    pos += 1  # attributes, unused
    ts_delta, pos = read_varlong(area, pos, rec_end)
    offset_delta, pos = read_varint(area, pos, rec_end)
    key_len, pos = read_varint(area, pos, rec_end)
    key: bytes | None = None
    if key_len >= 0:
        if pos + key_len > rec_end:
            raise CorruptRecordError(f"key length {key_len} runs past the record", position=start)
        key = bytes(area[pos : pos + key_len])
        pos += key_len
    elif key_len != -1:
        raise CorruptRecordError(f"invalid key length {key_len}", position=start)
    value_len, pos = read_varint(area, pos, rec_end)
    value: bytes | None = None
    if value_len >= 0:
        if pos + value_len > rec_end:
            raise CorruptRecordError(
                f"value length {value_len} runs past the record", position=start
            )
        value = bytes(area[pos : pos + value_len])
        pos += value_len
    elif value_len != -1:
        raise CorruptRecordError(f"invalid value length {value_len}", position=start)
    header_count, pos = read_varint(area, pos, rec_end)
    if header_count < 0 or header_count > rec_end - pos:
        raise CorruptRecordError(f"invalid header count {header_count}", position=start)
    headers: list[Header] = []
    for _ in range(header_count):
        hk_len, pos = read_varint(area, pos, rec_end)
        if hk_len < 0 or pos + hk_len > rec_end:
            raise CorruptRecordError(f"invalid header key length {hk_len}", position=start)
        # Java decodes header keys leniently (invalid UTF-8 becomes U+FFFD); so do we.
        hkey = bytes(area[pos : pos + hk_len]).decode("utf-8", "replace")
        pos += hk_len
        hv_len, pos = read_varint(area, pos, rec_end)
        hval: bytes | None = None
        if hv_len >= 0:
            if pos + hv_len > rec_end:
                raise CorruptRecordError(
                    f"header value length {hv_len} runs past the record", position=start
                )
            hval = bytes(area[pos : pos + hv_len])
            pos += hv_len
        elif hv_len != -1:
            raise CorruptRecordError(f"invalid header value length {hv_len}", position=start)
        headers.append(Header(hkey, hval))
    if pos != rec_end:
        raise CorruptRecordError(
            f"record declares {length} bytes but its fields end {rec_end - pos} bytes early",
            position=start,
        )
    # Kafka's DefaultRecord.readFrom: any negative base sequence means "no sequence" per record
    seq = _increment_sequence(base_seq, offset_delta) if base_seq >= 0 else NO_SEQUENCE
    offset = base_offset + offset_delta
    if not INT64_MIN <= offset <= INT64_MAX:
        raise CorruptRecordError("record offset delta overflows 64 bits", position=start)
    # Java's long addition wraps, and its writer wraps the delta the same way: a batch holding
    # timestamps -1 and Long.MAX_VALUE stores the delta Long.MIN_VALUE and reads back exactly.
    timestamp = _wrap64(base_ts + ts_delta) if log_append_time is None else log_append_time
    return Record(offset, timestamp, key, value, tuple(headers), seq), rec_end


# ---------------------------------------------------------------------------------------------
# Encoding


def encode_record(out: bytearray, record: Record, offset_delta: int, base_timestamp: int) -> None:
    """Append one record (length-prefixed) to ``out``."""
    body = bytearray()
    body.append(0)
    # wrapped as Java's ``timestamp - baseTimestamp`` is: unwrapped, write_varlong's 64-bit mask
    # turned the delta 2**63 (timestamps -1 then Long.MAX_VALUE) into 1, read back as -2
    write_varlong(body, _wrap64(record.timestamp - base_timestamp))
    write_varint(body, offset_delta)
    if record.key is None:
        write_varint(body, -1)
    else:
        write_varint(body, len(record.key))
        body += record.key
    if record.value is None:
        write_varint(body, -1)
    else:
        write_varint(body, len(record.value))
        body += record.value
    write_varint(body, len(record.headers))
    for h in record.headers:
        hk = h.key.encode("utf-8")
        write_varint(body, len(hk))
        body += hk
        if h.value is None:
            write_varint(body, -1)
        else:
            write_varint(body, len(h.value))
            body += h.value
    write_varint(out, len(body))
    out += body


def assemble_batch(
    records_area: bytes | bytearray | memoryview,
    *,
    base_offset: int,
    last_offset_delta: int,
    records_count: int,
    base_timestamp: int,
    max_timestamp: int,
    attributes: int,
    partition_leader_epoch: int = -1,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
) -> bytes:
    """Wrap an (already compressed) records area in a batch header and compute its CRC."""
    length = HEADER_SIZE - LOG_OVERHEAD + len(records_area)
    out = bytearray(HEADER_SIZE)
    HEADER.pack_into(
        out,
        0,
        base_offset,
        length,
        partition_leader_epoch,
        2,
        0,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        records_count,
    )
    out += records_area
    crc = crc32c(memoryview(out)[ATTRIBUTES_OFFSET:])
    struct.pack_into(">I", out, CRC_OFFSET, crc)
    return bytes(out)


def _check_int(name: str, value: int, lo: int, hi: int) -> None:
    if not lo <= value <= hi:
        raise InvalidRecordError(f"{name} {value} is outside [{lo}, {hi}]")


def encode_batch(
    records: Sequence[Record],
    *,
    base_offset: int = 0,
    compression: Compression | str | int = Compression.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    log_append_time: int | None = None,
    partition_leader_epoch: int = -1,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    delete_horizon_ms: int | None = None,
    compression_level: int | None = None,
    missing_timestamp: Callable[[], int] | None = None,
) -> bytes:
    """Encode records as one v2 batch, with Kafka's producer-side header rules (§8.5).

    ``baseTimestamp`` is the first record's timestamp (not the minimum); ``maxTimestamp`` the
    largest record timestamp, or ``log_append_time`` for LogAppendTime batches. Records whose
    ``offset`` is -1 take the next offset; explicit offsets (compacted batches) must increase.

    A record timestamp of -1 ("no timestamp") is written as -1, as a client's bytes may carry
    it (a broker stores such a CreateTime record as it came: time lookups and time retention
    do not see it). ``missing_timestamp``, when given, is called once, at the first such
    record, and its result (ms) is written instead for every one of them: how
    :meth:`Log.append_records <kafkalog.log.Log.append_records>` stamps records with the log's
    clock, as a Kafka producer stamps a record sent without a timestamp.
    """
    codec = Compression.parse(compression)
    _check_int("base offset", base_offset, 0, 2**63 - 1)
    if timestamp_type is TimestampType.NO_TIMESTAMP:
        raise InvalidRecordError("v2 batches have CreateTime or LogAppendTime timestamps")
    if timestamp_type is TimestampType.LOG_APPEND_TIME and log_append_time is None:
        raise InvalidRecordError("a LogAppendTime batch needs log_append_time")
    if missing_timestamp is not None and any(r.timestamp == -1 for r in records):
        now = missing_timestamp()
        records = [r if r.timestamp != -1 else replace(r, timestamp=now) for r in records]
    deltas: list[int] = []
    prev = -1
    for i, rec in enumerate(records):
        delta = i if rec.offset < 0 else rec.offset - base_offset
        if delta <= prev:
            raise InvalidRecordError(
                f"record offsets must increase within a batch (record {i} at delta {delta})"
            )
        _check_int("offset delta", delta, 0, 0x7FFFFFFF)
        if not -1 <= rec.timestamp <= INT64_MAX:
            raise InvalidRecordError(
                f"record timestamp {rec.timestamp} is neither -1 nor in [0, {INT64_MAX}]"
            )
        deltas.append(delta)
        prev = delta
    if records:
        base_ts = records[0].timestamp
        max_ts = max(r.timestamp for r in records)
    else:
        base_ts = max_ts = -1
    if delete_horizon_ms is not None:
        base_ts = delete_horizon_ms
    if timestamp_type is TimestampType.LOG_APPEND_TIME:
        assert log_append_time is not None
        max_ts = log_append_time
    area = bytearray()
    for rec, delta in zip(records, deltas, strict=True):
        encode_record(area, rec, delta, base_ts)
    payload = (
        _compression.compress(codec, area, magic=2, level=compression_level)
        if codec is not Compression.NONE
        else area
    )
    attributes = int(codec)
    if timestamp_type is TimestampType.LOG_APPEND_TIME:
        attributes |= ATTR_TIMESTAMP_TYPE
    if is_transactional:
        attributes |= ATTR_TRANSACTIONAL
    if is_control:
        attributes |= ATTR_CONTROL
    if delete_horizon_ms is not None:
        attributes |= ATTR_DELETE_HORIZON
    return assemble_batch(
        payload,
        base_offset=base_offset,
        last_offset_delta=deltas[-1] if deltas else 0,
        records_count=len(records),
        base_timestamp=base_ts,
        max_timestamp=max_ts,
        attributes=attributes,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
    )


def encode_control_batch(
    control_type: ControlType,
    *,
    offset: int,
    timestamp: int,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int = 0,
    partition_leader_epoch: int = -1,
    value: bytes | None = None,
) -> bytes:
    """Write a control batch as Kafka's ``writeEndTransactionalMarker`` does (§8.6).

    For COMMIT/ABORT the value is the end-transaction marker with ``coordinator_epoch``; other
    control types take their ``value`` as given.
    """
    if control_type in (ControlType.ABORT, ControlType.COMMIT):
        value = end_txn_marker_value(coordinator_epoch)
    record = Record(offset, timestamp, control_key(control_type), value)
    return encode_batch(
        [record],
        base_offset=offset,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=control_type in (ControlType.ABORT, ControlType.COMMIT),
        is_control=True,
    )


def batch_at(header: bytes) -> str:
    """The batch whose header starts ``header``, named by its offsets as its header gives
    them ("the batch of offsets 175..179"; a v0/v1 entry by the offset it ends at)."""
    if len(header) < 17:
        return "the entry there"
    offset = int.from_bytes(header[:8], "big", signed=True)
    if header[16] == 2 and len(header) >= 27:
        last = offset + int.from_bytes(header[23:27], "big", signed=True)
        return f"the batch of offsets {offset}..{last}"
    return f"the entry ending at offset {offset}"
