"""Damaged logs: every reader answers with a clear error or every record, never fewer records
with success, and nothing is changed (issue 23).

A matrix: logs kafkalog writes and real fixture partitions, each damaged in one way (a byte
flipped in each structural field of a batch in the middle of a segment, a hole, garbage, an
absurd length, a batch of the last segment cut off, a zero tail), each read by every reader of
the log layer (read-only and writable opens, ``records``, ``read_arrow``, the Spark planner and
its tasks without Spark). Where the damage is a torn tail (what a crash leaves), a read gives
every record before it; anywhere else it raises a kafkalog error naming the file and the byte.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from damage_kinds import (
    DAMAGES,
    FILE_AS_DIRECTORY,
    GAP_DAMAGES,
    OPEN_REFUSES,
    READERS,
    STRAY_FILES,
    SWAP_LEFTOVERS,
    applies,
    check_every_reader,
    check_gap_said,
    cut_last,
    zero_tail,
)
from damage_kinds import entries as _entries
from damage_kinds import files_of as _files
from damage_kinds import flip as _flip
from damage_kinds import planner as _planner
from damage_kinds import records as _records
from damage_kinds import segments as _segments
from damage_kinds import written as _written
from kafkalog.errors import DamagedLogError, KafkalogError
from kafkalog.log import Log
from kafkalog.log.damage import SkippedBytes
from kafkalog.records import LogReader, Record
from provenance import FIXTURES

FIXTURE_PARTITIONS = [
    FIXTURES / "kafka-4.0-snapshot-javacode" / "v0-none-0",
    FIXTURES / "kafka-4.0-snapshot-javacode" / "v1-gzip-0",
    FIXTURES / "kafka-4.0-snapshot-javacode" / "v2-zstd-0",
    FIXTURES / "kafka-4.0-snapshot-javacode" / "v2-txn-0",  # transactions, two segments
    FIXTURES / "kafka-0.9.0.1-broker" / "v0-compact-0",  # the log cleaner's gaps
    FIXTURES / "kafka-0.9.0.1-gzip-kafka-python" / "kp-gzip-0",  # 0.9 gzip, first-offset index
]

#: logs written here in real writers' shapes (tests/read_shapes.py): transactions across
#: segments, and a follower's appends with compaction gaps
SHAPE_SOURCES = ["v2-txn-multi-i1-roll", "v2-gaps-follower-multi-i1-roll"]


def _sources(tmp: Path) -> dict[str, Path]:
    from read_shapes import write_shape

    out = {"written by Log": _written(tmp / "source")}
    for name in SHAPE_SOURCES:
        out[name] = write_shape(tmp / "shapes" / name, name).directory
    for p in FIXTURE_PARTITIONS:
        if p.is_dir():
            out[p.parent.name + "/" + p.name] = p
    assert len(out) == 1 + len(SHAPE_SOURCES) + len(FIXTURE_PARTITIONS), "fixtures missing"
    return out


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return _sources(tmp_path_factory.mktemp("damage"))


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_every_reader_raises_or_reads_everything(
    damage: str, sources: dict[str, Path], tmp_path: Path
) -> None:
    for name, source in sources.items():
        check_every_reader(damage, name, source, tmp_path)


@pytest.mark.parametrize("damage", sorted([*STRAY_FILES, *FILE_AS_DIRECTORY]))
def test_every_reader_reads_everything_beside_a_stray_or_unreadable_file(
    damage: str, sources: dict[str, Path], tmp_path: Path
) -> None:
    for name, source in sources.items():
        check_every_reader(damage, name, source, tmp_path)


@pytest.mark.parametrize("damage", GAP_DAMAGES)
def test_every_reader_reads_across_a_gap_between_segments_and_says_it(
    damage: str, sources: dict[str, Path], tmp_path: Path
) -> None:
    for name, source in sources.items():
        check_gap_said(damage, name, source, tmp_path)


def test_torn_tail_is_cut_by_a_writable_open_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    d = _written(tmp_path)
    (d / ".kafkalog-clean-shutdown").unlink()  # as after a crash
    cut_last(d)
    with caplog.at_level("WARNING", logger="kafkalog.log"), Log(d) as log:
        assert log.log_end_offset == 299
    assert any("cutting the torn tail" in r.getMessage() for r in caplog.records)


def test_a_clean_close_means_no_recovery_and_a_crash_means_recovery(tmp_path: Path) -> None:
    d = _written(tmp_path)
    assert (d / ".kafkalog-clean-shutdown").read_text().split()[0] == "300"
    log = Log(d)
    assert not (d / ".kafkalog-clean-shutdown").exists()  # a crash from here on: recovery
    log.append_records([Record.of(b"more")])
    log.close()
    assert (d / ".kafkalog-clean-shutdown").read_text().split()[0] == "301"
    (d / ".kafkalog-clean-shutdown").unlink()
    zero_tail(d)  # what a preallocating writer's crash leaves
    with Log(d) as log:
        assert log.log_end_offset == 301
    last = _segments(d)[-1]
    assert sum(size for _, size in _entries(last)) == last.stat().st_size  # the zeros were cut


def test_damage_before_the_tail_never_deletes_segments(tmp_path: Path) -> None:
    """Issue 23's first case: a flipped byte in the first of many segments made a writable
    open truncate it and rename every later segment ``.deleted``."""
    d = _written(tmp_path)
    (d / ".kafkalog-clean-shutdown").unlink()
    _flip(75, "first")(d)
    before = _files(d)
    with pytest.raises(DamagedLogError, match="kafkalog repair"):
        Log(d)
    assert _files(d) == before
    assert not list(d.glob("*.deleted"))


def test_a_stray_log_file_is_left_alone_not_read(tmp_path: Path) -> None:
    """A ``123.log`` made Log, lookup, cat and Spark fail on ``00000000000000000123.log``,
    which does not exist. It is no segment (Kafka names them by 20 digits): readers and a
    writable open leave it as it is (``kafkalog verify`` reports it)."""
    d = _written(tmp_path)
    (d / "123.log").write_bytes(b"not a segment")
    assert _records(d) == list(range(300))
    assert _planner(d) == list(range(300))
    with Log(d) as log:
        assert log.log_end_offset == 300
    assert (d / "123.log").read_bytes() == b"not a segment"


def _planner_skipping(d: Path) -> list[int]:
    from kafkalog.spark.options import parse_read_options
    from kafkalog.spark.plan import plan_read
    from kafkalog.spark.task import read_split

    topic = d.name.rsplit("-", 1)[0]
    opts = parse_read_options(
        {"path": str(d.parent), "subscribe": topic, "failOnDataLoss": "false"}
    )
    splits, _ = plan_read(opts)
    out: list[int] = []
    for split in splits:
        for batch in read_split(split, include_headers=False, fail_on_data_loss=False):
            out.extend(int(o) for o in batch.column("offset").to_pylist())
    return out


@pytest.mark.parametrize("damage", ["flip records", "flip crc", "flip length", "hole of 60 bytes"])
def test_fail_on_data_loss_false_skips_damage_and_says_so(
    damage: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Spark's failOnDataLoss=false: the tasks read on past damaged bytes (to the next whole,
    valid batch) and log what they skipped, file and bytes; every other record is read."""
    d = _written(tmp_path)
    segs = _segments(d)
    before = {p.name: p.read_bytes() for p in segs}
    pristine = {
        name: [r.offset for e in LogReader(data) for r in e.records()]
        for name, data in before.items()
    }
    DAMAGES[damage][0](d)
    (damaged,) = [p for p in segs if p.read_bytes() != before[p.name]]
    with caplog.at_level("WARNING", logger="kafkalog.spark"):
        got = _planner_skipping(d)
    said = [r.getMessage() for r in caplog.records if "skipped damaged bytes" in r.getMessage()]
    assert said and all(damaged.name in m for m in said)
    others = [o for name, offs in pristine.items() if name != damaged.name for o in offs]
    assert set(others) <= set(got)  # nothing outside the damaged segment is lost
    lost = set(pristine[damaged.name]) - set(got)
    assert 0 < len(lost) <= 3  # the damaged batch (a hole may touch two), never the segment
    assert got == sorted(got)


