"""A partition whose files are wrong in ways no CRC sees, behind ``kafkalog serve`` beside a
healthy one (tryout18): a segment ``.log`` that is a directory (or cannot be read) makes the
partition offline (KAFKA_STORAGE_ERROR, the server naming the file) while the other topic
serves; a segment removed whole from the middle is read across, as Kafka's fetch does, with a
WARNING naming the files and the offsets no batch holds (never in silence)."""

from __future__ import annotations

import logging
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_serve_crc import CLIENTS
from test_serve_offline import KAFKA_STORAGE_ERROR, _fetch, healthy_serves

from damage_kinds import FILE_DAMAGES, written
from kafka_clients import config
from kafkalog.records import LogReader
from kafkalog.server import ServerThread


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return written(tmp_path_factory.mktemp("bad-files"))  # topic "written", offsets 0..299


def _damaged_copy(source: Path, tmp_path: Path, damage: str) -> tuple[Path, Path, Path]:
    """A data directory holding a copy of ``source`` with ``damage`` done (kafkalog's own
    files removed): the data directory, the partition and the file the damage hit."""
    data = tmp_path / "data"
    d = data / source.name
    shutil.copytree(source, d)
    for extra in d.glob(".kafkalog*"):
        extra.unlink()
    return data, d, FILE_DAMAGES[damage](d)


def _offsets(records: bytes | None) -> list[int]:
    return [r.offset for e in LogReader(records or b"") for r in e.records()]


@pytest.mark.parametrize("clean", [False, True], ids=["after a crash", "after a clean stop"])
@pytest.mark.parametrize("damage", ["segment .log is a directory"])
def test_an_unreadable_segment_makes_its_partition_offline_not_the_server(
    damage: str, clean: bool, source: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data, _, victim = _damaged_copy(source, tmp_path, damage)
    if clean:
        (data / ".kafka_cleanshutdown").write_text("")
    caplog.set_level(logging.ERROR, logger="kafkalog.server")
    with ServerThread(str(data), config()) as server:
        assert _fetch(server, "written", 0).error_code == KAFKA_STORAGE_ERROR
        assert _fetch(server, "written", 200).error_code == KAFKA_STORAGE_ERROR
        healthy_serves(server)
    said = [r.getMessage() for r in caplog.records]
    assert any(victim.name in m and "byte 0" in m for m in said), said


@pytest.mark.parametrize("damage", ["middle segment removed, every file", "middle .log emptied"])
def test_a_gap_between_segments_is_read_across_with_a_warning(
    damage: str, source: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data, d, victim = _damaged_copy(source, tmp_path, damage)
    after = min(int(p.name[:20]) for p in d.glob("*.log") if p.name > victim.name)
    lost = range(int(victim.name[:20]), after)  # the written log's batches hold one record
    (data / ".kafka_cleanshutdown").write_text("")
    caplog.set_level(logging.WARNING, logger="kafkalog")
    with ServerThread(str(data), config()) as server:
        offsets: list[int] = []
        at = 0
        while at < 300:
            part = _fetch(server, "written", at)
            assert part.error_code == 0, (at, part.error_code)
            got = _offsets(part.records)
            assert got, at
            offsets += [o for o in got if o >= at]
            at = got[-1] + 1
        expected = [o for o in range(300) if o not in lost]
        assert offsets == expected
        # unchanged clients (confluent-kafka, kafka-python, aiokafka) read across it too,
        # without an error, every record right
        for client_name, client in CLIENTS.items():
            got, error = client(server.bootstrap, "written")
            assert error is None, (client_name, error)
            assert got == [(o, b"value %05d" % o) for o in expected], client_name
        healthy_serves(server)
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(f"offsets {lost[0]}..{after - 1} ({len(lost)})" in m for m in said), said
