"""Legacy (magic 0/1) log entries: spec vectors, Kafka-written fixtures, client oracles, bad input.

Byte-exactness evidence: the §12 vectors, Kafka's own Java down-conversion output
(``kafka-4.0-snapshot-javacode``) and a real 0.9.0.1 broker's logs are re-encoded and compared
byte for byte; kafka-python and aiokafka serve as independent decoders and encoders.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkalog.errors import (
    CompressionError,
    CorruptRecordError,
    InvalidRecordError,
    KafkalogError,
)
from kafkalog.records import compression
from kafkalog.records.batch import RecordBatch
from kafkalog.records.legacy import LegacyEntry, encode_message, encode_message_set
from kafkalog.records.model import Header, Record
from kafkalog.records.types import Compression, Limits, TimestampType
from provenance import FIXTURES

JAVACODE = FIXTURES / "kafka-4.0-snapshot-javacode"
BROKER_090 = FIXTURES / "kafka-0.9.0.1-broker"
SARAMA = FIXTURES / "sarama-client-vectors"
KAFKAJS_FETCH = FIXTURES / "kafkajs-fetch-captures"
KAFKAJS_CLIENT = FIXTURES / "kafkajs-client-encoded"
KAFKA_PYTHON = FIXTURES / "kafka-python-real-broker-vectors"


def needs_fixtures(test: Callable[..., None]) -> Callable[..., None]:
    """Fixtures are part of the contract: a missing tree must fail, never skip."""
    return test


CODECS = ["none", "gzip", "snappy", "lz4"]
T0 = 1700000000000

# §12 vectors
V1_NONE = bytes.fromhex(
    "000000000000000a000000203052e67001000000018bcfe56800000000046b6579310000000676616c7565"
    "31000000000000000b0000001851e309c001000000018bcfe569f4ffffffff000000027632"
)
V0_NONE = bytes.fromhex(
    "000000000000000a0000001875f0f41d0000000000046b6579310000000676616c756531000000000000"
    "000b00000010d5960a780000ffffffff000000027632"
)
VECTOR_RECORDS = [
    Record(10, 1700000000000, b"key1", b"value1"),
    Record(11, 1700000000500, None, b"v2"),
]


def walk(data: bytes, path: str | None = None) -> list[LegacyEntry]:
    """Legacy entries fully present in ``data`` (a cut-off tail ends the walk, as Kafka's
    reader does; magic-2 batches in a mixed slice are stepped over)."""
    out: list[LegacyEntry] = []
    pos = 0
    while len(data) - pos >= 12:
        _, size = struct.unpack_from(">qi", data, pos)
        assert size >= 14, f"impossible entry size {size} at {pos}"
        if pos + 12 + size > len(data):
            break
        if data[pos + 16] < 2:
            out.append(LegacyEntry.parse(data, pos, path))
        pos += 12 + size
    return out


def all_records(entries: list[LegacyEntry]) -> list[Record]:
    return [r for e in entries for r in e.records()]


def as_tuples(records: list[Record]) -> list[tuple[int, int, bytes | None, bytes | None]]:
    return [(r.offset, r.timestamp, r.key, r.value) for r in records]


# ---------------------------------------------------------------------------------------------
# §12 vectors


def test_spec_vector_v1_none_encodes_exactly() -> None:
    assert encode_message_set(VECTOR_RECORDS, magic=1) == V1_NONE


def test_spec_vector_v0_none_encodes_exactly() -> None:
    assert encode_message_set(VECTOR_RECORDS, magic=0) == V0_NONE


@pytest.mark.parametrize(("magic", "data"), [(1, V1_NONE), (0, V0_NONE)])
def test_spec_vectors_parse(magic: int, data: bytes) -> None:
    entries = walk(data)
    assert [e.size_in_bytes for e in entries] == ([44, 36] if magic == 1 else [36, 28])
    for e in entries:
        e.ensure_valid()
        assert e.is_valid()
        assert e.magic == magic
        assert e.compression is Compression.NONE
        assert e.records_count == 1
    expected = [
        (r.offset, r.timestamp if magic == 1 else -1, r.key, r.value) for r in VECTOR_RECORDS
    ]
    assert as_tuples(all_records(entries)) == expected
    assert entries[0].crc == (0x3052E670 if magic == 1 else 0x75F0F41D)
    assert entries[0].timestamp_type is (
        TimestampType.CREATE_TIME if magic == 1 else TimestampType.NO_TIMESTAMP
    )


def test_spec_example_size() -> None:
    """§8.8: a v1 message key "key1" value "value1" is 12 + 22 + 4 + 6 = 44 bytes."""
    assert len(encode_message(magic=1, key=b"key1", value=b"value1", timestamp=0)) == 44


# ---------------------------------------------------------------------------------------------
# Kafka 4.0 Java down-conversion output


def scenario(codec: str, magic: int, *, with_batch5: bool = True) -> list[tuple[object, ...]]:
    """PROVENANCE §2 "Scenarios" (the same inputs as §1 for batches 1-4)."""
    rows: list[tuple[bytes | None, bytes | None, int]] = [(b"k0", f"hello {codec}".encode(), T0)]
    rows += [(f"k{i}".encode(), f"value-{i}-{codec}".encode(), T0 + 999 + i) for i in range(1, 6)]
    rows += [(None, b"no-key", T0 + 2000), (b"null-value", None, T0 + 2001)]
    rows += [(b"empty-value", b"", T0 + 2002)]
    rows += [
        (
            f"key-{i:03d}".encode(),
            f"the quick brown fox {i:03d} jumps over the lazy dog".encode(),
            T0 + 3000 + i,
        )
        for i in range(100)
    ]
    if with_batch5:
        rows += [
            (b"ts-a", b"max-ts-is-first", T0 + 10000),
            (b"ts-b", b"older", T0 + 5000),
            (b"ts-c", b"middle", T0 + 9000),
        ]
    return [(i, ts if magic == 1 else -1, k, v) for i, (k, v, ts) in enumerate(rows)]


BATCH_LAST_OFFSETS = [0, 5, 8, 108, 111]
BATCH_SIZES = [1, 5, 3, 100, 3]


def _log(d: Path) -> Path:
    return d / "00000000000000000000.log"


@needs_fixtures
@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", CODECS)
def test_javacode_fixture_records(magic: int, codec: str) -> None:
    path = _log(JAVACODE / f"v{magic}-{codec}-0")
    data = path.read_bytes()
    entries = walk(data, str(path))
    assert sum(e.size_in_bytes for e in entries) == len(data)
    for e in entries:
        e.ensure_valid()
        assert e.magic == magic
        assert e.path == str(path)
        assert e.compression is Compression.parse(codec)
        assert e.producer_id == -1 and e.base_sequence == -1 and e.partition_leader_epoch == -1
        assert not e.is_control and not e.is_transactional
    assert as_tuples(all_records(entries)) == scenario(codec, magic)
    if codec == "none":
        assert len(entries) == 112
        return
    # one wrapper per producer batch, offset = last inner offset
    assert [e.offset for e in entries] == BATCH_LAST_OFFSETS
    assert [e.last_offset for e in entries] == BATCH_LAST_OFFSETS
    assert [e.records_count for e in entries] == BATCH_SIZES
    assert [e.base_offset for e in entries] == [0, 1, 6, 9, 109]
    assert all(e.key is None for e in entries)
    if magic == 1:
        # wrapper timestamp = max inner timestamp (batch 5's max is on its first record)
        assert [e.max_timestamp for e in entries] == [
            T0,
            T0 + 1004,
            T0 + 2002,
            T0 + 3099,
            T0 + 10000,
        ]
        assert all(e.timestamp_type is TimestampType.CREATE_TIME for e in entries)
        # v1 inner offsets are stored relative (0..n-1), v0 absolute
        inner = entries[3].inner_entries()
        assert [i.offset for i in inner] == list(range(9, 109))
        raw_offsets = [
            struct.unpack_from(">q", entries[3].decompressed_value(), i.position)[0] for i in inner
        ]
        assert raw_offsets == list(range(100))
    else:
        assert all(e.timestamp == -1 for e in entries)
        assert all(e.timestamp_type is TimestampType.NO_TIMESTAMP for e in entries)


def _reencode(e: LegacyEntry) -> bytes:
    recs = e.records()
    return encode_message_set(
        recs,
        magic=e.magic,
        base_offset=recs[0].offset,
        compression=e.compression,
        timestamp_type=(
            TimestampType.LOG_APPEND_TIME
            if e.timestamp_type is TimestampType.LOG_APPEND_TIME
            else TimestampType.CREATE_TIME
        ),
        log_append_time=e.timestamp,
    )


def _check_reencode(entries: list[LegacyEntry]) -> None:
    """Re-encode every entry: it must decode identically and equal Kafka's bytes exactly."""
    for e in entries:
        ours = _reencode(e)
        again = walk(ours)
        assert len(again) == 1
        again[0].ensure_valid()
        assert as_tuples(again[0].records()) == as_tuples(e.records())
        assert again[0].offset == e.offset and again[0].timestamp == e.timestamp
        assert again[0].attributes == e.attributes
        assert ours == bytes(e.buffer), f"entry at {e.position} differs from Kafka's bytes"