@pytest.mark.parametrize("damage", ["flip records", "flip base offset", "hole of 60 bytes"])
def test_cli_readers_on_damage_say_where_without_a_traceback(damage: str, tmp_path: Path) -> None:
    """``kafkalog cat`` on a damaged log: exit 2, one line naming the file, the byte and the
    repair command, no traceback, nothing changed."""
    from clirun import kafkalog_here, tree_snapshot

    d = _written(tmp_path)
    pristine = {p.name: p.read_bytes() for p in _segments(d)}
    DAMAGES[damage][0](d)
    (damaged,) = [p for p in _segments(d) if p.read_bytes() != pristine[p.name]]
    before = tree_snapshot(d)
    # a read through the damaged segment (a read elsewhere rightly answers: the damage is not
    # in its way)
    for args in (("cat", str(d)), ("cat", str(d), "--offset", str(int(damaged.name[:20])))):
        result = kafkalog_here(*args)
        assert result.returncode == 2, (args, result.stdout[-500:], result.stderr)
        assert "Traceback" not in result.stderr
        assert ".log at byte" in result.stderr and "kafkalog repair" in result.stderr, args
    # asked to skip: every other record, each skip said on stderr, exit status 1
    result = kafkalog_here("cat", str(d), "--skip-damaged")
    assert result.returncode == 1, (result.stdout[-500:], result.stderr)
    assert "Traceback" not in result.stderr
    said = [line for line in result.stderr.splitlines() if "skipped damaged bytes" in line]
    assert said and all(damaged.name in line and "offsets" in line for line in said), said
    assert "kafkalog repair" in result.stderr.splitlines()[-1]
    offsets = [json.loads(line)["offset"] for line in result.stdout.splitlines()]
    assert offsets == sorted(offsets) and 297 <= len(offsets) < 300, len(offsets)
    assert tree_snapshot(d) == before


