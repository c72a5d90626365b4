"""Unit tests of the v2 format primitives: varints, header fields, encoder rules, reader tails."""

from __future__ import annotations

import struct

import pytest

from kafkalog.errors import (
    BatchTooLargeError,
    CorruptRecordError,
    IncompleteTailError,
    InvalidRecordError,
)
from kafkalog.records import (
    Compression,
    ControlType,
    Header,
    Limits,
    LogReader,
    Record,
    RecordBatch,
    TimestampType,
    decode_range,
    encode_batch,
    encode_control_batch,
)
from kafkalog.records.batch import _increment_sequence
from kafkalog.records.crc import crc32c
from kafkalog.records.varint import read_varint, read_varlong, write_varint, write_varlong

# ByteUtilsTest vectors (spec §8.1)
VARINTS = [
    (0, "00"),
    (-1, "01"),
    (1, "02"),
    (63, "7e"),
    (-64, "7f"),
    (64, "8001"),
    (-65, "8101"),
    (8191, "fe7f"),
    (8192, "808001"),
    (2147483647, "feffffff0f"),
    (-2147483648, "ffffffff0f"),
]


@pytest.mark.parametrize(("value", "hexed"), VARINTS)
def test_varint_vectors(value: int, hexed: str) -> None:
    out = bytearray()
    write_varint(out, value)
    assert out.hex() == hexed
    assert read_varint(bytes(out), 0, len(out)) == (value, len(out))


def test_varlong_vector_and_extremes() -> None:
    out = bytearray()
    write_varlong(out, 17179869184)
    assert out.hex() == "808080808001"
    for v in (0, -1, 2**63 - 1, -(2**63), 1700000000000, -1700000000000):
        buf = bytearray()
        write_varlong(buf, v)
        assert read_varlong(bytes(buf), 0, len(buf)) == (v, len(buf))


def test_varint_rejects_overlong_and_truncated() -> None:
    with pytest.raises(CorruptRecordError, match="longer than 5"):
        read_varint(bytes.fromhex("ffffffff8f01"), 0, 6)
    with pytest.raises(CorruptRecordError, match="past the end"):
        read_varint(bytes.fromhex("ff"), 0, 1)
    with pytest.raises(CorruptRecordError, match="longer than 10"):
        read_varlong(b"\xff" * 11, 0, 11)
    # excess high bits of a 5th byte are dropped, as Java's reader does
    assert read_varint(bytes.fromhex("feffffff7f"), 0, 5)[0] == 2147483647


def test_crc32c_vector() -> None:
    assert crc32c(b"Some String") == 608512271


def test_sequence_wraps_like_kafka() -> None:
    assert _increment_sequence(2147483647, 1) == 0
    assert _increment_sequence(-1, 5) == -1
    batch = RecordBatch.parse(
        encode_batch(
            [Record.of(b"a"), Record.of(b"b")],
            producer_id=1,
            producer_epoch=0,
            base_sequence=2147483647,
        )
    )
    assert [r.sequence for r in batch.records()] == [2147483647, 0]
    assert batch.last_sequence == 0


@pytest.mark.parametrize("codec", list(Compression))
def test_encode_decode_every_field(codec: Compression) -> None:
    records = [
        Record.of(b"v1", b"k1", 1000, [("h", b"x"), ("n", None)]),
        Record.of(None, None, 900),
        Record.of(b"", b"", 1500),
    ]
    data = encode_batch(
        records,
        base_offset=42,
        compression=codec,
        partition_leader_epoch=3,
        producer_id=77,
        producer_epoch=2,
        base_sequence=10,
        is_transactional=True,
    )
    batch = RecordBatch.parse(data)
    batch.ensure_valid()
    assert (batch.base_offset, batch.last_offset, batch.records_count) == (42, 44, 3)
    assert (batch.base_timestamp, batch.max_timestamp) == (1000, 1500)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (77, 2, 10)
    assert batch.partition_leader_epoch == 3 and batch.is_transactional
    assert batch.compression is codec and not batch.is_control
    out = batch.records()
    assert [(r.offset, r.timestamp, r.key, r.value, r.sequence) for r in out] == [
        (42, 1000, b"k1", b"v1", 10),
        (43, 900, None, None, 11),
        (44, 1500, b"", b"", 12),
    ]
    assert out[0].headers == (Header("h", b"x"), Header("n", None))


def test_leader_epoch_is_outside_the_crc() -> None:
    data = bytearray(encode_batch([Record.of(b"v")], partition_leader_epoch=1))
    struct.pack_into(">i", data, 12, 99)
    struct.pack_into(">q", data, 0, 1234)
    batch = RecordBatch.parse(bytes(data))
    batch.ensure_valid()
    assert (batch.partition_leader_epoch, batch.base_offset) == (99, 1234)


def test_log_append_time_and_delete_horizon() -> None:
    data = encode_batch(
        [Record.of(b"a", timestamp=5), Record.of(b"b", timestamp=7)],
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        log_append_time=999,
    )
    batch = RecordBatch.parse(data)
    assert batch.attributes == 0x08 and batch.max_timestamp == 999
    assert [r.timestamp for r in batch.records()] == [999, 999]
    horizon = RecordBatch.parse(encode_batch([Record.of(b"a", timestamp=5)], delete_horizon_ms=77))
    assert horizon.has_delete_horizon and horizon.delete_horizon_ms == 77
    # record deltas are relative to the horizon (MemoryRecordsBuilder), so timestamps survive
    assert horizon.base_timestamp == 77 and horizon.records()[0].timestamp == 5


