"""Exact record contents of the fixtures whose producers' inputs are documented.

PROVENANCE.md's prose says what each writer was given (keys, values, timestamps, headers,
producer ids, markers); these tests hold every decoded record to it, for every codec.
"""

from __future__ import annotations

import pytest

from kafkalog.records import (
    Compression,
    ControlType,
    Header,
    LogReader,
    Record,
    RecordBatch,
    TimestampType,
    decode_arrow,
    encode_batch,
    encode_control_batch,
)
from kafkalog.records.batch import _decode_record
from kafkalog.records.varint import write_varint
from provenance import FIXTURES

T0 = 1700000000000
JAVA = FIXTURES / "kafka-4.0-snapshot-javacode"
BROKER09 = FIXTURES / "kafka-0.9.0.1-broker"
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def _records(path: object) -> list[Record]:
    return [r for e in LogReader.open(path, verify_crc=True) for r in e.records()]  # type: ignore[arg-type]


def _scenario(codec: str, with_headers: bool, legacy_offsets: bool = False) -> list[tuple]:
    """(key, value, timestamp, headers) of the documented five-batch scenario."""
    rows: list[tuple] = [(b"k0", f"hello {codec}".encode(), T0, ())]
    for i in range(1, 6):
        headers: tuple[Header, ...] = ()
        if with_headers and (i - 1) % 2 == 0:
            headers = (Header("h1", f"v{i - 1}".encode()), Header("null-header", None))
        rows.append((f"k{i}".encode(), f"value-{i}-{codec}".encode(), T0 + 1000 + i - 1, headers))
    rows += [
        (None, b"no-key", T0 + 2000, ()),
        (b"null-value", None, T0 + 2001, ()),
        (b"empty-value", b"", T0 + 2002, ()),
    ]
    for i in range(100):
        rows.append(
            (
                f"key-{i:03d}".encode(),
                f"the quick brown fox {i:03d} jumps over the lazy dog".encode(),
                T0 + 3000 + i,
                (),
            )
        )
    return rows


@pytest.mark.parametrize("codec", CODECS)
def test_java_v2_scenario(codec: str) -> None:
    path = JAVA / f"v2-{codec}-0" / "00000000000000000000.log"
    batches = list(LogReader.open(path, verify_crc=True))
    assert [b.compression.label for b in batches] == [codec] * 5
    assert [b.partition_leader_epoch for b in batches] == [0, 0, 0, 1, 1]
    recs = [r for b in batches for r in b.records()]
    expected = _scenario(codec, with_headers=True)
    expected += [
        (b"ts-a", b"max-ts-is-first", T0 + 10000, ()),
        (b"ts-b", b"older", T0 + 5000, ()),
        (b"ts-c", b"middle", T0 + 9000, ()),
    ]
    assert [(r.key, r.value, r.timestamp, r.headers) for r in recs] == expected
    assert [r.offset for r in recs] == list(range(112))
    last = batches[-1]
    # baseTimestamp is the first record's, not the minimum; maxTimestamp the maximum
    assert (last.base_timestamp, last.max_timestamp) == (T0 + 10000, T0 + 10000)
    table = decode_arrow(path.read_bytes(), include_headers=True)
    assert table.column("key").to_pylist() == [e[0] for e in expected]
    assert table.column("value").to_pylist() == [e[1] for e in expected]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
def test_java_legacy_scenarios(codec: str) -> None:
    for magic in (0, 1):
        path = JAVA / f"v{magic}-{codec}-0" / "00000000000000000000.log"
        recs = _records(path)
        expected = _scenario(codec, with_headers=False)
        expected += [
            (b"ts-a", b"max-ts-is-first", T0 + 10000, ()),
            (b"ts-b", b"older", T0 + 5000, ()),
            (b"ts-c", b"middle", T0 + 9000, ()),
        ]
        if magic == 0:
            expected = [(k, v, -1, h) for k, v, _, h in expected]
        assert [(r.key, r.value, r.timestamp, r.headers) for r in recs] == expected
        assert [r.offset for r in recs] == list(range(112))


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
def test_kafka_0_9_broker_scenario(codec: str) -> None:
    recs = _records(BROKER09 / f"v0-{codec}-0" / "00000000000000000000.log")
    expected = [(k, v) for k, v, _, _ in _scenario(codec, with_headers=False)]
    assert [(r.key, r.value) for r in recs] == expected
    assert [r.offset for r in recs] == list(range(109))
    assert {r.timestamp for r in recs} == {-1}