@needs_fixtures
@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", CODECS)
def test_javacode_fixture_reencode(magic: int, codec: str) -> None:
    path = _log(JAVACODE / f"v{magic}-{codec}-0")
    data = path.read_bytes()
    entries = walk(data)
    # every entry, wrappers of every codec included, is reproduced byte for byte
    _check_reencode(entries)
    assert b"".join(_reencode(e) for e in entries) == data


# ---------------------------------------------------------------------------------------------
# Real Kafka 0.9.0.1 broker (magic 0, incl. log-cleaner output)


def _broker_logs() -> list[Path]:
    return sorted(BROKER_090.glob("*/*.log")) if BROKER_090.is_dir() else []


@needs_fixtures
@pytest.mark.parametrize("path", _broker_logs(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_broker_090_every_entry_valid(path: Path) -> None:
    data = path.read_bytes()
    entries = walk(data, str(path))
    assert sum(e.size_in_bytes for e in entries) == len(data)
    for e in entries:
        assert e.magic == 0
        e.ensure_valid()
        recs = e.records()
        assert recs and all(r.timestamp == -1 for r in recs)
        assert e.last_offset == recs[-1].offset
    offsets = [r.offset for r in all_records(entries)]
    assert offsets == sorted(set(offsets))
    # the broker's (and its log cleaner's) entries are reproduced byte for byte
    _check_reencode(entries)


@needs_fixtures
@pytest.mark.parametrize("codec", CODECS)
def test_broker_090_codec_topics(codec: str) -> None:
    entries = walk(_log(BROKER_090 / f"v0-{codec}-0").read_bytes())
    assert as_tuples(all_records(entries)) == scenario(codec, 0, with_batch5=False)
    if codec == "none":
        assert len(entries) == 109
    else:
        assert [e.offset for e in entries] == [0, 5, 8, 108]
        assert [[r.offset for r in e.records()] for e in entries] == [
            [0],
            list(range(1, 6)),
            list(range(6, 9)),
            list(range(9, 109)),
        ]
    _check_reencode(entries)


@needs_fixtures
def test_broker_090_javacode_same_prefix() -> None:
    """PROVENANCE: Kafka 4.0's down-conversion wrote the same bytes as the 0.9.0.1 broker."""
    for codec in CODECS:
        old = _log(BROKER_090 / f"v0-{codec}-0").read_bytes()
        new = _log(JAVACODE / f"v0-{codec}-0").read_bytes()
        assert new.startswith(old)


@needs_fixtures
@pytest.mark.parametrize(
    ("rel", "count", "offsets"),
    [
        ("v0-compact-0/00000000000000000060.log", 10, list(range(70, 80))),
        ("v0-compact-0/00000000000000000080.log", 20, list(range(80, 100))),
        ("v0-compact-gzip-0/00000000000000000060.log", 1, None),
        ("v0-compact-gzip-0/00000000000000000080.log", 2, None),
        ("__consumer_offsets-1/00000000000000000000.log", 4, list(range(4))),
    ],
)
def test_broker_090_cleaner_output(rel: str, count: int, offsets: list[int] | None) -> None:
    entries = walk((BROKER_090 / rel).read_bytes())
    assert len(entries) == count
    for e in entries:
        e.ensure_valid()
    recs = all_records(entries)
    if offsets is not None:
        assert [r.offset for r in recs] == offsets
    if "compact-gzip" in rel:
        assert entries[-1].offset == (79 if "60" in rel else 99)
        assert all(e.compression is Compression.GZIP for e in entries)
        # the cleaner keeps the latest value per key; round 9 tombstones keys 0, 4, 8
        assert all(r.key is not None for r in recs)
    if rel.startswith("v0-compact-0/0000000000000000008"):
        tombstones = {r.key for r in recs if r.value is None}
        assert tombstones == {b"key-0", b"key-4", b"key-8"}


@needs_fixtures
def test_broker_090_segments_offsets() -> None:
    for path in sorted((BROKER_090 / "v0-segments-0").glob("*.log")):
        entries = walk(path.read_bytes())
        base = int(path.stem)
        assert [e.offset for e in entries] == list(range(base, base + len(entries)))
        assert [r.key for e in entries for r in e.records()] == [
            f"key-{i:04d}".encode() for i in range(base, base + len(entries))
        ]


# ---------------------------------------------------------------------------------------------
# Client-encoded and broker-captured message sets


@needs_fixtures
@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("emptyBulkGzipMessage", [(0, -1, None, b""), (1, -1, None, b"")]),
        ("emptyBulkSnappyMessage", [(0, -1, b"", b""), (1, -1, b"", b"")]),
        # a v1 LZ4 wrapper (frame with content checksum and 4 MiB blocks) around two v0 inner
        # messages; wrapper offset 0, so the inner offsets are taken as they are
        ("emptyBulkLZ4Message", [(0, -1, None, b""), (1, -1, None, b"")]),
        ("emptyV1Message", [(0, 0, None, None)]),
    ],
)
def test_sarama_messages(name: str, expected: list[tuple[object, ...]]) -> None:
    entries = walk((SARAMA / f"message_test--{name}.msgset.bin").read_bytes())
    assert len(entries) == 1
    entries[0].ensure_valid()
    assert as_tuples(entries[0].records()) == expected


