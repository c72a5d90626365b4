"""Streaming exactly once across restarts, while another process appends (issue 12, section 4).

A writer process appends to two partitions at a steady pace, rolling small segments and running
retention, which deletes (renames ``.deleted``, then removes) the oldest ones as it goes. A
streaming query with a checkpoint writes Parquet; it is stopped in the middle of its work and
started again, several times, while the writer goes on. When the writer has stopped, one last
run drains what is left. The Parquet sink's output (read through its metadata log, as any
reader of it does) must hold every record the writer appended exactly once, with its bytes:
nothing lost over a restart, nothing read twice. Retention keeps far more than the writer lets the
query fall behind (it waits for the query's commits when 1,500 records ahead), so no record the
query has not read is deleted (that case is ``failOnDataLoss``'s, in test_stream.py).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

WRITER = """
import json, os, sys, time
from kafkalog.log import Log, TopicConfig
from kafkalog.records import Record

root, per_partition, checkpoint = sys.argv[1], int(sys.argv[2]), sys.argv[3]


def committed():
    # the least offset the query has committed (Spark's checkpoint: commits/N marks the batch
    # whose end offsets are the last line of offsets/N), 0 before its first commit
    try:
        done = max(int(n) for n in os.listdir(os.path.join(checkpoint, "commits")) if n.isdigit())
        with open(os.path.join(checkpoint, "offsets", str(done))) as f:
            ends = json.loads(f.read().splitlines()[-1])["events"]
        return min(int(o) for o in ends.values())
    except (OSError, ValueError, KeyError):
        return 0


config = TopicConfig(
    segment_bytes=8000, retention_bytes=200_000, retention_ms=-1, file_delete_delay_ms=3000
)
logs = [Log(f"{root}/events-{p}", config) for p in range(2)]
deleted = 0
for i in range(per_partition):
    # never more than 1,500 records ahead of the query (retention keeps ~2,500): on a loaded
    # machine the query's restarts can take seconds, and retention must not take what it has
    # not read (that case is failOnDataLoss's, in test_stream.py)
    waited = 0
    while checkpoint and i - committed() > 1500 and waited < 1200:
        time.sleep(0.05)
        waited += 1
    for p, log in enumerate(logs):
        # written with pwrite: another process sees it at once (no fsync needed for that)
        log.append_records([Record.of(b"p%d-v%d" % (p, i), b"k%d" % i, 1_767_225_600_000 + i)])
    if i % 15 == 14:
        time.sleep(0.05)  # about 300 records a second per partition
    if i % 50 == 49:
        deleted += sum(log.delete_old_segments() for log in logs)
for log in logs:
    log.close()
print(deleted)
"""


def _stream(spark: Any, data: Path, out: Path, checkpoint: Path, available_now: bool) -> Any:
    writer = (
        spark.readStream.format("kafkalog")
        .option("path", str(data))
        .option("subscribe", "events")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "2000")
        .load()
        .selectExpr("partition", "offset", "value")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
    )
    if available_now:
        return writer.trigger(availableNow=True).start()
    return writer.trigger(processingTime="200 milliseconds").start()


def test_stream_restarted_while_another_process_appends_holds_every_record_once(
    spark: Any, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    per_partition = 4500
    # the topic exists before the stream starts, so "earliest" is offset 0 of each partition
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    subprocess.run([sys.executable, "-c", WRITER, str(data), "1", ""], check=True, env=env)
    first = {p: 0 for p in range(2)}
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(data), str(per_partition), str(checkpoint)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    restarts = 0
    rng = random.Random(12)
    try:
        while writer.poll() is None and restarts < 6:
            query = _stream(spark, data, out, checkpoint, available_now=False)
            # let it commit a micro-batch or two (until the first commits, a restart resolves
            # "earliest" again, as with any Spark source), then stop it at a moment of its
            # work that differs from round to round
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and query.isActive:
                progress = query.lastProgress
                if progress is not None and progress["batchId"] >= restarts % 2 + 1:
                    break
                time.sleep(0.05)
            time.sleep(rng.uniform(0.0, 0.6))
            query.stop()  # mid-work: the next start resumes from the checkpoint
            assert query.exception() is None
            restarts += 1
        # the writer waits for the query's commits: a query runs until the writer is done
        query = _stream(spark, data, out, checkpoint, available_now=False)
        try:
            deleted_segments = int(writer.communicate(timeout=120)[0].strip() or 0)
        finally:
            query.stop()
        assert query.exception() is None
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    assert writer.returncode == 0
    drain = _stream(spark, data, out, checkpoint, available_now=True)
    drain.awaitTermination(180)
    assert drain.exception() is None
    rows = spark.read.parquet(str(out)).collect()  # through the sink's metadata log
    seen = sorted((r.partition, r.offset) for r in rows)
    total = per_partition + 1  # the first append's record, then the writer's
    expected = sorted((p, o) for p in range(2) for o in range(first[p], total))
    assert len(seen) == len(set(seen)), "a record was written twice"
    assert seen == expected, f"{len(expected) - len(seen)} records missing"
    values = {(r.partition, r.offset): bytes(r.value) for r in rows}
    assert values[(0, 0)] == b"p0-v0" and values[(1, total - 1)] == b"p1-v%d" % (total - 2)
    assert all(values[(p, o)] == b"p%d-v%d" % (p, o - 1) for p, o in expected if o > 0)
    assert restarts >= 2, "the writer ended before the query was restarted twice"
    assert deleted_segments > 0, "retention deleted nothing: the test proves less than it says"
    remaining = min(int(f.name.split(".")[0]) for f in (data / "events-0").glob("*.log"))
    assert remaining > 0  # the first segments really are gone from the directory
