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
    seek = next(line for line in lines if line.strip().startswith("index seek"))
    scan = next(line for line in lines if line.strip().startswith("full scan"))
    seek_rows, seek_bytes = (int(x.replace(",", "")) for x in seek.split()[2:4])
    scan_rows, scan_bytes = (int(x.replace(",", "")) for x in scan.split()[2:4])
    assert seek_rows == scan_rows > 0
    assert seek_bytes * 5 < scan_bytes  # one hour of a day reads a small part of the topic
    assert "same aggregate from both: yes" in result.stdout
    assert list((tmp_path / "out").glob("*.parquet"))
    assert (tmp_path / "data" / "clicks-0" / "00000000000000000000.index").exists()