@needs_fixtures
@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("emptyBulkZSTDMessage", "zstd"),
        ("emptyZSTDMessage", "zstd"),
        ("emptyGzipMessage", "no inner messages"),
        ("emptyLZ4Message", "no inner messages"),
    ],
)
def test_sarama_messages_rejected(name: str, why: str) -> None:
    """zstd needs magic 2; a wrapper with no inner messages is invalid (Kafka rejects both)."""
    entries = walk((SARAMA / f"message_test--{name}.msgset.bin").read_bytes())
    assert len(entries) == 1
    entries[0].ensure_valid()  # the CRC is fine: the bytes are what sarama wrote
    with pytest.raises(CorruptRecordError, match=why) as info:
        entries[0].records()
    assert info.value.position is not None


@needs_fixtures
@pytest.mark.parametrize(
    ("name", "magic", "n_entries", "offsets"),
    [
        ("fetch-v0_response--p0.bin", 0, 1, [0]),
        ("fetch-v1_response--p0.bin", 0, 1, [0]),
        ("fetch-v0_response_gzip--p0.bin", 0, 3, [0, 1, 2]),
        ("fetch-v1_response_gzip--p0.bin", 0, 1, [0, 1, 2]),
        ("fetch-v2_response--p0.bin", 1, 3, [0, 1, 2]),
        ("fetch-v3_response--p0.bin", 1, 3, [0, 1, 2]),
        ("fetch-v2_response_gzip--p0.bin", 1, 1, [0, 1, 2]),
        ("fetch-v3_response_gzip--p0.bin", 1, 1, [0, 1, 2]),
        (
            "fetch-v2_response_index_out_of_range--test-topic-index-out-of-range-1.bin",
            0,
            3,
            [15733908, 15733909, 15733910],
        ),
        ("fetch-v4_response_010_format--p1.bin", 1, 1, [0]),
    ],
)
def test_kafkajs_fetch_captures(name: str, magic: int, n_entries: int, offsets: list[int]) -> None:
    entries = walk((KAFKAJS_FETCH / name).read_bytes())
    assert len(entries) == n_entries
    for e in entries:
        e.ensure_valid()
        assert e.magic == magic
    recs = all_records(entries)
    assert [r.offset for r in recs] == offsets
    if magic == 0:
        assert all(r.timestamp == -1 for r in recs)
    else:
        assert all(r.timestamp > 1500000000000 for r in recs)


@needs_fixtures
def test_kafkajs_partial_messages_only_complete_entries() -> None:
    files = sorted(KAFKAJS_FETCH.glob("fetch-v2_response_partial_messages_*.bin"))
    assert files
    for f in files:
        data = f.read_bytes()
        assert walk(data) == []  # the single entry is cut off: nothing complete to parse
        _, size = struct.unpack_from(">qi", data, 0)
        assert 12 + size > len(data)
        # parsing it anyway is refused with the position of the size field
        with pytest.raises(CorruptRecordError) as info:
            LegacyEntry.parse(data, 0, str(f))
        assert info.value.position == 8 and info.value.path == str(f)


@needs_fixtures
def test_kafkajs_mixed_formats() -> None:
    data = KAFKAJS_FETCH / "fetch-v4_response_mixed_formats--test-mixed-message-formats-0.bin"
    entries = walk(data.read_bytes())
    assert len(entries) == 1611
    for e in entries:
        e.ensure_valid()
        assert e.magic == 1 and e.compression is Compression.NONE
    offsets = [e.offset for e in entries]
    assert offsets == sorted(offsets)


