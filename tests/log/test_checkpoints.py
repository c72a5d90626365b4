"""Kafka's small metadata files: every one in the fixtures parses to what PROVENANCE.md says and
is rewritten byte for byte; malformed files fail the way Kafka's readers fail, naming the file and
the byte offset of the bad line; writes are atomic; the leader-epoch cache follows Kafka's rules."""

from __future__ import annotations

import itertools
import json
import os
import pickle
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalog.errors import KafkalogError
from kafkalog.log.checkpoints import (
    CLEAN_SHUTDOWN_FILE,
    METADATA_TOPIC_ID,
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    ZERO_UUID,
    CheckpointError,
    CleanShutdownMarker,
    EpochEntry,
    LeaderEpochCache,
    LeaderEpochCheckpoint,
    MetaProperties,
    OffsetCheckpoint,
    PartitionMetadata,
    PartitionMetadataInfo,
    decode_uuid,
    encode_uuid,
    new_topic_id,
)
from provenance import FIXTURES, FileFacts, load

OFFSET_NAMES = {
    "recovery-point-offset-checkpoint",
    "log-start-offset-checkpoint",
    "replication-offset-checkpoint",
    "cleaner-offset-checkpoint",
}
ALL_NAMES = OFFSET_NAMES | {
    "leader-epoch-checkpoint",
    "partition.metadata",
    "meta.properties",
    CLEAN_SHUTDOWN_FILE,
}


def _facts(*names: str) -> list[FileFacts]:
    return sorted(
        (f for f in load().values() if f.name in names and f.kind in ("text", "empty")),
        key=lambda f: f.rel,
    )


OFFSET_FIXTURES = _facts(*OFFSET_NAMES)
EPOCH_FIXTURES = _facts("leader-epoch-checkpoint")
PARTITION_METADATA_FIXTURES = _facts("partition.metadata")
META_FIXTURES = _facts("meta.properties")
SHUTDOWN_FIXTURES = _facts(CLEAN_SHUTDOWN_FILE)


def _ids(f: FileFacts) -> str:
    return f.rel


def _provenance_lines(facts: FileFacts) -> list[str]:
    """The file's lines as PROVENANCE.md records them (``[]`` for an empty file)."""
    if facts.size == 0:
        assert facts.text in (None, "")
        return []
    assert facts.text is not None
    return facts.text.split(" | ")


def _matches_provenance(facts: FileFacts, rendered_lines: list[str]) -> None:
    """Exact comparison where PROVENANCE has the whole text, prefix where it cut it off."""
    if facts.text_maybe_truncated:
        assert facts.text is not None
        assert " | ".join(rendered_lines).startswith(facts.text)
    else:
        assert rendered_lines == _provenance_lines(facts)


# --------------------------------------------------------------------------------------------
# the fixture set itself


def test_every_fixture_metadata_file_is_described() -> None:
    """Each file of these names under the fixtures is covered by a PROVENANCE bullet (and so by
    the parametrised tests below), and each family has real examples."""
    on_disk = {
        p.relative_to(FIXTURES).as_posix()
        for p in FIXTURES.rglob("*")
        if p.is_file() and p.name in ALL_NAMES
    }
    described = {f.rel for f in _facts(*ALL_NAMES)}
    assert on_disk == described
    assert len(OFFSET_FIXTURES) >= 20
    assert len(EPOCH_FIXTURES) >= 20
    assert len(PARTITION_METADATA_FIXTURES) >= 20
    assert len(META_FIXTURES) >= 5
    assert len(SHUTDOWN_FIXTURES) >= 3


# --------------------------------------------------------------------------------------------
# offset checkpoints


@pytest.mark.parametrize("facts", OFFSET_FIXTURES, ids=_ids)
def test_offset_checkpoint_fixture(facts: FileFacts, tmp_path: Path) -> None:
    entries = OffsetCheckpoint.read(facts.path)
    data = facts.path.read_bytes()
    if facts.size == 0:
        # Created but never written (Kafka's CheckpointFile creates the file up front).
        assert entries == {}
        assert _provenance_lines(facts) == []
        return
    rendered = ["0", str(len(entries)), *(f"{t} {p} {o}" for (t, p), o in entries.items())]
    _matches_provenance(facts, rendered)
    out = tmp_path / facts.name
    OffsetCheckpoint.write(out, entries)
    assert out.read_bytes() == data
    assert os.listdir(tmp_path) == [facts.name]


def test_offset_checkpoint_encoding() -> None:
    data = OffsetCheckpoint.encode({("orders", 3): 42, ("a.b-c_d", 0): 0, ("x", 2**31 - 1): -1})
    assert data == b"0\n3\norders 3 42\na.b-c_d 0 0\nx 2147483647 -1\n"
    assert OffsetCheckpoint.parse(data) == {
        ("orders", 3): 42,
        ("a.b-c_d", 0): 0,
        ("x", 2**31 - 1): -1,
    }


