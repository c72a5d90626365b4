"""Each partition file replaced by one that cannot be read (tests/damage_kinds.py
``FILE_AS_DIRECTORY`` and the ``.log`` of ``FILE_DAMAGES``), through the read-only commands
an operator runs first: each either answers as on the pristine copy or fails naming the file
at a byte, never an ``[Errno ...]`` that names no byte, and changes nothing (tryout18)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from clirun import kafkalog, tree_snapshot
from damage_kinds import FILE_AS_DIRECTORY, FILE_DAMAGES, written

KINDS = {
    **FILE_AS_DIRECTORY,
    "segment .log is a directory": FILE_DAMAGES["segment .log is a directory"],
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_read_only_commands_name_a_file_they_cannot_read(kind: str, tmp_path: Path) -> None:
    d = tmp_path / "data" / "written-0"
    shutil.copytree(written(tmp_path / "src"), d)
    for extra in d.glob(".kafkalog*"):
        extra.unlink()
    KINDS[kind](d)
    before = tree_snapshot(d.parent)
    for args in (
        ("cat", str(d), "--offset", "0"),
        ("lookup", str(d), "--offset", "120"),
        ("timeline", str(d)),
        ("verify", str(d)),
    ):
        done = kafkalog(*args)
        where = f"{kind} / {args[0]}"
        assert "Errno" not in done.stderr, f"{where}: {done.stderr}"
        if done.returncode == 2:
            assert f"{d}/" in done.stderr and "byte" in done.stderr, f"{where}: {done.stderr}"
        if args[0] == "cat" and done.returncode == 0:
            assert len(done.stdout.splitlines()) == 300, where
    assert tree_snapshot(d.parent) == before