@needs_fixtures
@pytest.mark.parametrize(
    "name",
    [
        "produce-v2_request--p0.bin",
        "produce-v2_request_gzip_darwin--p0.bin",
        "produce-v2_request_gzip_linux--p0.bin",
    ],
)
def test_kafkajs_produce_requests(name: str) -> None:
    entries = walk((KAFKAJS_CLIENT / name).read_bytes())
    assert entries
    recs = []
    for e in entries:
        e.ensure_valid()
        assert e.magic == 1
        recs += e.records()
    assert len(recs) == 3
    assert all(r.timestamp == entries[0].timestamp for r in recs)


@needs_fixtures
@pytest.mark.parametrize("magic", [0, 1])
def test_kafka_python_real_broker_vectors(magic: int) -> None:
    entries = walk((KAFKA_PYTHON / f"record_batch_data_v{magic}.bin").read_bytes())
    assert len(entries) == 4
    for e in entries:
        e.ensure_valid()
    assert [r.value for r in all_records(entries)] == [b"123", b"", b"", b"123"]
    assert [r.offset for r in all_records(entries)] == [0, 1, 2, 3]
    if magic == 1:
        assert entries[0].crc == 1199974594
        assert entries[0].timestamp == 1503648000942
    else:
        assert entries[0].crc == -22012481 & 0xFFFFFFFF
        assert entries[0].timestamp == -1
    # uncompressed entries re-encode byte for byte
    for e in entries:
        r = e.records()[0]
        assert encode_message_set([r], magic=magic) == bytes(e.buffer)


# ---------------------------------------------------------------------------------------------
# Oracles: kafka-python and aiokafka


ORACLE_RECORDS = [
    (b"k0", b"v0", T0),
    (None, b"no key", T0 + 7),
    (b"null value", None, T0 + 3),
    (b"", b"", T0 + 9),
    (b"big", bytes(range(256)) * 300, T0 + 1),
    (None, None, T0 + 2),
]
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3}


def _kafka_python_decode(data: bytes) -> list[tuple[object, ...]]:
    from kafka.record.memory_records import MemoryRecords

    mr = MemoryRecords(data)
    out: list[tuple[object, ...]] = []
    while True:
        batch = mr.next_batch()
        if batch is None:
            break
        for r in batch:
            out.append((r.offset, r.timestamp, r.key, r.value))
    return out


def _aiokafka_decode(data: bytes) -> list[tuple[object, ...]]:
    from aiokafka.record.memory_records import MemoryRecords

    mr = MemoryRecords(data)
    out: list[tuple[object, ...]] = []
    while True:
        batch = mr.next_batch()
        if batch is None:
            break
        for r in batch:
            out.append((r.offset, r.timestamp, r.key, r.value))
    return out


def _kafka_python_build(magic: int, codec: str, rows: list[tuple[object, ...]]) -> bytes:
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    b = LegacyRecordBatchBuilder(magic, CODEC_IDS[codec], 10_000_000)
    for i, (k, v, ts) in enumerate(rows):
        assert b.append(i, timestamp=ts, key=k, value=v) is not None
    return bytes(b.build())


def _aiokafka_build(magic: int, codec: str, rows: list[tuple[object, ...]]) -> bytes:
    from aiokafka.record.legacy_records import LegacyRecordBatchBuilder

    b = LegacyRecordBatchBuilder(magic, CODEC_IDS[codec], 10_000_000)
    for i, (k, v, ts) in enumerate(rows):
        assert b.append(i, timestamp=ts, key=k, value=v) is not None
    return bytes(b.build())


DECODERS: dict[str, Callable[[bytes], list[tuple[object, ...]]]] = {
    "kafka-python": _kafka_python_decode,
    "aiokafka": _aiokafka_decode,
}
BUILDERS: dict[str, Callable[[int, str, list[tuple[object, ...]]], bytes]] = {
    "kafka-python": _kafka_python_build,
    "aiokafka": _aiokafka_build,
}


def _peer_refuses(lib: str, magic: int, codec: str) -> bool:
    """aiokafka refuses LZ4 with magic 0 (Kafka's broken v0 frame checksum) outright."""
    return lib == "aiokafka" and magic == 0 and codec == "lz4"


def _expected(magic: int, base: int, ts_override: int | None = None) -> list[tuple[object, ...]]:
    return [
        (base + i, (ts if ts_override is None else ts_override) if magic == 1 else -1, k, v)
        for i, (k, v, ts) in enumerate(ORACLE_RECORDS)
    ]


def _normalize(rows: list[tuple[object, ...]]) -> list[tuple[object, ...]]:
    """Clients report a v0 timestamp as None and keys/values as bytes or memoryviews."""
    return [
        (
            o,
            -1 if ts is None else ts,
            None if k is None else bytes(k),  # type: ignore[call-overload]
            None if v is None else bytes(v),  # type: ignore[call-overload]
        )
        for o, ts, k, v in rows
    ]


@pytest.mark.parametrize("lib", sorted(DECODERS))
@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", CODECS)
def test_oracle_decodes_ours(lib: str, magic: int, codec: str) -> None:
    recs = [Record.of(v, key=k, timestamp=ts) for k, v, ts in ORACLE_RECORDS]
    data = encode_message_set(recs, magic=magic, base_offset=1000, compression=codec)
    if _peer_refuses(lib, magic, codec):
        from aiokafka.errors import UnsupportedCodecError

        with pytest.raises(UnsupportedCodecError):
            DECODERS[lib](data)
    else:
        assert _normalize(DECODERS[lib](data)) == _expected(magic, 1000)
    assert as_tuples(all_records(walk(data))) == _expected(magic, 1000)


@pytest.mark.parametrize("lib", sorted(DECODERS))
@pytest.mark.parametrize("codec", CODECS)
def test_oracle_decodes_ours_log_append_time(lib: str, codec: str) -> None:
    recs = [Record.of(v, key=k, timestamp=ts) for k, v, ts in ORACLE_RECORDS]
    lat = T0 + 123456
    data = encode_message_set(
        recs,
        magic=1,
        base_offset=7,
        compression=codec,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        log_append_time=lat,
    )
    assert _normalize(DECODERS[lib](data)) == _expected(1, 7, lat)
    entries = walk(data)
    assert as_tuples(all_records(entries)) == _expected(1, 7, lat)
    assert all(e.timestamp_type is TimestampType.LOG_APPEND_TIME for e in entries)


