"""``kafkalog dump`` on index files, transaction indexes and producer snapshots (spec §9.2).

The tests run the command's ``main`` in this process (``clirun.kafkalog_here``: the output and exit
status a user gets, without an interpreter start per call); one runs it as a real process from
the segment's directory. The fixture files are Kafka-written; their entries come from
PROVENANCE.md (through ``provenance``), not from kafkalog itself.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from clirun import kafkalog_here as kafkalog
from provenance import FIXTURES, FileFacts, by_kind

JAVACODE = FIXTURES / "kafka-4.0-snapshot-javacode"
IDEMPOTENT = JAVACODE / "v2-idempotent-0"
SEG0 = "00000000000000000000"

# The v2_none vector of spec §12 (offsets 100..102), as in test_cli_dump.py.
V2_NONE = bytes.fromhex(
    "0000000000000064000000600000000702bfafce330000000000020000018bcfe568000000018bcfe568"
    "7bffffffffffffffffffffffffffff0000000320000000086b6579310c76616c756531002600f6010201"
    "04763204046831047631046832011200cf0f04046b330100"
)


def sections(stdout: str) -> dict[str, list[str]]:
    """The output lines of each file, keyed by the path printed in its ``Dumping`` line."""
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in stdout.splitlines():
        if line.startswith("Dumping "):
            current = out.setdefault(line[len("Dumping ") :], [])
        else:
            assert current is not None, line
            current.append(line)
    return out


def state(paths: list[Path]) -> dict[Path, tuple[str, int, int]]:
    """Content hash, size and mtime of files, to show that dumping changed nothing."""
    out = {}
    for p in paths:
        st = p.stat()
        out[p] = (hashlib.sha256(p.read_bytes()).hexdigest(), st.st_size, st.st_mtime_ns)
    return out


def segment_files(facts: list[FileFacts]) -> list[Path]:
    """The fixture files and every sibling file of their segments (.log, .index, ...)."""
    paths: set[Path] = set()
    for f in facts:
        stem = f.path.name.split(".")[0]
        paths.update(p for p in f.path.parent.iterdir() if p.name.split(".")[0] == stem)
    return sorted(paths)


def index_facts(kind: str) -> list[FileFacts]:
    return sorted(by_kind(kind), key=lambda f: f.rel)


@functools.cache
def dumped(kind: str) -> tuple[dict[str, list[str]], str]:
    """One run over every fixture file of a kind: (output sections, stderr)."""
    files = [str(f.path) for f in index_facts(kind)]
    result = kafkalog("dump", "--files", ",".join(files))
    assert result.returncode == 0, result.stderr
    return sections(result.stdout), result.stderr


def ids(facts: list[FileFacts]) -> list[str]:
    return [f.rel for f in facts]


# -- .index ------------------------------------------------------------------------------------
INDEXES = index_facts("index")


@pytest.mark.parametrize("facts", INDEXES, ids=ids(INDEXES))
def test_index_lists_every_entry(facts: FileFacts) -> None:
    lines = dumped("index")[0][str(facts.path)]
    if facts.entry_count == 0:
        assert lines == [f"{facts.path} is empty."]
        return
    expected = [f"offset: {o} position: {p}" for o, p in facts.index_entries or ()]
    tail = [f"offset: {o} position: {p}" for o, p in facts.index_tail_entries]
    assert len(lines) == facts.entry_count  # Kafka trimmed these files: every slot is an entry
    assert lines[: len(expected)] == expected
    assert lines[len(lines) - len(tail) :] == tail
    if facts.entries_complete:
        assert lines == expected


HEALTHY_INDEXES = [
    JAVACODE / "v2-txn-0" / f"{SEG0}.index",
    JAVACODE / "v2-txn-0" / "00000000000000000020.index",
    IDEMPOTENT / f"{SEG0}.index",
    IDEMPOTENT / "00000000000000000015.index",
    JAVACODE / "v2-bigoffset-0" / "00000000004294968296.index",
    JAVACODE / "v2-none-0" / f"{SEG0}.index",
    FIXTURES
    / "real-cp7.6.0-kafka3.6-kraft-lz4-flink-on-prem"
    / "_confluent-monitoring-0"
    / f"{SEG0}.index",
    FIXTURES
    / "real-kafka2.1-snapshot-zk-large-index-william0423"
    / "__consumer_offsets-28"
    / f"{SEG0}.index",
    FIXTURES
    / "real-kafka3.7.0-kraft-ldi-poc-metadata-indexes"
    / "__cluster_metadata-0"
    / f"{SEG0}.index",
    FIXTURES / "real-kraft-ronem123" / "__cluster_metadata-0" / "00000000000001725413.index",
]


def test_healthy_kafka_segments_verify_without_mismatch() -> None:
    files = [str(p) for p in HEALTHY_INDEXES]
    for flags in ([], ["--verify-index-only"]):
        result = kafkalog("dump", *flags, "--files", ",".join(files))
        assert result.returncode == 0, result.stderr
        assert result.stderr == ""
        out = sections(result.stdout)
        assert list(out) == files
        if flags:
            assert all(lines == [] for lines in out.values())
        else:
            assert all(lines for lines in out.values())


def test_multi_batch_append_mismatch_quirk() -> None:
    """Spec §9.2 [quirk]: an entry keyed by the last offset of a multi-batch append points at its
    first batch, so Kafka's own check reports it; newest mismatch first."""
    index = JAVACODE / "v0-none-0" / f"{SEG0}.index"
    result = kafkalog("dump", "--files", str(index))
    assert result.returncode == 0
    assert result.stdout.splitlines()[1:] == [
        "offset: 108 position: 343",
        "offset: 111 position: 8343",
    ]
    assert result.stderr.splitlines() == [
        f"Mismatches in :{index}",
        "  Index offset: 111, log offset: 109",
        "  Index offset: 108, log offset: 9",
    ]


