"""The appending API the segment uses: ``accepts`` against Kafka's rules stated independently
here, the checked-ahead halves (``append_accepted``, ``maybe_append_accepted``) and the bulk
forms (``append_entries``, ``maybe_append_entries``) against one call per entry: the same bytes,
state and errors."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from kafkalog.errors import (
    ClosedError,
    IndexFullError,
    IndexOffsetOverflowError,
    InvalidOffsetError,
    ReadOnlyError,
)
from kafkalog.index import OffsetIndex, TimeIndex

BASE = 100
MAX = 2**31 - 1


# -- Kafka's rules, stated without the index's own checks --------------------------------------
def offset_rule(ix: OffsetIndex, offset: int, position: int) -> type[Exception] | None:
    """The error OffsetIndex.append must raise for (offset, position), None if it appends."""
    if not ix.writable:
        return ReadOnlyError
    if ix.closed:
        return ClosedError
    if ix.is_full():
        return IndexFullError
    if ix.entries and offset <= ix.last_offset:
        return InvalidOffsetError
    if not 0 <= position <= MAX:
        return InvalidOffsetError
    if not 0 <= offset - ix.base_offset <= MAX:
        return IndexOffsetOverflowError
    return None


def time_rule(ix: TimeIndex, ts: int, offset: int, final: bool) -> type[Exception] | None:
    """The error TimeIndex.maybe_append must raise, None if it appends or skips."""
    if not ix.writable:
        return ReadOnlyError
    if ix.closed:
        return ClosedError
    if not final and ix.is_full():
        return IndexFullError
    last = ix.last_entry
    if ix.entries and (offset < last.offset or ts < last.timestamp):
        return InvalidOffsetError
    if ts > last.timestamp:
        if ix.entries >= ix.max_entries:
            return IndexFullError
        if not 0 <= offset - ix.base_offset <= MAX:
            return IndexOffsetOverflowError
    return None


def offset_states(tmp_path: Path) -> dict[str, Callable[[], OffsetIndex]]:
    counter = iter(range(10**6))

    def fresh(entries: list[tuple[int, int]], size: int = 24) -> OffsetIndex:
        ix = OffsetIndex(tmp_path / f"{next(counter)}.index", BASE, max_index_size=size)
        for o, p in entries:
            ix.append(o, p)
        return ix

    def closed() -> OffsetIndex:
        ix = fresh([(105, 7)])
        ix.close()
        return ix

    def read_only() -> OffsetIndex:
        ix = fresh([(105, 7)])
        ix.close()
        return OffsetIndex(ix.path, BASE, writable=False)

    def zero_length() -> OffsetIndex:
        ix = fresh([])
        ix.trim_to_valid_size()
        return ix

    return {
        "empty": lambda: fresh([]),
        "one": lambda: fresh([(105, 7)]),
        "full": lambda: fresh([(101, 1), (102, 2), (105, 3)]),
        "closed": closed,
        "read-only": read_only,
        "zero-length": zero_length,
    }


def time_states(tmp_path: Path) -> dict[str, Callable[[], TimeIndex]]:
    counter = iter(range(10**6))

    def fresh(entries: list[tuple[int, int]], final: tuple[int, int] | None = None) -> TimeIndex:
        ix = TimeIndex(tmp_path / f"{next(counter)}.timeindex", BASE, max_index_size=60)
        for ts, o in entries:
            ix.maybe_append(ts, o)
        if final is not None:
            ix.maybe_append(*final, skip_full_check=True)
        return ix

    def closed() -> TimeIndex:
        ix = fresh([(1000, 105)])
        ix.close()
        return ix

    def read_only() -> TimeIndex:
        ix = fresh([(1000, 105)])
        ix.close()
        return TimeIndex(ix.path, BASE, writable=False)

    def zero_length() -> TimeIndex:
        ix = fresh([])
        ix.trim_to_valid_size()
        return ix

    four = [(997, 101), (998, 102), (999, 104), (1000, 105)]
    return {
        "empty": lambda: fresh([]),
        "one": lambda: fresh([(1000, 105)]),
        "soft-full": lambda: fresh(four),
        "hard-full": lambda: fresh(four, final=(1001, 105)),
        "closed": closed,
        "read-only": read_only,
        "zero-length": zero_length,
    }


OFFSETS = [BASE - 1, BASE, 104, 105, 106, BASE + MAX, BASE + MAX + 1]


@pytest.mark.parametrize("state", ["empty", "one", "full", "closed", "read-only", "zero-length"])
def test_offset_accepts_is_kafkas_rule(tmp_path: Path, state: str) -> None:
    build = offset_states(tmp_path)[state]
    for offset in OFFSETS:
        for position in (-1, 0, MAX, MAX + 1):
            ix = build()
            expected = offset_rule(ix, offset, position)
            assert ix.accepts(offset, position) == (expected is None), (offset, position)
            if ix.accepts(offset, position):
                assert ix.has_room() and ix.has_room_for(offset) and ix.room() > 0
                ix.append(offset, position)
                assert ix.entries and ix.last_offset == offset
                assert ix.entry(ix.entries - 1) == (offset, position)
            else:
                with pytest.raises(expected):  # type: ignore[arg-type]
                    ix.append(offset, position)


@pytest.mark.parametrize(
    "state", ["empty", "one", "soft-full", "hard-full", "closed", "read-only", "zero-length"]
)
def test_time_accepts_is_kafkas_rule(tmp_path: Path, state: str) -> None:
    build = time_states(tmp_path)[state]
    for ts in (-1, 999, 1000, 1001):
        for offset in OFFSETS:
            for final in (False, True):
                ix = build()
                expected = time_rule(ix, ts, offset, final)
                assert ix.accepts(ts, offset, final) == (expected is None), (ts, offset, final)
                if expected is None:
                    before, last = ix.entries, ix.last_entry
                    ix.maybe_append(ts, offset, skip_full_check=final)
                    newer = ts > last.timestamp
                    assert ix.entries == before + newer
                    assert ix.last_entry == ((ts, offset) if newer else last)
                else:
                    with pytest.raises(expected):  # type: ignore[arg-type]
                        ix.maybe_append(ts, offset, skip_full_check=final)


def test_room_follows_fullness_and_closing(tmp_path: Path) -> None:
    ix = OffsetIndex(tmp_path / "a.index", BASE, max_index_size=24)
    tx = TimeIndex(tmp_path / "a.timeindex", BASE, max_index_size=36)
    assert (ix.room(), tx.room()) == (3, 2)  # one time slot is kept for the final entry
    tx.maybe_append(5, 101)
    tx.maybe_append(6, 102)
    assert tx.room() == 0 and not tx.has_room() and tx.is_full()
    tx.maybe_append(7, 103, skip_full_check=True)
    assert tx.room() == 0
    assert not ix.has_room_for(BASE - 1) and not ix.has_room_for(BASE + MAX + 1)
    assert ix.has_room_for(BASE) and ix.has_room_for(BASE + MAX)
    ix.append(101, 0)
    assert ix.room() == 2
    ix.resize(8)  # the entries fill the file now
    assert ix.room() == 0 and not ix.has_room_for(102)
    ix.resize(800)
    assert ix.room() == 99
    ix.close()
    tx.close()
    assert ix.room() == 0 and not ix.has_room() and not ix.has_room_for(102)
    assert tx.room() == 0 and not tx.has_room()


def files_and_state(ix: OffsetIndex | TimeIndex) -> tuple[object, ...]:
    last = ix.last_offset if isinstance(ix, OffsetIndex) else tuple(ix.last_entry)
    state = (ix.entries, last, ix.room())
    ix.close()
    return state, Path(ix.path).read_bytes()


def outcome(fn: Callable[[], None], tmp_path: Path) -> str | None:
    try:
        fn()
    except Exception as e:
        return f"{type(e).__name__}: {e}".replace(str(tmp_path), "")
    return None


@pytest.mark.parametrize("seed", range(40))
def test_append_entries_is_append_one_by_one(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    start = [(BASE + 1, 0)] if rng.random() < 0.5 else []
    pairs = []
    offset = BASE + (rng.choice([1, 5]) if start else rng.choice([0, 3]))
    for _ in range(rng.choice([1, 2, 5, 20])):
        offset += rng.choice([1, 1, 7])
        pairs.append((offset, rng.randrange(0, 10_000)))
    bad = rng.random()
    if bad < 0.15:
        i = rng.randrange(len(pairs))
        pairs[i] = (pairs[i - 1][0] if i else BASE - 1, pairs[i][1])  # not increasing
    elif bad < 0.25:
        pairs[-1] = (BASE + MAX + 1, 0)  # relative offset overflow
    elif bad < 0.3:
        pairs[-1] = (pairs[-1][0], MAX + 1)  # position overflow
    size = 8 * rng.choice([len(start) + len(pairs), 40, len(start) + len(pairs) - 1 or 1])

    def fresh(name: str) -> OffsetIndex:
        ix = OffsetIndex(tmp_path / name, BASE, max_index_size=size)
        for o, p in start:
            ix.append(o, p)
        return ix

    one, bulk = fresh("one.index"), fresh("bulk.index")

    def one_by_one() -> None:
        for o, p in pairs:
            one.append(o, p)

    def at_once() -> None:
        bulk.append_entries(
            np.array([o for o, _ in pairs], np.int64), np.array([p for _, p in pairs], np.int64)
        )

    one_error, bulk_error = outcome(one_by_one, tmp_path), outcome(at_once, tmp_path)
    assert (bulk_error or "").replace("bulk", "one") == (one_error or ""), seed
    assert files_and_state(bulk) == files_and_state(one)


@pytest.mark.parametrize("seed", range(40))
def test_maybe_append_entries_is_maybe_append_one_by_one(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    start = [(1000, BASE + 1)] if rng.random() < 0.5 else []
    pairs = []
    ts, offset = 1000, BASE + 2
    for _ in range(rng.choice([1, 2, 5, 20])):
        ts += rng.choice([0, 1, 30])  # a timestamp that is not new adds nothing
        offset += rng.choice([0, 1, 7])
        pairs.append((ts, offset))
    bad = rng.random()
    if bad < 0.15:
        i = rng.randrange(len(pairs))
        pairs[i] = (pairs[i][0], BASE)  # offset going back
    elif bad < 0.25:
        i = rng.randrange(len(pairs))
        pairs[i] = (999, pairs[i][1])  # timestamp going back
    elif bad < 0.3:
        pairs[-1] = (ts + 1, BASE + MAX + 1)
    size = 12 * rng.choice([len(start) + len(pairs) + 1, 40, len(start) + len(pairs) - 1 or 1])

    def fresh(name: str) -> TimeIndex:
        ix = TimeIndex(tmp_path / name, BASE, max_index_size=size)
        for t, o in start:
            ix.maybe_append(t, o)
        return ix

    one, bulk = fresh("one.timeindex"), fresh("bulk.timeindex")

    def one_by_one() -> None:
        for t, o in pairs:
            one.maybe_append(t, o)

    def at_once() -> None:
        bulk.maybe_append_entries(
            np.array([t for t, _ in pairs], np.int64), np.array([o for _, o in pairs], np.int64)
        )

    one_error, bulk_error = outcome(one_by_one, tmp_path), outcome(at_once, tmp_path)
    assert (bulk_error or "").replace("bulk", "one") == (one_error or ""), seed
    assert files_and_state(bulk) == files_and_state(one)


def test_bulk_appends_on_a_closed_index_raise_as_append_does(tmp_path: Path) -> None:
    ix = OffsetIndex(tmp_path / "c.index", BASE)
    tx = TimeIndex(tmp_path / "c.timeindex", BASE)
    ix.close()
    tx.close()
    one = np.array([101], np.int64)
    with pytest.raises(ClosedError):
        ix.append_entries(one, one)
    with pytest.raises(ClosedError):
        tx.maybe_append_entries(one, one)
    ix.append_entries(one[:0], one[:0])  # nothing to append: nothing to refuse
    tx.maybe_append_entries(one[:0], one[:0])
