"""``Log.fetch(verify_crcs=True)`` (what ``kafkalog serve`` asks): no whole batch whose CRC does
not match is returned, the damage is a DamagedLogError naming file and byte, and the bytes of a
writable log are checked once (a second fetch of the same range computes no CRC), until a
truncation, a recovery cut or a cleaner's swap changes them."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from damage_kinds import entries
from kafkalog.errors import DamagedLogError
from kafkalog.log import Log, TopicConfig
from kafkalog.log.verified import VerifiedRanges
from kafkalog.records import LogReader, Record, RecordBatch
from kafkalog.records.legacy import LegacyEntry
from provenance import FIXTURES

V0_BROKER = FIXTURES / "kafka-0.9.0.1-broker"


class CrcCalls:
    """Counts the CRC checks of both entry kinds (the checkers the log's reads use)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        for cls in (RecordBatch, LegacyEntry):
            original = cls.ensure_valid

            def counted(entry: Any, _original: Any = original) -> None:
                self.calls += 1
                _original(entry)

            monkeypatch.setattr(cls, "ensure_valid", counted)

    def take(self) -> int:
        n, self.calls = self.calls, 0
        return n


def _write(d: Path, n: int = 60, **config: Any) -> Log:
    log = Log(d, TopicConfig(segment_bytes=2048, **config))
    for i in range(n):
        log.append_records([Record.of(b"value %05d" % i, key=b"k%d" % (i % 5))])
    return log


def _flip_record_byte(path: Path, position: int) -> None:
    """A byte of the records area (inside the CRC) of the entry at ``position`` flipped in
    place, through a handle of its own (as a disk or another program would)."""
    fd = os.open(path, os.O_RDWR)
    try:
        at = position + 70
        byte = os.pread(fd, 1, at)
        os.pwrite(fd, bytes([byte[0] ^ 0xFF]), at)
    finally:
        os.close(fd)


def _offsets(data: bytes) -> list[int]:
    return [r.offset for e in LogReader(data) for r in e.records()]


def test_a_flipped_record_byte_is_never_fetched_and_the_batches_before_it_are(
    tmp_path: Path,
) -> None:
    log = _write(tmp_path / "t-0")
    try:
        seg = log.segments[1]
        victim = entries(Path(seg.log.path))[3][0]
        first_bad = next(
            e.base_offset
            for e in LogReader(Path(seg.log.path).read_bytes())
            if e.position == victim
        )
        _flip_record_byte(Path(seg.log.path), victim)
        # without the check the damaged batch is handed out (the client's CRC check is all)
        plain = log.fetch(seg.base_offset, 1 << 20).region
        assert plain is not None and first_bad in _offsets(plain.read())
        with pytest.raises(DamagedLogError) as raised:
            log.fetch(seg.base_offset, 1 << 20, verify_crcs=True)
        assert seg.log.path in str(raised.value)
        assert f"byte {victim + 17}" in str(raised.value), raised.value  # its CRC field
        # the batches before it are returned, checked; a fetch starting at it fails
        before = log.fetch(seg.base_offset, victim, verify_crcs=True).region
        assert before is not None
        got = _offsets(before.read())
        assert got and got == list(range(seg.base_offset, first_bad))
        with pytest.raises(DamagedLogError):
            log.fetch(first_bad, 1, verify_crcs=True)
        # every other segment serves
        assert log.fetch(0, 1 << 20, verify_crcs=True).region is not None
    finally:
        log.close()


def test_a_v0_message_flipped_in_a_kafka_written_read_only_log(tmp_path: Path) -> None:
    """v0 messages (CRC-32) and gzip wrappers of a real Kafka 0.9.0.1 broker, read-only: every
    fetch checks what it returns (nothing is remembered for a file another writer owns)."""
    for name in ("v0-none-0", "v0-gzip-0", "v0-compact-gzip-0"):
        d = tmp_path / name
        shutil.copytree(V0_BROKER / name, d)
        logs = [p for p in sorted(d.glob("*.log")) if p.stat().st_size]
        seg = logs[len(logs) // 2]
        found = entries(seg)
        # not the log's last entry (a bad CRC there is a torn tail: where the log ends)
        victim, size = found[(len(found) - 1) // 2]
        data = bytearray(seg.read_bytes())
        data[victim + size - 1] ^= 0xFF  # the last byte: its value (or compressed messages)
        seg.write_bytes(bytes(data))
        with Log(d, writable=False) as log:
            base = int(seg.name.split(".")[0])
            assert log.fetch(base, 1 << 20).region is not None  # unchecked: handed out
            with pytest.raises(DamagedLogError) as raised:
                log.fetch(base, 1 << 20, verify_crcs=True)
            assert str(seg) in str(raised.value) and f"byte {victim + 12}" in str(raised.value)
            s = log.floor_segment(base)
            assert s is not None and s.log.verified is None


def test_a_second_fetch_of_the_same_bytes_computes_no_crc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _write(tmp_path / "t-0")
    crcs = CrcCalls(monkeypatch)
    try:
        n = sum(len(entries(Path(s.log.path))) for s in log.segments)
        whole = [log.fetch(s.base_offset, 1 << 20, verify_crcs=True) for s in log.segments]
        assert crcs.take() == n
        again = [log.fetch(s.base_offset, 1 << 20, verify_crcs=True) for s in log.segments]
        assert crcs.take() == 0
        assert [w.region.read() for w in whole if w.region] == [
            a.region.read() for a in again if a.region
        ]
        # from the middle, small fetches as a consumer makes: nothing checked twice
        log.fetch(30, 100, verify_crcs=True)
        assert crcs.take() == 0
        # appends are checked once, when first fetched
        log.append_records([Record.of(b"more")])
        crcs.take()  # (the append checks the batch it is given: not a fetch's)
        log.fetch(log.log_end_offset - 1, 1 << 20, verify_crcs=True)
        log.fetch(log.log_end_offset - 1, 1 << 20, verify_crcs=True)
        assert crcs.take() == 1
    finally:
        log.close()


def test_a_truncation_forgets_what_it_cut(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = _write(tmp_path / "t-0")
    crcs = CrcCalls(monkeypatch)
    try:
        active = log.active_segment
        base = active.base_offset
        log.fetch(base, 1 << 20, verify_crcs=True)
        held = len(entries(Path(active.log.path)))
        assert crcs.take() == held and held >= 3
        cut = base + 2
        log.truncate_to(cut)
        verified = active.log.verified
        assert verified is not None and verified.ends and verified.ends[-1] <= active.size
        # new bytes where the cut ones were: checked, and damage in them found
        log.append_records([Record.of(b"new %d" % i) for i in range(3)])
        crcs.take()  # (the append's own check)
        position = entries(Path(active.log.path))[-1][0]
        _flip_record_byte(Path(active.log.path), position)
        log.fetch(base, 1 << 20, verify_crcs=False)  # the unchecked read still hands it out
        with pytest.raises(DamagedLogError):
            log.fetch(base, 1 << 20, verify_crcs=True)
        assert crcs.take() == 1  # only the new batch: the two kept were verified before
    finally:
        log.close()


def test_a_recovery_cut_forgets_what_it_cut(tmp_path: Path) -> None:
    log = _write(tmp_path / "t-0")
    try:
        active = log.active_segment
        log.fetch(active.base_offset, 1 << 20, verify_crcs=True)
        verified = active.log.verified
        assert verified is not None and verified.covers(0, active.size)
        last = entries(Path(active.log.path))[-1][0]
        _flip_record_byte(Path(active.log.path), last)  # the last batch torn
        assert active.recover() > 0  # cut at the torn batch
        assert active.size == last
        assert verified.covers(0, last) and not verified.covers(last, last + 1)
    finally:
        log.close()


def test_a_cleaner_swap_brings_bytes_checked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _write(tmp_path / "t-0", n=120, cleanup_policy="compact")
    crcs = CrcCalls(monkeypatch)
    try:
        log.roll()
        before = {s.base_offset: s.log for s in log.segments}
        for s in log.segments:
            log.fetch(s.base_offset, 1 << 20, verify_crcs=True)
        crcs.take()
        result = log.compact()
        crcs.take()  # the cleaner checks what it reads, by its own path
        swapped = [s for s in log.segments if before.get(s.base_offset) is not s.log]
        assert swapped, f"the cleaning swapped nothing in: {result}"
        assert all(s.log.verified is not None and not s.log.verified.starts for s in swapped)
        for s in swapped:
            log.fetch(s.base_offset, 1 << 20, verify_crcs=True)
        assert crcs.take() == sum(len(entries(Path(s.log.path))) for s in swapped)
        for s in swapped:
            log.fetch(s.base_offset, 1 << 20, verify_crcs=True)
        assert crcs.take() == 0
    finally:
        log.close()


def test_verified_ranges_merge_and_cut() -> None:
    v = VerifiedRanges()
    v.add(100, 200)
    v.add(300, 400)
    assert v.covers(100, 200) and not v.covers(150, 350) and not v.covers(0, 1)
    v.add(200, 300)
    assert v.covers(100, 400) and v.starts == [100]
    v.add(0, 50)
    v.cut(120)
    assert v.covers(100, 120) and not v.covers(100, 121) and v.starts == [0, 100]
    v.cut(10)
    assert v.starts == [0] and v.ends == [10]
