"""Legacy log entries, magic 0 and 1: the object view (decode and encode).

Layout and rules: ``kafka-storage-spec.md`` §8.8. Every legacy log entry is one *message*
behind the common 12-byte log overhead::

    int64 offset | int32 size | uint32 crc | int8 magic | int8 attributes
        | [int64 timestamp, magic 1 only] | int32 keyLength | key | int32 valueLength | value

A compressed message (codec bits != 0) is a *wrapper*: its value is the compressed concatenation
of inner log entries. :class:`LegacyEntry` exposes the same property names as
:class:`kafkalog.records.batch.RecordBatch`, so a log reader can hand either to its callers.

Where Kafka is lenient and this module is strict, or where the spec leaves a choice, the choice
is documented on the function concerned; the summary:

* a message's fields must fill its declared size exactly, and key/value lengths below -1 are
  corrupt (Kafka's ``LegacyRecord`` reads any negative length as null and ignores trailing bytes);
* inside a compressed wrapper every inner message must be complete, CRC-valid and uncompressed,
  and the decompressed data must end exactly after the last inner entry (Kafka's
  ``DataLogInputStream`` silently drops a cut-off trailing inner entry and never checks inner
  CRCs on the read path);
* an inner message whose magic differs from its wrapper's is accepted, exactly as Kafka's reader
  does (``DeepRecordsIterator`` is created with ``ensureMatchingMagic=false`` by
  ``AbstractLegacyRecordBatch.iterator``): the *wrapper's* magic decides how inner offsets are
  read, and the *inner* message's magic whether it has a timestamp.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from kafkalog.errors import (
    CompressionError,
    CorruptRecordError,
    InvalidRecordError,
    _PositionedError,
)
from kafkalog.records import compression as _codecs
from kafkalog.records.crc import crc32
from kafkalog.records.model import Record
from kafkalog.records.types import DEFAULT_LIMITS, Compression, Limits, TimestampType

LOG_OVERHEAD = 12
CRC_OFFSET = 12
MAGIC_OFFSET = 16
ATTRIBUTES_OFFSET = 17
TIMESTAMP_OFFSET = 18
KEY_SIZE_OFFSET_V0 = 18
KEY_SIZE_OFFSET_V1 = 26
RECORD_OVERHEAD_V0 = 14  # crc, magic, attributes, key length, value length
RECORD_OVERHEAD_V1 = 22  # ... plus the timestamp

ATTR_COMPRESSION_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08

NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_SEQUENCE = -1

_OFFSET_SIZE = struct.Struct(">qi")
_UINT32 = struct.Struct(">I")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")

_INT32_MAX = 0x7FFFFFFF
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


def record_overhead(magic: int) -> int:
    """Bytes of a message (without the 12-byte log overhead) besides its key and value."""
    return RECORD_OVERHEAD_V0 if magic == 0 else RECORD_OVERHEAD_V1


@dataclass(frozen=True, slots=True)
class LegacyEntry:
    """One log entry of magic 0 or 1: int64 offset | int32 size | message.

    The message fields are decoded eagerly (a legacy entry is a single message, so there is no
    cheaper "header only" view). ``timestamp`` is -1 for magic 0. ``buffer`` is the whole entry
    including the 12-byte log overhead, a view of the source.

    Entries returned by :meth:`inner_entries` describe messages found inside a compressed wrapper:
    their ``offset`` is already absolute, ``position`` is the byte offset inside the decompressed
    data, and ``wrapper_timestamp_type`` carries the wrapper's timestamp type, which overrides the
    inner message's own for magic 1 (Kafka's ``LegacyRecord(buffer, wrapperTimestamp,
    wrapperTimestampType)``); with LogAppendTime the ``timestamp`` is then the wrapper's.
    """

    offset: int
    message_size: int
    crc: int
    magic: int
    attributes: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    position: int = 0
    path: str | None = None
    buffer: memoryview = field(default=memoryview(b""), repr=False, compare=False)
    wrapper_timestamp_type: TimestampType | None = None

    @classmethod
    def parse(
        cls, buf: bytes | bytearray | memoryview, position: int = 0, path: str | None = None
    ) -> LegacyEntry:
        """Decode the entry starting at ``position`` of ``buf``.

        The log reader has already checked that the whole entry is present, but every length is
        validated again here: the entry must lie inside ``buf``, and the message's fields must
        end exactly at the end of the entry. Errors name ``path`` and the position (in ``buf``)
        of the offending field.
        """
        view = memoryview(buf)
        available = len(view) - position
        if position < 0 or available < LOG_OVERHEAD:
            raise CorruptRecordError(
                f"log entry needs {LOG_OVERHEAD} header bytes, only {max(available, 0)} available",
                path=path,
                position=position,
            )
        offset, size = _OFFSET_SIZE.unpack_from(view, position)
        if size < RECORD_OVERHEAD_V0:
            raise CorruptRecordError(
                f"message size {size} is smaller than the minimum record overhead "
                f"({RECORD_OVERHEAD_V0})",
                path=path,
                position=position + 8,
            )
        if size > available - LOG_OVERHEAD:
            raise CorruptRecordError(
                f"log entry of {LOG_OVERHEAD + size} bytes runs past the end of the data "
                f"({available} bytes available)",
                path=path,
                position=position + 8,
            )
        end = position + LOG_OVERHEAD + size
        (crc,) = _UINT32.unpack_from(view, position + CRC_OFFSET)
        magic = view[position + MAGIC_OFFSET]
        if magic > 1:
            raise CorruptRecordError(
                f"magic {magic} is not a legacy message format (0 or 1)",
                path=path,
                position=position + MAGIC_OFFSET,
            )
        attributes = view[position + ATTRIBUTES_OFFSET]
        pos = position + TIMESTAMP_OFFSET
        timestamp = NO_TIMESTAMP
        if magic == 1:
            if pos + 8 > end:
                raise CorruptRecordError(
                    f"message of {size} bytes ends before its timestamp field",
                    path=path,
                    position=pos,
                )
            (timestamp,) = _INT64.unpack_from(view, pos)
            pos += 8
        key, pos = _read_sized(view, pos, end, "key", path)
        value, pos = _read_sized(view, pos, end, "value", path)
        if pos != end:
            raise CorruptRecordError(
                f"{end - pos} unexpected bytes after the value: the message fields end before "
                f"its declared size {size}",
                path=path,
                position=pos,
            )
        return cls(
            offset,
            size,
            crc,
            magic,
            attributes,
            timestamp,
            key,
            value,
            position=position,
            path=path,
            buffer=view[position:end],
        )

    # -- derived values, named as on RecordBatch --------------------------------------------
    @property
    def size_in_bytes(self) -> int:
        return LOG_OVERHEAD + self.message_size

    @property
    def batch_length(self) -> int:
        """The int32 size field, as ``RecordBatch.batch_length`` (bytes after the overhead)."""
        return self.message_size

    @property
    def last_offset(self) -> int:
        """The entry offset: for a wrapper Kafka stores the offset of its last inner message."""
        return self.offset

    @property
    def next_offset(self) -> int:
        return self.offset + 1

    @property
    def base_offset(self) -> int:
        """The first offset the entry holds: decompresses a wrapper, as Kafka's ``baseOffset()``."""
        if self.compression_id == 0:
            return self.offset
        return self.inner_entries()[0].offset

    @property
    def compression_id(self) -> int:
        return self.attributes & ATTR_COMPRESSION_MASK

    @property
    def compression(self) -> Compression:
        """The codec; zstd parses (the reader rejects it), ids 5-7 are corrupt."""
        try:
            return Compression(self.compression_id)
        except ValueError:
            raise self._error(
                f"unknown compression codec id {self.compression_id}", ATTRIBUTES_OFFSET
            ) from None

    @property
    def is_compressed(self) -> bool:
        return self.compression_id != 0

    @property
    def timestamp_type(self) -> TimestampType:
        """NoTimestampType for magic 0; otherwise attribute bit 3, or the wrapper's type."""
        if self.magic == 0:
            return TimestampType.NO_TIMESTAMP
        if self.wrapper_timestamp_type is not None:
            return self.wrapper_timestamp_type
        if self.attributes & ATTR_TIMESTAMP_TYPE:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def max_timestamp(self) -> int:
        return self.timestamp

    @property
    def is_control(self) -> bool:
        return False

    @property
    def is_transactional(self) -> bool:
        return False

    @property
    def has_delete_horizon(self) -> bool:
        return False

    @property
    def delete_horizon_ms(self) -> int | None:
        return None

    @property
    def producer_id(self) -> int:
        return NO_PRODUCER_ID

    @property
    def producer_epoch(self) -> int:
        return -1

    @property
    def base_sequence(self) -> int:
        return NO_SEQUENCE

    @property
    def last_sequence(self) -> int:
        return NO_SEQUENCE

    @property
    def partition_leader_epoch(self) -> int:
        return -1

    @property
    def records_count(self) -> int:
        """1 for a plain message; a wrapper's inner message count (this decompresses it)."""
        if self.compression_id == 0:
            return 1
        return len(self.inner_entries())

    @property
    def key_size_offset(self) -> int:
        """Offset, inside the entry, of the int32 key length."""
        return KEY_SIZE_OFFSET_V0 if self.magic == 0 else KEY_SIZE_OFFSET_V1

    @property
    def value_size_offset(self) -> int:
        """Offset, inside the entry, of the int32 value length."""
        return self.key_size_offset + 4 + (0 if self.key is None else len(self.key))

    # -- validity -------------------------------------------------------------------------
    def compute_crc(self) -> int:
        """CRC-32 (IEEE) of the message from its magic byte to its end."""
        return crc32(self.buffer[MAGIC_OFFSET:])

    def is_valid(self) -> bool:
        return self.compute_crc() == self.crc

    def ensure_valid(self) -> None:
        """Raise :class:`CorruptRecordError` unless the stored CRC matches, as Kafka's check."""
        computed = self.compute_crc()
        if computed != self.crc:
            raise self._error(
                f"message CRC mismatch: stored {self.crc}, computed {computed}", CRC_OFFSET
            )

    def _error(self, reason: str, at: int = 0) -> CorruptRecordError:
        return CorruptRecordError(reason, path=self.path, position=self.position + at)

    # -- records --------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Record]:
        return iter(self.records())

    def records(self, limits: Limits = DEFAULT_LIMITS) -> list[Record]:
        """The records of this entry, with Kafka's reader rules applied (§8.8).

        A plain message is one record; a wrapper yields its inner messages with absolute offsets
        and (for LogAppendTime wrappers) the wrapper's timestamp. Legacy records have no headers
        and no producer sequence.
        """
        if self.compression is Compression.NONE:
            return [Record(self.offset, self.timestamp, self.key, self.value)]
        return [Record(e.offset, e.timestamp, e.key, e.value) for e in self.inner_entries(limits)]

    def decompressed_value(self, limits: Limits = DEFAULT_LIMITS) -> bytes | memoryview:
        """A wrapper's value, decompressed (bounded by ``limits``): the inner log entries."""
        codec = self.compression
        if codec is Compression.NONE:
            raise InvalidRecordError("not a compressed wrapper message")
        if codec is Compression.ZSTD:
            raise self._error(
                f"zstd compression is not allowed with magic {self.magic} (it needs magic 2)",
                ATTRIBUTES_OFFSET,
            )
        if self.value is None:
            raise self._error("compressed wrapper message has a null value", self.value_size_offset)
        payload_at = self.value_size_offset + 4
        try:
            return _codecs.decompress_buffer(
                codec,
                self.value,
                magic=self.magic,
                limit=limits.decompressed_bound(len(self.value)),
            )
        except _PositionedError as e:
            where = "" if e.position is None else f" (at byte {e.position} of the payload)"
            raise CompressionError(
                f"{codec.label} payload of the wrapper message: {e.reason}{where}",
                path=self.path,
                position=self.position + payload_at,
            ) from e

    def inner_entries(self, limits: Limits = DEFAULT_LIMITS) -> list[LegacyEntry]:
        """The inner messages of a compressed wrapper, as Kafka's deep iteration sees them.

        Offsets are made absolute (v1: ``wrapperOffset - lastInnerRelative + innerRelative``,
        base 0 when the wrapper offset is 0 — old librdkafka producers; v0: stored absolute).
        ``position`` of each returned entry is its byte offset inside the decompressed data.

        Every inner entry must be complete, CRC-valid and uncompressed, the data must end exactly
        after the last one, and there must be at least one. Problems raise
        :class:`CorruptRecordError` at the wrapper's position, the reason naming the byte offset
        inside the decompressed data. A plain (uncompressed) message is its own only entry, so a
        deep iteration can call this on every entry.
        """
        if self.compression is Compression.NONE:
            return [self]
        data = self.decompressed_value(limits)
        try:
            raw = _parse_inner(memoryview(data))
        except CorruptRecordError as e:
            raise self._inner_error(e.reason, e.position) from e
        if not raw:
            raise self._error("compressed wrapper message contains no inner messages")
        wrapper_type = self.timestamp_type
        if self.magic == 1:
            last_relative = raw[-1].offset
            if self.offset == 0:
                base = 0
            elif self.offset < last_relative:
                raise self._error(
                    f"wrapper offset {self.offset} is less than the last inner relative offset "
                    f"{last_relative} and is not zero"
                )
            else:
                base = self.offset - last_relative
        else:
            base = 0
        out: list[LegacyEntry] = []
        append = out.append
        # built field by field rather than with dataclasses.replace, which walks fields() and
        # builds a dict per call: a v0/v1 fixture's deep iteration spent a fifth of its time there
        for inner in raw:
            absolute = base + inner.offset if self.magic == 1 else inner.offset
            if not -(2**63) <= absolute < 2**63:
                raise self._error(f"inner message offset {absolute} does not fit a 64-bit offset")
            ts = inner.timestamp
            wrapper = inner.wrapper_timestamp_type
            if inner.magic == 1:
                wrapper = wrapper_type
                if wrapper_type is TimestampType.LOG_APPEND_TIME:
                    ts = self.timestamp
            append(
                LegacyEntry(
                    absolute,
                    inner.message_size,
                    inner.crc,
                    inner.magic,
                    inner.attributes,
                    ts,
                    inner.key,
                    inner.value,
                    inner.position,
                    inner.path,
                    inner.buffer,
                    wrapper,
                )
            )
        return out

    def _inner_error(self, reason: str, inner_position: int | None) -> CorruptRecordError:
        where = "" if inner_position is None else f" at byte {inner_position}"
        return self._error(
            f"inner message{where} of the decompressed {self.compression.label} data: {reason}"
        )


