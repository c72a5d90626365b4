"""A seeded random campaign of bounded batch reads through the JVM source against the brute force
(tests/read_shapes.py's :func:`truth`), with the log changed between two runs of the same query.

Each seed builds a data directory of two partitions (two shapes of tests/read_shapes.py), asks
random queries (offsets and timestamps as options, per-partition and global; ``where`` on
offset, timestamp and partition pushed down; ``read_committed``; column subsets;
``minPartitions`` and ``maxRecordsPerPartition``; counts and aggregates), then changes one
partition (appends, a roll, retention deleting its first segment, a compaction) and asks the
same queries again: a kept plan or batch summary must never answer for the old log. The reader
must never write a byte or an mtime of what it reads.

tests/spark/test_jvm_campaign.py runs a few seeds; more by hand::

    PYTHONPATH=src:tests python3 tests/spark/jvm_campaign.py 0 40
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import log_changes
import read_shapes
from kafkalog.log import TopicConfig
from kafkalog.records import Record
from read_shapes import TOPIC, Truth, truth

#: the shapes the campaign draws its partitions from (written once per process)
CAMPAIGN_SHAPES = (
    "v2-single-i1-codecs-roll",
    "v2-multi-i1",
    "v2-multi-ihuge-roll",
    "v2-txn-multi-i1-roll",
    "v2-txn-nested-aborts-follower-i1-roll",
    "v2-gaps-follower-multi-i1-roll",
    "v2-retention-multi-i1-roll",
    "v2-deleterecords-txn-multi-i1-roll",
    "v0-i1-roll",
    "v1-ihuge-roll",
    "v2-scrambled-multi-i1-codecs-roll",
    "v2-missing-ts-multi-i1-codecs-roll",
    "v2-logappendtime-multi-i1-roll",
)

#: a row as compared: partition, offset, timestamp (ms), key, value
Row = tuple[int, int, int, bytes | None, bytes | None]
CHECKPOINTS = ("log-start-offset-checkpoint", "recovery-point-offset-checkpoint")


def _written(root: Path, name: str, cache: dict[str, Path]) -> Path:
    if name not in cache:
        cache[name] = read_shapes.write_shape(root / "shapes", name, seed=7).directory
    return cache[name]


def build(root: Path, names: list[str], cache: dict[str, Path]) -> Path:
    """A data directory holding ``names``' partitions as partitions 0, 1, ... of one topic."""
    data = root / "data"
    lines: dict[str, list[str]] = {c: [] for c in CHECKPOINTS}
    for p, name in enumerate(names):
        source = _written(root, name, cache)
        shutil.copytree(
            source, data / f"{TOPIC}-{p}", ignore=shutil.ignore_patterns(".kafkalog.lock")
        )
        for c in CHECKPOINTS:
            for line in (source.parent / c).read_text().split("\n")[2:]:
                if line.strip():
                    lines[c].append(f"{TOPIC} {p} {line.split()[2]}")
    for c, entries in lines.items():
        (data / c).write_text(f"0\n{len(entries)}\n" + "".join(e + "\n" for e in entries))
    (data / ".kafka_cleanshutdown").write_text("")
    return data


def truths(data: Path, partitions: int) -> dict[int, Truth]:
    return {p: truth(data / f"{TOPIC}-{p}") for p in range(partitions)}


def first_at_or_after(t: Truth, ts: int) -> int | None:
    return next((r.offset for r in t.records if r.timestamp >= ts), None)


@dataclass
class Query:
    """One random query: its options, ``where`` and what it selects, and how the brute force
    answers it (from the truths at the time it is asked)."""

    label: str
    options: dict[str, str]
    where: str | None
    select: str  # "rows" or an aggregate's name
    expect: Callable[[dict[int, Truth]], list[Row] | None]  # None: the query must fail


def _stamped(t: Truth) -> list[int]:
    return sorted({ts for ts in t.timestamps() if ts >= 0})


