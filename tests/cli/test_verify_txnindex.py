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

from clirun import kafkalog_here, tree_snapshot
from damage_kinds import TXN_INDEX_DAMAGES, kafka_txn_log_and_shapes
from read_shapes import SHAPES

TXN_SHAPES = [name for name in SHAPES if "txn" in name]


def _sources(tmp_path: Path) -> list[Path]:
    return kafka_txn_log_and_shapes(tmp_path, TXN_SHAPES)


def _problems(*directories: Path) -> list[dict[str, object]]:
    """The problems ``kafkalog verify`` finds in ``directories`` (one run for all: a run
    costs a process start, the checks are the same)."""
    result = kafkalog_here("verify", "--json", *map(str, directories))
    assert result.returncode in (0, 1), result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    return [line for line in lines if line["type"] == "problem"]


@pytest.mark.parametrize("damage", list(TXN_INDEX_DAMAGES))
def test_txnindex_damage_is_named(damage: str, tmp_path: Path) -> None:
    damaged: dict[Path, tuple[Path, int]] = {}
    for source in _sources(tmp_path / "src"):
        d = tmp_path / "damaged" / source.parent.name / source.name
        shutil.copytree(source, d)
        done = TXN_INDEX_DAMAGES[damage](d)
        if done is not None:  # None: e.g. no producer wrote a batch before its aborted txn
            damaged[d] = (Path(done[0]), done[1])
    assert len(damaged) >= 3, f"{damage}: applied to {len(damaged)} log(s) only"
    before = {d: tree_snapshot(d) for d in damaged}
    problems = _problems(*damaged)
    named = {(Path(str(p["file"])), p["position"]) for p in problems}
    for d, (path, at) in damaged.items():
        assert tree_snapshot(d) == before[d], f"{damage} / {d}: verify changed a file"
        assert (path, at) in named, f"{damage} / {d}: {problems}"


def test_healthy_and_compacted_transactional_logs_verify_clean(tmp_path: Path) -> None:
    sources = _sources(tmp_path)
    assert _problems(*sources) == []
    for source in sources:
        result = kafkalog_here(
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
    assert _problems(*sources) == [], "compacted"
