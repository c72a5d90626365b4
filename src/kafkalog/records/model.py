"""Plain objects for records and control markers, used by the object API, tools and tests.

The hot path (``columnar``) never builds these; they exist so a person or a test can look at one
record at a time and compare it with what other codecs produce.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from kafkalog.errors import CorruptRecordError, InvalidRecordError


@dataclass(frozen=True, slots=True)
class Header:
    """A record header: the key is a UTF-8 string in Kafka's format, the value nullable bytes."""

    key: str
    value: bytes | None


@dataclass(frozen=True, slots=True)
class Record:
    """One record as a reader sees it.

    ``offset`` and ``timestamp`` are absolute (the batch's base values already applied). When a
    ``Record`` is handed to an encoder, ``offset=-1`` means "the next offset of the batch".
    ``sequence`` is the producer sequence (-1 when the batch has none).
    """

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    sequence: int = -1

    @classmethod
    def of(
        cls,
        value: bytes | None,
        key: bytes | None = None,
        timestamp: int = -1,
        headers: tuple[Header, ...] | list[tuple[str, bytes | None]] = (),
        offset: int = -1,
    ) -> Record:
        """Build a record to encode, accepting headers as plain ``(key, value)`` pairs.

        Without ``timestamp`` the record has none (-1, Kafka's "no timestamp"), and the
        byte-level encoders (``encode_batch``, ``encode_message_set``) write it so, as a
        client's bytes would carry it. :meth:`Log.append_records
        <kafkalog.log.Log.append_records>` stamps such a record with the log's clock when it
        appends it (a Kafka producer stamps a record sent without one with the current time).

        A record without headers is made by setting its slots directly (the frozen
        dataclass's ``__init__`` costs ~2 us, more than encoding the record: an embedded log
        appending one record at a time makes one of these per append)."""
        if headers or cls is not Record:
            hdrs = tuple(h if isinstance(h, Header) else Header(h[0], h[1]) for h in headers)
            return cls(offset=offset, timestamp=timestamp, key=key, value=value, headers=hdrs)
        rec = _new_object(Record)
        _set_offset(rec, offset)
        _set_timestamp(rec, timestamp)
        _set_key(rec, key)
        _set_value(rec, value)
        _set_headers(rec, ())
        _set_sequence(rec, -1)
        return rec


def records_mistake(records: object) -> str | None:
    """What is wrong with what was handed to an append as its records, in the caller's terms,
    or None when nothing is. Called only after an append failed (a check per append would cost
    the hot path): ``append_records([Record.of("hi")])`` failed with "can't concat str to
    bytes" from deep in the encoder, ``append_records([b"hi"])`` with an AttributeError."""
    if isinstance(records, (Record, bytes, bytearray, str)) or not hasattr(records, "__iter__"):
        return (
            f"append_records takes a list of Records, not a {type(records).__name__}: "
            "log.append_records([Record.of(b'value', key=b'key')])"
        )
    for i, rec in enumerate(records):
        if not isinstance(rec, Record):
            return (
                f"records[{i}] is a {type(rec).__name__}, not a Record: build it with "
                "Record.of(b'value', key=b'key', timestamp=ms)"
            )
        for name in ("key", "value"):
            field = getattr(rec, name)
            if field is not None and not isinstance(field, (bytes, bytearray, memoryview)):
                hint = f" ({field[:20]!r}.encode())" if isinstance(field, str) else ""
                return f"records[{i}].{name} is a {type(field).__name__}: bytes or None{hint}"
        for header in rec.headers:
            if not isinstance(header, Header) or not isinstance(header.key, str):
                return f"records[{i}] has a header {header!r}: (str key, bytes or None value)"
            if header.value is not None and not isinstance(header.value, (bytes, bytearray)):
                return f"records[{i}] header {header.key!r} has a {type(header.value).__name__}"
        if isinstance(rec.timestamp, bool) or not isinstance(rec.timestamp, int):
            return f"records[{i}].timestamp is a {type(rec.timestamp).__name__}: epoch ms, an int"
    return None


# the slot descriptors of Record (the descriptor protocol of ``__slots__``): Record.of sets a
# new record's fields through them, as the frozen dataclass's own __init__ does through
# object.__setattr__, at a quarter of the cost
_new_object = object.__new__
_set_offset = Record.__dict__["offset"].__set__
_set_timestamp = Record.__dict__["timestamp"].__set__
_set_key = Record.__dict__["key"].__set__
_set_value = Record.__dict__["value"].__set__
_set_headers = Record.__dict__["headers"].__set__
_set_sequence = Record.__dict__["sequence"].__set__


class ControlType(enum.IntEnum):
    """Control record types (the ``type`` half of a control record key)."""

    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6
    UNKNOWN = -1


_CONTROL_KEY = struct.Struct(">hh")
_END_TXN_VALUE = struct.Struct(">hi")


@dataclass(frozen=True, slots=True)
class ControlRecord:
    """A decoded control record key, plus the end-transaction marker fields where it is one."""

    type: ControlType
    version: int
    type_id: int
    coordinator_epoch: int | None = None
    marker_version: int | None = None

    @property
    def is_transaction_marker(self) -> bool:
        return self.type in (ControlType.ABORT, ControlType.COMMIT)


def parse_control_record(key: bytes | None, value: bytes | None) -> ControlRecord:
    """Decode a control record as Kafka does: unknown types are kept as UNKNOWN, not errors."""
    if key is None or len(key) < 4:
        raise CorruptRecordError("control record key shorter than 4 bytes")
    version, type_id = _CONTROL_KEY.unpack_from(key, 0)
    if version < 0:
        raise CorruptRecordError(f"control record key has negative version {version}")
    try:
        ctype = ControlType(type_id)
    except ValueError:
        ctype = ControlType.UNKNOWN
    if ctype in (ControlType.ABORT, ControlType.COMMIT):
        if value is None or len(value) < 6:
            raise CorruptRecordError("end transaction marker value shorter than 6 bytes")
        mversion, coordinator_epoch = _END_TXN_VALUE.unpack_from(value, 0)
        return ControlRecord(ctype, version, type_id, coordinator_epoch, mversion)
    return ControlRecord(ctype, version, type_id)


def control_key(ctype: ControlType, version: int = 0) -> bytes:
    if ctype is ControlType.UNKNOWN:
        raise InvalidRecordError("cannot write a control record of UNKNOWN type")
    return _CONTROL_KEY.pack(version, int(ctype))


def end_txn_marker_value(coordinator_epoch: int, version: int = 0) -> bytes:
    return _END_TXN_VALUE.pack(version, coordinator_epoch)
