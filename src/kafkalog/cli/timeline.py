"""``kafkalog timeline``: records and bytes over time per partition, from the time and offset
indexes alone (the logs are not read): a terminal summary, and with ``--png FILE`` a plot.

A time-index entry (T, O) says the largest timestamp up to offset O is T; the offset index puts
O at a byte position. Consecutive entries therefore give how many records and bytes arrived
between two times, at the index's granularity (one point per ``index.interval.bytes``).

The plot has one row per partition (records per second, bytes per second), each over its own
time span: partitions of one data directory can differ by orders of magnitude in rate and span
(a busy topic's 2 hours, a consumer-offsets partition's 2 commits 12 days apart), and on shared
axes the small ones vanish. At most ``--max-partitions`` rows are drawn, the partitions with the
most records first; the summary says how many were left out (``--json`` has every one).
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import os
import sys
from dataclasses import dataclass, field
from typing import IO, Any

from kafkalog import files
from kafkalog.cli.args import int_between


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "timeline",
        help="records and bytes over time per partition, from the indexes only (PNG + summary)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  kafkalog timeline /var/lib/kafka/data --png timeline.png\n"
        "  kafkalog timeline data/orders-3",
    )
    p.add_argument(
        "paths",
        nargs="+",
        help="data directories or partition directories (paths, or URIs pyarrow.fs resolves)",
    )
    p.add_argument(
        "--png",
        default=None,
        metavar="FILE",
        help="draw the plot into FILE (nothing is drawn without it: the command never writes "
        "a file it was not given)",
    )
    p.add_argument(
        "--max-partitions",
        type=int_between(1),
        default=16,
        metavar="N",
        help="rows of the plot: the N partitions with the most records (default 16)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per partition (its first and last indexed time, records, bytes, "
        "and the index points), nothing else on stdout",
    )
    p.set_defaults(run=run)


@dataclass
class Series:
    name: str
    times: list[int] = field(default_factory=list)  # ms
    offsets: list[int] = field(default_factory=list)
    bytes: list[int] = field(default_factory=list)  # cumulative over segments


def series_for(directory: str) -> Series:
    """Points (time, offset, cumulative bytes) from every segment's indexes, read-only."""
    from kafkalog.index import OffsetIndex, TimeIndex
    from kafkalog.log.layout import segment_logs

    series = Series(os.path.basename(os.path.normpath(directory)))
    before = 0
    for base, log_path in segment_logs(directory):
        stem = log_path[: -len(".log")]
        size = files.getsize(log_path)
        if files.exists(stem + ".timeindex") and files.exists(stem + ".index"):
            with (
                TimeIndex(stem + ".timeindex", base, writable=False) as tindex,
                OffsetIndex(stem + ".index", base, writable=False) as oindex,
            ):
                for ts, offset in tindex:
                    position = oindex.lookup(offset).position
                    series.times.append(ts)
                    series.offsets.append(offset)
                    series.bytes.append(before + position)
        before += size
    return series


def _when(ms: int) -> dt.datetime | None:
    """``ms`` as a UTC datetime, or None outside years 1-9999: a corrupt time index may hold
    any 64-bit timestamp, which must not stop the summary or the plot."""
    try:
        return dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    except (ValueError, OverflowError, OSError):
        return None


def _iso(ms: int) -> str:
    when = _when(ms)
    return f"{ms} ms" if when is None else when.strftime("%Y-%m-%d %H:%M:%S")


def run(args: argparse.Namespace, out: IO[str] | None = None) -> int:
    from kafkalog.cli.verify import partitions_under

    out = out or sys.stdout
    all_series = [series_for(d) for path in args.paths for d in partitions_under(path)]
    limit = getattr(args, "max_partitions", 16)
    if args.json:
        for s in all_series:
            print(json.dumps(_json(s)), file=out)
        if args.png is not None:
            _plot(all_series, args.png, limit)
        return 0
    print(
        f"{'partition':<40}{'first indexed':>21}{'last indexed':>21}{'records':>12}{'bytes':>14}",
        file=out,
    )
    for s in all_series:
        if not s.times:
            print(f"{s.name:<40}{'(no time index entries)':>42}", file=out)
            continue
        records = s.offsets[-1] - s.offsets[0]
        size = s.bytes[-1] - s.bytes[0]
        print(
            f"{s.name:<40}{_iso(s.times[0]):>21}{_iso(s.times[-1]):>21}{records:>12,}{size:>14,}",
            file=out,
        )
    print(
        "records and bytes are counted between the first and last index entries, at the"
        " indexes' granularity (index.interval.bytes); logs are not read",
        file=out,
    )
    if args.png is None:
        print("no plot drawn: --png FILE draws one", file=out)
        return 0
    drawn, drawable = _plot(all_series, args.png, limit)
    left = drawable - drawn
    more = f"; {left} more not drawn (--max-partitions)" if left else ""
    print(f"plot: {os.path.abspath(args.png)} ({drawn} partition(s) drawn{more})", file=out)
    return 0


def _json(s: Series) -> dict[str, Any]:
    """A partition's summary and its index points, for scripts (``--json``)."""
    return {
        "type": "partition",
        "partition": s.name,
        "firstIndexed": s.times[0] if s.times else None,
        "lastIndexed": s.times[-1] if s.times else None,
        "records": s.offsets[-1] - s.offsets[0] if s.times else 0,
        "bytes": s.bytes[-1] - s.bytes[0] if s.times else 0,
        "points": [list(p) for p in zip(s.times, s.offsets, s.bytes, strict=True)],
    }


