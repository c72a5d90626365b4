"""The JVM source keeps the Python planner's answers (and a warm count's answer) while the log's
files stay as they were (kafkalog.jvm.KeptAnswers): a kept answer is used — proven by a planner
that cannot be reached answering the query all the same — and after an append, a roll, a
retention deletion, a truncation, a partition removed or a byte written in place with its mtime
put back, the query asks the planner again (the unreachable planner then fails it: no kept
answer stands in) and equals the brute force."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kafkalog.log import Log, TopicConfig
from kafkalog.records import Record

T0 = 1_767_225_600_000
SETTLE_MS = 150
PLANNER_CONFS = ("spark.kafkalog.python", "spark.kafkalog.planner")


def _append(d: Path, n: int, start: int) -> None:
    with Log(d, TopicConfig(segment_bytes=4000, index_interval_bytes=256)) as log:
        for i in range(start, start + n):
            log.append_records(
                [Record.of(b"v%d" % i + b"-" * 100, b"k", T0 + i * 1000) for _ in range(3)]
            )


def _truth(data: Path) -> dict[int, int]:
    out: dict[int, int] = {}
    for d in sorted(data.iterdir()):
        if d.is_dir():
            with Log(d, writable=False) as log:
                n = sum(1 for _ in log.records())
            if n:
                out[int(d.name.rsplit("-", 1)[1])] = n
    return out


def _settle() -> None:
    time.sleep(SETTLE_MS / 1000 + 0.1)


@pytest.fixture()
def kept(spark: Any) -> Iterator[Any]:
    spark.conf.set("spark.kafkalog.jvm.planCache.settleMs", str(SETTLE_MS))
    yield spark
    spark.conf.unset("spark.kafkalog.jvm.planCache.settleMs")


class Unreachable:
    """The planner made unreachable (no socket, no interpreter) and put back."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self.saved = {c: spark.conf.get(c, None) for c in PLANNER_CONFS}

    def __enter__(self) -> None:
        self.spark.conf.set("spark.kafkalog.python", "/nonexistent/kafkalog-python")
        self.spark.conf.set("spark.kafkalog.planner", "/nonexistent/kafkalog-planner.sock")

    def __exit__(self, *exc: object) -> None:
        for c, v in self.saved.items():
            if v is None:
                self.spark.conf.unset(c)
            else:
                self.spark.conf.set(c, v)


def _reads(spark: Any, data: Path) -> dict[str, Any]:
    def load() -> Any:
        return spark.read.format("kafkalog").option("path", str(data)).load()

    return {
        "count": load().count(),
        "by partition": dict((r[0], r[1]) for r in load().groupBy("partition").count().collect()),
        "rows": sorted(tuple(r) for r in load().select("partition", "offset").collect()),
    }


def _expected(data: Path) -> dict[str, Any]:
    truth = _truth(data)
    rows = []
    for d in sorted(data.iterdir()):
        if d.is_dir():
            with Log(d, writable=False) as log:
                p = int(d.name.rsplit("-", 1)[1])
                rows.extend((p, r.offset) for r in log.records())
    return {"count": sum(truth.values()), "by partition": truth, "rows": sorted(rows)}


def _roll(d: Path) -> None:
    with Log(d, TopicConfig(segment_bytes=4000)) as log:
        log.roll()
        log.append_records([Record.of(b"rolled", b"k", T0)])


def _retention(d: Path) -> None:
    with Log(d, TopicConfig(segment_bytes=4000, retention_ms=-1)) as log:
        second = sorted(d.glob("*.log"))[1]
        log.increment_log_start_offset(int(second.name.split(".")[0]))
        assert log.delete_old_segments() >= 1


def _truncate(d: Path) -> None:
    with Log(d, TopicConfig(segment_bytes=4000)) as log:
        log.truncate_to(log.log_end_offset - 6)  # two batches of 3 records


