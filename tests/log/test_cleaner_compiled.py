"""The cleaner's compiled passes (a chunk of batches per numba call) against its per-batch path:
on the same logs, the files both leave (segments, indexes, checkpoints, snapshots) are the same
bytes, the counts the same, and a damaged log gives the same error. The histories mix the
shapes real writers leave: plain batches of many records, tombstones (and their delete horizon
at a later cleaning), keyless records (a follower's append), LogAppendTime, headers,
compressed batches, idempotent producers (their last batch kept even when emptied),
transactions committed and aborted, several segments and groups, segments larger than one
append of the cleaned segment, a batch larger than the read buffer, and dedupe buffers that
hold a few dozen keys (several rounds, the map growing and filling mid-batch)."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path
from typing import Any

import pytest

from kafkalog.errors import DamagedLogError
from kafkalog.log import Log, TopicConfig
from kafkalog.log.cleaner import CleanerOptions, chunk_walk
from kafkalog.records import Record, encode_batch
from kafkalog.records.batch import encode_control_batch
from kafkalog.records.model import ControlType, Header
from kafkalog.records.types import Compression, TimestampType


def config(segment_bytes: int) -> TopicConfig:
    return TopicConfig(
        cleanup_policy="compact",
        segment_bytes=segment_bytes,
        max_message_bytes=4 << 20,
        file_delete_delay_ms=0,
        delete_retention_ms=1000,
        index_interval_bytes=4096,
    )


class History:
    """A random history as producers, coordinators and followers write one, appended a phase
    at a time (the same seed gives the same batches)."""

    def __init__(self, seed: int, segment_bytes: int) -> None:
        self.r = random.Random(seed)
        self.segment_bytes = segment_bytes
        self.keys = self.r.choice([6, 60, 600])
        self.now = 1000
        self.seq = {1: 0, 2: 0, 3: 0, 4: 0}
        self.open_txns: set[int] = set()

    def append(self, directory: Path, ops: int) -> None:
        r = self.r
        big = self.segment_bytes >= 1 << 20
        with Log(directory, config(self.segment_bytes)) as log:
            for _ in range(ops):
                self.now += r.randint(0, 3)
                self._one(log, r.random(), big)
            if r.random() < 0.5:  # the round's last batch loses all: it stays, emptied
                keyless = encode_batch(
                    [Record(-1, self.now + 10, None, b"x")], base_offset=log.log_end_offset
                )
                log.append(keyless, assign_offsets=False)
            log.roll()

    def _one(self, log: Log, k: float, big: bool) -> None:
        r, keys, now, seq = self.r, self.keys, self.now, self.seq
        if k < 0.6:
            n = r.choice([1, 5, 100, 300] if big else [1, 5, 40])
            recs = [
                Record(
                    -1,
                    now + r.randint(-5, 5),
                    b"k%d" % r.randrange(keys),
                    None if r.random() < 0.1 else b"v" * r.randint(0, 150),
                    (Header("h", b"x"),) if r.random() < 0.05 else (),
                )
                for _ in range(n)
            ]
            codec = Compression.NONE
            if r.random() < 0.15:
                codec = r.choice([Compression.GZIP, Compression.ZSTD])
            append_time = r.random() < 0.1
            log.append(
                encode_batch(
                    recs,
                    compression=codec,
                    timestamp_type=TimestampType.LOG_APPEND_TIME
                    if append_time
                    else TimestampType.CREATE_TIME,
                    log_append_time=now if append_time else None,
                )
            )
        elif k < 0.75:  # idempotent producers
            pid = r.choice([3, 4])
            n = r.choice([1, 20])
            recs = [
                Record(-1, now, b"k%d" % r.randrange(keys), None if r.random() < 0.1 else b"i")
                for _ in range(n)
            ]
            log.append(
                encode_batch(recs, producer_id=pid, producer_epoch=0, base_sequence=seq[pid])
            )
            seq[pid] += n
        elif k < 0.85:  # transactions (some left open across a cleaning: the LSO bounds it)
            pid = r.choice([1, 2])
            recs = [Record(-1, now, b"k%d" % r.randrange(keys), b"t")]
            batch = encode_batch(
                recs,
                producer_id=pid,
                producer_epoch=0,
                base_sequence=seq[pid],
                is_transactional=True,
            )
            log.append(batch)
            seq[pid] += 1
            self.open_txns.add(pid)
        elif k < 0.9:
            if self.open_txns:
                end = ControlType.COMMIT if r.random() < 0.5 else ControlType.ABORT
                pid = sorted(self.open_txns)[0]
                self.open_txns.discard(pid)
                marker = encode_control_batch(
                    end, offset=0, timestamp=now, producer_id=pid, producer_epoch=0
                )
                log.append(marker, origin="coordinator")
        elif k < 0.93:  # a follower's batch with a keyless record
            recs = [Record(-1, now, None, b"x"), Record(-1, now, b"k1", b"y")]
            log.append(encode_batch(recs, base_offset=log.log_end_offset), assign_offsets=False)
        elif k < 0.97:
            log.roll()


def files_of(directory: Path) -> dict[str, bytes]:
    return {
        name: (directory / name).read_bytes()
        for name in sorted(os.listdir(directory))
        if (directory / name).is_file() and name not in (".kafkalog.lock", "partition.metadata")
    }


def cleanings(
    directory: Path,
    seed: int,
    segment_bytes: int,
    ops: int,
    compiled: bool,
    buffers: tuple[int, ...] = (1 << 20, 24 * 64, 24 * 1024),
) -> list[Any]:
    """Three phases of appends, each followed by a cleaning (time passing, so the second and
    third find delete horizons passed); the files and counts after each cleaning."""
    history = History(seed, segment_bytes)
    r = random.Random(seed + 1)
    seen = []
    saved = chunk_walk.COMPILED
    chunk_walk.COMPILED = compiled
    try:
        for _ in range(3):
            history.append(directory, ops)
            buffer = r.choice(buffers)
            with Log(directory, config(segment_bytes)) as log:
                options = CleanerOptions(dedupe_buffer_size=buffer)
                result = log.compact(now=history.now, options=options)
            seen.append((result.as_dict(), files_of(directory)))
            history.now += r.choice([10, 2000])
    finally:
        chunk_walk.COMPILED = saved
    return seen


def clean_once(directory: Path, segment_bytes: int, buffer: int, compiled: bool) -> Any:
    """One cleaning of a log written beforehand: its counts and files."""
    saved = chunk_walk.COMPILED
    chunk_walk.COMPILED = compiled
    try:
        with Log(directory, config(segment_bytes)) as log:
            result = log.compact(now=10_000, options=CleanerOptions(dedupe_buffer_size=buffer))
        return result.as_dict(), files_of(directory)
    finally:
        chunk_walk.COMPILED = saved


@pytest.mark.parametrize(
    ("seed", "segment_bytes", "ops"),
    [(1, 20_000, 300), (2, 2_000_000, 300), (3, 300_000, 400), (4, 20_000, 60), (5, 2_000_000, 40)],
)
def test_compiled_passes_write_what_the_per_batch_path_writes(
    tmp_path: Path, seed: int, segment_bytes: int, ops: int
) -> None:
    per_batch = cleanings(tmp_path / "a" / "t-0", seed, segment_bytes, ops, compiled=False)
    compiled = cleanings(tmp_path / "b" / "t-0", seed, segment_bytes, ops, compiled=True)
    assert [c[0] for c in compiled] == [p[0] for p in per_batch]
    for (_, got), (_, want) in zip(compiled, per_batch, strict=True):
        assert got.keys() == want.keys()
        for name in want:
            assert got[name] == want[name], name
    # the history was one that cleaning changes: records went, batches were rebuilt
    stats = per_batch[0][0]["stats"]
    assert stats["records_kept"] < stats["records_read"]
    assert stats["batches_rewritten"] > 0


def test_a_batch_larger_than_the_read_buffer(tmp_path: Path) -> None:
    """A batch of 1.5 MB (the read buffer is 1 MiB) between plain ones: the buffer grows for
    it, and the cleaning is the per-batch path's."""
    base = tmp_path / "base" / "t-0"
    log = Log(base, config(8 << 20))
    value = b"v" * 280
    for round_ in range(3):
        for i in range(20):
            recs = [Record(-1, 1000, b"k%d" % ((i * 50 + j) % 400), value) for j in range(50)]
            log.append(encode_batch(recs))
        huge = [Record(-1, 1000, b"k%d" % (j % 400), value) for j in range(5000 + round_)]
        log.append(encode_batch(huge))
    log.roll()
    log.close()
    assert max(os.path.getsize(p) for p in base.glob("*.log")) > chunk_walk.CHUNK
    shutil.copytree(base.parent, tmp_path / "a")
    shutil.copytree(base.parent, tmp_path / "b")
    per_batch = clean_once(tmp_path / "a" / "t-0", 8 << 20, 24 * 1024, compiled=False)
    compiled = clean_once(tmp_path / "b" / "t-0", 8 << 20, 24 * 1024, compiled=True)
    assert compiled == per_batch
    assert compiled[0]["rounds"] == 1  # the 400 keys in one round
    assert compiled[0]["stats"]["batches_rewritten"] >= 1


