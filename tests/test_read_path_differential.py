"""Every bounded reader against a brute force, on every shape real writers leave on disk.

A bounded read ([start, end) of offsets) goes through the offset index, whose entries name where
an *append* starts, not the batch holding the offset (see ``tests/read_shapes.py``). Each reader
here is compared, over many seeded ranges (at entry, append, segment and index-entry
boundaries, inside multi-batch appends, at the log start and end, empty ones), with what
decoding every segment file from byte 0 gives (``read_shapes.truth``):

- the log layer: ``Log.records``, ``Log.batches``, ``Log.read_arrow``, ``Log.read``;
- the Spark planner without Spark (``plan_read`` + ``read_split``, as ``spark/source.py`` calls
  them): offset ranges, timestamps, pushed-down filters, ``read_committed``,
  ``maxRecordsPerPartition``, ``minPartitions``/``maxBytesPerSplit``, small read chunks; the
  same over every partition of ``tests/fixtures``;
- Spark itself (batch queries, a stream with ``maxOffsetsPerTrigger`` restarted from its
  checkpoint), ``kafkalog cat``, and a Fetch from kafka-python through ``kafkalog serve``.

Every mismatch is collected and reported together (reader, range, rows missing and extra), so
a failure says how much is lost where, not only that something is.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from clirun import kafkalog
from kafkalog.log import Log
from kafkalog.log.logdir import partition_directories
from kafkalog.records import LogReader
from provenance import FIXTURES
from read_shapes import SHAPES, V2, Shape, Truth, extend_shape, truth, write_shape

Row = tuple[int, int, bytes | None, bytes | None]  # offset, timestamp (ms), key, value


# -- shared helpers -------------------------------------------------------------------------------
class Shapes:
    """The shapes, written once per module (per xdist worker) and on first use."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.written: dict[str, tuple[Shape, Truth]] = {}

    def get(self, name: str) -> tuple[Shape, Truth]:
        if name not in self.written:
            shape = write_shape(self.root, name)
            self.written[name] = (shape, truth(shape.directory))
        return self.written[name]


@pytest.fixture(scope="module")
def shapes(tmp_path_factory: pytest.TempPathFactory) -> Shapes:
    return Shapes(tmp_path_factory.mktemp("shapes"))


def rows(records: Iterable[Any]) -> list[Row]:
    """Records (the truth's, or a reader's) as comparable rows."""
    return [(r.offset, r.timestamp, r.key, r.value) for r in records]


class Mismatches:
    """Reads compared so far, and how the wrong ones were wrong."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.checked = 0
        self.wrong: list[str] = []
        self.missing = 0
        self.extra = 0

    def check(self, label: str, got: Sequence[Any], want: Sequence[Any]) -> None:
        self.checked += 1
        if list(got) == list(want):
            return
        missing = Counter(want) - Counter(got)
        extra = Counter(got) - Counter(want)
        self.missing += sum(missing.values())
        self.extra += sum(extra.values())
        lost = sorted(_offset(x) for x in missing.elements())
        more = sorted(_offset(x) for x in extra.elements())
        detail = f"missing {len(lost)}"
        if lost:
            detail += f" (offsets {_span(lost)})"
        detail += f", extra {len(more)}" + (f" (offsets {_span(more)})" if more else "")
        if not lost and not more:
            detail += ", same rows in another order"
        self.wrong.append(f"{label}: got {len(got)} rows, expected {len(want)}: {detail}")

    def summary(self) -> str:
        return (
            f"{self.what}: {len(self.wrong)} of {self.checked} reads wrong, {self.missing} "
            f"rows missing and {self.extra} extra in all"
        )

    def verify(self) -> None:
        assert not self.wrong, "\n".join([self.summary(), *self.wrong[:12]])


def _offset(row: Any) -> int:
    return int(row[0]) if isinstance(row, tuple) else int(row)


def _span(offsets: list[int]) -> str:
    shown = ", ".join(map(str, offsets[:6]))
    return shown + (f", ... {offsets[-1]}" if len(offsets) > 6 else "")


def sample_ranges(
    t: Truth, shape: Shape | None, rng: random.Random, count: int, span: int = 150
) -> list[tuple[int, int]]:
    """[start, end) ranges within [log start, log end] where bounded reads go wrong: ending
    and starting at index entries and their neighbours, inside multi-entry appends, at entry
    and segment boundaries, the log's ends, one-offset and empty ranges, and random ones. Most
    are at most ``span`` offsets long (the far end of a range only costs decoding time)."""
    first, last = t.log_start, t.log_end
    points = t.boundaries()

    def below(p: int) -> int:
        return rng.randint(max(first, p - span), max(first, p))

    def above(p: int) -> int:
        return rng.randint(min(p, last), min(last, p + span))

    chosen: list[tuple[int, int]] = [(first, last), (first, first), (last, last), (t.lso, last)]
    wanted: list[tuple[int, int]] = []
    for o in t.index_offsets:
        for e in (o - 1, o, o + 1):
            if first <= e <= last:
                wanted += [(below(e), e), (e, above(e))]
    if shape is not None:
        for a, b, entries in shape.appends:
            if entries > 1 and b >= first:
                inside = rng.randint(max(a, first), b)
                wanted += [(below(inside), inside), (inside, above(inside))]
                wanted += [(below(inside), min(inside + 1, last)), (max(a, first), inside)]
    for seg in t.segments:
        if first <= seg <= last:
            wanted += [(below(seg), seg), (seg, above(seg))]
    for p in points:
        wanted += [(first, p), (p, last), (p, min(p + 1, last)), (p, min(p + 3, last))]
    for _ in range(count // 5):
        a = rng.randint(first, last)
        wanted.append((a, above(a)))
        p, q = sorted(rng.sample(points, 2)) if len(points) > 1 else (first, last)
        wanted.append((p, q))
    rng.shuffle(wanted)
    seen = set(chosen)
    for r in wanted:
        if len(chosen) >= count:
            break
        if r not in seen and r[0] <= r[1]:
            seen.add(r)
            chosen.append(r)
    return chosen


# -- the log layer --------------------------------------------------------------------------------
def _arrow_rows(table: pa.Table | pa.RecordBatch, unit_per_ms: int = 1) -> list[Row]:
    offsets = table.column("offset").to_pylist()
    stamps = table.column("timestamp").cast(pa.int64()).to_pylist()
    keys = table.column("key").to_pylist()
    values = table.column("value").to_pylist()
    # floored: a record without a timestamp (-1 ms) is -1000 us in Spark's column
    return [
        (o, ts // unit_per_ms, k, v)
        for o, ts, k, v in zip(offsets, stamps, keys, values, strict=True)
    ]


def _read_check(m: Mismatches, log: Log, t: Truth, start: int, max_bytes: int) -> None:
    """``Log.read``: the bytes of whole entries from the one holding ``start`` (at least one
    with min_one_message); their records from ``start`` on are the log's, in order."""
    data = log.read(start, max_bytes)
    entries = list(LogReader(data))
    got = [r for r in rows(r for e in entries for r in e.records()) if r[0] >= start]
    following = rows(t.every(start, t.log_end))
    label = f"Log.read({start}, max_bytes={max_bytes})"
    m.check(label, got, following[: len(got)])
    if following and start < t.log_end:
        m.check(label + " returned no record at or after its start", got[:1], following[:1])
    if entries:
        first = entries[0].size_in_bytes
        m.check(label + " size", [min(len(data), max(max_bytes, first))], [len(data)])