def make_query(rng: random.Random, ts: dict[int, Truth], n: int) -> Query:
    parts = sorted(ts)
    opts: dict[str, str] = {}
    label: list[str] = []
    committed = rng.random() < 0.3
    if committed:
        opts["kafka.isolation.level"] = "read_committed"
        label.append("read_committed")
    # the start: per partition (offsets or timestamps), a global timestamp, or earliest
    start_kind = rng.choice(["earliest", "offsets", "ts-json", "ts-global"])
    start_of: dict[int, int | str] = {}
    if start_kind == "offsets":
        for p in parts:
            t = ts[p]
            start_of[p] = rng.choice([-2, rng.randint(t.log_start, t.log_end)])
        opts["startingOffsets"] = json.dumps({TOPIC: {str(p): o for p, o in start_of.items()}})
    elif start_kind in ("ts-json", "ts-global"):
        common = set.intersection(*(set(_stamped(ts[p])) for p in parts))
        every = sorted({x for p in parts for x in _stamped(ts[p])})
        if start_kind == "ts-global" and every:
            # any timestamp some partition has at or before its last: where a partition has
            # none at or after it, the default strategy fails the query
            x = rng.choice(every)
            opts["startingTimestamp"] = str(x)
            for p in parts:
                start_of[p] = f"ts:{x}"
        elif every:
            chosen = {p: rng.choice(_stamped(ts[p]) or [0]) for p in parts}
            opts["startingOffsetsByTimestamp"] = json.dumps(
                {TOPIC: {str(p): x for p, x in chosen.items()}}
            )
            for p, x in chosen.items():
                start_of[p] = f"ts:{x}"
        del common
    given = [opts.get(k) for k in ("startingOffsets", "startingTimestamp")]
    given.append(opts.get("startingOffsetsByTimestamp"))
    label.append(f"start {start_kind} {next((g for g in given if g), '')}")
    end_kind = rng.choice(["latest", "offsets", "ts-global"])
    end_of: dict[int, int | str] = {}
    if end_kind == "offsets":
        for p in parts:
            t = ts[p]
            end_of[p] = rng.choice([-1, rng.randint(t.log_start, t.log_end)])
        opts["endingOffsets"] = json.dumps({TOPIC: {str(p): o for p, o in end_of.items()}})
    elif end_kind == "ts-global":
        every = sorted({x for p in parts for x in _stamped(ts[p])})
        if every:
            x = rng.choice(every) + rng.choice([0, 1])
            opts["endingTimestamp"] = str(x)
            for p in parts:
                end_of[p] = f"ts:{x}"
    label.append(f"end {end_kind} {opts.get('endingOffsets') or opts.get('endingTimestamp', '')}")
    if rng.random() < 0.3:
        opts["minPartitions"] = str(rng.randint(1, 9))
    if rng.random() < 0.3:
        opts["maxRecordsPerPartition"] = str(rng.randint(1, 400))
    # a where pushed down
    conds: list[str] = []
    preds: list[Callable[[Row], bool]] = []
    if rng.random() < 0.4:
        t = ts[rng.choice(parts)]
        a = rng.randint(t.log_start, t.log_end)
        b = rng.randint(a + 1, t.log_end + 2)  # not empty (Spark prunes a contradiction)
        conds.append(f"offset >= {a} and offset < {b}")
        preds.append(lambda r, a=a, b=b: a <= r[1] < b)
    if rng.random() < 0.3:
        every = sorted({x for p in parts for x in _stamped(ts[p])})
        if every:
            lo = rng.choice(every)
            hi = lo + rng.randint(0, 600_000)
            conds.append(
                f"timestamp >= timestamp_millis({lo}) and timestamp <= timestamp_millis({hi})"
            )
            preds.append(lambda r, lo=lo, hi=hi: lo <= r[2] <= hi)
    if rng.random() < 0.3:
        p = rng.choice(parts)
        op = rng.choice(["=", "!=", "<", ">="])
        conds.append(f"partition {op} {p}")
        preds.append(
            {
                "=": lambda r, p=p: r[0] == p,
                "!=": lambda r, p=p: r[0] != p,
                "<": lambda r, p=p: r[0] < p,
                ">=": lambda r, p=p: r[0] >= p,
            }[op]
        )
    where = " and ".join(f"({c})" for c in conds) or None
    select = rng.choice(["rows", "rows", "offset,partition", "value", "count", "aggregates"])
    label.append(f"where {where}; select {select}; {opts}")

    def resolve(t: Truth, spec: int | str, default: int, ending: bool) -> int | None:
        if isinstance(spec, str):
            found = first_at_or_after(t, int(spec[3:]))
            if found is None:
                return t.log_end if ending else None
            return found
        if spec == -2:
            return t.log_start
        if spec == -1:
            return t.log_end
        return spec

    def expect(now: dict[int, Truth]) -> list[Row] | None:
        out: list[Row] = []
        for p in parts:
            t = now[p]
            start = resolve(t, start_of.get(p, -2), t.log_start, ending=False)
            end = resolve(t, end_of.get(p, -1), t.log_end, ending=True)
            if start is None or end is None:
                return None  # no offset at or after the timestamp: the default strategy fails
            if start < t.log_start or end < t.log_start:
                return None  # data lost: failOnDataLoss (default true) fails the query
            if start > end:
                return None  # Spark's Kafka source refuses a start after the end
            for r in t.data(start, end, committed=committed):
                row = (p, r.offset, r.timestamp, r.key, r.value)
                if all(f(row) for f in preds):
                    out.append(row)
        return sorted(out)

    return Query(f"q{n}: " + "; ".join(label), opts, where, select, expect)


