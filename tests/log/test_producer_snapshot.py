"""Producer-state snapshots written by Kafka read to what PROVENANCE.md lists, CRC-checked."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkalog.errors import CorruptRecordError
from kafkalog.log.producer_snapshot import read_snapshot
from provenance import FileFacts, snapshots


@pytest.mark.parametrize("facts", snapshots(), ids=lambda f: f.rel)
def test_fixture_snapshot(facts: FileFacts) -> None:
    entries = read_snapshot(facts.path)
    assert len(entries) == facts.entry_count
    for want, got in zip(facts.snapshot_entries or (), entries, strict=False):
        assert (got.producer_id, got.epoch, got.last_sequence, got.last_offset) == (
            want.producer_id,
            want.epoch,
            want.last_seq,
            want.last_offset,
        )
        assert got.coordinator_epoch == want.coordinator_epoch
        assert got.current_txn_first_offset == want.current_txn_first_offset
        if want.timestamp is not None:
            assert got.timestamp == want.timestamp


def test_corrupt_snapshot(tmp_path: Path) -> None:
    src = next(f for f in snapshots() if (f.entry_count or 0) > 0)
    data = bytearray(src.path.read_bytes())
    data[-1] ^= 1
    bad = tmp_path / "00000000000000000010.snapshot"
    bad.write_bytes(bytes(data))
    with pytest.raises(CorruptRecordError, match="CRC"):
        read_snapshot(bad)
    bad.write_bytes(bytes(data[:5]))
    with pytest.raises(CorruptRecordError, match="shorter"):
        read_snapshot(bad)
