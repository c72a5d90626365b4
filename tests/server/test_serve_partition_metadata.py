"""A partition whose ``partition.metadata`` cannot be read is offline in ``kafkalog serve``
(Kafka does not load it either), named with file and byte, and the rest serve; before, serve
gave its topic a new random id at every start, in silence (a client keyed by topic id saw
the topic recreated). Every kind of ``PARTITION_METADATA_DAMAGES`` (tests/damage_kinds.py) on
a copy of Kafka's own data directory."""

from __future__ import annotations

import logging
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_serve_wire import call

from clirun import tree_snapshot
from damage_kinds import PARTITION_METADATA_DAMAGES
from kafka_clients import config
from kafkalog.errors import DamagedLogError
from kafkalog.log import Log
from kafkalog.server import ServerThread
from provenance import FIXTURES

LEADER_NOT_AVAILABLE = 5


def _metadata(server: ServerThread, *topics: str) -> object:
    return call(
        server,
        3,
        12,
        {
            "topics": [{"name": t} for t in topics],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        },
    )


@pytest.mark.parametrize("damage", list(PARTITION_METADATA_DAMAGES))
def test_unreadable_partition_metadata_is_offline_and_named(
    damage: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "data"
    shutil.copytree(FIXTURES / "kafka-4.0-snapshot-javacode", data)
    for p in data.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    bad = data / "v2-txn-0"
    at = PARTITION_METADATA_DAMAGES[damage](bad)
    path = bad / "partition.metadata"
    with pytest.raises(DamagedLogError) as refused:
        Log(bad)
    assert f"{path} at byte {at}" in str(refused.value)
    before = tree_snapshot(bad)
    ids = []
    with caplog.at_level(logging.WARNING, logger="kafkalog"):
        for _ in range(2):  # two starts: the healthy topic keeps its id
            with ServerThread(str(data), config()) as server:
                meta = _metadata(server, "v2-txn", "v2-gzip")
                offline, healthy = meta.topics[0], meta.topics[1]  # type: ignore[attr-defined]
                assert offline.partitions[0].error_code == LEADER_NOT_AVAILABLE
                assert healthy.partitions[0].error_code == 0
                ids.append(healthy.topic_id)
    assert ids[0] == ids[1]
    mine = str(bad / ".kafkalog.lock")  # the writer's own lock, taken by every writable open
    after = {k: v for k, v in tree_snapshot(bad).items() if k != mine}
    assert after == {k: v for k, v in before.items() if k != mine}, "serve changed its files"
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any(f"{path} at byte {at}" in m for m in said), said
    with Log(bad, writable=False) as log:  # a reader still reads every record
        assert sum(1 for _ in log.records()) > 0
