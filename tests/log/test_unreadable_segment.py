"""A segment ``.log`` that cannot be opened (no read permission; tests run as root, which
reads every file whatever its mode, so the refusal is made where the file is opened): every
reader names the file at byte 0 instead of an OSError naming nothing (tryout18). Its shape as
a directory, which root cannot read either, runs through every reader in
tests/log/test_damage.py (``segment .log is a directory``)."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from damage_kinds import READERS, files_of, segments, written
from kafkalog.errors import DamagedLogError


def test_a_segment_without_read_permission_is_named_by_every_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = tmp_path / "copy" / "written-0"
    shutil.copytree(written(tmp_path), d)
    for extra in d.glob(".kafkalog*"):
        extra.unlink()
    victim = str(segments(d)[2])
    real_open = os.open

    def refusing(path: str, flags: int, *args: int, **kwargs: int) -> int:
        if os.fspath(path) == victim:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), victim)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refusing)
    before = files_of(d)
    for name, reader in READERS.items():
        with pytest.raises(DamagedLogError) as raised:
            reader(d)
        message = str(raised.value)
        assert f"{victim} at byte 0" in message and "Permission denied" in message, (name, message)
    assert files_of(d) == before


def test_repair_refuses_a_segment_it_cannot_read_and_changes_nothing(tmp_path: Path) -> None:
    """Repair quarantines bytes it can read: a ``.log`` that is a directory is named (file,
    byte 0), and neither the index files beside it nor anything else is moved (they were
    moved as a lost segment's leftovers, the directory left, the loss called accepted)."""
    from damage_kinds import FILE_DAMAGES
    from kafkalog.log.repair import repair

    d = tmp_path / "copy" / "written-0"
    shutil.copytree(written(tmp_path), d)
    for extra in d.glob(".kafkalog*"):
        extra.unlink()
    victim = FILE_DAMAGES["segment .log is a directory"](d)
    before = files_of(d)
    for dry_run in (True, False):
        with pytest.raises(DamagedLogError, match=f"{victim} at byte 0"):
            repair(str(d), dry_run=dry_run)
        assert files_of(d) == before
    assert sorted(p.name for p in d.parent.iterdir()) == ["written-0"]  # no quarantine
