"""The README's main command, run as a user runs it, on a small sample."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: written by the test tools themselves (pytest, hypothesis, mypy, ruff), not by ``kafkalog
#: job``: other workers of the same run may create them meanwhile
TOOL_FILES = (".hypothesis/", ".pytest_cache/", ".mypy_cache/", ".ruff_cache/")


def _clone_state() -> list[str]:
    """Every file of the checkout git does not already track as it is, ignored ones included."""
    status = subprocess.run(
        ["git", "status", "--porcelain", "--ignored", "--untracked-files=all"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    # __pycache__: Python's bytecode, and numba's compiled kernels that the other workers of the
    # run compile meanwhile (the job's own go to the cache directory: checked by the test)
    return [
        line
        for line in status
        if "__pycache__/" not in line and not line[3:].startswith(TOOL_FILES)
    ]


def test_job_seeks_one_hour_through_the_indexes(tmp_path: Path) -> None:
    """Run from the clone's root, as README command 1 runs it: the sample and the Parquet go to
    the user's cache directory ($XDG_CACHE_HOME honoured) and the clone is left as it was.
    The JVM source's jar is there already, as after a first run (building it into an empty
    cache is tests/spark/test_jvm_setup.py's; javac here cost the suite seconds)."""
    from kafkalog.spark.jar import find_jar, jar_name

    cache = tmp_path / "cache"
    jar = cache / "kafkalog" / jar_name()
    jar.parent.mkdir(parents=True)
    shutil.copy2(find_jar(), jar)
    seeded = jar.stat().st_ino
    before = _clone_state()
    result = subprocess.run(
        [sys.executable, "-m", "kafkalog", "job", "--records", "80000"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        env={
            **{k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"},
            "XDG_CACHE_HOME": str(cache),
        },
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
    sample = cache / "kafkalog" / "sample"
    topic_bytes = sum(f.stat().st_size for f in sample.glob("clicks-*/*.log"))
    assert scan_bytes == topic_bytes
    assert seek_bytes * 5 < scan_bytes  # one hour of a day reads a small part of the topic
    assert seek_bytes <= pushed_bytes < scan_bytes  # a where's lower bound is sought too
    assert "same aggregate from all three: yes" in result.stdout
    assert "Spark reads through kafkalog's JVM source" in result.stdout  # which path ran
    takeaway = next(line for line in lines if line.startswith("takeaway: "))
    assert "x fewer bytes" in takeaway
    assert any(word in takeaway for word in ("x faster", "about as fast", "x slower"))
    assert list((cache / "kafkalog" / "job-out").glob("*.parquet"))
    assert (sample / "clicks-0" / "00000000000000000000.index").exists()
    # where the sample is and how to remove it, and nothing new in the clone
    assert f"rm -r {sample}" in result.stdout
    assert _clone_state() == before
    assert list((cache / "kafkalog" / "numba").rglob("*.nbi"))  # numba's kernels: not the clone
    assert jar.stat().st_ino == seeded  # found in the XDG cache, not built again


def test_the_cache_directory_honours_xdg_cache_home(monkeypatch: pytest.MonkeyPatch) -> None:
    from kafkalog.cli.job import cache_dir

    monkeypatch.setenv("XDG_CACHE_HOME", "/somewhere/cache")
    assert cache_dir() == "/somewhere/cache/kafkalog"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # ignored, as the XDG rule says
    monkeypatch.setenv("HOME", "/home/someone")
    assert cache_dir() == "/home/someone/.cache/kafkalog"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_dir() == "/home/someone/.cache/kafkalog"


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
    assert "~/.cache/kafkalog" in text and "XDG_CACHE_HOME" in text
    assert "430 MB" in text and "--remove-sample" in text and "job-out" in text
