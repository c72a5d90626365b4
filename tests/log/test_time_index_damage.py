"""A search by time on damage no CRC or index check catches: a ``.timeindex`` entry changed
(``TIME_INDEX_DAMAGES``, tests/damage_kinds.py) or a record timestamp flipped inside a batch.
Both once answered serve's ListOffsets (``Log.offsets_for_times``) and Spark's pushed-down
timestamp bound (``Log.first_offset_at_or_after``) with a later offset, in silence (found by
tests/damage_campaign.py). Every answer must be the undamaged log's (whose answers
tests/test_read_path_differential.py holds to a brute force), with a WARNING naming the
``.timeindex``; or, for a flipped timestamp, a DamagedLogError naming the ``.log`` and the
batch's byte. Sources: Kafka's own ``v2-txn-0`` and real writers' shapes with timestamps."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from damage_kinds import (
    TIME_INDEX_DAMAGES,
    _record_timestamp_flipped,
    _time_entries,
    files_of,
    kafka_txn_log_and_shapes,
)
from kafkalog.errors import DamagedLogError
from kafkalog.log import Log
from read_shapes import truth

SHAPES = ["v2-multi-i1", "v2-txn-multi-i1-roll", "v1-i1", "v2-logappendtime-multi-i1-roll"]


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return kafka_txn_log_and_shapes(tmp_path_factory.mktemp("time-damage"), SHAPES)


def _targets(d: Path, near: tuple[Path, int] | None = None) -> list[int]:
    """Every 11th record's timestamp, and those of the (undamaged) ``.timeindex`` entries
    around entry ``near`` (a file's name and an entry number), one below and above each: the
    searches that land on the entry, and between."""
    stamps = {r.timestamp for r in truth(d).records[::11] if r.timestamp >= 0}
    if near is not None:
        entries = _time_entries(d / near[0].name)
        stamps |= {ts for ts, _ in entries[max(0, near[1] - 2) : near[1] + 3]}
    return sorted({t + k for t in stamps for k in (-1, 0, 1)})


def _answers(d: Path, targets: list[int]) -> list[tuple[object, object]]:
    with Log(d, writable=False) as log:
        return [
            (
                None if (found := log.offsets_for_times(t)) is None else found.offset,
                log.first_offset_at_or_after(t),
            )
            for t in targets
        ]


def _copy(source: Path, tmp_path: Path) -> Path:
    d = tmp_path / source.parent.name / source.name
    shutil.copytree(source, d)
    return d


@pytest.mark.parametrize("damage", list(TIME_INDEX_DAMAGES))
def test_a_search_by_time_never_follows_a_damaged_entry(
    damage: str, sources: list[Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    applied = warned = 0
    for source in sources:
        d = _copy(source, tmp_path)
        done = TIME_INDEX_DAMAGES[damage](d)
        if done is None:
            continue
        index, _ = done
        applied += 1
        targets = _targets(source, done)
        want = _answers(source, targets)
        before = files_of(d)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="kafkalog"):
            got = _answers(d, targets)
        where = f"{damage} / {source.parent.name}"
        wrong = [(t, w, g) for t, w, g in zip(targets, want, got, strict=True) if w != g]
        assert not wrong, f"{where}: (target, undamaged, damaged) {wrong[:3]}"
        said = [r.getMessage() for r in caplog.records if str(index) in r.getMessage()]
        assert all("at byte" in m and "rebuild-index" in m for m in said), where
        warned += bool(said)  # (a search that never lands on the entry needs no word)
        assert files_of(d) == before, f"{where}: files changed"
    assert applied >= 3 and warned >= 2, f"{damage}: {applied} logs, {warned} warned"


def test_a_search_by_time_checks_the_crc_of_the_batches_it_reads(
    sources: list[Path], tmp_path: Path
) -> None:
    """A flipped record timestamp moves a record in time; a search that reads its batch
    refuses (the batch's CRC), naming the ``.log`` and the batch; every other answer is the
    undamaged log's."""
    refused = 0
    for source in sources:
        d = _copy(source, tmp_path)
        done = _record_timestamp_flipped(d)
        if done is None:
            continue
        seg, position = done
        targets = _targets(source)
        want = _answers(source, targets)
        with Log(d, writable=False) as log:
            for t, (offset, first) in zip(targets, want, strict=True):
                where = f"{source.parent.name} / target {t}"
                try:
                    found = log.offsets_for_times(t)
                    assert (None if found is None else found.offset) == offset, where
                    assert log.first_offset_at_or_after(t) == first, where
                except DamagedLogError as e:
                    assert f"{seg} at byte {position}" in str(e), f"{where}: {e}"
                    refused += 1
    assert refused, "no search read the damaged batch"