@pytest.mark.parametrize("lib", sorted(BUILDERS))
@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", CODECS)
def test_ours_decodes_oracle(lib: str, magic: int, codec: str) -> None:
    if _peer_refuses(lib, magic, codec):
        from aiokafka.errors import UnsupportedCodecError

        with pytest.raises(UnsupportedCodecError):
            BUILDERS[lib](magic, codec, ORACLE_RECORDS)  # type: ignore[arg-type]
        return
    data = BUILDERS[lib](magic, codec, ORACLE_RECORDS)  # type: ignore[arg-type]
    entries = walk(data)
    for e in entries:
        e.ensure_valid()
    # compressed v1 from these clients has wrapper offset 0 (producer side): the inner
    # relative offsets are then taken as absolute, Kafka's librdkafka quirk rule
    assert as_tuples(all_records(entries)) == _expected(magic, 0)
    assert as_tuples(all_records(entries)) == _normalize(DECODERS[lib](data))


# ---------------------------------------------------------------------------------------------
# Encoder rules


def test_encode_compressed_v1_layout() -> None:
    recs = [Record(-1, T0 + d, b"k", b"v") for d in (5, 9, 2)]
    data = encode_message_set(recs, magic=1, base_offset=40, compression="gzip")
    (wrapper,) = walk(data)
    assert wrapper.offset == 42 and wrapper.timestamp == T0 + 9 and wrapper.key is None
    assert wrapper.attributes == 1
    inner_raw = wrapper.decompressed_value()
    stored = [struct.unpack_from(">q", inner_raw, e.position)[0] for e in wrapper.inner_entries()]
    assert stored == [0, 1, 2]
    assert [r.offset for r in wrapper.records()] == [40, 41, 42]
    assert wrapper.base_offset == 40


def test_encode_compressed_v0_layout() -> None:
    recs = [Record(-1, 5, b"k", b"v") for _ in range(3)]
    data = encode_message_set(recs, magic=0, base_offset=40, compression="lz4")
    (wrapper,) = walk(data)
    assert wrapper.offset == 42 and wrapper.timestamp == -1
    inner_raw = wrapper.decompressed_value()
    stored = [struct.unpack_from(">q", inner_raw, e.position)[0] for e in wrapper.inner_entries()]
    assert stored == [40, 41, 42]
    # v0 LZ4 uses Kafka's broken header checksum (§8.7): HC over magic|FLG|BD
    assert wrapper.value is not None and wrapper.value[:7].hex() == "04224d1860401a"


def test_encode_explicit_offsets_with_gaps() -> None:
    recs = [Record(o, T0, str(o).encode(), b"v") for o in (3, 7, 20)]
    for magic in (0, 1):
        for codec in CODECS:
            data = encode_message_set(recs, magic=magic, base_offset=3, compression=codec)
            assert [r.offset for r in all_records(walk(data))] == [3, 7, 20]


def test_encode_log_append_time_uncompressed() -> None:
    recs = [Record.of(b"a", timestamp=5), Record.of(b"b", timestamp=6)]
    data = encode_message_set(
        recs, magic=1, timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=99
    )
    entries = walk(data)
    assert [e.attributes for e in entries] == [8, 8]
    assert [r.timestamp for r in all_records(entries)] == [99, 99]
    assert all(e.timestamp_type is TimestampType.LOG_APPEND_TIME for e in entries)


def test_encode_magic0_ignores_timestamps() -> None:
    recs = [Record.of(b"a", timestamp=-77), Record.of(b"b", timestamp=123)]
    a = encode_message_set(recs, magic=0)
    b = encode_message_set([Record.of(b"a"), Record.of(b"b")], magic=0)
    assert a == b


def test_encode_empty_is_empty() -> None:
    for codec in CODECS:
        assert encode_message_set([], magic=1, compression=codec) == b""


@pytest.mark.parametrize(
    ("kwargs", "records"),
    [
        ({"magic": 1, "compression": "zstd"}, [Record.of(b"v")]),
        ({"magic": 0, "compression": Compression.ZSTD}, [Record.of(b"v")]),
        ({"magic": 1, "compression": 7}, [Record.of(b"v")]),
        ({"magic": 1, "compression": "brotli"}, [Record.of(b"v")]),
        ({"magic": 2}, [Record.of(b"v")]),
        ({"magic": 1}, [Record.of(b"v", headers=[("h", b"x")])]),
        ({"magic": 0}, [Record(-1, -1, None, b"v", (Header("h", None),))]),
        ({"magic": 1}, [Record(5, 0, None, b"a"), Record(5, 0, None, b"b")]),
        ({"magic": 1}, [Record.of(b"v", timestamp=-2)]),
        ({"magic": 1, "timestamp_type": TimestampType.LOG_APPEND_TIME}, [Record.of(b"v")]),
        ({"magic": 1, "timestamp_type": TimestampType.NO_TIMESTAMP}, [Record.of(b"v")]),
        ({"magic": 1, "base_offset": 5, "compression": "gzip"}, [Record(4, 0, None, b"v")]),
        ({"magic": 1, "base_offset": -1}, [Record.of(b"v")]),
    ],
)
def test_encode_rejects(kwargs: dict[str, object], records: list[Record]) -> None:
    with pytest.raises(InvalidRecordError):
        encode_message_set(records, **kwargs)  # type: ignore[arg-type]


def test_encode_message_rejects() -> None:
    with pytest.raises(InvalidRecordError):
        encode_message(magic=2, key=None, value=None)
    with pytest.raises(InvalidRecordError):
        encode_message(magic=1, key=None, value=None, attributes=256)
    with pytest.raises(InvalidRecordError):
        encode_message(magic=1, key=None, value=None, timestamp=2**63)


# ---------------------------------------------------------------------------------------------
# Reader rules and properties


