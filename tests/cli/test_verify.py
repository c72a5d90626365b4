"""``verify``, ``rebuild-index``, ``lookup`` and ``cat`` run as a user runs them, on fixtures and
on damaged copies: verify finds each kind of damage, rebuild-index repairs it, and reading
commands leave a read-only directory exactly as it was. The commands' ``main`` runs in this
process (``clirun.kafkalog_here``: the same output and exit status, no interpreter start per
call), except where another process is the point (a writer lock held by this one) or
rebuild-index's log records on stderr are (a process configures its own logging)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from clirun import kafkalog, kafkalog_here, tree_snapshot
from provenance import FIXTURES

JAVA = FIXTURES / "kafka-4.0-snapshot-javacode"


def test_verify_healthy_fixtures() -> None:
    for name in (
        "kafka-4.0-snapshot-javacode",
        "volodymyrzee-kafka-2020",
        "kafka-0.9.0.1-broker",
        "real-kafka2.1-snapshot-zk-large-index-william0423",
    ):
        result = kafkalog_here("verify", str(FIXTURES / name))
        assert result.returncode == 0, result.stdout
        assert result.stdout.strip().endswith(": OK")


def test_verify_reports_missing_indexes_of_a_copied_broker_dir() -> None:
    result = kafkalog_here("verify", str(FIXTURES / "real-kafka-3.4.0-zk-panic08"))
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
    result = kafkalog_here("verify", str(copy))
    assert result.returncode == 1, (damage, result.stdout)
    problems = [line for line in result.stdout.splitlines() if line.startswith("PROBLEM")]
    _same_as_json(copy, result.stdout)
    return [_without_next(line) for line in problems]


def _same_as_json(path: Path, text: str) -> None:
    """``verify --json`` says what the text says, one JSON object a line and nothing else:
    each problem and warning with its file and byte, then the summary."""
    import json

    result = kafkalog_here("verify", "--json", str(path))
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
    dry = kafkalog_here("rebuild-index", "--dry-run", "--index-interval-bytes", "100", str(copy))
    assert dry.returncode == 0 and "would" in dry.stdout, dry.stdout + dry.stderr
    assert kafkalog_here("verify", str(copy)).returncode == 1  # the dry run changed nothing
    fixed = kafkalog_here("rebuild-index", "--index-interval-bytes", "100", str(copy))
    assert fixed.returncode == 0, fixed.stderr
    after = kafkalog_here("verify", str(copy))
    assert after.returncode == 0, after.stdout
    # nothing was wrong with the log: Kafka's own index files come back byte for byte
    for name in sorted(p.name for p in (JAVA / "v2-txn-0").iterdir()):
        assert (copy / name).read_bytes() == (JAVA / "v2-txn-0" / name).read_bytes(), name


@pytest.mark.parametrize(
    ("damage", "expected", "what"),
    [
        ("flipped byte", "CRC mismatch", "batch 2..4 fails its CRC"),
        ("truncated log", "incomplete batch", "in a segment that is not the last"),
    ],
)
def test_rebuild_refuses_a_damaged_log_and_changes_nothing(
    copy: Path, damage: str, expected: str, what: str
) -> None:
    """Issue 23: on a segment with one flipped byte, rebuild-index printed "truncate ... from
    4046 to 0 bytes" and "remove ..." and exited 0: Kafka's recovery, run to rebuild indexes,
    cut the segment at the bad batch and deleted every segment after it. It now changes no
    .log: it refuses, naming the file, the batch's byte and what is wrong, and points at the
    repair command; nothing on disk changes, --force included (it only covers a torn tail)."""
    problems = _damage_and_check(copy, damage)
    assert any(expected in p for p in problems), problems
    log = copy / "00000000000000000000.log"
    batches = _batches(log)
    at = batches[1]["position"] if damage == "flipped byte" else sum(b["size"] for b in batches)
    before = tree_snapshot(copy.parent)
    for flags in ([], ["--dry-run"], ["--force"]):
        # real processes: the refusal reaches stderr through the command's own log handler,
        # which it installs only where nothing configured logging (pytest here has)
        result = kafkalog("rebuild-index", *flags, "--index-interval-bytes", "100", str(copy))
        assert result.returncode == 1, (flags, result.stdout, result.stderr)
        [line] = result.stderr.splitlines()
        assert line.startswith(
            f"kafkalog: error: refusing to rebuild the indexes of {copy}: {log} at byte {at}: "
        ), line
        assert what in line and f"`kafkalog repair {copy}`" in line, line
        assert result.stdout == f"{copy}: refused, nothing changed\n"
        assert tree_snapshot(copy.parent) == before  # no lock file either


def _torn_tail(copy: Path) -> tuple[Path, int, bytes]:
    """The last segment's last batch cut short, as a crash during an append leaves it."""
    log = copy / "00000000000000000020.log"
    data = log.read_bytes()
    log.write_bytes(data[:-30])
    last = _batches(copy / "00000000000000000020.log")
    return log, sum(b["size"] for b in last), data[:-30]


