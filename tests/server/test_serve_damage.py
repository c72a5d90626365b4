"""A damaged log behind ``kafkalog serve``: an unchanged client (kafka-python) gets every
record it is given right, and the damage is an error, never records missing in silence or
records at offsets they do not have (issue 23's damage matrix, the serve Fetch reader).

Opened after an unclean stop, the partition's recovery finds the damage and the partition is
offline (KAFKA_STORAGE_ERROR, the server logging the file and byte); opened after a clean stop
(no recovery), the Fetch that reaches the damage fails the same way, or hands the client the
damaged batch whose CRC the client checks (Kafka's consumers check CRCs by default). A base
offset is outside the CRC: the Fetch checks the offsets of what it returns."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from damage_kinds import DAMAGES, written
from kafka_clients import config, kafka_python_until_quiet
from kafkalog.server import ServerThread

CASES = [
    "flip records",
    "flip crc",
    "flip base offset",
    "flip length",
    "hole of 60 bytes",
    "garbage .log",
]


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return written(tmp_path_factory.mktemp("serve-damage"))


@pytest.mark.parametrize("clean", [False, True], ids=["after a crash", "after a clean stop"])
@pytest.mark.parametrize("damage", CASES)
def test_a_consumer_gets_right_records_and_the_damage_is_an_error(
    damage: str, clean: bool, source: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    d = data / source.name
    shutil.copytree(source, d)
    for extra in d.glob(".kafkalog*"):
        extra.unlink()
    DAMAGES[damage][0](d)
    if clean:
        (data / ".kafka_cleanshutdown").write_text("")
    damaged = [
        p.name for p in sorted(d.glob("*.log")) if p.read_bytes() != (source / p.name).read_bytes()
    ]
    with (
        caplog.at_level("ERROR", logger="kafkalog.server"),
        ServerThread(str(data), config()) as server,
    ):
        topic = d.name.rsplit("-", 1)[0]
        got, client_error = kafka_python_until_quiet(server.bootstrap, topic, 1.5, 20.0)
    where = f"{damage} / {'clean' if clean else 'crash'}"
    assert all(v == b"value %05d" % o for o, v in got), f"{where}: a record read wrong"
    assert [o for o, _ in got] == list(range(len(got))), where
    assert len(got) < 300, f"{where}: the damage went unseen"
    said = [r.getMessage() for r in caplog.records if r.name == "kafkalog.server"]
    server_error = any(
        any(name in m for name in damaged) and "byte" in m and "kafkalog repair" in m for m in said
    )
    assert client_error is not None or server_error, f"{where}: no error anywhere; {said}"


@pytest.mark.parametrize("damage", ["txnindex deleted", "txnindex cut short"])
def test_a_lost_txnindex_never_hands_a_read_committed_consumer_aborted_records(
    damage: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A ``.txnindex`` deleted or cut short (tests/damage_kinds.py ``TXNINDEX_LOST``) behind
    serve, opened after a clean stop (no recovery rewrites it): librdkafka with
    ``isolation.level=read_committed`` gets only committed records, all of them when the
    Fetch holds the whole transaction (answered as aborted), else the Fetch that meets the
    marker is refused (KAFKA_STORAGE_ERROR) and serve logs the ``.log``, the byte and
    ``kafkalog rebuild-index``. (A transaction spanning fetches went out in part before the
    fetch that meets its marker: that is said, not undone.)"""
    from damage_kinds import TXNINDEX_LOST, committed_truth, kafka_txn_log_and_shapes
    from kafka_clients import confluent_until_quiet

    sources = kafka_txn_log_and_shapes(
        tmp_path / "src", ["v2-txn-single-i4096", "v2-txn-nested-aborts-follower-i1-roll"]
    )
    refused = 0
    for k, source in enumerate(sources):
        data = tmp_path / str(k)
        data.mkdir()
        d = data / source.name
        shutil.copytree(source, d)
        want = committed_truth(d)
        lost = TXNINDEX_LOST[damage](d)
        (data / ".kafka_cleanshutdown").write_text("")
        caplog.clear()
        with (
            caplog.at_level("WARNING", logger="kafkalog"),
            ServerThread(str(data), config()) as server,
        ):
            topic = d.name.rsplit("-", 1)[0]
            got, _ = confluent_until_quiet(
                server.bootstrap, topic, 1.5, 20.0, **{"isolation.level": "read_committed"}
            )
        offsets = [o for o, _ in got]
        log_path = str(lost)[: -len(".txnindex")] + ".log"
        said = [r.getMessage() for r in caplog.records]
        named = any(log_path in m and "byte" in m and "rebuild-index" in m for m in said)
        if offsets != want:
            refused += 1
            assert named, f"{damage} / {d}: {len(offsets)} of {len(want)}, nothing said: {said}"
    assert refused, "no source's fetch met the damage"


def test_a_log_compacted_by_kafka_before_3_1_serves_every_committed_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """ABORT markers of emptied transactions that no ``.txnindex`` entry lists and no delete
    horizon marks, as a Kafka older than 3.1 leaves them (tests/read_shapes.py
    ``compacted_before_kafka_31``): healthy, so librdkafka with read_committed gets every
    committed record and serve says nothing."""
    from damage_kinds import committed_truth
    from kafka_clients import confluent_until_quiet
    from read_shapes import compacted_before_kafka_31, write_shape

    for name in ["v2-txn-multi-i1-roll", "v2-txn-nested-aborts-follower-i1-roll"]:
        d = compacted_before_kafka_31(write_shape(tmp_path / "w", name), tmp_path / name)
        (d.parent / ".kafka_cleanshutdown").write_text("")
        want = committed_truth(d)
        caplog.clear()
        with (
            caplog.at_level("WARNING", logger="kafkalog"),
            ServerThread(str(d.parent), config()) as server,
        ):
            got, error = confluent_until_quiet(
                server.bootstrap,
                d.name.rsplit("-", 1)[0],
                1.5,
                20.0,
                **{"isolation.level": "read_committed", "max.partition.fetch.bytes": 3000},
            )
        assert error is None, (name, error)
        assert [o for o, _ in got] == want, name
        assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