def _wrap(
    inner: bytes,
    *,
    magic: int,
    codec: Compression = Compression.GZIP,
    offset: int = 0,
    timestamp: int = T0,
    ts_type_bit: int = 0,
) -> bytes:
    """A wrapper entry around raw (uncompressed) inner bytes, CRC correct."""
    payload = compression.compress(codec, inner, magic=magic)
    return encode_message(
        magic=magic,
        key=None,
        value=payload,
        timestamp=timestamp,
        attributes=int(codec) | ts_type_bit,
        offset=offset,
    )


def _inner(magic: int, offsets: list[int], ts: int = 5) -> bytes:
    return b"".join(
        encode_message(magic=magic, key=b"k", value=str(o).encode(), timestamp=ts + o, offset=o)
        for o in offsets
    )


def test_log_append_time_wrapper_overrides_inner_timestamps() -> None:
    data = _wrap(_inner(1, [0, 1, 2]), magic=1, offset=12, timestamp=777, ts_type_bit=8)
    (e,) = walk(data)
    assert e.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert as_tuples(e.records()) == [
        (10, 777, b"k", b"0"),
        (11, 777, b"k", b"1"),
        (12, 777, b"k", b"2"),
    ]
    inner = e.inner_entries()
    assert all(i.timestamp_type is TimestampType.LOG_APPEND_TIME for i in inner)
    assert [i.position for i in inner] == [0, 36, 72]
    assert all(i.path is None for i in inner)


def test_create_time_wrapper_keeps_inner_timestamps() -> None:
    (e,) = walk(_wrap(_inner(1, [0, 1, 2]), magic=1, offset=12, timestamp=777))
    assert [r.timestamp for r in e.records()] == [5, 6, 7]


def test_v1_wrapper_offset_zero_quirk() -> None:
    (e,) = walk(_wrap(_inner(1, [0, 1, 2]), magic=1, offset=0))
    assert [r.offset for r in e.records()] == [0, 1, 2]
    assert e.base_offset == 0 and e.last_offset == 0


def test_v1_wrapper_offset_below_last_inner_rejected() -> None:
    (e,) = walk(_wrap(_inner(1, [0, 1, 5]), magic=1, offset=3))
    with pytest.raises(CorruptRecordError, match="less than the last inner") as info:
        e.records()
    assert info.value.position == 0


def test_v0_wrapper_inner_offsets_absolute() -> None:
    (e,) = walk(_wrap(_inner(0, [100, 101]), magic=0, offset=101))
    assert [r.offset for r in e.records()] == [100, 101]
    assert [r.timestamp for r in e.records()] == [-1, -1]


def test_inner_magic_mismatch_is_accepted_like_kafka() -> None:
    """Kafka's reader (ensureMatchingMagic=false) takes offsets by the wrapper's magic and
    timestamps by the inner message's magic."""
    (e,) = walk(_wrap(_inner(0, [0, 1]), magic=1, offset=9, timestamp=50, ts_type_bit=8))
    assert as_tuples(e.records()) == [(8, -1, b"k", b"0"), (9, -1, b"k", b"1")]
    (e,) = walk(_wrap(_inner(1, [4, 5]), magic=0, offset=5))
    assert as_tuples(e.records()) == [(4, 9, b"k", b"4"), (5, 10, b"k", b"5")]


def test_zstd_wrapper_parses_but_records_rejected() -> None:
    payload = b"\x28\xb5\x2f\xfd" + bytes(10)
    data = encode_message(magic=1, key=None, value=payload, timestamp=0, attributes=4)
    (e,) = walk(data)
    e.ensure_valid()
    assert e.compression is Compression.ZSTD
    with pytest.raises(CorruptRecordError, match="zstd") as info:
        e.records()
    assert info.value.position == 17


@pytest.mark.parametrize("codec_id", [5, 6, 7])
def test_unknown_codec(codec_id: int) -> None:
    data = b"\0" * 20 + encode_message(magic=1, key=None, value=b"x", attributes=codec_id)
    e = LegacyEntry.parse(data, 20, "seg.log")
    e.ensure_valid()
    for call in (lambda: e.compression, e.records, lambda: e.records_count):
        with pytest.raises(CorruptRecordError, match="unknown compression") as info:
            call()
        assert info.value.position == 20 + 17 and info.value.path == "seg.log"


def test_properties_mirror_record_batch() -> None:
    """Every header-level name callers use on RecordBatch exists on LegacyEntry."""
    names = [
        "base_offset", "last_offset", "next_offset", "size_in_bytes", "batch_length", "magic",
        "crc", "attributes", "compression", "compression_id", "timestamp_type",
        "max_timestamp", "is_control", "is_transactional", "has_delete_horizon",
        "delete_horizon_ms", "producer_id", "producer_epoch", "base_sequence", "last_sequence",
        "partition_leader_epoch", "records_count", "position", "path", "buffer",
    ]  # fmt: skip
    for n in names:
        assert hasattr(RecordBatch, n) or n in RecordBatch.__dataclass_fields__, n
    (e,) = walk(encode_message_set([Record(41, 9, b"k", b"v")], magic=1))
    values = {n: getattr(e, n) for n in names}
    assert values["base_offset"] == values["last_offset"] == 41 and values["next_offset"] == 42
    assert values["size_in_bytes"] == 12 + values["batch_length"] == len(e.buffer)
    assert values["max_timestamp"] == 9
    assert values["delete_horizon_ms"] is None and values["records_count"] == 1
    for n in ("producer_id", "producer_epoch", "base_sequence", "last_sequence",
              "partition_leader_epoch"):  # fmt: skip
        assert values[n] == -1
    assert list(e) == e.records()


def test_positions_relative_to_buffer_start() -> None:
    prefix = b"\xaa" * 33
    data = prefix + V1_NONE
    e = LegacyEntry.parse(data, 33 + 44, "f.log")
    assert e.position == 77 and e.offset == 11 and bytes(e.buffer) == V1_NONE[44:]


# ---------------------------------------------------------------------------------------------
# Bad input: every problem is a positioned CorruptRecordError


def _raw_message(magic: int, body_after_attributes: bytes, *, size: int | None = None) -> bytes:
    """An entry with arbitrary bytes after magic/attributes and a correct CRC."""
    msg = bytes([magic, 0]) + body_after_attributes
    crc = zlib.crc32(msg) & 0xFFFFFFFF
    msg_size = 4 + len(msg) if size is None else size
    return struct.pack(">qiI", 0, msg_size, crc) + msg


