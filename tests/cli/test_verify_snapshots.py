"""A producer snapshot Kafka cannot read is never passed over in silence: ``kafkalog verify``
names its file and byte (a warning: a writable open rebuilds the producer state without it),
and a writable open that deletes it, as Kafka's ``ProducerStateManager`` does, says so. Every
kind of ``SNAPSHOT_DAMAGES`` (tests/damage_kinds.py), on Kafka's own snapshots and on real
writers' shapes (tests/read_shapes.py)."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from clirun import kafkalog_here, tree_snapshot
from damage_kinds import SNAPSHOT_DAMAGES
from kafkalog.log import Log
from provenance import FIXTURES
from read_shapes import write_shape

SOURCES = ("v2-txn-0", "v2-bigoffset-0", "v2-txn-multi-i1-roll", "v2-multi-i1-idempotent-roll")


def _source(name: str, tmp_path: Path) -> Path:
    java = FIXTURES / "kafka-4.0-snapshot-javacode" / name
    if java.exists():
        d = tmp_path / "src" / name
        shutil.copytree(java, d)
        for p in d.iterdir():
            p.chmod(0o644)
        return d
    return write_shape(tmp_path / "src", name).directory


@pytest.mark.parametrize("damage", list(SNAPSHOT_DAMAGES))
@pytest.mark.parametrize("name", SOURCES)
def test_unreadable_snapshot_is_named(
    damage: str, name: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    d = _source(name, tmp_path)
    path, at = SNAPSHOT_DAMAGES[damage](d)
    before = tree_snapshot(d)
    result = kafkalog_here("verify", "--json", str(d))
    assert tree_snapshot(d) == before, "verify changed a file"
    assert result.returncode in (0, 1), result.stderr
    said = [json.loads(line) for line in result.stdout.splitlines()]
    named = [(e["file"], e["position"]) for e in said if e["type"] in ("warning", "problem")]
    assert (str(path), at) in named, said
    with caplog.at_level(logging.WARNING, logger="kafkalog"):
        Log(d, had_clean_shutdown=True).close()  # the snapshot is loaded, not replaced
    assert any(
        str(path) in r.getMessage() and f"byte {at}" in r.getMessage() for r in caplog.records
    ), [r.getMessage() for r in caplog.records]
