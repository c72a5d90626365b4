"""A seeded campaign of Spark batch reads (the JVM source) of a partition a writer appends to,
rolls and deletes by retention while Spark reads.

The writer (kafkalog's own :class:`Log`, or a :class:`BatchingWriter` in front of one) writes
record ``o`` with the value ``v<o>``, so every answer can be judged alone: no duplicate, no
record the log never had, offsets without a hole, a range that starts where the options say
(or, with ``failOnDataLoss=false``, later only where retention removed the start) and ends
where they say or, for ``latest``, at a batch end between the log ends seen before and after
the query. An error is allowed only where retention may have removed what the query planned,
and must name the offsets.

tests/spark/test_jvm_campaign.py runs a seed or two (batch and stream); more by hand::

    PYTHONPATH=src:tests:tests/spark python3 tests/spark/live_campaign.py 0 10
"""

from __future__ import annotations

import json
import random
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

from kafkalog.log import Log, TopicConfig
from kafkalog.log.batching_writer import BatchingWriter
from kafkalog.records import LogReader, Record

TOPIC = "live"


class Writer(threading.Thread):
    """Appends, rolls and deletes by retention until stopped; keeps the log's ends."""

    def __init__(self, directory: Path, seed: int, batching: bool) -> None:
        super().__init__(daemon=True)
        self.rng = random.Random(f"live-writer/{seed}")
        self.directory = directory
        self.batching = batching
        self.config = TopicConfig(
            segment_bytes=self.rng.choice([2500, 6000]),
            index_interval_bytes=self.rng.choice([1, 300, 4096]),
            file_delete_delay_ms=0,
        )
        self.log = Log(directory, self.config)
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.end = 0  # every offset below it appended
        self.start_offset = 0
        self.failed: BaseException | None = None

    def ends(self) -> tuple[int, int]:
        with self.lock:
            return self.start_offset, self.end

    def _append(self, n: int, writer: BatchingWriter | None) -> None:
        at = self.log.log_end_offset
        if writer is not None:
            futures = [writer.send(b"v%d" % (at + i), b"k%d" % (i % 3)) for i in range(n)]
            writer.flush()
            assert [f.result() for f in futures] == list(range(at, at + n))
        else:
            now = int(time.time() * 1000)
            self.log.append_records(
                [Record.of(b"v%d" % (at + i), b"k%d" % (i % 3), now) for i in range(n)]
            )
        with self.lock:
            self.end = at + n

    def run(self) -> None:
        writer = BatchingWriter(self.log, linger_ms=1, batch_size=600) if self.batching else None
        try:
            self._append(50, writer)
            while not self.stop.is_set():
                r = self.rng.random()
                if r < 0.05:
                    self.log.roll()
                elif r < 0.12 and len(self.log.segments) > 3:
                    second = self.log.segments[1].base_offset
                    with self.lock:
                        self.start_offset = second
                    self.log.increment_log_start_offset(second)
                    self.log.delete_old_segments()
                else:
                    self._append(self.rng.randint(1, 12), writer)
                time.sleep(self.rng.random() * 0.004)
        except BaseException as problem:
            self.failed = problem
        finally:
            if writer is not None:
                writer.close()


def batch_ends(directory: Path) -> set[int]:
    """The end offsets (last + 1) of every batch still on disk."""
    out: set[int] = set()
    for seg in sorted(directory.glob("*.log")):
        for entry in LogReader(seg.read_bytes()):
            out.add(entry.last_offset + 1)
    return out


