"""The log's last batch (issue 32 §1): no batch or segment after it shows its base offset
(outside the CRC) in line, so it is judged by what the directory proves of where the log ends
(kafkalog.log.end_evidence): a clean close's record while no append came after it, the
2**31 offsets a segment can span, the offset index entry at its position. Damage proven that
way is an error in every reader, blamed on that batch; evidence that does not hold (an append
after the close, a live broker's lagging checkpoints) raises no false alarm."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import struct
from pathlib import Path

import pytest

from damage_kinds import entries, flip_last_base, holding, written
from kafkalog.cli.main import main
from kafkalog.errors import DamagedLogError
from kafkalog.log import Log, LogDir
from kafkalog.log.damage import SkippedBytes
from kafkalog.log.end_evidence import closed_log_end
from kafkalog.log.layout import parse_partition_dir
from kafkalog.log.tail import TailReader
from provenance import FIXTURES

DATA_DIRS = sorted(p.parent for p in FIXTURES.glob("*/.kafka_cleanshutdown"))


def _run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as e:  # argparse
            code = int(e.code or 0)
    return code, out.getvalue(), err.getvalue()


def _files(d: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(d)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(d.rglob("*"))
        if p.is_file()
    }


def _records(d: Path) -> dict[int, bytes | None]:
    with Log(d, writable=False) as log:
        return {r.offset: r.value for r in log.records()}


def _last_offset_before(seg: Path, position: int) -> int:
    """The offset a lookup asks for: one the damaged batch really held (the one after the
    batch before it), which a wrong answer would give under another offset."""
    from kafkalog.records import LogReader

    last = [e.last_offset for e in LogReader(seg.read_bytes()) if e.position < position]
    return (last[-1] if last else int(seg.name[:20]) - 1) + 1


def _assert_every_reader_blames_the_last_batch(d: Path, data_dir: Path) -> None:
    seg = holding(d)[-1]
    position, _ = entries(seg)[-1]
    before = _files(data_dir)
    with Log(d, writable=False) as log:
        with pytest.raises(DamagedLogError) as raised:
            list(log.records())
        assert raised.value.path == str(seg) and raised.value.position == position
        said: list[SkippedBytes] = []
        got = [r.offset for r in log.records(on_damage=said.append)]
        assert got == sorted(got) and got and got[-1] < log.log_end_offset + 1
        assert [s.start for s in said] == [position], said
        with pytest.raises(DamagedLogError):
            log.read_arrow()  # the columnar read
    with pytest.raises(DamagedLogError):
        tail = TailReader(d)
        while tail.poll(max_records=10_000):
            pass
    runs = {
        "verify": _run("verify", str(d)),
        "cat": _run("cat", str(d)),
        "cat --skip-damaged": _run("cat", str(d), "--skip-damaged"),
        "lookup": _run("lookup", str(d), "--offset", str(_last_offset_before(seg, position))),
        "rebuild-index --dry-run": _run("rebuild-index", "--dry-run", str(d)),
        "repair --dry-run": _run("repair", "--dry-run", "--json", str(d)),
    }
    code, out, _ = runs["verify"]
    assert code == 1 and "PROBLEM" in out and str(position) in out, out
    code, _, err = runs["cat"]
    assert code == 2 and "kafkalog repair" in err, err
    code, _, err = runs["cat --skip-damaged"]
    assert code == 1 and "skipped damaged bytes" in err, err
    assert runs["lookup"][0] == 2, runs["lookup"]
    assert runs["rebuild-index --dry-run"][0] != 0, runs["rebuild-index --dry-run"]
    planned = json.loads(runs["repair --dry-run"][1].splitlines()[0])
    assert planned["segments"], planned  # repair would move it aside
    assert _files(data_dir) == before, "a reader changed a file"
    with pytest.raises(DamagedLogError) as raised:
        Log(d).close()  # a writable open (recovery) refuses, naming the batch, cutting nothing
    assert raised.value.position == position
    after = _files(data_dir)
    assert {k: v[0] for k, v in after.items() if not k.endswith(".lock")} == {
        k: v[0] for k, v in before.items() if not k.endswith(".lock")
    }


@pytest.mark.parametrize("jump", ["high", "low"])
def test_a_cleanly_closed_standalone_log_proves_its_end(tmp_path: Path, jump: str) -> None:
    d = written(tmp_path)
    assert closed_log_end(str(d), str(holding(d)[-1])) is not None
    flip_last_base(jump)(d)
    _assert_every_reader_blames_the_last_batch(d, d)


@pytest.mark.parametrize("jump", ["high", "low"])
@pytest.mark.parametrize("data_dir", DATA_DIRS, ids=lambda p: p.name)
def test_a_cleanly_shut_down_data_directory_proves_its_end(
    tmp_path: Path, data_dir: Path, jump: str
) -> None:
    """A Kafka broker's data directory, copied whole (mtimes kept): the marker with the
    recovery-point checkpoint (or the snapshot a close takes at the log end) proves it."""
    copy = _copy_as_shut_down(data_dir, tmp_path)
    # a partition holding several batches, with a recovery point or snapshot recorded
    candidates = [
        p
        for p in sorted(copy.iterdir())
        if p.is_dir()
        and not p.name.startswith("__cluster_metadata")
        and holding(p)
        and holding(p)[-1] == sorted(p.glob("*.log"))[-1]
        and closed_log_end(str(p), str(sorted(p.glob("*.log"))[-1])) is not None
    ]
    if not candidates:
        pytest.fail(f"{data_dir}: no partition with a proven end")
    d = candidates[0]
    flip_last_base(jump)(d)
    _assert_every_reader_blames_the_last_batch(d, copy)
    # a writable data directory (what `kafkalog serve` opens) removes the marker first, and
    # still judges the logs it loads by the close the marker recorded
    topic, partition = parse_partition_dir(d.name)
    seg = holding(d)[-1]
    data = seg.read_bytes()
    with LogDir(copy, writable=True) as data_dir_open:
        assert not (copy / ".kafka_cleanshutdown").exists()
        with pytest.raises(DamagedLogError) as raised:
            data_dir_open.log(topic, partition)
        assert raised.value.position == entries(seg)[-1][0]
    assert seg.read_bytes() == data


@pytest.mark.parametrize("data_dir", DATA_DIRS, ids=lambda p: p.name)
def test_no_false_alarm_on_any_cleanly_shut_down_fixture(tmp_path: Path, data_dir: Path) -> None:
    """With every piece of evidence in place, every partition reads whole."""
    copy = _copy_as_shut_down(data_dir, tmp_path)
    proven = 0
    for p in sorted(copy.iterdir()):
        logs = sorted(p.glob("*.log"))
        if p.is_dir() and logs:
            proven += closed_log_end(str(p), str(logs[-1])) is not None
            with Log(p, writable=False) as log:
                assert log.damage_at_end is None, p
                assert sum(1 for _ in log.batches(on_damage=pytest.fail)) >= 0
    assert proven, "no partition's end proven: the test would prove nothing"


def _copy_as_shut_down(data_dir: Path, tmp_path: Path) -> Path:
    """A copy of ``data_dir`` with its marker newer than every file, as a broker's shutdown
    leaves it (written last); a git checkout gives the files mtimes in any order."""
    copy = tmp_path / data_dir.name
    shutil.copytree(data_dir, copy)
    newest = max(p.stat().st_mtime_ns for p in copy.rglob("*") if p.is_file())
    marker = copy / ".kafka_cleanshutdown"
    os.utime(marker, ns=(newest + 10**9, newest + 10**9))
    return copy


def _append_next_batch(seg: Path, next_offset: int) -> None:
    """A copy of the segment's last batch at ``next_offset`` appended (valid: the base
    offset is outside the CRC), as an append after the close would add it."""
    position, size = entries(seg)[-1]
    batch = bytearray(seg.read_bytes()[position : position + size])
    struct.pack_into(">q", batch, 0, next_offset)
    with open(seg, "ab") as f:
        f.write(bytes(batch))


def test_an_append_after_a_clean_close_voids_its_evidence(tmp_path: Path) -> None:
    """A broker started again removes the marker; but a reader may meet a marker older than
    an append (another writer, a copy): the marker proves nothing past its own mtime."""
    copy = _copy_as_shut_down(FIXTURES / "kafka-4.0-snapshot-javacode", tmp_path)
    d = copy / "v2-none-0"
    end = max(_records(d)) + 1
    seg = holding(d)[-1]
    _append_next_batch(seg, end)
    marker = (copy / ".kafka_cleanshutdown").stat().st_mtime_ns
    os.utime(seg, ns=(marker + 10**9, marker + 10**9))
    got = _records(d)
    assert max(got) > end - 1 and closed_log_end(str(d), str(seg)) is None
    # the same for a standalone log's own marker
    w = written(tmp_path / "w")
    seg = holding(w)[-1]
    _append_next_batch(seg, 300)
    own = (w / ".kafkalog-clean-shutdown").stat().st_mtime_ns
    os.utime(seg, ns=(own + 10**9, own + 10**9))
    assert max(_records(w)) == 300


def test_a_jump_past_a_segment_s_span_needs_no_other_evidence(tmp_path: Path) -> None:
    d = written(tmp_path)
    for extra in d.glob(".kafkalog*"):
        extra.unlink()
    assert closed_log_end(str(d), str(holding(d)[-1])) is None
    flip_last_base("2**32")(d)
    _assert_every_reader_blames_the_last_batch(d, d)


def test_no_false_alarm_on_any_read_shape(tmp_path: Path) -> None:
    """Every shape real writers produce (tests/read_shapes.py: several batches per append,
    v0/v1, every index interval, compaction's gaps, transactions, a moved log start), closed
    cleanly and also extended by a second writer: the proven end holds and nothing is damage."""
    from read_shapes import SHAPES, extend_shape, truth, write_shape

    proven = 0
    for i, name in enumerate(sorted(SHAPES)):
        shape = write_shape(tmp_path / f"s{i}", name, seed=i)
        with contextlib.suppress(ValueError):  # a pure legacy shape is not extended
            extend_shape(shape, 7, seed=i + 1)
        d = shape.data_dir / f"{shape.topic}-{shape.partition}"
        logs = sorted(d.glob("*.log"))
        proven += closed_log_end(str(d), str(logs[-1])) is not None
        expected = [r.offset for r in truth(d).records]
        with Log(d, writable=False) as log:
            assert log.damage_at_end is None, name
            got = [r.offset for r in log.records(include_control=True)]
        assert got == expected, name
        _, out, _ = _run("verify", str(d))
        assert "its base offset, outside the batch CRC, is wrong" not in out, (name, out)
    assert proven == len(SHAPES), f"only {proven} of {len(SHAPES)} shapes had an end proven"