def _flip_in_place(d: Path) -> None:
    """A record's key byte changed in the first segment, its mtime put back (the size, the
    mtime and the batch's header all as they were; only the ctime tells)."""
    seg = sorted(d.glob("*.log"))[0]
    data = bytearray(seg.read_bytes())
    at = data.index(b"k", 61)  # the first record's key, inside the CRC: damage reads find
    data[at] = ord("K")
    stat = seg.stat()
    seg.write_bytes(bytes(data))
    os.utime(seg, ns=(stat.st_atime_ns, stat.st_mtime_ns))


CHANGES: dict[str, Callable[[Path], None]] = {
    "append": lambda data: _append(data / "t-0", 4, 1000),
    "roll": lambda data: _roll(data / "t-1"),
    "retention": lambda data: _retention(data / "t-0"),
    "truncation": lambda data: _truncate(data / "t-1"),
    "partition removed": lambda data: shutil.rmtree(data / "t-1"),
    "partition added": lambda data: _append(data / "t-2", 3, 0),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_kept_while_unchanged_asked_again_after_a_change(
    kept: Any, tmp_path: Path, change: str
) -> None:
    data = tmp_path / "data"
    _append(data / "t-0", 40, 0)
    _append(data / "t-1", 30, 0)
    _settle()
    assert _reads(kept, data) == _expected(data)  # asked, and kept
    with Unreachable(kept):
        assert _reads(kept, data) == _expected(data)  # kept answers: no planner needed
    CHANGES[change](data)
    with Unreachable(kept), pytest.raises(Exception, match="planner"):
        kept.read.format("kafkalog").option("path", str(data)).load().count()
    _settle()
    assert _reads(kept, data) == _expected(data)  # asked again: the log as it is now
    with Unreachable(kept):
        assert _reads(kept, data) == _expected(data)  # and kept again


def test_unsettled_files_are_asked_every_time(kept: Any, tmp_path: Path) -> None:
    """A log written within the settle margin (a live one) is never answered from a kept
    answer: a write in the same clock tick as the look could leave its times unchanged."""
    data = tmp_path / "data"
    _append(data / "t-0", 10, 0)
    kept.conf.set("spark.kafkalog.jvm.planCache.settleMs", "60000")
    assert kept.read.format("kafkalog").option("path", str(data)).load().count() == 30
    with Unreachable(kept), pytest.raises(Exception, match="planner"):
        kept.read.format("kafkalog").option("path", str(data)).load().count()


def test_a_byte_written_in_place_with_its_mtime_put_back(kept: Any, tmp_path: Path) -> None:
    """Same size, same mtime, same batch header: the ctime still tells, so the read is planned
    and decoded again and finds the damage, naming the file and the byte, as without kept
    answers."""
    data = tmp_path / "data"
    _append(data / "t-0", 40, 0)
    _settle()
    load = kept.read.format("kafkalog").option("path", str(data))
    assert load.load().count() == 120
    _flip_in_place(data / "t-0")
    with Unreachable(kept), pytest.raises(Exception, match="planner"):
        load.load().count()
    _settle()
    with pytest.raises(Exception, match=r"\.log.*byte|byte.*\.log"):
        load.load().select("value").collect()


def test_off_asks_every_time(kept: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    _append(data / "t-0", 10, 0)
    _settle()
    assert kept.read.format("kafkalog").option("path", str(data)).load().count() == 30
    kept.conf.set("spark.kafkalog.jvm.planCache", "false")
    try:
        with Unreachable(kept), pytest.raises(Exception, match="planner"):
            kept.read.format("kafkalog").option("path", str(data)).load().count()
    finally:
        kept.conf.unset("spark.kafkalog.jvm.planCache")


def _stats_files(stats: Path) -> int:
    return len(list(stats.glob("task-*.json"))) if stats.exists() else 0


def test_a_warm_count_is_kept_with_its_plan(kept: Any, tmp_path: Path) -> None:
    """A driver count over a kept plan, summaries on, is kept with it: the second count reads
    nothing (its tasks leave no stats); after an append it is counted again."""
    data, stats = tmp_path / "data", tmp_path / "stats"
    _append(data / "t-0", 40, 0)
    _settle()

    def count() -> int:
        reader = kept.read.format("kafkalog").option("path", str(data))
        return int(reader.option("statsDir", str(stats)).load().count())

    assert count() == 120
    read = _stats_files(stats)
    assert read > 0
    assert count() == 120
    assert _stats_files(stats) == read  # kept: nothing read
    _append(data / "t-0", 2, 500)
    _settle()
    assert count() == 126
    assert _stats_files(stats) > read  # counted again


def test_a_count_the_python_reader_helped_is_made_again(kept: Any, tmp_path: Path) -> None:
    """failOnDataLoss=false over damage: the Python reader skips the damaged batch with a
    warning, so the count is never kept (the warning is said at every count)."""
    data, stats = tmp_path / "data", tmp_path / "stats"
    _append(data / "t-0", 40, 0)
    _flip_in_place(data / "t-0")
    _settle()

    def count() -> int:
        reader = kept.read.format("kafkalog").option("path", str(data))
        reader = reader.option("statsDir", str(stats)).option("failOnDataLoss", "false")
        return int(reader.load().count())

    first = count()
    assert first < 120
    read = _stats_files(stats)
    assert count() == first
    assert _stats_files(stats) > read


def test_the_schema_is_kept_while_the_listing_stands(kept: Any, tmp_path: Path) -> None:
    """load()'s schema depends on the path's listing only (its partition directories), so an
    append or a roll leaves it kept (load() needs no planner) while the count over the changed
    files still asks (the unreachable planner fails it)."""
    data = tmp_path / "data"
    _append(data / "t-0", 40, 0)
    _append(data / "t-1", 30, 0)
    _settle()
    assert _reads(kept, data) == _expected(data)
    for change in ("append", "roll"):
        CHANGES[change](data)
        _settle()
        with Unreachable(kept):
            frame = kept.read.format("kafkalog").option("path", str(data)).load()
            assert frame.columns[:2] == ["key", "value"]
            with pytest.raises(Exception, match="planner"):
                frame.count()
        assert _reads(kept, data) == _expected(data)


@pytest.mark.parametrize("change", ["partition removed", "partition added"])
def test_a_kept_schema_never_hides_loads_error(kept: Any, tmp_path: Path, change: str) -> None:
    """A partition directory removed or added changes the listing: load() asks again (the
    unreachable planner fails load() itself), and a partition named by assign that is gone is
    load()'s error again, as without kept answers."""
    data = tmp_path / "data"
    _append(data / "t-0", 10, 0)
    _append(data / "t-1", 10, 0)
    _settle()
    reader = kept.read.format("kafkalog").option("path", str(data))
    reader = reader.option("assign", '{"t": [0, 1]}')
    assert reader.load().count() == 60
    with Unreachable(kept):
        reader.load()  # kept: no planner needed
    CHANGES[change](data)
    with Unreachable(kept), pytest.raises(Exception, match="planner"):
        reader.load()
    _settle()
    if change == "partition removed":
        with pytest.raises(Exception, match="no partition t-1 in"):
            reader.load()
    else:
        assert reader.load().count() == 60


def test_a_user_schemas_columns_are_kept_without_a_look(kept: Any, tmp_path: Path) -> None:
    """The columns of a user schema are the options' alone: after an append they are answered
    kept (the query's optimisation needs no planner), and the plan over the changed files is
    asked again (its count fails without the planner, then equals the brute force)."""
    data = tmp_path / "data"
    _append(data / "t-0", 10, 0)
    _settle()

    def frame() -> Any:
        reader = kept.read.format("kafkalog").schema("offset long, partition int")
        return reader.option("path", str(data)).load().select("offset")

    assert frame().count() == 30
    CHANGES["append"](data)
    _settle()
    with Unreachable(kept):
        frame()._jdf.queryExecution().optimizedPlan()  # columns kept, no planner asked
        with pytest.raises(Exception, match="planner"):
            frame().count()
    assert frame().count() == 42
