"""A seeded random damage campaign: never wrong, never silent, never down.

Each seed copies one partition directory (a read shape, tests/read_shapes.py, or a real
broker's fixture partition), damages it at random (bits flipped and bytes overwritten
anywhere, above all outside the CRC: base offset, batch length, partition leader epoch,
magic; index, time index and ``.txnindex`` entries; the producer snapshot; the leader-epoch
checkpoint; files cut short; a middle segment's file removed or emptied; a segment renamed or
copied under an overlapping name; leftover ``.cleaned``/``.swap``/``.deleted`` files) and runs
every reader on it in a child process with a time limit:

- ``Log`` opened read-only: ``records()``, ``read_arrow()``, serve's Fetch read
  (``Log.fetch(verify_crcs=True)``, whole batches parsed as a client does), ``offsets_for_times``
  (serve's ListOffsets) for a few timestamps;
- ``kafkalog verify``, ``kafkalog dump --deep-iteration`` of every damaged segment file,
  ``kafkalog cat``;
- the Spark source's Python read (planner and tasks), with and without ``failOnDataLoss``.

The oracle is a brute-force decode of the undamaged copy (:func:`read_shapes.truth`) and the
damaged files: a reader either returns exactly the undamaged records it returns (no record
that differs, none twice, in offset order) and all of them, or says so, naming a damaged file
(its 20-digit base offset or its name) in its error or in a WARNING; a torn tail (the last
``.log`` cut short or followed by bytes) may end the answer early without a word. It never
raises anything but a kafkalog error, never hangs, never changes a byte or an mtime. Answers
by time are held to the same reader's answer on the undamaged copy (that answer is proven
against a brute force by tests/test_read_path_differential.py).

Run by hand with more seeds (each failure prints its seed, its damage and the reader)::

    PYTHONPATH=src:tests python3 tests/damage_campaign.py --seeds 0-400
    PYTHONPATH=src:tests python3 tests/damage_campaign.py --seeds 17 -v   # one seed, told

tests/log/test_damage_campaign.py runs a few seeds in the suite.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import logging
import multiprocessing
import os
import random
import shutil
import struct
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kafkalog.errors import KafkalogError
from kafkalog.records import LogReader

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"

#: the read shapes a campaign draws from (a mix of v2, transactions, compaction gaps, legacy)
SHAPE_NAMES = (
    "v2-single-i1-codecs-roll",
    "v2-multi-i1-idempotent-roll",
    "v2-txn-multi-i1-roll",
    "v2-gaps-follower-multi-i1-roll",
    "v2-retention-multi-i1-roll",
    "v0-i1-roll",
    "v1-ihuge-roll",
    "v1-then-v2-i1",
    "v2-logappendtime-multi-i1-roll",
)

#: real brokers' partitions (tests/fixtures) a campaign draws from
FIXTURE_PARTITIONS = (
    "kafka-4.0-snapshot-javacode/v2-txn-0",
    "kafka-4.0-snapshot-javacode/v2-idempotent-0",
    "kafka-4.0-snapshot-javacode/v1-gzip-0",
    "kafka-0.9.0.1-broker/v0-segments-0",
)

#: seconds a reader may take on a damaged copy (the undamaged ones take well under one)
TIME_LIMIT = 60.0


# -- sources --------------------------------------------------------------------------------------
#: every source a campaign draws from, by number (a seed picks one)
SOURCES = (*(f"shape:{n}" for n in SHAPE_NAMES), *(f"fixture:{r}" for r in FIXTURE_PARTITIONS))


def source(root: Path, which: str) -> Path:
    """The partition directory ``which`` (of :data:`SOURCES`), written (a shape) or copied (a
    fixture) under ``root``, in a data directory of its own."""
    from read_shapes import write_shape

    kind, _, name = which.partition(":")
    if kind == "shape":
        return write_shape(root / "shapes" / name, name).directory
    d = root / "fixtures" / name.replace("/", "__") / Path(name).name
    shutil.copytree(FIXTURES / name, d)
    for p in d.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return d


# -- damage ---------------------------------------------------------------------------------------
@dataclasses.dataclass
class Damage:
    """What was done: words, the files touched (their names), and whether it is a torn tail
    (the last ``.log`` cut, its last batch damaged or followed by bytes: readers may end
    early without a word, but what they read is a prefix of the records)."""

    said: list[str] = dataclasses.field(default_factory=list)
    files: set[str] = dataclasses.field(default_factory=set)
    torn: bool = False

    def did(self, what: str, path: Path, torn: bool = False) -> None:
        self.said.append(f"{what}: {path.name}")
        self.files.add(path.name)
        self.torn = self.torn or torn


def _segments(d: Path) -> list[Path]:
    return sorted(p for p in d.glob("*.log") if p.is_file())


#: byte positions of a batch outside its CRC (v2: base offset, length, leader epoch, magic,
#: the CRC itself) and a few inside it (attributes, last offset delta, record count)
OUTSIDE_CRC = (*range(0, 8), *range(8, 12), *range(12, 16), 16, *range(17, 21))
INSIDE_CRC = (21, 22, 23, 24, 25, 26, 57, 58, 59, 60, 61, 62, 70)


def _flip(rng: random.Random, data: bytearray, at: int) -> None:
    data[at] ^= 1 << rng.randrange(8) if rng.random() < 0.6 else rng.randrange(1, 256)


def _rewrite(path: Path, data: bytes | bytearray) -> None:
    path.write_bytes(bytes(data))


def damage_log_bytes(rng: random.Random, d: Path, dmg: Damage) -> None:
    segs = [p for p in _segments(d) if p.stat().st_size]
    if not segs:
        return
    seg = rng.choice(segs)
    data = bytearray(seg.read_bytes())
    entries: list[tuple[int, int]] = []
    with contextlib.suppress(KafkalogError):  # damaged already (an earlier damage)
        entries += ((e.position, e.size_in_bytes) for e in LogReader(bytes(data)))
    position, size = rng.choice(entries) if entries else (0, len(data))
    # the log's last batch damaged is what a crash can leave (a torn write): the end of the
    # log, where readers stop without a word (kafkalog.log.damage)
    torn = seg == _segments(d)[-1] and bool(entries) and position == entries[-1][0]
    how = rng.random()
    if how < 0.6:
        at = position + min(rng.choice(OUTSIDE_CRC), size - 1)
        _flip(rng, data, at)
        dmg.did(f"flip byte {at} (entry at {position}, +{at - position})", seg, torn)
    elif how < 0.8:
        at = position + min(rng.choice(INSIDE_CRC), size - 1)
        _flip(rng, data, at)
        dmg.did(f"flip byte {at} (entry at {position}, +{at - position})", seg, torn)
    else:
        at = rng.randrange(len(data))
        n = rng.randint(1, 16)
        data[at : at + n] = bytes(rng.randrange(256) for _ in range(len(data[at : at + n])))
        last = seg == _segments(d)[-1] and bool(entries) and at + n > entries[-1][0]
        dmg.did(f"overwrite {n} bytes at {at}", seg, last)
    _rewrite(seg, data)


def damage_other_bytes(rng: random.Random, d: Path, dmg: Damage) -> None:
    """A byte flipped or an entry overwritten in an index file, a snapshot or a checkpoint."""
    kinds = [".index", ".timeindex", ".txnindex", ".snapshot"]
    files = [p for k in kinds for p in d.glob("*" + k) if p.stat().st_size]
    files += [p for p in (d / "leader-epoch-checkpoint",) if p.exists() and p.stat().st_size]
    if not files:
        return
    path = rng.choice(files)
    data = bytearray(path.read_bytes())
    width = {".index": 8, ".timeindex": 12, ".txnindex": 34}.get(path.suffix, 1)
    if width > 1 and rng.random() < 0.5:
        entry = rng.randrange(len(data) // width) * width
        field = rng.choice(range(0, width, 4))
        value = rng.choice((0, 1, -1, 0x7FFFFFFF, rng.randrange(1 << 16)))
        struct.pack_into(">i", data, entry + field, value)
        dmg.did(f"entry at {entry}, field +{field} = {value}", path)
    else:
        at = rng.randrange(len(data))
        _flip(rng, data, at)
        dmg.did(f"flip byte {at}", path)
    _rewrite(path, data)


def truncate(rng: random.Random, d: Path, dmg: Damage) -> None:
    kinds = [".log", ".log", ".index", ".timeindex", ".txnindex", ".snapshot"]
    files = [p for p in d.glob("*" + rng.choice(kinds)) if p.is_file() and p.stat().st_size]
    if not files:
        return
    path = rng.choice(files)
    data = path.read_bytes()
    cut = rng.randrange(len(data))
    _rewrite(path, data[:cut])
    dmg.did(f"cut to {cut} of {len(data)} bytes", path, torn=path == _segments(d)[-1])


def append_tail(rng: random.Random, d: Path, dmg: Damage) -> None:
    last = _segments(d)[-1]
    junk = bytes(rng.randrange(256) for _ in range(rng.randint(1, 80)))
    with open(last, "ab") as f:
        f.write(junk if rng.random() < 0.5 else bytes(len(junk)))
    dmg.did(f"{len(junk)} bytes appended", last, torn=True)


def middle_file(rng: random.Random, d: Path, dmg: Damage) -> None:
    """A middle segment's file removed or emptied (every file of it, or one)."""
    segs = _segments(d)
    if len(segs) < 3:
        return
    seg = rng.choice(segs[1:-1])
    suffix = rng.choice((".log", ".index", ".timeindex", ".txnindex", "*"))
    files = list(d.glob(seg.name[:20] + ".*")) if suffix == "*" else [seg.with_suffix(suffix)]
    empty = rng.random() < 0.5
    for p in files:
        if not p.exists():
            continue
        if empty:
            _rewrite(p, b"")
        else:
            p.unlink()
        dmg.did("emptied" if empty else "removed", p)


