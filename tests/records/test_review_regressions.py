"""Regressions found by reviewing the record layer against independent oracles."""

from __future__ import annotations

import pyarrow as pa
from kafka.record.memory_records import MemoryRecords

from kafkalog.records import encode_arrow


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
