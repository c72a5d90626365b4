"""Kinds of damage done to a partition log's files, and a log to do them to: the damage
matrix's shared parts (tests/log/test_damage.py, tests/server/test_serve_damage.py)."""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

from kafkalog.errors import CorruptRecordError, DamagedLogError, KafkalogError
from kafkalog.log import Log, TopicConfig
from kafkalog.records import LogReader, Record, RecordBatch
from kafkalog.records.reader import LogEntry

Reader = Callable[[Path], list[int]]


def entries(path: Path) -> list[tuple[int, int]]:
    """(position, size) of every entry of a ``.log``."""
    return [(e.position, e.size_in_bytes) for e in LogReader(path.read_bytes())]


def segments(d: Path) -> list[Path]:
    return sorted(d.glob("*.log"))


def holding(d: Path) -> list[Path]:
    """The segments holding batches (a cleaner may have emptied some)."""
    return [p for p in segments(d) if p.stat().st_size]


def flip(field_offset: int, where: str = "middle") -> Callable[[Path], None]:
    def damage(d: Path) -> None:
        segs = holding(d)
        seg = segs[0] if where == "first" else segs[len(segs) // 2]
        found = entries(seg)
        position, size = found[len(found) // 2]
        data = bytearray(seg.read_bytes())
        data[position + min(field_offset, size - 1)] ^= 0xFF
        seg.write_bytes(bytes(data))

    return damage


def hole(d: Path) -> None:
    seg = holding(d)[0]
    data = seg.read_bytes()
    mid = len(data) // 2
    seg.write_bytes(data[:mid] + data[mid + 60 :])


def garbage(d: Path) -> None:
    seg = holding(d)[0]
    seg.write_bytes(bytes((i * 131 + 7) % 251 for i in range(max(200, seg.stat().st_size))))


def absurd_last(d: Path) -> None:
    seg = segments(d)[-1]
    position, _ = entries(seg)[-1]
    data = bytearray(seg.read_bytes())
    struct.pack_into(">i", data, position + 8, 0x7FFFFFFF)
    seg.write_bytes(bytes(data))


def absurd_tail(d: Path) -> None:
    """20 bytes after the last batch of the last segment whose size field reads ~2 GB: what a
    crash can leave (the torn page of an append), nothing valid after them."""
    with open(segments(d)[-1], "ab") as f:
        f.write(struct.pack(">qi", 0x1122334455667788, 0x7FFFFFF0) + bytes(range(1, 9)))


def cut_last(d: Path) -> None:
    seg = segments(d)[-1]
    data = seg.read_bytes()
    seg.write_bytes(data[:-5])


def zero_tail(d: Path) -> None:
    with open(segments(d)[-1], "ab") as f:
        f.write(b"\0" * 3000)


def cut_middle_segment(d: Path) -> None:
    segs = holding(d)
    if segs and segs[-1] == segments(d)[-1]:
        segs = segs[:-1]  # an earlier segment, not the last
    if not segs:
        raise AssertionError("needs a log of several segments")  # the test skips such logs
    seg = segs[(len(segs) - 1) // 2]
    data = seg.read_bytes()
    seg.write_bytes(data[:-5])


def flip_base(which: str) -> Callable[[Path], None]:
    """A byte of a batch's base offset flipped so that it reads ~16.7 million higher (outside
    the CRC: only the offsets around it tell), in the middle segment: the batch in its middle,
    its first or its last (then only the next segment's base tells)."""

    def damage(d: Path) -> None:
        segs = holding(d)
        if len(segs) > 1 and segs[-1] == segments(d)[-1]:
            segs = segs[:-1]  # never the last of several
        seg = segs[(len(segs) - 1) // 2]
        found = entries(seg)
        position, _ = found[{"middle": len(found) // 2, "first": 0, "last": -1}[which]]
        data = bytearray(seg.read_bytes())
        data[position + 5] ^= 0xFF
        seg.write_bytes(bytes(data))

    return damage


def shifted_batch(d: Path, delta: int) -> tuple[Path, int]:
    """Move the base offset of a batch in the middle segment by ``delta`` (outside the CRC: a
    low bit flipped), where real writers' batches of several records make it overlap a
    neighbour by less than a batch: the batch after it (``delta`` > 0) or before it (< 0) still
    ends past it, so only the batches' spans tell which one is out of line. The batch chosen
    has two neighbours on each side in its segment whose offsets adjoin (moved into a gap
    compaction left, a base offset is out of line with nothing: only an index entry could
    tell; next to one, a batch of one record moved by less than the gap could as well be
    its neighbour moved the other way), the widest such; the segment and the byte of the
    batch moved are returned (the one every reader must name)."""
    target = _shift_target(d)
    if target is None:
        raise AssertionError(f"{d}: needs a batch whose neighbours' offsets adjoin its own")
    seg, chosen = target
    data = bytearray(seg.read_bytes())
    offset = struct.unpack_from(">q", data, chosen.position)[0]
    struct.pack_into(">q", data, chosen.position, offset + delta)
    seg.write_bytes(bytes(data))
    return seg, chosen.position


def _shift_target(d: Path) -> tuple[Path, LogEntry] | None:
    """The segment and batch :func:`shifted_batch` moves, or None when there is none."""
    segs = holding(d)
    if len(segs) > 1 and segs[-1] == segments(d)[-1]:
        segs = segs[:-1]  # never the last of several
    if not segs:
        return None
    seg = segs[(len(segs) - 1) // 2]
    found = list(LogReader(seg.read_bytes()))
    adjoining = [
        window[2]
        for window in zip(found, found[1:], found[2:], found[3:], found[4:], strict=False)
        if all(a.last_offset + 1 == _first(b) for a, b in itertools.pairwise(window))
    ]
    if not adjoining:
        return None
    return seg, max(adjoining, key=lambda e: e.last_offset - _first(e))


def _first(entry: LogEntry) -> int:
    """An entry's first offset (a v0/v1 wrapper's, from its inner messages)."""
    if isinstance(entry, RecordBatch):
        return entry.base_offset
    inner = entry.records()
    return inner[0].offset if inner else entry.last_offset


def shift_base(delta: int) -> Callable[[Path], None]:
    def damage(d: Path) -> None:
        shifted_batch(d, delta)

    return damage


def flip_last_base(jump: str) -> Callable[[Path], None]:
    """The base offset of the log's last batch flipped (outside the CRC; no batch or segment
    after it to show it out of line): ``high`` ~16.7 million higher, ``low`` 2 lower. Only the
    segment's own evidence tells (kafkalog.log.last_batch; tests/log/test_damage_last_batch.py).
    The ``.log``'s mtime is kept: a byte flipped where it lies (a disk, a copy), not an append."""

    def damage(d: Path) -> None:
        seg = holding(d)[-1]
        position, _ = entries(seg)[-1]
        data = bytearray(seg.read_bytes())
        if jump == "high":
            data[position + 5] ^= 0xFF
        else:
            base = struct.unpack_from(">q", data, position)[0]
            struct.pack_into(">q", data, position, base - 2)
        stat = seg.stat()
        seg.write_bytes(bytes(data))
        os.utime(seg, ns=(stat.st_atime_ns, stat.st_mtime_ns))

    return damage


def last_batch_evidence(d: Path) -> bool:
    """A brute force, independent of kafkalog's readers: whether the last segment's index
    files key an offset of its last batch past the batch before (then a base offset flipped
    ~16.7 million up leaves that offset in no batch). Trailing zero entries (a preallocated
    file) and entries keying the segment's base are no evidence. A v1 wrapper's inner offsets
    are relative to its own (a flip moves them all), a v0 message's is its own."""
    seg = holding(d)[-1]
    if seg != sorted(d.glob("*.log"))[-1]:
        return False
    base = int(seg.name[:20])
    found = list(LogReader(seg.read_bytes()))
    last = found[-1]
    previous = found[-2].last_offset if len(found) > 1 else base - 1
    if not isinstance(last, RecordBatch) and last.magic == 0 and last.is_compressed:
        return False  # a v0 wrapper's inner offsets are absolute: its own moves none of them
    # a v0/v1 wrapper's first offset is its first inner message's (an index may key any)
    first = _first(last)
    keyed: list[int] = []
    for suffix, size, at in ((".index", 8, 0), (".timeindex", 12, 8)):
        path = seg.with_suffix(suffix)
        if not path.exists():
            continue
        data = path.read_bytes()
        rel = [
            struct.unpack_from(">i", data, k + at)[0]
            for k in range(0, len(data) - size + 1, size)
            if any(data[k : k + size])
        ]
        keyed += [base + r for r in rel if r > 0]
    return any(previous < o <= last.last_offset and o >= first for o in keyed)


def missing_log(d: Path) -> None:
    """A segment's ``.log`` deleted by hand, its ``.index`` left: the middle one, or the last
    of two."""
    segs = segments(d)
    if len(segs) < 2:
        raise AssertionError("needs a log of several segments")  # the test skips such logs
    victim = next(p for p in holding(d) if p != segs[0])  # holding records, not the first
    if not victim.with_suffix(".index").exists():
        raise AssertionError("needs the segment's index file")
    victim.unlink()


def _middle_holding(d: Path) -> Path:
    """A segment holding batches with segments before and after it."""
    segs = segments(d)
    inner = [p for p in holding(d) if segs[0] != p != segs[-1]]
    if not inner:
        raise AssertionError("needs a log of three segments or more")  # see applies
    return inner[(len(inner) - 1) // 2]


def _segment_removed(d: Path) -> Path:
    """Every file of a middle segment removed (``.log``, indexes, its snapshot): no index is
    left to show the loss, only the gap between its neighbours' offsets."""
    victim = _middle_holding(d)
    for p in d.glob(victim.name[:20] + ".*"):
        p.unlink()
    return victim


def _log_emptied(d: Path) -> Path:
    """A middle segment's ``.log`` truncated to 0 bytes (its indexes left)."""
    victim = _middle_holding(d)
    victim.write_bytes(b"")
    return victim


def _log_is_directory(d: Path) -> Path:
    """A middle segment's ``.log`` replaced by a directory of its name (what a restore or a
    script can leave): no bytes can be read from it."""
    victim = _middle_holding(d)
    victim.unlink()
    victim.mkdir()
    return victim


def _first_log_removed(d: Path) -> Path:
    """The first segment's ``.log`` removed, its index files left: the log now starts at the
    next segment (as retention leaves it, or a crash between its files' deletion)."""
    victim = segments(d)[0]
    victim.unlink()
    return victim


def _timeindex_removed(d: Path) -> Path:
    """A middle segment's ``.timeindex`` removed (Kafka's loader rebuilds it; a reader finds
    the segment's largest timestamp from its ``.log``'s mtime then, as Kafka does)."""
    victim = _middle_holding(d).with_suffix(".timeindex")
    victim.unlink()
    return victim


#: damage to a partition's files (not their bytes) -> its mutation, returning the file changed
FILE_DAMAGES: dict[str, Callable[[Path], Path]] = {
    "middle segment removed, every file": _segment_removed,
    "middle .log emptied": _log_emptied,
    "segment .log is a directory": _log_is_directory,
    "first segment's .log removed, its indexes left": _first_log_removed,
    "middle .timeindex removed": _timeindex_removed,
}

#: the kinds of :data:`FILE_DAMAGES` that leave a gap between two segments' offsets, as the
#: log cleaner leaves in a compacted topic: read across with a WARNING naming the offsets
#: (:func:`check_gap_said`), not an error
GAP_DAMAGES = ("middle segment removed, every file", "middle .log emptied")


def _unreadable_log(d: Path) -> None:
    _log_is_directory(d)


def _swap_garbage(d: Path) -> None:
    """A ``.swap`` of a middle segment's name holding bytes that are no batch (a cleaner
    flushes its output whole before naming it ``.swap``): completing the swap, as Kafka's
    loader would, would put it in place of that readable segment."""
    victim = _middle_holding(d)
    victim.with_name(victim.name + ".swap").write_bytes(bytes(range(7, 47)))


def _stray(suffix: str) -> Callable[[Path], None]:
    """A copy of a middle segment's ``.log`` left beside it under a name Kafka's loader
    deletes at start (``.deleted``, ``.cleaned``) or ignores (an editor's ``~``), or an
    empty ``-delete`` directory: no reader reads it, none may count its records twice."""

    def damage(d: Path) -> None:
        victim = _middle_holding(d)
        if suffix.endswith("-delete"):
            (d / f"{d.name}.0123456789abcdef{suffix}").mkdir()
        else:
            victim.with_name(victim.name + suffix).write_bytes(victim.read_bytes())

    return damage


def _swap_of_next(d: Path) -> Path:
    """A ``.swap`` by a middle segment's name holding a copy of the next segment's batches:
    whole, valid batches, so Kafka's loader completes it (the two segments replaced by it,
    the first one's records gone) as it completes a cleaner's interrupted swap. Returns the
    ``.swap``."""
    victim = _middle_holding(d)
    following = segments(d)[segments(d).index(victim) + 1]
    swap = victim.with_name(victim.name + ".swap")
    swap.write_bytes(following.read_bytes())
    return swap


#: a ``.swap`` of whole batches left in a partition -> its mutation, returning the file: a
#: read-only reader reads it in place of the segments it covers, as Kafka's loader would
#: complete it, and says so in a WARNING naming it and them (never in silence: a stray file's
#: swap hides records no cleaner dropped); tests/log/test_damage.py
SWAP_LEFTOVERS: dict[str, Callable[[Path], Path]] = {
    "a .swap holding the next segment's batches": _swap_of_next,
}

#: stray files in a partition directory: every reader reads every record, once
#: (:func:`check_every_reader`; not in :data:`DAMAGES`, whose kinds each cost records)
STRAY_FILES: dict[str, Callable[[Path], None]] = {
    "stray: a .log.deleted copy": _stray(".deleted"),
    "stray: a .log.cleaned copy": _stray(".cleaned"),
    "stray: an editor's .log~ copy": _stray("~"),
    "stray: a -delete directory": _stray("-delete"),
}


# structural fields of a v2 batch (and, at the same byte positions, of a v0/v1 entry)
FIELDS = {
    "base offset": 7,
    "length": 11,
    "magic": 16,
    "crc": 18,
    "attributes": 22,
    "last offset delta": 26,
    "max timestamp": 42,
    "producer id": 50,
    "record count": 60,
    "records": 70,
}


def _directory_for(name: str) -> Callable[[Path], None]:
    """A file of the partition (``name``: a middle segment's suffix, or a file of the
    partition's own) replaced by a directory of its name: it cannot be read (root reads every
    file whatever its mode, so this is the unreadable file tests running as root can make)."""

    def damage(d: Path) -> None:
        path = d / name if not name.startswith(".") else _middle_holding(d).with_suffix(name)
        path.unlink(missing_ok=True)
        path.mkdir()

    return damage


#: a file other than a ``.log`` that no reader can read -> its mutation: every reader reads
#: every record (it does not need the file) or names it at byte 0, never an OSError
#: (:func:`check_every_reader`)
FILE_AS_DIRECTORY: dict[str, Callable[[Path], None]] = {
    f"{name} is a directory": _directory_for(name)
    for name in (".index", ".timeindex", ".txnindex", ".snapshot", "leader-epoch-checkpoint")
}


def _renamed_above_first(d: Path) -> None:
    """A middle segment's files renamed to a base offset one above its first batch's (what
    a script or a restore can leave): its first records sit below its name, so offsets no
    longer only grow from segment to segment; the names are outside every CRC."""
    victim = _middle_holding(d)
    first = _first(next(iter(LogReader(victim.read_bytes()))))  # compaction: maybe > base
    for p in d.glob(victim.name[:20] + ".*"):
        p.rename(d / f"{first + 1:020d}{p.name[20:]}")


#: damage kind -> (mutation, whether it is a torn tail: then every record before it is read)
DAMAGES: dict[str, tuple[Callable[[Path], None], bool]] = {
    **{f"flip {name}": (flip(at), False) for name, at in FIELDS.items()},
    "flip first segment base offset": (flip(7, "first"), False),
    "hole of 60 bytes": (hole, False),
    "garbage .log": (garbage, False),
    "absurd last length": (absurd_last, True),
    "absurd bytes after the last batch": (absurd_tail, True),
    "last batch cut off": (cut_last, True),
    "zero tail": (zero_tail, True),
    "earlier segment cut off": (cut_middle_segment, False),
    "base offset +16.7M, middle batch": (flip_base("middle"), False),
    "base offset +16.7M, first batch of a segment": (flip_base("first"), False),
    "base offset +16.7M, last batch of a segment": (flip_base("last"), False),
    "segment .log missing, index left": (missing_log, False),
    "base offset +2, overlapping the batch after": (shift_base(2), False),
    "base offset -2, overlapping the batch before": (shift_base(-2), False),
    "segment .log is a directory": (_unreadable_log, False),
    "a .swap that is no batches": (_swap_garbage, False),
    "segment renamed one above its first offset": (_renamed_above_first, False),
}

#: the log's last batch, its base offset flipped: found only where the segment's own evidence
#: proves it (:func:`last_batch_evidence`, kafkalog.log.last_batch), so not in :data:`DAMAGES`
LAST_BATCH = "base offset +16.7M, last batch of the log"

#: kinds that need a log of several segments (a log of one has no earlier or middle one)
NEEDS_SEGMENTS = {
    "earlier segment cut off",
    "segment .log missing, index left",
    "base offset +16.7M, last batch of a segment",
}

#: kinds a read cannot skip: the open itself refuses (a ``.swap`` that is no batches decides
#: which segments the log has, so no read starts before it is moved out)
OPEN_REFUSES = {"a .swap that is no batches"}

#: kinds that need a segment holding batches between two others
NEEDS_MIDDLE = {
    "segment .log is a directory",
    "segment renamed one above its first offset",
    "a .swap that is no batches",
    *GAP_DAMAGES,
    *STRAY_FILES,
    *(k for k in FILE_AS_DIRECTORY if k.startswith(".")),
}

#: kinds that need a batch whose neighbours' offsets adjoin its own (:func:`shifted_batch`)
NEEDS_ADJOINING = {
    "base offset +2, overlapping the batch after",
    "base offset -2, overlapping the batch before",
}


def applies(damage: str, d: Path) -> bool:
    """Whether the log in ``d`` has what ``damage`` needs (several segments, or a batch with
    adjoining neighbours; a compacted log may have none)."""
    if damage in NEEDS_SEGMENTS:
        return len(segments(d)) >= 2
    if damage in NEEDS_MIDDLE:
        segs = segments(d)
        return any(segs[0] != p != segs[-1] for p in holding(d))
    if damage in NEEDS_ADJOINING:
        return _shift_target(d) is not None
    return True


def written(tmp: Path) -> Path:
    d = tmp / "written-0"
    with Log(d, TopicConfig(segment_bytes=4096)) as log:
        for i in range(300):
            log.append_records([Record.of(b"value %05d" % i, key=b"k%d" % (i % 7))])
    return d


# -- the readers of the matrix, and its check ------------------------------------------------
def records(d: Path) -> list[int]:
    with Log(d, writable=False) as log:
        return [r.offset for r in log.records()]


def arrow(d: Path) -> list[int]:
    with Log(d, writable=False) as log:
        return [int(o) for o in log.read_arrow().column("offset").to_pylist()]


def writable(d: Path) -> list[int]:
    with Log(d, TopicConfig(segment_bytes=4096), had_clean_shutdown=False) as log:
        return [r.offset for r in log.records()]


def planner(d: Path) -> list[int]:
    from kafkalog.spark.options import parse_read_options
    from kafkalog.spark.plan import plan_read
    from kafkalog.spark.task import read_split

    topic = d.name.rsplit("-", 1)[0]
    opts = parse_read_options({"path": str(d.parent), "subscribe": topic})
    splits, _ = plan_read(opts)
    out: list[int] = []
    for split in splits:
        for batch in read_split(split, include_headers=False):
            out.extend(int(o) for o in batch.column("offset").to_pylist())
    return out


def tail(d: Path) -> list[int]:
    from kafkalog.log.tail import TailReader

    reader = TailReader(str(d), start_offset=0)
    out: list[int] = []
    try:
        while records := reader.poll(timeout=0):
            out.extend(r.offset for r in records)
    finally:
        reader.close()
    return out


def fetch(d: Path) -> list[int]:
    """Serve's read path: ``Log.read`` (Kafka's LocalLog.read) from offset to offset, the
    bytes parsed as a client would."""
    out: list[int] = []
    with Log(d, writable=False) as log:
        offset = log.log_start_offset
        while True:  # to an empty answer at the end, as a consumer polls
            data = log.read(offset, 1 << 16)
            if not data:
                break
            try:  # a client checks each CRC, and refuses the fetch (never reads it wrong)
                entries = list(LogReader(data, verify_crc=True))
            except CorruptRecordError as e:
                raise KafkalogError(f"{d}: a fetch from {offset}: at byte {e.position}") from e
            for entry in entries:
                out.extend(
                    r.offset for r in entry.records() if r.offset >= offset and not entry.is_control
                )
                offset = max(offset, entry.last_offset + 1)
    return out


READERS: dict[str, Reader] = {  # the writable open last: it may cut a torn tail
    "records": records,
    "fetch (serve's read)": fetch,
    "TailReader": tail,
    "read_arrow": arrow,
    "spark planner": planner,
    "writable open": writable,
}


def files_of(d: Path) -> dict[str, bytes]:
    # the writer's own lock file is written by every writable open; everything else must stay
    return {
        p.name: p.read_bytes() if not p.is_dir() else b"<directory>"
        for p in sorted(d.iterdir())
        if p.name != ".kafkalog.lock"
    }


def check_every_reader(damage: str, name: str, source: Path, tmp_path: Path) -> None:
    """One damage kind done to a copy of ``source``, read by every reader (:data:`READERS`):
    each raises naming the file and byte, or reads every record (a torn tail: every record
    before it); no file changes but a writable open's cut. Also the matrix of serve-written
    sources (tests/server/test_serve_damage_matrix.py)."""
    if damage in DAMAGES:
        mutate, torn = DAMAGES[damage]
    else:
        mutate, torn = {**STRAY_FILES, **FILE_AS_DIRECTORY}[damage], False
    if not applies(damage, source):
        return  # e.g. a log of one segment has no earlier segment (its cut is a torn tail)
    pristine = records(source)
    last_entry = [e for s in segments(source) for e in LogReader(s.read_bytes())][-1]
    in_last_entry = len(last_entry.records())
    d = tmp_path / name.replace("/", "_") / source.name
    shutil.copytree(source, d)
    for extra in d.glob(".kafkalog*"):
        extra.unlink()
    mutate(d)
    before = files_of(d)
    for reader_name, reader in READERS.items():
        where = f"{damage} / {name} / {reader_name}"
        try:
            got = reader(d)
        except KafkalogError as e:
            assert not torn, f"{where}: a torn tail raised {e}"
            assert str(d) in str(e) and "byte" in str(e), f"{where}: {e}"
            if reader_name == "writable open":
                # the next step: repair, or (a file no one can read) making it readable
                assert isinstance(e, DamagedLogError), where
                assert any(
                    step in str(e)
                    for step in ("kafkalog repair", "readable file", "out of the partition")
                ), where
            continue
        if torn:
            # a torn tail: every record of the whole batches before it
            assert got == pristine[: len(got)], where
            assert len(got) >= len(pristine) - in_last_entry, where
        else:
            assert got == pristine, f"{where}: {len(got)} of {len(pristine)} records, no error"
        if reader_name != "writable open":
            assert files_of(d) == before, f"{where}: files changed"
    after = files_of(d)
    if damage.startswith("stray: "):
        # the writable open read it all (it may write snapshots, checkpoints); of the files
        # it found, it removed only what Kafka's loader removes at start (a deletion or a
        # cleaning a crash interrupted: the log does not hold their records), and left every
        # segment's bytes as they were
        kept = {k for k in before if not k.endswith((".deleted", ".cleaned"))}
        assert kept <= set(after), f"{damage} / {name}: removed {kept - set(after)}"
        logs = {k for k in kept if k.endswith(".log")}
        assert all(after[k] == before[k] for k in logs), f"{damage} / {name}: a .log changed"
    elif not torn:
        assert after == before, f"{damage} / {name}: files changed"


# -- the .txnindex: what read_committed readers drop records by (kafkalog.log.txn_check) -------
def _txn_entries(d: Path) -> list[tuple[Path, int]]:
    """(file, byte) of every whole ``.txnindex`` entry of the partition, in log order."""
    out = []
    for p in sorted(d.glob("*.txnindex")):
        size = p.stat().st_size
        out += [(p, at) for at in range(0, size - size % 34, 34)]
    return out


#: which ``.txnindex`` entry the damages change: the log's last (its producer wrote earlier
#: batches: real writers' producers run many transactions), or its first (in a segment below
#: the active one: what the cleaner reads)
TXN_ENTRY = {"pick": -1}


def _rewrite_entry(d: Path, change: Callable[[list[int]], None]) -> tuple[Path, int]:
    """The chosen ``.txnindex`` entry (:data:`TXN_ENTRY`), its fields (version, producer
    id, first offset, last offset, last stable offset) changed by ``change``; returns its
    file and byte."""
    path, at = _txn_entries(d)[TXN_ENTRY["pick"]]
    data = bytearray(path.read_bytes())
    fields = list(struct.unpack_from(">hqqqq", data, at))
    change(fields)
    struct.pack_into(">hqqqq", data, at, *fields)
    path.write_bytes(bytes(data))
    return path, at


def _txn_producer_flipped(d: Path) -> tuple[Path, int]:
    def change(f: list[int]) -> None:
        f[1] ^= 1

    return _rewrite_entry(d, change)


def _txn_first_past_batches(d: Path) -> tuple[Path, int]:
    def change(f: list[int]) -> None:
        f[2] = f[3]  # from its marker on: every record of the transaction reads as committed

    return _rewrite_entry(d, change)


def _txn_first_lowered(d: Path) -> tuple[Path, int] | None:
    """The last entry whose producer wrote a batch before its transaction, its first offset
    lowered onto that batch (which a read_committed read would then drop); None: no such."""
    batches = [
        e
        for seg in segments(d)
        for e in LogReader(seg.read_bytes())
        if isinstance(e, RecordBatch) and not e.is_control
    ]
    chosen = _txn_entries(d)
    for path, at in reversed(chosen) if TXN_ENTRY["pick"] == -1 else chosen:
        pid, first = struct.unpack_from(">qq", path.read_bytes(), at + 2)
        earlier = [b.base_offset for b in batches if b.producer_id == pid and b.last_offset < first]
        if earlier:
            data = bytearray(path.read_bytes())
            struct.pack_into(">q", data, at + 10, earlier[-1])
            path.write_bytes(bytes(data))
            return path, at
    return None


def _txn_lso_past_marker(d: Path) -> tuple[Path, int]:
    def change(f: list[int]) -> None:
        f[4] = f[3] + 1000

    return _rewrite_entry(d, change)


def _txn_entry_removed(d: Path) -> tuple[Path, int]:
    path, at = _txn_entries(d)[TXN_ENTRY["pick"]]
    data = path.read_bytes()
    path.write_bytes(data[:at] + data[at + 34 :])
    return path, len(data) - 34 - (len(data) - 34) % 34


#: .txnindex damage -> its mutation, returning the file and byte ``verify`` must name (None:
#: the log has nothing it applies to); every one leaves every batch CRC valid, and a
#: read_committed read wrong
TXN_INDEX_DAMAGES: dict[str, Callable[[Path], tuple[Path, int] | None]] = {
    "producer id flipped": _txn_producer_flipped,
    "first offset past the transaction's batches": _txn_first_past_batches,
    "first offset lowered over the producer's earlier batches": _txn_first_lowered,
    "last stable offset past the marker": _txn_lso_past_marker,
    "entry removed": _txn_entry_removed,
}


# -- a .txnindex lost: what every read_committed reader meets the ABORT markers for ----------
def _txnindex_holding(d: Path) -> Path:
    """The last ``.txnindex`` holding entries (its segment holds ABORT markers)."""
    return [p for p in sorted(d.glob("*.txnindex")) if p.stat().st_size >= 34][-1]


def _txnindex_deleted(d: Path) -> Path:
    path = _txnindex_holding(d)
    path.unlink()
    return path


def _txnindex_cut(d: Path) -> Path:
    """Cut 20 bytes short (a crash on a file system that keeps the size first): its last
    entry is gone, and every reader ignores a partial one, as Kafka does."""
    path = _txnindex_holding(d)
    path.write_bytes(path.read_bytes()[:-20])
    return path


#: .txnindex lost -> its mutation, returning the file: a read_committed reader that meets the
#: ABORT markers it listed either reads exactly the committed records (it saw the whole
#: transaction and dropped it, with a WARNING) or fails naming the segment's ``.log``, the
#: marker's byte and ``kafkalog rebuild-index``; read_uncommitted reads are as before
TXNINDEX_LOST: dict[str, Callable[[Path], Path]] = {
    "txnindex deleted": _txnindex_deleted,
    "txnindex cut short": _txnindex_cut,
}


def committed_planner(d: Path) -> list[int]:
    """The Spark source's Python read (planner and tasks) with read_committed."""
    from kafkalog.spark.options import parse_read_options
    from kafkalog.spark.plan import plan_read
    from kafkalog.spark.task import read_split

    topic = d.name.rsplit("-", 1)[0]
    opts = parse_read_options(
        {"path": str(d.parent), "subscribe": topic, "isolationLevel": "read_committed"}
    )
    splits, aborted = plan_read(opts)
    out: list[int] = []
    for split in splits:
        for batch in read_split(split, include_headers=False, aborted=aborted.get(split.directory)):
            out.extend(int(o) for o in batch.column("offset").to_pylist())
    return out


def committed_fetch(d: Path, max_bytes: int = 1 << 16) -> list[int]:
    """Serve's read path with read_committed (``Log.fetch(include_aborted=True)``, to the last
    stable offset), the records filtered as a read_committed consumer does (Kafka's
    CompletedFetch): each fetch's aborted transactions, by first offset, make their producers'
    transactional batches aborted until that producer's ABORT marker."""
    out: list[int] = []
    with Log(d, writable=False) as log:
        offset, lso = log.log_start_offset, log.last_stable_offset()
        while offset < lso:
            info = log.fetch(offset, max_bytes, max_offset=lso, include_aborted=True)
            if info.region is None:
                break
            queue = sorted((t.first_offset, t.producer_id) for t in info.aborted or [])
            aborting: set[int] = set()
            for entry in LogReader(info.region.read(), verify_crc=True):
                pid = entry.producer_id if isinstance(entry, RecordBatch) else -1
                if pid >= 0:
                    while queue and queue[0][0] <= entry.last_offset:
                        aborting.add(queue.pop(0)[1])
                if entry.is_control:
                    kind = struct.unpack(">hh", (entry.records()[0].key or b"")[:4])[1]
                    if kind == 0:
                        aborting.discard(pid)
                elif not (entry.is_transactional and pid in aborting):
                    out.extend(r.offset for r in entry.records() if r.offset >= offset)
                offset = max(offset, entry.last_offset + 1)
    return out


COMMITTED_READERS: dict[str, Reader] = {
    "spark planner, read_committed": committed_planner,
    "fetch (serve's read), read_committed": committed_fetch,
}


def committed_truth(d: Path) -> list[int]:
    """The offsets a read_committed read returns, from a full decode (tests/read_shapes.py)."""
    from read_shapes import truth

    t = truth(d)
    return [
        r.offset
        for r in t.records
        if not r.control and r.offset not in t.aborted and r.offset < t.lso
    ]


def check_txnindex_lost(damage: str, reader: Reader, source: Path, tmp_path: Path) -> str:
    """``damage`` (:data:`TXNINDEX_LOST`) done to a copy of ``source``, read by ``reader``:
    exactly the committed records, or a DamagedLogError naming the segment's ``.log``, a byte
    and ``kafkalog rebuild-index``; no file changes. Returns which ("read" or "refused")."""
    d = tmp_path / source.parent.name / source.name
    shutil.copytree(source, d)
    want = committed_truth(d)
    lost = TXNINDEX_LOST[damage](d)
    before = files_of(d)
    try:
        got = reader(d)
    except DamagedLogError as e:
        log_path = str(lost)[: -len(".txnindex")] + ".log"
        assert log_path in str(e) and "byte" in str(e), f"{damage} / {d}: {e}"
        assert "kafkalog rebuild-index" in str(e) and ".txnindex" in str(e), str(e)
        assert files_of(d) == before, f"{damage} / {d}: files changed"
        return "refused"
    assert got == want, f"{damage} / {d}: {len(got)} records, {len(want)} committed"
    assert files_of(d) == before, f"{damage} / {d}: files changed"
    return "read"


# -- producer snapshots (.snapshot): Kafka deletes one it cannot read -----------------------------
def _newest_snapshot(d: Path) -> Path:
    return sorted(d.glob("*.snapshot"))[-1]


def _snapshot_cut(d: Path) -> tuple[Path, int]:
    """The newest snapshot cut short (a crash while it was written, on a file system that
    keeps the name first)."""
    p = _newest_snapshot(d)
    data = p.read_bytes()[:-7]
    p.write_bytes(data)
    # shorter than the 10-byte header (version, CRC, count), or its CRC no longer matches
    return p, 0 if len(data) < 10 else 2


def _snapshot_flipped(d: Path) -> tuple[Path, int]:
    p = _newest_snapshot(d)
    data = bytearray(p.read_bytes())
    data[-3] ^= 0x10
    p.write_bytes(bytes(data))
    return p, 2


def _snapshot_empty(d: Path) -> tuple[Path, int]:
    p = _newest_snapshot(d)
    p.write_bytes(b"")
    return p, 0


#: producer snapshot damage -> its mutation, returning the file and byte to be named
SNAPSHOT_DAMAGES: dict[str, Callable[[Path], tuple[Path, int]]] = {
    "cut short": _snapshot_cut,
    "a byte flipped": _snapshot_flipped,
    "empty": _snapshot_empty,
}


# -- leader-epoch-checkpoint: what OffsetsForLeaderEpoch answers from ----------------------------
def _epochs_malformed_line(d: Path) -> int:
    p = d / "leader-epoch-checkpoint"
    lines = p.read_text().splitlines()
    lines[-1] = lines[-1].split()[0] + " x"
    p.write_text("\n".join(lines) + "\n")
    return len("\n".join(lines[:-1])) + 1  # the byte where the bad line starts


def _epochs_count_lie(d: Path) -> int:
    p = d / "leader-epoch-checkpoint"
    lines = p.read_text().splitlines()
    lines[1] = str(int(lines[1]) + 3)
    p.write_text("\n".join(lines) + "\n")
    return len(lines[0]) + 1  # its count line, which promises lines the file lacks


def _epochs_zeroed(d: Path) -> int:
    p = d / "leader-epoch-checkpoint"
    p.write_bytes(bytes(p.stat().st_size))  # a power loss after the size was written
    return 0


#: leader-epoch-checkpoint damage -> its mutation, returning the byte where a reader finds it
EPOCH_CHECKPOINT_DAMAGES: dict[str, Callable[[Path], int]] = {
    "a malformed line": _epochs_malformed_line,
    "fewer entries than its count": _epochs_count_lie,
    "zero-filled": _epochs_zeroed,
}


def epochs_of_batches(d: Path) -> list[tuple[int, int]]:
    """Brute force: (epoch, first offset) of each leader epoch, from the v2 batches' partition
    leader epochs, independent of kafkalog's loader."""
    out: list[tuple[int, int]] = []
    for seg in segments(d):
        for e in LogReader(seg.read_bytes()):
            epoch = e.partition_leader_epoch if isinstance(e, RecordBatch) else -1
            if epoch >= 0 and (not out or epoch > out[-1][0]):
                out.append((epoch, e.base_offset))
    return out


# -- partition.metadata: the topic id clients key a topic by -------------------------------------
def _metadata_garbled_id(d: Path) -> int:
    p = d / "partition.metadata"
    text = p.read_text()
    at = text.index("topic_id: ") + len("topic_id: ")
    p.write_text(text[:at] + "!!!" + text[at + 3 :])
    return text.index("topic_id: ")  # the line's start


def _metadata_zeroed(d: Path) -> int:
    p = d / "partition.metadata"
    p.write_bytes(bytes(p.stat().st_size))
    return 0


def _metadata_cut(d: Path) -> int:
    p = d / "partition.metadata"
    data = p.read_bytes()
    p.write_bytes(data[: data.index(b"topic_id") + 4])
    return data.index(b"topic_id")


#: partition.metadata damage -> its mutation, returning the byte a reader finds it at
PARTITION_METADATA_DAMAGES: dict[str, Callable[[Path], int]] = {
    "a topic id that is no Uuid": _metadata_garbled_id,
    "zero-filled": _metadata_zeroed,
    "cut inside its topic_id line": _metadata_cut,
}


# -- .index entries that point where no batch is: a lookup must not skip the offsets they key ---
def _index_entries(path: Path) -> list[tuple[int, int]]:
    """(relative offset, position) of an ``.index``'s entries (trailing zeros not)."""
    data = path.read_bytes()
    out = [struct.unpack_from(">ii", data, k) for k in range(0, len(data) - 7, 8)]
    while out and out[-1] == (0, 0):
        out.pop()
    return [(int(a), int(b)) for a, b in out]


def _index_entry_moved(pick: str) -> Callable[[Path], tuple[Path, int] | None]:
    """An offset-index entry of the segment with the most entries pointed elsewhere: 10 MB
    past its ``.log``'s end (its ``last`` entry, or one in the ``middle``), or at the next
    entry's batch (``ahead``: a valid batch, past the offsets it keys). Returns the index and
    the entry's number."""

    def damage(d: Path) -> tuple[Path, int] | None:
        counted = [(len(_index_entries(p)), p) for p in sorted(d.glob("*.index"))]
        count, path = max(counted, default=(0, d))
        if count < 3:
            return None  # no segment with entries enough to damage one
        entries = _index_entries(path)
        k = count - 1 if pick == "last" else count // 2
        position = 10_000_000 if pick != "ahead" else entries[k + 1][1]
        data = bytearray(path.read_bytes())
        struct.pack_into(">i", data, k * 8 + 4, position)
        path.write_bytes(bytes(data))
        return path, k

    return damage


#: offset-index damage -> its mutation, returning the file and the entry changed (None: the
#: log has too few entries)
INDEX_DAMAGES: dict[str, Callable[[Path], tuple[Path, int] | None]] = {
    "last .index entry past the .log's end": _index_entry_moved("last"),
    "a middle .index entry past the .log's end": _index_entry_moved("middle"),
    "a middle .index entry at the next entry's batch": _index_entry_moved("ahead"),
}


# -- .timeindex entries that are not what the .log holds: a search by time must not start late --
def _time_entries(path: Path) -> list[tuple[int, int]]:
    """(timestamp, relative offset) of a ``.timeindex``'s entries (trailing zeros not)."""
    data = path.read_bytes()
    out = [struct.unpack_from(">qi", data, k) for k in range(0, len(data) - 11, 12)]
    while out and out[-1] == (0, 0):
        out.pop()
    return [(int(a), int(b)) for a, b in out]


def _time_entry_changed(how: str) -> Callable[[Path], tuple[Path, int] | None]:
    """An entry in the middle of the ``.timeindex`` with the most entries changed (no CRC
    covers an index): its offset ``past`` its segment's end, ``raised`` to the next entry's
    (still in order: only the ``.log`` tells), or its timestamp ``lowered`` to just above the
    entry before's (a search for times between then lands on it and starts too late) or made
    ``negative``.
    Returns the file and the entry's number (None: no segment has entries enough)."""

    def damage(d: Path) -> tuple[Path, int] | None:
        counted = [(len(_time_entries(p)), p) for p in sorted(d.glob("*.timeindex"))]
        count, path = max(counted, default=(0, d))
        if count < 3:
            return None
        entries = _time_entries(path)
        k = count // 2
        if how == "lowered":  # an entry whose timestamp is more than 1 ms above the one before
            k = next((j for j in range(k, count - 1) if entries[j][0] > entries[j - 1][0] + 1), 0)
            if not k:
                return None
        ts, rel = entries[k]
        if how == "past":
            rel = 10_000_000
        elif how == "raised":
            rel = entries[k + 1][1]
        elif how == "negative":  # the first entry past the base: its high half all ones
            k = next((j for j, (_, r) in enumerate(entries) if r > 0), 0)
            ts, rel = entries[k]
            ts |= -1 << 32
        else:
            ts = entries[k - 1][0] + 1
        data = bytearray(path.read_bytes())
        struct.pack_into(">qi", data, k * 12, ts, rel)
        path.write_bytes(bytes(data))
        return path, k

    return damage


#: time-index damage -> its mutation, returning the file and the entry changed (None: the log
#: has too few entries): a search by time (``Log.offsets_for_times``, serve's ListOffsets,
#: Spark's pushed-down timestamp bound) answers as on the undamaged log, and says the entry
#: in a WARNING naming the ``.timeindex`` (tests/log/test_time_index_damage.py)
TIME_INDEX_DAMAGES: dict[str, Callable[[Path], tuple[Path, int] | None]] = {
    "a .timeindex entry's offset past the .log's end": _time_entry_changed("past"),
    "a .timeindex entry's offset raised to the next entry's": _time_entry_changed("raised"),
    "a .timeindex entry's timestamp lowered": _time_entry_changed("lowered"),
    "a .timeindex entry's timestamp negative": _time_entry_changed("negative"),
}


def _record_timestamp_flipped(d: Path) -> tuple[Path, int] | None:
    """A byte of a record's timestamp flipped (inside the CRC) in the batch holding the
    middle record of the segment with the most batches: a search by time that reads that
    batch without its CRC answers another offset. Returns the ``.log`` and the batch's byte."""
    counted = [(len(entries(p)), p) for p in holding(d)]
    count, seg = max(counted, default=(0, d))
    if count < 3:
        return None
    found = list(LogReader(seg.read_bytes()))
    entry = found[count // 2]
    data = bytearray(seg.read_bytes())
    # the low byte of a v2 batch's first timestamp, or of a v1 message's (or wrapper's)
    # timestamp, after its offset, size, CRC, magic and attributes
    at = entry.position + (27 if isinstance(entry, RecordBatch) else 18) + 7
    data[at] ^= 0x40
    seg.write_bytes(bytes(data))
    return seg, entry.position


def kafka_txn_log_and_shapes(tmp_path: Path, shapes: list[str]) -> list[Path]:
    """Logs to damage: a writable copy of Kafka's own ``v2-txn-0`` (tests/fixtures, written by
    Kafka's Java code: transactions with aborts and markers) and the read shapes ``shapes``
    written under ``tmp_path``."""
    from provenance import FIXTURES
    from read_shapes import write_shape

    java = tmp_path / "java" / "v2-txn-0"
    shutil.copytree(FIXTURES / "kafka-4.0-snapshot-javacode" / "v2-txn-0", java)
    for p in java.iterdir():
        p.chmod(0o644)
    return [java] + [write_shape(tmp_path / "shapes", name).directory for name in shapes]


class _Said(logging.Handler):
    """The messages logged to it."""

    def __init__(self, level: int) -> None:
        super().__init__(level)
        self.said: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.said.append(record.getMessage())


def check_gap_said(damage: str, name: str, source: Path, tmp_path: Path) -> None:
    """A :data:`GAP_DAMAGES` kind done to a copy of ``source`` (when it has a middle segment
    holding batches), read by every reader: each reads every record the files still hold (a
    brute force over the other segments), says the gap with a WARNING naming the offsets no
    batch holds (unless the directory shows compaction: ``compacted``), and changes no file."""
    if not applies(damage, source):
        return
    d = tmp_path / name.replace("/", "_") / source.name
    shutil.copytree(source, d)
    for extra in d.glob(".kafkalog*"):
        extra.unlink()
    victim = FILE_DAMAGES[damage](d)
    held = [
        r.offset
        for seg in segments(d)
        for e in LogReader(seg.read_bytes())
        if not e.is_control
        for r in e.records()
    ]
    after = min(int(s.name[:20]) for s in segments(d) if s.name > victim.name)
    if victim.exists():  # emptied: its base offset on are in no batch
        end = int(victim.name[:20])
    else:  # removed: from the end of the segment before it (its base offset, if empty)
        previous = [s for s in segments(d) if s.name < victim.name][-1]
        found = list(LogReader(previous.read_bytes()))
        end = found[-1].last_offset + 1 if found else int(previous.name[:20])
    said = f"offsets {end}..{after - 1} ({after - end})"
    before = files_of(d)
    logger = logging.getLogger("kafkalog")
    for reader_name, reader in READERS.items():
        where = f"{damage} / {name} / {reader_name}"
        handler = _Said(logging.WARNING)
        seen = handler.said
        logger.addHandler(handler)
        try:
            got = reader(d)
        finally:
            logger.removeHandler(handler)
        assert got == held, f"{where}: {len(got)} records of {len(held)}"
        assert any(said in m for m in seen), f"{where}: the gap {said} was not said: {seen}"
        if reader_name != "writable open":
            assert files_of(d) == before, f"{where}: files changed"


# -- the data directory's checkpoints: what a broker (and kafkalog) keeps per partition --------
def _checkpoint_garbled(name: str) -> Callable[[Path], int]:
    def damage(data: Path) -> int:
        p = data / name
        lines = p.read_text().splitlines()
        p.write_text("\n".join([*lines[:2], "some-topic x 5", *lines[3:]]) + "\n")
        return len(lines[0]) + len(lines[1]) + 2  # the byte where the bad line starts

    return damage


def _checkpoint_zeroed(name: str) -> Callable[[Path], int]:
    def damage(data: Path) -> int:
        p = data / name
        p.write_bytes(bytes(max(8, p.stat().st_size)))  # a power loss after the size was written
        return 0

    return damage


#: data directory checkpoint damage -> its mutation of the data directory, returning the byte
#: a reader finds it at (Kafka's LogManager warns and goes on without the file's contents)
DATA_DIR_CHECKPOINT_DAMAGES: dict[str, Callable[[Path], int]] = {
    f"{name} {how}": make(name)
    for name in (
        "log-start-offset-checkpoint",
        "recovery-point-offset-checkpoint",
        "replication-offset-checkpoint",
    )
    for how, make in (("garbled", _checkpoint_garbled), ("zero-filled", _checkpoint_zeroed))
}