def write_index(path: Path, base: int, entries: list[tuple[int, int]]) -> None:
    path.write_bytes(b"".join(struct.pack(">ii", o - base, p) for o, p in entries))


def idempotent_copy(tmp_path: Path) -> Path:
    """A copy of a Kafka-written segment whose batches are 0-2@0, 3-5@191, 6-8@382, 9-11@573,
    12-14@771 (max timestamps 1700000000002 + 100 * batch number)."""
    shutil.copy(IDEMPOTENT / f"{SEG0}.log", tmp_path / f"{SEG0}.log")
    return tmp_path / f"{SEG0}.log"


def test_crafted_index_pointing_at_wrong_positions(tmp_path: Path) -> None:
    idempotent_copy(tmp_path)
    index = tmp_path / f"{SEG0}.index"
    write_index(index, 0, [(5, 191), (8, 191), (11, 382), (14, 771)])
    before = state([index, tmp_path / f"{SEG0}.log"])
    result = kafkalog("dump", "--files", str(index))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"Dumping {index}",
        "offset: 5 position: 191",
        "offset: 8 position: 191",
        "offset: 11 position: 382",
        "offset: 14 position: 771",
    ]
    assert result.stderr.splitlines() == [
        f"Mismatches in :{index}",
        "  Index offset: 11, log offset: 8",
        "  Index offset: 8, log offset: 5",
    ]
    only = kafkalog("dump", "--verify-index-only", "--files", str(index))
    assert only.stdout.splitlines() == [f"Dumping {index}"]
    assert only.stderr == result.stderr
    assert state([index, tmp_path / f"{SEG0}.log"]) == before


