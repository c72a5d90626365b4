"""A log compacted by a Kafka older than 3.1 (tests/read_shapes.py
``compacted_before_kafka_31``): ABORT markers of emptied transactions that no ``.txnindex`` entry
lists and no delete horizon marks (that cleaner drops the entry from the second cleaning on,
and stamped no horizon). Kafka produced the log healthy, so every read_committed reader
(``Log.fetch`` as serve reads, at every fetch size, and the Spark Python task) reads exactly
the committed records with no warning; with the look-back switched off they refused it (the
false alarm this guards against). A ``.txnindex`` deleted or cut short in such a log is still
never read as committed (tests/damage_kinds.py ``TXNINDEX_LOST``)."""

from __future__ import annotations

import logging
import struct
from pathlib import Path

import pytest

from clirun import kafkalog_here
from damage_kinds import (
    COMMITTED_READERS,
    TXNINDEX_LOST,
    check_txnindex_lost,
    committed_fetch,
    committed_truth,
)
from kafkalog.errors import DamagedLogError
from kafkalog.log import abort_markers
from kafkalog.records import ControlType, LogReader, RecordBatch
from read_shapes import compacted_before_kafka_31, write_shape

#: transactional shapes with several segments (Kafka never cleans the active one)
PRE31_SHAPES = ["v2-txn-multi-i1-roll", "v2-txn-nested-aborts-follower-i1-roll"]


@pytest.fixture(scope="module")
def pre31(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("pre31")
    return [
        compacted_before_kafka_31(write_shape(root / "written", name), root / "compacted")
        for name in PRE31_SHAPES
    ]


def unlisted_aborts(d: Path) -> list[int]:
    """Offsets of the ABORT markers no ``.txnindex`` entry ends at, none horizon-stamped."""
    listed = set()
    for p in d.glob("*.txnindex"):
        data = p.read_bytes()
        listed |= {struct.unpack_from(">q", data, at + 18)[0] for at in range(0, len(data), 34)}
    out = []
    for log in sorted(d.glob("*.log")):
        for b in LogReader(log.read_bytes()):
            if isinstance(b, RecordBatch) and b.is_control:
                assert not b.has_delete_horizon
                if b.control_record().type is ControlType.ABORT and b.base_offset not in listed:
                    out.append(b.base_offset)
    return out


def test_the_shape_holds_what_an_old_cleaner_leaves(pre31: list[Path]) -> None:
    for d in pre31:
        assert len(unlisted_aborts(d)) >= 5, d
        assert (d.parent / "cleaner-offset-checkpoint").exists()
        verified = kafkalog_here("verify", str(d))  # kafkalog's own check finds it healthy
        assert verified.returncode == 0 and "OK" in verified.stdout, verified.stdout


@pytest.mark.parametrize("reader", [*COMMITTED_READERS, "fetch of 500 bytes", "fetch of 3 KB"])
def test_every_committed_reader_reads_it_as_healthy(
    pre31: list[Path], reader: str, caplog: pytest.LogCaptureFixture
) -> None:
    read = {
        **COMMITTED_READERS,
        "fetch of 500 bytes": lambda d: committed_fetch(d, 500),
        "fetch of 3 KB": lambda d: committed_fetch(d, 3000),
    }[reader]
    with caplog.at_level(logging.WARNING, logger="kafkalog"):
        for d in pre31:
            assert read(d) == committed_truth(d), d
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("reader", list(COMMITTED_READERS))
def test_without_the_look_back_it_was_refused(
    pre31: list[Path], reader: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The false alarm the look-back removes (so the test above cannot pass vacuously)."""
    monkeypatch.setattr(abort_markers.TransactionLookback, "__call__", lambda self, m: False)
    for d in pre31:
        with pytest.raises(DamagedLogError, match="ABORT marker"):
            COMMITTED_READERS[reader](d)


@pytest.mark.parametrize("reader", list(COMMITTED_READERS))
@pytest.mark.parametrize("damage", list(TXNINDEX_LOST))
def test_a_lost_txnindex_is_still_never_read_as_committed(
    pre31: list[Path], reader: str, damage: str, tmp_path: Path
) -> None:
    outcomes = [
        check_txnindex_lost(damage, COMMITTED_READERS[reader], d, tmp_path / str(k))
        for k, d in enumerate(pre31)
    ]
    assert len(outcomes) == len(pre31)


def test_a_lost_entry_of_a_transaction_with_records_is_refused(
    pre31: list[Path], tmp_path: Path
) -> None:
    """Every .txnindex of the log removed: the markers whose transactions still have records
    (above the cleaned range) are refused or their records dropped, never read as committed;
    the look-back finds the records, whatever segment they are in."""
    import shutil

    outcomes = []
    for k, source in enumerate(pre31):
        d = tmp_path / str(k) / source.parent.name / source.name
        shutil.copytree(source.parent, d.parent)
        want = committed_truth(d)
        for p in d.glob("*.txnindex"):
            p.unlink()
        for reader in COMMITTED_READERS.values():
            try:
                got = reader(d)
            except DamagedLogError as e:
                assert "rebuild-index" in str(e) and "byte" in str(e)
                outcomes.append("refused")
            else:
                assert got == want
                outcomes.append("read")
    assert "refused" in outcomes
