"""The ``kafkalog`` commands on damaged copies of real fixtures: every bad byte ends in one
clear line naming the file (and the byte, when there is one), a non-zero status, no traceback,
and the damaged directory left exactly as it was. The commands' ``main`` runs in this process
(``clirun.kafkalog_here``), where an environment variable is read once per process in a real
one."""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

import pytest

from clirun import kafkalog, kafkalog_here, tree_snapshot
from kafkalog.records.crc import crc32c
from provenance import FIXTURES

JAVA = FIXTURES / "kafka-4.0-snapshot-javacode"
SEG = "00000000000000000000"


def _copy(tmp_path: Path, name: str = "v2-none-0") -> Path:
    target = tmp_path / name
    shutil.copytree(JAVA / name, target)
    os.chmod(target, 0o755)
    for p in target.iterdir():
        os.chmod(p, 0o644)
    return target


def _no_traceback(result: object) -> None:
    assert "Traceback" not in result.stderr, result.stderr  # type: ignore[attr-defined]
    assert "struct.error" not in result.stderr  # type: ignore[attr-defined]


def test_negative_index_position_is_not_read_from_the_log(tmp_path: Path) -> None:
    """An offset-index entry of all 0xff bytes (relative offset -1, position -1) used to reach
    ``os.pread`` (a bare "[Errno 22] Invalid argument") or ``struct.unpack_from`` at byte -1.
    It is not a real entry: lookups fall back to a scan, and verify names the damage."""
    part = _copy(tmp_path)
    index = part / f"{SEG}.index"
    index.write_bytes(b"\xff" * 8)
    before = tree_snapshot(part)

    found = kafkalog_here("lookup", str(part), "--offset", "3")
    _no_traceback(found)
    assert found.returncode == 0, found.stderr
    assert '"offset": 3' in found.stdout

    png = str(tmp_path / "t.png")
    for cmd in (
        ("cat", str(part), "--offset", "3", "--max", "1"),
        ("timeline", str(part), "--png", png),
    ):
        result = kafkalog_here(*cmd)
        _no_traceback(result)
        assert result.returncode == 0, (cmd, result.stderr)

    for flags in ((), ("--verify-index-only",)):
        for suffix in (".index", ".timeindex"):
            dumped = kafkalog_here("dump", *flags, "--files", str(part / f"{SEG}{suffix}"))
            _no_traceback(dumped)
            assert dumped.returncode == 0, dumped.stderr

    verified = kafkalog_here("verify", str(part))
    assert verified.returncode == 1, verified.stdout
    assert f"PROBLEM {index} at byte 0:" in verified.stdout
    assert "out of index order" in verified.stdout
    assert tree_snapshot(part) == before


def test_verify_flags_garbage_after_the_valid_entries_of_an_active_index(tmp_path: Path) -> None:
    """The active segment's index may end in preallocated zeros, but not in other bytes: entries
    that break the order after the valid ones are damage, not a tail to ignore."""
    part = _copy(tmp_path)
    index = part / f"{SEG}.index"
    good = index.read_bytes()
    index.write_bytes(good + struct.pack(">ii", 0, 3) + b"\x00" * 16)
    result = kafkalog_here("verify", str(part))
    assert result.returncode == 1, result.stdout
    assert f"PROBLEM {index} at byte {len(good)}:" in result.stdout

    index.write_bytes(good + b"\x00" * 64)  # a preallocated zero tail stays fine
    result = kafkalog_here("verify", str(part))
    assert result.returncode == 0, result.stdout


def test_timestamps_outside_the_calendar_are_printed_not_fatal(tmp_path: Path) -> None:
    """A record or time-index timestamp past year 9999 (a flipped bit, or Long.MAX_VALUE) made
    lookup, cat and timeline die with "year 292278994 is out of range", naming no file."""
    part = _copy(tmp_path)
    log = part / f"{SEG}.log"
    data = bytearray(log.read_bytes())
    data[27:35] = struct.pack(">q", 2**63 - 1)  # the first batch's base timestamp
    end = 12 + struct.unpack_from(">i", data, 8)[0]
    struct.pack_into(
        ">I", data, 17, crc32c(bytes(data[21:end]))
    )  # a valid batch (CRCs are checked)
    log.write_bytes(bytes(data))
    (part / f"{SEG}.timeindex").write_bytes(struct.pack(">qi", 2**62, 3))
    before = tree_snapshot(part)

    cat = kafkalog_here("cat", str(part), "--max", "1")
    _no_traceback(cat)
    assert cat.returncode == 0, cat.stderr
    record = json.loads(cat.stdout)
    assert record["offset"] == 0 and record["time"] is None
    assert record["timestamp"] == 2**63 - 1

    lookup = kafkalog_here("lookup", str(part), "--timestamp", str(2**62))
    _no_traceback(lookup)
    assert lookup.returncode in (0, 1), lookup.stderr
    assert "out of range" not in lookup.stdout + lookup.stderr

    png = tmp_path / "t.png"
    timeline = kafkalog_here("timeline", str(part), "--png", str(png))
    _no_traceback(timeline)
    assert timeline.returncode == 0, timeline.stderr
    assert f"{2**62} ms" in timeline.stdout
    assert tree_snapshot(part) == before


