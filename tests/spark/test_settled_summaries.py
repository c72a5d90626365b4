"""Settled segments' summaries (kafkalog.jvm.BatchSummaries, "settled segments"): a segment whose
size, mtime and ctime are as a CRC-checked read saw them (and settled before it) is counted and
windowed from its kept headers, reading nothing; any change to the log (an append to the active
segment, a roll, retention, a truncation, a segment rewritten by compaction, a byte written in
place with its mtime put back) gives the new answer, and only the changed segments are read
again. The planner keeps each partition's plan on the same terms (kafkalog.spark.plan_memo)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import log_changes
from kafkalog.log import Log, TopicConfig
from kafkalog.records import LogReader, Record, RecordBatch

T0 = 1_767_225_600_000
SETTLE_MS = 150
CONFS = {
    "spark.kafkalog.batchSummaries.settleMs": str(SETTLE_MS),
    "spark.kafkalog.jvm.planCache.settleMs": str(SETTLE_MS),
}


def _config(**extra: Any) -> TopicConfig:
    return TopicConfig(segment_bytes=4000, index_interval_bytes=256, **extra)


def _append(d: Path, n: int, start: int, **extra: Any) -> None:
    with Log(d, _config(**extra)) as log:
        for i in range(start, start + n):
            log.append_records(
                [
                    Record.of(b"v%d-%d" % (i, j) + b"-" * 80, b"k%d" % (i % 7), T0 + i * 1000 + j)
                    for j in range(3)
                ]
            )


def _settle() -> None:
    time.sleep(SETTLE_MS / 1000 + 0.1)


def _truth(data: Path) -> list[tuple[int, int, int]]:
    out = []
    for d in sorted(p for p in data.iterdir() if p.is_dir()):
        with Log(d, writable=False) as log:
            p = int(d.name.rsplit("-", 1)[1])
            out.extend((p, r.offset, r.timestamp) for r in log.records())
    return sorted(out)


@pytest.fixture()
def settled(spark: Any, tmp_path: Path) -> Iterator[Any]:
    for k, v in CONFS.items():
        spark.conf.set(k, v)
    spark.conf.set("spark.kafkalog.batchSummaries.dir", str(tmp_path / "summaries"))
    yield spark
    for k in (*CONFS, "spark.kafkalog.batchSummaries.dir"):
        spark.conf.unset(k)


class Reads:
    """Counts (on the driver and in tasks, kept answers off: every count is made) and a
    window's count, each with the segment bytes it read."""

    def __init__(self, spark: Any, data: Path, tmp: Path) -> None:
        self.spark, self.data, self.tmp, self.n = spark, data, tmp, 0

    def _run(self, query: Callable[[Any], Any], **confs: str) -> tuple[Any, int]:
        from kafkalog.spark.stats import collect

        self.n += 1
        stats = self.tmp / f"stats-{self.n}"
        reader = self.spark.read.format("kafkalog").option("path", str(self.data))
        for k, v in {"spark.kafkalog.jvm.planCache": "false", **confs}.items():
            self.spark.conf.set(k, v)
        try:
            answer = query(reader.option("statsDir", str(stats)).load())
        finally:
            for k in ("spark.kafkalog.jvm.planCache", *confs):
                self.spark.conf.unset(k)
        return answer, collect(str(stats)).bytes_read if stats.exists() else 0

    def count(self, tasks: bool = False) -> tuple[int, int]:
        confs = {"spark.kafkalog.jvm.driverCounts": "false"} if tasks else {}
        return self._run(lambda df: int(df.count()), **confs)  # type: ignore[no-any-return]

    def window(self, lo: int, hi: int) -> tuple[int, int]:
        where = f"timestamp >= timestamp_millis({lo}) and timestamp < timestamp_millis({hi})"
        return self._run(lambda df: int(df.where(where).count()))  # type: ignore[no-any-return]

    def full(self) -> list[tuple[int, int, int]]:
        columns = ("partition", "offset", "unix_millis(timestamp) as ts")
        answer, _ = self._run(
            lambda df: sorted(
                (r.partition, r.offset, r.ts) for r in df.selectExpr(*columns).collect()
            )
        )
        return answer  # type: ignore[no-any-return]


def _segment_bytes(d: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in sorted(d.glob("*.log"))}