@dataclass
class _Rates:
    """A partition's rates between consecutive index points: ``edges`` are the points' times
    (n + 1 of them), ``records`` and ``bytes`` the rate over each interval (n)."""

    name: str
    total: int  # records between the first and last points
    edges: list[dt.datetime]
    records: list[float]
    bytes: list[float]


def _rates(s: Series) -> _Rates | None:
    """The step function to draw, or None with fewer than two points a calendar holds."""
    points = [
        (when, o, b)
        for when, o, b in zip(map(_when, s.times), s.offsets, s.bytes, strict=True)
        if when is not None  # a time no calendar holds: not drawn
    ]
    if len(points) < 2:
        return None
    edges = [points[0][0]]
    records: list[float] = []
    sizes: list[float] = []
    for (t0, o0, b0), (t1, o1, b1) in itertools.pairwise(points):
        span = max((t1 - t0).total_seconds(), 0.001)  # equal (or, damaged, falling) times
        edges.append(max(t1, edges[-1]))
        records.append((o1 - o0) / span)
        sizes.append((b1 - b0) / span)
    return _Rates(s.name, points[-1][1] - points[0][1], edges, records, sizes)


def _time_format(span: dt.timedelta) -> str:
    """Tick labels that always name the month (by name: 12-01 reads as either order) and the
    day, and the time of day when the span is short enough for it to tell ticks apart; the
    year is in the row's title."""
    if span >= dt.timedelta(days=3):
        return "%b %d"
    if span >= dt.timedelta(minutes=30):
        return "%b %d %H:%M"
    return "%b %d %H:%M:%S"


def _plot(all_series: list[Series], png: str, limit: int = 16) -> tuple[int, int]:
    """One row per partition with two or more points (at most ``limit``, the ones with the
    most records), its records and bytes per unit of time over its own time span, in units
    that suit its rates; returns (rows drawn, partitions that could be)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drawable = [r for r in map(_rates, all_series) if r is not None]
    rows = sorted(sorted(drawable, key=lambda r: -r.total)[:limit], key=lambda r: r.name)
    fig, axes = plt.subplots(
        max(1, len(rows)), 2, figsize=(13, 1.2 + 2.3 * max(1, len(rows))), squeeze=False
    )
    for (left, right), rates in zip(axes, rows, strict=False):
        per, seconds = _time_unit(max(rates.records))
        size, scale = _size_unit(max(rates.bytes) * seconds)
        _draw(left, rates, [v * seconds for v in rates.records], f"records / {per}", "tab:blue")
        sizes = [v * seconds / scale for v in rates.bytes]
        _draw(right, rates, sizes, f"{size} / {per}", "tab:green")
        # the partition's name above its row, where a legend would cover the data
        left.set_title(rates.name, loc="left", fontsize="medium", fontweight="bold")
        span = f"{_iso(_ms(rates.edges[0]))} .. {_iso(_ms(rates.edges[-1]))} UTC"
        right.set_title(span, loc="right", fontsize="small")
    if not rows:
        axes[0][0].text(0.5, 0.5, "no partition has two time index entries", ha="center")
    fig.suptitle("kafkalog timeline: records and bytes over time, from the time and offset indexes")
    fig.supxlabel("time (UTC); each row spans its own partition's indexed times")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)
    return len(rows), len(drawable)


def _time_unit(rate: float) -> tuple[str, int]:
    """Per second, minute, hour or day: the first that makes a row's peak rate at least 1
    (a consumer-offsets partition's 2 commits in 12 days is 0.17 a day, not 1.9e-06 a
    second)."""
    for name, seconds in (("s", 1), ("min", 60), ("h", 3600)):
        if rate * seconds >= 1:
            return name, seconds
    return "day", 86400


def _size_unit(peak: float) -> tuple[str, int]:
    for name, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if peak >= scale:
            return name, scale
    return "bytes", 1


def _draw(ax: Any, rates: _Rates, values: list[float], unit: str, color: str) -> None:
    """One rate as a filled step over the partition's own span (a single interval is a
    visible band, not a zero-length line), month and day on every tick label."""
    import matplotlib.dates as mdates

    edges = [mdates.date2num(e) for e in rates.edges]  # type: ignore[no-untyped-call]
    ax.stairs(values, edges, fill=True, alpha=0.35, color=color)
    ax.stairs(values, edges, color=color)
    first, last = rates.edges[0], rates.edges[-1]
    margin = max((last - first) * 0.02, dt.timedelta(seconds=1))
    ax.set_xlim(first - margin, last + margin)
    ax.set_ylim(0, max(values) * 1.15 if max(values) > 0 else 1.0)
    ax.set_ylabel(unit)
    ax.ticklabel_format(axis="y", style="plain", useOffset=False)
    locator = mdates.AutoDateLocator(tz=dt.UTC, minticks=3)  # type: ignore[no-untyped-call]
    ax.xaxis.set_major_locator(locator)
    label = mdates.DateFormatter(_time_format(last - first), tz=dt.UTC)  # type: ignore[no-untyped-call]
    ax.xaxis.set_major_formatter(label)
    ax.tick_params(axis="x", labelsize="small")
    ax.grid(alpha=0.3)


def _ms(when: dt.datetime) -> int:
    return int(when.timestamp() * 1000)
