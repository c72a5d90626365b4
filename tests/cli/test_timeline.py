"""``kafkalog timeline`` on a log with a known arrival rate and on a real broker's data dir."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clirun import kafkalog_here, tree_snapshot
from provenance import FIXTURES

BROKER_2020 = FIXTURES / "volodymyrzee-kafka-2020"


def test_timeline_of_one_record_per_second(tmp_path: Path) -> None:
    src = tmp_path / "ticks.jsonl"
    start = 1767225600000  # 2026-01-01T00:00:00Z
    src.write_text("".join(json.dumps({"ts": start + i * 1000, "i": i}) + "\n" for i in range(600)))
    data = tmp_path / "data"
    ingest = kafkalog_here(
        "ingest",
        str(src),
        "--data",
        str(data),
        "--topic",
        "ticks",
        "--timestamp-field",
        "ts",
        "--config",
        "index.interval.bytes=256",
        "--config",
        "segment.bytes=8000",
    )
    assert ingest.returncode == 0, ingest.stderr
    png = tmp_path / "t.png"
    before = tree_snapshot(data)
    result = kafkalog_here("timeline", str(data), "--png", str(png))
    assert result.returncode == 0, result.stderr
    assert tree_snapshot(data) == before  # reading the indexes changes nothing
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    row = next(line for line in result.stdout.splitlines() if line.startswith("ticks-0"))
    first, last, records = row.split()[1:3], row.split()[3:5], int(row.split()[5].replace(",", ""))
    assert first[0] == "2026-01-01" and last[0] == "2026-01-01"
    # one record per second: the records between first and last entries match the time span
    h1, m1, s1 = map(int, first[1].split(":"))
    h2, m2, s2 = map(int, last[1].split(":"))
    span = (h2 * 3600 + m2 * 60 + s2) - (h1 * 3600 + m1 * 60 + s1)
    assert records == span and records > 300


def test_timeline_of_a_real_broker_data_dir(tmp_path: Path) -> None:
    before = tree_snapshot(BROKER_2020)
    png = tmp_path / "broker.png"
    result = kafkalog_here("timeline", str(BROKER_2020), "--png", str(png))
    assert result.returncode == 0, result.stderr
    assert tree_snapshot(BROKER_2020) == before
    assert "(2 partition(s) drawn)" in result.stdout
    row = next(
        line for line in result.stdout.splitlines() if line.startswith("__consumer_offsets-12 ")
    )
    assert row.split()[1:5] == ["2020-04-22", "18:41:23", "2020-04-22", "18:54:01"]
    assert "no time index entries" in result.stdout  # __consumer_offsets-0 has none
    assert png.stat().st_size > 10_000


def test_timeline_json_is_the_summary_and_the_index_points(tmp_path: Path) -> None:
    import subprocess
    import sys

    from kafkalog.index import OffsetIndex, TimeIndex

    result = subprocess.run(  # run where a default plot would land: none is drawn with --json
        [sys.executable, "-m", "kafkalog", "timeline", str(BROKER_2020), "--json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]  # nothing but JSON
    assert list(tmp_path.iterdir()) == []
    by_name = {r["partition"]: r for r in rows}
    assert all(r["type"] == "partition" for r in rows)
    text = kafkalog_here("timeline", str(BROKER_2020), "--png", str(tmp_path / "p.png")).stdout
    for name, row in by_name.items():
        line = next(x for x in text.splitlines() if x.startswith(name + " "))
        if row["points"]:
            records, size = (int(x.replace(",", "")) for x in line.split()[5:7])
            assert (row["records"], row["bytes"]) == (records, size)
        else:
            assert "no time index entries" in line and row["firstIndexed"] is None
    # the points are the time index's entries, each with its offset index position
    row = by_name["__consumer_offsets-12"]
    base = 0
    stem = BROKER_2020 / "__consumer_offsets-12" / f"{base:020d}"
    with (
        TimeIndex(str(stem) + ".timeindex", base, writable=False) as tindex,
        OffsetIndex(str(stem) + ".index", base, writable=False) as oindex,
    ):
        expected = [[t, o, oindex.lookup(o).position] for t, o in tindex]
    assert row["points"][: len(expected)] == expected and expected
    assert row["firstIndexed"] == expected[0][0]


RONEM = FIXTURES / "real-kraft-ronem123"


def test_no_plot_file_unless_one_is_named(tmp_path: Path) -> None:
    """Without --png the command wrote kafkalog-timeline.png into the current directory (one
    was committed at the root of this repository): it now writes only a file it is given."""
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "kafkalog", "timeline", str(RONEM)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert list(tmp_path.iterdir()) == []
    assert result.stdout.splitlines()[-1] == "no plot drawn: --png FILE draws one"


def _drawn(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *options: str
) -> tuple[str, list[list[object]]]:
    """Run timeline in-process on the ronem123 fixture; its stdout and the drawn figure's axes
    (one list per row), caught as the figure is saved."""
    import io

    from matplotlib.figure import Figure

    from kafkalog.cli.main import build_parser

    figures: list[Figure] = []
    save = Figure.savefig

    def keep(fig: Figure, *args: object, **kwargs: object) -> None:
        figures.append(fig)
        save(fig, *args, **kwargs)  # drawn: tick labels are filled in

    monkeypatch.setattr(Figure, "savefig", keep)
    png = tmp_path / "t.png"
    args = build_parser("timeline").parse_args(
        ["timeline", str(RONEM), "--png", str(png), *options]
    )
    out = io.StringIO()
    assert args.run(args, out=out) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    [fig] = figures
    axes = fig.get_axes()
    return out.getvalue(), [axes[i : i + 2] for i in range(0, len(axes), 2)]


def test_every_partition_drawn_is_visible_over_its_own_span(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Issue 23, on a KRaft broker's data directory: "3 partition(s) drawn" but two were
    invisible (one interval each, a step of no length, at 2 records in 12 days next to 8 a
    second), the x axis spanned a week for 2.5 hours of data, the legend covered the data and
    the tick labels had no month. Now: a row per partition, its values filling its own axes,
    its own time span, its name as the row's title (no legend), the month on every tick."""
    import datetime as dt

    import matplotlib.dates as mdates

    text, rows = _drawn(monkeypatch, tmp_path)
    assert text.splitlines()[-1].endswith("(3 partition(s) drawn)")
    names = [row[0].get_title(loc="left") for row in rows]
    assert names == ["__cluster_metadata-0", "__consumer_offsets-31", "__consumer_offsets-44"]
    series = {r["partition"]: r for r in map(json.loads, _json_rows())}
    for name, (records, size) in zip(names, rows, strict=True):
        first, last = series[name]["firstIndexed"], series[name]["lastIndexed"]
        for ax in (records, size):
            assert ax.get_legend() is None
            heights = [max(p.get_path().vertices[:, 1]) for p in ax.patches]
            top = ax.get_ylim()[1]
            assert heights and max(heights) > 0.8 * top, (name, heights, top)  # visible
            low, high = (mdates.num2date(x).timestamp() * 1000 for x in ax.get_xlim())
            span = last - first
            assert low <= first and high >= last  # the whole span is shown...
            assert high - low <= span * 1.1  # ...and not much more: 2.5 hours stay 2.5 hours
            labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
            assert len(labels) >= 2
            month = dt.datetime.fromtimestamp(first / 1000, dt.UTC).strftime("%b")
            assert all(label.startswith(month) for label in labels), labels
    units = [row[0].get_ylabel() for row in rows]
    assert units == ["records / s", "records / day", "records / day"]


def test_at_most_max_partitions_rows_and_the_rest_counted(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    text, rows = _drawn(monkeypatch, tmp_path, "--max-partitions", "2")
    assert text.splitlines()[-1].endswith(
        "(2 partition(s) drawn; 1 more not drawn (--max-partitions))"
    )
    assert [row[0].get_title(loc="left") for row in rows] == [
        "__cluster_metadata-0",  # the busiest first
        "__consumer_offsets-31",
    ]


def _json_rows() -> list[str]:
    result = kafkalog_here("timeline", str(RONEM), "--json")
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()