def run_query(spark: Any, data: Path, q: Query) -> Any:
    from pyspark.sql import functions as F

    reader = spark.read.format("kafkalog").option("path", str(data))
    for k, v in q.options.items():
        reader = reader.option(k, v)
    df = reader.load()
    if q.where:
        df = df.where(q.where)
    if q.select == "count":
        return df.count()
    if q.select == "aggregates":
        got = df.agg(
            F.count(F.lit(1)),
            F.sum(F.length("value")),
            F.max("offset"),
            F.min("timestamp"),
        ).collect()[0]
        return tuple(got)
    if q.select == "offset,partition":
        return sorted((r.partition, r.offset) for r in df.select("offset", "partition").collect())
    if q.select == "value":
        values = [None if r.value is None else bytes(r.value) for r in df.select("value").collect()]
        return sorted(values, key=lambda v: (v is not None, v or b""))
    picked = df.selectExpr("partition", "offset", "unix_micros(timestamp) as ts", "key", "value")
    return sorted(
        (
            r.partition,
            r.offset,
            r.ts // 1000 if r.ts is not None else None,
            None if r.key is None else bytes(r.key),
            None if r.value is None else bytes(r.value),
        )
        for r in picked.collect()
    )


def shaped(q: Query, rows: list[Row]) -> Any:
    """The brute force's rows in the shape ``q`` selects."""
    import datetime as dt

    if q.select == "count":
        return len(rows)
    if q.select == "aggregates":
        lengths = [len(r[4]) for r in rows if r[4] is not None]
        stamps = [r[2] for r in rows]
        least = None
        if stamps:
            least = dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=min(stamps))
        return (
            len(rows),
            sum(lengths) if lengths else None,
            max((r[1] for r in rows), default=None),
            least,
        )
    if q.select == "offset,partition":
        return sorted((r[0], r[1]) for r in rows)
    if q.select == "value":
        return sorted((r[4] for r in rows), key=lambda v: (v is not None, v or b""))
    return rows


