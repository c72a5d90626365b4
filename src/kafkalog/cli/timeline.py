"""``kafkalog timeline``: records and bytes over time per partition, drawn from the time and
offset indexes alone (the logs are not read), as a PNG and a terminal summary.

A time-index entry (T, O) says the largest timestamp up to offset O is T; the offset index puts
O at a byte position. Consecutive entries therefore give how many records and bytes arrived
between two times, at the index's granularity (one point per ``index.interval.bytes``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from dataclasses import dataclass, field
from typing import IO, Any

from kafkalog import files


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
        help="where to draw the plot (default kafkalog-timeline.png; with --json, only if given)",
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
    if args.json:
        for s in all_series:
            print(json.dumps(_json(s)), file=out)
        if args.png is not None:
            _plot(all_series, args.png)
        return 0
    png = args.png or "kafkalog-timeline.png"
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
    drawn = _plot(all_series, png)
    print(
        "records and bytes are counted between the first and last index entries, at the"
        " indexes' granularity (index.interval.bytes); logs are not read",
        file=out,
    )
    print(f"plot: {os.path.abspath(png)} ({drawn} partition(s) drawn)", file=out)
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


def _plot(all_series: list[Series], png: str) -> int:
    """Records and bytes per second of every partition with two or more points; how many."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drawn = [s for s in all_series if len(s.times) >= 2]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 7), sharex=True)
    handles, labels = [], []
    for s in drawn:
        spans = [max(1, b - a) / 1000 for a, b in zip(s.times, s.times[1:], strict=False)]
        rates = [
            (_when(t), (o1 - o0) / span, (b1 - b0) / span)
            for t, o0, o1, b0, b1, span in zip(
                s.times[1:], s.offsets, s.offsets[1:], s.bytes, s.bytes[1:], spans, strict=False
            )
        ]
        kept = [r for r in rates if r[0] is not None]  # a time no calendar holds: not drawn
        when = [r[0] for r in kept]
        rec_rate = [r[1] for r in kept]
        byte_rate = [r[2] for r in kept]
        handles += top.step(when, rec_rate, where="pre")
        bottom.step(when, byte_rate, where="pre")
        labels.append(s.name)
    top.set_ylabel("records / s")
    bottom.set_ylabel("bytes / s")
    bottom.set_xlabel("time (UTC), from the time and offset indexes")
    top.set_title("kafkalog timeline")
    if drawn:  # explicit labels: matplotlib hides labels starting "_" (__consumer_offsets)
        top.legend(handles, labels, fontsize="small", loc="upper right")
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)
    return len(drawn)