def _read_sized(
    view: memoryview, pos: int, end: int, what: str, path: str | None
) -> tuple[bytes | None, int]:
    """Read an int32-length-prefixed nullable byte string that must end by ``end``."""
    if pos + 4 > end:
        raise CorruptRecordError(
            f"message ends before its {what} length field", path=path, position=pos
        )
    (length,) = _INT32.unpack_from(view, pos)
    if length == -1:
        return None, pos + 4
    if length < 0:
        raise CorruptRecordError(f"invalid {what} length {length}", path=path, position=pos)
    if length > end - pos - 4:
        raise CorruptRecordError(
            f"{what} length {length} runs past the end of the message ({end - pos - 4} bytes left)",
            path=path,
            position=pos,
        )
    return bytes(view[pos + 4 : pos + 4 + length]), pos + 4 + length


def _parse_inner(data: memoryview) -> list[LegacyEntry]:
    """Split decompressed wrapper data into validated inner entries (positions inside ``data``)."""
    out: list[LegacyEntry] = []
    pos = 0
    end = len(data)
    while pos < end:
        if end - pos < LOG_OVERHEAD:
            raise CorruptRecordError(
                f"{end - pos} trailing bytes, too few for an inner entry header", position=pos
            )
        entry = LegacyEntry.parse(data, pos)
        if entry.compression_id != 0:
            raise CorruptRecordError(
                f"inner message is compressed (codec id {entry.compression_id}); "
                "nested compression is not allowed",
                position=pos + ATTRIBUTES_OFFSET,
            )
        entry.ensure_valid()
        out.append(entry)
        pos += entry.size_in_bytes
    return out