@pytest.mark.parametrize("where", ["crc", "offsets"])
def test_damage_gives_the_per_batch_paths_error(tmp_path: Path, where: str) -> None:
    """A flipped byte in a segment's middle (a CRC that no longer matches; a base offset that
    goes backwards, which no CRC covers): the compiled walk hands over to the segment's own,
    which names the same file and byte as the per-batch path does, and nothing is swapped."""
    base = tmp_path / "base" / "t-0"
    log = Log(base, config(1 << 20))
    for i in range(60):
        recs = [Record(-1, 1000, b"k%d" % ((i * 10 + j) % 30), b"v" * 50) for j in range(10)]
        log.append(encode_batch(recs))
    log.roll()
    log.close()
    seg = sorted(base.glob("*.log"))[0]
    data = bytearray(seg.read_bytes())
    pos = 0
    for _ in range(30):  # the 31st batch
        pos += 12 + int.from_bytes(data[pos + 8 : pos + 12], "big")
    if where == "crc":
        data[pos + 70] ^= 0xFF
    else:
        data[pos : pos + 8] = (0).to_bytes(8, "big")
    seg.write_bytes(bytes(data))
    errors = []
    for name, compiled in (("a", False), ("b", True)):
        shutil.copytree(base.parent, tmp_path / name)
        with pytest.raises(DamagedLogError) as caught:
            clean_once(tmp_path / name / "t-0", 1 << 20, 1 << 20, compiled=compiled)
        errors.append((str(caught.value).replace(f"/{name}/", "/"), caught.value.position))
        assert (tmp_path / name / "t-0" / seg.name).read_bytes() == bytes(data)
    assert errors[0] == errors[1]
    assert errors[0][1] >= pos


def test_more_batches_than_a_chunk_holds(tmp_path: Path) -> None:
    """5,000 one-record batches in a segment (an embedded log's appends): more than one
    compiled call's worth of headers (chunk_walk.MAX_ENTRIES) in one read."""
    base = tmp_path / "base" / "t-0"
    with Log(base, config(8 << 20)) as log:
        for i in range(5000):
            value = None if i % 97 == 0 else b"v%d" % i
            log.append(encode_batch([Record(-1, 1000 + i, b"k%d" % (i % 700), value)]))
        log.roll()
    assert 2 * chunk_walk.MAX_ENTRIES < 5000
    shutil.copytree(base.parent, tmp_path / "a")
    shutil.copytree(base.parent, tmp_path / "b")
    per_batch = clean_once(tmp_path / "a" / "t-0", 8 << 20, 24 * 1024, compiled=False)
    compiled = clean_once(tmp_path / "b" / "t-0", 8 << 20, 24 * 1024, compiled=True)
    assert compiled == per_batch
    assert compiled[0]["stats"]["records_kept"] == 700
