"""Tailing readers: follow a log that grows, rolls and loses segments to retention.

* two tailing processes and four producing threads (through the batching writer, small
  segments so it rolls): each process sees every record once, in offset order, with its bytes
  (a digest of every record, compared with the log's own reading);
* retention deleting segments under a slow reader (the one it has open and the ones it has
  not reached): offsets stay strictly increasing, and seen + skipped is every offset;
* starting points (offset, timestamp, log end, below the log start), poll's timeout;
* the reader changes nothing: every file's bytes and mtime, and the directory's, unchanged;
* the asyncio variant.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kafkalog.log import Log, TopicConfig
from kafkalog.log.batching_writer import BatchingWriter
from kafkalog.log.tail import AsyncTailReader, OffsetOutOfRangeError, TailReader
from kafkalog.records import Record

HELPERS = Path(__file__).resolve().parent / "helpers"
T0 = int(time.time() * 1000) - 60_000  # recent: time retention leaves it alone


def _digest(records: list[Record]) -> str:
    d = hashlib.sha256()
    for r in records:
        d.update(repr((r.offset, r.key, r.value, r.headers)).encode())
    return d.hexdigest()


def test_tailing_processes_see_every_record_once_in_order(tmp_path: Path) -> None:
    directory = tmp_path / "events-0"
    per_thread, threads = 1500, 4
    total = per_thread * threads
    log = Log(directory, TopicConfig(segment_bytes=32 * 1024))
    readers = []
    try:
        for _ in range(2):
            proc = subprocess.Popen(
                [sys.executable, str(HELPERS / "tail_child.py"), str(directory), str(total)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            readers.append(proc)
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == b"READY"
        with BatchingWriter(log, batch_size=2048, linger_ms=2) as writer:

            def produce(t: int) -> None:
                for i in range(per_thread):
                    writer.send(b"%d-%d" % (t, i) * (1 + i % 7), key=b"%d" % t)
                    if i % 200 == 0:
                        time.sleep(0.01)  # the readers catch up and wait at the end

            producers = [threading.Thread(target=produce, args=(t,)) for t in range(threads)]
            for th in producers:
                th.start()
            for th in producers:
                th.join()
        assert len(log.segments) > 3
        expected = _digest(list(log.records()))
        for proc in readers:
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err.decode(errors="replace")
            seen = json.loads(out)
            assert seen["offsets"] == list(range(total))
            assert seen["digest"] == expected
            assert seen["skipped"] == 0
    finally:
        for proc in readers:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        log.close()


def test_retention_deletes_segments_under_a_slow_reader(tmp_path: Path) -> None:
    directory = tmp_path / "events-0"
    config = TopicConfig(segment_bytes=4096, retention_bytes=8192, file_delete_delay_ms=0)
    with Log(directory, config) as log:
        for i in range(1000):
            log.append_records([Record.of(b"value %d" % i, timestamp=T0 + i)])
        reader = TailReader(directory)
        seen = [r.offset for r in reader.poll(max_records=30)]
        first_segment = log.segments[0].base_offset
        assert log.delete_old_segments() > 0  # the reader's open segment and the next ones go
        assert log.segments[0].base_offset > first_segment
        for i in range(1000, 1200):
            log.append_records([Record.of(b"value %d" % i, timestamp=T0 + i)])
        while True:
            batch = reader.poll(timeout=0.3)
            if not batch:
                break
            seen.extend(r.offset for r in batch)
        reader.close()
    assert seen == sorted(set(seen))  # increasing, no record twice
    assert seen[-1] == 1199
    assert len(seen) + reader.skipped == 1200
    assert reader.skipped > 0


def test_starting_points_and_timeouts(tmp_path: Path) -> None:
    directory = tmp_path / "events-0"
    with Log(directory, TopicConfig(segment_bytes=2048)) as log:
        for i in range(300):
            log.append_records([Record.of(b"v%d" % i, timestamp=T0 + 10 * i)])
        log.increment_log_start_offset(150)
        log.delete_old_segments()
        assert 5 < log.segments[0].base_offset < 150
    # the log start DeleteRecords moved is kept beside the segments of a log on its own
    # (issue 32), and a reader of the directory honours it
    start = 150
    assert TailReader(directory, start_timestamp=T0 + 2005).poll()[0].offset == 201
    assert TailReader(directory, start_offset=250).poll()[0].offset == 250
    assert TailReader(directory).poll()[0].offset == start
    low = TailReader(directory, start_offset=5)
    assert low.poll()[0].offset == start and low.skipped == start - 5
    with pytest.raises(OffsetOutOfRangeError, match="below the log start offset"):
        TailReader(directory, start_offset=5, on_gap="error")
    end = TailReader(directory, from_end=True)
    began = time.monotonic()
    assert end.poll(timeout=0.2) == []
    assert 0.19 <= time.monotonic() - began < 2
    assert end.position == 300


def _state(directory: Path) -> dict[str, tuple[int, int, str]]:
    out = {".": (0, directory.stat().st_mtime_ns, "")}
    for p in directory.iterdir():
        data = p.read_bytes()
        out[p.name] = (len(data), p.stat().st_mtime_ns, hashlib.sha256(data).hexdigest())
    return out


def test_tailing_changes_nothing(tmp_path: Path) -> None:
    directory = tmp_path / "events-0"
    with Log(directory, TopicConfig(segment_bytes=2048)) as log:
        for i in range(200):
            log.append_records([Record.of(b"v%d" % i, timestamp=T0 + i)])
    before = _state(directory)
    time.sleep(0.01)
    reader = TailReader(directory, start_timestamp=T0 + 50)
    got = []
    while batch := reader.poll(timeout=0.05):
        got.extend(batch)
    reader.close()
    assert [r.offset for r in got] == list(range(50, 200))
    assert _state(directory) == before


def test_asyncio_reader_follows_a_growing_log(tmp_path: Path) -> None:
    directory = tmp_path / "events-0"
    log = Log(directory, TopicConfig(segment_bytes=4096))
    # batches under segment.bytes whatever the sender's pace (a slow first append once let
    # 450 records gather into one batch of 5 KB, which the log refused as Kafka does)
    writer = BatchingWriter(log, linger_ms=1, batch_size=1024)

    async def follow() -> list[int]:
        offsets: list[int] = []
        async with AsyncTailReader(directory, start_offset=0) as reader:
            async for record in reader:
                offsets.append(record.offset)
                assert record.value == b"r%d" % record.offset
                if len(offsets) == 500:
                    return offsets
        return offsets

    def produce() -> None:
        for i in range(500):
            writer.send(b"r%d" % i)
            if i % 50 == 0:
                time.sleep(0.005)

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        assert asyncio.run(asyncio.wait_for(follow(), 60)) == list(range(500))
    finally:
        producer.join()
        writer.close()
        log.close()


def test_a_reader_started_before_the_log_exists(tmp_path: Path) -> None:
    directory = tmp_path / "later-0"
    reader = TailReader(directory)
    assert reader.poll(timeout=0.05) == []
    with Log(directory, TopicConfig(segment_bytes=1024)) as log:
        for i in range(100):
            log.append_records([Record.of(b"x%d" % i, timestamp=T0 + i)])
        got: list[Record] = []
        while len(got) < 100 and (batch := reader.poll(timeout=2.0)):
            got.extend(batch)
    reader.close()
    assert [r.value for r in got] == [b"x%d" % i for i in range(100)]
    assert reader.skipped == 0


def _poll_all(reader: TailReader) -> list[list[int]]:
    """Offsets of each ``poll(timeout=0)`` until one returns nothing."""
    polls = []
    while batch := reader.poll(timeout=0):
        polls.append([r.offset for r in batch])
    return polls


def test_empty_segments_of_a_kafka_0_9_log_are_crossed_at_once(tmp_path: Path) -> None:
    """Issue 23: Kafka 0.9's compacted ``v0-compact-0`` starts with three empty segments (0,
    20, 40); a reader crossed one per directory listing (every 0.1 s), so ``poll(timeout=0)``
    returned nothing, forever when called faster than that, at position 20. Nor are the
    compacted-away offsets records it missed: ``skipped`` stays 0."""
    import shutil

    from provenance import FIXTURES

    directory = tmp_path / "v0-compact-0"
    shutil.copytree(FIXTURES / "kafka-0.9.0.1-broker" / "v0-compact-0", directory)
    with Log(directory, writable=False) as log:
        expected = [r.offset for r in log.records()]
    assert expected and expected[0] == 70  # nothing below: segments 0, 20, 40 are empty
    reader = TailReader(directory)
    polls = _poll_all(reader)
    reader.close()
    assert polls and polls[0][0] == 70  # the first poll already crossed the empty segments
    assert [o for p in polls for o in p] == expected
    assert reader.skipped == 0 and reader.position == expected[-1] + 1


def test_any_number_of_empty_segments_in_one_poll(tmp_path: Path) -> None:
    """Six consecutive empty segments (a compacted log) between two with records: the poll
    after the first segment's records returns the next segment's, in one call, timeout 0."""
    directory = tmp_path / "events-0"
    with Log(directory, TopicConfig(segment_bytes=150)) as log:
        for i in range(10):
            log.append_records([Record.of(b"v%d-%d" % (i, n), timestamp=T0 + i) for n in range(3)])
        bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 9
    emptied = bases[1:7]
    for base in emptied:  # as the cleaner leaves a segment whose records all went
        for suffix in (".log", ".index", ".timeindex"):
            (directory / f"{base:020d}{suffix}").write_bytes(b"")
    with Log(directory, writable=False) as log:
        expected = [r.offset for r in log.records()]
    reader = TailReader(directory)
    first = reader.poll(timeout=0)
    assert [r.offset for r in first] == list(range(bases[0], bases[1]))
    began = time.monotonic()
    second = reader.poll(timeout=0)
    assert time.monotonic() - began < 0.1  # no waiting for the next directory listing
    assert [r.offset for r in second] == list(range(bases[7], bases[8]))
    rest = _poll_all(reader)
    reader.close()
    assert [r.offset for r in first + second] + [o for p in rest for o in p] == expected
    assert reader.skipped == 0


def test_a_log_that_starts_with_empty_segments_is_read_in_the_first_poll(tmp_path: Path) -> None:
    directory = tmp_path / "events-0"
    with Log(directory, TopicConfig(segment_bytes=150)) as log:
        for i in range(5):
            log.append_records([Record.of(b"v%d-%d" % (i, n), timestamp=T0 + i) for n in range(3)])
        bases = [s.base_offset for s in log.segments]
    for base in bases[:3]:
        for suffix in (".log", ".index", ".timeindex"):
            (directory / f"{base:020d}{suffix}").write_bytes(b"")
    reader = TailReader(directory, start_offset=0)
    assert [r.offset for r in reader.poll(timeout=0)] == list(range(bases[3], bases[4]))
    reader.close()
    assert reader.skipped == 0