def _corrupt(data: bytes, position: int, match: str, path: str | None = None) -> None:
    with pytest.raises(CorruptRecordError, match=match) as info:
        e = LegacyEntry.parse(data, 0, path)
        e.ensure_valid()
        e.records()
    assert info.value.position == position, info.value
    assert info.value.path == path


def test_bad_truncated_header() -> None:
    for k in range(12):
        _corrupt(V1_NONE[:k], 0, "header bytes", "x.log")


def test_bad_truncated_entry() -> None:
    for k in range(12, 44):
        _corrupt(V1_NONE[:k], 8, "runs past the end|smaller than", "x.log")


def test_bad_size_below_minimum() -> None:
    data = bytearray(V0_NONE[:36])
    struct.pack_into(">i", data, 8, 13)
    _corrupt(bytes(data), 8, "minimum record overhead")


def test_bad_v1_too_short() -> None:
    # magic 1, size 14 (the v0 minimum): the timestamp fills bytes 18..26 where the message
    # ends, so the key length field is missing
    data = _raw_message(1, struct.pack(">q", 0) + b"\0" * 4)
    assert struct.unpack_from(">i", data, 8)[0] == 18
    _corrupt(data[:26], 8, "runs past the end")  # the buffer holds less than the size says
    short = bytearray(data[:26])
    struct.pack_into(">i", short, 8, 14)
    _corrupt(bytes(short), 26, "key length field")


def test_bad_v1_message_ends_inside_timestamp() -> None:
    """A size that cannot be a v1 message must not read the timestamp from the next entry."""
    data = bytearray(_raw_message(1, struct.pack(">qii", 0, -1, -1)) + V1_NONE)
    struct.pack_into(">i", data, 8, 14)
    # size 14 ends the message at byte 26, exactly after the timestamp
    _corrupt(bytes(data), 26, "key length field")
    # a size that ends inside the timestamp cannot happen (>= 14 covers it) but inner data
    # can only be checked against the entry end: nothing is read beyond it
    e = LegacyEntry.parse(V1_NONE, 0)
    assert e.size_in_bytes == 44


def test_bad_missing_value_length() -> None:
    data = _raw_message(0, struct.pack(">i", 2) + b"ab" + b"\0\0")
    assert struct.unpack_from(">i", data, 8)[0] == 14
    _corrupt(data, 24, "value length field")


def test_bad_key_length_past_end() -> None:
    data = _raw_message(0, struct.pack(">i", 50) + struct.pack(">i", -1))
    _corrupt(data, 18, "key length 50 runs past")


def test_bad_value_length_past_end() -> None:
    data = _raw_message(1, struct.pack(">qi", 0, 2) + b"ab" + struct.pack(">i", 3) + b"ab")
    _corrupt(data, 32, "value length 3 runs past")


@pytest.mark.parametrize("length", [-2, -100, -(2**31)])
def test_bad_negative_lengths(length: int) -> None:
    _corrupt(_raw_message(0, struct.pack(">ii", length, -1)), 18, "invalid key length")
    _corrupt(_raw_message(0, struct.pack(">ii", -1, length)), 22, "invalid value length")


def test_bad_trailing_bytes_after_value() -> None:
    data = _raw_message(1, struct.pack(">qii", 0, -1, 1) + b"ab")
    _corrupt(data, 35, "unexpected bytes after the value")


def test_bad_magic() -> None:
    data = bytearray(V0_NONE[:36])
    data[16] = 5
    _corrupt(bytes(data), 16, "not a legacy message format")


def test_bad_crc() -> None:
    data = bytearray(V1_NONE)
    data[-1] ^= 1
    e = LegacyEntry.parse(data, 44, "y.log")
    assert not e.is_valid()
    with pytest.raises(CorruptRecordError, match="CRC mismatch") as info:
        e.ensure_valid()
    assert info.value.position == 44 + 12 and info.value.path == "y.log"


def _expect_wrapper_error(data: bytes, match: str, at: int = 0) -> CorruptRecordError:
    e = LegacyEntry.parse(data, 0, "w.log")
    e.ensure_valid()
    for call in (e.records, e.inner_entries, lambda: e.records_count, lambda: e.base_offset):
        with pytest.raises(CorruptRecordError, match=match) as info:
            call()
        assert info.value.position == at and info.value.path == "w.log"
    return info.value


def test_bad_nested_compression() -> None:
    nested = _wrap(_inner(1, [0]), magic=1, offset=0)
    err = _expect_wrapper_error(_wrap(nested, magic=1, offset=0), "nested compression")
    assert "at byte 17 of the decompressed gzip data" in err.reason


def test_bad_empty_wrapper() -> None:
    for codec in (Compression.GZIP, Compression.SNAPPY, Compression.LZ4):
        for magic in (0, 1):
            _expect_wrapper_error(_wrap(b"", magic=magic, codec=codec), "no inner messages")


def test_bad_null_wrapper_value() -> None:
    data = encode_message(magic=1, key=None, value=None, timestamp=0, attributes=2)
    _expect_wrapper_error(data, "null value", at=30)


def test_bad_inner_crc() -> None:
    inner = bytearray(_inner(1, [0, 1, 2]))
    inner[36 + 30] ^= 0x40  # the key byte of the second inner message
    err = _expect_wrapper_error(_wrap(bytes(inner), magic=1, offset=2), "CRC mismatch")
    assert "at byte 48 of the decompressed" in err.reason  # its CRC field


def test_bad_inner_truncated_tail() -> None:
    inner = _inner(0, [0, 1])
    err = _expect_wrapper_error(_wrap(inner[:-3], magic=0, offset=1), "runs past the end")
    assert "at byte 36 of" in err.reason  # the size field of the cut-off second inner entry
    _expect_wrapper_error(_wrap(inner + b"\0" * 7, magic=0, offset=1), "trailing bytes")