def renamed(rng: random.Random, d: Path, dmg: Damage) -> None:
    """A segment's files renamed to another base offset, a little above or below."""
    segs = _segments(d)
    seg = rng.choice(segs)
    base = int(seg.name[:20])
    new = max(0, base + rng.choice((-3, -1, 1, 2, 50)))
    if any(int(p.name[:20]) == new for p in segs):
        return
    moved = [seg.with_suffix(s) for s in (".log", ".index", ".timeindex", ".txnindex")]
    moved = [p for p in moved if p.exists()] if rng.random() < 0.5 else [seg]
    for p in moved:
        target = d / f"{new:020d}{p.suffix}"
        p.rename(target)
        dmg.did(f"renamed from {p.name}", target)
        dmg.files.add(p.name)


def duplicate(rng: random.Random, d: Path, dmg: Damage) -> None:
    """A copy of a segment's ``.log`` under another segment's-range name (overlapping)."""
    segs = _segments(d)
    seg = rng.choice(segs)
    base = int(seg.name[:20])
    new = base + rng.randint(1, 5)
    target = d / f"{new:020d}.log"
    if target.exists():
        return
    shutil.copyfile(seg, target)
    dmg.did(f"a copy of {seg.name}", target)
    dmg.files.add(seg.name)


def leftover(rng: random.Random, d: Path, dmg: Damage) -> None:
    """A ``.cleaned``, ``.swap`` or ``.deleted`` file beside a segment, a copy of it (maybe
    damaged) or of another one."""
    segs = _segments(d)
    seg = rng.choice(segs)
    source = rng.choice(segs)
    suffix = rng.choice((".cleaned", ".swap", ".deleted"))
    which = rng.choice((".log", ".index", ".timeindex"))
    target = seg.with_suffix(which + suffix)
    data = (
        bytearray(source.with_suffix(which).read_bytes())
        if source.with_suffix(which).exists()
        else bytearray()
    )
    if data and rng.random() < 0.5:
        _flip(rng, data, rng.randrange(len(data)))
    target.write_bytes(bytes(data))
    dmg.did(f"left over ({source.with_suffix(which).name}, {len(data)} bytes)", target)
    dmg.files.add(seg.name)


