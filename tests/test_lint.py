"""ruff and mypy are part of the test suite: style and types fail the build like a bug."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *cmd], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def test_ruff_check() -> None:
    # no cache: a cached verdict survives a module moving between first- and third-party (a
    # fresh clone, as CI has, would disagree)
    result = _run("ruff", "check", "--no-cache", "src", "tests", "bench")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format() -> None:
    result = _run("ruff", "format", "--check", "--no-cache", "src", "tests", "bench")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict() -> None:
    # A developer's checkout has the .mypy_cache that running mypy before a commit leaves:
    # mypy's incremental check uses it, as it always did. A fresh clone (CI) has none, and the
    # cache this one full check would write is never read again: writing it cost 1 s of CPU
    # and 3-6 s of wall time (sqlite) on the shared 2-core box; /dev/null turns it off.
    cache = [] if (ROOT / ".mypy_cache").is_dir() else ["--cache-dir", os.devnull]
    result = _run("mypy", *cache, "src/kafkalog")
    assert result.returncode == 0, result.stdout + result.stderr
