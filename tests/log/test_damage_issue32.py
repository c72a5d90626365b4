"""Issue 32's cases outside the damage matrix (tests/log/test_damage.py): damage below the log
start, the log start a standalone log keeps, a torn tail under a clean-shutdown marker, and
the real Kafka 0.9.0.1 gzip partition verify once raised false alarms on."""

from __future__ import annotations

import contextlib
import io
import shutil
from pathlib import Path
from typing import Any

import pytest

from damage_kinds import absurd_tail, cut_last, flip, segments, written, zero_tail
from kafkalog.cli.main import main
from kafkalog.errors import DamagedLogError
from kafkalog.log import Log, TopicConfig
from kafkalog.records import Record
from provenance import FIXTURES


def _gzip09() -> Path:
    return FIXTURES / "kafka-0.9.0.1-gzip-kafka-python" / "kp-gzip-0"


def _run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def test_damage_wholly_below_the_log_start_does_not_stop_a_writable_open(
    tmp_path: Path,
) -> None:
    """Only damage at or above the log start can cost a record: Kafka opens such a log."""
    d = written(tmp_path)
    with Log(d, TopicConfig(segment_bytes=4096)) as log:
        log.increment_log_start_offset(120)  # segments 0 and 50 wholly below it
    (d / ".kafkalog-clean-shutdown").unlink()  # as after a crash: recovery runs
    flip(75, "first")(d)  # a record byte of segment 0: its CRC fails
    damaged = segments(d)[0].read_bytes()
    with Log(d, TopicConfig(segment_bytes=4096)) as log:
        assert log.log_start_offset == 120
        assert [r.offset for r in log.records()] == list(range(120, 300))
    assert segments(d)[0].read_bytes() == damaged  # left as it is, not cut
    # at or above the log start the same damage still stops it
    (d / ".kafkalog-clean-shutdown").unlink()
    flip(75)(d)  # segment 150
    with pytest.raises(DamagedLogError, match="kafkalog repair"):
        Log(d, TopicConfig(segment_bytes=4096))


@pytest.mark.parametrize("parent", ["none", "data directory"])
def test_a_standalone_log_keeps_its_log_start_offset(tmp_path: Path, parent: str) -> None:
    """DeleteRecords on a Log opened on its own: reopened, the 300 deleted records stayed
    deleted for every reader (they all came back)."""
    root = tmp_path / "data"
    root.mkdir()
    if parent == "data directory":
        (root / "recovery-point-offset-checkpoint").write_text("0\n0\n")
    d = root / "t-0"
    with Log(d, TopicConfig(segment_bytes=4096)) as log:
        for i in range(600):
            log.append_records([Record.of(b"v%d" % i)])
        log.increment_log_start_offset(300)
    if parent == "data directory":
        kept = (root / "log-start-offset-checkpoint").read_text().split("\n")
        assert kept[:3] == ["0", "1", "t 0 300"]
        assert not (d / ".kafkalog-log-start-offset").exists()
    else:
        assert (d / ".kafkalog-log-start-offset").read_text() == "300\n"
    for writable in (False, True):
        with Log(d, writable=writable) as log:
            assert log.log_start_offset == 300
            assert [r.offset for r in log.records()] == list(range(300, 600))
    code, out, _ = _run("cat", str(d))
    assert code == 0 and len(out.splitlines()) == 300


@pytest.mark.parametrize("tail", [zero_tail, cut_last, absurd_tail])
def test_a_torn_tail_under_a_clean_shutdown_marker_opens_and_is_cut(
    tmp_path: Path, tail: object
) -> None:
    """A zero tail (or any torn tail) with the clean-shutdown marker present: the partition
    opens, the tail is cut (a copy kept unless it is zeros), and the next append is
    readable: it never lands after bytes no reader can step over."""
    d = written(tmp_path)
    assert (d / ".kafkalog-clean-shutdown").exists()
    with Log(d, writable=False) as log:
        before = [r.offset for r in log.records()]
    tail(d)  # type: ignore[operator]
    with Log(d, TopicConfig(segment_bytes=4096)) as log:
        end = log.log_end_offset
        log.append_records([Record.of(b"after")])
    with Log(d, writable=False) as log:
        got = [r.offset for r in log.records()]
    assert got == [*before[: len(got) - 1], end]
    assert len(got) - 1 >= len(before) - 1


def test_verify_and_rebuild_index_on_a_real_09_gzip_partition(tmp_path: Path) -> None:
    """A Kafka 0.9.0.1 broker's gzip partition from kafka-python: verify said 17 PROBLEMs
    (a wrapper's own offset is its last; a 0.9 index keys an append's first offset) and
    rebuild-index rewrote its healthy indexes."""
    source = _gzip09()
    d = tmp_path / source.name
    shutil.copytree(source, d)
    before = {p.name: p.read_bytes() for p in d.iterdir()}
    code, out, _ = _run("verify", str(d))
    assert code == 0 and "PROBLEM" not in out and "warning" not in out, out
    assert "200 batch(es), 2000 record(s): OK" in out
    code, out, _ = _run("rebuild-index", str(d))
    assert code == 0, out
    kept = [line for line in out.splitlines() if line.startswith("keep ")]
    assert [line.split()[1].rstrip(":") for line in kept] == [
        "00000000000000000000.index",
        "00000000000000001620.index",
    ], out
    assert all("healthy" in line and "index.interval.bytes" in line for line in kept)
    after = {p.name: p.read_bytes() for p in d.iterdir() if p.name in before}
    assert after == before  # the broker's indexes left alone
    with Log(d, writable=False) as log:
        assert [r.offset for r in log.records()] == list(range(2000))


@pytest.mark.parametrize("tail", [zero_tail, absurd_tail])
def test_a_torn_tail_in_a_data_directory_with_a_log_start_checkpoint_is_cut(
    tmp_path: Path, tail: Any
) -> None:
    """A data directory (serve's) keeps every partition's log start in its checkpoint; the
    open compares it with the log end before the torn tail is found: a zero tail under the
    clean-shutdown marker had taken the partition offline (found by the serve-written source
    of the damage matrix, tests/server/test_serve_damage_matrix.py)."""
    from kafkalog.log import LogDir

    data = tmp_path / "data"
    with LogDir(data, writable=True) as ld:
        log = ld.log("t", 0, create=True)
        for i in range(50):
            log.append_records([Record.of(b"v%d" % i)])
    assert "t 0 0" in (data / "log-start-offset-checkpoint").read_text()
    tail(data / "t-0")
    with LogDir(data, writable=True) as ld:
        assert ld.log("t", 0).log_end_offset == 50