def test_a_torn_tail_of_the_last_segment_needs_force(copy: Path) -> None:
    """A cut-off last batch is refused like any damage, naming it; --force indexes the whole
    batches before it and leaves the cut-off bytes in the .log, with a warning saying so."""
    log, at, torn = _torn_tail(copy)
    (copy / "00000000000000000020.index").unlink()
    before = tree_snapshot(copy.parent)
    # real processes: refusal and warning are log records on stderr, as in the test above
    refused = kafkalog("rebuild-index", "--index-interval-bytes", "100", str(copy))
    assert refused.returncode == 1
    assert f"{log} at byte {at}: the last batch is cut off" in refused.stderr
    assert "--force" in refused.stderr
    assert tree_snapshot(copy.parent) == before
    forced = kafkalog("rebuild-index", "--force", "--index-interval-bytes", "100", str(copy))
    assert forced.returncode == 0, forced.stderr
    [warning] = forced.stderr.splitlines()
    assert warning.startswith(f"kafkalog: warning: {log} at byte {at}: the last batch is cut off")
    assert f"left these {len(torn) - at} bytes in the .log" in warning
    assert "create 00000000000000000020.index" in forced.stdout
    assert log.read_bytes() == torn and log.stat().st_mtime_ns == before[str(log)][0]
    after = kafkalog_here("verify", str(copy))
    assert after.returncode == 0, after.stdout  # the tail is the one warning left
    assert [x for x in after.stdout.splitlines() if x.startswith("warning")] == [
        f"warning {log} at byte {at}: incomplete batch at the end ({len(torn) - at} of "
        f"{len(log.read_bytes()) - at + 30} bytes) (active segment)"
    ]


