"""What explains a gap between segments (tryout18): a data directory whose
``cleaner-offset-checkpoint`` lists the partition (the cleaner has cleaned it) or a log opened
with a compact ``cleanup.policy`` reads across it in silence, as a compacted topic's gaps are
read; the same gap with neither is said by the reader and ``verify`` (the damage matrix:
tests/log/test_damage.py, ``GAP_DAMAGES``)."""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from damage_kinds import FILE_DAMAGES, records, written
from kafkalog.log import Log, TopicConfig
from kafkalog.log.checkpoints import OffsetCheckpoint


def _gap(tmp_path: Path) -> tuple[Path, list[int]]:
    d = tmp_path / "data" / "written-0"
    shutil.copytree(written(tmp_path / "src"), d)
    for extra in d.glob(".kafkalog*"):
        extra.unlink()
    held = records(d)
    victim = FILE_DAMAGES["middle segment removed, every file"](d)
    after = min(int(p.name[:20]) for p in d.glob("*.log") if p.name > victim.name)
    return d, [o for o in held if not int(victim.name[:20]) <= o < after]


def _verify_warns(d: Path) -> bool:
    out = subprocess.run(
        [sys.executable, "-m", "kafkalog", "verify", str(d)], capture_output=True, text=True
    ).stdout
    return "are in no batch before this segment" in out


def test_a_gap_the_cleaner_checkpoint_explains_is_read_in_silence(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    d, expected = _gap(tmp_path)
    caplog.set_level(logging.WARNING, logger="kafkalog")
    assert records(d) == expected
    assert any("are in no batch between" in r.getMessage() for r in caplog.records)
    assert _verify_warns(d)
    caplog.clear()
    OffsetCheckpoint.write(d.parent / "cleaner-offset-checkpoint", {("written", 0): 250})
    assert records(d) == expected
    assert not [r.getMessage() for r in caplog.records if "no batch" in r.getMessage()]
    assert not _verify_warns(d)


def test_a_log_opened_as_compacted_reads_its_gaps_in_silence(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    d, expected = _gap(tmp_path)
    caplog.set_level(logging.WARNING, logger="kafkalog")
    config = TopicConfig(segment_bytes=4096, cleanup_policy=("compact",))
    with Log(d, config, writable=False) as log:
        assert [r.offset for r in log.records()] == expected
    assert not [r.getMessage() for r in caplog.records if "no batch" in r.getMessage()]


def test_a_first_segment_lost_with_its_indexes_left_is_said_by_every_reader(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Its .log removed, its .index left (``first segment's .log removed, its indexes left``):
    every reader starts at the next segment, as Kafka's loader does, and says which index file
    is left without its .log with a WARNING (Kafka's loader warns of each orphaned index)."""
    from damage_kinds import READERS, files_of

    d = tmp_path / "data" / "written-0"
    shutil.copytree(written(tmp_path / "src"), d)
    for extra in d.glob(".kafkalog*"):
        extra.unlink()
    held = records(d)
    victim = FILE_DAMAGES["first segment's .log removed, its indexes left"](d)
    after = min(int(p.name[:20]) for p in d.glob("*.log"))
    before = files_of(d)
    caplog.set_level(logging.WARNING, logger="kafkalog")
    for name, reader in READERS.items():
        caplog.clear()
        assert reader(d) == [o for o in held if o >= after], name
        said = [r.getMessage() for r in caplog.records]
        assert any(victim.with_suffix(".index").name in m for m in said), (name, said)
        if name != "writable open":
            assert files_of(d) == before, name
