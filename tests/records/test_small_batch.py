"""The small-batch encoder (``records/small_batch.py``) against the general one and kafka-python.

Its output must be :func:`encode_batch`'s byte for byte, for every record shape (null and empty
keys and values, headers, lengths on both sides of the varint table, timestamps -1, 0, far
apart and wrapping), and a batch it writes must decode in kafka-python (an independent codec)
with a valid CRC and the same records.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalog.records import Compression, Header, Record, encode_batch
from kafkalog.records.small_batch import encode_rows, encode_small_batch

INT64_MAX = 2**63 - 1
_bytes = st.one_of(
    st.none(),
    st.binary(max_size=40),
    st.integers(8180, 8200).map(lambda n: b"k" * n),  # the edge of the varint table
    st.integers(16370, 16400).map(lambda n: b"v" * n),
)
_timestamps = st.one_of(
    st.just(-1),
    st.just(0),
    st.just(INT64_MAX),
    st.integers(1_700_000_000_000 - 10_000, 1_700_000_000_000 + 10_000),
    st.integers(0, INT64_MAX),
)
_headers = st.lists(
    st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=10))), max_size=3
)
_records = st.builds(
    lambda v, k, ts, h: Record.of(v, key=k, timestamp=ts, headers=h),
    _bytes,
    _bytes,
    _timestamps,
    _headers,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_records, min_size=1, max_size=12), st.sampled_from([0, 7, 2**40]))
def test_small_batch_is_encode_batch_byte_for_byte(records: list[Record], base: int) -> None:
    assert encode_small_batch(records, base) == encode_batch(records, base_offset=base)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(_records, min_size=1, max_size=12),
    st.sampled_from([0, 1_700_000_000_123, INT64_MAX]),
)
def test_a_missing_timestamp_is_stamped_the_same_by_both_encoders(
    records: list[Record], now: int
) -> None:
    """With ``missing_timestamp`` (an embedded log's append), every -1 is written as its one
    result, by both encoders alike; a batch without -1 never calls it."""
    asked: list[int] = []

    def stamp() -> int:
        asked.append(now)
        return now

    small = encode_small_batch(records, 0, stamp)
    missing = sum(r.timestamp == -1 for r in records)
    assert len(asked) == (1 if missing else 0)
    assert small == encode_batch(records, missing_timestamp=stamp)
    assert small == encode_batch(
        [
            Record.of(r.value, r.key, now if r.timestamp == -1 else r.timestamp, r.headers)
            for r in records
        ]
    )
    from kafkalog.records import LogReader

    (batch,) = LogReader(small)
    got = [r.timestamp for r in batch.records()]
    assert got == [now if r.timestamp == -1 else r.timestamp for r in records]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(_records.filter(lambda r: r.timestamp >= 0), min_size=1, max_size=12),
    st.sampled_from(list(Compression)),
)
def test_rows_are_encode_batch_byte_for_byte(records: list[Record], codec: Compression) -> None:
    rows = [(r.key, r.value, r.timestamp, r.headers) for r in records]
    ours = encode_rows(rows, compression=codec)
    if codec is Compression.NONE or codec is Compression.ZSTD or codec is Compression.LZ4:
        assert ours == encode_batch(records, compression=codec)
    # every codec: the records read back the same (gzip/snappy framing may differ by library)
    from kafkalog.records import LogReader

    (batch,) = LogReader(ours, verify_crc=True)
    assert batch.compression is codec
    assert [(r.key, r.value, r.timestamp, r.headers) for r in batch.records()] == rows


def test_out_of_path_records_go_to_the_general_encoder() -> None:
    assert encode_small_batch([]) is None
    assert encode_small_batch([Record.of(b"x", offset=5)]) is None
    assert encode_small_batch([Record.of(b"x", timestamp=-7)]) is None


def test_kafka_python_reads_small_batches() -> None:
    from kafka.record.memory_records import MemoryRecords

    records = [
        Record.of(b"v" * 100, key=b"k", timestamp=1_700_000_000_000),
        Record.of(None, key=None, timestamp=1_700_000_000_005, headers=[("h", b"x")]),
        Record.of(b"", key=b"", timestamp=1_699_999_999_000, headers=[("n", None)]),
    ]
    for chunk in (records[:1], records):
        data = encode_small_batch(chunk, base_offset=42)
        assert data is not None
        batch = MemoryRecords(data).next_batch()
        assert batch.validate_crc()
        assert batch.base_offset == 42
        assert batch.max_timestamp == max(r.timestamp for r in chunk)
        got = [
            (r.offset, r.timestamp, r.key, r.value, tuple(Header(k, v) for k, v in r.headers))
            for r in batch
        ]
        want = [(42 + i, r.timestamp, r.key, r.value, r.headers) for i, r in enumerate(chunk)]
        assert got == want


def test_record_of_builds_the_same_record() -> None:
    fast = Record.of(b"v", key=b"k", timestamp=5)
    assert fast == Record(offset=-1, timestamp=5, key=b"k", value=b"v")
    assert hash(fast) == hash(Record(offset=-1, timestamp=5, key=b"k", value=b"v"))
    assert Record.of(b"v", headers=[("a", b"b")]).headers == (Header("a", b"b"),)