def test_compacted_offsets_and_empty_batch() -> None:
    data = encode_batch([Record.of(b"a", offset=10), Record.of(b"b", offset=13)], base_offset=10)
    batch = RecordBatch.parse(data)
    assert [r.offset for r in batch.records()] == [10, 13] and batch.last_offset_delta == 3
    empty = RecordBatch.parse(encode_batch([], base_offset=5))
    assert empty.records() == [] and empty.base_timestamp == -1


@pytest.mark.parametrize(
    ("records", "kwargs", "match"),
    [
        ([Record.of(b"a", offset=3), Record.of(b"b", offset=3)], {"base_offset": 0}, "increase"),
        ([Record.of(b"a", timestamp=-5)], {}, "timestamp"),
        ([Record.of(b"a")], {"timestamp_type": TimestampType.LOG_APPEND_TIME}, "log_append_time"),
        ([Record.of(b"a")], {"compression": "brotli"}, "unknown compression"),
    ],
)
def test_encoder_rejects_bad_input(records: list[Record], kwargs: dict, match: str) -> None:
    with pytest.raises((InvalidRecordError, ValueError), match=match):
        encode_batch(records, **kwargs)


def test_control_batches() -> None:
    data = encode_control_batch(
        ControlType.ABORT,
        offset=5,
        timestamp=1,
        producer_id=9,
        producer_epoch=1,
        coordinator_epoch=4,
    )
    batch = RecordBatch.parse(data)
    assert len(data) == 78 and batch.attributes == 0x30
    marker = batch.control_record()
    assert (marker.type, marker.coordinator_epoch, marker.is_transaction_marker) == (
        ControlType.ABORT,
        4,
        True,
    )
    # the columnar path skips control records unless asked
    assert decode_range(data).batch.num_rows == 0
    assert decode_range(data, control_records="include").batch.num_rows == 1


def _two_batches() -> bytes:
    return encode_batch([Record.of(b"a" * 50)]) + encode_batch(
        [Record.of(b"b" * 50)], base_offset=1
    )


def test_reader_reports_an_incomplete_tail() -> None:
    data = _two_batches()
    first = RecordBatch.parse(data).size_in_bytes
    for cut in (first + 5, first + 20, len(data) - 1):
        reader = LogReader(data[:cut], path="seg.log")
        assert [e.base_offset for e in reader] == [0]
        assert reader.incomplete_tail is not None
        assert reader.incomplete_tail.position == first
        assert reader.incomplete_tail.available == cut - first
        with pytest.raises(IncompleteTailError, match=f"seg.log at byte {first}"):
            list(LogReader(data[:cut], path="seg.log", strict_tail=True))
        result = decode_range(data[:cut])
        assert result.batch.num_rows == 1 and result.incomplete_tail == reader.incomplete_tail
        assert result.next_position == first


def test_reader_errors_name_file_and_position() -> None:
    data = bytearray(_two_batches())
    first = RecordBatch.parse(bytes(data)).size_in_bytes
    bad = bytearray(data)
    bad[first + 70] ^= 0xFF  # inside the second batch's records: CRC mismatch
    with pytest.raises(CorruptRecordError, match=rf"seg.log at byte {first + 17}: .*CRC"):
        list(LogReader(bytes(bad), path="seg.log", verify_crc=True))
    with pytest.raises(CorruptRecordError, match=rf"seg.log at byte {first + 17}: .*CRC"):
        decode_range(bytes(bad), path="seg.log")
    small = bytearray(data)
    struct.pack_into(">i", small, first + 8, 3)
    with pytest.raises(CorruptRecordError, match=rf"at byte {first + 8}: record size 3"):
        list(LogReader(bytes(small)))
    huge = bytearray(data)
    struct.pack_into(">i", huge, first + 8, 2**31 - 1)
    with pytest.raises(BatchTooLargeError, match="maximum batch size"):
        list(LogReader(bytes(huge)))
    with pytest.raises(BatchTooLargeError):
        decode_range(bytes(huge))
    assert len(list(LogReader(bytes(data), limits=Limits(max_batch_bytes=10**6)))) == 2


def test_unknown_codec_and_record_count_checks() -> None:
    data = bytearray(encode_batch([Record.of(b"abc")]))
    data[22] = (data[22] & 0xF8) | 6
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    batch = RecordBatch.parse(bytes(data))
    with pytest.raises(CorruptRecordError, match="at byte 21: unknown compression codec id 6"):
        batch.records()
    with pytest.raises(CorruptRecordError, match="codec id 6"):
        decode_range(bytes(data))
    data = bytearray(encode_batch([Record.of(b"abc")]))
    struct.pack_into(">i", data, 57, 2**31 - 1)
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    with pytest.raises(CorruptRecordError, match="cannot fit"):
        RecordBatch.parse(bytes(data)).records()
    with pytest.raises(CorruptRecordError, match="cannot fit"):
        decode_range(bytes(data))
