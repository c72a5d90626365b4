"""The README's main command, run as a user runs it, on a small sample."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_job_seeks_one_hour_through_the_indexes(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "kafkalog",
            "job",
            "--records",
            "80000",
            "--data",
            str(tmp_path / "data"),
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    lines = result.stdout.splitlines()

    def row(label: str) -> tuple[int, int]:
        line = next(line for line in lines if line.strip().startswith(label))
        rows, read = line.split()[-3:-1]
        return int(rows.replace(",", "")), int(read.replace(",", ""))

    scan_rows, scan_bytes = row("full scan")
    pushed_rows, pushed_bytes = row("pushed where")
    seek_rows, seek_bytes = row("index seek")
    assert seek_rows == scan_rows == pushed_rows > 0
    # bytes actually read by the tasks: the full scan reads the whole topic, every byte of it
    topic_bytes = sum(f.stat().st_size for f in (tmp_path / "data").glob("clicks-*/*.log"))
    assert scan_bytes == topic_bytes
    assert seek_bytes * 5 < scan_bytes  # one hour of a day reads a small part of the topic
    assert seek_bytes <= pushed_bytes < scan_bytes  # a where's lower bound is sought too
    assert "same aggregate from all three: yes" in result.stdout
    assert "Spark reads through kafkalog's JVM source" in result.stdout  # which path ran
    takeaway = next(line for line in lines if line.startswith("takeaway: "))
    assert "x fewer bytes" in takeaway
    assert any(word in takeaway for word in ("x faster", "about as fast", "x slower"))
    assert list((tmp_path / "out").glob("*.parquet"))
    assert (tmp_path / "data" / "clicks-0" / "00000000000000000000.index").exists()


def test_the_takeaway_says_slower_when_it_was_slower() -> None:
    """A loaded run printed "took 24.21 s against 19.66 s for a full scan (0.8x faster)"."""
    from kafkalog.cli.job import speed_ratio

    assert speed_ratio(19.66, 24.21).startswith("1.2x slower")
    assert speed_ratio(24.0, 8.0) == "3.0x faster"
    assert speed_ratio(10.0, 10.2) == "about as fast"


def test_job_help_names_the_sample_its_size_and_the_flag_that_removes_it() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "kafkalog", "job", "--help"], capture_output=True, text=True
    )
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    assert "kafkalog-sample" in text and "430 MB" in text and "--remove-sample" in text
    assert "kafkalog-job-out" in text