def _check(reads: Reads, data: Path) -> None:
    """Counts (driver, tasks) and two windows equal the brute force."""
    truth = _truth(data)
    assert reads.count()[0] == len(truth)
    assert reads.count(tasks=True)[0] == len(truth)
    stamps = sorted(t for _, _, t in truth)
    for lo, hi in ((stamps[len(stamps) // 4], stamps[len(stamps) // 2]), (T0, T0 + 10_000_000)):
        assert reads.window(lo, hi)[0] == sum(lo <= t < hi for t in stamps), (lo, hi)


def _flip_in_place(d: Path) -> None:
    """A batch's record count changed in the first segment, its mtime put back (size, mtime
    as they were; only the ctime tells): a count must not take the kept header."""
    seg = sorted(d.glob("*.log"))[0]
    data = bytearray(seg.read_bytes())
    data[57:61] = (2).to_bytes(4, "big")  # the first batch's record count: 3 -> 2 (CRC off)
    st = seg.stat()
    seg.write_bytes(bytes(data))
    os.utime(seg, ns=(st.st_atime_ns, st.st_mtime_ns))


CHANGES: dict[str, Callable[[Path], None]] = {
    "append to the active segment": lambda d: _append(d, 3, 5000),
    "roll": lambda d: log_changes.roll(d, _config(), T0),
    "retention": lambda d: log_changes.retention(d, _config(retention_ms=-1)),
    "truncation": lambda d: log_changes.truncate(d, _config(), 40),  # back into an earlier segment
    "compaction": lambda d: log_changes.compact(d, _config(cleanup_policy=("compact",))),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_settled_segments_read_nothing_and_changes_read_again(
    settled: Any, tmp_path: Path, change: str
) -> None:
    """Settled and summarized, a count reads nothing; after the change the answers are the
    new log's, a count reads only segments the change wrote (a rewritten one whole, the
    active one's headers), and once settled again nothing."""
    data = tmp_path / "data"
    extra: dict[str, Any] = {"cleanup_policy": ("compact",)} if change == "compaction" else {}
    _append(data / "t-0", 60, 0, **extra)
    _append(data / "t-1", 40, 0, **extra)
    _settle()
    reads = Reads(settled, data, tmp_path)
    total = sum(p.stat().st_size for p in data.rglob("*.log"))
    n, cold = reads.count()
    assert (n, cold) == (len(_truth(data)), total)
    assert reads.full() == _truth(data)  # every batch's least timestamp learned
    assert reads.count() == (len(_truth(data)), 0)  # settled: the kept headers, nothing read
    _check(reads, data)
    before = _segment_bytes(data / "t-0")
    CHANGES[change](data / "t-0")
    after = _segment_bytes(data / "t-0")
    assert before != after or change == "compaction"
    _check(reads, data)
    assert reads.full() == _truth(data)
    _settle()
    assert reads.count()[0] == len(_truth(data))  # the changed segments stamped anew
    _settle()
    assert reads.count() == (len(_truth(data)), 0)  # settled again (summaries stamped anew)
    _check(reads, data)


def _settled_log(settled: Any, tmp_path: Path) -> tuple[Path, Reads]:
    """A log of 60 appends, settled, counted once (its summaries made) and again (nothing
    read): the data directory and its reads."""
    data = tmp_path / "data"
    _append(data / "t-0", 60, 0)
    _settle()
    reads = Reads(settled, data, tmp_path)
    reads.count()
    _settle()
    assert reads.count() == (180, 0)
    return data, reads


def test_an_append_reads_only_the_active_segments_headers(settled: Any, tmp_path: Path) -> None:
    data, reads = _settled_log(settled, tmp_path)
    active = sorted((data / "t-0").glob("*.log"))[-1]
    batches = sum(isinstance(e, RecordBatch) for e in LogReader(active.read_bytes()))
    total = sum(p.stat().st_size for p in (data / "t-0").glob("*.log"))
    _append(data / "t-0", 1, 9000)
    grown = sum(p.stat().st_size for p in (data / "t-0").glob("*.log")) - total
    n, read = reads.count()
    assert n == 183
    # the active segment's headers (its summary no longer stamped; the new batch's too, found
    # in no summary) and the new batch whole (or, if the append rolled, the new segment); no
    # other segment's byte
    assert 0 < read <= 61 * (batches + 1) + grown, (read, batches, grown)


def test_a_byte_written_in_place_with_its_mtime_put_back(settled: Any, tmp_path: Path) -> None:
    """Size and mtime as they were: the ctime tells, so the header is read, does not match its
    summary, and the batch's CRC fails naming the file and byte, as without summaries."""
    data, reads = _settled_log(settled, tmp_path)
    _flip_in_place(data / "t-0")
    _settle()
    with pytest.raises(Exception, match=r"\.log at byte 0"):
        reads.count()


def test_unsettled_segments_are_never_taken_unread(spark: Any, tmp_path: Path) -> None:
    """With the settle margin longer than the files' age, summaries are used as before (every
    header read), never their stamps."""
    data = tmp_path / "data"
    _append(data / "t-0", 60, 0)
    spark.conf.set("spark.kafkalog.batchSummaries.dir", str(tmp_path / "summaries"))
    spark.conf.set("spark.kafkalog.batchSummaries.settleMs", "86400000")
    try:
        reads = Reads(spark, data, tmp_path)
        reads.count()
        batches = sum(
            isinstance(e, RecordBatch)
            for p in (data / "t-0").glob("*.log")
            for e in LogReader(p.read_bytes())
        )
        assert reads.count() == (180, 61 * batches)
    finally:
        spark.conf.unset("spark.kafkalog.batchSummaries.dir")
        spark.conf.unset("spark.kafkalog.batchSummaries.settleMs")
