"""Tests for tests/provenance.py, the parser of fixtures/PROVENANCE.md bullet lines."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import os
import re
import struct
from collections import Counter
from pathlib import Path

import pytest

try:
    import provenance as prov
except ImportError:  # pragma: no cover - if tests/ ever becomes a package
    from tests import provenance as prov  # type: ignore[no-redef,import-not-found,unused-ignore]

FIX = prov.FIXTURES
JAVA = "kafka-4.0-snapshot-javacode"
WILLIAM = "real-kafka2.1-snapshot-zk-large-index-william0423"
FLINK = "real-cp7.6.0-kafka3.6-kraft-lz4-flink-on-prem"
SEANORTH = "real-kafka2.8.0-zk-snappy-seanorth"
BIGGERBRAIN = "real-kafka3.9-snapshot-zk-gzip-leader-epochs-biggerbrain"
RSKAFKA = "rskafka-librdkafka-java-vectors"

# Files on disk (relative to FIXTURES, PROVENANCE.md excluded) that no bullet describes.
# Currently none; if this changes, the test below shows exactly which files.
KNOWN_UNDESCRIBED: frozenset[str] = frozenset()

# Number of described files per kind, as of this PROVENANCE.md (a change should be noticed).
EXPECTED_KIND_COUNTS: dict[str, int] = {
    "log": 141,
    "text": 124,
    "index": 87,
    "snapshot": 51,
    "timeindex": 50,
    "empty": 13,
    "other": 8,
    "binary": 3,
    "txnindex": 2,
    "record-body": 1,
}

# Part II log lines without "CRC failures N, decode errors N" (kafka-python v0/v1 vectors).
NO_CRC_STATEMENT: frozenset[str] = frozenset(
    {
        "kafka-python-real-broker-vectors/record_batch_data_v0.bin",
        "kafka-python-real-broker-vectors/record_batch_data_v1.bin",
    }
)

pytestmark = pytest.mark.skipif(
    not prov.PROVENANCE_MD.is_file(), reason=f"fixtures not found at {FIX}"
)


def _provenance_text() -> str:
    return prov.PROVENANCE_MD.read_text(encoding="utf-8")


def _facts(rel: str) -> prov.FileFacts:
    return prov.get(rel)


# ---------------------------------------------------------------------------------------------
# coverage: every bullet that names a file is parsed, nothing is skipped silently


def test_fixtures_root_default() -> None:
    expected = Path(prov.__file__).resolve().parent / "fixtures"
    if not os.environ.get("KAFKALOG_FIXTURES"):
        assert expected == FIX
    assert prov.PROVENANCE_MD == FIX / "PROVENANCE.md"


def test_every_file_bullet_is_parsed() -> None:
    lines = _provenance_text().splitlines()
    # Independent, deliberately loose detection of "a list item that names a file with a size".
    loose = re.compile(r"^\s*[-*+]\s+`[^`]+`\s*\(\s*\d+\s*B\b")
    file_bullets = {no: line for no, line in enumerate(lines, 1) if loose.match(line)}
    dash_bullets = {no: line for no, line in enumerate(lines, 1) if line.startswith("- ")}
    facts = prov.load()
    assert len(file_bullets) == len(facts) == 480
    assert dash_bullets == file_bullets  # every "- " line is a file bullet, and vice versa
    assert {f.line_no: f.raw for f in facts.values()} == file_bullets
    assert dict(prov.iter_bullets(_provenance_text())) == dash_bullets


def test_kind_counts() -> None:
    counts = Counter(f.kind for f in prov.load().values())
    assert dict(counts) == EXPECTED_KIND_COUNTS
    assert set(counts) <= set(prov.KINDS)
    for kind in counts:
        assert len(prov.by_kind(kind)) == counts[kind]
    assert len(prov.logs()) == counts["log"]
    assert len(prov.indexes()) == counts["index"]
    assert len(prov.timeindexes()) == counts["timeindex"]
    assert len(prov.txnindexes()) == counts["txnindex"]
    assert len(prov.snapshots()) == counts["snapshot"]
    assert len(prov.texts()) == counts["text"]
    assert len(prov.preallocated()) == counts["other"]


def test_load_is_cached() -> None:
    assert prov.load() is prov.load()


_SECTION = "## 1. `setA/` — test\n"


@pytest.mark.parametrize(
    "bullet",
    [
        # header shape
        "- `x.log` 10 B: 1 entries/batches (v2/none:1)",
        "- `x.log` (10 B, sha256 zz…): 1 entries/batches (v2/none:1)",
        "- `../x.log` (10 B, sha256 ab…): binary",
        # unknown description shape
        "- `x.log` (10 B, sha256 ab…): something new",
        # unknown / malformed log segments
        "- `x.log` (10 B, sha256 ab…): 1 entries/batches (v2/none:1); offsets 0..0; wibble 3",
        "- `x.log` (10 B, sha256 ab…): 1 entries/batches (v2/none:1); offsets 0..x",
        "- `x.log` (10 B, sha256 ab…): 1 entries/batches (v2/none:1); offsets 0..0; offsets 1..1",
        "- `x.log` (10 B, sha256 ab…): 1 entries/batches (v2/none=1)",
        "- `x.log` (10 B, sha256 ab…): 1 entries/batches (v2/none:1); producerIds [1, x]",
        "- `x.log` (10 B, sha256 ab…): 1 batches/entries, 1 records, magic [2], codecs ['none']; "
        "CRC failures 0, decode errors 0; first record key='a' value=? headers=[]",
        "- `x.log` (10 B, sha256 ab…): 1 batches/entries, 1 records, magic [2], codecs ['none']; "
        "first record key='hex:abc' value=None headers=[]",
        "- `x.log` (10 B, sha256 ab…): 1 batches/entries, 1 records, magic [2], codecs ['none']; "
        "first record key='a' value=None headers=[('k',)]",
        # index / timeindex / txnindex / snapshot
        "- `x.index` (16 B, sha256 ab…): 2 entries: rel=1 (abs 1) pos=0; rel=oops",
        "- `x.index` (8 B, sha256 ab…): 1 entries: rel=1 (abs 1) pos=0; rel=2 (abs 2) pos=9",
        "- `x.index` (8 B, sha256 ab…): 1 entries: ts=1 rel=1 (abs 1)",
        "- `x.log` (0 B, sha256 ab…): 0 entries",
        "- `x.index` (8 B, sha256 ab…): 1 entries (abs offset, pos): [(1, 2, 3)]",
        "- `x.timeindex` (8 B, sha256 ab…): 1 entries (abs offset, pos): [(1, 2)]",
        "- `x.txnindex` (34 B, sha256 ab…): 1 aborted-txn entries: version=0 pid=1",
        "- `x.snapshot` (10 B, sha256 ab…): producer-state snapshot v1, 1 producer entries: "
        "producerId=1",
        "- `x.snapshot` (10 B, sha256 ab…): producer-state snapshot v1 crc_ok=maybe, 0 entries",
        "- `x.log` (10 B, sha256 ab…): empty (0 bytes)",
    ],
)
def test_unparseable_bullet_raises(bullet: str, tmp_path: Path) -> None:
    with pytest.raises(prov.ProvenanceParseError) as info:
        prov.parse_provenance(_SECTION + bullet + "\n", tmp_path)
    assert info.value.line_no == 2


def test_structural_errors_raise(tmp_path: Path) -> None:
    ok = "- `x.bin` (3 B, sha256 ab…): binary\n"
    with pytest.raises(prov.ProvenanceParseError, match="outside a numbered"):
        prov.parse_provenance(ok, tmp_path)
    with pytest.raises(prov.ProvenanceParseError, match="outside a numbered"):
        prov.parse_provenance(_SECTION + "## Notes\n" + ok, tmp_path)
    with pytest.raises(prov.ProvenanceParseError, match="already described"):
        prov.parse_provenance(_SECTION + ok + ok, tmp_path)
    two = "## 7. `setA/` and `setB/`\n"
    with pytest.raises(prov.ProvenanceParseError, match="exists in none"):
        prov.parse_provenance(two + ok, tmp_path)
    for d in ("setA", "setB"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "x.bin").write_bytes(b"abc")
    with pytest.raises(prov.ProvenanceParseError, match="several set dirs"):
        prov.parse_provenance(two + ok, tmp_path)
    (tmp_path / "setA" / "x.bin").unlink()
    facts = prov.parse_provenance(two + ok, tmp_path)
    assert list(facts) == ["setB/x.bin"]
    assert facts["setB/x.bin"].path == tmp_path / "setB" / "x.bin"
    assert facts["setB/x.bin"].kind == "binary"


# ---------------------------------------------------------------------------------------------
# parsed facts agree with the files on disk


def test_every_described_file_exists_with_size_and_sha256() -> None:
    problems: list[str] = []
    for f in prov.load().values():
        assert f.path == FIX / f.rel
        if not f.path.is_file():
            problems.append(f"missing: {f.rel}")
            continue
        data = f.path.read_bytes()
        if len(data) != f.size:
            problems.append(f"size {len(data)} != {f.size}: {f.rel}")
        assert len(f.sha256_prefix) >= 8
        if not hashlib.sha256(data).hexdigest().startswith(f.sha256_prefix):
            problems.append(f"sha256 prefix {f.sha256_prefix} mismatch: {f.rel}")
    assert problems == []


def test_every_disk_file_is_described() -> None:
    on_disk = {p.relative_to(FIX).as_posix() for p in FIX.rglob("*") if p.is_file()} - {
        "PROVENANCE.md"
    }
    described = set(prov.load())
    assert on_disk - described == KNOWN_UNDESCRIBED
    assert described - on_disk == set()


def test_text_files_match_disk() -> None:
    for f in prov.texts():
        assert f.text is not None
        joined = " | ".join(f.path.read_text(encoding="utf-8").splitlines())
        if f.text_maybe_truncated:
            assert len(f.text) == prov.TEXT_CUTOFF, f.rel
            assert joined.startswith(f.text), f.rel
            assert len(joined) > len(f.text), f.rel
        else:
            assert joined == f.text, f.rel
    for f in prov.by_kind("empty"):
        assert f.size == 0 and f.path.stat().st_size == 0


def test_index_listings_agree_with_file_bytes() -> None:
    for f in prov.indexes() + prov.timeindexes():
        width = 8 if f.kind == "index" else 12
        data = f.path.read_bytes()
        assert f.entry_count is not None and f.index_entries is not None
        assert len(data) == width * f.entry_count, f.rel
        base = f.base_offset
        assert base is not None, f.rel
        actual: list[tuple[int, int]] = []
        for i in range(0, len(data), width):
            if f.kind == "index":
                rel, pos = struct.unpack_from(">ii", data, i)
                actual.append((base + rel, pos))
            else:
                ts, rel = struct.unpack_from(">qi", data, i)
                actual.append((ts, base + rel))
        head, tail = list(f.index_entries), list(f.index_tail_entries)
        assert actual[: len(head)] == head, f.rel
        assert actual[len(actual) - len(tail) :] == tail, f.rel
        assert f.entries_complete == (len(head) + len(tail) == len(actual) and not tail), f.rel
        if f.index_rel_offsets is not None:  # Part I lines also state rel offsets
            offsets = [e[0] if f.kind == "index" else e[1] for e in head]
            assert [base + r for r in f.index_rel_offsets] == offsets, f.rel


def test_txnindex_listings_agree_with_file_bytes() -> None:
    for f in prov.txnindexes():
        data = f.path.read_bytes()
        assert f.entry_count is not None and f.txn_entries is not None
        assert len(data) == 34 * f.entry_count
        actual = [
            prov.TxnEntry(*struct.unpack_from(">hqqqq", data, i)) for i in range(0, len(data), 34)
        ]
        assert actual[: len(f.txn_entries)] == list(f.txn_entries), f.rel


def test_snapshot_listings_agree_with_file_bytes() -> None:
    for f in prov.snapshots():
        data = f.path.read_bytes()
        assert f.entry_count is not None and f.snapshot_entries is not None
        version, _crc, count = struct.unpack_from(">hIi", data, 0)
        assert (version, count) == (f.snapshot_version, f.entry_count), f.rel
        assert len(data) == 10 + 46 * count, f.rel
        actual = [
            prov.SnapshotEntry(*struct.unpack_from(">qhiqiqiq", data, 10 + 46 * i))
            for i in range(count)
        ]
        listed = list(f.snapshot_entries)
        if f.part == 1:  # Part I lines do not state the timestamp
            actual = [dataclasses.replace(e, timestamp=None) for e in actual]
        assert actual[: len(listed)] == listed, f.rel
        assert f.entries_complete == (len(listed) == count), f.rel


def test_preallocated_gz_files() -> None:
    for f in prov.preallocated():
        assert f.kind == "other" and f.rel.endswith(".preallocated.gz")
        data = gzip.decompress(f.path.read_bytes())
        assert len(data) == f.preallocated_size, f.rel
        blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        assert blob == f.git_blob_sha1, f.rel
        trimmed = Path(str(f.path)[: -len(".preallocated.gz")]).read_bytes()
        assert data.startswith(trimmed), f.rel
        assert data[len(trimmed) :].count(0) == len(data) - len(trimmed), f.rel


def test_log_fact_consistency() -> None:
    for f in prov.logs():
        assert f.batches is not None and f.magics is not None and f.codecs is not None
        if f.part == 1:
            assert f.checksum_failures == 0, f.rel
            assert f.records_v2_only and f.decode_errors is None
            per_codec = sum(n for k, n in f.codec_counts.items() if re.fullmatch(r"v\d/\w+", k))
            assert per_codec == f.batches, f.rel
        else:
            assert f.records is not None and not f.records_v2_only
            if f.rel in NO_CRC_STATEMENT:  # "...; first offset 0" lines state nothing more
                assert (f.checksum_failures, f.decode_errors, f.last_offset) == (None, None, None)
            else:
                assert (f.checksum_failures, f.decode_errors) == (0, 0), f.rel
        for key in ("control", "transactional", "LogAppendTime"):
            assert f.count(key) <= f.batches, f.rel
        if f.first_offset is not None and f.last_offset is not None:
            assert f.first_offset <= f.last_offset, f.rel
        if f.min_timestamp is not None:
            assert f.max_timestamp is not None and f.min_timestamp <= f.max_timestamp, f.rel


# ---------------------------------------------------------------------------------------------
# spot checks, one per line shape


def test_part1_log_v2_txn() -> None:
    f = _facts(f"{JAVA}/v2-txn-0/00000000000000000000.log")
    assert (f.kind, f.part, f.section, f.set_dir) == ("log", 1, 2, JAVA)
    assert f.set_path == "v2-txn-0/00000000000000000000.log"
    assert f.path == FIX / JAVA / "v2-txn-0" / "00000000000000000000.log"
    assert (f.size, f.sha256_prefix) == (1353, "2d627c309b4513af")
    assert f.batches == 11
    assert f.codec_counts == {
        "control": 2,
        "transactional": 9,
        "v2/gzip": 1,
        "v2/none": 7,
        "v2/zstd": 3,
    }
    assert f.magics == (2,) and f.codecs == ("gzip", "none", "zstd")
    assert (f.first_offset, f.last_offset) == (0, 19)
    assert (f.records, f.records_v2_only) == (20, True)
    assert (f.min_timestamp, f.max_timestamp) == (1700000000000, 1700000000102)
    assert f.producer_ids == (2000, 2001, 2002) and not f.producer_ids_truncated
    assert f.leader_epochs == (0, 1)
    assert f.checksum_failures == 0 and f.decode_errors is None
    assert f.trailing_partial is None and f.first_record is None
    assert f.count("control") == 2 and f.count("LogAppendTime") == 0
    assert f.base_offset == 0
    assert f.raw.startswith("- `v2-txn-0/00000000000000000000.log` (1353 B")


def test_part1_log_variants() -> None:
    v0 = _facts("kafka-0.9.0.1-broker/v0-gzip-0/00000000000000000000.log")
    assert v0.codec_counts == {"v0/gzip": 4} and v0.magics == (0,) and v0.codecs == ("gzip",)
    assert v0.records is None and v0.min_timestamp is None and v0.producer_ids is None
    assert (v0.first_offset, v0.last_offset) == (0, 108)

    produce = _facts("kafkajs-client-encoded/produce-v2_request--p0.bin")
    assert (produce.first_offset, produce.last_offset) == (-1, -1)
    assert produce.codec_counts == {"v1/none": 3}

    lz4 = _facts("sarama-client-vectors/message_test--emptyBulkLZ4Message.msgset.bin")
    assert (lz4.min_timestamp, lz4.max_timestamp) == (-6795364578871, -6795364578871)

    lat = _facts(f"{JAVA}/v2-logappendtime-0/00000000000000000000.log")
    assert lat.codec_counts == {"LogAppendTime": 2, "v2/gzip": 1, "v2/none": 1}
    assert lat.count("LogAppendTime") == 2 and lat.codecs == ("gzip", "none")

    mixed = _facts(
        "kafkajs-fetch-captures/fetch-v4_response_mixed_formats--test-mixed-message-formats-0.bin"
    )
    assert mixed.magics == (1, 2) and mixed.batches == 1614
    assert (mixed.records, mixed.records_v2_only) == (814, True)

    big = _facts(f"{JAVA}/v2-bigoffset-0/00000000004294968296.log")
    assert big.base_offset == 4294968296 == big.first_offset


def test_part1_log_partial_message() -> None:
    f = _facts(
        "kafkajs-fetch-captures/"
        "fetch-v2_response_partial_messages_many_partitions--topic-partial-message-0.bin"
    )
    assert f.kind == "log" and f.section == 7 and f.set_dir == "kafkajs-fetch-captures"
    assert f.batches == 0 and f.codec_counts == {} and f.magics == () and f.codecs == ()
    assert f.first_offset is None and f.last_offset is None
    assert f.checksum_failures == 0
    assert f.trailing_partial == (1024, 1773)
    assert f.size == 1024


def test_section7_set_resolution() -> None:
    sec7 = [f for f in prov.load().values() if f.section == 7]
    assert len(sec7) == 36
    for f in sec7:
        expected = (
            "kafkajs-fetch-captures"
            if f.set_path.startswith("fetch-")
            else ("kafkajs-client-encoded")
        )
        assert f.set_dir == expected, f.rel
    assert len(prov.in_set("kafkajs-client-encoded/")) == 10


def test_part2_log_consumer_offsets_28() -> None:
    f = _facts(f"{WILLIAM}/__consumer_offsets-28/00000000000000000000.log")
    assert (f.kind, f.part, f.section) == ("log", 2, 12)
    assert (f.size, f.sha256_prefix) == (1066451, "274a16c700cb3256")
    assert (f.batches, f.records, f.records_v2_only) == (8202, 8202, False)
    assert f.magics == (2,) and f.codecs == ("none",)
    assert (f.first_offset, f.last_offset) == (0, 8201)
    assert (f.min_timestamp, f.max_timestamp) == (1534299389611, 1534312623113)
    assert f.producer_ids == (-1,) and f.leader_epochs == (5,)
    assert f.codec_counts == {}
    assert (f.checksum_failures, f.decode_errors) == (0, 0)
    fr = f.first_record
    assert fr is not None and fr.headers == ()
    assert fr.key is not None and fr.key.exact and fr.key.is_hex
    assert fr.key.data == bytes.fromhex("0002001464656275672d636f6e73756d65722d67726f7570")
    assert fr.key.data.endswith(b"debug-consumer-group")
    assert fr.value is not None and not fr.value.exact and not fr.exact
    assert (fr.value.length, fr.value.unit) == (227, "bytes")
    assert fr.value.data == bytes.fromhex(
        "00020008636f6e73756d657200000001000572616e6765002f636f6e7375"
    )
    assert fr.value.matches(fr.value.data + bytes(227 - len(fr.value.data)))
    assert not fr.value.matches(fr.value.data)  # wrong length
    assert not fr.value.matches(None)


def test_part2_log_counts_and_truncated_lists() -> None:
    lat = _facts(
        f"{FLINK}/_confluent-controlcenter-7-6-0-1-actual-group-consumption-rekey-0/"
        "00000000000000000000.log"
    )
    assert lat.codec_counts == {"LogAppendTime": 487} and lat.codecs == ("lz4",)
    assert lat.producer_ids == (0, 18)

    ctrl = _facts(
        "real-kafka3.7.0-kraft-ldi-poc-metadata-indexes/__cluster_metadata-0/"
        "00000000000000000000.log"
    )
    assert ctrl.codec_counts == {"control": 1} and (ctrl.batches, ctrl.records) == (4814, 4929)
    fr = ctrl.first_record
    assert fr is not None and fr.exact
    assert fr.key is not None and fr.key.data == b"\x00\x00\x00\x02"

    bb = _facts(f"{BIGGERBRAIN}/lsx1-0/00000000000000000000.log")
    assert bb.codecs == ("gzip", "none")
    assert bb.producer_ids == (-1, 0, 1, 2, 3, 4, 5, 6) and bb.producer_ids_truncated
    assert bb.leader_epochs == (0, 1, 3, 5, 6) and not bb.leader_epochs_truncated
    fr = bb.first_record
    assert fr is not None and fr.key is None
    assert fr.value is not None and fr.value.exact and fr.value.data == b""
    assert [(k, v.data if v else None) for k, v in fr.headers] == [
        ("app.name", b"IntellijKafkaPlugin")
    ]
    assert prov.field_matches(fr.key, None) and not prov.field_matches(fr.key, b"")
    assert prov.field_matches(fr.value, b"")

    kp = _facts("kafka-python-real-broker-vectors/record_batch_data_v0.bin")
    assert (kp.batches, kp.records, kp.magics, kp.codecs) == (4, 4, (0,), ("none",))
    assert (kp.first_offset, kp.last_offset) == (0, None)
    assert kp.min_timestamp is None and kp.first_record is None and kp.checksum_failures is None

    kp2 = _facts("kafka-python-real-broker-vectors/record_batch_data_v2.bin")
    assert kp2.first_record is not None and kp2.first_record.key is None
    assert kp2.first_record.value is not None and kp2.first_record.value.data == b"123"


def test_part2_log_abbreviated_text_fields() -> None:
    gz = _facts(f"{RSKAFKA}/rskafka_gzip.bin")
    fr = gz.first_record
    assert fr is not None and fr.key is not None and fr.value is not None
    assert not fr.key.exact and fr.key.unit == "chars" and fr.key.length == 100
    assert fr.key.data == b"x" * 30 and fr.key.text == "x" * 30
    assert fr.key.matches(b"x" * 100) and not fr.key.matches(b"x" * 99)
    assert fr.value.exact and fr.value.data == b"hello kafka"
    assert [(k, v.data if v else None) for k, v in fr.headers] == [("foo", b"bar")]

    nk = _facts(f"{RSKAFKA}/rskafka_null_key.bin").first_record
    assert nk is not None and nk.key is None
    assert (
        nk.value is not None
        and nk.value.is_hex
        and (nk.value.length, nk.value.exact)
        == (
            103,
            False,
        )
    )
    (k1, v1), (k2, v2) = nk.headers
    assert k1 == "content-type" and v1 is not None and not v1.exact
    assert (v1.data, v1.length, v1.unit) == (b"application/x-protob", 82, "chars")
    assert k2 == "iox-namespace" and v2 is not None and v2.exact and v2.data == b"namespace"

    empty_key = _facts(f"{RSKAFKA}/rskafka_nocompression.bin").first_record
    assert empty_key is not None and empty_key.key is not None
    assert empty_key.key.exact and empty_key.key.data == b""

    st = _facts(f"{SEANORTH}/some-topic-0/00000000000000000000.log").first_record
    assert st is not None and st.value is not None
    assert st.value.exact and st.value.data == b'{"item":"book","price":"23.9"}'


def test_part1_index() -> None:
    f = _facts("kafka-0.9.0.1-broker/v0-segments-0/00000000000000000012.index")
    assert f.kind == "index" and f.base_offset == 12
    assert f.entry_count == 3 and f.entries_complete
    assert f.index_entries == ((15, 246), (18, 492), (21, 738))
    assert f.index_rel_offsets == (3, 6, 9) and f.index_tail_entries == ()

    t = _facts(f"{JAVA}/v2-txn-0/00000000000000000000.index")
    assert t.entry_count == 8 and not t.entries_complete
    assert t.index_entries == ((4, 123), (6, 271), (8, 386), (9, 505))

    e = _facts("kafka-0.9.0.1-broker/v0-none-0/00000000000000000000.index")
    assert (e.entry_count, e.entries_complete, e.index_entries) == (0, True, ())


def test_part1_timeindex() -> None:
    f = _facts(f"{JAVA}/v2-txn-0/00000000000000000000.timeindex")
    assert f.kind == "timeindex" and f.entry_count == 8 and not f.entries_complete
    assert f.index_entries == ((1700000000012, 4), (1700000000021, 6), (1700000000031, 8))
    assert f.index_rel_offsets == (4, 6, 8)

    g = _facts(f"{JAVA}/v1-none-0/00000000000000000000.timeindex")
    assert g.entries_complete and g.index_entries == ((1700000002002, 8), (1700000010000, 109))

    e = _facts(f"{JAVA}/v0-gzip-0/00000000000000000000.timeindex")
    assert (e.kind, e.entry_count, e.entries_complete) == ("timeindex", 0, True)


def test_part2_index_and_timeindex() -> None:
    idx = _facts(f"{WILLIAM}/__consumer_offsets-28/00000000000000000000.index")
    assert idx.kind == "index" and idx.entry_count == 254 and not idx.entries_complete
    assert idx.index_entries == ((31, 4221), (63, 8381), (95, 12541), (127, 16701))
    assert idx.index_tail_entries == ((8147, 1059301), (8179, 1063461))
    assert idx.index_rel_offsets is None

    ti = _facts(f"{WILLIAM}/__consumer_offsets-28/00000000000000000000.timeindex")
    assert ti.kind == "timeindex" and ti.entry_count == 258 and not ti.entries_complete
    assert ti.index_entries == ((1534299420753, 31), (1534299452843, 63), (1534299484913, 95))
    assert ti.index_tail_entries == ((1534312623113, 8201),)

    full = _facts(f"{SEANORTH}/__consumer_offsets-16/00000000000000000000.index")
    assert full.entries_complete and full.index_entries == ((37, 7581), (53, 11780))

    empty = _facts(f"{SEANORTH}/some-topic-0/00000000000000000000.timeindex")
    assert (empty.entry_count, empty.entries_complete, empty.index_entries) == (0, True, ())


def test_txnindex() -> None:
    a = _facts(f"{JAVA}/v2-txn-0/00000000000000000000.txnindex")
    assert a.kind == "txnindex" and a.entry_count == 1 and a.entries_complete
    assert a.txn_entries == (prov.TxnEntry(0, 2001, 5, 13, 14),)
    b = _facts(f"{JAVA}/v2-txn-0/00000000000000000020.txnindex")
    assert b.txn_entries == (
        prov.TxnEntry(version=0, pid=2002, first_offset=14, last_offset=27, last_stable_offset=26),
    )


def test_part1_snapshot() -> None:
    f = _facts(f"{JAVA}/v2-idempotent-0/00000000000000000037.snapshot")
    assert f.kind == "snapshot" and f.snapshot_version == 1 and f.snapshot_crc_ok is None
    assert f.entry_count == 2 and f.entries_complete
    assert f.snapshot_entries == (
        prov.SnapshotEntry(1000, 0, 35, 35, 2, None, -1, -1),
        prov.SnapshotEntry(1001, 3, 0, 36, 0, None, -1, -1),
    )
    txn = _facts(f"{JAVA}/v2-txn-0/00000000000000000020.snapshot")
    assert txn.snapshot_entries is not None
    assert txn.snapshot_entries[2].current_txn_first_offset == 14
    # "5 producer entries" but only 3 listed (no "..." marker): a partial listing
    partial = _facts(f"{JAVA}/v2-txn-0/00000000000000000030.snapshot")
    assert partial.entry_count == 5 and partial.snapshot_entries is not None
    assert len(partial.snapshot_entries) == 3 and not partial.entries_complete
    empty = _facts(f"{JAVA}/v2-none-0/00000000000000000112.snapshot")
    assert (empty.entry_count, empty.entries_complete, empty.snapshot_entries) == (0, True, ())


def test_part2_snapshot() -> None:
    f = _facts(f"{FLINK}/_confluent-command-0/00000000000000000002.snapshot")
    assert f.kind == "snapshot" and (f.snapshot_version, f.snapshot_crc_ok) == (1, True)
    assert f.entry_count == 2 and f.entries_complete
    assert f.snapshot_entries == (
        prov.SnapshotEntry(2, 0, 0, 0, 0, 1713533417572, -1, -1),
        prov.SnapshotEntry(20, 0, 0, 1, 0, 1713533831230, -1, -1),
    )
    mon = _facts(f"{FLINK}/_confluent-monitoring-0/00000000000000002827.snapshot")
    assert mon.entry_count == 5 and mon.snapshot_entries is not None
    assert len(mon.snapshot_entries) == 3 and not mon.entries_complete
    empty = _facts(f"{WILLIAM}/__consumer_offsets-28/00000000000000008202.snapshot")
    assert (empty.entry_count, empty.entries_complete, empty.snapshot_entries) == (0, True, ())


def test_text_empty_binary_and_other_kinds() -> None:
    t = _facts("kafka-0.9.0.1-broker/cleaner-offset-checkpoint")
    assert t.kind == "text" and t.text == "0 | 2 | v0-compact 0 80 | v0-compact-gzip 0 80"
    assert not t.text_maybe_truncated

    trunc = _facts("kafka-0.9.0.1-broker/recovery-point-offset-checkpoint")
    assert trunc.text is not None and trunc.text_maybe_truncated
    assert trunc.text.endswith("| v0-sna")

    blank = _facts(f"{FLINK}/.kafka_cleanshutdown")
    assert (blank.kind, blank.text, blank.size) == ("text", "", 0)
    assert _facts("kafka-0.9.0.1-broker/.kafka_cleanshutdown").kind == "empty"

    assert _facts(f"{FLINK}/bootstrap.checkpoint").kind == "binary"
    assert _facts("kafkajs-client-encoded/recordBatch-v0_record.bin").kind == "record-body"

    gz = _facts(f"{SEANORTH}/__consumer_offsets-16/00000000000000000000.index.preallocated.gz")
    assert gz.kind == "other" and gz.preallocated_size == 10485760
    assert gz.git_blob_sha1 == "5eea2b5f5c8d552d7760b80a70d61a9cef067bfd"

    ckpt = _facts(
        "real-kraft-ronem123/__cluster_metadata-0/00000000000001734780-0000000001.checkpoint"
    )
    assert ckpt.kind == "log" and ckpt.codec_counts == {"control": 2, "v2/none": 3}
    assert ckpt.base_offset == 1734780
