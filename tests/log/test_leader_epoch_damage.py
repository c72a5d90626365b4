"""A ``leader-epoch-checkpoint`` that cannot be read is neither trusted nor silently emptied: a
writable open (``kafkalog serve``'s) says so with the file and the byte, and rebuilds the
cache from the batches' partition leader epochs, so the checkpoint it writes again holds every
epoch of the log (an emptied cache answered OffsetsForLeaderEpoch as if the log had no epochs
before the server's own). Every kind of ``EPOCH_CHECKPOINT_DAMAGES`` (tests/damage_kinds.py),
on brokers' logs with several epochs, clean and after a crash."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from damage_kinds import EPOCH_CHECKPOINT_DAMAGES, epochs_of_batches
from kafkalog.log import Log
from provenance import FIXTURES

SOURCES = {
    "kafka 4.0 v2-txn": FIXTURES / "kafka-4.0-snapshot-javacode" / "v2-txn-0",
    "kafka 3.9 lsx1": FIXTURES
    / "real-kafka3.9-snapshot-zk-gzip-leader-epochs-biggerbrain"
    / "lsx1-0",
}


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "crash"])
@pytest.mark.parametrize("damage", list(EPOCH_CHECKPOINT_DAMAGES))
@pytest.mark.parametrize("source", list(SOURCES))
def test_unreadable_epoch_checkpoint_is_named_and_rebuilt(
    source: str, damage: str, clean: bool, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    d = tmp_path / SOURCES[source].name
    shutil.copytree(SOURCES[source], d)
    for p in d.iterdir():
        p.chmod(0o644)
    want = epochs_of_batches(d)
    assert len(want) >= 2, want  # several epochs to lose
    at = EPOCH_CHECKPOINT_DAMAGES[damage](d)
    path = d / "leader-epoch-checkpoint"
    with caplog.at_level(logging.WARNING, logger="kafkalog"):
        log = Log(d, had_clean_shutdown=clean)
    try:
        assert [(e.epoch, e.start_offset) for e in log.leader_epochs] == want
    finally:
        log.close()
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any(str(path) in m and f"byte {at}" in m for m in said), said
    with Log(d) as again:  # what it wrote back reads as the batches say
        assert [(e.epoch, e.start_offset) for e in again.leader_epochs] == want