DAMAGERS: tuple[tuple[Callable[[random.Random, Path, Damage], None], float], ...] = (
    (damage_log_bytes, 5),
    (damage_other_bytes, 3),
    (truncate, 2),
    (append_tail, 0.5),
    (middle_file, 1.5),
    (renamed, 1),
    (duplicate, 1),
    (leftover, 1),
)


def damage(rng: random.Random, d: Path) -> Damage:
    dmg = Damage()
    for _ in range(rng.choice((1, 1, 1, 2))):
        fn = rng.choices([f for f, _ in DAMAGERS], [w for _, w in DAMAGERS])[0]
        fn(rng, d, dmg)
    return dmg


# -- readers --------------------------------------------------------------------------------------
Rows = list[tuple[int, str | None, str | None]]


def _hex(b: bytes | None) -> str | None:
    return None if b is None else bytes(b).hex()


def read_records(d: Path) -> Rows:
    from kafkalog.log import Log

    with Log(d, writable=False) as log:
        return [(r.offset, _hex(r.key), _hex(r.value)) for r in log.records()]


def read_arrow(d: Path) -> Rows:
    from kafkalog.log import Log

    with Log(d, writable=False) as log:
        t = log.read_arrow()
    return list(
        zip(
            t.column("offset").to_pylist(),
            [_hex(k) for k in t.column("key").to_pylist()],
            [_hex(v) for v in t.column("value").to_pylist()],
            strict=True,
        )
    )