# ---------------------------------------------------------------------------------------------
# Encoding


def _check_int(name: str, value: int, lo: int, hi: int) -> None:
    if not lo <= value <= hi:
        raise InvalidRecordError(f"{name} {value} is outside [{lo}, {hi}]")


def encode_message(
    *,
    magic: int,
    key: bytes | None,
    value: bytes | None,
    timestamp: int = NO_TIMESTAMP,
    attributes: int = 0,
    offset: int = 0,
) -> bytes:
    """One log entry (12-byte overhead included) holding one message, its CRC computed.

    Writes exactly what it is given: ``attributes`` as the raw attribute byte (codec and
    timestamp-type bits), ``timestamp`` only for magic 1 (magic 0 has no timestamp field).
    """
    if magic not in (0, 1):
        raise InvalidRecordError(f"legacy messages have magic 0 or 1, not {magic}")
    _check_int("attributes", attributes, -128, 255)
    _check_int("offset", offset, _INT64_MIN, _INT64_MAX)
    if magic == 1:
        _check_int("timestamp", timestamp, _INT64_MIN, _INT64_MAX)
    key_len = -1 if key is None else len(key)
    value_len = -1 if value is None else len(value)
    size = record_overhead(magic) + max(key_len, 0) + max(value_len, 0)
    _check_int("message size", size, 0, _INT32_MAX)
    out = bytearray(LOG_OVERHEAD + size)
    _OFFSET_SIZE.pack_into(out, 0, offset, size)
    out[MAGIC_OFFSET] = magic
    out[ATTRIBUTES_OFFSET] = attributes & 0xFF
    pos = TIMESTAMP_OFFSET
    if magic == 1:
        _INT64.pack_into(out, pos, timestamp)
        pos += 8
    _INT32.pack_into(out, pos, key_len)
    pos += 4
    if key is not None:
        out[pos : pos + key_len] = key
        pos += key_len
    _INT32.pack_into(out, pos, value_len)
    pos += 4
    if value is not None:
        out[pos : pos + value_len] = value
    _UINT32.pack_into(out, CRC_OFFSET, crc32(memoryview(out)[MAGIC_OFFSET:]))
    return bytes(out)


