"""A kafkalog broker on a free loopback port for each test, always stopped."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kafka_clients import config
from kafkalog.server import ServerThread


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    path = tmp_path / "data"
    path.mkdir()
    return path


@pytest.fixture
def server(data_dir: Path) -> Iterator[ServerThread]:
    with ServerThread(str(data_dir), config()) as running:
        yield running
