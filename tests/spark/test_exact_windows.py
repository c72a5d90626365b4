"""The JVM source takes comparisons of ``timestamp`` with a timestamp whole (its reader drops
every record outside, in microseconds as Spark compares them; KafkaLogScan.Builder.pushFilters),
so Spark evaluates no filter again and pushes a count over a window down to it: rows and counts
(on the driver and in tasks) equal the brute force for every operator, bounds inside a
millisecond, out-of-order CreateTime and LogAppendTime batches, and, over damage skipped with
``failOnDataLoss=false``, the rows the Python reader reads equal the Python source's."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kafkalog.log import Log, TopicConfig
from kafkalog.records import Record

T0 = 1_767_225_600_000


def _write(d: Path, seed: int, log_append: bool = False) -> None:
    """Batches of 1-12 records over several segments, timestamps rising with some far out of
    order (a CreateTime batch's base timestamp is then not its least)."""
    rng = random.Random(seed)
    config = TopicConfig(segment_bytes=5000, index_interval_bytes=256)
    if log_append:
        config = TopicConfig(
            segment_bytes=5000, index_interval_bytes=256, message_timestamp_type="LogAppendTime"
        )
    with Log(d, config) as log:
        ts = T0
        for i in range(150):
            batch = []
            for j in range(rng.randint(1, 12)):
                ts += rng.randint(0, 3)
                stamp = ts - rng.randint(0, 200) if rng.random() < 0.1 else ts
                batch.append(Record.of(b"v%d-%d" % (i, j), b"k", stamp))
            log.append_records(batch)


def _truth(d: Path) -> list[tuple[int, int]]:
    with Log(d, writable=False) as log:
        return [(r.offset, r.timestamp * 1000) for r in log.records()]


def _at(us: int) -> str:
    return f"timestamp_micros({us})"


def _windows(truth: list[tuple[int, int]]) -> list[tuple[str, Callable[[int], bool]]]:
    stamps = sorted(ts for _, ts in truth)
    a, b = stamps[len(stamps) // 3], stamps[len(stamps) // 2]
    out: list[tuple[str, Callable[[int], bool]]] = []
    for lo in (a, a - 1, a + 1, a + 500):  # on a record's timestamp, and inside a millisecond
        for hi in (b, b + 1, b - 1, b + 999):
            out.append(
                (
                    f"timestamp >= {_at(lo)} and timestamp < {_at(hi)}",
                    lambda t, lo=lo, hi=hi: lo <= t < hi,
                )
            )
    out += [
        (f"timestamp > {_at(a)} and timestamp <= {_at(b)}", lambda t: a < t <= b),
        (f"timestamp > {_at(a - 1)}", lambda t: t > a - 1),
        (f"timestamp <= {_at(b + 1)}", lambda t: t <= b + 1),
        (f"timestamp = {_at(a)}", lambda t: t == a),
        (f"timestamp = {_at(a + 1)}", lambda t: t == a + 1),  # inside a millisecond: none
        (f"timestamp between {_at(a)} and {_at(b)}", lambda t: a <= t <= b),
        (f"timestamp < {_at(stamps[0])}", lambda t: t < stamps[0]),  # none
    ]
    return out


@pytest.mark.parametrize("log_append", [False, True], ids=["CreateTime", "LogAppendTime"])
def test_windows_exact_rows_and_counts(spark: Any, tmp_path: Path, log_append: bool) -> None:
    d = tmp_path / "data" / "t-0"
    _write(d, 7, log_append)
    truth = _truth(d)
    spark.conf.set("spark.kafkalog.batchSummaries.dir", str(tmp_path / "summaries"))

    def load() -> Any:
        return spark.read.format("kafkalog").option("path", str(d.parent)).load()

    for where, keep in _windows(truth):
        want = sorted((o, t) for o, t in truth if keep(t))
        rows = load().where(where).selectExpr("offset", "unix_micros(timestamp)").collect()
        assert sorted(tuple(r) for r in rows) == want, where
        # the scan alone filters: no Filter left in Spark's plan
        plan = load().where(where).select("offset")._jdf.queryExecution().executedPlan()
        assert "Filter (" not in plan.toString(), (where, plan.toString())
        for driver in ("true", "false"):
            spark.conf.set("spark.kafkalog.jvm.driverCounts", driver)
            try:
                for _ in range(2):  # cold, then warm (summaries)
                    assert load().where(where).count() == len(want), (where, driver)
                    by = load().where(where).groupBy("partition").count().collect()
                    assert [tuple(r) for r in by] == ([(0, len(want))] if want else []), where
            finally:
                spark.conf.unset("spark.kafkalog.jvm.driverCounts")
    where = _windows(truth)[0][0]
    plan = load().where(where).groupBy().count()._jdf.queryExecution().executedPlan().toString()
    assert "LocalTableScan" in plan, plan  # the count over a window answered on the driver


def test_window_with_an_offset_filter_leaves_spark_the_offsets(spark: Any, tmp_path: Path) -> None:
    """A filter the scan does not take whole (an offset comparison) stays Spark's: rows still
    exact, the count not pushed down."""
    d = tmp_path / "data" / "t-0"
    _write(d, 8)
    truth = _truth(d)
    stamps = sorted(t for _, t in truth)
    lo, hi = stamps[10], stamps[-10]
    where = f"timestamp >= {_at(lo)} and timestamp < {_at(hi)} and offset % 3 = 1"
    df = spark.read.format("kafkalog").option("path", str(d.parent)).load().where(where)
    want = [(o, t) for o, t in truth if lo <= t < hi and o % 3 == 1]
    got = df.selectExpr("offset", "unix_micros(timestamp)").collect()
    assert sorted(tuple(r) for r in got) == sorted(want)
    assert df.count() == len(want)


def test_window_over_damage_read_by_the_python_reader(spark: Any, tmp_path: Path) -> None:
    """A damaged batch mid-segment, ``failOnDataLoss=false``: the Python reader reads the rest
    of that split (skipping the damage with a warning) and its rows are filtered as the
    Java decoder's: the window equals the Python source's, rows and count."""
    d = tmp_path / "data" / "t-0"
    _write(d, 9)
    seg = sorted(d.glob("*.log"))[0]
    data = bytearray(seg.read_bytes())
    data[data.index(b"v3-", 61)] ^= 0x01  # a record's value, inside the CRC
    seg.write_bytes(bytes(data))
    truth = _truth_python(spark, d)
    stamps = sorted(t for _, t in truth)
    lo, hi = stamps[2], stamps[len(stamps) // 2] + 1
    where = f"timestamp >= {_at(lo)} and timestamp < {_at(hi)}"

    def rows(fmt: str) -> list[tuple[int, int]]:
        df = spark.read.format(fmt).option("path", str(d.parent))
        df = df.option("failOnDataLoss", "false").load().where(where)
        return sorted(tuple(r) for r in df.selectExpr("offset", "unix_micros(timestamp)").collect())

    want = sorted((o, t) for o, t in truth if lo <= t < hi)
    assert rows("kafkalog_python") == want
    assert rows("kafkalog") == want
    df = (
        spark.read.format("kafkalog")
        .option("path", str(d.parent))
        .option("failOnDataLoss", "false")
    )
    assert df.load().where(where).count() == len(want)


def _truth_python(spark: Any, d: Path) -> list[tuple[int, int]]:
    """What the Python source reads of a damaged log with failOnDataLoss=false."""
    df = spark.read.format("kafkalog_python").option("path", str(d.parent))
    df = df.option("failOnDataLoss", "false").load()
    return [tuple(r) for r in df.selectExpr("offset", "unix_micros(timestamp)").collect()]


def test_pushdown_false_leaves_every_filter_to_spark(spark: Any, tmp_path: Path) -> None:
    """The escape hatch: with the query's ``pushdown=false`` option the scan takes no filter
    whole and pushes no count (a real full scan, Spark filters and counts), rows still exact."""
    d = tmp_path / "data" / "t-0"
    _write(d, 10)
    truth = _truth(d)
    where, keep = _windows(truth)[0]
    df = (
        spark.read.format("kafkalog")
        .option("path", str(d.parent))
        .option("pushdown", "False")
        .load()
        .where(where)
    )
    plan = df.select("offset")._jdf.queryExecution().executedPlan().toString()
    assert "Filter (" in plan and "exact" not in plan, plan
    counted = df.groupBy().count()._jdf.queryExecution().executedPlan().toString()
    assert "LocalTableScan" not in counted and "pushed aggregate" not in counted, counted
    want = sorted((o, t) for o, t in truth if keep(t))
    got = df.selectExpr("offset", "unix_micros(timestamp)").collect()
    assert sorted(tuple(r) for r in got) == want
    assert df.count() == len(want)
