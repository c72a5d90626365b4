"""Every ``.index`` and ``.timeindex`` in the fixtures, written by real brokers: read-only opens
list what PROVENANCE.md says, leave the files untouched, and re-appending the entries to a new
index reproduces the file byte for byte. The zero-filled (preallocated) copies of live indexes
open read-only to exactly their real entries."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

from kafkalog.index import OffsetIndex, TimeIndex
from provenance import FileFacts, by_kind, preallocated

INDEXES = by_kind("index") + by_kind("timeindex")


def _open(facts: FileFacts) -> OffsetIndex | TimeIndex:
    cls = OffsetIndex if facts.kind == "index" else TimeIndex
    assert facts.base_offset is not None
    return cls(facts.path, facts.base_offset, writable=False)


def _pairs(ix: OffsetIndex | TimeIndex) -> list[tuple[int, int]]:
    return [tuple(e) for e in ix]  # type: ignore[misc]


@pytest.mark.parametrize("facts", INDEXES, ids=lambda f: f.rel)
def test_fixture_index_entries(facts: FileFacts, tmp_path: Path) -> None:
    stat_before = facts.path.stat()
    raw_before = facts.path.read_bytes()
    with _open(facts) as ix:
        entries = _pairs(ix)
        ix.sanity_check()
    assert facts.path.read_bytes() == raw_before
    assert facts.path.stat().st_mtime_ns == stat_before.st_mtime_ns
    assert len(entries) == facts.entry_count == facts.size // ix.ENTRY_SIZE
    if facts.index_entries is not None:
        assert entries[: len(facts.index_entries)] == list(facts.index_entries)
    if facts.index_tail_entries:
        assert entries[-len(facts.index_tail_entries) :] == list(facts.index_tail_entries)
    # append the same entries to a fresh index: closing it reproduces the broker's bytes
    fresh = tmp_path / facts.path.name
    cls = type(ix)
    assert facts.base_offset is not None
    with cls(fresh, facts.base_offset) as new:
        for a, b in entries:
            if isinstance(new, OffsetIndex):
                new.append(a, b)
            else:
                new.maybe_append(a, b)
    assert fresh.read_bytes() == raw_before


@pytest.mark.parametrize("facts", preallocated(), ids=lambda f: f.rel)
def test_preallocated_live_index_opens_to_its_real_entries(
    facts: FileFacts, tmp_path: Path
) -> None:
    """The on-disk state of a running broker's active segment: entries, then zeros to 10 MiB."""
    name = facts.path.name.removesuffix(".preallocated.gz")
    live = tmp_path / name
    with gzip.open(facts.path) as src, open(live, "wb") as dst:
        shutil.copyfileobj(src, dst)
    assert live.stat().st_size == facts.preallocated_size
    trimmed = facts.path.parent / name
    base = int(name.split(".")[0])
    cls = OffsetIndex if name.endswith(".index") else TimeIndex
    with cls(live, base, writable=False) as ix_live, cls(trimmed, base, writable=False) as ix_trim:
        assert _pairs(ix_live) == _pairs(ix_trim)
        assert ix_live.max_entries == facts.preallocated_size // cls.ENTRY_SIZE
        if isinstance(ix_live, OffsetIndex) and ix_live.entries:
            last = ix_live.entry(ix_live.entries - 1)
            assert ix_live.lookup(last.offset + 10**6) == last
