"""Filter pushdown on edge cases: the rows with ``spark.sql.python.filterPushdown.enabled`` must be
the rows without it (negative and missing timestamps, segments without timestamps, option errors,
literals of other types), and a randomized comparison against a plain Python filter."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kafkalog.log import Log, TopicConfig
from kafkalog.records import Record

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
CONF = "spark.sql.python.filterPushdown.enabled"
FIXTURES = Path("/work/shared/fixtures")


@pytest.fixture()
def pushdown(spark: Any) -> Iterator[Any]:
    before = spark.conf.get(CONF, "false")
    yield spark
    spark.conf.set(CONF, before)


def _rows(spark: Any, path: Path, where: str, enabled: bool, **options: str) -> list[Any]:
    spark.conf.set(CONF, "true" if enabled else "false")
    reader = spark.read.format("kafkalog").option("path", str(path))
    for k, v in options.items():
        reader = reader.option(k, v)
    df = reader.load().where(where)
    return sorted((r.topic, r.partition, r.offset, r.timestamp) for r in df.collect())


def _same(spark: Any, path: Path, where: str, **options: str) -> list[Any]:
    """The rows of ``where`` with pushdown, checked equal to those without."""
    off = _rows(spark, path, where, False, **options)
    on = _rows(spark, path, where, True, **options)
    assert on == off, where
    return on


@pytest.fixture(scope="module")
def no_timestamps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Records without a timestamp (-1, shown by Spark as 1969-12-31 23:59:59.999) between
    records with one."""
    root = tmp_path_factory.mktemp("nots") / "data"
    with Log(root / "t-0", TopicConfig(segment_bytes=600)) as log:
        for i in range(40):
            ts = -1 if i % 3 == 0 else T0 + i * 1000
            log.append_records([Record.of(b"v%d" % i, b"k", ts)])
    return root


def test_timestamp_bound_before_1970(pushdown: Any, no_timestamps: Path) -> None:
    rows = _same(pushdown, no_timestamps, "timestamp > timestamp'1960-01-01 00:00:00'")
    assert len(rows) == 40


def test_timestamp_bound_at_minus_one_ms(pushdown: Any, no_timestamps: Path) -> None:
    where = "timestamp >= timestamp'1969-12-31 23:59:59.999'"
    assert len(_same(pushdown, no_timestamps, where)) == 40
    where = "timestamp = timestamp'1969-12-31 23:59:59.999'"
    assert [r[2] for r in _same(pushdown, no_timestamps, where)] == list(range(0, 40, 3))


@pytest.fixture(scope="module")
def v0_then_v2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A message format upgrade: a v0 segment (no timestamps; Kafka falls back to its mtime,
    here in 2100) then v2 segments from 2026."""
    root = tmp_path_factory.mktemp("upgrade") / "data"
    part = root / "t-0"
    part.mkdir(parents=True)
    src = FIXTURES / "kafka-0.9.0.1-broker" / "v0-none-0"
    for name in os.listdir(src):
        if name.endswith((".log", ".index")):
            shutil.copyfile(src / name, part / name)
    with Log(part, TopicConfig(segment_bytes=2000)) as log:
        log.roll()
        for i in range(60):
            log.append_records([Record.of(b"v%d" % i, b"k", T0 + i * 1000)])
    future = 4_102_444_800  # 2100-01-01
    os.utime(part / "00000000000000000000.log", (future, future))
    return root


def test_segment_without_timestamps_before_timestamped(pushdown: Any, v0_then_v2: Path) -> None:
    rows = _same(pushdown, v0_then_v2, "timestamp >= timestamp'2026-01-01 00:00:30'")
    assert len(rows) == 30


FAR = 4_353_339_043_320  # 2107: its datetime's float timestamp() * 1000 is FAR - 0.0001


@pytest.fixture(scope="module")
def far_future(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("far") / "data"
    with Log(root / "t-0", TopicConfig(segment_bytes=600)) as log:
        for i in range(-5, 6):
            log.append_records([Record.of(b"v%d" % i, b"k", FAR + i)])
    return root


def test_upper_timestamp_bound_is_exact_to_the_ms(pushdown: Any, far_future: Path) -> None:
    lit = "timestamp'2107-12-14 20:50:43.320'"
    assert _rows(pushdown, far_future, f"timestamp = {lit}", False) != []
    for where in (f"timestamp <= {lit}", f"timestamp = {lit}", f"timestamp in ({lit})"):
        rows = _same(pushdown, far_future, where, maxTimestampLatenessMs="0")
        assert rows and rows[-1][3].microsecond == 320_000, where


@pytest.fixture(scope="module")
def two_partitions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("two") / "data"
    for p, n in ((0, 30), (1, 10)):
        with Log(root / f"t-{p}", TopicConfig(segment_bytes=600)) as log:
            for i in range(n):
                log.append_records([Record.of(b"v%d" % i, b"k", T0 + i * 1000)])
    return root


def test_pruned_partition_still_checks_options(pushdown: Any, two_partitions: Path) -> None:
    """Options naming offsets a pruned partition does not have fail as without pushdown."""
    opts = {"startingOffsets": '{"t": {"0": -2, "1": 20}}'}
    for enabled in (False, True):
        with pytest.raises(Exception, match="after the end offset"):
            _rows(pushdown, two_partitions, "partition = 0", enabled, **opts)
    opts = {"endingOffsets": '{"t": {"0": -1, "1": 20}}'}
    for enabled in (False, True):
        with pytest.raises(Exception, match="beyond the log end"):
            _rows(pushdown, two_partitions, "partition = 0", enabled, **opts)
    opts["failOnDataLoss"] = "false"
    assert len(_same(pushdown, two_partitions, "partition = 0", **opts)) == 30
