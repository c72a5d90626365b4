"""Regressions found by reviewing the record layer against independent oracles."""

from __future__ import annotations

import struct

import pyarrow as pa
import pytest
from kafka.record.memory_records import MemoryRecords

from kafkalog.errors import InvalidRecordError
from kafkalog.records import (
    LogReader,
    Record,
    RecordBatch,
    decode_arrow,
    encode_arrow,
    encode_batch,
)
from kafkalog.records.batch import (
    ATTR_TIMESTAMP_TYPE,
    ATTRIBUTES_OFFSET,
    assemble_batch,
    encode_record,
)


def test_encode_arrow_nanosecond_and_microsecond_timestamps_are_exact() -> None:
    """pandas' default ``timestamp[ns]`` column used to raise ArrowInvalid (float64 cast)."""
    ns = [1_700_000_000_123_000_000, 1_700_000_000_123_999_999, None]
    us = [1_700_000_000_456_000, 2**62, None]
    for unit, raw, want in (
        ("ns", ns, [1_700_000_000_123, 1_700_000_000_123, 5]),
        ("us", us, [1_700_000_000_456, 2**62 // 1000, 5]),
    ):
        table = pa.table(
            {
                "value": pa.array([b"a", b"b", b"c"]),
                "timestamp": pa.array(raw, pa.timestamp(unit)),
            }
        )
        enc = encode_arrow(table, default_timestamp=5)
        batch = MemoryRecords(bytes(enc.data)).next_batch()
        assert [r.timestamp for r in batch] == want


def test_log_append_time_batch_ignores_overflowing_record_timestamp_delta() -> None:
    """The object API raised "overflows 64 bits" for a LogAppendTime batch whose base + delta
    leaves int64; Kafka (DefaultRecord.readFrom), kafka-python and decode_arrow all take the
    batch's maxTimestamp and never look at the delta."""
    area = bytearray()
    encode_record(area, Record(-1, 2**63 - 1, b"k", b"v"), 0, 0)
    buf = assemble_batch(
        area,
        base_offset=3,
        last_offset_delta=0,
        records_count=1,
        base_timestamp=1,
        max_timestamp=5,
        attributes=ATTR_TIMESTAMP_TYPE,
    )
    oracle = [r.timestamp for r in MemoryRecords(buf).next_batch()]
    ours = [r.timestamp for e in LogReader(buf) for r in e.records()]
    arrow = decode_arrow(buf).column("timestamp").cast(pa.int64()).to_pylist()
    assert oracle == ours == arrow == [5]
    # CreateTime: the sum wraps as Java's long addition does, in both APIs
    create = bytearray(buf)
    create[ATTRIBUTES_OFFSET + 1] &= ~ATTR_TIMESTAMP_TYPE
    wrapped = [-(2**63)]
    assert [r.timestamp for r in RecordBatch.parse(bytes(create)).records()] == wrapped
    assert (
        decode_arrow(bytes(create), verify_crc=False)
        .column("timestamp")
        .cast(pa.int64())
        .to_pylist()
        == wrapped
    )


# What Java's MemoryRecordsBuilder writes for timestamps [-1, Long.MAX_VALUE]: the delta
# Long.MAX_VALUE - (-1) wraps to Long.MIN_VALUE, zig-zag 0xffffffffffffffff, a 10-byte varlong.
JAVA_MIN_DELTA = b"\xff" * 9 + b"\x01"


@pytest.mark.parametrize("writer", ["encode_batch", "encode_arrow"])
def test_timestamp_delta_beyond_int64_wraps_like_java(writer: str) -> None:
    """encode_batch wrote the delta 2**63 masked to 1 (read back as -2: silent corruption) and
    both decoders refused Java's wrapped delta; now the bytes are Java's and read back exactly."""
    stamps = [-1, 2**63 - 1]
    if writer == "encode_batch":
        buf = encode_batch([Record.of(b"a", timestamp=t) for t in stamps])
    else:
        table = pa.table({"value": [b"a", b"a"], "timestamp": pa.array(stamps, pa.int64())})
        buf = bytes(encode_arrow(table).data)
    assert JAVA_MIN_DELTA in buf
    assert [r.timestamp for r in RecordBatch.parse(buf).records()] == stamps
    assert decode_arrow(buf).column("timestamp").cast(pa.int64()).to_pylist() == stamps
    assert RecordBatch.parse(buf).is_valid()


def test_negative_base_sequence_gives_records_no_sequence() -> None:
    """Kafka's DefaultRecord.readFrom: ``baseSequence >= 0 ? incrementSequence(...) :
    NO_SEQUENCE``; a base sequence of -5 made records -5, -4 instead of -1, -1."""
    buf = bytearray(
        encode_batch([Record.of(b"a"), Record.of(b"b")], producer_id=1, producer_epoch=0)
    )
    struct.pack_into(">i", buf, 53, -5)
    batch = RecordBatch.parse(bytes(buf))
    assert [r.sequence for r in batch.records()] == [-1, -1]
    assert batch.last_sequence == -4  # DefaultRecordBatch.lastSequence only special-cases -1


@pytest.mark.parametrize("timestamp", [2**63, -2, -(2**63) - 1])
def test_record_timestamps_outside_int64_are_refused_by_name(timestamp: int) -> None:
    """A caller's timestamp past int64 used to escape as a bare struct.error."""
    with pytest.raises(InvalidRecordError, match=f"record timestamp {timestamp} is neither -1"):
        encode_batch([Record.of(b"x", timestamp=timestamp)])
