"""A pushed-down 1% timestamp window (``where timestamp >= a and timestamp < b``) read through
the planner and the tasks, without Spark: the tasks skipping the batches their headers rule out
(issue 34 §2) against the same read keeping every batch from the window's start on (what the
tasks did before, without ``maxTimestampLatenessMs``), and against the index seek of
``startingTimestamp``/``endingTimestamp`` (the floor), interleaved, in one process.

    python bench/bench_window.py [--data DIR] [--rounds 5]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import tempfile
import time
from typing import Any


def _read(options: dict[str, str], filters: list[Any], skip: bool) -> int:
    from kafkalog.spark.options import parse_read_options
    from kafkalog.spark.plan import plan_read, task_timestamps
    from kafkalog.spark.pushdown import bounds_from_filters
    from kafkalog.spark.task import read_split

    opts = parse_read_options(options)
    bounds = bounds_from_filters(filters) if filters else None
    splits, _ = plan_read(opts, bounds)
    window = task_timestamps(bounds) if skip else (None, None)
    return sum(
        b.num_rows for s in splits for b in read_split(s, include_headers=False, timestamps=window)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data", default=os.path.join(tempfile.gettempdir(), "kafkalog-bench-spark")
    )
    parser.add_argument("--records", type=int, default=2_400_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    from pyspark.sql.datasource import GreaterThanOrEqual, LessThan

    from kafkalog.cli.job import DAY_START, write_sample

    write_sample(args.data, args.records)
    width = 24 * 3600 * 1000 // 100
    lo = DAY_START + 12 * 3600 * 1000
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)

    def at(ms: int) -> dt.datetime:
        return epoch + dt.timedelta(milliseconds=ms)

    base = {"path": args.data, "subscribe": "clicks"}
    filters = [GreaterThanOrEqual(("timestamp",), at(lo)), LessThan(("timestamp",), at(lo + width))]
    seek = {**base, "startingTimestamp": str(lo), "endingTimestamp": str(lo + width)}
    sides = {
        "where, batches skipped by header": lambda: _read(base, filters, True),
        "where, every batch from the start (before)": lambda: _read(base, filters, False),
        "startingTimestamp/endingTimestamp seek": lambda: _read(seek, [], False),
        "whole topic": lambda: _read(base, [], False),
    }
    rows = {name: fn() for name, fn in sides.items()}  # warm: numba, the file cache
    times: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(args.rounds):
        for name, fn in sides.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    full = statistics.median(times["whole topic"])
    print(f"1% window of the clicks topic, median of {args.rounds} interleaved rounds")
    for name in sides:
        m = statistics.median(times[name])
        print(
            f"  {name:<46}{m:>8.3f} s {m / full:>7.1%} of the whole topic  {rows[name]:>9} rows out"
        )


if __name__ == "__main__":
    main()