@pytest.mark.parametrize("name", ["\u00b2.log", "0000000000000000abc.log", "00000\u0663.log"])
def test_a_file_only_named_like_a_segment_is_not_one(tmp_path: Path, name: str) -> None:
    """``str.isdigit`` takes "²" and "٣", which ``int`` then refused: every command on the
    partition died with "invalid literal for int() with base 10", naming no file. Such files
    are not segments (Kafka's names are ASCII digits), and dump reads one from offset 0. Kafka's
    own loader fails on such a name (it parses the part before the first dot as an offset), so
    verify names each one as a problem; the reading commands pass them over."""
    part = _copy(tmp_path)
    stray = part / name
    stray.write_bytes(b"")
    snapshot = part / "\u00b2\u00b2.snapshot"
    snapshot.write_bytes(b"")
    verified = kafkalog_here("verify", str(part))
    _no_traceback(verified)
    assert verified.returncode == 1, verified.stdout
    problems = [
        line.rpartition("; next: ")[0]  # every problem names its next step (issue 32)
        for line in verified.stdout.splitlines()
        if line.startswith("PROBLEM")
    ]
    assert problems == [
        f"PROBLEM {path}: not a segment file name: Kafka's loader reads "
        f"{path.name.split('.')[0]!r} as a base offset and cannot (it fails to load the "
        "partition); a segment's files are named by a 20-digit offset"
        for path in sorted((stray, snapshot))
    ]
    for cmd in (
        ("lookup", str(part), "--offset", "1"),
        ("cat", str(part), "--max", "1"),
        ("rebuild-index", "--dry-run", str(part)),
        ("dump", "--files", str(stray)),
    ):
        result = kafkalog_here(*cmd)
        _no_traceback(result)
        assert result.returncode == 0, (cmd, result.stdout, result.stderr)
        assert "invalid literal" not in result.stderr
    assert "Log starting offset: 0" in kafkalog_here("dump", "--files", str(stray)).stdout


def test_a_failed_dry_run_leaves_no_copy_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rebuild-index --dry-run recovers a copy in a temporary directory; when recovery failed
    (here: a directory named like a segment) the copy stayed in $TMPDIR, one per attempt."""
    part = _copy(tmp_path)
    (part / "00000000000000000500.log").mkdir()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))  # read by a new process (tempfile caches it)
    result = kafkalog("rebuild-index", "--dry-run", str(part))
    _no_traceback(result)
    assert result.returncode == 2
    assert "00000000000000000500.log" in result.stderr
    assert list(scratch.iterdir()) == []


@pytest.mark.parametrize("suffix", [".index", ".timeindex", ".log"])
def test_a_directory_named_like_a_segment_file_is_named(tmp_path: Path, suffix: str) -> None:
    """Opening a directory read-only succeeds, so the first read failed with a bare
    "[Errno 21] Is a directory" that did not say which of the partition's files it was.
    verify names it as a problem of the partition, once, and checks the rest."""
    part = _copy(tmp_path)
    name = f"{SEG}{suffix}" if suffix != ".log" else "00000000000000000500.log"
    if suffix != ".log":
        (part / name).unlink()
    (part / name).mkdir()
    verified = kafkalog_here("verify", str(part))
    _no_traceback(verified)
    assert verified.returncode == 1, verified.stdout
    problems = [
        line.rpartition("; next: ")[0]  # every problem names its next step (issue 32)
        for line in verified.stdout.splitlines()
        if line.startswith("PROBLEM")
    ]
    assert problems == [
        f"PROBLEM {part / name}: a directory named like a {suffix} file: it cannot be read as one"
    ]
    assert "1 segment(s), 5 batch(es), 112 record(s)" in verified.stdout  # the rest was read
    for cmd in (
        ("lookup", str(part), "--offset", "1"),
        ("cat", str(part), "--max", "1"),
    ):
        result = kafkalog_here(*cmd)
        _no_traceback(result)
        if result.returncode != 0:  # lookups may not need that file
            assert result.returncode == 2, (cmd, result.stdout)
            # named at its first byte, with why (tryout18: the bare OSError named no byte)
            assert f"{part / name} at byte 0" in result.stderr, (cmd, result.stderr)
            assert "Is a directory" in result.stderr, (cmd, result.stderr)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["cat", "{p}", "--max", "-1"], "argument --max: must be at least 0, got -1"),
        (["dump", "--files", "{p}", "--max-bytes", "-5"], "--max-bytes: must be at least 0"),
        (["dump", "--files", "{p}", "--max-message-size", "x"], "invalid int value: 'x'"),
        (["cat", "{missing}"], "no partition directory {missing}"),
        (["lookup", "{missing}", "--offset", "0"], "no partition directory {missing}"),
    ],
)
def test_bad_arguments_are_usage_errors(tmp_path: Path, args: list[str], message: str) -> None:
    """A negative count used to print nothing and exit 0; a missing directory was called a bad
    partition directory name."""
    names = {"p": str(tmp_path), "missing": str(tmp_path / "gone-0")}
    result = kafkalog_here(*(a.format(**names) for a in args))
    assert result.returncode == 2, result
    assert message.format(**names) in result.stderr and "Traceback" not in result.stderr


def test_an_internal_error_is_one_line_and_its_traceback_on_request(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bug of ours (here a planted IndexError) still ends in one line and exit 3; with
    KAFKALOG_DEBUG=1 the traceback comes out for the bug report."""
    import importlib

    from kafkalog.cli import demo

    cli = importlib.import_module("kafkalog.cli.main")

    def broken(args: object) -> int:
        raise IndexError("planted")

    monkeypatch.setattr(demo, "run", broken)  # add_parser looks it up on every build
    monkeypatch.delenv("KAFKALOG_DEBUG", raising=False)
    assert cli.main(["demo"]) == 3
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "kafkalog: internal error: IndexError: planted (a bug: KAFKALOG_DEBUG=1 shows where)"
    ]
    monkeypatch.setenv("KAFKALOG_DEBUG", "1")
    with pytest.raises(IndexError, match="planted"):
        cli.main(["demo"])
