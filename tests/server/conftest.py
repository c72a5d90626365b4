"""A kafkalog broker on a free loopback port for each test, always stopped."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kafka_clients import config
from kafkalog.log import Log, TopicConfig
from kafkalog.log.cleaner import clean_log
from kafkalog.records import Record
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


@pytest.fixture(scope="session")
def compiled_cleaner(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The cleaner's numba kernels compiled (or loaded from numba's cache) in this process
    before a test times what a server's cleaner does: the first cleaning in a process whose
    cache is cold (a fresh clone, or kernels changed since) compiles them first, which took
    61 s on the loaded 2-core machine (2 s with the cache warm), longer than the tests' 30 s
    waits for a cleaning. A small compacted log cleaned once, through the same passes."""
    topic = TopicConfig(cleanup_policy="compact", segment_bytes=1024, file_delete_delay_ms=0)
    with Log(tmp_path_factory.mktemp("compiled-cleaner") / "t-0", topic) as log:
        for i in range(200):
            log.append_records([Record(-1, 1000, b"key-%d" % (i % 5), b"value %d" % i)])
        result = clean_log(log, lock=log.lock)
    assert result.size_after < result.size_before / 3, result  # it did clean
