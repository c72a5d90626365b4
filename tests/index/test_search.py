"""The warm/cold search: equal to Kafka's rules, to brute force, and kind to the page cache."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalog.index import OffsetIndex, _search
from kafkalog.index._search import LLB, SUB, search_reference

PAGE = 4096


def brute_floor(keys: list[int], target: int) -> int:
    slots = [i for i, k in enumerate(keys) if k <= target]
    return slots[-1] if slots else -1


def brute_ceiling(keys: list[int], target: int) -> int:
    slots = [i for i, k in enumerate(keys) if k >= target]
    return slots[0] if slots else -1


def _buffer(keys: list[int]) -> np.ndarray:
    return np.frombuffer(b"".join(struct.pack(">ii", k, i) for i, k in enumerate(keys)), np.uint8)


@settings(max_examples=400, deadline=None)
@given(
    keys=st.lists(st.integers(0, 10_000), min_size=0, max_size=300, unique=True).map(sorted),
    targets=st.lists(st.integers(-5, 10_010), min_size=1, max_size=20),
    warm=st.integers(0, 40),
)
def test_search_equals_reference_and_brute_force(
    keys: list[int], targets: list[int], warm: int
) -> None:
    buf = _buffer(keys)
    for target in targets:
        llb = _search.search(buf, len(keys), 8, 0, 4, target, LLB, warm)
        sub = _search.search(buf, len(keys), 8, 0, 4, target, SUB, warm)
        assert llb == brute_floor(keys, target)
        assert llb == search_reference(keys.__getitem__, len(keys), target, LLB, warm)
        assert sub == search_reference(keys.__getitem__, len(keys), target, SUB, warm)
        expected = brute_ceiling(keys, target)
        if sub != expected:
            # Kafka's quirk (spec §2.5): an exact hit at the search's initial lo is skipped, so
            # the next slot comes back; that is the only way the result may differ.
            assert keys[expected] == target and sub in (expected + 1, -1)
            assert sub == -1 or keys[sub] > target


def test_quirk_examples() -> None:
    buf = _buffer([0, 10, 23, 37])
    assert _search.search(buf, 4, 8, 0, 4, 0, SUB, 1024) == 1
    assert _search.search(_buffer([0]), 1, 8, 0, 4, 0, SUB, 1024) == -1


def test_vectorised_search_equals_single(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    keys = np.cumsum(rng.integers(1, 9, 5000))
    buf = _buffer(keys.tolist())
    targets = rng.integers(-10, int(keys[-1]) + 10, 2000)
    out = np.empty(len(targets), np.int64)
    _search.search_many(buf, len(keys), 8, 0, 4, targets, LLB, 1024, out)
    assert out.tolist() == [
        _search.search(buf, len(keys), 8, 0, 4, int(t), LLB, 1024) for t in targets
    ]


def _pages_read(keys: list[int], targets: list[int], warm: bool) -> set[int]:
    pages: set[int] = set()

    def read(slot: int) -> int:
        pages.add(slot * 8 // PAGE)
        return keys[slot]

    for t in targets:
        search_reference(read, len(keys), t, LLB, 8192 // 8, warm=warm)
    return pages


def test_warm_section_keeps_tail_lookups_on_the_same_pages() -> None:
    """Kafka's claim (KAFKA-6432): consumers near the head look up the newest entries; with the
    warm section those lookups read only the last pages, whose set stays the same while the
    index grows, so they stay in the page cache. A plain binary search starts in the middle of
    the index, and the middle moves with every page of growth."""
    per_page = PAGE // 8
    sizes = [per_page * n for n in (20, 21, 22, 23, 24, 25)]  # grows by one page at a time
    warm_sets, plain_sets = [], []
    for n in sizes:
        keys = list(range(0, 2 * n, 2))
        newest = keys[-300:]  # lookups a tailing consumer makes
        last_page = (n * 8 - 1) // PAGE
        warm_pages = _pages_read(keys, newest, warm=True)
        plain_pages = _pages_read(keys, newest, warm=False)
        # relative to the end of the index, the warm search reads the same pages every time
        warm_sets.append({last_page - p for p in warm_pages})
        plain_sets.append({last_page - p for p in plain_pages})
        assert max(warm_sets[-1]) <= 8192 // PAGE  # only the warm section (+ its first page)
        assert max(plain_sets[-1]) >= 8  # a plain binary search reaches far into the index
    assert all(s == warm_sets[0] for s in warm_sets)
    assert len({frozenset(s) for s in plain_sets}) > 1


def test_index_lookup_uses_the_compiled_search(tmp_path: Path) -> None:
    ix = OffsetIndex(tmp_path / "00000000000000000000.index", 0, max_index_size=8 * 4000)
    for i in range(1, 4000):
        ix.append(i * 3, i * 100)
    for t in (0, 2, 3, 4, 5999, 6000, 11997, 11998, 10**9):
        slot = brute_floor([i * 3 for i in range(1, 4000)], t)
        assert ix.lookup(t) == ((0, 0) if slot < 0 else ((slot + 1) * 3, (slot + 1) * 100))