def test_java_transactions_and_markers() -> None:
    markers = []
    for name in ("00000000000000000000.log", "00000000000000000020.log"):
        for b in LogReader.open(JAVA / "v2-txn-0" / name, verify_crc=True):
            if b.is_control:
                c = b.control_record()
                markers.append((b.base_offset, b.producer_id, c.type, c.coordinator_epoch))
                assert b.attributes == 0x30 and b.base_sequence == -1
    assert markers == [
        (9, 2000, ControlType.COMMIT, 7),
        (13, 2001, ControlType.ABORT, 7),
        (27, 2002, ControlType.ABORT, 8),
        (28, 2003, ControlType.COMMIT, 8),
    ]


def test_java_idempotent_sequences() -> None:
    batches = [
        b
        for name in ("00000000000000000000", "00000000000000000015", "00000000000000000030")
        for b in LogReader.open(JAVA / "v2-idempotent-0" / f"{name}.log", verify_crc=True)
    ]
    pid1000 = [b for b in batches if b.producer_id == 1000]
    assert len(pid1000) == 12
    assert [b.base_sequence for b in pid1000] == list(range(0, 36, 3))
    assert all(b.records_count == 3 and b.compression is Compression.LZ4 for b in pid1000)
    assert [r.sequence for r in pid1000[1].records()] == [3, 4, 5]
    (last,) = [b for b in batches if b.producer_id == 1001]
    assert (last.producer_epoch, last.base_sequence, last.records_count) == (3, 0, 1)


def test_java_log_append_time() -> None:
    batches = list(
        LogReader.open(JAVA / "v2-logappendtime-0" / "00000000000000000000.log", verify_crc=True)
    )
    assert all(b.timestamp_type is TimestampType.LOG_APPEND_TIME for b in batches)
    for b in batches:
        # every record reads the broker's append time, whatever the producer wrote
        assert {r.timestamp for r in b.records()} == {b.max_timestamp}
        assert b.base_timestamp < b.max_timestamp


def test_spec_vectors_round_trip() -> None:
    v2 = bytes.fromhex(
        "0000000000000064000000600000000702bfafce330000000000020000018bcfe568000000018bcfe568"
        "7bffffffffffffffffffffffffffff0000000320000000086b6579310c76616c756531002600f6010201"
        "04763204046831047631046832011200cf0f04046b330100"
    )
    batch = RecordBatch.parse(v2)
    batch.ensure_valid()
    recs = batch.records()
    assert [(r.offset, r.timestamp, r.key, r.value) for r in recs] == [
        (100, T0, b"key1", b"value1"),
        (101, T0 + 123, None, b"v2"),
        (102, T0 - 1000, b"k3", None),
    ]
    assert recs[1].headers == (Header("h1", b"v1"), Header("h2", None))
    assert encode_batch(recs, base_offset=100, partition_leader_epoch=7) == v2
    ctl = bytes.fromhex(
        "000000000000005a0000004200000004025c849e380030000000000000018e9b26e0000000018e9b26e0"
        "0000000000000010920003ffffffff000000012000000008000000010c00000000000900"
    )
    ours = encode_control_batch(
        ControlType.COMMIT,
        offset=90,
        timestamp=1712000000000,
        producer_id=4242,
        producer_epoch=3,
        coordinator_epoch=9,
        partition_leader_epoch=4,
    )
    assert ours == ctl
    assert RecordBatch.parse(ctl).control_record().coordinator_epoch == 9


