"""``verify``, ``rebuild-index``, ``lookup`` and ``cat`` run as a user runs them, on fixtures and
on damaged copies: verify finds each kind of damage, rebuild-index repairs it, and reading
commands leave a read-only directory exactly as it was."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from clirun import kafkalog, tree_snapshot
from provenance import FIXTURES

JAVA = FIXTURES / "kafka-4.0-snapshot-javacode"


def test_verify_healthy_fixtures() -> None:
    for name in (
        "kafka-4.0-snapshot-javacode",
        "volodymyrzee-kafka-2020",
        "kafka-0.9.0.1-broker",
        "real-kafka2.1-snapshot-zk-large-index-william0423",
    ):
        result = kafkalog("verify", str(FIXTURES / name))
        assert result.returncode == 0, result.stdout
        assert result.stdout.strip().endswith(": OK")


def test_verify_reports_missing_indexes_of_a_copied_broker_dir() -> None:
    result = kafkalog("verify", str(FIXTURES / "real-kafka-3.4.0-zk-panic08"))
    assert result.returncode == 1
    assert result.stdout.count("offset index missing") == 2


@pytest.fixture()
def copy(tmp_path: Path) -> Path:
    target = tmp_path / "data" / "v2-txn-0"
    shutil.copytree(JAVA / "v2-txn-0", target)
    for p in target.iterdir():
        os.chmod(p, 0o644)
    return target


def _damage_and_check(copy: Path, damage: str) -> list[str]:
    seg = copy / "00000000000000000000"
    log = seg.with_suffix(".log")
    if damage == "flipped byte":
        data = bytearray(log.read_bytes())
        data[200] ^= 0x40
        log.write_bytes(bytes(data))
    elif damage == "truncated log":
        log.write_bytes(log.read_bytes()[:-30])
    elif damage == "zeroed index tail":
        index = seg.with_suffix(".index")
        data = index.read_bytes()
        index.write_bytes(data[:16] + b"\x00" * (len(data) - 16) + b"\x00" * 800)
    elif damage == "missing index":
        seg.with_suffix(".index").unlink()
    elif damage == "wrong index entry":
        index = seg.with_suffix(".index")
        data = bytearray(index.read_bytes())
        data[4:8] = (5).to_bytes(4, "big")  # position 5 is inside a batch
        index.write_bytes(bytes(data))
    elif damage == "wrong time index entry":
        tindex = seg.with_suffix(".timeindex")
        data = bytearray(tindex.read_bytes())
        data[0:8] = (int.from_bytes(data[0:8], "big") + 7).to_bytes(8, "big")
        tindex.write_bytes(bytes(data))
    result = kafkalog("verify", str(copy))
    assert result.returncode == 1, (damage, result.stdout)
    problems = [line for line in result.stdout.splitlines() if line.startswith("PROBLEM")]
    _same_as_json(copy, result.stdout)
    return problems


def _same_as_json(path: Path, text: str) -> None:
    """``verify --json`` says what the text says, one JSON object a line and nothing else:
    each problem and warning with its file and byte, then the summary."""
    import json

    result = kafkalog("verify", "--json", str(path))
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert rows[-1]["type"] == "summary" and all(r["type"] != "summary" for r in rows[:-1])
    rebuilt = []
    for r in rows[:-1]:
        where = r["file"] if r["position"] is None else f"{r['file']} at byte {r['position']}"
        label = "PROBLEM" if r["type"] == "problem" else "warning"
        rebuilt.append(f"{label} {r['message'] if where is None else where + ': ' + r['message']}")
    lines = text.splitlines()
    assert rebuilt == lines[:-1]
    summary = rows[-1]
    assert summary["ok"] == (result.returncode == 0) == lines[-1].endswith(": OK")
    assert f"{summary['segments']} segment(s), {summary['batches']} batch(es)" in lines[-1]
    assert summary["problems"] == sum(1 for r in rows if r["type"] == "problem")


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        ("flipped byte", "CRC mismatch"),
        ("truncated log", "incomplete batch"),
        ("missing index", "offset index missing"),
        ("wrong index entry", "does not point at a batch start"),
        ("wrong time index entry", "but the largest timestamp"),
        ("zeroed index tail", "after the last valid entry"),
    ],
)
def test_verify_finds_damage_and_rebuild_repairs_it(copy: Path, damage: str, expected: str) -> None:
    problems = _damage_and_check(copy, damage)
    assert any(expected in p for p in problems), problems
    assert all("00000000000000000000" in p for p in problems)  # file named in every line
    dry = kafkalog("rebuild-index", "--dry-run", "--index-interval-bytes", "100", str(copy))
    assert dry.returncode == 0 and "would" in dry.stdout, dry.stdout + dry.stderr
    assert kafkalog("verify", str(copy)).returncode == 1  # the dry run changed nothing
    fixed = kafkalog("rebuild-index", "--index-interval-bytes", "100", str(copy))
    assert fixed.returncode == 0, fixed.stderr
    after = kafkalog("verify", str(copy))
    assert after.returncode == 0, after.stdout
    if damage in (
        "missing index",
        "wrong index entry",
        "wrong time index entry",
        "zeroed index tail",
    ):
        # nothing was wrong with the log: Kafka's own index files come back byte for byte
        for suffix in (".index", ".timeindex", ".txnindex"):
            name = "00000000000000000000" + suffix
            assert (copy / name).read_bytes() == (JAVA / "v2-txn-0" / name).read_bytes()


def test_preallocated_tail_of_the_active_segment_is_normal(copy: Path) -> None:
    index = copy / "00000000000000000020.index"
    index.write_bytes(index.read_bytes() + b"\x00" * 800)  # a live broker's active segment
    result = kafkalog("verify", str(copy))
    assert result.returncode == 0, result.stdout
    _same_as_json(copy, result.stdout)


def test_rebuild_refuses_a_locked_partition(copy: Path) -> None:
    from kafkalog.log import Log

    holder = Log(copy)
    try:
        result = kafkalog("rebuild-index", str(copy))
        assert result.returncode == 2
        assert "another writer" in result.stderr and "Traceback" not in result.stderr
    finally:
        holder.close()


def test_lookup_and_cat(tmp_path: Path) -> None:
    part = JAVA / "v2-none-0"
    result = kafkalog("lookup", str(part), "--timestamp", "2023-11-14T22:13:23.050Z")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout.splitlines()[-1])
    assert (record["offset"], record["key"]) == (59, "key-050")
    assert "time index" in result.stdout and "offset index" in result.stdout
    by_offset = kafkalog("lookup", str(part), "--offset", "110")
    assert json.loads(by_offset.stdout.splitlines()[-1])["value"] == "older"
    cat = kafkalog("cat", str(part), "--offset", "5", "--max", "3")
    assert [json.loads(line)["offset"] for line in cat.stdout.splitlines()] == [5, 6, 7]
    bad = kafkalog("lookup", str(part), "--timestamp", "yesterday")
    assert bad.returncode == 2 and "ISO 8601" in bad.stderr


def test_lookup_json_says_what_the_text_says() -> None:
    from kafkalog.index import OffsetIndex, TimeIndex

    part = JAVA / "v2-none-0"
    ts = "2023-11-14T22:13:23.050Z"
    text = kafkalog("lookup", str(part), "--timestamp", ts)
    result = kafkalog("lookup", str(part), "--timestamp", ts, "--json")
    assert result.returncode == 0, result.stderr
    (line,) = result.stdout.splitlines()  # one JSON object, nothing else
    found = json.loads(line)
    assert found["type"] == "lookup" and found["reason"] is None
    assert found["record"] == json.loads(text.stdout.splitlines()[-1])
    assert found["offset"] == 59 and found["segment"]["baseOffset"] == 0
    stem = str(part / "00000000000000000000")
    with TimeIndex(stem + ".timeindex", 0, writable=False) as tindex:
        assert found["timeIndex"]["entry"] == list(tindex.lookup(found["query"]["timestamp"]))
    with OffsetIndex(stem + ".index", 0, writable=False) as oindex:
        assert found["offsetIndex"]["entry"] == list(oindex.lookup(59))
    assert f"batch at position {found['batch']['position']}" in text.stdout
    missing = kafkalog("lookup", str(part), "--offset", "100000", "--json")
    assert missing.returncode == 1
    gone = json.loads(missing.stdout)
    assert gone["record"] is None and "outside" in gone["reason"]


def test_reading_commands_leave_a_read_only_directory_unchanged(tmp_path: Path) -> None:
    target = tmp_path / "ro" / "v2-txn-0"
    shutil.copytree(JAVA / "v2-txn-0", target)
    for p in target.iterdir():
        os.chmod(p, stat.S_IRUSR | stat.S_IRGRP)
    os.chmod(target, 0o555)
    before = tree_snapshot(tmp_path / "ro")
    files = [str(p) for p in sorted(target.iterdir())]
    for args in (
        ["verify", str(target)],
        ["dump", "--deep-iteration", "--print-data-log", "--files", *files],
        ["lookup", str(target), "--offset", "3"],
        ["cat", str(target)],
    ):
        result = kafkalog(*args)
        assert result.returncode in (0, 1), (args, result.stderr)
    assert tree_snapshot(tmp_path / "ro") == before
    os.chmod(target, 0o755)
