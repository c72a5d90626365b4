"""``kafkalog timeline`` on a log with a known arrival rate and on a real broker's data dir."""

from __future__ import annotations

import json
from pathlib import Path

from clirun import kafkalog, tree_snapshot
from provenance import FIXTURES

BROKER_2020 = FIXTURES / "volodymyrzee-kafka-2020"


def test_timeline_of_one_record_per_second(tmp_path: Path) -> None:
    src = tmp_path / "ticks.jsonl"
    start = 1767225600000  # 2026-01-01T00:00:00Z
    src.write_text("".join(json.dumps({"ts": start + i * 1000, "i": i}) + "\n" for i in range(600)))
    data = tmp_path / "data"
    ingest = kafkalog(
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
    result = kafkalog("timeline", str(data), "--png", str(png))
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
    result = kafkalog("timeline", str(BROKER_2020), "--png", str(png))
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
    text = kafkalog("timeline", str(BROKER_2020), "--png", str(tmp_path / "p.png")).stdout
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
