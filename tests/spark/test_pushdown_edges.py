"""Filter pushdown on edge cases: the rows with ``spark.sql.python.filterPushdown.enabled`` must be
the rows without it (negative and missing timestamps, segments without timestamps, option errors,
literals of other types), and a randomized comparison against a plain Python filter."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from kafkalog.log import Log, TopicConfig
from kafkalog.records import Record, encode_batch
from provenance import FIXTURES
from pushdown_rows import rows_where, set_pushdown

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def _same(spark: Any, path: Path, where: str, **options: str) -> list[Any]:
    """The rows of ``where`` with pushdown, checked equal to those without."""
    off = rows_where(spark, path, where, False, **options)
    on = rows_where(spark, path, where, True, **options)
    assert on == off, where
    return on


@pytest.fixture(scope="module")
def no_timestamps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Records without a timestamp (-1, shown by Spark as 1969-12-31 23:59:59.999) between
    records with one: appended as a client's bytes (``append_records`` would stamp them now)."""
    root = tmp_path_factory.mktemp("nots") / "data"
    with Log(root / "t-0", TopicConfig(segment_bytes=600)) as log:
        for i in range(40):
            ts = -1 if i % 3 == 0 else T0 + i * 1000
            log.append(encode_batch([Record.of(b"v%d" % i, b"k", ts)]))
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
    _upgraded(root / "t-0")
    return root


