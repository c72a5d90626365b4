"""``kafkalog verify`` holds every ``.txnindex`` entry against the batches (a read_committed
read drops records by them, and no CRC covers them): each kind of damage of
tests/damage_kinds.py's ``TXN_INDEX_DAMAGES`` is named with its file and byte, on real
writers' transactional shapes (tests/read_shapes.py) and Kafka's own; healthy and compacted
logs (whose cleaner drops entries and batches) verify clean."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from clirun import kafkalog, tree_snapshot
from damage_kinds import TXN_INDEX_DAMAGES
from provenance import FIXTURES
from read_shapes import SHAPES, write_shape

TXN_SHAPES = [name for name in SHAPES if "txn" in name]


def _sources(tmp_path: Path) -> list[Path]:
    java = tmp_path / "java" / "v2-txn-0"
    shutil.copytree(FIXTURES / "kafka-4.0-snapshot-javacode" / "v2-txn-0", java)
    for p in java.iterdir():
        p.chmod(0o644)
    return [java] + [write_shape(tmp_path / "shapes", name).directory for name in TXN_SHAPES]


def _problems(directory: Path) -> list[dict[str, object]]:
    result = kafkalog("verify", "--json", str(directory))
    assert result.returncode in (0, 1), result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    return [line for line in lines if line["type"] == "problem"]


@pytest.mark.parametrize("damage", list(TXN_INDEX_DAMAGES))
def test_txnindex_damage_is_named(damage: str, tmp_path: Path) -> None:
    applied = 0
    for source in _sources(tmp_path / "src"):
        d = tmp_path / "damaged" / source.parent.name / source.name
        shutil.copytree(source, d)
        done = TXN_INDEX_DAMAGES[damage](d)
        if done is None:
            continue  # e.g. no producer wrote a batch before its aborted transaction
        applied += 1
        path, at = done
        before = tree_snapshot(d)
        problems = _problems(d)
        assert tree_snapshot(d) == before, f"{damage} / {source}: verify changed a file"
        named = [(p["file"], p["position"]) for p in problems]
        assert (str(path), at) in named, f"{damage} / {source}: {problems}"
    assert applied >= 3, f"{damage}: applied to {applied} log(s) only"


def test_healthy_and_compacted_transactional_logs_verify_clean(tmp_path: Path) -> None:
    for source in _sources(tmp_path):
        assert _problems(source) == [], source
        result = kafkalog(
            "compact",
            "--config",
            "cleanup.policy=compact",
            "--config",
            "min.cleanable.dirty.ratio=0",
            "--config",
            "delete.retention.ms=0",
            "--now",
            "2100-01-01T00:00:00Z",
            str(source),
        )
        assert result.returncode == 0, result.stderr
        assert _problems(source) == [], f"{source}, compacted"