def test_offset_checkpoint_empty_map_is_written_as_kafka_writes_it(tmp_path: Path) -> None:
    """Kafka writes version and a zero count for an empty map; a 0-byte file is only what it
    leaves when it created the file and never wrote it.  Both read as empty."""
    assert OffsetCheckpoint.encode({}) == b"0\n0\n"
    OffsetCheckpoint.write(tmp_path / "cp", {})
    assert (tmp_path / "cp").read_bytes() == b"0\n0\n"
    assert OffsetCheckpoint.parse(b"") == {}
    assert OffsetCheckpoint.parse(b"0\n0\n") == {}


def test_offset_checkpoint_reader_leniencies_match_kafka() -> None:
    # only a version line: Kafka returns no entries
    assert OffsetCheckpoint.parse(b"0\n") == {}
    assert OffsetCheckpoint.parse(b"0") == {}
    # readLine accepts \r\n and \r; the last line needs no terminator
    assert OffsetCheckpoint.parse(b"0\r\n1\r\nt 0 5\r\n") == {("t", 0): 5}
    assert OffsetCheckpoint.parse(b"0\r1\rt 0 5") == {("t", 0): 5}
    # tokens split on runs of any ASCII whitespace; trailing whitespace is dropped by split
    assert OffsetCheckpoint.parse(b"0\n1\nt \t 0\x0b5  \t\n") == {("t", 0): 5}
    # signs and non-ASCII decimal digits are what Java's parseInt accepts
    assert OffsetCheckpoint.parse(b"+0\n+1\nt -1 +7\n") == {("t", -1): 7}
    assert OffsetCheckpoint.parse("0\n1\nt \u0663 5\n".encode()) == {("t", 3): 5}
    # a partition listed twice keeps its last offset; the count counts lines
    assert OffsetCheckpoint.parse(b"0\n2\nt 0 5\nt 0 9\n") == {("t", 0): 9}
    # extreme values
    big = f"0\n1\nt {2**31 - 1} {2**63 - 1}\n".encode()
    assert OffsetCheckpoint.parse(big) == {("t", 2**31 - 1): 2**63 - 1}


MALFORMED_OFFSET_FILES = [
    # (content, byte position of the offending line, words in the reason)
    (b"1\n0\n", 0, "version 1"),
    (b"-1\n0\n", 0, "version -1"),
    (b"x\n", 0, "malformed version"),
    (b" 0\n0\n", 0, "malformed version"),
    (b"0 \n0\n", 0, "malformed version"),
    (b"\n", 0, "malformed version"),
    (b"99999999999\n", 0, "malformed version"),
    (b"0\nabc\n", 2, "entry-count"),
    (b"0\n-1\n", 2, "entry-count"),
    (b"0\n1_0\n", 2, "entry-count"),
    (b"0\n2\nt 0 1\n", 2, "expected 2 entries, found 1"),
    (b"0\n0\nt 0 1\n", 2, "expected 0 entries, found 1"),
    (b"0\n1\nt 0\n", 4, "malformed line"),
    (b"0\n1\nt 0 1 2\n", 4, "malformed line"),
    (b"0\n1\n t 0 1\n", 4, "malformed line"),
    (b"0\n1\nt x 1\n", 4, "malformed line"),
    (b"0\n1\nt 0 1.5\n", 4, "malformed line"),
    (b"0\n1\nt 0 0x10\n", 4, "malformed line"),
    (b"0\n1\nt 2147483648 1\n", 4, "malformed line"),
    (b"0\n1\nt 0 9223372036854775808\n", 4, "malformed line"),
    (b"0\n2\nt 0 1\nu 0\n", 10, "malformed line"),
    (b"0\n0\n\n", 4, "malformed line"),
    (b"0\n1\nt\xff 0 1\n", 4, "UTF-8"),
    (b"\xef\xbb\xbf0\n0\n", 0, "malformed version"),
]


@pytest.mark.parametrize(("content", "position", "reason"), MALFORMED_OFFSET_FILES)
def test_offset_checkpoint_malformed(
    content: bytes, position: int, reason: str, tmp_path: Path
) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    path.write_bytes(content)
    with pytest.raises(CheckpointError) as info:
        OffsetCheckpoint.read(path)
    err = info.value
    assert err.path == str(path)
    assert err.position == position
    assert reason in err.reason
    assert str(path) in str(err) and f"at byte {position}" in str(err)
    assert isinstance(err, KafkalogError)


def test_checkpoint_error_pickles() -> None:
    err = CheckpointError("bad", path="/x/cp", position=7)
    copy = pickle.loads(pickle.dumps(err))
    assert type(copy) is CheckpointError
    assert (copy.reason, copy.path, copy.position) == ("bad", "/x/cp", 7)