def test_rebuild_writes_under_the_partition_lock_and_logs_what_it_does(
    copy: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Every index file is replaced while this process holds the partition's writer lock, and
    each replacement (and a refusal) is a log record of kafkalog.rebuild."""
    import argparse
    import io
    import logging

    from kafkalog.cli import rebuild
    from kafkalog.log.lock import DirectoryLock

    (copy / "00000000000000000000.index").unlink()
    (copy / "00000000000000000020.timeindex").write_bytes(b"\xff" * 12)
    held = []
    real = rebuild._replace

    def replace(directory: str, name: str, content: bytes) -> None:
        held.append((name, DirectoryLock.is_held(directory)))
        real(directory, name, content)

    monkeypatch.setattr(rebuild, "_replace", replace)
    caplog.set_level(logging.INFO, logger="kafkalog.rebuild")
    args = argparse.Namespace(
        paths=[str(copy)], dry_run=False, force=False, index_interval_bytes=100
    )
    assert rebuild.run(args, out=io.StringIO()) == 0
    assert held == [("00000000000000000000.index", True), ("00000000000000000020.timeindex", True)]
    assert not DirectoryLock.is_held(copy)  # released once written
    messages = [r.getMessage() for r in caplog.records if r.name == "kafkalog.rebuild"]
    assert messages == [
        f"{copy}: rewrote 00000000000000000000.index (missing -> 64 bytes)",
        f"{copy}: rewrote 00000000000000000020.timeindex (12 -> 60 bytes)",
    ]
    data = bytearray((copy / "00000000000000000000.log").read_bytes())
    data[200] ^= 0x40
    (copy / "00000000000000000000.log").write_bytes(bytes(data))
    caplog.clear()
    assert rebuild.run(args, out=io.StringIO()) == 1
    [record] = [r for r in caplog.records if r.name == "kafkalog.rebuild"]
    assert record.levelname == "ERROR" and "refusing" in record.getMessage()


def test_preallocated_tail_of_the_active_segment_is_normal(copy: Path) -> None:
    index = copy / "00000000000000000020.index"
    index.write_bytes(index.read_bytes() + b"\x00" * 800)  # a live broker's active segment
    result = kafkalog_here("verify", str(copy))
    assert result.returncode == 0, result.stdout
    _same_as_json(copy, result.stdout)


def test_rebuild_refuses_a_locked_partition(copy: Path) -> None:
    from kafkalog.log import Log

    holder = Log(copy)
    try:
        # a real process: the writer lock is held by another one, as a user meets it
        result = kafkalog("rebuild-index", str(copy))
        assert result.returncode == 2
        assert "another writer" in result.stderr and "Traceback" not in result.stderr
    finally:
        holder.close()


def test_lookup_and_cat(tmp_path: Path) -> None:
    part = JAVA / "v2-none-0"
    result = kafkalog_here("lookup", str(part), "--timestamp", "2023-11-14T22:13:23.050Z")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout.splitlines()[-1])
    assert (record["offset"], record["key"]) == (59, "key-050")
    assert "time index" in result.stdout and "offset index" in result.stdout
    by_offset = kafkalog_here("lookup", str(part), "--offset", "110")
    assert json.loads(by_offset.stdout.splitlines()[-1])["value"] == "older"
    cat = kafkalog_here("cat", str(part), "--offset", "5", "--max", "3")
    assert [json.loads(line)["offset"] for line in cat.stdout.splitlines()] == [5, 6, 7]
    bad = kafkalog_here("lookup", str(part), "--timestamp", "yesterday")
    assert bad.returncode == 2 and "ISO 8601" in bad.stderr


def test_lookup_json_says_what_the_text_says() -> None:
    from kafkalog.index import OffsetIndex, TimeIndex

    part = JAVA / "v2-none-0"
    ts = "2023-11-14T22:13:23.050Z"
    text = kafkalog_here("lookup", str(part), "--timestamp", ts)
    result = kafkalog_here("lookup", str(part), "--timestamp", ts, "--json")
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
    missing = kafkalog_here("lookup", str(part), "--offset", "100000", "--json")
    assert missing.returncode == 1
    gone = json.loads(missing.stdout)
    assert gone["record"] is None and "outside" in gone["reason"]


@pytest.mark.parametrize("name", ["kafka-2020", "kafka-data"])
def test_lookup_and_cat_name_a_data_directory_as_one(tmp_path: Path, name: str) -> None:
    """Issue 23: a data directory whose name parses as topic-partition ("kafka-2020": topic
    kafka, partition 2020) was opened as a partition, an empty one: lookup said "offset 3 is
    outside [0, 0)" and cat printed nothing and exited 0, over a directory full of records."""
    data = tmp_path / name
    shutil.copytree(JAVA / "v2-none-0", data / "orders-0")
    shutil.copytree(JAVA / "v2-txn-0", data / "__consumer_offsets-3")
    before = tree_snapshot(data)
    for args in (["lookup", str(data), "--offset", "3"], ["cat", str(data), "--max", "2"]):
        result = kafkalog_here(*args)
        assert result.returncode == 2, (args, result.stdout)
        assert result.stdout == ""
        assert result.stderr.strip() == (
            f"kafkalog: error: {data} is a data directory holding 2 partition(s) "
            f"(__consumer_offsets-3, orders-0), not a partition: name one, e.g. "
            f"{data / 'orders-0'}"
        )
    assert tree_snapshot(data) == before
    # the partition it names is read; an empty directory named like one is an empty partition
    found = kafkalog_here("lookup", str(data / "orders-0"), "--offset", "3")
    assert found.returncode == 0 and json.loads(found.stdout.splitlines()[-1])["offset"] == 3
    empty = tmp_path / "later-0"
    empty.mkdir()
    assert "outside [0, 0)" in kafkalog_here("lookup", str(empty), "--offset", "3").stdout


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
        result = kafkalog_here(*args)
        assert result.returncode in (0, 1), (args, result.stderr)
    assert tree_snapshot(tmp_path / "ro") == before
    os.chmod(target, 0o755)


# -- issue 23: everything a reader would choke on ----------------------------------------------
def _batches(log: Path) -> list[dict[str, Any]]:
    """The batches of a .log as ``dump --json`` shows them (position, offsets, size)."""
    result = kafkalog_here("dump", "--json", "--files", str(log))
    return [r for r in map(json.loads, result.stdout.splitlines()) if r["type"] == "batch"]


def _problems(result: subprocess.CompletedProcess[str]) -> list[str]:
    """The PROBLEM lines, each checked to name its next step, without it."""
    lines = result.stdout.splitlines()
    return [_without_next(line) for line in lines if line.startswith("PROBLEM")]


def _without_next(line: str) -> str:
    """A problem line without the next step it must name (issue 32: every problem line
    names the command that deals with it)."""
    text, sep, step = line.rpartition("; next: ")
    assert sep and step, f"no next step named: {line}"
    return text


def test_a_crc_mismatch_is_named_at_the_first_byte_of_its_batch(copy: Path) -> None:
    """The position is the batch's first byte, as dump shows it, and the batch is named by its
    first and last offsets (it was the CRC field's byte, which no dump line shows)."""
    log = copy / "00000000000000000000.log"
    held = next(b for b in _batches(log) if b["position"] <= 200 < b["position"] + b["size"])
    data = bytearray(log.read_bytes())
    data[200] ^= 0x40
    log.write_bytes(bytes(data))
    result = kafkalog_here("verify", str(copy))
    assert result.returncode == 1
    first = _problems(result)[0]
    assert first.startswith(
        f"PROBLEM {log} at byte {held['position']}: batch {held['baseOffset']}.."
        f"{held['lastOffset']}: CRC mismatch (stored {held['crc']}, computed "
    ), first
    _same_as_json(copy, result.stdout)


def test_a_batch_with_an_unknown_magic_is_a_problem_and_the_rest_is_read(copy: Path) -> None:
    """A magic-7 batch passed verify, and dump printed it with ``isvalid: true`` (the v2 CRC
    does not cover the magic byte). It is a problem at the batch's first byte; the reader steps
    over it by its length, so every batch after it is still checked."""
    log = copy / "00000000000000000000.log"
    healthy = kafkalog_here("verify", "--json", str(copy)).stdout.splitlines()[-1]
    batch = _batches(log)[1]
    data = bytearray(log.read_bytes())
    data[batch["position"] + 16] = 7
    log.write_bytes(bytes(data))
    result = kafkalog_here("verify", str(copy))
    assert result.returncode == 1, result.stdout
    problems = _problems(result)
    assert problems[0] == (
        f"PROBLEM {log} at byte {batch['position']}: entry with offset field "
        f"{batch['baseOffset']}: invalid magic byte 7: Kafka's log formats are magic 0, 1 and 2 "
        f"(at byte {int(batch['position']) + 16}); its {batch['size']} bytes are skipped, "
        "not read"
    )
    assert not any("cannot be read" in p for p in problems)
    # every batch is still counted (the refused one too), only its records are not read
    before, after = json.loads(healthy), kafkalog_here("verify", "--json", str(copy))
    summary = json.loads(after.stdout.splitlines()[-1])
    assert summary["batches"] == before["batches"]
    assert summary["records"] == before["records"] - (batch["lastOffset"] - batch["baseOffset"] + 1)
    _same_as_json(copy, result.stdout)
    dumped = kafkalog_here("dump", "--files", str(log))
    assert dumped.returncode == 2 and f"position: {batch['position']} " not in dumped.stdout
    assert f"{log} at byte {int(batch['position']) + 16}: invalid magic byte 7" in dumped.stderr


def test_stray_and_misnamed_files_are_named(copy: Path) -> None:
    """Names checked against what Kafka's log loader reads: a segment file whose offset is not
    20 digits is never read by Kafka (it opens the 20-digit name): a problem. What Kafka
    deletes, completes or ignores at its next start is a warning."""
    seg = copy / "00000000000000000000"
    shutil.copy(seg.with_suffix(".log"), copy / "123.log")
    (copy / "00000000000000000000.log.bak").write_bytes(b"x")
    (copy / "00000000000000000099.index").write_bytes(b"")
    (copy / "00000000000000000020.log.deleted").write_bytes(b"")
    (copy / "leader-epoch-checkpoint.tmp").write_bytes(b"")
    (copy / "notes").mkdir()
    shutil.copy(copy / "00000000000000000030.snapshot", copy / "30.snapshot")
    result = kafkalog_here("verify", str(copy))
    assert result.returncode == 1, result.stdout
    end = _batches(copy / "00000000000000000020.log")[-1]["lastOffset"]
    assert _problems(result) == [
        f"PROBLEM {copy / '123.log'}: misnamed: Kafka names offset 123 "
        "00000000000000000123.log and reads that name, never this file",
        # an index past the log's end without its .log: the segment holding it was lost
        f"PROBLEM {copy / '00000000000000000099.index'}: records lost: offsets 99 to the end "
        "of the log are in no segment, but 00000000000000000099.index is left of the segment "
        "that held them (its .log is missing: deleted by hand, or lost)",
    ]
    assert end < 99
    warnings = {
        line.split(": ", 1)[0].removeprefix("warning "): line.split(": ", 1)[1]
        for line in result.stdout.splitlines()
        if line.startswith("warning")
    }
    assert warnings == {
        str(copy / "00000000000000000000.log.bak"): "not a file Kafka keeps in a partition "
        "(it ignores it)",
        str(copy / "00000000000000000099.index"): "an index without its .log (Kafka's loader "
        "deletes it)",
        str(copy / "00000000000000000020.log.deleted"): "a file scheduled for deletion (Kafka "
        "removes it after file.delete.delay.ms, or at its next start)",
        str(copy / "leader-epoch-checkpoint.tmp"): "a checkpoint's temporary file (an "
        "interrupted write)",
        str(copy / "notes"): "a directory in a partition directory (Kafka ignores it)",
        str(copy / "30.snapshot"): "not named as Kafka names it (00000000000000000030.snapshot);"
        " it is still read as the producer snapshot at offset 30",
    }
    assert "2 segment(s)" in result.stdout  # 123.log is not one of the log's segments
    _same_as_json(copy, result.stdout)


@pytest.mark.parametrize("name", ["empty", "name-2020", "data"])
def test_a_directory_holding_no_partition_is_one_error_for_every_command(
    tmp_path: Path, name: str
) -> None:
    """verify said "verified 0 partition(s) ...: OK" (a mistyped path looked like a healthy
    log); then retention, compact, rebuild-index and timeline exited 0, verify 1 and repair 2
    (issue 32): one rule for all, an error naming the path, exit status 2."""
    import contextlib
    import io

    from kafkalog.cli.main import main

    where = tmp_path / name
    where.mkdir()
    if name == "data":
        (where / "meta.properties").write_text("version=1\n")
        (where / "not-a-partition").mkdir()
    for command in (
        ["verify"],
        ["verify", "--json"],
        ["repair"],
        ["repair", "--dry-run"],
        ["rebuild-index"],
        ["retention"],
        ["compact"],
        ["timeline"],
    ):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main([*command, str(where)])
        assert code == 2, (command, out.getvalue(), err.getvalue())
        assert err.getvalue().strip() == (
            f"kafkalog: error: no partition in {where}: neither a partition directory "
            "(topic-partition holding segment .log files) nor a data directory holding "
            "partition directories"
        ), command


def _two_partitions(tmp_path: Path) -> tuple[Path, Path, Path]:
    data = tmp_path / "data"
    first, second = data / "a-0", data / "b-0"
    for target in (first, second):
        shutil.copytree(JAVA / "v2-none-0", target)
        for p in target.iterdir():
            os.chmod(p, 0o644)
    return data, first, second


def test_an_unreadable_file_is_a_problem_of_its_partition(tmp_path: Path) -> None:
    """A file that cannot be read (here a directory where the time index should be) ended
    the whole run with one error line, no JSON and the other partitions unchecked."""
    data, first, _ = _two_partitions(tmp_path)
    tindex = first / "00000000000000000000.timeindex"
    tindex.unlink()
    tindex.mkdir()
    result = kafkalog_here("verify", str(data))
    assert result.returncode == 1, result.stdout + result.stderr
    assert _problems(result) == [
        f"PROBLEM {tindex}: a directory named like a .timeindex file: it cannot be read as one"
    ]
    assert "verified 2 partition(s), 2 segment(s), 10 batch(es), 224 record(s)" in result.stdout
    _same_as_json(data, result.stdout)


@pytest.mark.parametrize("what", ["log", "index", "listing"])
def test_a_read_error_is_reported_and_the_run_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, what: str
) -> None:
    """Permission denied (simulated in-process: the tests run as root, which reads any
    file) on one partition's .log, .index or directory listing: a problem naming it, in the
    JSON too, and the other partition is verified."""
    import argparse
    import errno
    import io

    from kafkalog import files
    from kafkalog.cli import verify
    from kafkalog.records import reader

    data, first, _ = _two_partitions(tmp_path)
    denied = {
        "log": first / "00000000000000000000.log",
        "index": first / "00000000000000000000.index",
        "listing": first,
    }[what]

    def refuse(real: Callable[..., Any]) -> Callable[..., Any]:
        def call(path: str, *args: Any, **kwargs: Any) -> Any:
            if os.fspath(path) == str(denied):
                raise PermissionError(errno.EACCES, "Permission denied", str(denied))
            return real(path, *args, **kwargs)

        return call

    monkeypatch.setattr(reader, "read_only_buffer", refuse(reader.read_only_buffer))
    monkeypatch.setattr(files, "scandir", refuse(files.scandir))
    monkeypatch.setattr(files, "open_read", refuse(files.open_read))
    out = io.StringIO()
    status = verify.run(argparse.Namespace(paths=[str(data)], json=True), out=out)
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    assert status == 1
    problems = [r for r in rows if r["type"] == "problem"]
    for r in problems:
        assert "make it readable" in r.pop("next")
        r["message"] = _without_next(r["message"])
    assert problems == [
        {
            "type": "problem",
            "file": str(denied),
            "position": None,
            "message": "cannot read it: Permission denied",
        }
    ]
    summary = rows[-1]
    assert summary["partitions"] == 2 and summary["ok"] is False
    # the other partition was read whole, and the first one's readable files too
    logs_read = 2 if what == "index" else 1
    assert (summary["batches"], summary["records"]) == (5 * logs_read, 112 * logs_read)


