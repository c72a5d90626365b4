"""Issue 32's damage matrix over a directory written through ``kafkalog serve`` by a real client
(tests/serve_written.py: a transactional topic with an aborted transaction, a compacted topic
with the cleaner's gaps, ``__consumer_offsets`` with committed groups): every damage kind, read
by every reader of the matrix (tests/damage_kinds.py), then served to real clients.

Through serve, for every kind: the clients (kafka-python on the transactional topic,
confluent-kafka on the compacted one, with librdkafka's default ``check.crcs=false`` but in one
kind: serve's own CRC check is what stands) get only right records, in order, all of those before
the damage, then an error (the client's, or the server's log naming file and byte) or find
the partition offline; never a wait without end (each loop is bounded); the groups whose
``__consumer_offsets`` partition is intact keep their offsets (the broker stays up)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from damage_kinds import (
    DAMAGES,
    LAST_BATCH,
    READERS,
    applies,
    check_every_reader,
    flip_last_base,
    last_batch_evidence,
    segments,
)
from kafka_clients import config, confluent_until_quiet, kafka_python_until_quiet, rdkafka
from kafkalog.errors import KafkalogError
from kafkalog.log import Log
from kafkalog.records import LogReader
from kafkalog.server import ServerThread
from kafkalog.server.offset_store import partition_for_group
from serve_written import GROUPS, write_serve_source

#: the quiet time that ends a consumer's loop, and the bound of each loop
QUIET_S = 1.0
LOOP_BOUND_S = 20.0


@pytest.fixture(scope="module")
def serve_source(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_serve_source(tmp_path_factory.mktemp("serve-written") / "data")


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_every_reader_on_a_serve_written_directory(
    damage: str, serve_source: dict[str, Path], tmp_path: Path
) -> None:
    for name, source in serve_source.items():
        check_every_reader(damage, f"serve/{name}", source, tmp_path)


def test_a_last_batch_flipped_in_a_serve_written_directory(
    serve_source: dict[str, Path], tmp_path: Path
) -> None:
    """Where the segment's own indexes key the last batch (a clean stop's time-index entry),
    every reader of the matrix finds its flipped base offset."""
    proven = 0
    for name, source in serve_source.items():
        if not last_batch_evidence(source):
            continue
        d = tmp_path / name / source.name
        shutil.copytree(source, d)
        for extra in d.glob(".kafkalog*"):
            extra.unlink()
        flip_last_base("high")(d)
        for reader, read in READERS.items():
            with pytest.raises(KafkalogError) as raised:
                read(d)
            assert str(d) in str(raised.value) and "byte" in str(raised.value), (name, reader)
        proven += 1
    assert proven >= 1, "no serve-written partition's last batch had evidence"


def _pristine(d: Path) -> tuple[list[tuple[int, bytes | None]], int]:
    """The partition's records (offset, value), aborted ones too (read_uncommitted), and how
    many its last entry holds (a torn tail may take them)."""
    with Log(d, writable=False) as log:
        got = [(r.offset, r.value) for r in log.records()]
    last = [e for s in segments(d) for e in LogReader(s.read_bytes())][-1]
    return got, len(last.records())


def _kafka_python(boot: str, topic: str) -> tuple[list[tuple[int, bytes | None]], Any]:
    return kafka_python_until_quiet(boot, topic, QUIET_S, LOOP_BOUND_S)


#: the one kind read by librdkafka with ``check.crcs=true`` too (the client's check and
#: serve's); every other kind with librdkafka's default (false): serve's check alone
CLIENT_CHECKS_CRCS = "flip crc"


def _confluent(
    boot: str, topic: str, check_crcs: bool = False
) -> tuple[list[tuple[int, bytes | None]], Any]:
    settings: dict[str, Any] = {"group.id": "matrix-reader", "enable.partition.eof": False}
    if check_crcs:
        settings["check.crcs"] = True
    return confluent_until_quiet(boot, topic, QUIET_S, LOOP_BOUND_S, **settings)


def _offline(boot: str, topic: str) -> bool:
    """Whether the broker answers ``topic``'s partition as offline (no leader, or an error)."""
    from confluent_kafka.admin import AdminClient

    found = AdminClient(rdkafka(boot)).list_topics(topic, timeout=5).topics[topic]
    part = found.partitions.get(0)
    return found.error is not None or part is None or part.leader < 0 or part.error is not None


def _committed(boot: str, group: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(rdkafka(boot, **{"group.id": group, "enable.auto.commit": False}))
    try:
        return int(consumer.committed([TopicPartition("txn", 0)], timeout=10)[0].offset)
    finally:
        consumer.close()


CONSUMERS = {"txn": _kafka_python, "compacted": _confluent}


@pytest.mark.parametrize("damage", [*sorted(DAMAGES), LAST_BATCH])
def test_real_clients_through_serve_get_the_records_before_the_damage_then_an_error(
    damage: str, serve_source: dict[str, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    source_data = serve_source["txn"].parent
    data = tmp_path / "data"
    shutil.copytree(source_data, data)  # as serve left it at its clean stop
    damaged: dict[str, Path] = {}
    for name in ("txn", "compacted", "__consumer_offsets"):
        d = data / serve_source[name].name
        if not applies(damage, d):
            continue
        if damage == LAST_BATCH:
            if not last_batch_evidence(d):
                continue
            flip_last_base("high")(d)
        else:
            DAMAGES[damage][0](d)
        damaged[name] = d
    assert damaged, f"{damage}: no partition damaged: the run would prove nothing"
    torn = damage != LAST_BATCH and DAMAGES[damage][1]
    offsets_partition = int(serve_source["__consumer_offsets"].name.rsplit("-", 1)[1])
    with (
        caplog.at_level("ERROR", logger="kafkalog.server"),
        ServerThread(str(data), config(transaction_state_num_partitions=3)) as server,
    ):
        boot = server.bootstrap
        results = {
            "txn": _kafka_python(boot, "txn"),
            "compacted": _confluent(boot, "compacted", check_crcs=damage == CLIENT_CHECKS_CRCS),
        }
        offline = {topic: _offline(boot, topic) for topic in CONSUMERS}
        kept = {
            g: _committed(boot, g)
            for g in GROUPS
            if "__consumer_offsets" not in damaged or partition_for_group(g, 3) != offsets_partition
        }
    said = [r.getMessage() for r in caplog.records if r.name == "kafkalog.server"]
    assert kept == {g: GROUPS[g] for g in kept}, f"{damage}: a group lost its offset: {kept}"
    for topic, (got, client_error) in results.items():
        where = f"{damage} / {topic}"
        pristine, in_last = _pristine(serve_source[topic])
        assert got == pristine[: len(got)], f"{where}: a record read wrong, or out of order"
        if topic not in damaged:
            assert got == pristine, where
            continue
        if torn:
            # a torn tail: every record of the whole batches before it
            assert len(got) >= len(pristine) - in_last, where
            continue
        assert len(got) < len(pristine), f"{where}: the damage went unseen"
        server_error = any(str(damaged[topic]) in m and "byte" in m for m in said)
        assert client_error is not None or server_error or offline[topic], (
            f"{where}: no error anywhere, the partition online; {said}"
        )