@pytest.mark.parametrize("name", list(SHAPES))
def test_log_readers(shapes: Shapes, name: str) -> None:
    shape, t = shapes.get(name)
    rng = random.Random(f"log/{name}")
    m = Mismatches(f"{name} ({shape.description}): Log readers")
    with Log(shape.directory, writable=False) as log:
        assert log.log_end_offset == t.log_end
        for a, b in sample_ranges(t, shape, rng, 60):
            want_data, want_all = rows(t.data(a, b)), rows(t.every(a, b))
            m.check(f"Log.records({a}, {b})", rows(log.records(a, b)), want_data)
            got_all = rows(log.records(a, b, include_control=True))
            m.check(f"Log.records({a}, {b}, include_control=True)", got_all, want_all)
            in_batches = rows(r for batch in log.batches(a, b) for r in batch.records())
            in_range = [r for r in in_batches if a <= r[0] < b]
            m.check(f"Log.batches({a}, {b})", in_range, want_all)
            m.check(f"Log.read_arrow({a}, {b})", _arrow_rows(log.read_arrow(a, b)), want_data)
        starts = sorted({a for a, _ in sample_ranges(t, shape, rng, 30)})
        for start in starts:
            for max_bytes in (1, 700, 1 << 20):
                _read_check(m, log, t, start, max_bytes)
    m.verify()


# -- the Spark planner, without Spark -------------------------------------------------------------
def _planner_opts(
    directory: Path, start: int | None, end: int | None, **extra: str
) -> dict[str, str]:
    topic, _, partition = directory.name.rpartition("-")
    options = {
        "path": str(directory.parent),
        "assign": json.dumps({topic: [int(partition)]}),
        **extra,
    }
    if start is not None:
        options["startingOffsets"] = json.dumps({topic: {partition: start}})
    if end is not None:
        options["endingOffsets"] = json.dumps({topic: {partition: end}})
    return options


def planner_rows(
    options: dict[str, str],
    *,
    filters: Sequence[Any] = (),
    chunk_bytes: int | None = None,
) -> list[Row]:
    """Rows as a Spark query of ``options`` gets them, planned and read without Spark as
    ``spark/source.py`` does (``filters`` pushed down as PySpark hands them)."""
    from kafkalog.log.arrow_read import CHUNK_BYTES
    from kafkalog.spark.options import parse_read_options
    from kafkalog.spark.plan import plan_read
    from kafkalog.spark.pushdown import bounds_from_filters
    from kafkalog.spark.task import read_split

    opts = parse_read_options(options)
    bounds = bounds_from_filters(list(filters)) if filters else None
    splits, aborted = plan_read(opts, bounds)  # aborted transactions from the log's read path
    out: list[Row] = []
    for split in splits:
        for batch in read_split(
            split,
            include_headers=False,
            aborted=aborted.get(split.directory),
            chunk_bytes=CHUNK_BYTES if chunk_bytes is None else chunk_bytes,
        ):
            out += _arrow_rows(batch, 1000)
    return out


def first_at_or_after(t: Truth, ts: int) -> int | None:
    """Kafka's offsetsForTimes: the first offset (control records too) with a timestamp at or
    after ``ts``."""
    return next((r.offset for r in t.records if r.timestamp >= ts), None)


