"""Whatever ``kafkalog serve`` writes, ``kafkalog verify`` accepts (issue 36 point 3): serve is
stopped right after each housekeeping duty (retention deleting every segment, the cleaner,
DeleteRecords, rolls by size and by time) and its directory verified."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_serve_produce_checks import produce
from test_serve_validation import create, end_offset
from test_serve_wire import call

from clirun import kafkalog_here
from kafka_clients import config, wait_until
from kafkalog.log.checkpoints import OffsetCheckpoint
from kafkalog.records import Record, encode_batch
from kafkalog.server import ServerThread


def _batch(i: int, *, key: bytes | None = None, age_ms: int = 0) -> bytes:
    ts = int(time.time() * 1000) - age_ms
    return encode_batch([Record.of(b"value %05d" % i + bytes(100), key=key, timestamp=ts)])


def _fill(server: ServerThread, topic: str, n: int, **kw: Any) -> None:
    for i in range(n):
        key = b"k%d" % (i % 5) if kw.get("keyed") else None
        part = produce(server, topic, _batch(i, key=key, age_ms=kw.get("age_ms", 0)))
        assert part.error_code == 0, part.error_message


def _start_offset(server: ServerThread, topic: str) -> int:
    reply = call(
        server,
        2,
        8,
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": -2}]}],
        },
    )
    return int(reply.topics[0].partitions[0].offset)


def _retention_took_everything(server: ServerThread, data: Path) -> None:
    create(server, "aged", {"retention.ms": "1000", "segment.bytes": "1024"})
    _fill(server, "aged", 30, age_ms=60_000)
    assert wait_until(lambda: _start_offset(server, "aged") == 30)
    assert wait_until(lambda: len(list((data / "aged-0").glob("*.log"))) == 1)


def _cleaned(server: ServerThread, data: Path) -> None:
    create(
        server,
        "keyed",
        {"cleanup.policy": "compact", "segment.bytes": "1024", "min.cleanable.dirty.ratio": "0.01"},
    )
    _fill(server, "keyed", 60, keyed=True)
    checkpoint = data / "cleaner-offset-checkpoint"
    assert wait_until(
        lambda: checkpoint.exists() and ("keyed", 0) in OffsetCheckpoint.read(str(checkpoint))
    )


def _records_deleted(server: ServerThread, data: Path) -> None:
    create(server, "deleted", {"segment.bytes": "1024"})
    _fill(server, "deleted", 30)
    for offset in (7, 30):  # inside a segment, then the log end: everything
        reply = call(
            server,
            21,
            2,
            {
                "topics": [
                    {"name": "deleted", "partitions": [{"partition_index": 0, "offset": offset}]}
                ],
                "timeout_ms": 5000,
            },
        )
        part = reply.topics[0].partitions[0]
        assert (part.error_code, part.low_watermark) == (0, offset)


def _rolled(server: ServerThread, data: Path) -> None:
    create(server, "by-size", {"segment.bytes": "1024"})
    create(server, "by-time", {"segment.ms": "1"})
    _fill(server, "by-size", 20)
    for _ in range(3):
        _fill(server, "by-time", 1)
        time.sleep(0.01)
    assert len(list((data / "by-size-0").glob("*.log"))) > 2
    assert len(list((data / "by-time-0").glob("*.log"))) >= 3
    assert end_offset(server, "by-time") == 3


DUTIES: dict[str, Callable[[ServerThread, Path], None]] = {
    "retention": _retention_took_everything,
    "cleaning": _cleaned,
    "delete-records": _records_deleted,
    "roll": _rolled,
}


@pytest.mark.usefixtures("compiled_cleaner")  # its wait for a cleaning: see the fixture
@pytest.mark.parametrize("duty", sorted(DUTIES))
def test_serve_directory_verifies_after_each_duty(tmp_path: Path, duty: str) -> None:
    data = tmp_path / "data"
    data.mkdir()
    settings = config(
        log_retention_check_interval_ms=100,
        log_cleaner_backoff_ms=100,
        log_flush_offset_checkpoint_interval_ms=100,
    )
    with ServerThread(str(data), settings) as server:
        DUTIES[duty](server, data)
    done = kafkalog_here("verify", str(data))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    # and again after a restart on it (recovery and start-up write nothing verify refuses)
    with ServerThread(str(data), settings) as server:
        create(server, "after", {})
        _fill(server, "after", 1)
    done = kafkalog_here("verify", str(data))
    assert done.returncode == 0, done.stdout + done.stderr
