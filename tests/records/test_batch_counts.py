"""``encode_arrow`` with batch boundaries chosen by the caller, and the compiled CRC-32C it
stamps small batches with: the embedded log's buffered appends rely on both.

The oracles: ``encode_small_batch`` (itself checked against ``encode_batch`` and kafka-python)
for the bytes of each batch, and the ``crc32c`` package's C function for the CRC."""

from __future__ import annotations

import os

import crc32c
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalog.errors import InvalidRecordError
from kafkalog.records import LogReader, Record, encode_arrow
from kafkalog.records import _kernels as K
from kafkalog.records.columnar import HEADERS_TYPE
from kafkalog.records.small_batch import encode_small_batch, encoded_size

T0 = 1_700_000_000_000

record = st.builds(
    lambda key, value, dt, headers: Record.of(value, key=key, timestamp=T0 + dt, headers=headers),
    st.one_of(st.none(), st.binary(max_size=70)),
    st.one_of(st.none(), st.binary(max_size=9000)),
    st.integers(-3000, 3000),
    st.lists(
        st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=8))), max_size=2
    ),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(record, min_size=1, max_size=4), min_size=1, max_size=8))
def test_given_boundaries_give_the_small_batch_encoders_bytes(calls: list[list[Record]]) -> None:
    rows = [r for call in calls for r in call]
    table = pa.table(
        {
            "key": pa.array([r.key for r in rows], pa.binary()),
            "value": pa.array([r.value for r in rows], pa.binary()),
            "timestamp": pa.array([r.timestamp for r in rows], pa.int64()),
            "headers": pa.array(
                [[(h.key, h.value) for h in r.headers] for r in rows], HEADERS_TYPE
            ),
        }
    )
    counts = np.array([len(c) for c in calls], np.int64)
    enc = encode_arrow(table, base_offset=40, batch_record_counts=counts)
    expected = []
    offset = 40
    for call in calls:
        one = encode_small_batch(call, base_offset=offset)
        assert one is not None and len(one) == encoded_size(call)
        expected.append(one)
        offset += len(call)
    assert bytes(enc.data) == b"".join(expected)
    assert enc.batch_count == len(calls)
    assert list(enc.sizes) == [len(b) for b in expected]
    for batch in LogReader(bytes(enc.data)):
        batch.ensure_valid()  # every CRC, compiled or C, checks


def test_counts_must_cover_the_rows() -> None:
    table = pa.table({"value": pa.array([b"a", b"b", b"c"])})
    for bad in ([1, 1], [2, 2], [3, 0], [-1, 4]):
        with pytest.raises(InvalidRecordError, match="batch_record_counts"):
            encode_arrow(table, batch_record_counts=np.array(bad))


@pytest.mark.parametrize("length", [0, 1, 7, 8, 9, 63, 64, 511, 512, 513, 4096, 70_001])
def test_compiled_crc32c_is_the_c_one(length: int) -> None:
    buf = np.frombuffer(os.urandom(length + 11), np.uint8)
    assert int(K.crc32c_of(buf, 5, 5 + length)) == crc32c.crc32c(buf[5 : 5 + length].tobytes())


def test_small_and_large_batches_each_get_their_crc() -> None:
    """Batches either side of the compiled CRC's size limit in one encode."""
    values = [b"x" * n for n in (10, 440, 460, 2000, 5, 100_000)]
    enc = encode_arrow(
        pa.table({"value": pa.array(values), "timestamp": pa.array([T0] * 6, pa.int64())}),
        batch_record_counts=np.ones(6, np.int64),
    )
    assert min(enc.sizes) < 512 < max(enc.sizes)
    batches = list(LogReader(bytes(enc.data)))
    assert len(batches) == 6
    for batch in batches:
        batch.ensure_valid()
