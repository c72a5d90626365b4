"""Regressions found by reviewing the record layer against independent oracles."""

from __future__ import annotations

import pyarrow as pa
import pytest
from kafka.record.memory_records import MemoryRecords

from kafkalog.errors import CorruptRecordError
from kafkalog.records import LogReader, Record, RecordBatch, decode_arrow, encode_arrow
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
    # CreateTime: the same delta is still refused
    create = bytearray(buf)
    create[ATTRIBUTES_OFFSET + 1] &= ~ATTR_TIMESTAMP_TYPE
    with pytest.raises(CorruptRecordError, match="overflows 64 bits"):
        RecordBatch.parse(bytes(create)).records()