def test_mismatch_path_is_absolute(tmp_path: Path) -> None:
    idempotent_copy(tmp_path)
    write_index(tmp_path / f"{SEG0}.index", 0, [(8, 191)])
    result = subprocess.run(
        [sys.executable, "-m", "kafkalog", "dump", "--files", f"{SEG0}.index"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert result.stdout.splitlines() == [f"Dumping {SEG0}.index", "offset: 8 position: 191"]
    assert result.stderr.splitlines()[0] == f"Mismatches in :{tmp_path / f'{SEG0}.index'}"


def test_index_position_past_the_log_and_too_small_slices_are_errors(tmp_path: Path) -> None:
    idempotent_copy(tmp_path)
    index = tmp_path / f"{SEG0}.index"
    write_index(index, 0, [(5, 191), (8, 100_000)])
    result = kafkalog("dump", "--files", str(index))
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith(f"kafkalog: error: {index} at byte 8: entry 1 points at position")
    write_index(index, 0, [(5, 191)])
    result = kafkalog("dump", "--max-message-size", "100", "--files", str(index))
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith("kafkalog: error: ") and "--max-message-size" in line
    assert kafkalog("dump", "--max-message-size", "191", "--files", str(index)).returncode == 0
    assert kafkalog("dump", "--max-message-size", "-1", "--files", str(index)).returncode == 2


def test_missing_files_and_bad_names_are_one_line_errors(tmp_path: Path) -> None:
    write_index(tmp_path / f"{SEG0}.index", 0, [(5, 191)])
    for name in (f"{SEG0}.index", f"{SEG0}.timeindex", "00000000000000000042.index"):
        result = kafkalog("dump", "--files", str(tmp_path / name))
        assert result.returncode == 2
        [line] = result.stderr.splitlines()
        assert line.startswith("kafkalog: error: ") and "No such file" in line
    (tmp_path / "abc.index").write_bytes(b"")
    result = kafkalog("dump", "--files", str(tmp_path / "abc.index"))
    assert result.returncode == 2
    assert result.stderr.startswith("kafkalog: error: cannot read a segment base offset")
    assert list(tmp_path.iterdir()) and not (tmp_path / f"{SEG0}.timeindex").exists()


# -- preallocated (live broker) indexes ------------------------------------------------------
PREALLOCATED = sorted(
    (f for f in by_kind("other") if f.preallocated_size is not None), key=lambda f: f.rel
)


@pytest.mark.parametrize("facts", PREALLOCATED, ids=ids(PREALLOCATED))
def test_preallocated_index_prints_only_the_real_entries(facts: FileFacts, tmp_path: Path) -> None:
    """A running broker's active index is 10 MiB, zero-filled after its entries: the dump shows
    the entries of the file Kafka trims it to at shutdown, and nothing for the zero fill."""
    name = facts.path.name.removesuffix(".preallocated.gz")
    trimmed = facts.path.with_name(name)
    live = tmp_path / name
    live.write_bytes(gzip.decompress(facts.path.read_bytes()))
    assert live.stat().st_size == facts.preallocated_size
    shutil.copy(facts.path.with_name(f"{SEG0}.log"), tmp_path / f"{SEG0}.log")
    if name.endswith(".timeindex"):
        shutil.copy(facts.path.with_name(f"{SEG0}.index"), tmp_path / f"{SEG0}.index")
    before = state([live])
    result = kafkalog("dump", "--files", str(live))
    expected = kafkalog("dump", "--files", str(trimmed))
    assert result.returncode == 0 and expected.returncode == 0, result.stderr
    assert result.stderr == expected.stderr == ""
    lines = result.stdout.replace(str(live), "<f>").splitlines()
    assert lines == expected.stdout.replace(str(trimmed), "<f>").splitlines()
    kind = "index" if name.endswith(".index") else "timeindex"
    facts_trimmed = next(f for f in by_kind(kind) if f.path == trimmed)
    if kind == "index" and facts_trimmed.entry_count == 0:
        assert lines == ["Dumping <f>", "<f> is empty."]
    else:
        assert len(lines) == 1 + (facts_trimmed.entry_count or 0)
    sanity = kafkalog("dump", "--index-sanity-check", "--files", str(live))
    if kind == "timeindex" or facts_trimmed.entry_count:
        assert sanity.stdout.splitlines()[1:] == [f"{live} passed sanity check."]
    else:
        assert sanity.stdout.splitlines()[1:] == [f"{live} is empty."]
    assert state([live]) == before


# -- .timeindex --------------------------------------------------------------------------------
TIMEINDEXES = index_facts("timeindex")


@pytest.mark.parametrize("facts", TIMEINDEXES, ids=ids(TIMEINDEXES))
def test_timeindex_lists_every_entry(facts: FileFacts) -> None:
    lines = dumped("timeindex")[0][str(facts.path)]
    expected = [f"timestamp: {t} offset: {o}" for t, o in facts.index_entries or ()]
    tail = [f"timestamp: {t} offset: {o}" for t, o in facts.index_tail_entries]
    assert len(lines) == facts.entry_count  # no "is empty." line for time indexes (Kafka)
    assert lines[: len(expected)] == expected
    assert lines[len(lines) - len(tail) :] == tail
    if facts.entries_complete:
        assert lines == expected


def test_timeindex_verification_of_kafka_segments() -> None:
    """Kafka 4.0-written segments verify cleanly; old brokers indexed the offset of the record
    with the max timestamp, which the dump reports as not being a batch's last offset."""
    stderr = dumped("timeindex")[1]
    assert "mismatch" not in stderr and "out of order" not in stderr
    javacode = [str(f.path) for f in TIMEINDEXES if f.set_dir == "kafka-4.0-snapshot-javacode"]
    result = kafkalog("dump", "--verify-index-only", "--files", ",".join(javacode))
    assert result.returncode == 0
    assert result.stderr == ""
    old = FIXTURES / "volodymyrzee-kafka-2020" / "__consumer_offsets-12" / f"{SEG0}.timeindex"
    result = kafkalog("dump", "--verify-index-only", "--files", str(old))
    assert result.stdout.splitlines() == [f"Dumping {old}"]
    assert result.stderr.splitlines()[:3] == [
        "The following indexed offsets are not found in the log.",
        "Indexed offset: 35, found log offset: 37",
        "Indexed offset: 80, found log offset: 82",
    ]


def write_timeindex(path: Path, base: int, entries: list[tuple[int, int]]) -> None:
    path.write_bytes(b"".join(struct.pack(">qi", t, o - base) for t, o in entries))


def test_crafted_timeindex_errors(tmp_path: Path) -> None:
    idempotent_copy(tmp_path)
    shutil.copy(IDEMPOTENT / f"{SEG0}.index", tmp_path / f"{SEG0}.index")
    ti = tmp_path / f"{SEG0}.timeindex"
    entries = [
        (-1, 2),  # wrong timestamp, and not after the initial -1
        (1700000000102, 4),  # 4 is inside batch 3..5
        (1700000000150, 8),  # wrong timestamp
        (1700000000302, 11),  # right
        (1700000009999, 99),  # past the end of the log
    ]
    write_timeindex(ti, 0, entries)
    result = kafkalog("dump", "--files", str(ti))
    assert result.returncode == 1, result.stderr  # Kafka's tool exits 0; kafkalog says so
    assert result.stdout.splitlines()[1:] == [f"timestamp: {t} offset: {o}" for t, o in entries]
    assert result.stderr.splitlines() == [
        f"Found timestamp mismatch in :{ti}",
        "  Index timestamp: -1, log timestamp: 1700000000002",
        "  Index timestamp: 1700000000150, log timestamp: 1700000000202",
        f"Found out of order timestamp in :{ti}",
        "  Index timestamp: -1, Previously indexed timestamp: -1",
        "The following indexed offsets are not found in the log.",
        "Indexed offset: 4, found log offset: 5",
        "Indexed offset: 99, found log offset: -1",
    ]
    only = kafkalog("dump", "--verify-index-only", "--files", str(ti))
    assert only.stdout.splitlines() == [f"Dumping {ti}"]
    assert only.stderr == result.stderr
    assert only.returncode == 1
    # the same findings in --json, after the entries; 4 inside batch 3..5 is what brokers
    # before Kafka 3.x wrote (a warning), 99 is past the log (a problem)
    rows = [
        json.loads(line)
        for line in kafkalog("dump", "--json", "--files", str(ti)).stdout.splitlines()
    ]
    found = [(r["type"], r["problem"]) for r in rows if r["type"] in ("problem", "warning")]
    assert found == [
        ("problem", "timestampMismatch"),
        ("problem", "timestampOutOfOrder"),
        ("warning", "indexedOffsetNotFound"),
        ("problem", "timestampMismatch"),
        ("problem", "indexedOffsetNotFound"),
    ]
    assert {r["file"] for r in rows if r["type"] == "problem"} == {str(ti)}
    first = next(r for r in rows if r["type"] == "problem")
    assert (first["indexTimestamp"], first["logTimestamp"], first["position"]) == (
        -1,
        1700000000002,
        0,
    )


def test_reports_come_after_all_files_in_kafkas_order(tmp_path: Path) -> None:
    idempotent_copy(tmp_path)
    index = tmp_path / f"{SEG0}.index"
    write_index(index, 0, [(8, 191)])
    ti = tmp_path / f"{SEG0}.timeindex"
    write_timeindex(ti, 0, [(1700000000555, 5)])
    log = tmp_path / "00000000000000000100.log"
    log.write_bytes(V2_NONE + V2_NONE)  # offsets 100..102 twice
    result = kafkalog("dump", "--deep-iteration", "--files", f"{log},{index},{ti}")
    assert result.returncode == 1, result.stderr  # offsets going backwards, a wrong timestamp
    assert result.stderr.splitlines() == [
        f"Mismatches in :{index}",
        "  Index offset: 8, log offset: 5",
        f"Found timestamp mismatch in :{ti}",
        "  Index timestamp: 1700000000555, log timestamp: 1700000000102",
        f"Non-consecutive offsets in {log}",
        "  102 is followed by 100",
    ]


def _findings(result: subprocess.CompletedProcess[str]) -> list[dict[str, object]]:
    rows = [json.loads(line) for line in result.stdout.splitlines()]  # nothing but JSON
    return [r for r in rows if r["type"] in ("problem", "warning")]


def test_problems_set_the_exit_status_and_are_in_the_json(tmp_path: Path) -> None:
    """Issue 23: Kafka's tool exits 0 whatever its check finds; kafkalog exits 1 on a problem
    and, with --json, prints each finding as an object (a script parsing stdout saw nothing).
    What Kafka's check reports on correctly written files stays a warning (exit 0)."""
    idempotent_copy(tmp_path)
    index = tmp_path / f"{SEG0}.index"
    # (8, 191) and (11, 382): batches 3..5 and 6..8 from 191, 6..8 and 9..11 from 382, as
    # appends of two batches are indexed; (5, 382): the batch at 382 holds 6..8, not 5
    write_index(index, 0, [(8, 191), (11, 382)])
    result = kafkalog("dump", "--json", "--files", str(index))
    assert result.returncode == 0, result.stdout
    findings = _findings(result)
    assert [(f["type"], f["problem"]) for f in findings] == [("warning", "indexMismatch")] * 2
    assert [(f["indexOffset"], f["logOffset"], f["position"]) for f in findings] == [
        (8, 5, 0),
        (11, 8, 8),
    ]
    write_index(index, 0, [(5, 382)])
    result = kafkalog("dump", "--json", "--files", str(index))
    assert result.returncode == 1
    [finding] = _findings(result)
    assert finding["type"] == "problem" and finding["file"] == str(index)
    assert (finding["indexOffset"], finding["logOffset"]) == (5, 8)

    # records that cannot be decoded: stderr as before, now exit 1 and a JSON object
    log = tmp_path / "00000000000000000100.log"
    bad = bytearray(V2_NONE)
    bad[57:61] = struct.pack(">i", 1000)  # a record count the batch cannot hold
    log.write_bytes(bytes(bad))
    text = kafkalog("dump", "--deep-iteration", "--files", str(log))
    assert text.returncode == 1 and "record count 1000" in text.stderr, text.stderr
    result = kafkalog("dump", "--deep-iteration", "--json", "--files", str(log))
    assert result.returncode == 1
    # the changed count also fails the batch's CRC: both are said
    crc, finding = _findings(result)
    assert crc["problem"] == "invalidBatch" and crc["position"] == 0
    assert finding["problem"] == "corruptRecords" and finding["batchPosition"] == 0
    assert finding["position"] == 57 and "record count 1000" in str(finding["message"])


KP_GZIP = FIXTURES / "kafka-0.9.0.1-gzip-kafka-python" / "kp-gzip-0"


def test_a_09_brokers_first_offset_entries_are_warnings(tmp_path: Path) -> None:
    """A 0.9 broker keyed each index entry by the *first* offset of the append; for a gzip v0
    wrapper, whose own offset is its last, Kafka's check reports every entry (its lines kept),
    but the files are correct: a warning and exit 0. An entry keyed inside a wrapper by any
    other offset stays a problem."""
    index = KP_GZIP / "00000000000000001620.index"
    result = kafkalog("dump", "--json", "--files", str(index))
    assert result.returncode == 0, result.stdout
    findings = _findings(result)
    assert [(f["type"], f["problem"]) for f in findings] == [("warning", "indexMismatch")] * 3
    assert [(f["indexOffset"], f["logOffset"]) for f in findings] == [
        (1730, 1739),
        (1840, 1849),
        (1950, 1959),
    ]
    text = kafkalog("dump", "--files", str(index))
    assert text.returncode == 0
    assert text.stderr.splitlines() == [
        f"Mismatches in :{index}",
        "  Index offset: 1950, log offset: 1959",
        "  Index offset: 1840, log offset: 1849",
        "  Index offset: 1730, log offset: 1739",
    ]  # Kafka's lines either way

    shutil.copy(KP_GZIP / "00000000000000001620.log", tmp_path / "00000000000000001620.log")
    crafted = tmp_path / "00000000000000001620.index"
    write_index(crafted, 1620, [(1731, 4445)])  # the wrapper at 4445 holds 1730..1739
    result = kafkalog("dump", "--json", "--files", str(crafted))
    assert result.returncode == 1
    [finding] = _findings(result)
    assert finding["type"] == "problem"
    assert (finding["indexOffset"], finding["logOffset"]) == (1731, 1739)


@pytest.mark.parametrize("where", ["orders-0", "__consumer_offsets-7"])
def test_offset_gaps_are_problems_unless_the_topic_is_compacted(tmp_path: Path, where: str) -> None:
    """A gap in a log's offsets is lost records, unless the topic is compacted (the cleaner
    removes records): --compacted says so, and Kafka always compacts __consumer_offsets."""
    part = tmp_path / where
    part.mkdir()
    log = part / "00000000000000000100.log"
    later = bytearray(V2_NONE)
    later[0:8] = struct.pack(">q", 110)  # offsets 110..112 after 100..102
    log.write_bytes(V2_NONE + bytes(later))
    internal = where.startswith("__")
    for flags in ([], ["--compacted"]):
        result = kafkalog("dump", "--deep-iteration", "--json", *flags, "--files", str(log))
        compacted = internal or bool(flags)
        assert result.returncode == (0 if compacted else 1), result.stdout
        [finding] = _findings(result)
        assert finding["type"] == ("warning" if compacted else "problem")
        assert (finding["offset"], finding["nextOffset"]) == (102, 110)
        assert finding["file"] == str(log)
        text = kafkalog("dump", "--deep-iteration", *flags, "--files", str(log))
        assert text.stderr.splitlines() == [
            f"Non-consecutive offsets in {log}",
            "  102 is followed by 110",
        ]  # Kafka's lines either way
    backwards = kafkalog("dump", "--deep-iteration", "--compacted", "--files", f"{log},{log}")
    assert backwards.returncode == 0  # two files, each consecutive in itself
    log.write_bytes(bytes(later) + V2_NONE)
    assert kafkalog("dump", "--deep-iteration", "--compacted", "--files", str(log)).returncode == 1


def test_a_file_that_cannot_be_walked_is_in_the_json_too(tmp_path: Path) -> None:
    """A .log the reader refuses ends the run with exit 2 and one line on stderr, as before;
    with --json the refusal is also the last object on stdout."""
    log = tmp_path / "00000000000000000100.log"
    bad = bytearray(V2_NONE)
    bad[16] = 7  # a magic byte no Kafka format has: it used to dump as "isvalid: true"
    log.write_bytes(bytes(bad))
    text = kafkalog("dump", "--files", str(log))
    assert text.returncode == 2 and "isvalid" not in text.stdout
    assert text.stderr.strip() == (
        f"kafkalog: error: {log} at byte 16: invalid magic byte 7: Kafka's log formats are "
        "magic 0, 1 and 2"
    )
    result = kafkalog("dump", "--json", "--files", str(log))
    assert result.returncode == 2
    [finding] = _findings(result)
    assert finding["type"] == "problem" and finding["file"] == str(log)
    assert finding["position"] == 16 and "magic byte 7" in str(finding["message"])


# -- --index-sanity-check -----------------------------------------------------------------------
def test_index_sanity_check() -> None:
    idx = IDEMPOTENT / f"{SEG0}.index"
    ti = IDEMPOTENT / f"{SEG0}.timeindex"
    empty = JAVACODE / "v2-logappendtime-0" / f"{SEG0}.index"
    result = kafkalog("dump", "--index-sanity-check", "--files", f"{idx},{ti},{empty}")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.splitlines() == [
        f"Dumping {idx}",
        f"{idx} passed sanity check.",
        f"Dumping {ti}",
        f"{ti} passed sanity check.",
        f"Dumping {empty}",
        f"{empty} is empty.",  # Kafka checks for emptiness first
    ]


def test_index_sanity_check_failure_is_one_line(tmp_path: Path) -> None:
    idempotent_copy(tmp_path)
    index = tmp_path / f"{SEG0}.index"
    index.write_bytes(struct.pack(">ii", 5, 191) + struct.pack(">ii", 8, 382) + b"\0")
    result = kafkalog("dump", "--index-sanity-check", "--files", str(index))
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith(f"kafkalog: error: {index} at byte 16: ")
    assert "not a multiple" in line


# -- .txnindex / .snapshot ----------------------------------------------------------------------
def test_txnindex_lines() -> None:
    facts = index_facts("txnindex")
    result = kafkalog("dump", "--files", ",".join(str(f.path) for f in facts))
    assert result.returncode == 0 and result.stderr == ""
    out = sections(result.stdout)
    for f in facts:
        assert out[str(f.path)] == [
            f"version: {t.version} producerId: {t.pid} firstOffset: {t.first_offset} "
            f"lastOffset: {t.last_offset} lastStableOffset: {t.last_stable_offset}"
            for t in f.txn_entries or ()
        ]
    assert out[str(JAVACODE / "v2-txn-0" / f"{SEG0}.txnindex")] == [
        "version: 0 producerId: 2001 firstOffset: 5 lastOffset: 13 lastStableOffset: 14"
    ]


SNAPSHOTS = index_facts("snapshot")


@pytest.mark.parametrize("facts", SNAPSHOTS, ids=ids(SNAPSHOTS))
def test_snapshot_lines(facts: FileFacts) -> None:
    lines = dumped("snapshot")[0][str(facts.path)]
    listed = facts.snapshot_entries or ()
    if facts.entries_complete:
        assert len(lines) == len(listed) == facts.entry_count
    else:
        assert len(lines) == facts.entry_count
    for line, e in zip(lines, listed, strict=False):
        txn = "OptionalLong.empty"
        if e.current_txn_first_offset >= 0:
            txn = f"OptionalLong[{e.current_txn_first_offset}]"
        ts = e.timestamp
        if ts is None:  # not stated for these fixtures: take it from the line
            m = re.search(r" lastTimestamp: (-?\d+) ", line)
            assert m, line
            ts = int(m.group(1))
        first_seq = e.last_seq - e.offset_delta  # no wrap-around in these fixtures
        assert line == (
            f"producerId: {e.producer_id} producerEpoch: {e.epoch} "
            f"coordinatorEpoch: {e.coordinator_epoch} currentTxnFirstOffset: {txn} "
            f"lastTimestamp: {ts} firstSequence: {first_seq} lastSequence: {e.last_seq} "
            f"lastOffset: {e.last_offset} offsetDelta: {e.offset_delta} timestamp: {ts}"
        )


def test_snapshot_with_entries_exact_lines() -> None:
    snap = JAVACODE / "v2-idempotent-0" / "00000000000000000037.snapshot"
    result = kafkalog("dump", "--files", str(snap))
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout.splitlines() == [
        f"Dumping {snap}",
        "producerId: 1000 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: "
        "OptionalLong.empty lastTimestamp: 1700000001102 firstSequence: 33 lastSequence: 35 "
        "lastOffset: 35 offsetDelta: 2 timestamp: 1700000001102",
        "producerId: 1001 producerEpoch: 3 coordinatorEpoch: -1 currentTxnFirstOffset: "
        "OptionalLong.empty lastTimestamp: 1700000005000 firstSequence: 0 lastSequence: 0 "
        "lastOffset: 36 offsetDelta: 0 timestamp: 1700000005000",
    ]
    open_txn = JAVACODE / "v2-txn-0" / "00000000000000000030.snapshot"
    lines = kafkalog("dump", "--files", str(open_txn)).stdout.splitlines()
    assert any("currentTxnFirstOffset: OptionalLong[29] " in line for line in lines)


def test_corrupt_snapshot_message_goes_to_stderr(tmp_path: Path) -> None:
    snap = tmp_path / "00000000000000000037.snapshot"
    data = bytearray((IDEMPOTENT / snap.name).read_bytes())
    data[-1] ^= 0xFF
    snap.write_bytes(bytes(data))
    result = kafkalog("dump", "--files", str(snap))
    assert result.returncode == 0  # Kafka prints the message and goes on
    assert result.stdout.splitlines() == [f"Dumping {snap}"]
    [line] = result.stderr.splitlines()
    assert "CRC" in line and str(snap) in line


def test_first_sequence_wraps_like_kafka() -> None:
    from kafkalog.cli.dump import first_sequence

    assert first_sequence(35, 2) == 33
    assert first_sequence(0, 2) == 2147483646
    assert first_sequence(-1, 0) == 2147483647
    assert first_sequence(2147483647, 0) == 2147483647


# -- --json, unknown files, read-only ------------------------------------------------------------
def test_json_variants() -> None:
    idx = IDEMPOTENT / f"{SEG0}.index"
    ti = IDEMPOTENT / f"{SEG0}.timeindex"
    txn = JAVACODE / "v2-txn-0" / f"{SEG0}.txnindex"
    snap = IDEMPOTENT / "00000000000000000037.snapshot"
    result = kafkalog("dump", "--json", "--files", f"{idx},{ti},{txn},{snap}")
    assert result.returncode == 0 and result.stderr == ""
    # JSON only (no "Dumping" text line): each object names its type and file
    out: dict[str, list[dict[str, object]]] = {}
    for line in result.stdout.splitlines():
        obj = json.loads(line)
        kind, name = obj.pop("type"), obj.pop("file")
        if kind != "file":
            out.setdefault(name, []).append(obj)
    assert out[str(idx)][0] == {"offset": 5, "position": 191}
    assert len(out[str(idx)]) == 4
    assert out[str(ti)][0] == {"timestamp": 1700000000102, "offset": 5}
    assert out[str(txn)] == [
        {
            "version": 0,
            "producerId": 2001,
            "firstOffset": 5,
            "lastOffset": 13,
            "lastStableOffset": 14,
        }
    ]
    assert out[str(snap)][1] == {
        "producerId": 1001,
        "producerEpoch": 3,
        "coordinatorEpoch": -1,
        "currentTxnFirstOffset": None,
        "lastTimestamp": 1700000005000,
        "firstSequence": 0,
        "lastSequence": 0,
        "lastOffset": 36,
        "offsetDelta": 0,
        "timestamp": 1700000005000,
    }


def test_unknown_suffix_is_ignored() -> None:
    gz = PREALLOCATED[0].path
    result = kafkalog("dump", "--files", str(gz))
    assert result.returncode == 0
    assert result.stdout.splitlines() == [f"Dumping {gz}"]
    assert result.stderr.splitlines() == [f"Ignoring unknown file {gz}"]


def test_dumping_changes_no_fixture_file() -> None:
    facts = [*INDEXES, *TIMEINDEXES, *index_facts("txnindex"), *SNAPSHOTS]
    paths = segment_files(facts)
    before = state(paths)
    files = ",".join(str(f.path) for f in facts)
    for flags in ([], ["--verify-index-only"], ["--index-sanity-check"], ["--json"]):
        result = kafkalog("dump", *flags, "--files", files)
        assert result.returncode == 0, result.stderr
    assert state(paths) == before