def one_query(spark: Any, data: Path, writer: Writer, rng: random.Random) -> list[str]:
    ls, end = writer.ends()
    opts: dict[str, str] = {}
    a: int | None = None
    b: int | None = None
    if rng.random() < 0.6:
        a = rng.randint(ls, end)
        opts["startingOffsets"] = json.dumps({TOPIC: {"0": a}})
    if rng.random() < 0.5:
        b = rng.randint(a if a is not None else ls, end)
        opts["endingOffsets"] = json.dumps({TOPIC: {"0": b}})
    lossy = rng.random() < 0.4
    if lossy:
        opts["failOnDataLoss"] = "false"
    if rng.random() < 0.3:
        opts["kafka.isolation.level"] = "read_committed"
    if rng.random() < 0.3:
        opts["maxRecordsPerPartition"] = str(rng.randint(5, 200))
    counting = rng.random() < 0.3
    label = f"{opts} {'count' if counting else 'rows'} (log [{ls}, {end}) before)"
    reader = spark.read.format("kafkalog").option("path", str(data))
    for k, v in opts.items():
        reader = reader.option(k, v)
    try:
        df = reader.load()
        got: Any = (
            df.count()
            if counting
            else sorted((r.offset, bytes(r.value)) for r in df.select("offset", "value").collect())
        )
        failed = None
    except Exception as problem:
        got, failed = None, str(problem)
    ls_after, end_after = writer.ends()
    label += f" (log [{ls_after}, {end_after}) after)"
    if failed is not None:
        first = [line for line in failed.splitlines() if "kafkalog" in line or "Error" in line]
        what = (first or failed.splitlines() or [""])[0][:300]
        if lossy:
            return [f"{label}: failOnDataLoss=false failed: {what}"]
        if ls_after == ls and (a is None or a >= ls_after):
            return [f"{label}: failed though nothing was deleted: {what}"]
        return [] if "offset" in failed else [f"{label}: an error naming no offset: {what}"]
    if counting:
        lo = a if a is not None else None
        hi = b
        n = int(got)
        if lossy:
            return []  # a count with skips is judged by the rows' checks
        if lo is not None and hi is not None and n != hi - lo:
            return [f"{label}: count {n}, want {hi - lo}"]
        if lo is not None and hi is None and not end - lo <= n <= end_after - lo:
            return [f"{label}: count {n}, want between {end - lo} and {end_after - lo}"]
        return []
    problems: list[str] = []
    offsets = [o for o, _ in got]
    if len(set(offsets)) != len(offsets):
        problems.append(f"{label}: duplicates")
    wrong = [(o, v) for o, v in got if v != b"v%d" % o]
    if wrong:
        problems.append(f"{label}: values the log never had {wrong[:3]}")
    if lossy:
        # failOnDataLoss=false: each task reads its segments when it runs, and skips (with a
        # WARNING naming the offsets) those retention deleted since the plan; what is read is
        # judged by the checks above, its range by nothing more
        return problems
    if offsets and offsets != list(range(offsets[0], offsets[-1] + 1)):
        holes = sorted(set(range(offsets[0], offsets[-1] + 1)) - set(offsets))
        problems.append(f"{label}: holes {holes[:10]}")
    if not offsets:
        want_empty = (
            (a is not None and b is not None and a == b)
            or (b is None and a is not None and a == end_after)
            # earliest to an end retention had passed when the query was planned
            or (a is None and b is not None and b <= ls_after)
        )
        if not want_empty and not lossy:
            problems.append(f"{label}: empty")
        return problems
    lo, hi = offsets[0], offsets[-1] + 1
    if a is not None and (lo < a or (not lossy and lo != a)):
        problems.append(f"{label}: starts at {lo}, want {a}")
    if a is None and not (ls <= lo <= ls_after if not lossy else lo >= ls):
        problems.append(f"{label}: starts at {lo}, want the log start in [{ls}, {ls_after}]")
    if b is not None and hi != b:
        problems.append(f"{label}: ends at {hi}, want {b}")
    if b is None and not end <= hi <= end_after:
        problems.append(f"{label}: ends at {hi}, want in [{end}, {end_after}]")
    return problems


def campaign(spark: Any, seed: int, root: Path, seconds: float) -> list[str]:
    rng = random.Random(f"live/{seed}")
    data = root / f"live-{seed}"
    shutil.rmtree(data, ignore_errors=True)
    directory = data / f"{TOPIC}-0"
    directory.mkdir(parents=True)
    writer = Writer(directory, seed, batching=rng.random() < 0.5)
    writer.start()
    while writer.ends()[1] < 50:
        time.sleep(0.01)
    problems: list[str] = []
    stop = time.monotonic() + seconds
    answers: list[list[str]] = []
    while time.monotonic() < stop:
        answers.append(one_query(spark, data, writer, rng))
    writer.stop.set()
    writer.join()
    writer.log.close()
    if writer.failed is not None:
        problems.append(f"seed {seed}: the writer failed: {writer.failed!r}")
    for found in answers:
        problems += [
            f"seed {seed} ({'batching' if writer.batching else 'Log'}): {p}" for p in found
        ]
    return problems


