"""Issue 33 §1: every cleaning of a damaged log ends. Segments of a compacted log (plain,
compressed, transactional and keyless batches, several segments) are cut, corrupted or
overwritten under an open ``Log``, then ``Log.compact`` runs in a thread with a time bound:
each run must end within it with a result or a ``kafkalog`` error (never a hang, never another
exception), and the log's lock must be free afterwards (its appends and reads go on)."""

from __future__ import annotations

import os
import random
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

from kafkalog.errors import KafkalogError
from kafkalog.log import Log, TopicConfig
from kafkalog.records import Record, encode_batch
from kafkalog.records.batch import encode_control_batch
from kafkalog.records.model import ControlType
from kafkalog.records.types import Compression

BOUND = 60.0  # seconds: a cleaning of these ~20 KB takes well under one
RUNS = 48

CONFIG = TopicConfig(
    cleanup_policy="compact", segment_bytes=1500, file_delete_delay_ms=0, delete_retention_ms=0
)


def build(directory: Path) -> None:
    """A compacted log of the shapes real writers leave: one-record and many-record batches,
    gzip batches, a committed and an aborted transaction, tombstones, keyless records."""
    with Log(directory, CONFIG) as log:
        rng = random.Random(7)
        for i in range(120):
            kind = i % 6
            if kind == 0:
                records = [Record(-1, 1000 + i, b"k%d" % rng.randrange(15), b"v%d" % i)]
                log.append_records(records)
            elif kind == 1:
                records = [Record(-1, 1000 + i, b"k%d" % (j % 15), b"m%d" % j) for j in range(5)]
                log.append_records(records)
            elif kind == 2:
                records = [Record(-1, 1000 + i, b"k%d" % (j % 15), b"z" * 30) for j in range(4)]
                log.append_records(records, compression=Compression.GZIP)
            elif kind == 3:
                log.append_records([Record(-1, 1000 + i, b"k%d" % rng.randrange(15), None)])
            elif kind == 4:
                pid = 100 + i
                batch = encode_batch(
                    [Record(-1, 1000 + i, b"t%d" % (i % 3), b"txn")],
                    producer_id=pid,
                    producer_epoch=0,
                    base_sequence=0,
                    is_transactional=True,
                )
                log.append(batch)
                marker = encode_control_batch(
                    ControlType.COMMIT if i % 12 == 4 else ControlType.ABORT,
                    offset=0,
                    timestamp=1000 + i,
                    producer_id=pid,
                    producer_epoch=0,
                )
                log.append(marker, origin="coordinator")
            else:
                batch = encode_batch(
                    [Record(-1, 1000 + i, None, b"keyless")], base_offset=log.log_end_offset
                )
                log.append(batch, assign_offsets=False)
        log.roll()


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fuzz") / "data"
    build(root / "t-0")
    return root


def damage(log: Log, rng: random.Random) -> str:
    """One random kind of damage to a segment below the active one, under the open log."""
    segments = [s for s in log.segments[:-1] if s.size > 0]
    seg = rng.choice(segments)
    path = seg.log.path
    size = os.path.getsize(path)
    kind = rng.choice(["cut", "flip", "garbage", "size-field", "zeros", "cut-to-header"])
    with open(path, "r+b") as f:
        if kind == "cut":
            f.truncate(rng.randrange(size))
        elif kind == "cut-to-header":
            f.truncate(rng.choice([0, 8, 12, 20, 61]) if size > 61 else 0)
        elif kind == "flip":
            for _ in range(rng.randint(1, 4)):
                at = rng.randrange(size)
                f.seek(at)
                b = f.read(1)
                f.seek(at)
                f.write(bytes([b[0] ^ (1 << rng.randrange(8))]))
        elif kind == "garbage":
            at = rng.randrange(size)
            f.seek(at)
            f.write(rng.randbytes(min(rng.randint(1, 64), size - at)))
        elif kind == "size-field":
            # a batch's length field (byte 8 of an entry): absurd, small, or negative
            f.seek(8)
            f.write(rng.choice([0, 1, 11, 2**31 - 1, 2**32 - 1, size]).to_bytes(4, "big"))
        else:
            at = rng.randrange(size)
            f.seek(at)
            f.write(bytes(min(rng.randint(1, 200), size - at)))
    return f"{kind} {os.path.basename(path)}"


def bounded_compact(log: Log) -> tuple[str, Any]:
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["result"] = log.compact(now=10_000)
        except KafkalogError as e:
            out["error"] = e
        except BaseException as e:  # anything else is a defect: handed to the test
            out["other"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(BOUND)
    if t.is_alive():
        return "hang", None
    if "other" in out:
        return "other", out["other"]
    return ("error", out["error"]) if "error" in out else ("result", out["result"])


def test_every_cleaning_of_a_damaged_log_ends(template: Path, tmp_path: Path) -> None:
    rng = random.Random(33)
    outcomes: dict[str, int] = {}
    for run in range(RUNS):
        data = tmp_path / f"run{run}"
        shutil.copytree(template, data)
        log = Log(data / "t-0", CONFIG)
        what = damage(log, rng)
        ended, value = bounded_compact(log)
        assert ended != "hang", f"run {run} ({what}): Log.compact did not end in {BOUND} s"
        assert ended != "other", f"run {run} ({what}): {value!r} is not a kafkalog error"
        if ended == "error":
            # the error names the file and the byte
            assert value.path and value.position is not None, f"run {run} ({what}): {value}"
        outcomes[ended] = outcomes.get(ended, 0) + 1
        # the log's lock is free: no cleaning left holding it
        assert log.lock.acquire(timeout=5), f"run {run} ({what}): the log's lock is held"
        log.lock.release()
        log.append_records([Record(-1, 5000, b"after", b"x")])
        log.close()
    # the damage is real: most runs meet it
    assert outcomes.get("error", 0) >= RUNS // 2, outcomes
