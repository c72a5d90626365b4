"""TimeIndex: spec §4 rules, the reserved final slot, and read-only opens."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from kafkalog.errors import (
    CorruptIndexError,
    IndexFullError,
    InvalidOffsetError,
    ReadOnlyError,
)
from kafkalog.index import TimeIndex, TimestampOffset

SPEC = [(100, 50), (200, 50), (300, 60), (400, 70), (500, 80)]


def make(
    tmp_path: Path,
    entries: list[tuple[int, int]],
    base: int = 45,
    size: int = 1200,
    name: str = "00000000000000000045.timeindex",
) -> TimeIndex:
    ix = TimeIndex(tmp_path / name, base, max_index_size=size)
    for ts, o in entries:
        ix.maybe_append(ts, o)
    return ix


def test_entry_layout_vector(tmp_path: Path) -> None:
    make(tmp_path, SPEC[:2]).close()
    data = (tmp_path / "00000000000000000045.timeindex").read_bytes()
    assert data.hex() == "00000000000000640000000500000000000000c800000005"


def test_lookup(tmp_path: Path) -> None:
    ix = make(tmp_path, SPEC)
    assert ix.lookup(99) == (-1, 45)
    assert ix.lookup(100) == (100, 50)
    assert ix.lookup(250) == (200, 50)
    assert ix.lookup(9999) == (500, 80)
    ts, offs = ix.lookup_many(np.array([99, 100, 250, 9999]))
    assert list(zip(ts.tolist(), offs.tolist(), strict=True)) == [
        (-1, 45),
        (100, 50),
        (200, 50),
        (500, 80),
    ]


def test_maybe_append_rules(tmp_path: Path) -> None:
    ix = make(tmp_path, [(100, 50)])
    ix.maybe_append(100, 60)  # same timestamp: silently ignored
    assert ix.entries == 1 and ix.last_entry == (100, 50)
    with pytest.raises(InvalidOffsetError, match="smaller than the last offset"):
        ix.maybe_append(200, 49)
    with pytest.raises(InvalidOffsetError, match="smaller than the last timestamp"):
        ix.maybe_append(99, 60)
    ix.maybe_append(150, 50)  # equal offsets are allowed
    assert list(ix) == [(100, 50), (150, 50)]
    empty = TimeIndex(tmp_path / "e.timeindex", 0, max_index_size=120)
    empty.maybe_append(-1, 3)  # an all-v0 log: timestamps -1 never create entries
    assert empty.entries == 0 and empty.last_entry == (-1, 0)


def test_one_slot_reserved_for_the_final_entry(tmp_path: Path) -> None:
    ix = make(tmp_path, [], size=60)  # 5 slots
    for i in range(4):
        ix.maybe_append(100 + i, 50 + i)
    assert ix.is_full()
    with pytest.raises(IndexFullError):
        ix.maybe_append(200, 60)
    ix.maybe_append(200, 60, skip_full_check=True)
    assert ix.entries == 5
    with pytest.raises(IndexFullError):
        ix.maybe_append(300, 70, skip_full_check=True)
    ix.maybe_append(200, 60, skip_full_check=True)  # not a new maximum: nothing to write


def test_truncate_to_by_offset(tmp_path: Path) -> None:
    ix = make(tmp_path, SPEC)
    ix.truncate_to(60)
    assert list(ix) == [(100, 50), (200, 50)]
    assert ix.last_entry == (200, 50)
    ix.truncate_to(50)
    assert ix.entries == 0 and ix.last_entry == (-1, 45)
    ix2 = make(tmp_path, SPEC, name="second.timeindex")
    ix2.truncate_to(75)
    assert ix2.last_entry == (400, 70)
    ix2.truncate_to(1000)
    assert ix2.entries == 4


def test_reopen_recovers_last_entry_and_empty_is_full(tmp_path: Path) -> None:
    make(tmp_path, SPEC).close()
    path = tmp_path / "00000000000000000045.timeindex"
    assert path.stat().st_size == 60
    ix = TimeIndex(path, 45)
    assert ix.last_entry == (500, 80) and ix.is_full()
    ix.close()
    empty = TimeIndex(tmp_path / "z.timeindex", 0, max_index_size=12)
    empty.close()
    again = TimeIndex(tmp_path / "z.timeindex", 0)
    assert again.max_entries == 0 and again.is_full()
    again.close()


def test_sanity_check(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000010.timeindex"
    path.write_bytes(
        bytes.fromhex("00000000000000c8 00000001 0000000000000064 00000002".replace(" ", ""))
    )
    ix = TimeIndex(path, 10)
    with pytest.raises(CorruptIndexError, match="less than the first timestamp") as info:
        ix.sanity_check()
    assert info.value.position == 12
    ix.close_handler()
    path.write_bytes(bytes.fromhex("0000000000000064 ffffffff".replace(" ", "")))
    ix = TimeIndex(path, 10)
    with pytest.raises(CorruptIndexError, match="less than the base offset"):
        ix.sanity_check()
    ix.close_handler()
    path.write_bytes(b"\x00" * 13)
    ix = TimeIndex(path, 10)
    with pytest.raises(CorruptIndexError, match="not a multiple"):
        ix.sanity_check()
    ix.close_handler()


def test_read_only_open_of_a_live_index(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000045.timeindex"
    ix = make(tmp_path, SPEC, size=1200)
    ix.flush()
    ix.close_handler()
    before = (path.read_bytes(), path.stat().st_mtime_ns)
    ro = TimeIndex(path, 45, writable=False)
    assert list(ro) == SPEC and ro.last_entry == (500, 80)
    with pytest.raises(ReadOnlyError):
        ro.maybe_append(600, 90)
    ro.close()
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before
    assert os.path.getsize(path) == 1200


def test_entries_as_arrays(tmp_path: Path) -> None:
    ix = make(tmp_path, SPEC)
    ts, offsets = ix.to_numpy()
    assert ts.tolist() == [t for t, _ in SPEC] and offsets.tolist() == [o for _, o in SPEC]
    assert TimestampOffset(*ix.entry(4)) == (500, 80)