def main(argv: list[str]) -> int:
    import tempfile

    import jvm_campaign

    spark = jvm_campaign.session()
    spark.conf.set("spark.kafkalog.jvm.fallback", argv[3] if len(argv) > 3 else "true")
    if len(argv) > 2:
        spark.conf.set("spark.kafkalog.jvm.planCache.settleMs", argv[2])
        spark.conf.set("spark.kafkalog.batchSummaries.settleMs", argv[2])
    root = Path(tempfile.mkdtemp(prefix="kafkalog-live-"))
    bad = 0
    for seed in range(int(argv[0]), int(argv[1])):
        found = campaign(spark, seed, root, 20.0)
        for fmt in ("kafkalog_python", "kafkalog"):
            found += stream_campaign(spark, seed, root, 8.0, fmt)
        for f in found:
            print(f, flush=True)
        bad += len(found)
        print(f"seed {seed}: {len(found)} findings", flush=True)
    shutil.rmtree(root, ignore_errors=True)
    return 1 if bad else 0


def stream_campaign(
    spark: Any, seed: int, root: Path, seconds: float, fmt: str = "kafkalog_python"
) -> list[str]:
    """A stream (``fmt``: the Python source by default) from the earliest offset, micro-batches
    every 200 ms, while the writer writes; then the writer stops and the stream catches up.
    Every record once, values the writer wrote, to the writer's end; what retention deleted
    before the stream came to it is an error naming offsets (failOnDataLoss=true) or skipped
    (false), never a duplicate."""
    rng = random.Random(f"live-stream/{seed}")
    data = root / f"stream-{seed}"
    shutil.rmtree(data, ignore_errors=True)
    # one checkpoint per seed AND format, emptied first: shared, the second stream of a seed
    # resumed from the first's committed offsets on a new log, so it never read from the
    # earliest offset, and read nothing when the new log ended before those offsets
    checkpoint = root / f"checkpoint-{seed}-{fmt}"
    shutil.rmtree(checkpoint, ignore_errors=True)
    directory = data / f"{TOPIC}-0"
    directory.mkdir(parents=True)
    writer = Writer(directory, seed, batching=rng.random() < 0.5)
    writer.start()
    while writer.ends()[1] < 50:
        time.sleep(0.01)
    lossy = rng.random() < 0.5
    got: list[tuple[int, bytes]] = []

    def each(df: Any, _: int) -> None:
        got.extend((r.offset, bytes(r.value)) for r in df.select("offset", "value").collect())

    reader = spark.readStream.format(fmt).option("path", str(data))
    reader = reader.option("startingOffsets", "earliest")  # a stream's default is latest
    reader = reader.option("failOnDataLoss", "false" if lossy else "true")
    if rng.random() < 0.5:
        reader = reader.option("maxOffsetsPerTrigger", str(rng.randint(20, 300)))
    query = (
        reader.load()
        .writeStream.foreachBatch(each)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    label = f"seed {seed} stream {fmt} failOnDataLoss={not lossy}"
    problems: list[str] = []
    try:
        time.sleep(seconds)
        writer.stop.set()
        writer.join()
        try:
            query.processAllAvailable()
        except Exception as problem:
            text = str(problem)
            if lossy or "offset" not in text:
                problems.append(f"{label}: failed: {text.splitlines()[0][:300]}")
            return problems
    finally:
        query.stop()
        writer.stop.set()
        writer.join()
        writer.log.close()
    offsets = [o for o, _ in got]
    if not offsets:
        label += f" (batches: {[p.get('numInputRows') for p in query.recentProgress]})"
    if len(set(offsets)) != len(offsets):
        problems.append(f"{label}: duplicates")
    wrong = [(o, v) for o, v in got if v != b"v%d" % o]
    if wrong:
        problems.append(f"{label}: values the log never had {wrong[:3]}")
    end = writer.ends()[1]
    if not offsets or max(offsets) != end - 1:
        problems.append(f"{label}: ends at {max(offsets, default=None)}, the log at {end}")
    if not lossy and offsets and sorted(offsets) != list(range(min(offsets), end)):
        problems.append(f"{label}: holes without failOnDataLoss=false")
    return problems


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