def test_rskafka_librdkafka_vectors() -> None:
    base = FIXTURES / "rskafka-librdkafka-java-vectors"
    for name in ("gzip", "lz4", "snappy", "zstd", "nocompression", "snappy_java"):
        recs = _records(base / f"rskafka_{name}.bin")
        key = b"" if name == "nocompression" else b"x" * 100
        assert (recs[0].key, recs[0].value) == (key, b"hello kafka")
        assert recs[0].headers == (Header("foo", b"bar"),)
        if name == "snappy_java":
            assert recs[1].value == b"some value"
    (null_key,) = _records(base / "rskafka_null_key.bin")
    assert null_key.key is None


def test_kafka_python_real_broker_vectors() -> None:
    base = FIXTURES / "kafka-python-real-broker-vectors"
    v2 = list(LogReader.open(base / "record_batch_data_v2.bin", verify_crc=True))
    recs = [r for b in v2 for r in b.records()]
    assert [r.value for r in recs] == [b"123", b"", b"", b"123", b"hdr"]
    assert recs[-1].headers == (Header("hkey", b"hval"),)
    assert (v2[0].partition_leader_epoch, recs[0].timestamp) == (1, 1503229838908)
    assert sum(b.size_in_bytes for b in v2) == 299
    for magic, first_crc in ((1, 1199974594), (0, -22012481 & 0xFFFFFFFF)):
        entries = list(LogReader.open(base / f"record_batch_data_v{magic}.bin", verify_crc=True))
        assert [r.value for e in entries for r in e.records()] == [b"123", b"", b"", b"123"]
        assert entries[0].crc == first_crc
    v1 = list(LogReader.open(base / "record_batch_data_v1.bin"))
    assert v1[0].timestamp == 1503648000942


def test_kafkajs_fetch_v4() -> None:
    recs = _records(FIXTURES / "kafkajs-fetch-captures" / "fetch-v4_response--p0.bin")
    assert [(r.offset, r.key, r.value, r.timestamp) for r in recs] == [
        (i, f"key-{i}".encode(), f"some-value-{i}".encode(), 1509827900073) for i in range(3)
    ]
    assert recs[0].headers == (Header("header-key-0", b"header-value-0"),)


def test_kafkajs_single_record_body() -> None:
    """A v2 Record body without its length varint, as kafkajs' unit test keeps it."""
    body = (FIXTURES / "kafkajs-client-encoded" / "recordBatch-v0_record.bin").read_bytes()
    framed = bytearray()
    write_varint(framed, len(body))
    framed += body
    rec, end = _decode_record(bytes(framed), 0, len(framed), 0, 0, -1)
    assert end == len(framed)
    assert (rec.key, rec.value) == (b"key-0", b"some-value-0")
    # kafkajs' fixture repeats the key "header-key-1" for the third header (its test builds
    # the headers from an object literal with that typo); the bytes say so, so do we.
    assert rec.headers == (
        Header("header-key-0", b"header-value-0"),
        Header("header-key-1", b"header-value-1"),
        Header("header-key-1", b"header-value-2"),
    )


@pytest.mark.parametrize(
    "name",
    ["uncompressed_record", "gzipped_record", "snappy_compressed_record", "lz4_compressed_record"],
)
def test_sarama_vectors(name: str) -> None:
    (batch,) = LogReader.open(FIXTURES / "sarama-client-vectors" / f"record_test--{name}.bin")
    batch.ensure_valid()
    (rec,) = batch.records()
    assert (rec.key, rec.value) == (bytes([1, 2, 3, 4]), bytes([5, 6, 7]))
    assert rec.headers == (Header("\x08\x09\x0a", bytes([11, 12])),)
    assert (batch.base_timestamp, batch.max_timestamp) == (1479847795000, 0)
    assert rec.timestamp == 1479847795000 + 5
