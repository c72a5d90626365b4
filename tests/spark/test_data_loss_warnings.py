"""failOnDataLoss=false never skips in silence (issue 34 §1): every offset range asked for and
not returned -- below the log start (retention, DeleteRecords), past the log end, a segment
deleted or cut after planning, a stream's gap under retention -- is a WARNING naming the topic,
the partition and the offsets, as Spark's Kafka source logs each loss.

In Spark the warnings come from Python workers (the planner's, the tasks', the stream
runner's), whose log lines reach no test fixture; so the Spark cases register a subclass of the
source, defined here (pickled by value into the workers), that sends the ``kafkalog.spark``
logger of whichever worker runs it to a file the test reads."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest
from test_stream import _run_available_now

from kafkalog.log import Log, TopicConfig
from kafkalog.records import Record
from kafkalog.spark.options import parse_read_options
from kafkalog.spark.plan import plan_read
from kafkalog.spark.task import read_split

CONFIG = TopicConfig(
    segment_bytes=1500, index_interval_bytes=256, file_delete_delay_ms=0, retention_ms=-1
)


def _append(log: Log, n: int) -> None:
    for _ in range(n):
        log.append_records([Record.of(b"v%05d" % log.log_end_offset, b"k", 1_700_000_000_000)])


def _retain_from(log: Log, segment: int) -> int:
    """Retention: the log starts at its ``segment``-th segment now."""
    start = log.segments[segment].base_offset
    log.increment_log_start_offset(start)
    log.delete_old_segments()
    return start


@pytest.fixture()
def data(tmp_path: Path) -> tuple[Path, int, int]:
    """``data/t-0``: its first segments gone; (data dir, log start, log end)."""
    with Log(tmp_path / "data" / "t-0", CONFIG) as log:
        _append(log, 200)
        start = _retain_from(log, 3)
        end = log.log_end_offset
    assert start > 0
    return tmp_path / "data", start, end


def _said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_the_planner_says_what_it_skips(
    data: tuple[Path, int, int], caplog: pytest.LogCaptureFixture
) -> None:
    root, start, end = data
    options = {
        "path": str(root),
        "failOnDataLoss": "false",
        "startingOffsets": json.dumps({"t": {"0": 0}}),
        "endingOffsets": json.dumps({"t": {"0": end + 5}}),
    }
    with caplog.at_level(logging.WARNING, logger="kafkalog.spark"):
        splits, _ = plan_read(parse_read_options(options))
    said = _said(caplog)
    assert any(f"t-0: offsets 0 to {start - 1} " in s and "log starts at" in s for s in said)
    assert any(f"t-0: offsets {end} to {end + 4} " in s and "log ends at" in s for s in said)
    assert splits[0].start_offset == start


def test_a_task_says_what_it_skips(
    data: tuple[Path, int, int], caplog: pytest.LogCaptureFixture
) -> None:
    """A segment deleted after planning; another cut short (a follower truncating)."""
    root, _, _ = data
    splits, _ = plan_read(parse_read_options({"path": str(root), "failOnDataLoss": "false"}))
    gone, cut = splits[0], splits[-1]
    assert gone.segment != cut.segment
    os.unlink(gone.segment)
    with open(cut.segment, "r+b") as f:
        f.truncate(cut.planned_size // 2)
    with caplog.at_level(logging.WARNING, logger="kafkalog.spark"):
        for split in (gone, cut):
            list(read_split(split, include_headers=False, fail_on_data_loss=False))
    said = _said(caplog)
    first, last = gone.start_offset, gone.end_offset - 1
    assert any(f"t-0: offsets {first} to {last} " in s and "was deleted" in s for s in said)
    assert any("t-0: segment" in s and "was cut from" in s for s in said), said


# -- in Spark -----------------------------------------------------------------------------------
def _register_logged(spark: Any, log_file: Path) -> str:
    """``format("kafkalog_logged")``: kafkalog, with the warnings of every worker it runs in
    appended to ``log_file``."""
    from kafkalog.spark.source import KafkaLogPushdownSource, PushdownReader
    from kafkalog.spark.stream import KafkaLogStreamReader

    target = str(log_file)

    def attach() -> None:
        import logging

        for name in ("kafkalog.spark", "kafkalog.log"):  # the log layer's: a gap said
            logger = logging.getLogger(name)
            if not any(getattr(h, "baseFilename", None) == target for h in logger.handlers):
                handler = logging.FileHandler(target)
                handler.setLevel(logging.WARNING)
                handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
                logger.addHandler(handler)

    class LoggedReader(PushdownReader):
        def partitions(self) -> Any:
            attach()
            return super().partitions()

        def read(self, partition: Any) -> Any:
            attach()
            return super().read(partition)

    class LoggedStream(KafkaLogStreamReader):
        def initialOffset(self) -> Any:
            attach()
            return super().initialOffset()

        def latestOffset(self, start: Any, limit: Any) -> Any:
            attach()
            return super().latestOffset(start, limit)

        def partitions(self, start: Any, end: Any) -> Any:
            attach()
            return super().partitions(start, end)

        def read(self, partition: Any) -> Any:
            attach()
            return super().read(partition)

    class Logged(KafkaLogPushdownSource):
        @classmethod
        def name(cls) -> str:
            return "kafkalog_logged"

        def reader(self, schema: Any) -> Any:
            inner = super().reader(schema)
            return LoggedReader(inner.opts, inner.columns)  # type: ignore[attr-defined]

        def streamReader(self, schema: Any) -> Any:
            inner = super().streamReader(schema)
            if isinstance(inner, KafkaLogStreamReader):
                return LoggedStream(inner.opts, inner.columns)
            return inner

    spark.dataSource.register(Logged)
    return "kafkalog_logged"


def _warnings(log_file: Path) -> list[str]:
    if not log_file.exists():
        return []
    return [line for line in log_file.read_text().splitlines() if line.startswith("WARNING")]


def test_a_batch_query_warns_per_skip(
    spark: Any, data: tuple[Path, int, int], tmp_path: Path
) -> None:
    root, start, end = data
    log_file = tmp_path / "workers.log"
    name = _register_logged(spark, log_file)
    rows = (
        spark.read.format(name)
        .option("path", str(root))
        .option("failOnDataLoss", "false")
        .option("startingOffsets", json.dumps({"t": {"0": 0}}))
        .load()
        .selectExpr("offset")
        .collect()
    )
    assert sorted(r.offset for r in rows) == list(range(start, end))
    said = _warnings(log_file)
    assert any(f"t-0: offsets 0 to {start - 1} were asked for" in s for s in said), said


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_a_gap_between_segments_is_read_across_and_said(
    spark: Any, tmp_path: Path, fail_on_data_loss: str
) -> None:
    """A middle segment removed with every file of it (tests/damage_kinds.py ``middle
    segment removed, every file``): the JVM source and the Python source, batch and stream,
    return every record the other segments hold, whatever failOnDataLoss says (a compacted
    topic has such gaps: nothing tells them from a loss), and the Python source's workers say
    the offsets no batch holds with a WARNING."""
    from damage_kinds import FILE_DAMAGES

    directory = tmp_path / "data" / "t-0"
    with Log(directory, CONFIG) as log:
        _append(log, 200)
    victim = FILE_DAMAGES["middle segment removed, every file"](directory)
    after = min(int(p.name[:20]) for p in directory.glob("*.log") if p.name > victim.name)
    expected = [o for o in range(200) if not int(victim.name[:20]) <= o < after]
    log_file = tmp_path / "workers.log"
    logged = _register_logged(spark, log_file)
    for name in ("kafkalog", "kafkalog_python", logged):
        rows = (
            spark.read.format(name)
            .option("path", str(tmp_path / "data"))
            .option("failOnDataLoss", fail_on_data_loss)
            .load()
            .selectExpr("offset")
            .collect()
        )
        assert sorted(r.offset for r in rows) == expected, name
    said = _warnings(log_file)
    assert any(f"offsets {victim.name[:20].lstrip('0')}..{after - 1}" in s for s in said), said
    out = tmp_path / "out"
    _run_available_now(
        spark,
        tmp_path / "data",
        out,
        tmp_path / "checkpoint",
        ("offset",),
        subscribe="t",
        startingOffsets="earliest",
        failOnDataLoss=fail_on_data_loss,
    )
    streamed = spark.read.parquet(str(out)).collect()
    assert sorted(r.offset for r in streamed) == expected


def test_a_stream_warns_per_gap(spark: Any, tmp_path: Path) -> None:
    """A stream read to offset N; retention then removes segments past N before the next
    trigger: the gap is a WARNING naming it, and the stream goes on from the log start."""
    directory = tmp_path / "data" / "t-0"
    with Log(directory, CONFIG) as log:
        _append(log, 60)
    log_file = tmp_path / "workers.log"
    name = _register_logged(spark, log_file)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def run() -> None:
        query = (
            spark.readStream.format(name)
            .option("path", str(tmp_path / "data"))
            .option("startingOffsets", "earliest")
            .option("failOnDataLoss", "false")
            .load()
            .selectExpr("offset")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(180)
        assert query.exception() is None

    run()
    with Log(directory, CONFIG) as log:
        _append(log, 200)
        start = _retain_from(log, len(log.segments) - 2)
        end = log.log_end_offset
    assert start > 60
    run()
    said = _warnings(log_file)
    gap = f"t-0: offsets 60 to {start - 1} are gone"
    assert any(gap in s and "the stream goes on without them" in s for s in said), said
    got = sorted(r.offset for r in spark.read.parquet(str(out)).collect())
    assert got == list(range(60)) + list(range(start, end))