def encode_message_set(
    records: Sequence[Record],
    *,
    magic: int,
    base_offset: int = 0,
    compression: Compression | str | int = Compression.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    log_append_time: int | None = None,
    compression_level: int | None = None,
) -> bytes:
    """Encode records as magic 0/1 log entries, as Kafka's ``MemoryRecordsBuilder`` writes them.

    Uncompressed: one entry per record. Compressed: a single wrapper whose value is the
    compressed inner entries — v1 inner offsets relative to ``base_offset``, v0 inner offsets
    absolute; the wrapper offset is the last absolute offset; the v1 wrapper timestamp is the
    largest inner timestamp (-1 if none is set) or ``log_append_time``. With LogAppendTime every
    v1 message (inner ones too) carries ``log_append_time`` and the LogAppendTime attribute bit,
    as Kafka's builder does. Records with ``offset`` -1 take ``base_offset + index``; offsets
    must increase. Magic 0 ignores timestamps and the timestamp type. An empty ``records``
    encodes to no bytes (Kafka's builder writes nothing for an empty set). A v1 record
    timestamp of -1 ("no timestamp") is written as -1, as Kafka's builder writes what it is
    given: nothing here stamps a time (a broker does not either, for CreateTime).
    """
    try:
        codec = Compression.parse(compression)
    except ValueError as e:
        raise InvalidRecordError(f"unknown compression {compression!r}: {e}") from None
    if magic not in (0, 1):
        raise InvalidRecordError(f"legacy message sets have magic 0 or 1, not {magic}")
    if codec is Compression.ZSTD:
        raise InvalidRecordError(f"zstd compression requires magic 2, not magic {magic}")
    _check_int("base offset", base_offset, 0, _INT64_MAX)
    log_append = False
    if magic == 1:
        if timestamp_type is TimestampType.NO_TIMESTAMP:
            raise InvalidRecordError("magic 1 messages need CreateTime or LogAppendTime")
        if timestamp_type is TimestampType.LOG_APPEND_TIME:
            if log_append_time is None:
                raise InvalidRecordError("LogAppendTime needs log_append_time")
            _check_int("log append time", log_append_time, -1, _INT64_MAX)
            log_append = True
    if not records:
        return b""

    offsets: list[int] = []
    timestamps: list[int] = []
    prev: int | None = None
    for i, rec in enumerate(records):
        if rec.headers:
            raise InvalidRecordError(
                f"record {i} has headers; magic {magic} messages cannot carry headers"
            )
        off = base_offset + i if rec.offset < 0 else rec.offset
        _check_int("offset", off, 0, _INT64_MAX)
        if prev is not None and off <= prev:
            raise InvalidRecordError(
                f"record offsets must increase (record {i} has offset {off} after {prev})"
            )
        if codec is not Compression.NONE and magic == 1 and off < base_offset:
            raise InvalidRecordError(
                f"record {i} offset {off} is below the base offset {base_offset}"
            )
        prev = off
        offsets.append(off)
        if magic == 1:
            if log_append:
                assert log_append_time is not None
                ts = log_append_time
            else:
                ts = rec.timestamp
                if ts < 0 and ts != NO_TIMESTAMP:
                    raise InvalidRecordError(f"record {i} timestamp {ts} is neither >= 0 nor -1")
            timestamps.append(ts)
        else:
            timestamps.append(NO_TIMESTAMP)

    ts_attr = ATTR_TIMESTAMP_TYPE if log_append else 0
    if codec is Compression.NONE:
        return b"".join(
            encode_message(
                magic=magic,
                key=rec.key,
                value=rec.value,
                timestamp=ts,
                attributes=ts_attr,
                offset=off,
            )
            for rec, off, ts in zip(records, offsets, timestamps, strict=True)
        )

    inner = b"".join(
        encode_message(
            magic=magic,
            key=rec.key,
            value=rec.value,
            timestamp=ts,
            attributes=ts_attr,
            offset=off - base_offset if magic == 1 else off,
        )
        for rec, off, ts in zip(records, offsets, timestamps, strict=True)
    )
    payload = _codecs.compress(codec, inner, magic=magic, level=compression_level)
    if log_append:
        assert log_append_time is not None
        wrapper_ts = log_append_time
    else:
        wrapper_ts = max([NO_TIMESTAMP, *timestamps])
    return encode_message(
        magic=magic,
        key=None,
        value=payload,
        timestamp=wrapper_ts,
        attributes=int(codec) | ts_attr,
        offset=offsets[-1],
    )
