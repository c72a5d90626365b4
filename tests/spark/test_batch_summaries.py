"""Verified batch summaries (the JVM source, kafkalog.jvm.BatchSummaries): what a CRC-checked
read learned about each v2 batch, kept in kafkalog's cache directory, lets later counts and
timestamp windows read batch headers only. Warm answers equal cold ones and the brute force;
any change to a batch's header (truncation and re-append, a copy in place of the file, damage)
is read as without summaries; a damaged summary file is ignored and replaced; nothing is ever
written in the log directory."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clirun import tree_snapshot
from kafkalog.log import Log, TopicConfig
from kafkalog.records import LogReader, Record, RecordBatch

T0 = 1_767_225_600_000
CONF = "spark.kafkalog.batchSummaries.dir"
SETTLE = "spark.kafkalog.batchSummaries.settleMs"


def _write(d: Path, batches: int, seed: int) -> None:
    """Batches of 10 records, timestamps rising with some far out of order (a CreateTime batch's
    base timestamp is then not its least), over several segments."""
    rng = random.Random(seed)
    with Log(d, TopicConfig(segment_bytes=6000, index_interval_bytes=256)) as log:
        ts = T0
        for i in range(batches):
            batch = []
            for j in range(10):
                ts += rng.randint(0, 2000)
                stamp = ts - rng.randint(0, 120_000) if rng.random() < 0.1 else ts
                batch.append(Record.of(b"v%d" % (i * 10 + j), b"k", stamp))
            log.append_records(batch)


@pytest.fixture()
def data(tmp_path: Path) -> Path:
    d = tmp_path / "data" / "t-0"
    _write(d, 120, 1)
    return d


@pytest.fixture()
def summaries(spark: Any, tmp_path: Path) -> Iterator[Path]:
    """Summaries in a directory of the test's; the segments never settled (every header read:
    tests/spark/test_settled_summaries.py holds the settled segments' reads)."""
    where = tmp_path / "summaries"
    spark.conf.set(CONF, str(where))
    spark.conf.set(SETTLE, "86400000")
    yield where
    spark.conf.unset(CONF)
    spark.conf.unset(SETTLE)


def _truth(d: Path) -> list[tuple[int, int]]:
    with Log(d, writable=False) as log:
        return [(r.offset, r.timestamp) for r in log.records()]


def _v2_batches(d: Path) -> int:
    return sum(
        isinstance(e, RecordBatch) for p in d.glob("*.log") for e in LogReader(p.read_bytes())
    )


class Reads:
    """The JVM source's count, window and full read of one log, each with the bytes its tasks
    read (``statsDir``)."""

    def __init__(self, spark: Any, d: Path, tmp: Path) -> None:
        self.spark, self.d, self.tmp, self.n = spark, d, tmp, 0

    def _load(self, stats: Path | None = None, **options: str) -> Any:
        reader = self.spark.read.format("kafkalog").option("path", str(self.d.parent))
        if stats is not None:
            reader = reader.option("statsDir", str(stats))
        return reader.options(**options).load()

    def _stats(self) -> Path:
        self.n += 1
        return self.tmp / f"stats-{self.n}"

    def count(self, **options: str) -> tuple[int, int]:
        from kafkalog.spark.stats import collect

        stats = self._stats()
        n = self._load(stats, **options).count()
        return n, collect(str(stats)).bytes_read

    def window(self, lo: int, hi: int) -> tuple[list[tuple[int, int]], int]:
        from kafkalog.spark.stats import collect

        stats = self._stats()
        where = f"timestamp >= timestamp_millis({lo}) and timestamp < timestamp_millis({hi})"
        df = self._load(stats).where(where).selectExpr("offset", "unix_millis(timestamp) as ts")
        rows = sorted((r.offset, r.ts) for r in df.collect())
        return rows, collect(str(stats)).bytes_read

    def full(self) -> list[tuple[int, int]]:
        df = self._load().selectExpr("offset", "unix_millis(timestamp) as ts")
        return sorted((r.offset, r.ts) for r in df.collect())