def _upgraded(part: Path) -> None:
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
    assert rows_where(pushdown, far_future, f"timestamp = {lit}", False) != []
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
            rows_where(pushdown, two_partitions, "partition = 0", enabled, **opts)
    opts = {"endingOffsets": '{"t": {"0": -1, "1": 20}}'}
    for enabled in (False, True):
        with pytest.raises(Exception, match="beyond the log end"):
            rows_where(pushdown, two_partitions, "partition = 0", enabled, **opts)
    opts["failOnDataLoss"] = "false"
    assert len(_same(pushdown, two_partitions, "partition = 0", **opts)) == 30


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Generated partitions (timestamps out of order across batches, some -1, many small
    segments) beside copies of real Kafka partitions: transactions, LogAppendTime, v1, and a
    compacted v0 log with gaps and emptied segments."""
    import random

    root = tmp_path_factory.mktemp("mixed") / "data"
    rng = random.Random(5)
    for p in range(2):
        with Log(
            root / f"gen-{p}", TopicConfig(segment_bytes=1500, index_interval_bytes=200)
        ) as log:
            ts = T0
            for _ in range(80):
                batch = []
                for _ in range(rng.randint(1, 4)):
                    ts += rng.randint(0, 3000)
                    roll = rng.random()
                    stamp = -1 if roll < 0.05 else ts - rng.randint(0, 20_000) if roll < 0.2 else ts
                    batch.append(Record.of(b"v", b"k", stamp))
                log.append(encode_batch(batch))  # a client's bytes: its -1 timestamps kept
    copies = (
        ("kafka-4.0-snapshot-javacode", "v2-txn-0"),
        ("kafka-4.0-snapshot-javacode", "v2-logappendtime-0"),
        ("kafka-4.0-snapshot-javacode", "v1-none-0"),
        ("kafka-0.9.0.1-broker", "v0-compact-0"),
    )
    for fixture_set, name in copies:
        shutil.copytree(FIXTURES / fixture_set / name, root / name)
    _upgraded(root / "upgraded-0")
    return root


def _all_rows(spark: Any, path: Path, **options: str) -> list[tuple[str, int, int, int]]:
    set_pushdown(spark, False)
    reader = spark.read.format("kafkalog").option("path", str(path))
    for k, v in options.items():
        reader = reader.option(k, v)
    df = reader.load().selectExpr("topic", "partition", "offset", "unix_micros(timestamp) as us")
    return sorted((r.topic, r.partition, r.offset, r.us) for r in df.collect())


def _lit(us: int) -> str:
    import datetime as dt

    when = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=us)
    return "timestamp'" + when.strftime("%Y-%m-%d %H:%M:%S.%f") + "'"


def test_randomized_against_python_filter(pushdown: Any, mixed: Path) -> None:
    """Random predicates on every pushable column, with pushdown, give exactly the rows a
    Python filter of all records gives (the session time zone is UTC)."""
    import operator
    import random

    rng = random.Random(23)
    everything = _all_rows(pushdown, mixed)
    stamps = sorted({r[3] for r in everything})
    offsets = sorted({r[2] for r in everything})
    ops = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
    ops["="] = operator.eq

    def clause() -> tuple[str, Any]:
        kind = rng.choice(["ts", "ts", "ts", "off", "off", "part", "topic", "in", "nullsafe"])
        op = rng.choice(list(ops))
        fn = ops[op]
        if kind == "ts":
            near = rng.choice([rng.choice(stamps), -1000, T0 * 1000])
            us = near + rng.choice([0, 0, -1000, 1000, -500, 500, 1])
            return f"timestamp {op} {_lit(us)}", lambda r: fn(r[3], us)
        if kind == "off":
            o = rng.choice(offsets) + rng.choice([0, 0, -1, 1])
            if rng.random() < 0.2:
                return f"{o}.5 {op} offset", lambda r: fn(o + 0.5, r[2])
            return f"offset {op} {o}", lambda r: fn(r[2], o)
        if kind == "part":
            q = rng.choice([0, 1, 2, -1])
            return f"partition {op} {q}", lambda r: fn(r[1], q)
        if kind == "topic":
            name = rng.choice(["gen", "v2-txn", "v0-compact", "upgraded", "nope"])
            if rng.random() < 0.5:
                return f"topic like '{name[:3]}%'", lambda r: r[0].startswith(name[:3])
            return f"topic {op} '{name}'", lambda r: fn(r[0], name)
        if kind == "in":
            vals = [rng.choice(offsets) for _ in range(rng.randint(1, 4))]
            nul = ", null" if rng.random() < 0.3 else ""
            return (
                f"offset in ({', '.join(map(str, vals))}{nul})",
                lambda r: r[2] in vals,
            )
        us = rng.choice(stamps)
        return f"timestamp <=> {_lit(us)}", lambda r: r[3] == us

    for _ in range(40):
        picked = [clause() for _ in range(rng.randint(1, 3))]
        where = " and ".join(f"({c[0]})" for c in picked)
        want = [r for r in everything if all(c[1](r) for c in picked)]
        set_pushdown(pushdown, True)
        df = pushdown.read.format("kafkalog").option("path", str(mixed)).load().where(where)
        df = df.selectExpr("topic", "partition", "offset", "unix_micros(timestamp) as us")
        got = sorted((r.topic, r.partition, r.offset, r.us) for r in df.collect())
        assert got == want, where


def test_records_appended_without_a_timestamp_are_found_by_time(
    pushdown: Any, tmp_path: Path
) -> None:
    """``append_records`` stamps a record without a timestamp with the log's clock: a time
    window and ``startingTimestamp`` find it (before, it was -1 and no time read saw it)."""
    root = tmp_path / "data"
    now = [T0]
    with Log(root / "t-0", TopicConfig(segment_bytes=600), clock=lambda: now[0] / 1000) as log:
        for i in range(30):
            now[0] = T0 + i * 1000
            ts = T0 - 5_000 if i % 5 == 0 else -1  # given ones kept, in the past
            log.append_records([Record.of(b"v%d" % i, b"k", ts)])
    where = "timestamp >= timestamp'2026-01-01 00:00:20'"  # T0 + 20 s
    assert [r[2] for r in _same(pushdown, root, where)] == [i for i in range(20, 30) if i % 5 != 0]
    later = [r[2] for r in _same(pushdown, root, "true", startingTimestamp=str(T0 + 20_000))]
    # from the first offset whose time is at or after it (20's given time is older), then
    # by offset: 25, given, comes too
    assert later == list(range(21, 30))