def test_bad_inner_too_short() -> None:
    inner = bytearray(_inner(0, [0]))
    struct.pack_into(">i", inner, 8, 3)
    _expect_wrapper_error(_wrap(bytes(inner), magic=0), "minimum record overhead")


def test_bad_compressed_payload() -> None:
    for codec in (Compression.GZIP, Compression.SNAPPY, Compression.LZ4):
        data = encode_message(
            magic=1, key=b"kk", value=b"definitely not compressed", attributes=int(codec)
        )
        e = LegacyEntry.parse(data, 0, "c.log")
        with pytest.raises(CompressionError) as info:
            e.records()
        # positioned at the first byte of the compressed payload (after the value length)
        assert info.value.position == 26 + 4 + 2 + 4
        assert info.value.path == "c.log"


def test_decompression_limit() -> None:
    inner = _inner(1, list(range(2000)))
    data = _wrap(inner, magic=1, offset=1999)
    (e,) = walk(data)
    assert e.records_count == 2000
    tiny = Limits(max_decompression_ratio=1, min_decompressed_allowance=100)
    with pytest.raises(CompressionError):
        e.records(tiny)


def test_reader_yields_legacy_entries() -> None:
    """The log reader hands magic 0/1 entries to LegacyEntry.parse."""
    from kafkalog.records.reader import iter_entries

    entries = list(iter_entries(V0_NONE + V1_NONE, path="m.log", verify_crc=True))
    assert [type(e).__name__ for e in entries] == ["LegacyEntry"] * 4
    assert [e.position for e in entries] == [0, 36, 64, 108]


# ---------------------------------------------------------------------------------------------
# Fuzz: only kafkalog errors escape


def _fuzz_seeds() -> list[bytes]:
    recs = [Record.of(b"value-%d" % i, key=b"k%d" % i, timestamp=T0 + i) for i in range(4)]
    seeds = [V0_NONE, V1_NONE]
    for magic in (0, 1):
        for codec in ("gzip", "snappy", "lz4"):
            seeds.append(encode_message_set(recs, magic=magic, base_offset=3, compression=codec))
    return seeds


FUZZ_SEEDS = _fuzz_seeds()


def _entry_steps(e: LegacyEntry) -> list[Callable[[], object]]:
    """Everything a caller may ask of a parsed entry."""
    return [
        e.is_valid,
        e.ensure_valid,
        e.records,
        e.inner_entries,
        lambda: e.records_count,
        lambda: e.base_offset,
        lambda: e.timestamp_type,
        lambda: e.compression,
    ]


def _exercise(data: bytes) -> None:
    pos = 0
    while len(data) - pos >= 12:
        try:
            e = LegacyEntry.parse(data, pos, "fuzz.log")
        except CorruptRecordError as err:
            assert err.position is not None
            return
        for step in _entry_steps(e):
            try:
                step()
            except CorruptRecordError as err:
                assert err.position is not None
            except KafkalogError:
                pass
        pos += e.size_in_bytes


@settings(
    max_examples=1500,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    seed=st.sampled_from(FUZZ_SEEDS),
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 7)), max_size=4),
    cut=st.integers(0, 10_000),
    fix_crc=st.booleans(),
)
def test_fuzz_mutated_entries(
    seed: bytes, flips: list[tuple[int, int]], cut: int, fix_crc: bool
) -> None:
    data = bytearray(seed)
    for at, bit in flips:
        data[at % len(data)] ^= 1 << bit
    if fix_crc and len(data) >= 17:
        # keep the CRC matching so the mutation reaches the payload/inner parsing
        _, size = struct.unpack_from(">qi", data, 0)
        if 14 <= size <= len(data) - 12:
            struct.pack_into(">I", data, 12, zlib.crc32(bytes(data[16 : 12 + size])))
    if cut % 3 == 0:
        data = data[: cut % (len(data) + 1)]
    _exercise(bytes(data))


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    magic=st.sampled_from([0, 1]),
    codec=st.sampled_from([Compression.GZIP, Compression.SNAPPY, Compression.LZ4]),
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 7)), max_size=3),
    cut=st.integers(0, 400),
    junk=st.binary(max_size=20),
)
def test_fuzz_valid_compression_corrupt_inner(
    magic: int, codec: Compression, flips: list[tuple[int, int]], cut: int, junk: bytes
) -> None:
    """Corrupt the inner entries, then compress validly: exercises inner-entry parsing."""
    inner = bytearray(_inner(magic, [0, 1, 2]))
    for at, bit in flips:
        inner[at % len(inner)] ^= 1 << bit
    raw = bytes(inner[: len(inner) - cut % len(inner)]) + junk
    _exercise(_wrap(raw, magic=magic, codec=codec, offset=2))


def test_inner_entries_of_plain_message_is_itself() -> None:
    (e,) = walk(encode_message_set([Record(3, 4, b"k", b"v")], magic=1))
    assert e.inner_entries() == [e]
    with pytest.raises(InvalidRecordError):
        e.decompressed_value()


_opt_bytes = st.none() | st.binary(max_size=40)


@settings(max_examples=300, deadline=None)
@given(
    magic=st.sampled_from([0, 1]),
    codec=st.sampled_from(CODECS),
    base=st.integers(0, 2**40),
    rows=st.lists(
        st.tuples(_opt_bytes, _opt_bytes, st.integers(-1, 2**42), st.integers(1, 5)),
        min_size=1,
        max_size=12,
    ),
)
def test_roundtrip_property(
    magic: int, codec: str, base: int, rows: list[tuple[bytes | None, bytes | None, int, int]]
) -> None:
    offsets = []
    off = base
    for *_, gap in rows:
        offsets.append(off)
        off += gap
    recs = [Record(o, ts, k, v) for o, (k, v, ts, _) in zip(offsets, rows, strict=True)]
    data = encode_message_set(recs, magic=magic, base_offset=base, compression=codec)
    entries = walk(data)
    for e in entries:
        e.ensure_valid()
    expected = [(r.offset, r.timestamp if magic == 1 else -1, r.key, r.value) for r in recs]
    assert as_tuples(all_records(entries)) == expected
    assert entries[-1].last_offset == offsets[-1]
    assert entries[0].base_offset == offsets[0]