@pytest.mark.parametrize(
    "entries",
    [
        {("has space", 0): 1},
        {("", 0): 1},
        {("tab\t", 0): 1},
        {("new\nline", 0): 1},
        {("t", 2**31): 1},
        {("t", 0): 2**63},
        {("t", 0): True},
        {("t", "0"): 1},
    ],
)
def test_offset_checkpoint_refuses_unwritable_entries(entries: dict[object, object]) -> None:
    with pytest.raises(ValueError):
        OffsetCheckpoint.encode(entries)  # type: ignore[arg-type]


_TOPICS = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-",
    min_size=1,
    max_size=30,
)


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(
        st.tuples(_TOPICS, st.integers(0, 2**31 - 1)),
        st.integers(-(2**63), 2**63 - 1),
        max_size=20,
    )
)
def test_offset_checkpoint_round_trip(entries: dict[tuple[str, int], int]) -> None:
    data = OffsetCheckpoint.encode(entries)
    parsed = OffsetCheckpoint.parse(data)
    assert parsed == entries
    assert list(parsed) == list(entries)  # insertion order is kept
    assert OffsetCheckpoint.encode(parsed) == data


# --------------------------------------------------------------------------------------------
# atomic writes


def _no_tmp(directory: Path) -> bool:
    return not any(name.endswith(".tmp") for name in os.listdir(directory))


def test_atomic_write_replaces_and_leaves_no_tmp(tmp_path: Path) -> None:
    path = tmp_path / "replication-offset-checkpoint"
    OffsetCheckpoint.write(path, {("t", 0): 1})
    OffsetCheckpoint.write(str(path), {("t", 0): 2})
    assert path.read_bytes() == b"0\n1\nt 0 2\n"
    assert _no_tmp(tmp_path)