def read_fetch(d: Path) -> Rows:
    """Serve's Fetch read: whole batches from the offset asked, CRCs checked as serve does,
    parsed as a client does, to an empty answer."""
    from kafkalog.log import Log

    out: Rows = []
    with Log(d, writable=False) as log:
        offset = log.log_start_offset
        while True:
            info = log.fetch(offset, 1 << 15, verify_crcs=True)
            if info.region is None:
                break
            data = info.region.read()
            if not data:
                break
            moved = False
            for entry in LogReader(data, verify_crc=True):
                if not entry.is_control:
                    out += [
                        (r.offset, _hex(r.key), _hex(r.value))
                        for r in entry.records()
                        if r.offset >= offset
                    ]
                if entry.last_offset + 1 > offset:
                    offset, moved = entry.last_offset + 1, True
            if not moved:
                raise AssertionError(f"fetch at {offset} returned no batch past it: a loop")
    return out


def read_times(d: Path, stamps: list[int]) -> list[Any]:
    from kafkalog.log import Log

    out: list[Any] = []
    with Log(d, writable=False) as log:
        for ts in stamps:
            found = log.offsets_for_times(ts)
            out.append(None if found is None else [found.timestamp, found.offset])
    return out


def _cli(*args: str) -> tuple[int, str, str]:
    from kafkalog.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as e:
            code = int(e.code or 0) if not isinstance(e.code, str) else 2
    return code, out.getvalue(), err.getvalue()


def read_spark(d: Path, fail_on_data_loss: bool) -> Rows:
    from kafkalog.spark.options import parse_read_options
    from kafkalog.spark.plan import plan_read
    from kafkalog.spark.task import read_split

    topic = d.name.rsplit("-", 1)[0]
    opts = parse_read_options(
        {
            "path": str(d.parent),
            "subscribe": topic,
            "failOnDataLoss": str(fail_on_data_loss).lower(),
        }
    )
    splits, _ = plan_read(opts, settle_ms=0)
    out: Rows = []
    for split in splits:
        for batch in read_split(split, include_headers=False, fail_on_data_loss=fail_on_data_loss):
            out += zip(
                batch.column("offset").to_pylist(),
                [_hex(k) for k in batch.column("key").to_pylist()],
                [_hex(v) for v in batch.column("value").to_pylist()],
                strict=True,
            )
    return out


