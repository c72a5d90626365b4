"""Every ``kafkalog`` command on every kind of damage (issue 23's damage matrix, the CLI
readers): no internal error or traceback, a status that says what happened (damage is never
a plain success from a command that reads records), and nothing changed on disk.

Run in-process through ``kafkalog.cli.main.main`` (the same code the command runs; a
subprocess per cell would cost a minute), with stdout and stderr captured."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import pytest

from clirun import tree_snapshot
from damage_kinds import DAMAGES, OPEN_REFUSES, segments, written
from kafkalog.cli.main import main
from provenance import FIXTURES


def _run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as e:  # argparse
            code = int(e.code or 0)
    return code, out.getvalue(), err.getvalue()


#: kinds whose bytes no command can read, so repair (which quarantines bytes it reads) is not
#: the next step: each reader names the file and says what to do with it instead
NOT_REPAIRABLE = {"segment .log is a directory"}


def _differs(p: Path, source: Path) -> bool:
    if not p.is_file():
        return True
    if not (source / p.name).is_file():  # a segment renamed: its bytes may be a source's
        return all(p.read_bytes() != s.read_bytes() for s in segments(source))
    return p.read_bytes() != (source / p.name).read_bytes()


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return written(tmp_path_factory.mktemp("cli-damage"))


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_every_command_on_damage(damage: str, source: Path, tmp_path: Path) -> None:
    mutate, torn = DAMAGES[damage]
    d = tmp_path / "data" / source.name
    shutil.copytree(source, d)
    for extra in d.glob(".kafkalog*"):
        extra.unlink()
    mutate(d)
    changed = [p for p in segments(d) if _differs(p, source)]
    seg = changed[0] if changed else segments(d)[-1]
    before = tree_snapshot(d)
    png = str(tmp_path / "t.png")
    runs = {
        "verify": _run("verify", str(d)),
        "verify --json": _run("verify", "--json", str(d)),
        "dump --deep-iteration": _run("dump", "--deep-iteration", "--files", str(seg)),
        "lookup": _run("lookup", str(d), "--offset", str(int(seg.name[:20]))),
        "cat": _run("cat", str(d)),
        "cat --skip-damaged": _run("cat", str(d), "--skip-damaged"),
        "timeline": _run("timeline", str(d), "--png", png),
        "retention": _run("retention", str(d), "--json"),
        "rebuild-index --dry-run": _run("rebuild-index", "--dry-run", str(d)),
        "repair --dry-run": _run("repair", "--dry-run", "--json", str(d)),
    }
    for name, (code, _, err) in runs.items():
        where = f"{damage} / {name}"
        assert "Traceback" not in err and "internal error" not in err, f"{where}: {err}"
        assert code in (0, 1, 2), f"{where}: exit {code}: {err[-300:]}"
        if code == 2:
            assert "kafkalog: error:" in err and str(d) in err, f"{where}: {err}"
    assert tree_snapshot(d) == before, f"{damage}: files changed"
    records = sum(1 for line in runs["cat"][1].splitlines() if line.startswith("{"))
    if torn:
        assert runs["cat"][0] == 0 and 298 <= records <= 300, damage
        return
    # damage: the readers of records say so; verify and dump find it
    if damage in NOT_REPAIRABLE:  # named, with its own next step; repair refuses it too
        assert runs["cat"][0] == 2 and str(d) in runs["cat"][2], damage
        assert runs["verify"][0] == 1 and "PROBLEM" in runs["verify"][1], damage
        assert runs["repair --dry-run"][0] == 2, (damage, runs["repair --dry-run"])
        assert "kafkalog: error:" in runs["repair --dry-run"][2], damage
        return
    assert runs["cat"][0] == 2 and "kafkalog repair" in runs["cat"][2], damage
    if damage in OPEN_REFUSES:  # no read starts until it is moved out: repair says so
        assert runs["cat --skip-damaged"][0] == 2, damage
        assert "kafkalog repair" in runs["cat --skip-damaged"][2], damage
    else:
        assert runs["cat --skip-damaged"][0] == 1, damage
        assert "skipped damaged bytes" in runs["cat --skip-damaged"][2], damage
    assert runs["verify"][0] == 1 and "PROBLEM" in runs["verify"][1], damage
    assert runs["verify --json"][0] == 1, damage
    if changed:  # a .log damaged (not one gone)
        assert runs["dump --deep-iteration"][0] != 0, damage
    planned = json.loads(runs["repair --dry-run"][1].splitlines()[0])
    assert planned["segments"] or planned["lost"] or planned["swaps"], damage  # moved aside
    problems = [line for line in runs["verify"][1].splitlines() if line.startswith("PROBLEM")]
    assert all("; next: " in line for line in problems), problems  # each names a next step


def test_verify_warns_of_offsets_in_no_segment(source: Path, tmp_path: Path) -> None:
    """A middle segment emptied (a file truncated behind the log's back) reads as a gap of
    offsets, which the cleaner also leaves in a compacted topic: no reader can tell, but
    verify says which offsets are in no batch (a warning: only the topic's policy tells).
    Its ``.timeindex`` left listing the emptied records (its records carry times: an embedded
    log stamps them) is evidence a cleaner never leaves: a PROBLEM naming it, beside the
    warning; with the segment's indexes emptied too, the warning alone."""
    d = tmp_path / source.name
    shutil.copytree(source, d)
    emptied = segments(d)[2]
    emptied.write_bytes(b"")
    gap = f"warning {segments(d)[3]} at byte 0: offsets 100..149 (50 offsets)"
    code, out, _ = _run("verify", str(d))
    stale = emptied.with_suffix(".timeindex")
    assert code == 1 and gap in out, out
    problem = next(line for line in out.splitlines() if line.startswith("PROBLEM"))
    assert problem.startswith(f"PROBLEM {stale} at byte 0: entry 0: offset "), out
    assert int(problem.split("offset ")[1].split()[0]) in range(100, 150), out  # an emptied one
    for index in (emptied.with_suffix(".index"), stale):
        index.write_bytes(b"")
    code, out, _ = _run("verify", str(d))
    assert code == 0 and gap in out and "PROBLEM" not in out, out


def test_repair_moves_a_swap_that_is_no_batches_aside(source: Path, tmp_path: Path) -> None:
    """A ``.swap`` that is not whole batches stops every open (completing it would replace
    readable segments): verify names it as a problem, and repair moves it, whole, to the
    quarantine; the segments it would have replaced stay byte for byte."""
    d = tmp_path / "data" / source.name
    shutil.copytree(source, d)
    for extra in d.glob(".kafkalog*"):
        extra.unlink()
    DAMAGES["a .swap that is no batches"][0](d)
    (swap,) = d.glob("*.swap")
    garbage = swap.read_bytes()
    logs = {p.name: p.read_bytes() for p in segments(d)}
    code, out, _ = _run("verify", str(d))
    assert code == 1 and f"PROBLEM {swap}" in out and "kafkalog repair" in out, out
    quarantine = tmp_path / "q"
    code, out, err = _run("repair", "--quarantine", str(quarantine), str(d))
    assert code == 0 and "repaired, log end offset 300" in out, out + err
    assert not swap.exists() and (quarantine / swap.name).read_bytes() == garbage
    assert {p.name: p.read_bytes() for p in segments(d)} == logs
    code, out, _ = _run("cat", str(d))
    assert code == 0 and sum(1 for line in out.splitlines() if line.startswith("{")) == 300


def test_verify_names_a_v0_segment_renamed_above_its_first_offset(tmp_path: Path) -> None:
    """Kafka 0.9's own v0 segments, one renamed one above its first message's offset: every
    reader refuses it, and verify (which checked only v2 batches against the segment's base)
    names the file and byte 0 too, instead of ``OK``."""
    d = tmp_path / "v0-segments-0"
    shutil.copytree(FIXTURES / "kafka-0.9.0.1-broker" / "v0-segments-0", d)
    for p in d.iterdir():
        p.chmod(0o644)
    DAMAGES["segment renamed one above its first offset"][0](d)
    (renamed,) = [
        p
        for p in segments(d)
        if not (FIXTURES / "kafka-0.9.0.1-broker" / "v0-segments-0" / p.name).exists()
    ]
    code, out, _ = _run("verify", str(d))
    assert code == 1, out
    assert (
        f"PROBLEM {renamed} at byte 0: message " in out and "is below the segment's base" in out
    ), out
    code, _, err = _run("cat", str(d))
    assert code == 2 and f"{renamed} at byte 0" in err, err