def test_atomic_write_overwrites_a_stale_tmp(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    (tmp_path / "leader-epoch-checkpoint.tmp").write_bytes(b"garbage from a crash" * 100)
    LeaderEpochCheckpoint.write(path, [EpochEntry(0, 0)])
    assert path.read_bytes() == b"0\n1\n0 0\n"
    assert _no_tmp(tmp_path)


@pytest.mark.parametrize("failing", ["replace", "fsync", "write"])
def test_failed_write_keeps_the_original(
    failing: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    OffsetCheckpoint.write(path, {("t", 0): 1})
    original = path.read_bytes()

    def boom(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    if failing == "write":
        real_open = open

        class _Broken:
            def __init__(self, f: object) -> None:
                self._f = f

            def __enter__(self) -> _Broken:
                return self

            def __exit__(self, *exc: object) -> None:
                self._f.close()  # type: ignore[attr-defined]

            def write(self, data: bytes) -> int:
                self._f.write(data[: len(data) // 2])  # type: ignore[attr-defined]
                raise OSError(28, "No space left on device")

        def half_open(name: str, mode: str = "r", *a: object, **k: object) -> object:
            f = real_open(name, mode, *a, **k)  # type: ignore[call-overload]
            return _Broken(f) if "w" in mode else f

        monkeypatch.setattr("builtins.open", half_open)
    else:
        monkeypatch.setattr(os, failing, boom)
    with pytest.raises(OSError):
        OffsetCheckpoint.write(path, {("t", 0): 2, ("u", 1): 3})
    monkeypatch.undo()
    assert path.read_bytes() == original
    assert _no_tmp(tmp_path)


def test_atomic_write_fsyncs_file_and_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kinds: list[str] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        kinds.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    PartitionMetadata.write(tmp_path / "partition.metadata", METADATA_TOPIC_ID)
    assert kinds == ["file", "dir"]


# --------------------------------------------------------------------------------------------
# leader-epoch-checkpoint


@pytest.mark.parametrize("facts", EPOCH_FIXTURES, ids=_ids)
def test_leader_epoch_fixture(facts: FileFacts, tmp_path: Path) -> None:
    entries = LeaderEpochCheckpoint.read(facts.path)
    rendered = ["0", str(len(entries)), *(f"{e.epoch} {e.start_offset}" for e in entries)]
    _matches_provenance(facts, rendered)
    # brokers only ever write monotonic entries, so loading through the cache changes nothing
    cache = LeaderEpochCache.from_file(facts.path)
    assert cache.entries == entries
    out = tmp_path / facts.name
    LeaderEpochCheckpoint.write(out, entries)
    assert out.read_bytes() == facts.path.read_bytes()
    out.unlink()
    cache.write(out)
    assert out.read_bytes() == facts.path.read_bytes()


def test_leader_epoch_checkpoint_encoding_and_malformed(tmp_path: Path) -> None:
    assert (
        LeaderEpochCheckpoint.encode([(0, 0), EpochEntry(5, 2**32)]) == b"0\n2\n0 0\n5 4294967296\n"
    )
    assert LeaderEpochCheckpoint.parse(b"0\n2\n0 0\n5 4294967296\n") == [
        EpochEntry(0, 0),
        EpochEntry(5, 2**32),
    ]
    assert LeaderEpochCheckpoint.encode([]) == b"0\n0\n"
    # out-of-order lines are kept as written at this level
    assert LeaderEpochCheckpoint.parse(b"0\n2\n3 9\n1 2\n") == [EpochEntry(3, 9), EpochEntry(1, 2)]
    path = tmp_path / "leader-epoch-checkpoint"
    for content, position in [
        (b"0\n1\n0 0 0\n", 4),
        (b"0\n1\n0\n", 4),
        (b"0\n1\n2147483648 0\n", 4),
        (b"0\n2\n0 0\n", 2),
        (b"1\n0\n", 0),
    ]:
        path.write_bytes(content)
        with pytest.raises(CheckpointError) as info:
            LeaderEpochCheckpoint.read(path)
        assert (info.value.path, info.value.position) == (str(path), position)
    with pytest.raises(ValueError):
        LeaderEpochCheckpoint.encode([(2**31, 0)])


def test_leader_epoch_cache_load_applies_kafkas_rules(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    assert LeaderEpochCache.from_file(path).entries == []  # missing file = empty
    # (1, 5) conflicts with the later (2, 10) entry: Kafka's load drops (2, 10)
    path.write_bytes(b"0\n3\n0 0\n2 10\n1 5\n")
    assert LeaderEpochCache.from_file(path).entries == [EpochEntry(0, 0), EpochEntry(1, 5)]
    # Kafka refuses negative entries while loading
    path.write_bytes(b"0\n2\n0 0\n-1 5\n")
    with pytest.raises(CheckpointError) as info:
        LeaderEpochCache.from_file(path)
    assert info.value.position == 8
    path.write_bytes(b"0\n1\n3 -5\n")
    with pytest.raises(CheckpointError):
        LeaderEpochCache.from_file(path)


def _cache(*pairs: tuple[int, int]) -> LeaderEpochCache:
    return LeaderEpochCache(pairs)


def _pairs(cache: LeaderEpochCache) -> list[tuple[int, int]]:
    return [tuple(e) for e in cache.entries]  # type: ignore[misc]


def test_leader_epoch_cache_assign() -> None:
    cache = LeaderEpochCache()
    assert cache.latest_epoch is None and cache.latest_entry is None
    assert cache.earliest_entry is None and len(cache) == 0
    assert cache.assign(0, 0) is True
    assert cache.assign(0, 5) is False  # same epoch, later offset: every batch does this
    assert cache.assign(1, 10) is True
    assert cache.assign(1, 10) is False
    assert _pairs(cache) == [(0, 0), (1, 10)]
    assert cache.latest_epoch == 1 and cache.latest_entry == EpochEntry(1, 10)
    assert cache.earliest_entry == EpochEntry(0, 0)
    # same epoch starting earlier: replaces the entry
    assert cache.assign(1, 8) is True
    assert _pairs(cache) == [(0, 0), (1, 8)]
    # a new epoch starting before the latest start: conflicting history is dropped
    assert cache.assign(3, 20) is True
    assert cache.assign(4, 8) is True
    assert _pairs(cache) == [(0, 0), (4, 8)]
    # a lower epoch than the latest: higher epochs are dropped
    assert cache.assign(2, 30) is True
    assert _pairs(cache) == [(0, 0), (2, 30)]
    assert cache.epoch_entry(2) == EpochEntry(2, 30)
    assert cache.epoch_entry(1) is None
    for epoch, start in [(-1, 0), (0, -1)]:
        with pytest.raises(ValueError):
            cache.assign(epoch, start)
    with pytest.raises(ValueError):
        cache.assign(2**31, 0)
    cache.clear()
    assert cache.entries == []
    assert repr(_cache((1, 2))) == "LeaderEpochCache([(1, 2)])"
    assert list(_cache((1, 2), (3, 4))) == [EpochEntry(1, 2), EpochEntry(3, 4)]


@pytest.mark.parametrize(
    ("end_offset", "removed", "kept"),
    [
        (10, [(2, 10)], [(0, 0), (1, 5)]),
        (11, [], [(0, 0), (1, 5), (2, 10)]),
        (6, [(2, 10)], [(0, 0), (1, 5)]),
        (5, [(1, 5), (2, 10)], [(0, 0)]),
        (0, [(0, 0), (1, 5), (2, 10)], []),
        (-1, [], [(0, 0), (1, 5), (2, 10)]),
    ],
)
def test_leader_epoch_cache_truncate_from_end(
    end_offset: int, removed: list[tuple[int, int]], kept: list[tuple[int, int]]
) -> None:
    cache = _cache((0, 0), (1, 5), (2, 10))
    assert cache.truncate_from_end(end_offset) == removed
    assert _pairs(cache) == kept


@pytest.mark.parametrize(
    ("start_offset", "removed", "kept"),
    [
        (6, [(0, 0), (1, 5)], [(1, 6), (2, 10)]),
        (5, [(0, 0), (1, 5)], [(1, 5), (2, 10)]),  # an entry exactly at the start is kept
        (4, [(0, 0)], [(0, 4), (1, 5), (2, 10)]),
        (10, [(0, 0), (1, 5), (2, 10)], [(2, 10)]),
        (15, [(0, 0), (1, 5), (2, 10)], [(2, 15)]),
        (0, [(0, 0)], [(0, 0), (1, 5), (2, 10)]),
        (-1, [], [(0, 0), (1, 5), (2, 10)]),
    ],
)
def test_leader_epoch_cache_truncate_from_start(
    start_offset: int, removed: list[tuple[int, int]], kept: list[tuple[int, int]]
) -> None:
    cache = _cache((0, 0), (1, 5), (2, 10))
    assert cache.truncate_from_start(start_offset) == removed
    assert _pairs(cache) == kept


def test_leader_epoch_cache_truncate_from_start_is_exclusive() -> None:
    """Kafka's own example: truncateFromStart(6) retains an entry at offset 6."""
    cache = _cache((0, 0), (1, 6))
    cache.truncate_from_start(6)
    assert _pairs(cache) == [(1, 6)]
    cache = _cache((3, 10))
    assert cache.truncate_from_start(4) == []
    assert _pairs(cache) == [(3, 10)]


def test_leader_epoch_cache_epoch_for_offset() -> None:
    assert LeaderEpochCache().epoch_for_offset(0) is None
    cache = _cache((1, 5), (2, 10), (4, 20))
    expected = {0: None, 4: None, 5: 1, 9: 1, 10: 2, 19: 2, 20: 4, 10**12: 4}
    for offset, epoch in expected.items():
        assert cache.epoch_for_offset(offset) == epoch


def test_leader_epoch_cache_end_offset_for() -> None:
    undefined = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
    assert LeaderEpochCache().end_offset_for(0, 100) == undefined
    cache = _cache((1, 5), (2, 10), (4, 20))
    assert cache.end_offset_for(UNDEFINED_EPOCH, 100) == undefined
    assert cache.end_offset_for(4, 100) == (4, 100)  # latest epoch: the log end offset
    assert cache.end_offset_for(2, 100) == (2, 20)
    assert cache.end_offset_for(3, 100) == (2, 20)  # unknown epoch: floor epoch, next start
    assert cache.end_offset_for(0, 100) == (0, 5)  # before every epoch: the first start
    assert cache.end_offset_for(5, 100) == undefined  # after every epoch


class _ReferenceCache:
    """The rules of spec §7.11 written as whole-list filters (no incremental tricks)."""

    def __init__(self) -> None:
        self.entries: list[tuple[int, int]] = []

    def assign(self, epoch: int, start: int) -> None:
        if self.entries and self.entries[-1][0] == epoch and start >= self.entries[-1][1]:
            return
        self.entries = [e for e in self.entries if e[0] < epoch and e[1] < start]
        self.entries.append((epoch, start))

    def truncate_from_end(self, end: int) -> None:
        if end >= 0:
            self.entries = [e for e in self.entries if e[1] < end]

    def truncate_from_start(self, start: int) -> None:
        before = [e for e in self.entries if e[1] <= start]
        after = [e for e in self.entries if e[1] > start]
        self.entries = ([(before[-1][0], start)] if before else []) + after


_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("assign"), st.integers(0, 12), st.integers(0, 60)),
        st.tuples(st.just("end"), st.integers(-1, 60)),
        st.tuples(st.just("start"), st.integers(-1, 60)),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(_OPS)
def test_leader_epoch_cache_matches_reference_model(ops: list[tuple[object, ...]]) -> None:
    cache, ref = LeaderEpochCache(), _ReferenceCache()
    for op in ops:
        if op[0] == "assign":
            cache.assign(op[1], op[2])  # type: ignore[arg-type]
            ref.assign(op[1], op[2])  # type: ignore[arg-type]
        elif op[0] == "end":
            cache.truncate_from_end(op[1])  # type: ignore[arg-type]
            ref.truncate_from_end(op[1])  # type: ignore[arg-type]
        else:
            cache.truncate_from_start(op[1])  # type: ignore[arg-type]
            ref.truncate_from_start(op[1])  # type: ignore[arg-type]
        pairs = _pairs(cache)
        assert pairs == ref.entries
        # invariant: strictly increasing epochs and start offsets
        assert all(a[0] < b[0] and a[1] < b[1] for a, b in itertools.pairwise(pairs))
    # reloading the written checkpoint reproduces the cache
    data = LeaderEpochCheckpoint.encode(cache.entries)
    assert LeaderEpochCache(LeaderEpochCheckpoint.parse(data)).entries == cache.entries


# --------------------------------------------------------------------------------------------
# partition.metadata and Kafka Uuids


@pytest.mark.parametrize("facts", PARTITION_METADATA_FIXTURES, ids=_ids)
def test_partition_metadata_fixture(facts: FileFacts, tmp_path: Path) -> None:
    info = PartitionMetadata.read(facts.path)
    assert isinstance(info, PartitionMetadataInfo)
    _matches_provenance(facts, [f"version: {info.version}", f"topic_id: {info.topic_id}"])
    version, topic_id = info
    assert version == 0 and len(topic_id) == 22
    out = tmp_path / facts.name
    PartitionMetadata.write(out, topic_id)
    assert out.read_bytes() == facts.path.read_bytes()
    if facts.path.parent.name == "__cluster_metadata-0":
        assert topic_id == METADATA_TOPIC_ID


def test_partition_metadata_bytes() -> None:
    topic_id = "kVV3-At9OEueslm1fYFrbg"
    data = PartitionMetadata.encode(topic_id)
    assert data == b"version: 0\ntopic_id: kVV3-At9OEueslm1fYFrbg"
    assert PartitionMetadata.parse(data) == (0, topic_id)


def test_partition_metadata_reader_leniencies() -> None:
    tid = "kVV3-At9OEueslm1fYFrbg"
    # any version >= 0 (downgrade compatibility), several blanks after the colon, CRLF,
    # a trailing newline and anything after the second line are all accepted
    assert PartitionMetadata.parse(f"version: 3\ntopic_id: {tid}".encode()) == (3, tid)
    assert PartitionMetadata.parse(f"version:\t 0\r\ntopic_id:  {tid}\n".encode()) == (0, tid)
    assert PartitionMetadata.parse(f"version: 0\ntopic_id: {tid}\nextra\n".encode()) == (0, tid)
    # padded base64 decodes like Java's URL decoder; the id comes back canonical
    assert PartitionMetadata.parse(f"version: 0\ntopic_id: {tid}==".encode()) == (0, tid)


@pytest.mark.parametrize(
    ("content", "position", "reason"),
    [
        (b"", 0, "missing 'version'"),
        (b"version: 0", 10, "missing 'topic_id'"),
        (b"version: 0\n", 11, "missing 'topic_id'"),
        (b"version:0\ntopic_id: kVV3-At9OEueslm1fYFrbg", 0, "malformed line"),
        (b"versio: 0\ntopic_id: kVV3-At9OEueslm1fYFrbg", 0, "malformed line"),
        (b"version: x\ntopic_id: kVV3-At9OEueslm1fYFrbg", 0, "malformed version"),
        (b"version: -1\ntopic_id: kVV3-At9OEueslm1fYFrbg", 0, "version -1"),
        (b"version: 0\ntopicid: kVV3-At9OEueslm1fYFrbg", 11, "malformed line"),
        (b"version: 0\ntopic_id: kVV3-At9OEueslm1fYFrb", 11, "not a Kafka Uuid"),
        (b"version: 0\ntopic_id: kVV3+At9OEueslm1fYFrbg", 11, "not a Kafka Uuid"),
        (b"version: 0\ntopic_id: kVV3-At9OEueslm1fYFrbg=", 11, "not a Kafka Uuid"),
        (b"version: 0\ntopic_id: kVV3-At9OEueslm1fYFrbg ", 11, "not a Kafka Uuid"),
        (b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA", 11, "zero Uuid"),
        # the unused low bits of the last character are ignored, as by Java's decoder
        (b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAB", 11, "zero Uuid"),
        (b"version: 0\ntopic_id: \xff", 11, "UTF-8"),
    ],
)
def test_partition_metadata_malformed(
    content: bytes, position: int, reason: str, tmp_path: Path
) -> None:
    path = tmp_path / "partition.metadata"
    path.write_bytes(content)
    with pytest.raises(CheckpointError) as info:
        PartitionMetadata.read(path)
    assert (info.value.path, info.value.position) == (str(path), position)
    assert reason in info.value.reason


def test_partition_metadata_write_refuses_bad_ids(tmp_path: Path) -> None:
    for bad in [ZERO_UUID, "short", "kVV3+At9OEueslm1fYFrbg"]:
        with pytest.raises(ValueError):
            PartitionMetadata.write(tmp_path / "partition.metadata", bad)
    assert not (tmp_path / "partition.metadata").exists()
    assert _no_tmp(tmp_path)


def test_new_topic_id() -> None:
    ids = {new_topic_id() for _ in range(500)}
    assert len(ids) == 500
    for tid in ids:
        raw = decode_uuid(tid)
        assert len(tid) == 22 and encode_uuid(raw) == tid
        assert "-" not in tid
        assert tid not in (ZERO_UUID, METADATA_TOPIC_ID)
        assert raw[6] >> 4 == 4 and raw[8] >> 6 == 0b10  # a random (v4) UUID, like Java's
        assert PartitionMetadata.parse(PartitionMetadata.encode(tid)).topic_id == tid


def test_uuid_helpers() -> None:
    assert encode_uuid(bytes(16)) == ZERO_UUID
    assert encode_uuid(bytes(15) + b"\x01") == METADATA_TOPIC_ID
    assert decode_uuid(METADATA_TOPIC_ID) == bytes(15) + b"\x01"
    for bad in ["", "A" * 21, "A" * 23, "A" * 22 + "=", "A" * 21 + "!"]:
        with pytest.raises(ValueError):
            decode_uuid(bad)
    with pytest.raises(ValueError):
        encode_uuid(b"\x00" * 15)


# --------------------------------------------------------------------------------------------
# .kafka_cleanshutdown


@pytest.mark.parametrize("facts", SHUTDOWN_FIXTURES, ids=_ids)
def test_clean_shutdown_fixture(facts: FileFacts, tmp_path: Path) -> None:
    log_dir = facts.path.parent
    assert CleanShutdownMarker.exists(log_dir)
    epoch = CleanShutdownMarker.read_broker_epoch(log_dir)
    lines = _provenance_lines(facts)
    if lines:
        assert epoch == json.loads(lines[0])["brokerEpoch"]
    else:
        assert epoch is None  # written by a broker older than 3.7, or stopped mid-write
    CleanShutdownMarker.write(tmp_path, epoch)
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).read_bytes() == facts.path.read_bytes()


def test_clean_shutdown_marker_lifecycle(tmp_path: Path) -> None:
    assert not CleanShutdownMarker.exists(tmp_path)
    assert CleanShutdownMarker.read_broker_epoch(tmp_path) is None
    assert CleanShutdownMarker.remove(tmp_path) is False
    CleanShutdownMarker.write(str(tmp_path), 42)
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).read_bytes() == b'{"version":0,"brokerEpoch":42}'
    assert CleanShutdownMarker.exists(tmp_path)
    assert CleanShutdownMarker.read_broker_epoch(tmp_path) == 42
    CleanShutdownMarker.write(tmp_path, None)
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).read_bytes() == b""
    assert CleanShutdownMarker.exists(tmp_path)
    assert CleanShutdownMarker.read_broker_epoch(tmp_path) is None
    assert CleanShutdownMarker.remove(tmp_path) is True
    assert not CleanShutdownMarker.exists(tmp_path)
    assert os.listdir(tmp_path) == []
    with pytest.raises(ValueError):
        CleanShutdownMarker.encode(2**63)


@pytest.mark.parametrize(
    ("body", "epoch"),
    [
        (b'{"version":0,"brokerEpoch":42}', 42),
        (b'{"brokerEpoch":7,"version":0}', 7),
        (b'{"version":0,"brokerEpoch":-1}', -1),
        (b'  {"version":0,"brokerEpoch":9223372036854775807}', 2**63 - 1),
        (b'{"version":1,"brokerEpoch":5,"future":"field"}', 5),  # unknown fields ignored
        (b'{"version":0,"brokerEpoch":5}\ntrailing', 5),  # Jackson stops after the object
        (b"", None),
        (b"\n", None),
        (b"not json", None),
        (b"[1, 2]", None),
        (b'{"version":0}', None),
        (b'{"version":0,"brokerEpoch":null}', None),
        (b'{"version":0,"brokerEpoch":true}', None),
        (b'{"version":0,"brokerEpoch":"42"}', None),
        (b'{"version":0,"brokerEpoch":4.5}', None),
        (b'{"version":"x","brokerEpoch":42}', None),
        (b'{"version":0,"brokerEpoch":9223372036854775808}', None),
        (b'{"version":0,"brokerEpoch":\xff}', None),
    ],
)
def test_clean_shutdown_body(body: bytes, epoch: int | None, tmp_path: Path) -> None:
    assert CleanShutdownMarker.parse_broker_epoch(body) == epoch
    (tmp_path / CLEAN_SHUTDOWN_FILE).write_bytes(body)
    assert CleanShutdownMarker.read_broker_epoch(tmp_path) == epoch


# --------------------------------------------------------------------------------------------
# meta.properties


@pytest.mark.parametrize("facts", META_FIXTURES, ids=_ids)
def test_meta_properties_fixture(facts: FileFacts) -> None:
    props = MetaProperties.read(facts.path)
    expected = dict(
        line.split("=", 1) for line in _provenance_lines(facts) if not line.startswith("#")
    )
    assert props == expected
    meta = MetaProperties.load(facts.path)
    assert meta.properties == props and meta.path == str(facts.path)
    assert meta.version == int(props["version"])
    assert meta.cluster_id == props.get("cluster.id")
    if meta.version == 0:
        assert meta.node_id == meta.broker_id == int(props["broker.id"])
    else:
        assert meta.node_id == int(props["node.id"])
        assert meta.cluster_id is not None
    assert meta.directory_id == props.get("directory.id")


def test_properties_syntax() -> None:
    text = (
        b"#comment\n"
        b"   ! another comment\n"
        b"\n"
        b"   \t\n"
        b"a=1\n"
        b"b : 2\n"
        b"c   3\n"
        b"  d\t=\t4  \n"  # leading blanks dropped, trailing blanks kept
        b"e\n"  # a key without value
        b"f==6\n"  # only the first separator is skipped
        b"g = = 7\n"
        b"h\\:x\\=y\\ z=8\n"  # escaped separators and blanks belong to the key
        b"i=a\\\\b\\tc\\nd\\re\\ff\\qg\n"
        b"j=caf\\u00e9 \\uD83D\\uDE00\n"
        b"k=first \\\n"  # continuation: next line's leading blanks dropped
        b"     second \\\n"
        b"  # not a comment\n"
        b"l=even\\\\\n"  # an even number of backslashes does not continue
        b"m=\\\n"
        b"\n"  # a blank line ends a continuation
        b"n=last\\"  # a continuation at end of file just ends
    )
    props = MetaProperties.parse(text)
    assert props == {
        "a": "1",
        "b": "2",
        "c": "3",
        "d": "4  ",
        "e": "",
        "f": "=6",
        "g": "= 7",
        "h:x=y z": "8",
        "i": "a\\b\tc\nd\re\ffqg",
        "j": "café 😀",
        "k": "first second # not a comment",
        "l": "even\\",
        "m": "",
        "n": "last",
    }


def test_properties_line_endings_encoding_and_duplicates() -> None:
    assert MetaProperties.parse(b"a=1\r\nb=2\rc=3") == {"a": "1", "b": "2", "c": "3"}
    assert MetaProperties.parse(b"a=1\na=2\n") == {"a": "2"}
    # Properties.load(InputStream) reads ISO-8859-1
    assert MetaProperties.parse(b"a=caf\xe9\n") == {"a": "café"}


def test_properties_malformed_unicode_escape(tmp_path: Path) -> None:
    path = tmp_path / "meta.properties"
    path.write_bytes(b"version=1\nbad=\\u12G4\n")
    with pytest.raises(CheckpointError) as info:
        MetaProperties.read(path)
    assert (info.value.path, info.value.position) == (str(path), 10)


@pytest.mark.parametrize(
    ("content", "key_line", "reason"),
    [
        (b"version=3\n", 0, "unknown meta.properties version 3"),
        (b"version=one\n", 0, "invalid meta.properties version"),
        (b"cluster.id=c\nversion=1\n", 13, "node.id was not found"),
        (b"version=1\nnode.id=1\n", 0, "cluster.id was not found"),
        (b"version=1\ncluster.id=c\nnode.id=x\n", 23, "node.id"),
        (b"version=1\ncluster.id=c\nnode.id=1 \n", 23, "node.id"),  # Java parseInt: no trim
        (b"version=0\nbroker.id=\n", 10, "broker.id"),
        (b"version=0\ndirectory.id=nope\n", 10, "directory.id"),
    ],
)
def test_meta_properties_invalid(
    content: bytes, key_line: int, reason: str, tmp_path: Path
) -> None:
    path = tmp_path / "meta.properties"
    path.write_bytes(content)
    assert MetaProperties.read(path)  # the raw text is fine ...
    with pytest.raises(CheckpointError) as info:
        MetaProperties.load(path)  # ... Kafka's typed view is not
    assert (info.value.path, info.value.position) == (str(path), key_line)
    assert reason in info.value.reason


def test_meta_properties_typed_defaults() -> None:
    meta = MetaProperties({})  # no version key: version 0, nothing else known
    assert (meta.version, meta.cluster_id, meta.node_id, meta.directory_id) == (0, None, None, None)
    meta = MetaProperties({"version": " 1 ", "node.id": "3", "cluster.id": "c"})
    assert (meta.version, meta.node_id, meta.broker_id) == (1, 3, 3)  # version is trimmed
    v2 = MetaProperties({"version": "2", "node.id": "4", "directory.id": METADATA_TOPIC_ID + "=="})
    assert (v2.version, v2.node_id, v2.cluster_id, v2.directory_id) == (
        2,
        4,
        None,
        METADATA_TOPIC_ID,
    )


def _all_fixture_readers() -> list[tuple[str, Callable[[Path], object]]]:
    return [
        ("offset", OffsetCheckpoint.read),
        ("epoch", LeaderEpochCheckpoint.read),
        ("partition", PartitionMetadata.read),
        ("meta", MetaProperties.read),
    ]


@pytest.mark.parametrize(("name", "reader"), _all_fixture_readers())
def test_missing_files_raise_file_not_found(
    name: str, reader: Callable[[Path], object], tmp_path: Path
) -> None:
    with pytest.raises(FileNotFoundError):
        reader(tmp_path / "absent")
