"""Running ``kafkalog`` as a user does, and proving it left a tree alone: shared by the CLI
tests."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path


def kafkalog(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kafkalog", *args], capture_output=True, text=True, timeout=timeout
    )


def tree_snapshot(root: Path) -> dict[str, tuple[int, str]]:
    """Every file under ``root`` with its mtime and content digest."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            out[str(path)] = (
                path.stat().st_mtime_ns,
                hashlib.sha256(path.read_bytes()).hexdigest(),
            )
    return out