#: the readers whose answer is rows (offset, key, value)
ROW_READERS = (
    "records",
    "read_arrow",
    "fetch (serve)",
    "spark python",
    "spark python failOnDataLoss=false",
)


class _Said(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.said: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.said.append(record.getMessage())


def run_readers(d: Path, stamps: list[int], report: Callable[[str, dict[str, Any]], None]) -> None:
    """Every reader on ``d``; each one's outcome handed to ``report`` as it ends: ``rows`` or
    ``times`` or ``cli`` (exit, stdout, stderr), ``error`` (a kafkalog error's text) or
    ``crash`` (any other exception's traceback), and ``said`` (WARNINGs logged)."""
    readers: dict[str, Callable[[], Any]] = {
        "records": lambda: read_records(d),
        "read_arrow": lambda: read_arrow(d),
        "fetch (serve)": lambda: read_fetch(d),
        "offsets_for_times (serve ListOffsets)": lambda: read_times(d, stamps),
        "spark python": lambda: read_spark(d, True),
        "spark python failOnDataLoss=false": lambda: read_spark(d, False),
        "kafkalog verify": lambda: _cli("verify", str(d)),
        "kafkalog cat": lambda: _cli("cat", str(d)),
        "kafkalog dump": lambda: [
            _cli("dump", "--deep-iteration", "--files", str(p))
            for p in sorted(d.iterdir())
            if p.is_file() and p.name[:20].isdigit()
        ],
    }
    logger = logging.getLogger("kafkalog")
    for name, reader in readers.items():
        said = _Said()
        logger.addHandler(said)
        outcome: dict[str, Any]
        try:
            outcome = {"value": reader()}
        except KafkalogError as e:
            outcome = {"error": f"{type(e).__name__}: {e}"}
        except Exception as e:  # a finding: any other exception
            outcome = {"crash": f"{type(e).__name__}: {e}\n{traceback.format_exc()[-1500:]}"}
        finally:
            logger.removeHandler(said)
        outcome["said"] = said.said
        report(name, outcome)


def _child(d: str, stamps: list[int], queue: Any) -> None:
    logging.getLogger("kafkalog").setLevel(logging.WARNING)
    run_readers(Path(d), stamps, lambda name, o: queue.put((name, o)))
    queue.put(None)


def run_limited(d: Path, stamps: list[int], limit: float = TIME_LIMIT) -> dict[str, Any]:
    """:func:`run_readers` in a forked child, each reader given ``limit`` seconds; a reader
    that takes longer is reported as ``hang`` (the child is killed)."""
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child, args=(str(d), stamps, queue))
    child.start()
    out: dict[str, Any] = {}
    try:
        while True:
            try:
                item = queue.get(timeout=limit)
            except Exception:
                out["<hang>"] = {"hang": f"no reader ended within {limit} s after {list(out)}"}
                break
            if item is None:
                break
            out[item[0]] = item[1]
    finally:
        if child.is_alive():
            child.kill()
        child.join()
    if child.exitcode not in (0, None) and "<hang>" not in out and len(out) < 9:
        out["<died>"] = {"crash": f"the readers' process died: exit {child.exitcode}"}
    return out


# -- the oracle -----------------------------------------------------------------------------------
def snapshot(d: Path) -> dict[str, tuple[int, bytes]]:
    """Every file's bytes and mtime (and each directory's entries)."""
    return {
        str(p.relative_to(d.parent)): (
            (p.stat().st_mtime_ns, p.read_bytes()) if p.is_file() else (0, b"<dir>")
        )
        for p in sorted(d.parent.rglob("*"))
    }


def _names(text: str, dmg: Damage) -> bool:
    """Whether ``text`` names a damaged file (its name, or its segment's 20-digit base)."""
    return any(f in text or f[:20] in text for f in dmg.files) or "offsets " in text


