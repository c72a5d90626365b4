"""The log's last batch (issue 32 §1): no batch or segment after it shows its base offset
(outside the CRC) in line, so it is judged by its segment's own evidence
(kafkalog.log.last_batch): the last offset its ``.index``/``.timeindex`` key (an offset no
batch holds, between the batch before and the last one's base, proves the base flipped up),
and kafkalog's own clean-close record of the log end while no append came after it.
Damage proven that way is an error in every reader, blamed on that batch; nothing else is
(compaction's gaps, a broker's lagging checkpoints, legacy wrappers, a second writer)."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import struct
from pathlib import Path

import pytest

from damage_kinds import READERS, entries, flip_last_base, holding, last_batch_evidence, written
from kafkalog.cli.main import main
from kafkalog.errors import DamagedLogError, KafkalogError
from kafkalog.log import Log
from kafkalog.log.checkpoints import OwnLogStart
from kafkalog.log.damage import SkippedBytes
from kafkalog.log.last_batch import judge_files, marker_end
from kafkalog.log.tail import TailReader
from kafkalog.records import LogReader, Record
from kafkalog.records.reader import LogEntry
from provenance import FIXTURES

#: every partition directory of the real writers' fixtures
PARTITIONS = sorted({p.parent for p in FIXTURES.glob("*/*/*.log")})


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
        if p.is_file() and p.name != ".kafkalog.lock"
    }


def _last_offset_before(seg: Path, position: int) -> int:
    """An offset the damaged batch really held (the one after the batch before it), which a
    wrong answer would give under another offset."""
    last = [e.last_offset for e in LogReader(seg.read_bytes()) if e.position < position]
    return (last[-1] if last else int(seg.name[:20]) - 1) + 1


def _assert_every_reader_blames_the_last_batch(d: Path) -> None:
    seg = holding(d)[-1]
    position, _ = entries(seg)[-1]
    before = _files(d)
    with Log(d, writable=False) as log:
        with pytest.raises(DamagedLogError) as raised:
            list(log.records())
        assert raised.value.path == str(seg) and raised.value.position == position
        said: list[SkippedBytes] = []
        got = [r.offset for r in log.records(on_damage=said.append)]
        assert got == sorted(got) and got and got[-1] < log.log_end_offset
        assert [s.start for s in said] == [position], said
        with pytest.raises(DamagedLogError):
            log.read_arrow()
    with pytest.raises(DamagedLogError):
        tail = TailReader(str(d))
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
    assert code == 1 and "PROBLEM" in out and f"at byte {position}" in out, out
    code, _, err = runs["cat"]
    assert code == 2 and "kafkalog repair" in err, err
    code, _, err = runs["cat --skip-damaged"]
    assert code == 1 and "skipped damaged bytes" in err, err
    code, _, err = runs["lookup"]
    assert code == 2 and f"at byte {position}" in err, runs["lookup"]
    code, out, err = runs["rebuild-index --dry-run"]
    assert code != 0 and "refused, nothing changed" in out, runs["rebuild-index --dry-run"]
    planned = json.loads(runs["repair --dry-run"][1].splitlines()[0])
    assert planned["segments"], planned  # repair would move it aside
    assert _files(d) == before, "a reader changed a file"
    with pytest.raises(DamagedLogError) as raised:
        Log(d).close()  # a writable open (recovery) refuses, naming the batch, cutting nothing
    assert raised.value.position == position
    assert {k: v[0] for k, v in _files(d).items()} == {k: v[0] for k, v in before.items()}


@pytest.mark.parametrize("jump", ["high", "low"])
def test_a_cleanly_closed_standalone_log_proves_its_end(tmp_path: Path, jump: str) -> None:
    d = written(tmp_path)
    assert marker_end(str(d), str(holding(d)[-1])) == 300
    flip_last_base(jump)(d)
    _assert_every_reader_blames_the_last_batch(d)


def test_its_own_index_entries_prove_a_kafka_written_last_batch_wrong(tmp_path: Path) -> None:
    """No kafkalog marker: a Kafka 4.0 broker's partition, whose time index's last entry (a
    clean close appends it) keys an offset of the last batch."""
    d = tmp_path / "v2-none-0"
    shutil.copytree(FIXTURES / "kafka-4.0-snapshot-javacode" / "v2-none-0", d)
    assert last_batch_evidence(d)
    flip_last_base("high")(d)
    _assert_every_reader_blames_the_last_batch(d)


def test_every_reader_of_the_matrix_on_every_fixture_with_evidence(tmp_path: Path) -> None:
    """Every real writer's partition whose last segment's indexes key its last batch (by the
    brute force above): the flipped base offset is an error naming the file and the byte in
    every reader of the damage matrix (records, serve's fetch, the TailReader, read_arrow,
    the Spark planner and its tasks, a writable open)."""
    proven = 0
    for k, source in enumerate(PARTITIONS):
        if not holding(source) or not last_batch_evidence(source):
            continue
        d = tmp_path / str(k) / source.name
        shutil.copytree(source, d)
        flip_last_base("high")(d)
        for name, reader in READERS.items():
            with pytest.raises(KafkalogError) as raised:
                reader(d)
            assert str(d) in str(raised.value) and "byte" in str(raised.value), (source, name)
        proven += 1
    # v2 and v1 partitions (29 of the 37 v2 ones: the others are live brokers' active
    # segments, no closing time-index entry, whose last batch no index entry keys)
    assert proven >= 25, proven


def _no_alarm(d: Path, label: str) -> list[int]:
    """Every reader reads ``d`` whole: no last-batch judgement fires."""
    with Log(d, writable=False) as log:
        assert log.damage_at_end is None, (label, log.damage_at_end)
        got = [r.offset for r in log.records(include_control=True)]
    tail = TailReader(str(d))
    while tail.poll(max_records=100_000):
        pass
    _, out, _ = _run("verify", str(d))
    assert "(the log's last)" not in out, (label, out)
    return got


def test_no_false_alarm_on_any_fixture_closed_cleanly_and_extended(tmp_path: Path) -> None:
    """Every real writer's partition as it is, then appended to by kafkalog and closed cleanly
    (its marker now proves the end), then by a second writer: nothing reads as damage."""
    extended = 0
    for k, source in enumerate(PARTITIONS):
        d = tmp_path / str(k) / source.name
        shutil.copytree(source, d)
        before = _no_alarm(d, str(source))
        try:
            log = Log(d)
        except KafkalogError:
            continue  # a writable open refuses it for another reason (not the last batch)
        with log:
            log.append_records([Record.of(b"one more")])
        assert marker_end(str(d), str(sorted(d.glob("*.log"))[-1])) is not None
        with Log(d) as second:
            second.append_records([Record.of(b"x"), Record.of(b"y")])
        after = _no_alarm(d, f"{source}, extended")
        assert after[: len(before)] == before and len(after) == len(before) + 3, source
        extended += 1
    assert extended >= 40, extended


def test_no_false_alarm_on_any_read_shape(tmp_path: Path) -> None:
    """Every shape real writers produce (tests/read_shapes.py: several batches per append,
    v0/v1, every index interval, compaction's gaps, transactions, a moved log start), closed
    cleanly, extended by a second writer, then truncated inside its last batch and closed
    (the log end is the target, past the last batch: the marker records the batches' end):
    nothing is damage."""
    import random

    from read_shapes import SHAPES, extend_shape, truncate_inside_last_batch, truth, write_shape

    marked = truncated = 0
    for i, name in enumerate(sorted(SHAPES)):
        shape = write_shape(tmp_path / f"s{i}", name, seed=i)
        for step in ("closed", "extended", "truncated"):
            if step == "extended":
                try:
                    extend_shape(shape, 7, seed=i + 1)
                except ValueError:  # a pure legacy shape is not extended
                    continue
            d = shape.data_dir / f"{shape.topic}-{shape.partition}"
            if step == "closed":
                with Log(d):
                    pass  # closed cleanly by kafkalog: its marker records the log end
            if step == "truncated":
                with Log(d) as log:
                    active = log.active_segment
                    if not any(
                        e.last_offset > e.base_offset
                        for e in LogReader(active.log.read(0, active.size))
                    ):  # the active segment holds one-record batches only: nothing to cut inside
                        continue
                    truncate_inside_last_batch(log, random.Random(i))
                    truncated += 1
            logs = sorted(d.glob("*.log"))
            marked += marker_end(str(d), str(logs[-1])) is not None
            expected = [r.offset for r in truth(d).records]
            got = _no_alarm(d, f"{name} {step}")
            assert got == expected, (name, step)
    assert marked >= len(SHAPES), f"only {marked} shapes had their end recorded"
    assert truncated >= len(SHAPES) * 3 // 4, f"only {truncated} shapes were cut inside a batch"


def test_an_append_after_a_clean_close_voids_its_record(tmp_path: Path) -> None:
    """A marker older than the ``.log`` (an append by another writer since) proves nothing."""
    d = written(tmp_path)
    seg = holding(d)[-1]
    position, size = entries(seg)[-1]
    batch = bytearray(seg.read_bytes()[position : position + size])
    struct.pack_into(">q", batch, 0, 300)
    with open(seg, "ab") as f:
        f.write(bytes(batch))
    assert marker_end(str(d), str(seg)) is None
    with Log(d, writable=False) as log:
        assert max(r.offset for r in log.records()) == 300


def test_a_read_only_open_with_a_log_start_goes_on_past_a_damaged_last_batch(
    tmp_path: Path,
) -> None:
    """A log start (DeleteRecords) kept beside the segments: the open checks it against the
    log end, which the damaged last batch makes unreadable; a read-only open goes on (reads
    before the damage answer, a read through it raises), as without a log start."""
    d = written(tmp_path)
    OwnLogStart.write(str(d), 120)
    flip_last_base("high")(d)
    with Log(d, writable=False) as log:
        assert log.log_start_offset == 120 and log.damage_at_end is not None
        assert [r.offset for r in log.records(end_offset=200)] == list(range(120, 200))
        with pytest.raises(DamagedLogError):
            list(log.records())
        assert [r.offset for r in log.records(on_damage=lambda _: None)] == list(range(120, 299))
    code, _, err = _run("lookup", str(d), "--offset", "299")
    assert code == 2 and "byte" in err, err


def test_a_live_broker_s_preallocated_indexes_are_read_from_their_end(tmp_path: Path) -> None:
    """A live broker's active segment has its index files preallocated (zeros after the
    entries): the readers that judge from the files (the TailReader, verify) find the last
    real entry without reading the zeros as entries."""
    d = tmp_path / "v2-none-0"
    shutil.copytree(FIXTURES / "kafka-4.0-snapshot-javacode" / "v2-none-0", d)
    seg = holding(d)[-1]
    for suffix in (".index", ".timeindex"):
        with open(seg.with_suffix(suffix), "ab") as f:
            f.write(bytes(12 * 4096))
    assert _no_alarm(d, "preallocated")
    flip_last_base("high")(d)
    with pytest.raises(DamagedLogError):
        tail = TailReader(str(d))
        while tail.poll(max_records=10_000):
            pass
    code, out, _ = _run("verify", str(d))
    assert code == 1 and "(the log's last)" in out, out


def test_a_view_read_before_the_last_appends_and_the_close_is_no_damage(tmp_path: Path) -> None:
    """A reader's view of a live log ends before the writer's last appends; the writer then
    closes cleanly and records the new end. The view's last batch ends where the view ends,
    not where the record says the closed log ended: the record speaks for the closed log only
    (the fresh-clone CI run's concurrency test once read this race as a flipped base offset)."""
    d = tmp_path / "live-0"
    with Log(d) as writer:
        for k in range(5):
            writer.append_records([Record.of(b"v%d" % k)] * 3)
    seg = holding(d)[-1]
    view = seg.read_bytes()  # what a reader read before the writer's last appends
    last = list(LogReader(view))[-1]
    with Log(d) as writer:
        writer.append_records([Record.of(b"late")] * 4)
    assert marker_end(str(d), str(seg)) == 19  # the closed log's end is recorded

    def entries(start: int, end: int) -> list[LogEntry]:
        return [e for e in LogReader(view) if start <= e.position < end]

    assert judge_files(str(d), 0, last, entries) is None
    assert marker_end(str(d), str(seg), len(view)) is None
    assert marker_end(str(d), str(seg), seg.stat().st_size) == 19
    with Log(d, writable=False) as fresh:
        assert [r.offset for r in fresh.records()] == list(range(19))
