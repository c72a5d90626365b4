"""A record byte flipped on disk (inside the batch CRC) behind ``kafkalog serve``, read by real
clients with their DEFAULT settings: librdkafka (confluent-kafka) checks no CRC by default
(``check.crcs=false``), so only serve's own check stands between it and a wrong record. Every
client gets the records before the damaged batch, right and in order, never a record of it,
then an error (CORRUPT_MESSAGE to the client; the server's log names file and byte; aiokafka
only logs it and fetches again)."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from damage_kinds import DAMAGES, entries, written
from kafka_clients import config, confluent_until_quiet, kafka_python_until_quiet
from kafkalog.log import Log
from kafkalog.server import ServerThread

QUIET_S = 1.5
LOOP_BOUND_S = 20.0
Got = list[tuple[int, bytes | None]]


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return written(tmp_path_factory.mktemp("serve-crc"))


def _confluent(boot: str, topic: str) -> tuple[Got, Any]:
    return confluent_until_quiet(boot, topic, QUIET_S, LOOP_BOUND_S, **{"group.id": "crc"})


def _kafka_python(boot: str, topic: str) -> tuple[Got, Any]:
    return kafka_python_until_quiet(boot, topic, QUIET_S, LOOP_BOUND_S)


def _aiokafka(boot: str, topic: str) -> tuple[Got, Any]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.errors import KafkaError
    from aiokafka.structs import TopicPartition

    async def main() -> tuple[Got, Any]:
        got: Got = []
        error: Any = None
        consumer = AIOKafkaConsumer(
            bootstrap_servers=boot, enable_auto_commit=False, fetch_max_wait_ms=50
        )
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            consumer.seek(tp, 0)
            start = quiet_since = time.monotonic()
            while time.monotonic() - quiet_since < QUIET_S:
                assert time.monotonic() - start < LOOP_BOUND_S, "records without end"
                try:
                    polled = await consumer.getmany(timeout_ms=100)
                except KafkaError as e:
                    error = e
                    break
                for messages in polled.values():
                    got += [(m.offset, m.value) for m in messages]
                    quiet_since = time.monotonic()
        finally:
            await consumer.stop()
        return got, error

    return asyncio.run(main())


CLIENTS = {"confluent-kafka": _confluent, "kafka-python": _kafka_python, "aiokafka": _aiokafka}


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_a_flipped_record_byte_reaches_no_client_with_default_settings(
    client: str, source: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    d = data / source.name
    shutil.copytree(source, d)
    for extra in d.glob(".kafkalog*"):
        extra.unlink()
    DAMAGES["flip records"][0](d)  # a byte of the records of the middle segment's middle batch
    (data / ".kafka_cleanshutdown").write_text("")  # no recovery: only the Fetch can see it
    damaged = [
        p for p in sorted(d.glob("*.log")) if p.read_bytes() != (source / p.name).read_bytes()
    ]
    assert len(damaged) == 1
    with Log(source, writable=False) as log:
        pristine = [(r.offset, r.value) for r in log.records()]
    with (
        caplog.at_level("ERROR", logger="kafkalog.server"),
        caplog.at_level("WARNING", logger="aiokafka"),
        ServerThread(str(data), config()) as server,
    ):
        got, client_error = CLIENTS[client](server.bootstrap, d.name.rsplit("-", 1)[0])
    said = [r.getMessage() for r in caplog.records if r.name == "kafkalog.server"]
    # every record before the damaged batch, right and in order; none of it or after it
    first_bad = int(damaged[0].name.split(".")[0]) + (len(entries(damaged[0])) // 2)
    assert got == pristine[:first_bad], f"{client}: {got[-3:]} (damage at offset {first_bad})"
    assert any(str(damaged[0]) in m and "byte" in m and "CRC" in m for m in said), said
    if client == "aiokafka":
        # aiokafka (0.14) raises no fetch error but a few to the application: it logs
        # "Unexpected error while fetching data: CorruptRecordException" and fetches again
        # (the same answer each time: never a record of the damaged batch)
        warned = [r.getMessage() for r in caplog.records if r.name.startswith("aiokafka")]
        assert any("CorruptRecordException" in m for m in warned), warned
    else:
        assert client_error is not None, f"{client}: the consumer was told nothing"
        # CORRUPT_MESSAGE (2): librdkafka's INVALID_MSG, kafka-python's CorruptRecordError
        code = client_error.code() if client == "confluent-kafka" else client_error.errno
        assert code == 2, client_error