def _rows_check(rows: Rows, truth: dict[int, tuple[str | None, str | None]]) -> str | None:
    """None if every row is an undamaged record, in offset order, none twice."""
    last = -1
    for offset, key, value in rows:
        if offset <= last:
            return f"offset {offset} after {last}"
        last = offset
        want = truth.get(offset)
        if want is None:
            return f"offset {offset} is no record of the undamaged log"
        if want != (key, value):
            return f"offset {offset}: key/value differ from the undamaged log's"
    return None


def judge(
    dmg: Damage,
    truth: dict[int, tuple[str | None, str | None]],
    pristine: dict[str, Any],
    got: dict[str, Any],
) -> list[str]:
    """The findings in one damaged copy's outcomes (empty: every reader kept the promise)."""
    findings: list[str] = []
    full = len(truth)
    # a gap between segments' offsets (a segment lost, or compaction's): reads say it and go
    # on; a search by time answers from the records still there
    gap = any("are in no batch" in m for o in got.values() for m in o.get("said", []))
    for name, o in got.items():
        said = " | ".join(o.get("said", []))
        if "hang" in o or "crash" in o:
            findings.append(f"{name}: {o.get('hang') or o.get('crash')}")
            continue
        if "error" in o:
            if not _names(o["error"], dmg):
                findings.append(f"{name}: an error naming no damaged file: {o['error'][:300]}")
            continue
        value = o["value"]
        if name.startswith("offsets_for_times"):
            if value != pristine[name]["value"] and not (_names(said, dmg) or gap or dmg.torn):
                findings.append(f"{name}: {value} where undamaged {pristine[name]['value']}")
            continue
        if name == "kafkalog dump":
            for code, _, err in value:
                if "Traceback" in err or "internal error" in err or code not in (0, 1, 2):
                    findings.append(f"{name}: exit {code}: {err[-300:]}")
            continue
        if name == "kafkalog verify":
            code, out, err = value
            if "Traceback" in err or "internal error" in err or code not in (0, 1, 2):
                findings.append(f"{name}: exit {code}: {err[-300:]}")
            continue  # whether it passes: held against the readers below
        if name == "kafkalog cat":
            code, out, err = value
            if "Traceback" in err or "internal error" in err or code not in (0, 1, 2):
                findings.append(f"{name}: exit {code}: {err[-300:]}")
                continue
            lines = out.splitlines()
            mine = pristine[name]["lines"]
            bad = [ln for ln in lines if ln not in mine]
            if bad:
                findings.append(f"{name}: a line the undamaged log does not print: {bad[0][:200]}")
            elif len(lines) < len(mine) and not _names(err + said, dmg) and not dmg.torn:
                findings.append(
                    f"{name}: {len(lines)} of {len(mine)} records, exit {code}: {err[-300:]}"
                )
            continue
        wrong = _rows_check(value, truth)
        if wrong:
            findings.append(f"{name}: {wrong}")
        elif len(value) < full and not _names(said, dmg) and not dmg.torn:
            findings.append(f"{name}: {len(value)} of {full} records, nothing said")
        elif (
            dmg.torn
            and len(value) < full
            and not _names(said, dmg)
            and value != [(o_, *truth[o_]) for o_ in sorted(truth)[: len(value)]]
        ):
            findings.append(f"{name}: a torn tail read is no prefix")
    verify = got.get("kafkalog verify", {}).get("value")
    if verify and verify[0] == 0 and not _names(verify[1] + verify[2], dmg):
        # verify passed: every reader must then have read everything, right
        short = [
            n
            for n, o in got.items()
            if n in ROW_READERS and "value" in o and len(o["value"]) != full
        ]
        refused = [n for n, o in got.items() if "error" in o]
        if (short or refused) and not dmg.torn:
            findings.append(f"kafkalog verify passed while {short + refused} did not read it all")
    return findings


# -- the campaign ---------------------------------------------------------------------------------
@dataclasses.dataclass
class Prepared:
    source: Path
    truth: dict[int, tuple[str | None, str | None]]
    stamps: list[int]
    pristine: dict[str, Any]