def planner_sweep(
    m: Mismatches, t: Truth, directory: Path, shape: Shape | None, rng: random.Random, n: int
) -> None:
    """The planner over ``n`` offset ranges of one partition, and a share of them with
    ``read_committed``, record caps, many small splits, small read chunks, pushed-down offset
    and timestamp filters, and a start by timestamp."""
    from pyspark.sql.datasource import GreaterThanOrEqual, LessThan

    topic, _, partition = directory.name.rpartition("-")
    ranges = sample_ranges(t, shape, rng, n)
    for a, b in ranges:
        m.check(f"offsets [{a}, {b})", planner_rows(_planner_opts(directory, a, b)), data(t, a, b))
    committed = {"kafka.isolation.level": "read_committed"}
    for a, b in ranges[: n // 3]:
        got = planner_rows(_planner_opts(directory, a, b, **committed))
        m.check(f"read_committed [{a}, {b})", got, data(t, a, b, committed=True))
    short = [(a, b) for a, b in ranges if b - a <= 120][:10]
    for a, b in short:
        for cap in ("7", "64"):
            options = _planner_opts(directory, a, b, maxRecordsPerPartition=cap)
            m.check(
                f"maxRecordsPerPartition={cap} [{a}, {b})", planner_rows(options), data(t, a, b)
            )
        options = _planner_opts(directory, a, b, minPartitions="16", maxBytesPerSplit="512")
        m.check(
            f"minPartitions=16 maxBytesPerSplit=512 [{a}, {b})",
            planner_rows(options),
            data(t, a, b),
        )
        got = planner_rows(_planner_opts(directory, a, b), chunk_bytes=256)
        m.check(f"256-byte read chunks [{a}, {b})", got, data(t, a, b))
    # filters pushed down: Spark still filters the rows read, so the same is done here
    everything = _planner_opts(directory, None, None)
    for a, b in ranges[: n // 5]:
        filters = [GreaterThanOrEqual(("offset",), a), LessThan(("offset",), b)]
        got = [r for r in planner_rows(everything, filters=filters) if a <= r[0] < b]
        m.check(f"where offset >= {a} and offset < {b} (pushed down)", got, data(t, a, b))
    stamped = [ts for ts in t.timestamps() if ts >= 0]
    for _, b in ranges[: n // 10] if stamped else ():
        ts = rng.choice(stamped)
        when = dt.datetime.fromtimestamp(ts / 1000, dt.UTC)
        filters = [
            GreaterThanOrEqual(("timestamp",), when),
            GreaterThanOrEqual(("offset",), t.log_start),
            LessThan(("offset",), b),
        ]
        found = planner_rows(everything, filters=filters)
        got = [r for r in found if r[1] >= ts and t.log_start <= r[0] < b]
        want = [r for r in data(t, t.log_start, b) if r[1] >= ts]
        m.check(f"where timestamp >= {ts} and offset < {b} (pushed down)", got, want)
        start = first_at_or_after(t, ts)
        if start is not None and start <= b:
            options = _planner_opts(directory, None, b)
            options["startingOffsetsByTimestamp"] = json.dumps({topic: {partition: ts}})
            got = planner_rows(options)
            m.check(
                f"startingOffsetsByTimestamp {ts} (offset {start}) to {b}", got, data(t, start, b)
            )


def data(t: Truth, start: int, end: int, *, committed: bool = False) -> list[Row]:
    return rows(t.data(start, end, committed=committed))


def windows(t: Truth, rng: random.Random, k: int) -> list[tuple[int, int]]:
    """``k`` one-percent windows [lo, hi) (ms) of the span of the log's timestamps: at its
    two ends, starting at a record's timestamp, and anywhere; none for a log without
    timestamps."""
    stamped = sorted(r[1] for r in data(t, t.log_start, t.log_end) if r[1] >= 0)
    if not stamped:
        return []
    first, last = stamped[0], stamped[-1]
    width = max(1, (last - first) // 100)
    out = [(first, first + width), (last + 1 - width, last + 1)]
    for _ in range(k):
        lo = rng.choice(stamped) if rng.random() < 0.5 else rng.randint(first - width, last)
        out.append((lo, lo + width))
    return out


def window_filters(lo: int, hi: int) -> list[Any]:
    """``where timestamp >= lo and timestamp < hi`` as PySpark pushes it down."""
    from pyspark.sql.datasource import GreaterThanOrEqual, LessThan

    def at(ms: int) -> dt.datetime:
        return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=ms)

    return [GreaterThanOrEqual(("timestamp",), at(lo)), LessThan(("timestamp",), at(hi))]


def window_sweep(m: Mismatches, t: Truth, directory: Path, rng: random.Random, k: int) -> None:
    """One-percent timestamp windows pushed down: every row of each window, whatever the order
    of the timestamps, with and without the retired ``maxTimestampLatenessMs`` (ignored: a
    lateness of one second once lost most of a window of data 51 minutes out of order)."""
    everything = data(t, t.log_start, t.log_end)
    for lo, hi in windows(t, rng, k):
        want = [r for r in everything if lo <= r[1] < hi]
        for extra in ({}, {"maxTimestampLatenessMs": "1000"}):
            found = planner_rows(
                _planner_opts(directory, None, None, **extra), filters=window_filters(lo, hi)
            )
            got = [r for r in found if lo <= r[1] < hi]
            m.check(f"where timestamp in [{lo}, {hi}) (pushed down) {extra or ''}", got, want)


@pytest.mark.parametrize("name", list(SHAPES))
def test_planner_on_shapes(shapes: Shapes, name: str) -> None:
    shape, t = shapes.get(name)
    m = Mismatches(f"{name} ({shape.description}): Spark planner (plan_read + read_split)")
    planner_sweep(m, t, shape.directory, shape, random.Random(f"planner/{name}"), 150)
    window_sweep(m, t, shape.directory, random.Random(f"windows/{name}"), 8)
    m.verify()


def _fixture_partitions() -> list[Any]:
    out = []
    for data_dir in sorted(p for p in FIXTURES.iterdir() if p.is_dir()):
        for (topic, partition), directory in sorted(partition_directories(data_dir).items()):
            label = f"{data_dir.name}/{topic}-{partition}"
            out.append(pytest.param(Path(directory), id=label))
    return out


@pytest.mark.parametrize("directory", _fixture_partitions())
def test_planner_on_fixtures(directory: Path) -> None:
    """Real brokers' partitions: for small ones every single-offset range and every range from
    the log start to an offset and from an offset to the log end; a sample of the rest."""
    t = truth(directory)
    rng = random.Random(f"fixture/{directory}")
    m = Mismatches(f"fixture {directory.parent.name}/{directory.name}: Spark planner")
    first, last = t.log_start, t.log_end
    if last - first <= 300:
        for o in range(first, last + 1):
            for a, b in ((o, min(o + 1, last)), (first, o), (o, last)):
                got = planner_rows(_planner_opts(directory, a, b))
                m.check(f"offsets [{a}, {b})", got, data(t, a, b))
        planner_sweep(m, t, directory, None, rng, 12)
    else:
        # without an .index every planning scans the segment from byte 0: fewer ranges there
        indexed = any(directory.glob("*.index"))
        planner_sweep(m, t, directory, None, rng, 100 if indexed else 15)
    window_sweep(m, t, directory, rng, 4)
    m.verify()


# -- Spark ----------------------------------------------------------------------------------------
def targeted_ranges(t: Truth, shape: Shape, rng: random.Random, k: int) -> list[Any]:
    """``k`` ranges ending where a reader that trusts an index entry to name its batch loses
    records: inside an append of several entries whose last offset an index entry names, past
    its first entry; starting up to 200 offsets before. Ranges ending inside any multi-entry
    append when no index entry names one, random ones when there is no such append."""
    first, last = t.log_start, t.log_end
    named = set(t.index_offsets)
    multi = [(a, b) for a, b, n in shape.appends if n > 1 and a >= first and b > a]
    indexed = []
    for a, b in multi:
        entries = [e for e in t.entries if a <= e[0] and e[1] <= b]
        if b in named and len(entries) > 1:
            indexed.append((entries[1][0] + 1, b))  # an end past the append's first entry
    out = []
    for _ in range(k):
        if indexed or multi:
            lo, hi = rng.choice(indexed) if indexed else rng.choice(multi)
            end = rng.randint(min(lo, hi), hi)
        else:
            end = rng.randint(first, last)
        out.append((rng.randint(max(first, end - 200), end), end))
    return out


def _spark_rows(df: Any) -> dict[str, list[Row]]:
    """Rows of a query tagged by ``q``, by tag, in offset order (Spark gives no order)."""
    out: dict[str, list[Row]] = {}
    picked = df.selectExpr("q", "offset", "unix_micros(timestamp) as ts", "key", "value")
    for r in picked.collect():
        key = None if r.key is None else bytes(r.key)
        value = None if r.value is None else bytes(r.value)
        out.setdefault(r.q, []).append((r.offset, r.ts // 1000, key, value))
    return {q: sorted(found) for q, found in out.items()}


#: the two Spark sources: the JVM one (``format("kafkalog")`` once ``register`` added the jar)
#: and the Python one (also registered as ``kafkalog_python``)
SOURCES = ["jvm", "python"]


def use_source(spark: Any, source: str) -> str:
    """The format name that reads through ``source``; for the JVM, with the Python reader of
    last resort turned off, so every byte was decoded by the Java decoder (a row it could not
    decode fails the query)."""
    from kafkalog.spark.source import path_in_use

    if source == "python":
        return "kafkalog_python"
    assert path_in_use(spark) == "jvm", "register() did not put the JVM source in front"
    spark.conf.set("spark.kafkalog.jvm.fallback", "false")
    return "kafkalog"


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("name", list(SHAPES))
def test_spark_batch(spark: Any, shapes: Shapes, name: str, source: str) -> None:
    """One Spark job per shape: a union of reads by offsets, by timestamp, with offset and
    timestamp filters pushed down, with ``maxRecordsPerPartition`` and ``read_committed``."""
    from pyspark.sql import functions as F

    import kafkalog.spark

    shape, t = shapes.get(name)
    kafkalog.spark.register(spark, pushdown=True)
    fmt = use_source(spark, source)
    rng = random.Random(f"spark/{name}")
    topic, part = shape.topic, str(shape.partition)

    def read(q: str, **options: str) -> Any:
        reader = spark.read.format(fmt).option("path", str(shape.data_dir))
        reader = reader.option("assign", json.dumps({topic: [shape.partition]}))
        for k, v in options.items():
            reader = reader.option(k, v)
        return reader.load().withColumn("q", F.lit(q))

    def offsets(a: int | str, b: int | str) -> dict[str, str]:
        return {
            "startingOffsets": json.dumps({topic: {part: a}}),
            "endingOffsets": json.dumps({topic: {part: b}}),
        }

    (a0, b0), (a1, b1), (a2, b2), (a3, b3) = targeted_ranges(t, shape, rng, 4)
    committed = {"kafka.isolation.level": "read_committed"}
    # (label, query, expected rows); each query's rows are tagged with its label
    queries: list[tuple[str, Any, list[Row]]] = [
        (f"offsets [{a0}, {b0})", offsets(a0, b0), data(t, a0, b0)),
        (
            f"log start {t.log_start} to latest",
            offsets(t.log_start, -1),
            data(t, t.log_start, t.log_end),
        ),
        (
            f"where offset >= {a1} and offset < {b1} (pushed down)",
            f"offset >= {a1} and offset < {b1}",
            data(t, a1, b1),
        ),
        (
            f"maxRecordsPerPartition=37 [{a2}, {b2})",
            {"maxRecordsPerPartition": "37", **offsets(a2, b2)},
            data(t, a2, b2),
        ),
        (
            f"read_committed [{a3}, {b3})",
            {**committed, **offsets(a3, b3)},
            data(t, a3, b3, committed=True),
        ),
    ]
    stamped = [ts for ts in t.timestamps(below=b0) if ts >= 0]
    if stamped:
        ts = rng.choice(stamped)
        start = first_at_or_after(t, ts)
        assert start is not None
        by_ts = {"startingOffsetsByTimestamp": json.dumps({topic: {part: ts}})}
        queries += [
            (
                f"startingOffsetsByTimestamp {ts} (offset {start}) to {b0}",
                {**by_ts, "endingOffsets": json.dumps({topic: {part: b0}})},
                data(t, start, b0),
            ),
            (
                f"where timestamp >= {ts} and offset < {b0} (pushed down)",
                f"timestamp >= timestamp_millis({ts}) and offset >= {t.log_start} "
                f"and offset < {b0}",
                [r for r in data(t, t.log_start, b0) if r[1] >= ts],
            ),
        ]
    everything = data(t, t.log_start, t.log_end)
    for lo, hi in windows(t, rng, 1)[-2:]:
        where = f"timestamp >= timestamp_millis({lo}) and timestamp < timestamp_millis({hi})"
        want = [r for r in everything if lo <= r[1] < hi]
        queries.append((f"where timestamp in [{lo}, {hi}) (pushed down)", where, want))
        label = f"where timestamp in [{lo}, {hi}), maxTimestampLatenessMs=1000 (ignored)"
        queries.append((label, ({"maxTimestampLatenessMs": "1000"}, where), want))
    frames = [
        read(label).where(query)
        if isinstance(query, str)
        else read(label, **query[0]).where(query[1])
        if isinstance(query, tuple)
        else read(label, **query)
        for label, query, _ in queries
    ]
    union = frames[0]
    for df in frames[1:]:
        union = union.unionByName(df)
    got = _spark_rows(union)  # one job for all of them
    m = Mismatches(f"{name} ({shape.description}): Spark batch queries")
    for label, _, want in queries:
        m.check(label, got.get(label, []), sorted(want))
    m.verify()


def test_earliest_is_the_log_start_after_delete_records(shapes: Shapes) -> None:
    """DeleteRecords moves the log start inside a segment; the data directory's
    ``log-start-offset-checkpoint`` says where. Kafka's earliest offset (what Spark's Kafka
    source starts ``earliest`` at) is that start: nothing below it is readable."""
    shape, t = shapes.get("v2-deleterecords-txn-multi-i1-roll")
    first_segment = min(t.segments)
    assert first_segment < t.log_start  # the shape keeps records below the start on disk
    m = Mismatches(f"{shape.name}: earliest after DeleteRecords to {t.log_start}")
    got = planner_rows(_planner_opts(shape.directory, None, None))
    m.check("Spark planner, startingOffsets=earliest", got, data(t, t.log_start, t.log_end))
    m.verify()


# -- the JVM source: every read kind, against the Python source and the brute force --------------
FullRow = tuple[Any, ...]  # q, topic, partition, offset, timestamp (us), type, key, value, headers


def _full_rows(df: Any) -> dict[str, list[FullRow]]:
    out: dict[str, list[FullRow]] = {}
    for r in df.collect():
        headers = (
            None  # v0/v1 messages have none at all: null, not an empty array
            if r.headers is None
            else tuple((h.key, None if h.value is None else bytes(h.value)) for h in r.headers)
        )
        key = None if r.key is None else bytes(r.key)
        value = None if r.value is None else bytes(r.value)
        row = (r.topic, r.partition, r.offset, r.ts, r.timestampType, key, value, headers)
        out.setdefault(r.q, []).append(row)
    return {q: sorted(found, key=lambda x: (x[0], x[1], x[2])) for q, found in out.items()}


def jvm_read_kinds(spark: Any, path: Path, t: Truth, label: str, hands_off: bool = False) -> None:
    """Every read kind through the JVM source, the Java decoder alone (one union job): a full
    read with headers, ``read_committed``, offsets bounded by options and by a pushed-down
    ``where``, a timestamp window pushed down, ``maxRecordsPerPartition``; then ``count(*)``,
    ``groupBy(partition).count()`` and sums of narrow reads (one union job). Rows equal to the
    brute force; the full read (topic, partition, timestampType and headers too) equal to the
    Python source's (a branch of the first union job: a job's fixed cost saved per
    partition). Verified batch summaries cold and warm: the union job runs with none, then
    again once it left them (every batch it checked); the counts start with none (a count
    keeps no least timestamps) and the pushed-down counts then run warm. Nothing writes these
    logs meanwhile, so their segments count as settled at once: warm reads take the
    summaries' kept headers unread (BatchSummaries, "settled segments").

    ``hands_off``: the Java decoder hands a split to the Python reader at an ABORT marker no
    planned entry lists (an empty transaction's, which Kafka lists in no ``.txnindex``): the
    Python reader's look-back decides (kafkalog.log.abort_markers), so the fallback stays on
    and the rows must still equal the brute force's."""
    with tempfile.TemporaryDirectory(prefix="kafkalog-summaries-") as summaries:
        spark.conf.set(SETTLE_MS, "0")
        try:
            _jvm_read_kinds(spark, path, t, label, Path(summaries), hands_off)
        finally:
            spark.conf.unset(SUMMARIES_DIR)
            spark.conf.unset(SETTLE_MS)


#: where the JVM source keeps verified batch summaries (kafkalog.jvm.BatchSummaries)
SUMMARIES_DIR = "spark.kafkalog.batchSummaries.dir"
#: how old a segment's times must be for its summary's stamp to be kept and used
SETTLE_MS = "spark.kafkalog.batchSummaries.settleMs"


def _jvm_read_kinds(
    spark: Any, path: Path, t: Truth, label: str, summaries: Path, hands_off: bool
) -> None:
    from pyspark.sql import functions as F

    first, last = t.log_start, t.log_end
    rng = random.Random(f"jvm/{label}")
    a = rng.randint(first, last)
    b = rng.randint(a, last)
    stamped = sorted(ts for ts in t.timestamps() if ts >= 0)
    everything = data(t, first, last)
    queries: list[tuple[str, dict[str, str], str | None, list[Row]]] = [
        ("full", {}, None, everything),
        (
            "read_committed",
            {"kafka.isolation.level": "read_committed"},
            None,
            data(t, first, t.lso, committed=True),
        ),
        (f"where offset in [{a}, {b})", {}, f"offset >= {a} and offset < {b}", data(t, a, b)),
        ("maxRecordsPerPartition=400", {"maxRecordsPerPartition": "400"}, None, everything),
    ]
    if stamped:
        lo = stamped[len(stamped) // 3]
        hi = stamped[min(len(stamped) - 1, len(stamped) // 3 + max(1, len(stamped) // 50))]
        queries.append(
            (
                f"timestamp window [{lo}, {hi}]",
                {},
                f"timestamp between timestamp_millis({lo}) and timestamp_millis({hi})",
                [r for r in everything if lo <= r[1] <= hi],
            )
        )
        queries.append(
            (
                f"timestamp window ({lo}, {hi}), bounds inside a millisecond",
                {},
                f"timestamp > timestamp_micros({lo * 1000 + 1}) and timestamp < "
                f"timestamp_micros({hi * 1000 - 1})",
                [r for r in everything if lo < r[1] < hi],
            )
        )
    fmt = use_source(spark, "jvm")
    if hands_off:
        spark.conf.unset("spark.kafkalog.jvm.fallback")

    def union_job(reference: bool) -> dict[str, list[FullRow]]:
        frames = []
        for q, options, where, _ in queries:
            reader = spark.read.format(fmt).option("path", str(path))
            reader = reader.option("includeHeaders", "true")
            for k, v in options.items():
                reader = reader.option(k, v)
            df = reader.load()
            if where is not None:
                df = df.where(where)
            frames.append(df.withColumn("q", F.lit(q)))
        if reference:  # the Python source's full read, a branch of the same job (its rows only)
            python = spark.read.format("kafkalog_python").option("path", str(path))
            python = python.option("includeHeaders", "true").load()
            frames.append(python.withColumn("q", F.lit(PYTHON_FULL)))
        union = frames[0]
        for df in frames[1:]:
            union = union.unionByName(df)
        return _full_rows(union.selectExpr("*", "unix_micros(timestamp) as ts"))

    spark.conf.set(SUMMARIES_DIR, str(summaries / "reads"))
    got = union_job(reference=True)  # cold
    python = got.pop(PYTHON_FULL, [])
    warm = union_job(reference=False)  # every batch the first one checked summarized
    spark.conf.set(SUMMARIES_DIR, str(summaries / "counts"))
    counted = _counts(spark, fmt, path)
    # the partition as the JVM source's full read names it (checked against the Python
    # source's below)
    tp = (got["full"][0][0], got["full"][0][1]) if got.get("full") else None
    pushed_counts(spark, path, t, label, rng, tp)
    spark.conf.unset("spark.kafkalog.jvm.fallback")
    m = Mismatches(f"{label}: the JVM source")
    for q, _, _, want in queries:
        mine = [(r[2], r[3] // 1000, r[5], r[6]) for r in got.get(q, [])]
        m.check(q + " against the brute force", sorted(mine), sorted(want))
        m.check(q + ", summaries warm, against cold", warm.get(q, []), got.get(q, []))
    m.verify()
    assert got.get("full", []) == python, "the JVM source's full read differs from the Python one's"
    present = [len(r[3]) for r in everything if r[3] is not None]
    values = sum(present) if present else None  # Spark's sum of no value is null
    sizes = sorted({(r[0], r[1]) for r in python})
    by_partition = [(tp[0], tp[1], sum(1 for r in python if (r[0], r[1]) == tp)) for tp in sizes]
    assert counted == (len(everything), by_partition, values, values), label


#: the Python source's full read in the JVM reads' union job (kafkalog_python: no JVM involved)
PYTHON_FULL = "full, the Python source"


def _counts(spark: Any, fmt: str, path: Path) -> tuple[Any, ...]:
    """``count()``, ``groupBy(topic, partition).count()``, the sum of the values' lengths of a
    full read and of a narrow one (``columns=value``): each a branch of one union job, as in
    :func:`pushed_counts` (Spark plans and pushes each aggregate down into the scan under it
    as when it runs alone), its rows as strings beside the branch's number."""
    from pyspark.sql import functions as F

    base = spark.read.format(fmt).option("path", str(path)).load()
    narrow = spark.read.format(fmt).option("path", str(path)).option("columns", "value")
    branches = [
        base.groupBy().count(),  # what Dataset.count() runs
        base.groupBy("topic", "partition").count(),
        base.selectExpr("sum(length(value)) as n"),
        narrow.load().selectExpr("sum(length(value)) as n"),
    ]
    union = None
    for i, df in enumerate(branches):
        row = F.array(*[F.col(c).cast("string") for c in df.columns])
        branch = df.select(F.lit(i).alias("branch"), row.alias("row"))
        union = branch if union is None else union.unionByName(branch)
    assert union is not None
    got: dict[int, list[list[str | None]]] = {i: [] for i in range(len(branches))}
    for r in union.collect():
        got[r.branch].append(list(r.row))
    ((count,),) = got[0]
    ((values,),) = got[2]
    ((narrow_values,),) = got[3]
    return (
        int(count),
        sorted((topic, int(partition), int(n)) for topic, partition, n in got[1]),
        None if values is None else int(values),
        None if narrow_values is None else int(narrow_values),
    )


def pushed_counts(
    spark: Any, path: Path, t: Truth, label: str, rng: random.Random, tp: tuple[str, int] | None
) -> None:
    """Counts pushed down to the JVM source (``count(*)``, ``count(offset)``, grouped by
    topic and partition or not), answered on the driver (local mode) and by Spark tasks: equal
    to the brute force for full, ``read_committed`` and offset-bounded reads; a ``where`` on
    offset (not pushed: Spark filters the rows) and on timestamp (taken whole by the scan, the
    count pushed down) too; the plans say which ran.
    ``tp`` is the partition's topic and number (None when it holds no record).

    Each aggregate is its own branch of one union (a label column beside its rows as
    strings), one collect per way of counting: every branch is planned and pushed down as
    when it runs alone (Spark pushes an aggregate into the scan under it), without a job's
    fixed cost per count."""
    from pyspark.sql import functions as F

    first, last = t.log_start, t.log_end
    a = rng.randint(first, last)
    b = rng.randint(a, last)
    everything = data(t, first, last)
    committed = data(t, first, t.lso, committed=True)
    stamped = sorted(r[1] for r in everything if r[1] >= 0)

    def load(**options: str) -> Any:
        reader = spark.read.format("kafkalog").option("path", str(path))
        return reader.options(**options).load()

    def groups(rows: list[Row]) -> list[tuple[Any, ...]]:
        return [(tp[0], tp[1], len(rows))] if rows and tp else []

    # (what, the aggregate, its rows): a count(*) is ``groupBy().count()``, as Dataset.count
    checks: list[tuple[str, Any, list[tuple[Any, ...]]]] = [
        ("count(*)", lambda: load().groupBy().count(), [(len(everything),)]),
        (
            "groupBy(topic, partition).count()",
            lambda: load().groupBy("topic", "partition").count(),
            groups(everything),
        ),
        (
            "count(offset), count(*) by partition",
            lambda: load().groupBy("partition").agg({"offset": "count", "*": "count"}),
            [(tp[1], len(everything), len(everything))] if everything and tp else [],
        ),
        (
            "read_committed count(*)",
            lambda: load(**{"kafka.isolation.level": "read_committed"}).groupBy().count(),
            [(len(committed),)],
        ),
        (
            f"where offset in [{a}, {b}) count(*)",
            lambda: load().where(f"offset >= {a} and offset < {b}").groupBy().count(),
            [(len(data(t, a, b)),)],
        ),
    ]
    unchecked = {"checkCrcs": "false"}  # counted from batch headers, structurally checked
    checks += [
        (
            "count(*), checkCrcs=false",
            lambda: load(**unchecked).groupBy().count(),
            [(len(everything),)],
        ),
        (
            "read_committed by partition, checkCrcs=false",
            lambda: (
                load(**unchecked, **{"kafka.isolation.level": "read_committed"})
                .groupBy("topic", "partition")
                .count()
            ),
            groups(committed),
        ),
    ]
    if tp:
        bounds = {
            "startingOffsets": json.dumps({tp[0]: {str(tp[1]): a}}),
            "endingOffsets": json.dumps({tp[0]: {str(tp[1]): b}}),
        }
        checks.append(
            (
                f"offsets [{a}, {b}) count(*)",
                lambda: load(**bounds).groupBy().count(),
                [(len(data(t, a, b)),)],
            )
        )
        checks.append(
            (
                f"offsets [{a}, {b}) count(*), checkCrcs=false",
                lambda: load(**bounds, **unchecked).groupBy().count(),
                [(len(data(t, a, b)),)],
            )
        )
        checks.append(
            (
                f"offsets [{a}, {b}), read_committed, by partition",
                lambda: (
                    load(**bounds, **{"kafka.isolation.level": "read_committed"})
                    .groupBy("partition")
                    .count()
                ),
                [(tp[1], n)] if (n := len(data(t, a, b, committed=True))) else [],
            )
        )
    if stamped:
        lo, hi = stamped[len(stamped) // 4], stamped[len(stamped) // 2]
        where = f"timestamp between timestamp_millis({lo}) and timestamp_millis({hi})"
        want = sum(1 for r in everything if lo <= r[1] <= hi)
        checks.append(
            (f"where {where} count(*)", lambda: load().where(where).groupBy().count(), [(want,)])
        )
        strict = (
            f"timestamp > timestamp_micros({lo * 1000 + 1}) and timestamp < timestamp_millis({hi})"
        )
        checks.append(
            (
                f"where {strict} count(*) (bounds inside a millisecond)",
                lambda: load().where(strict).groupBy().count(),
                [(sum(1 for r in everything if lo < r[1] < hi),)],
            )
        )

    def as_strings(rows: list[tuple[Any, ...]]) -> list[tuple[str, ...]]:
        return sorted(tuple(str(v) for v in row) for row in rows)

    for driver in ("true", "false"):
        spark.conf.set("spark.kafkalog.jvm.driverCounts", driver)
        try:
            branches = []
            for i, (_, query, _) in enumerate(checks):
                df = query()
                row = F.array(*[F.col(c).cast("string") for c in df.columns])
                branches.append(df.select(F.lit(i).alias("check"), row.alias("row")))
            union = branches[0]
            for branch in branches[1:]:
                union = union.unionByName(branch)
            got: dict[int, list[tuple[str, ...]]] = {i: [] for i in range(len(checks))}
            for r in union.collect():
                got[r.check].append(tuple(r.row))
            for i, (what, _, want) in enumerate(checks):
                assert sorted(got[i]) == as_strings(want), (
                    f"{label}: {what} (counted on the driver: {driver}): "
                    f"{sorted(got[i])} != {as_strings(want)}"
                )
            load().createOrReplaceTempView("pushed_counts_probe")
            query = "SELECT partition, count(*) FROM pushed_counts_probe GROUP BY partition"
            plan = spark.sql(f"EXPLAIN {query}").first()[0]
            if driver == "true":
                assert "LocalTableScan" in plan and "count(*)" in plan, plan
            else:
                assert "pushed aggregate: count x1 by partition (per task)" in plan, plan
        finally:
            spark.conf.unset("spark.kafkalog.jvm.driverCounts")


@pytest.mark.parametrize("name", list(SHAPES))
def test_jvm_read_kinds_on_shapes(spark: Any, shapes: Shapes, name: str) -> None:
    shape, t = shapes.get(name)  # one partition: the data directory is read whole
    spec = SHAPES[name]
    empty = isinstance(spec, V2) and spec.empty_transactions
    jvm_read_kinds(spark, shape.data_dir, t, f"{name} ({shape.description})", hands_off=empty)


@pytest.mark.parametrize("directory", _fixture_partitions())
def test_jvm_read_kinds_on_fixtures(spark: Any, directory: Path) -> None:
    jvm_read_kinds(spark, directory, truth(directory), f"fixture {directory.parent.name}")


# -- a stream restarted from its checkpoint -------------------------------------------------------
def _stream_once(spark: Any, shape: Shape, out: Path, checkpoint: Path, per_trigger: int) -> None:
    query = (
        spark.readStream.format("kafkalog")
        .option("path", str(shape.data_dir))
        .option("subscribe", shape.topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(per_trigger))
        .load()
        .selectExpr("offset", "unix_micros(timestamp) as ts", "key", "value")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()


def _parquet_rows(parts: Iterable[Path]) -> list[Row]:
    import pyarrow.parquet as pq

    found: list[Row] = []
    for part in sorted(parts):
        table = pq.read_table(part)
        found += [(r["offset"], r["ts"] // 1000, r["key"], r["value"]) for r in table.to_pylist()]
    return sorted(found)


@pytest.mark.parametrize("name", ["v2-txn-multi-i1-roll", "v0-i1-roll"])
def test_spark_stream_restarts(spark: Any, tmp_path: Path, name: str) -> None:
    """A stream with ``maxOffsetsPerTrigger`` (micro-batches ending inside multi-entry appends)
    reads everything, then, restarted from its checkpoint after more appends, exactly what is
    new: every record once."""
    shape = write_shape(tmp_path / "shapes", name)
    t = truth(shape.directory)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    per_trigger = 131
    m = Mismatches(f"{name} ({shape.description}): stream, maxOffsetsPerTrigger={per_trigger}")
    _stream_once(spark, shape, out, checkpoint, per_trigger)
    first_run = set(out.glob("part-*.parquet"))
    m.check("first run", _parquet_rows(first_run), data(t, t.log_start, t.log_end))
    triggers = len(list((checkpoint / "offsets").iterdir()))
    assert triggers >= (t.log_end - t.log_start) // per_trigger  # the limit was applied
    extend_shape(shape, 400)
    after = truth(shape.directory)
    assert after.log_end > t.log_end
    _stream_once(spark, shape, out, checkpoint, per_trigger)
    second_run = set(out.glob("part-*.parquet")) - first_run
    m.check("after a restart", _parquet_rows(second_run), data(after, t.log_end, after.log_end))
    m.verify()


# -- kafkalog cat ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["v2-multi-i1", "v0-i4096"])
def test_cli_cat(shapes: Shapes, name: str) -> None:
    shape, t = shapes.get(name)
    rng = random.Random(f"cat/{name}")
    (a, b), (c, _) = targeted_ranges(t, shape, rng, 2)
    m = Mismatches(f"{name} ({shape.description}): kafkalog cat")
    runs: list[tuple[list[str], list[Row]]] = [
        (["--offset", str(a), "--max", str(b - a)], data(t, a, t.log_end)[: b - a]),
        (["--offset", str(c)], data(t, c, t.log_end)),
    ]
    if shape.has_timestamps:
        ts = rng.choice(t.timestamps())
        start = first_at_or_after(t, ts)
        assert start is not None
        runs.append((["--timestamp", str(ts), "--max", "50"], data(t, start, t.log_end)[:50]))
    for args, want in runs:
        result = kafkalog("cat", str(shape.directory), *args)
        assert result.returncode == 0, result.stderr
        got = []
        for line in result.stdout.splitlines():
            r = json.loads(line)
            key = None if r["key"] is None else r["key"].encode()
            value = None if r["value"] is None else r["value"].encode()
            got.append((r["offset"], r["timestamp"], key, value))
        m.check("kafkalog cat " + " ".join(args), got, want)
    m.verify()


# -- a Fetch through kafkalog serve ---------------------------------------------------------------
def test_fetch_through_serve(tmp_path: Path) -> None:
    """kafka-python, unchanged, fetching a transactional log of multi-batch appends through
    ``kafkalog serve`` from several offsets (inside appends, at index entries, the log start,
    the last stable offset), both isolation levels, small fetches."""
    from kafka import KafkaConsumer, TopicPartition

    from kafka_clients import config
    from kafkalog.server import ServerThread

    shape = write_shape(tmp_path, "v2-txn-multi-i1-roll")
    t = truth(shape.directory)
    rng = random.Random("fetch")
    starts = sorted(
        {t.log_start, t.lso, *(a for a, _ in targeted_ranges(t, shape, rng, 3))}
        | {o for o in rng.sample(t.index_offsets, 2)}
    )
    tp = TopicPartition(shape.topic, shape.partition)
    m = Mismatches(f"{shape.name} ({shape.description}): Fetch from kafka-python")
    with ServerThread(str(shape.data_dir), config()) as server:
        for isolation in ("read_uncommitted", "read_committed"):
            consumer = KafkaConsumer(
                bootstrap_servers=server.bootstrap,
                isolation_level=isolation,
                enable_auto_commit=False,
                fetch_max_wait_ms=50,
                max_partition_fetch_bytes=2048,
            )
            try:
                consumer.assign([tp])
                for start in starts:
                    want = data(t, start, t.log_end, committed=isolation == "read_committed")
                    consumer.seek(tp, start)
                    got: list[Row] = []
                    deadline = time.monotonic() + 15
                    while time.monotonic() < deadline:
                        polled = consumer.poll(timeout_ms=100)
                        if not polled and len(got) >= len(want):
                            break  # everything, and a poll more found nothing else
                        for messages in polled.values():
                            got += [(r.offset, r.timestamp, r.key, r.value) for r in messages]
                    m.check(f"{isolation} from {start}", got, want)
            finally:
                consumer.close()
    m.verify()
