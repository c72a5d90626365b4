"""OffsetIndex: every rule of spec §2-§3, on files we write and on read-only opens."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from kafkalog.errors import (
    CorruptIndexError,
    IndexFullError,
    IndexOffsetOverflowError,
    InvalidOffsetError,
    ReadOnlyError,
)
from kafkalog.index import LazyIndex, OffsetIndex, OffsetPosition


def make(
    tmp_path: Path,
    entries: list[tuple[int, int]],
    base: int = 0,
    size: int = 4096,
    name: str = "00000000000000000000.index",
) -> OffsetIndex:
    ix = OffsetIndex(tmp_path / name, base, max_index_size=size)
    for o, p in entries:
        ix.append(o, p)
    return ix


SPEC = [(0, 0), (1, 10), (2, 23), (3, 37)]


def test_entry_layout_vector(tmp_path: Path) -> None:
    with make(tmp_path, [(105, 4096)], base=100) as ix:
        assert ix.entry(0) == OffsetPosition(105, 4096)
    assert (tmp_path / "00000000000000000000.index").read_bytes().hex() == "0000000500001000"


def test_preallocation_rounds_down_and_rejects_tiny_sizes(tmp_path: Path) -> None:
    ix = OffsetIndex(tmp_path / "a.index", 0, max_index_size=67)
    assert (ix.length, ix.max_entries, ix.entries) == (64, 8, 0)
    assert os.path.getsize(tmp_path / "a.index") == 64
    ix.close()
    assert os.path.getsize(tmp_path / "a.index") == 0  # trimmed to its (zero) entries
    with pytest.raises(ValueError, match="invalid max index size"):
        OffsetIndex(tmp_path / "b.index", 0, max_index_size=7)
    assert not (tmp_path / "b.index").exists()
    default = OffsetIndex(tmp_path / "c.index", 0)
    assert default.max_entries == 1310720
    default.close()


def test_lookup_floor(tmp_path: Path) -> None:
    ix = make(tmp_path, SPEC)
    assert ix.lookup(-1) == (0, 0)
    assert ix.lookup(2) == (2, 23)
    assert ix.lookup(99) == (3, 37)
    empty = OffsetIndex(tmp_path / "e.index", 50, max_index_size=80)
    assert empty.lookup(70) == (50, 0)
    one = make(tmp_path, [(60, 400)], base=50, name="one.index")
    assert (
        one.lookup(59) == (50, 0) and one.lookup(60) == (60, 400) and one.lookup(10**9) == (60, 400)
    )


def test_ceiling_and_fetch_upper_bound_with_kafkas_quirk(tmp_path: Path) -> None:
    ix = make(tmp_path, SPEC)
    assert ix.lookup_ceiling(0) == (1, 10)  # the exact hit at the initial lo is skipped
    assert ix.lookup_ceiling(1) == (1, 10)
    assert ix.lookup_ceiling(2) == (2, 23)
    assert ix.lookup_ceiling(4) is None
    assert ix.lookup_ceiling(-5) == (0, 0)
    single = make(tmp_path, [(0, 0)], name="single.index")
    assert single.lookup_ceiling(0) is None
    assert ix.fetch_upper_bound_offset(10, 5) == (2, 23)
    assert ix.fetch_upper_bound_offset(0, 23) == (2, 23)
    assert ix.fetch_upper_bound_offset(30, 100) is None


def test_append_rules(tmp_path: Path) -> None:
    ix = make(tmp_path, [(10, 0)], base=10, size=24)
    with pytest.raises(InvalidOffsetError, match="no larger than the last"):
        ix.append(10, 5)
    with pytest.raises(InvalidOffsetError):
        ix.append(9, 5)
    with pytest.raises(IndexOffsetOverflowError):
        ix.append(10 + 2**31, 5)
    ix.append(10 + 2**31 - 1, 5)
    assert ix.can_append_offset(10 + 2**31 - 1) and not ix.can_append_offset(10 + 2**31)
    assert not ix.can_append_offset(9)
    assert ix.entries == 2 and not ix.is_full()
    with pytest.raises(IndexOffsetOverflowError):
        ix.append(10 + 2**31, 7)
    ix2 = make(tmp_path, [(1, 1), (2, 2), (3, 3)], size=24, name="full.index")
    assert ix2.is_full()
    with pytest.raises(IndexFullError, match="full index"):
        ix2.append(4, 4)


def test_positions_need_not_increase(tmp_path: Path) -> None:
    ix = make(tmp_path, [(1, 100), (2, 50)])
    assert list(ix) == [(1, 100), (2, 50)]


@pytest.mark.parametrize(
    ("target", "kept"),
    [(-1, 0), (0, 0), (1, 1), (2, 2), (3, 3), (4, 4), (99, 4)],
)
def test_truncate_to(tmp_path: Path, target: int, kept: int) -> None:
    ix = make(tmp_path, SPEC)
    length = ix.length
    ix.truncate_to(target)
    assert ix.entries == kept and ix.length == length
    assert ix.last_offset == (SPEC[kept - 1][0] if kept else 0)
    ix.append(50, 500)  # appending continues after the kept entries
    assert ix.entry(kept) == (50, 500)


def test_truncate_between_entries(tmp_path: Path) -> None:
    ix = make(tmp_path, [(10, 1), (20, 2), (30, 3)])
    ix.truncate_to(25)
    assert list(ix) == [(10, 1), (20, 2)]
    ix.truncate_to_entries(1)
    assert list(ix) == [(10, 1)]
    ix.truncate_to_entries(5)
    assert list(ix) == [(10, 1)]


def test_close_trims_and_reopen_is_exact(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    make(tmp_path, SPEC).close()
    assert path.stat().st_size == 32
    ix = OffsetIndex(path, 0)
    assert (ix.entries, ix.max_entries, ix.is_full()) == (4, 4, True)
    assert ix.last_offset == 3 and ix.lookup(2) == (2, 23)
    assert ix.resize(4096)
    assert not ix.resize(4096)
    ix.append(4, 50)
    assert ix.entries == 5
    ix.reset()  # back to the full preallocated size (the default 10 MiB here)
    assert ix.entries == 0 and ix.length == 10485760
    ix.close()


def test_writable_open_of_a_preallocated_file_trusts_its_length(tmp_path: Path) -> None:
    """Kafka assumes an existing file is full of entries (zeros included); recovery fixes it."""
    path = tmp_path / "00000000000000000000.index"
    ix = make(tmp_path, SPEC[1:], size=80)
    ix.flush()
    ix.close_handler()  # a crash: no trim
    assert path.stat().st_size == 80
    ix = OffsetIndex(path, 0)
    assert ix.entries == 10 and ix.is_full()
    ix.sanity_check()  # zero entries equal the base offset: Kafka's check passes them
    ix.close()
    ro = OffsetIndex(path, 0, writable=False)
    assert list(ro) == SPEC[1:]


def test_two_byte_garbage_file(tmp_path: Path) -> None:
    path = tmp_path / "g.index"
    path.write_bytes(b"\x01\x02")
    ix = OffsetIndex(path, 0)
    assert (ix.entries, ix.max_entries, ix.is_full()) == (0, 0, True)
    with pytest.raises(CorruptIndexError, match="not a multiple"):
        ix.sanity_check()
    ix.close_handler()


def test_sanity_check_last_offset_below_base(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.index"
    path.write_bytes(bytes.fromhex("00000001 00000010 fffffffe 00000020".replace(" ", "")))
    ix = OffsetIndex(path, 100)
    with pytest.raises(CorruptIndexError, match="less than the base offset") as info:
        ix.sanity_check()
    assert info.value.position == 8 and str(path) in str(info.value)
    ix.close_handler()


def test_read_only_open_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    ix = make(tmp_path, SPEC[1:], size=800)
    ix.flush()
    ix.close_handler()  # leave it preallocated, as a live broker's active segment is
    os.chmod(path, 0o444)
    before = (path.read_bytes(), path.stat().st_mtime_ns, path.stat().st_size)
    with OffsetIndex(path, 0, writable=False) as ro:
        assert ro.entries == 3 and ro.max_entries == 100
        assert ro.lookup(2) == (2, 23)
        for write in (
            lambda: ro.append(9, 9),
            lambda: ro.truncate_to(1),
            ro.trim_to_valid_size,
            lambda: ro.resize(8),
            ro.reset,
            lambda: ro.rename_to(tmp_path / "x"),
        ):
            with pytest.raises(ReadOnlyError, match="opened read-only"):
                write()
    assert (path.read_bytes(), path.stat().st_mtime_ns, path.stat().st_size) == before
    with pytest.raises(FileNotFoundError):
        OffsetIndex(tmp_path / "missing.index", 0, writable=False)
    assert not (tmp_path / "missing.index").exists()


def test_lookup_many_matches_single_lookups(tmp_path: Path) -> None:
    offsets = np.cumsum(np.random.default_rng(3).integers(1, 50, 3000))
    ix = make(tmp_path, [(int(o), i * 100) for i, o in enumerate(offsets)], base=0, size=8 * 3000)
    targets = np.arange(-5, int(offsets[-1]) + 10, 7)
    got_o, got_p = ix.lookup_many(targets)
    assert [tuple(x) for x in zip(got_o.tolist(), got_p.tolist(), strict=True)] == [
        tuple(ix.lookup(int(t))) for t in targets
    ]


def test_rename_and_delete(tmp_path: Path) -> None:
    ix = make(tmp_path, SPEC)
    ix.rename_to(tmp_path / "00000000000000000000.index.deleted")
    assert (
        ix.path.endswith(".deleted") and (tmp_path / "00000000000000000000.index.deleted").exists()
    )
    assert ix.delete_if_exists()
    assert not ix.delete_if_exists()


def test_lazy_index_maps_nothing_until_used(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    lazy = LazyIndex(path, 0, OffsetIndex, max_index_size=800)
    assert not lazy.is_loaded and not path.exists()
    lazy.rename_to(tmp_path / "renamed.index")  # no file yet: tolerated
    assert not lazy.delete_if_exists()
    lazy.close()
    ix = lazy.get()
    assert lazy.is_loaded and lazy.get() is ix and os.path.getsize(lazy.path) == 800
    ix.append(3, 30)
    lazy.close()
    assert os.path.getsize(lazy.path) == 8
    ro = LazyIndex(lazy.path, 0, OffsetIndex, writable=False)
    assert list(ro.get()) == [(3, 30)]


def test_every_use_after_close_raises_closed_error(tmp_path: Path) -> None:
    # issue 11: a closed index used to answer from a stale view (garbage offsets, or SIGSEGV
    # once its pages were unmapped); now every public path refuses, naming the file
    from kafkalog.errors import ClosedError, KafkalogError
    from kafkalog.index import TimeIndex

    oi = make(tmp_path, [])
    ti = TimeIndex(tmp_path / "0.timeindex", 0, max_index_size=4096)
    for i in range(1, 100):
        oi.append(i * 10, i * 100)
        ti.maybe_append(1_000 + i, i * 10)
    assert oi.lookup(505) == OffsetPosition(500, 5000)
    oi.close()
    ti.close()
    calls = {
        "offset lookup": lambda: oi.lookup(505),
        "offset lookup_many": lambda: oi.lookup_many(np.array([15, 505], dtype=np.int64)),
        "offset lookup_ceiling": lambda: oi.lookup_ceiling(505),
        "offset entry": lambda: oi.entry(3),
        "offset to_numpy": lambda: oi.to_numpy(),
        "offset append": lambda: oi.append(10_000, 100_000),
        "time lookup": lambda: ti.lookup(1_050),
        "time lookup_many": lambda: ti.lookup_many(np.array([1_010], dtype=np.int64)),
        "time entry": lambda: ti.entry(3),
        "time to_numpy": lambda: ti.to_numpy(),
    }
    for name, call in calls.items():
        with pytest.raises(ClosedError, match=r"\.(time)?index") as info:
            call()
        assert isinstance(info.value, KafkalogError), name
