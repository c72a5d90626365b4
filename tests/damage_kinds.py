"""Kinds of damage done to a partition log's files, and a log to do them to: the damage
matrix's shared parts (tests/log/test_damage.py, tests/server/test_serve_damage.py)."""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from pathlib import Path

from kafkalog.log import Log, TopicConfig
from kafkalog.records import LogReader, Record


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
}

#: kinds that need a log of several segments (a log of one has no earlier or middle one)
NEEDS_SEGMENTS = {
    "earlier segment cut off",
    "segment .log missing, index left",
    "base offset +16.7M, last batch of a segment",
}


def written(tmp: Path) -> Path:
    d = tmp / "written-0"
    with Log(d, TopicConfig(segment_bytes=4096)) as log:
        for i in range(300):
            log.append_records([Record.of(b"value %05d" % i, key=b"k%d" % (i % 7))])
    return d
