"""``kafkalog repair``: damage moved into a quarantine folder, every readable batch kept,
nothing deleted; a dry run changes nothing; a SIGKILL at any moment leaves the log as it was
or repaired, and a second run finishes the job (issue 23)."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clirun import kafkalog_here, tree_snapshot
from kafkalog.errors import DamagedLogError
from kafkalog.log import Log, TopicConfig
from kafkalog.log.repair import repair
from kafkalog.records import LogReader, Record


def _written(root: Path, n: int = 300) -> Path:
    d = root / "orders-0"
    with Log(d, TopicConfig(segment_bytes=4096)) as log:
        for i in range(n):
            log.append_records([Record.of(b"value %05d" % i, key=b"k%d" % (i % 5))])
    return d


def _offsets(d: Path) -> list[int]:
    with Log(d, writable=False) as log:
        return [r.offset for r in log.records()]


def _damage(d: Path, segment: int, entry: int, at: int, how: str) -> tuple[Path, set[int]]:
    """Damage byte ``at`` of the ``entry``-th batch of the ``segment``-th segment; returns the
    file and the offsets of the batches the damage touches (the only ones a repair may
    lose)."""
    seg = sorted(d.glob("*.log"))[segment]
    data = bytearray(seg.read_bytes())
    entries = list(LogReader(bytes(data)))
    hit = entries[entry]
    start = hit.position + at
    touched = {r.offset for r in hit.records()}
    if how == "flip":
        data[start] ^= 0xFF
    elif how == "hole":
        end = start + 60
        touched |= {
            r.offset
            for e in entries
            if e.position < end and e.position + e.size_in_bytes > start
            for r in e.records()
        }
        del data[start:end]
    seg.write_bytes(bytes(data))
    return seg, touched


@pytest.mark.parametrize(
    ("segment", "entry", "at", "how"),
    [
        (1, 5, 30, "flip"),  # a timestamp (under the CRC)
        (0, 1, 11, "flip"),  # a length
        (0, 1, 5, "flip"),  # a base offset (outside the CRC)
        (0, 0, 7, "flip"),  # the first batch's base offset
        (2, 10, 20, "hole"),
        (-1, 3, 70, "flip"),  # a record in the last segment
    ],
)
def test_repair_keeps_every_readable_batch(
    tmp_path: Path, segment: int, entry: int, at: int, how: str
) -> None:
    d = _written(tmp_path)
    pristine = _offsets(d)
    seg, touched = _damage(d, segment, entry, at, how)
    damaged_bytes = seg.read_bytes()
    with pytest.raises(DamagedLogError):
        _offsets(d)
    before = tree_snapshot(tmp_path)
    dry = kafkalog_here("repair", "--dry-run", "--json", str(d))
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert plan["dry_run"] and [s["segment"] for s in plan["segments"]] == [str(seg)]
    assert tree_snapshot(tmp_path) == before  # a dry run changes nothing
    done = kafkalog_here("repair", str(d))
    assert done.returncode == 0, done.stderr
    assert "repaired" in done.stdout and "WARNING" not in done.stdout
    after = _offsets(d)
    assert set(pristine) - set(after) <= touched, "a readable record was lost"
    assert set(after) <= set(pristine) and after == sorted(after)
    quarantine = next(tmp_path.glob("orders-0.quarantine-*"))
    assert (quarantine / seg.name).read_bytes() == damaged_bytes  # the original, kept whole
    manifest = json.loads((quarantine / "REPAIR.json").read_text())
    assert manifest["segments"][0]["damage_position"] >= 0
    again = kafkalog_here("repair", str(d))  # nothing left to do
    assert again.returncode == 0 and "no damage found" in again.stdout


def test_repair_of_a_garbage_segment_keeps_the_other_segments(tmp_path: Path) -> None:
    d = _written(tmp_path)
    pristine = _offsets(d)
    segs = sorted(d.glob("*.log"))
    lost = {r.offset for e in LogReader(segs[1].read_bytes()) for r in e.records()}
    segs[1].write_bytes(bytes((i * 131 + 7) % 251 for i in range(segs[1].stat().st_size)))
    report = repair(str(d))
    assert report.damaged and report.log_end_offset == 300
    assert set(_offsets(d)) == set(pristine) - lost


def test_repair_refuses_a_broker_held_directory(tmp_path: Path) -> None:
    d = _written(tmp_path)
    _damage(d, 1, 5, 30, "flip")
    lock = tmp_path / ".lock"
    lock.write_bytes(b"")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl,sys,time; f=open(sys.argv[1],'r+'); fcntl.lockf(f, fcntl.LOCK_EX); "
            "print('held', flush=True); time.sleep(60)",
            str(lock),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        before = tree_snapshot(d)
        result = kafkalog_here("repair", str(d))
        assert result.returncode != 0 and "broker" in result.stderr
        assert "Traceback" not in result.stderr
        assert tree_snapshot(d) == before
    finally:
        holder.kill()
        holder.wait()


def test_sigkill_during_repair_leaves_the_log_as_it_was_or_repaired(tmp_path: Path) -> None:
    source = _written(tmp_path / "source")
    pristine = _offsets(source)
    _, touched = _damage(source, 1, 5, 30, "flip")
    outcomes = set()
    for trial, delay in enumerate([0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4]):
        root = tmp_path / f"trial{trial}"
        d = root / "orders-0"
        shutil.copytree(source, d)
        proc = subprocess.Popen(
            [sys.executable, "-m", "kafkalog", "repair", str(d)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        try:
            after = _offsets(d)
            outcomes.add("repaired")
        except DamagedLogError:
            outcomes.add("as it was")
            after = None
        if after is not None:
            assert set(pristine) - set(after) <= touched
        # a second run finishes whatever the first left
        finished = kafkalog_here("repair", str(d))
        assert finished.returncode == 0, finished.stderr
        final = _offsets(d)
        assert set(pristine) - set(final) <= touched and set(final) <= set(pristine)
        assert not list(d.glob("*.cleaned"))
        # the damaged original is in a quarantine folder, whole
        kept = [p for q in root.glob("orders-0.quarantine-*") for p in q.glob("*.log")]
        assert kept and all(p.stat().st_size > 0 for p in kept)
    assert outcomes  # each trial ended as it was or repaired (checked above)