def _salvage(d: Path, written: set[bytes]) -> dict[int, bytes | None]:
    """Brute force: every record of every whole batch with a valid CRC anywhere in the
    segments (found by trying each position after a bad one), offset -> value; only the
    batches whose bytes are one the writer wrote (``written``): a base offset moved outside
    the CRC makes a valid batch of records at offsets they never had. A batch starting below
    its file's base offset (a segment renamed) is out of line with the log's offsets too."""
    from kafkalog.records.resync import next_valid_entry
    from kafkalog.records.types import DEFAULT_LIMITS

    out: dict[int, bytes | None] = {}
    for seg in _segments(d):
        if seg.is_dir():
            continue  # a directory by a segment's name holds no bytes
        data = seg.read_bytes()
        pos: int | None = 0
        while pos is not None and pos < len(data):
            try:
                entry = next(iter(LogReader(data[pos:], verify_crc=True, strict_tail=True)))
                records = entry.records()
                # a v0/v1 wrapper's own offset (outside its CRC) must be its last record's:
                # one that is not is out of line (a v2 batch's records follow its header)
                whole = bytes(data[pos : pos + entry.size_in_bytes])
                if whole in written and (not records or records[-1].offset == entry.last_offset):
                    in_line = not records or records[0].offset >= int(seg.name[:20])
                    for r in records if in_line else ():
                        out[r.offset] = r.value
                pos += entry.size_in_bytes
            except (KafkalogError, StopIteration):
                pos = next_valid_entry(_slicer(data), len(data), pos + 1, DEFAULT_LIMITS)
    return out


def _slicer(data: bytes) -> Callable[[int, int], bytes]:
    return lambda p, n: data[p : p + n]


def _records_skipping(d: Path, said: list[SkippedBytes]) -> list[tuple[int, bytes | None]]:
    with Log(d, writable=False) as log:
        return [(r.offset, r.value) for r in log.records(on_damage=said.append)]


