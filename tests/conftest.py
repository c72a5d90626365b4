"""Shared test setup: the fixture tree beside the repository and a read-only guard for it."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "tests") not in sys.path:
    sys.path.insert(0, str(ROOT / "tests"))


@pytest.fixture(scope="session")
def s3_store() -> Iterator[Any]:
    """The fixture tree in an S3 bucket on loopback (see tests/s3store.py)."""
    from provenance import FIXTURES
    from s3store import serve

    yield from serve(FIXTURES)