def _window(truth: list[tuple[int, int]]) -> tuple[int, int]:
    stamps = sorted(ts for _, ts in truth)
    return stamps[len(stamps) // 3], stamps[len(stamps) // 3 + len(stamps) // 50]


def test_warm_counts_and_windows_read_headers_only(
    spark: Any, data: Path, summaries: Path, tmp_path: Path
) -> None:
    """Cold, a count reads every byte; a full read learns every batch's least timestamp; warm,
    a count reads 61 bytes per batch and a 2% window skips all but the batches it touches,
    the answers equal to the brute force each time."""
    truth = _truth(data)
    total = sum(p.stat().st_size for p in data.glob("*.log"))
    reads = Reads(spark, data, tmp_path)
    lo, hi = _window(truth)
    want = [r for r in truth if lo <= r[1] < hi]
    n, cold = reads.count()
    assert (n, cold) == (len(truth), total)
    assert list(summaries.glob("*.sum")), "a CRC-checked count keeps what it verified"
    rows, window_cold = reads.window(lo, hi)
    assert rows == want
    assert reads.full() == truth
    n, warm = reads.count()
    assert n == len(truth)
    assert warm == 61 * _v2_batches(data), (warm, total)
    rows, window_warm = reads.window(lo, hi)
    assert rows == want
    # warm: the headers, and whole only the batches whose [least, max] timestamp meets the window
    touching = sum(
        e.size_in_bytes
        for p in data.glob("*.log")
        for e in LogReader(p.read_bytes())
        if isinstance(e, RecordBatch) and min(r.timestamp for r in e) < hi and e.max_timestamp >= lo
    )
    assert window_warm <= touching + 61 * _v2_batches(data) < window_cold, (
        window_warm,
        touching,
        window_cold,
    )
    for option in ({"batchSummaries": "false"}, {"checkCrcs": "true"}):
        assert reads.count(**option)[0] == len(truth)
    assert reads.count(batchSummaries="false")[1] == total  # off: every byte read again


def test_summaries_off_keep_nothing(spark: Any, data: Path, tmp_path: Path) -> None:
    where = tmp_path / "summaries"
    spark.conf.set(CONF, str(where))
    reads = Reads(spark, data, tmp_path)
    try:
        assert reads.count(batchSummaries="false")[0] == len(_truth(data))
        assert not where.exists()
        spark.conf.set("spark.kafkalog.batchSummaries", "false")
        assert reads.count()[0] == len(_truth(data))
        assert not where.exists()
    finally:
        spark.conf.unset("spark.kafkalog.batchSummaries")
        spark.conf.unset(CONF)


def test_readers_never_write_in_the_log_directory(spark: Any, data: Path, tmp_path: Path) -> None:
    """Cold and warm reads leave the log directory as it was (bytes and mtimes), and a summary
    directory set inside the log's directory is never written: no summaries."""
    before = tree_snapshot(data.parent)
    reads = Reads(spark, data, tmp_path)
    truth = _truth(data)
    for where in (tmp_path / "summaries", data.parent / "summaries", data / "s"):
        spark.conf.set(CONF, str(where))
        try:
            for _ in range(2):
                assert reads.count()[0] == len(truth)
                assert reads.window(*_window(truth))[0] == [
                    r for r in truth if _window(truth)[0] <= r[1] < _window(truth)[1]
                ]
        finally:
            spark.conf.unset(CONF)
    assert tree_snapshot(data.parent) == before
    assert list((tmp_path / "summaries").glob("*.sum"))


def test_an_unwritable_summary_directory_means_no_summaries(
    spark: Any, data: Path, tmp_path: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"not a directory")
    spark.conf.set(CONF, str(blocker / "summaries"))
    try:
        reads = Reads(spark, data, tmp_path)
        total = sum(p.stat().st_size for p in data.glob("*.log"))
        assert reads.count() == (len(_truth(data)), total)
        assert reads.count() == (len(_truth(data)), total)
    finally:
        spark.conf.unset(CONF)


@pytest.mark.parametrize("damage", ["truncated", "flipped", "garbage", "empty", "foreign"])
def test_a_damaged_summary_file_is_ignored_and_replaced(
    spark: Any, data: Path, summaries: Path, tmp_path: Path, damage: str
) -> None:
    """A summary file cut short, with a byte flipped, of garbage, empty, or another segment's
    (a whole, valid file under this one's name) is not trusted: the read checks every byte
    again, answers right, and writes a good file in its place."""
    truth = _truth(data)
    total = sum(p.stat().st_size for p in data.glob("*.log"))
    reads = Reads(spark, data, tmp_path)
    assert reads.count() == (len(truth), total)
    files = sorted(summaries.glob("*.sum"))
    assert len(files) == len(list(data.glob("*.log"))) > 1
    bodies = [f.read_bytes() for f in files]
    for i, f in enumerate(files):
        body = bodies[i]
        if damage == "truncated":
            f.write_bytes(body[: len(body) - 9])
        elif damage == "flipped":
            f.write_bytes(body[:40] + bytes([body[40] ^ 1]) + body[41:])
        elif damage == "garbage":
            f.write_bytes(bytes((k * 131 + 7) % 251 for k in range(len(body))))
        elif damage == "empty":
            f.write_bytes(b"")
        else:  # another segment's summary, whole and valid, under this one's name
            f.write_bytes(bodies[(i + 1) % len(files)])
    n, again = reads.count()
    assert n == len(truth)
    assert again == total  # nothing trusted: every batch read and CRC-checked
    n, warm = reads.count()
    assert (n, warm) == (len(truth), 61 * _v2_batches(data))  # replaced by good files


def test_truncation_and_reappend_and_a_copied_file_are_read_anew(
    spark: Any, data: Path, summaries: Path, tmp_path: Path
) -> None:
    """Summaries warm, the log truncated and other records appended where the old ones were
    (same files, same positions, other batches): the answers are the new log's. A segment
    replaced by a copy with a record's byte flipped (a new file at the same path, as compaction
    leaves) is read anew: the flip is found."""
    reads = Reads(spark, data, tmp_path)
    truth = _truth(data)
    assert reads.full() == truth
    assert reads.count()[0] == len(truth)
    cut = truth[len(truth) * 2 // 3][0]
    with Log(data, TopicConfig(segment_bytes=6000, index_interval_bytes=256)) as log:
        log.truncate_to(cut)
        for i in range(30):
            records = [Record.of(b"w%d" % i, b"k", T0 + 7 * i + j) for j in range(10)]
            log.append_records(records)
    after = _truth(data)
    assert after != truth
    lo, hi = T0, T0 + 250
    assert reads.count()[0] == len(after)
    assert reads.window(lo, hi)[0] == [r for r in after if lo <= r[1] < hi]
    assert reads.full() == after
    assert reads.count()[0] == len(after)
    seg = sorted(data.glob("*.log"))[0]
    position, size = next((e.position, e.size_in_bytes) for e in LogReader(seg.read_bytes()))
    body = bytearray(seg.read_bytes())
    body[position + size - 3] ^= 0xFF
    copy = seg.with_name("copy.tmp")
    copy.write_bytes(bytes(body))
    copy.replace(seg)
    with pytest.raises(Exception, match="kafkalog repair"):
        reads.count()


def test_the_summary_directory_stays_bounded(spark: Any, tmp_path: Path) -> None:
    """With ``spark.kafkalog.batchSummaries.maxFiles=2``, a read of a log of many segments
    leaves at most about that many summary files (the least recently written deleted), and the
    answers stay right."""
    d = tmp_path / "data" / "t-0"
    _write(d, 300, 3)
    segments = len(list(d.glob("*.log")))
    assert segments >= 6
    where = tmp_path / "summaries"
    spark.conf.set(CONF, str(where))
    spark.conf.set("spark.kafkalog.batchSummaries.maxFiles", "2")
    try:
        reads = Reads(spark, d, tmp_path)
        for _ in range(2):
            assert reads.count()[0] == len(_truth(d))
            assert 1 <= len(list(where.glob("*.sum"))) <= 3 < segments
    finally:
        spark.conf.unset("spark.kafkalog.batchSummaries.maxFiles")
        spark.conf.unset(CONF)