def _planner_said(d: Path, said: list[SkippedBytes | str]) -> list[tuple[int, bytes | None]]:
    """The Spark planner and tasks with failOnDataLoss=false, what they log as said."""
    import logging

    from kafkalog.spark.options import parse_read_options
    from kafkalog.spark.plan import plan_read
    from kafkalog.spark.task import read_split

    class Said(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            said.append(record.getMessage())

    handler = Said(logging.WARNING)
    # the tasks say what they skip (kafkalog.spark), the log's reads what they plan past
    # (kafkalog.log: a lost segment, a batch out of line at a segment's end)
    logging.getLogger("kafkalog").addHandler(handler)
    try:
        topic = d.name.rsplit("-", 1)[0]
        opts = parse_read_options(
            {"path": str(d.parent), "subscribe": topic, "failOnDataLoss": "false"}
        )
        splits, _ = plan_read(opts)
        out: list[tuple[int, bytes | None]] = []
        for split in splits:
            for batch in read_split(split, include_headers=False, fail_on_data_loss=False):
                offsets = batch.column("offset").to_pylist()
                out.extend(zip(offsets, batch.column("value").to_pylist(), strict=True))
        return out
    finally:
        logging.getLogger("kafkalog").removeHandler(handler)


SKIPPING: dict[str, Callable[[Path, list[Any]], list[tuple[int, bytes | None]]]] = {
    "records(on_damage=)": _records_skipping,
    "Spark failOnDataLoss=false": _planner_said,
}


@pytest.mark.parametrize(
    "damage", sorted(k for k, (_, torn) in DAMAGES.items() if not torn and k not in OPEN_REFUSES)
)
def test_skipping_reads_keep_every_valid_batch_and_say_what_they_skip(
    damage: str, sources: dict[str, Path], tmp_path: Path
) -> None:
    """A read that asked to skip damage (``on_damage``): every record it gives is the record
    that was written at that offset; every record of a whole, valid batch anywhere in the files
    (a brute-force salvage) is given, unless its offsets are out of line with the log's; each
    record lost lies in the offsets of a skip report; and nothing is changed."""
    mutate, _ = DAMAGES[damage]
    for name, source in sources.items():
        if not applies(damage, source):
            continue
        with Log(source, writable=False) as log:
            pristine = {r.offset: r.value for r in log.records()}
        d = tmp_path / name.replace("/", "_") / source.name
        shutil.copytree(source, d)
        for extra in d.glob(".kafkalog*"):
            extra.unlink()
        mutate(d)
        before = _files(d)
        written = {
            bytes(s.read_bytes()[e.position : e.position + e.size_in_bytes])
            for s in _segments(source)
            for e in LogReader(s.read_bytes())
        }
        salvage = {o: v for o, v in _salvage(d, written).items() if pristine.get(o, b"\0x") == v}
        for reader_name, reader in SKIPPING.items():
            where = f"{damage} / {name} / {reader_name}"
            said: list[Any] = []
            got = reader(d, said)
            offsets = [o for o, _ in got]
            assert offsets == sorted(set(offsets)), where
            wrong = [(o, v) for o, v in got if pristine.get(o, b"\0x") != v]
            assert not wrong, f"{where}: records read wrong {wrong[:3]}"
            missing = set(salvage) - set(offsets)
            assert not missing, f"{where}: valid records not read: {sorted(missing)[:5]}"
            lost = set(pristine) - set(offsets)
            assert said or not lost, f"{where}: {len(lost)} records lost and no skip said"
            if not all(isinstance(skip, SkippedBytes) for skip in said):
                assert all(d.name in str(skip) for skip in said), (where, said)
                continue  # log lines: they name the partition, files, bytes (checked above)
            for skip in said:
                # bytes skipped, or a lost segment (named by the index left of it)
                # (or a segment that cannot be read, named by its .log)
                gone = skip.end == skip.start and (
                    skip.path.endswith(".index") or Path(skip.path).is_dir()
                )
                assert skip.path.startswith(str(d)) and (skip.end > skip.start or gone), (
                    where,
                    skip,
                )
            covered = [
                o
                for o in lost
                if not any(
                    s.first_offset is not None
                    and s.first_offset <= o
                    and (s.last_offset is None or o <= s.last_offset)
                    for s in said
                )
            ]
            assert not covered, f"{where}: lost offsets outside every skip report {covered[:5]}"
        assert _files(d) == before, f"{damage} / {name}: files changed"


def test_a_read_only_open_lists_again_when_a_live_writer_renamed_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beside a live writer, a file listed a moment ago may be renamed before it is opened (a
    roll, retention, a cleaner's swap: seen with serve's cleaner): the read-only open lists the
    directory again instead of failing; a writable open (the only writer) still raises."""
    from kafkalog.log import loader

    d = _written(tmp_path)
    real = loader.LogLoader.load
    calls = []

    def racing(self: loader.LogLoader, *args: object) -> object:
        calls.append(1)
        if len(calls) == 1:
            raise FileNotFoundError(str(d / "00000000000000000250.log.swap"))
        return real(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(loader.LogLoader, "load", racing)
    with Log(d, writable=False) as log:
        assert [r.offset for r in log.records()] == list(range(300))
    assert len(calls) == 2
    calls.clear()
    with pytest.raises(FileNotFoundError):
        Log(d)


def test_a_failed_open_leaves_no_descriptor_open(tmp_path: Path) -> None:
    """A server meets a damaged partition at every request; each failed open closed nothing
    it had opened (~3,000 descriptors a test, until the process ran out)."""
    import os

    d = _written(tmp_path)
    (d / ".kafkalog-clean-shutdown").unlink()
    _flip(75, "first")(d)
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        with pytest.raises(DamagedLogError):
            Log(d)
    assert len(os.listdir("/proc/self/fd")) <= before + 2


@pytest.mark.parametrize("skipping", [True, False], ids=["skipping", "failing"])
def test_columnar_damage_past_the_first_chunk(skipping: bool, tmp_path: Path) -> None:
    """A columnar read goes chunk by chunk; damage in a later chunk is located from the end of
    the chunks already read (with the offsets they ended at), so a skip neither reads those
    batches twice nor drops the good batches of the failing chunk, and an error names the
    damaged batch's first byte."""

    d = _written(tmp_path)
    seg = _segments(d)[2]
    pristine = [r.offset for e in LogReader(seg.read_bytes()) for r in e.records()]
    entries = _entries(seg)
    position, _ = entries[len(entries) * 3 // 4]  # past the first chunks of 500 bytes
    data = bytearray(seg.read_bytes())
    data[position + 70] ^= 0xFF  # a record byte: the CRC fails
    seg.write_bytes(bytes(data))
    if not skipping:
        with pytest.raises(DamagedLogError) as failed:
            _read_in_chunks(seg, 500, None)
        assert failed.value.position == position
        return
    said: list[SkippedBytes] = []
    got = [o for o, _ in _read_in_chunks(seg, 500, said)]
    lost = pristine[len(entries) * 3 // 4]
    assert got == [o for o in pristine if o != lost]
    assert [(s.start, s.first_offset, s.last_offset) for s in said] == [(position, lost, lost)]


#: readers whose error names a chunk of the columnar decoder, not the batch (their skips are
#: checked batch by batch in test_skipping_reads_keep_every_valid_batch_and_say_what_they_skip)
_CHUNK_READERS = {"read_arrow", "spark planner"}


@pytest.mark.parametrize("delta", [1, 2, -1, -2, 4])
def test_a_base_offset_moved_by_less_than_a_batch_is_named_where_it_is(
    delta: int, sources: dict[str, Path], tmp_path: Path
) -> None:
    """A base offset (outside the CRC) moved up or down by less than a batch of several
    records: the batch after it (or before it) still ends past it, so its neighbours' offsets
    look out of order too. Every reader, ``verify`` and ``repair`` name the batch that moved,
    never the good one beside it (repair would quarantine the good batch and keep the moved
    one's records at offsets they were never written at)."""
    from damage_kinds import READERS, shifted_batch
    from kafkalog.cli.main import main

    damaged = 0
    for name, source in sources.items():
        d = tmp_path / name.replace("/", "_") / source.name
        shutil.copytree(source, d)
        for extra in d.glob(".kafkalog*"):
            extra.unlink()
        try:
            seg, position = shifted_batch(d, delta)
        except AssertionError:
            continue  # no batch with adjoining neighbours (compaction's gaps, one batch)
        damaged += 1
        where = f"{name} {delta:+d} at byte {position}"
        pristine = _records(source)
        for reader_name, reader in READERS.items():
            if reader_name in _CHUNK_READERS:
                # a v0 wrapper's offset field moved leaves its inner offsets (inside the CRC)
                # right: the columnar decoder reads them, every one where it was written
                with contextlib.suppress(KafkalogError):
                    assert reader(d) == pristine, (where, reader_name)
                continue
            with pytest.raises(KafkalogError) as raised:
                reader(d)
            assert f"{seg} at byte {position}:" in str(raised.value), (where, reader_name)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(["verify", str(d)]) == 1
        problems = [line for line in out.getvalue().splitlines() if "outside the" in line]
        assert problems and all(f"{seg} at byte {position}:" in p for p in problems), (
            where,
            problems,
        )
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            main(["repair", "--dry-run", str(d)])
        assert f"damage at byte {position}:" in out.getvalue(), (where, out.getvalue())
    assert damaged >= 4, f"only {damaged} sources had a batch with adjoining neighbours"


@pytest.mark.parametrize("skipping", [False, True], ids=["failing", "skipping"])
def test_a_batch_moved_up_at_a_chunks_end_is_not_read(skipping: bool, tmp_path: Path) -> None:
    """A columnar read goes chunk by chunk: a batch whose base offset moved up by less than a
    batch, the last of a chunk, shows only against the first batch of the next chunk. Its rows
    are never handed out: the read fails naming it, or skips it (and only it)."""
    from damage_kinds import shifted_batch
    from read_shapes import write_shape

    d = write_shape(tmp_path / "shape", "v2-multi-i1").directory
    with Log(d, writable=False) as log:
        pristine = {r.offset: r.value for r in log.records()}
    seg, position = shifted_batch(d, 2)
    data = seg.read_bytes()
    moved = next(e for e in LogReader(data) if e.position == position)
    chunk = position + moved.size_in_bytes  # the first chunk ends with it
    if not skipping:
        with pytest.raises(DamagedLogError) as failed:
            _read_in_chunks(seg, chunk, None)
        assert failed.value.position == position
        return
    said: list[SkippedBytes] = []
    got = _read_in_chunks(seg, chunk, said)
    assert not [o for o, v in got if pristine.get(o) != v], "records read at offsets not theirs"
    assert len(got) == sum(1 for e in LogReader(data) for _ in e.records()) - len(moved.records())
    assert said and said[0].start == position


def _read_in_chunks(
    seg: Path, chunk_bytes: int, said: list[SkippedBytes] | None
) -> list[tuple[int, bytes | None]]:
    """(offset, value) of a columnar read of a whole segment (not its log's last) in chunks of
    ``chunk_bytes``, skipping damage into ``said`` when given, else raising."""
    from kafkalog.files import open_read
    from kafkalog.log.arrow_read import decode_file

    handle = open_read(str(seg))
    try:
        read = decode_file(
            handle,
            0,
            seg.stat().st_size,
            path=str(seg),
            chunk_bytes=chunk_bytes,
            last_segment=False,
            first_offset=int(seg.name[:20]),
            on_damage=None if said is None else said.append,
            include_headers=False,
            topic="t",
            partition=0,
        )
        return [
            (o, v)
            for b in read
            for o, v in zip(
                b.column("offset").to_pylist(), b.column("value").to_pylist(), strict=True
            )
        ]
    finally:
        handle.close()


@pytest.mark.parametrize("damage", list(SWAP_LEFTOVERS))
def test_a_swap_read_in_place_of_segments_is_said(
    damage: str, sources: dict[str, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A ``.swap`` of whole batches that does not hold what the segments it covers held: the
    read-only readers read what Kafka's loader would leave (the swap in place of them, a
    brute force over those files), and a WARNING names the ``.swap`` and the segments; no
    file changes. A TailReader (a live tail) reads up to the swap and waits there for the
    writer to complete it, saying so in a WARNING naming it."""
    applied = swapped = 0
    for name, source in sources.items():
        if not applies("segment .log is a directory", source):  # a middle segment
            continue
        d = tmp_path / name.replace("/", "_") / source.name
        shutil.copytree(source, d)
        for extra in d.glob(".kafkalog*"):
            extra.unlink()
        swap = SWAP_LEFTOVERS[damage](d)
        base = int(swap.name[:20])
        covered = [p for p in _segments(d) if base <= int(p.name[:20]) < base + 10**12]
        swap_end = max(e.last_offset for e in LogReader(swap.read_bytes())) + 1
        replaced = [p for p in covered if int(p.name[:20]) < swap_end]
        kept = [p for p in _segments(d) if p not in replaced] + [swap]
        want = sorted(
            r.offset
            for p in kept
            for e in LogReader(p.read_bytes())
            if not e.is_control
            for r in e.records()
        )
        applied += 1
        before = _files(d)
        pristine = _records(source)
        for reader_name, reader in READERS.items():
            if reader_name == "writable open":
                continue  # it completes the swap, as Kafka's loader does
            caplog.clear()
            with caplog.at_level("WARNING", logger="kafkalog"):
                got = reader(d)
            where = f"{damage} / {name} / {reader_name}"
            assert _files(d) == before, f"{where}: files changed"
            said = [r.getMessage() for r in caplog.records if swap.name in r.getMessage()]
            if reader_name == "TailReader":  # a live tail waits at the swap, and says so
                assert got == pristine[: len(got)] and said, (where, len(got), said)
                continue
            assert got == want, f"{where}: {len(got)} records of {len(want)}"
            assert said and all(p.name in said[0] for p in replaced), (where, said)
            swapped += 1
    assert applied >= 2 and swapped >= 4 * applied, f"{damage}: {applied} logs, {swapped} reads"
