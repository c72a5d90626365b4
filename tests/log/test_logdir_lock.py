"""A writable data directory has one writer at a time, as a broker has its ``.lock``: the root
checkpoints and the clean-shutdown marker are shared by every partition, so a second writer
would rewrite them under the first."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from clirun import kafkalog
from kafkalog.log import LogDir
from kafkalog.log.lock import LockedError


def test_a_second_writer_is_refused_and_a_reader_is_not(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with LogDir(data, writable=True) as first:
        first.log("t", 0, create=True)
        with pytest.raises(LockedError, match="another writer has the data directory open"):
            LogDir(data, writable=True)
        with LogDir(data) as reader:  # reading needs no lock
            assert reader.partitions() == [("t", 0)]
        assert not (data / ".kafka_cleanshutdown").exists()  # nobody closed it meanwhile
    with LogDir(data, writable=True) as again:  # released at close
        assert again.log("t", 0).log_end_offset == 0


def test_a_writer_waits_for_the_other_to_close(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = LogDir(data, writable=True)
    timer = threading.Timer(0.3, first.close)
    timer.start()
    t = time.monotonic()
    with LogDir(data, writable=True, wait=10):
        waited = time.monotonic() - t
    timer.join()
    assert 0.2 < waited < 5


def test_another_process_holding_it_is_named(tmp_path: Path) -> None:
    data = tmp_path / "data"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from kafkalog.log import LogDir\n"
            f"d = LogDir({str(data)!r}, writable=True); print('held', flush=True); "
            "sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(LockedError, match=f"pid {holder.pid}"):
            LogDir(data, writable=True)
        src = tmp_path / "x.jsonl"
        src.write_text('{"a": 1}\n')
        result = kafkalog("ingest", str(src), "--data", str(data), "--topic", "t")
        assert result.returncode == 2 and "Traceback" not in result.stderr
        assert "another writer has the data directory open" in result.stderr
        assert not (data / "t-0").exists()
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(30)
