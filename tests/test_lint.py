"""ruff and mypy are part of the test suite: style and types fail the build like a bug."""

from __future__ import annotations

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
    result = _run("mypy", "src/kafkalog")
    assert result.returncode == 0, result.stdout + result.stderr