def test_index_entries_past_the_end_of_their_log(copy: Path) -> None:
    """A .log cut short (a crash, a bad copy) under an index written for the whole file: each
    entry past its end is a problem of its own, saying so."""
    index = copy / "00000000000000000000.index"
    log = copy / "00000000000000000000.log"
    cut = 707  # a batch boundary: no incomplete batch at the new end
    log.write_bytes(log.read_bytes()[:cut])
    result = kafkalog_here("verify", str(copy))
    assert result.returncode == 1
    past = [p for p in _problems(result) if "past the end" in p]
    assert past == [
        f"PROBLEM {index} at byte {n * 8}: entry {n} ({offset}, {position}) points past the end "
        f"of the .log ({cut} bytes: cut after the index was written?)"
        for n, (offset, position) in enumerate(
            [(4, 123), (6, 271), (8, 386), (9, 505), (12, 707), (15, 885), (17, 1041), (19, 1197)]
        )
        if position >= cut
    ]
    assert len(past) == 4
    _same_as_json(copy, result.stdout)


@pytest.mark.parametrize(
    ("index", "flipped"),
    [(3, 1), (3, 0x40000003), (-1, 1)],
    ids=["fell", "jumped", "the last fell"],
)
def test_verify_names_a_leader_epoch_out_of_line(index: int, flipped: int, tmp_path: Path) -> None:
    """A batch's partition leader epoch is outside its CRC: one that jumped up, or fell below
    the epoch before it, is found against its neighbours (epochs never go down along a log)
    and the batch named is the one out of line, not its neighbour; rising epochs (new
    leaders) are fine."""
    import struct

    from kafkalog.log import Log
    from kafkalog.records import LogReader, Record

    d = tmp_path / "t-0"
    with Log(d) as log:
        for epoch in (0, 0, 3, 3, 3, 7, 7):
            log.append_records([Record.of(b"v%d" % epoch)] * 3, partition_leader_epoch=epoch)
    assert kafkalog_here("verify", str(d)).returncode == 0  # epochs rising with each leader
    seg = next(d.glob("*.log"))
    entries = list(LogReader(seg.read_bytes()))
    victim = entries[index]  # epoch 3 between 3 and 3, or the last (7 after 7)
    data = bytearray(seg.read_bytes())
    struct.pack_into(">i", data, victim.position + 12, flipped)
    seg.write_bytes(bytes(data))
    result = kafkalog_here("verify", str(d))
    assert result.returncode == 1, result.stdout
    problems = [line for line in result.stdout.splitlines() if "leader epoch" in line]
    assert len(problems) == 1, result.stdout
    assert f"{seg} at byte {victim.position}:" in problems[0], problems
    assert "restore the segment from a backup" in problems[0]
