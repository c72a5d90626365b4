"""The cleaner reads which batches are aborted from ``.txnindex`` (as Kafka's does), and no CRC
covers it: a damaged entry must never make it delete committed records as aborted. Each kind
of ``TXN_INDEX_DAMAGES`` (tests/damage_kinds.py), done to the first entry (a segment the
cleaner cleans) of real writers' transactional shapes (tests/read_shapes.py), opened as after
a clean shutdown (no recovery rebuilds the index): the cleaning refuses, naming the entry's
file and byte, or keeps every record an undamaged cleaning keeps."""

from __future__ import annotations

from pathlib import Path

import pytest

import damage_kinds
from damage_kinds import TXN_INDEX_DAMAGES
from kafkalog.errors import DamagedLogError
from kafkalog.log import Log, TopicConfig
from read_shapes import SHAPES, write_shape

TXN_SHAPES = [name for name in SHAPES if "txn" in name]
CONFIG = TopicConfig(cleanup_policy="compact", min_cleanable_dirty_ratio=0.0, delete_retention_ms=0)
NOW = 4102444800000  # 2100: every horizon passed


def _clean(d: Path) -> list[int]:
    with Log(d, CONFIG, had_clean_shutdown=True) as log:
        log.compact(now=NOW)
        return [r.offset for r in log.records()]


@pytest.mark.parametrize("damage", list(TXN_INDEX_DAMAGES))
def test_cleaner_never_deletes_by_a_damaged_txnindex(
    damage: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(damage_kinds.TXN_ENTRY, "pick", 0)
    refused = 0
    for name in TXN_SHAPES:
        kept = _clean(write_shape(tmp_path / "pristine", name).directory)
        d = write_shape(tmp_path / "damaged", name).directory
        done = TXN_INDEX_DAMAGES[damage](d)
        if done is None:
            continue
        path, at = done
        try:
            got = _clean(d)
        except DamagedLogError as e:
            # an entry whose offsets the walk contradicts is named; one missing (removed,
            # passed over by a look-up an earlier entry's last stable offset ended, or under
            # another producer's id) where the marker's segment would hold it
            exact = "first offset" in damage
            assert f"{path} at byte {at}" in str(e) if exact else ".txnindex at byte" in str(e), (
                f"{damage} / {name}: {e}"
            )
            refused += 1
            continue
        lost = sorted(set(kept) - set(got))
        assert not lost, f"{damage} / {name}: the cleaner deleted offsets {lost[:10]}"
    if damage in (
        "producer id flipped",
        "first offset lowered over the producer's earlier batches",
    ):
        assert refused, f"{damage}: never refused"
