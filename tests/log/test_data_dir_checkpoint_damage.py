"""A data directory's checkpoint that cannot be read (``log-start-offset-checkpoint``,
``recovery-point-offset-checkpoint``, ``replication-offset-checkpoint``): Kafka's LogManager
warns and goes on without it; kafkalog did the same in silence, so a log start DeleteRecords
had moved could be lost unsaid (tryout18). Each kind of ``DATA_DIR_CHECKPOINT_DAMAGES``
(tests/damage_kinds.py) on a copy of a Kafka 2.8 broker's data directory: a read-only
``Log`` of its partition and a writable ``LogDir`` read every record and say the file and
byte with a WARNING; read-only readers change nothing."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from damage_kinds import DATA_DIR_CHECKPOINT_DAMAGES
from kafkalog.log import Log
from kafkalog.log.logdir import LogDir
from provenance import FIXTURES

BROKER_DIR = FIXTURES / "real-kafka2.8.0-zk-snappy-seanorth"


def _state(d: Path) -> dict[str, tuple[bytes | None, int]]:
    return {
        str(p): (p.read_bytes() if p.is_file() else None, p.stat().st_mtime_ns)
        for p in sorted(d.rglob("*"))
    }


@pytest.mark.parametrize("damage", list(DATA_DIR_CHECKPOINT_DAMAGES))
def test_an_unreadable_checkpoint_is_said_naming_file_and_byte(
    damage: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert BROKER_DIR.is_dir(), BROKER_DIR
    data = tmp_path / "data"
    shutil.copytree(BROKER_DIR, data)
    with Log(data / "some-topic-0", writable=False) as log:
        pristine = [r.offset for r in log.records()]
    at = DATA_DIR_CHECKPOINT_DAMAGES[damage](data)
    name = damage.rsplit(" ", 1)[0]
    said = f"{data / name} at byte {at}"
    before = _state(data)
    caplog.set_level(logging.WARNING, logger="kafkalog")
    if name == "log-start-offset-checkpoint":  # the one a read-only log open reads
        with Log(data / "some-topic-0", writable=False) as log:
            assert [r.offset for r in log.records()] == pristine
        assert _state(data) == before, "a read-only open changed a file"
        assert any(said in r.getMessage() for r in caplog.records), caplog.text
        caplog.clear()
    with LogDir(str(data), writable=True) as logs:
        assert [r.offset for r in logs.log("some-topic", 0).records()] == pristine
    assert any(said in r.getMessage() for r in caplog.records), caplog.text