def prepare(source: Path) -> Prepared:
    """The brute force's records of ``source`` and every reader's undamaged answer."""
    from read_shapes import truth

    t = truth(source)
    data = {r.offset: (_hex(r.key), _hex(r.value)) for r in t.records if not r.control}
    rng = random.Random(len(data))
    good = [r.timestamp for r in t.records if r.timestamp >= 0]
    stamps = sorted(rng.sample(good, min(4, len(good)))) + ([max(good) + 1] if good else [])
    pristine: dict[str, Any] = {}
    run_readers(source, stamps, lambda name, o: pristine.__setitem__(name, o))
    for name, o in pristine.items():
        if "value" not in o:
            raise AssertionError(f"{source}: {name} fails undamaged: {o}")
    pristine["kafkalog cat"]["lines"] = set(pristine["kafkalog cat"]["value"][1].splitlines())
    return Prepared(source, data, stamps, pristine)


class Campaign:
    """Seeds run one after the other over sources prepared when a seed first picks them;
    ``tally`` counts the readers' outcomes (read whole, read short, refused) so a run that
    damaged nothing a reader noticed shows."""

    def __init__(self, root: Path, verbose: bool = False) -> None:
        self.root = root
        self.verbose = verbose
        self.prepared: dict[str, Prepared] = {}
        self.tally: dict[str, int] = {"read whole": 0, "read short": 0, "refused": 0}

    def _prepared(self, which: str) -> Prepared:
        if which not in self.prepared:
            self.prepared[which] = prepare(source(self.root / "src", which))
        return self.prepared[which]

    def one(self, seed: int) -> list[str]:
        """Seed ``seed``'s damage and every reader's outcome on it: its findings."""
        rng = random.Random(seed)
        p = self._prepared(SOURCES[rng.randrange(len(SOURCES))])
        scratch = self.root / "scratch" / f"seed{seed}"
        d = scratch / p.source.parent.name / p.source.name
        shutil.copytree(p.source.parent, d.parent)
        dmg = damage(rng, d)
        if not dmg.said:
            shutil.rmtree(scratch, ignore_errors=True)
            return []
        before = snapshot(d)
        got = run_limited(d, p.stamps)
        findings = judge(dmg, p.truth, p.pristine, got)
        after = snapshot(d)
        if after != before:
            changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
            findings.append(f"files changed: {changed}")
        for name in ROW_READERS:
            o = got.get(name, {})
            if "error" in o:
                self.tally["refused"] += 1
            elif "value" in o:
                whole = len(o["value"]) == len(p.truth)
                self.tally["read whole" if whole else "read short"] += 1
        where = f"seed {seed} ({p.source.parent.name}/{p.source.name}: {'; '.join(dmg.said)})"
        if self.verbose:
            print(where)
            for name, o in got.items():
                o = dict(o)
                value = o.get("value")
                if name in ROW_READERS and isinstance(value, list):
                    o["value"] = f"{len(value)} rows"
                print(f"  {name}: {json.dumps(o, default=str)[:600]}")
        shutil.rmtree(scratch, ignore_errors=True)
        return [f"{where}: {f}" for f in findings]


def campaign(seeds: list[int], verbose: bool = False) -> tuple[list[str], dict[str, int]]:
    """Every seed's findings (printed as found), and the readers' outcomes tallied."""
    findings: list[str] = []
    with tempfile.TemporaryDirectory(prefix="kafkalog-campaign-") as tmp:
        run = Campaign(Path(tmp), verbose)
        for seed in seeds:
            found = run.one(seed)
            for f in found:
                print(f, flush=True)
            findings += found
    return findings, run.tally


def _seeds(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="0-49", help="e.g. 0-400 or 3,17,40-45")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    started = time.monotonic()
    seeds = _seeds(args.seeds)
    findings, tally = campaign(seeds, args.verbose)
    took = time.monotonic() - started
    print(f"{len(seeds)} seeds, {len(findings)} findings, {took:.0f} s; row readers: {tally}")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