def look(data: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``data``: size and mtime (what a reader must leave as it was)."""
    out = {}
    for dirpath, _, files in os.walk(data):
        for f in files:
            st = os.stat(os.path.join(dirpath, f))
            out[os.path.join(dirpath, f)] = (st.st_size, st.st_mtime_ns)
    return out


def change(rng: random.Random, d: Path, t: Truth) -> str:
    """One writer's change to partition directory ``d``: its description."""
    config = TopicConfig(segment_bytes=6000, index_interval_bytes=rng.choice([1, 300, 4096]))
    kinds = ["append", "roll", "retention", "compaction"]
    if len(t.segments) < 2:
        kinds.remove("retention")
    kind = rng.choice(kinds)
    if kind == "append":
        from kafkalog.log import Log

        n = rng.randint(1, 40)
        base = max([r.timestamp for r in t.records] + [read_shapes.T0])
        with Log(d, config) as log:
            for i in range(n):
                log.append_records([Record.of(b"new%d" % i, b"k%d" % (i % 3), base + i)])
        return f"append {n}"
    if kind == "roll":
        log_changes.roll(d, config, read_shapes.T0 + 10**8)
        return "roll"
    if kind == "retention":
        log_changes.retention(d, TopicConfig(segment_bytes=6000, retention_ms=-1))
        return "retention"
    compacting = TopicConfig(
        segment_bytes=6000,
        cleanup_policy=("compact",),
        delete_retention_ms=0,
        file_delete_delay_ms=0,
    )
    log_changes.compact(d, compacting)
    return "compaction"


class Failures(list[str]):
    pass


def ask(spark: Any, data: Path, q: Query, now: dict[int, Truth], stage: str, out: Failures) -> None:
    before = look(data)
    want = q.expect(now)
    try:
        got: Any = run_query(spark, data, q)
        failed: str | None = None
    except Exception as problem:
        got, failed = None, str(problem).splitlines()[0][:400]
    if look(data) != before:
        out.append(f"{stage} {q.label}: the read changed a file")
    if want is None:
        if failed is None:
            out.append(f"{stage} {q.label}: expected an error, got {str(got)[:300]}")
        return
    if failed is not None:
        out.append(f"{stage} {q.label}: failed: {failed}")
        return
    expected = shaped(q, want)
    if got != expected:
        if isinstance(got, list) and isinstance(expected, list):
            g, e = set(got), set(expected)
            more = sorted(g - e)[:5]
            less = sorted(e - g)[:5]
            out.append(
                f"{stage} {q.label}: {len(got)} rows, want {len(expected)}; "
                f"extra {more}; missing {less}"
            )
        else:
            out.append(f"{stage} {q.label}: got {got}, want {expected}")


def campaign(
    spark: Any, seed: int, root: Path, cache: dict[str, Path], queries: int = 4
) -> Failures:
    """One seed: a data directory, ``queries`` random queries asked, the log changed, and the
    same queries asked again."""
    rng = random.Random(f"campaign/{seed}")
    names = rng.sample(CAMPAIGN_SHAPES, 2)
    work = root / f"seed-{seed}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    data = build(work, names, cache)
    out = Failures()
    now = truths(data, len(names))
    qs = [make_query(rng, now, i) for i in range(queries)]
    for q in qs:
        ask(spark, data, q, now, f"seed {seed} {names} before", out)
    p = rng.randrange(len(names))
    what = change(rng, data / f"{TOPIC}-{p}", now[p])
    now = truths(data, len(names))
    for q in qs:
        ask(spark, data, q, now, f"seed {seed} {names} after {what} of partition {p}", out)
    return out


def session() -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import kafkalog.spark

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    kafkalog.spark.register(spark)
    return spark


def main(argv: list[str]) -> int:
    import tempfile

    first, last = int(argv[0]), int(argv[1])
    spark = session()
    spark.conf.set("spark.kafkalog.jvm.fallback", "false")
    for key in ("spark.kafkalog.jvm.planCache.settleMs", "spark.kafkalog.batchSummaries.settleMs"):
        if len(argv) > 2:
            spark.conf.set(key, argv[2])
    root = Path(tempfile.mkdtemp(prefix="kafkalog-campaign-"))
    cache: dict[str, Path] = {}
    bad = 0
    for seed in range(first, last):
        found = campaign(spark, seed, root, cache)
        for f in found:
            print(f, flush=True)
        bad += len(found)
        print(f"seed {seed}: {len(found)} findings", flush=True)
    shutil.rmtree(root, ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
