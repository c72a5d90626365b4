"""The log layer's part of a broker-shaped data directory (issue 25 §6): the ``meta.properties``
writer (Kafka's ``Properties.store`` bytes, read back by the one parser), claiming a
directory's identity as a broker does (kept, completed, or refused), the
``replication-offset-checkpoint`` a :class:`LogDir` keeps on request, one topic id per topic,
and the ``leader-epoch-checkpoint`` written when it changed."""

from __future__ import annotations

import os
import re
import shutil
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clirun import tree_snapshot
from kafkalog.log import LogDir
from kafkalog.log.checkpoints import (
    CheckpointError,
    MetaProperties,
    OffsetCheckpoint,
    PartitionMetadata,
    decode_uuid,
)
from kafkalog.log.cleaner_checkpoint import create_checkpoint, read_checkpoint
from kafkalog.log.dir_identity import DirectoryIdentityError, claim, verify
from kafkalog.records import Record
from provenance import FIXTURES

KRAFT_JAVA21 = FIXTURES / "real-kraft-ronem123"  # a broker on Java 18+: keys sorted
CP_KRAFT = FIXTURES / "real-cp7.6.0-kafka3.6-kraft-lz4-flink-on-prem"  # v1, no directory.id
ZK_0_9 = FIXTURES / "kafka-0.9.0.1-broker"  # v0 without cluster.id
ZK_2020 = FIXTURES / "volodymyrzee-kafka-2020"  # v0 with cluster.id


def _header_and_body(data: bytes) -> tuple[list[bytes], list[bytes]]:
    lines = data.split(b"\n")
    assert lines[-1] == b""  # every line ends with \n
    return lines[:2], lines[2:-1]


def test_meta_properties_bytes_are_a_java_18_brokers() -> None:
    """A broker on Java 18+ writes keys sorted: our bytes after the date line are the real
    file's bytes."""
    real = (KRAFT_JAVA21 / "meta.properties").read_bytes()
    ours = MetaProperties.encode(MetaProperties.parse(real), now=1_765_000_000)
    (comment, date), body = _header_and_body(ours)
    assert comment == b"#" and date == b"#Sat Dec 06 05:46:40 UTC 2025"
    assert body == _header_and_body(real)[1]
    assert ours.endswith(real[real.index(b"\ncluster.id=") + 1 :])


@pytest.mark.parametrize("fixture", [CP_KRAFT, ZK_0_9, ZK_2020, KRAFT_JAVA21])
def test_meta_properties_round_trip_on_fixtures(fixture: Path, tmp_path: Path) -> None:
    props = MetaProperties.read(fixture / "meta.properties")
    MetaProperties.write(tmp_path / "meta.properties", props)
    assert MetaProperties.read(tmp_path / "meta.properties") == props
    assert not (tmp_path / "meta.properties.tmp").exists()


_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_TEXT, _TEXT, max_size=4))
def test_meta_properties_escaping_round_trips(props: dict[str, str]) -> None:
    """Whatever the strings (blanks, ``=:#!\\``, controls, non-Latin-1, astral characters),
    the parser reads back what the writer wrote, and the bytes are ASCII as ``store`` writes
    them."""
    data = MetaProperties.encode(props)
    assert data.isascii()
    assert MetaProperties.parse(data) == props


def test_meta_properties_escapes_as_java_does() -> None:
    data = MetaProperties.encode({"a key": " lead=x:y#z!\\\t\u00e9\U0001f600"}, now=0)
    assert data.split(b"\n")[2] == (b"a\\ key=\\ lead\\=x\\:y\\#z\\!\\\\\\t\\u00E9\\uD83D\\uDE00")


def test_claim_formats_a_new_directory(tmp_path: Path) -> None:
    identity = claim(tmp_path)
    meta = MetaProperties.load(tmp_path / "meta.properties")
    assert (meta.version, meta.node_id, meta.cluster_id, meta.directory_id) == (
        1,
        1,
        identity.cluster_id,
        identity.directory_id,
    )
    assert identity.node_id == 1 and len(decode_uuid(identity.cluster_id)) == 16
    assert claim(tmp_path) == identity  # the second start reads it back
    other = tmp_path / "other"
    other.mkdir()
    given_ids = claim(other, node_id=5, cluster_id="my-cluster")
    assert (given_ids.node_id, given_ids.cluster_id) == (5, "my-cluster")
    assert given_ids.directory_id != identity.directory_id


def _copy_meta(fixture: Path, target: Path) -> Path:
    target.mkdir()
    shutil.copy(fixture / "meta.properties", target / "meta.properties")
    os.chmod(target / "meta.properties", stat.S_IRUSR | stat.S_IWUSR)
    return target


def test_claim_keeps_a_kraft_file_and_adds_a_directory_id(tmp_path: Path) -> None:
    data = _copy_meta(CP_KRAFT, tmp_path / "d")
    before = MetaProperties.read(data / "meta.properties")
    identity = claim(data)
    after = MetaProperties.read(data / "meta.properties")
    assert identity.cluster_id == "MkU3OEVBNTcwNTJENDM2Qg" and identity.node_id == 1
    assert after == {**before, "directory.id": identity.directory_id}
    unchanged = (data / "meta.properties").read_bytes()
    assert claim(data, node_id=1) == identity
    assert (data / "meta.properties").read_bytes() == unchanged


def test_claim_keeps_zookeeper_files_at_version_0(tmp_path: Path) -> None:
    with_cluster = _copy_meta(ZK_2020, tmp_path / "zk")
    before = (with_cluster / "meta.properties").read_bytes()
    identity = claim(with_cluster)
    assert (identity.version, identity.node_id, identity.cluster_id) == (
        0,
        0,
        "lRaQCIBoRh2xRKLuP9CAQg",
    )
    assert identity.directory_id is None
    assert (with_cluster / "meta.properties").read_bytes() == before
    # a 0.9 broker's file has no cluster.id (its cluster's lived in ZooKeeper): none is
    # written (a real broker would refuse a random one), the id served is stable in memory
    old = _copy_meta(ZK_0_9, tmp_path / "old")
    before = tree_snapshot(old)
    first = claim(old)
    assert (first.version, first.node_id) == (0, 0)
    assert first.cluster_id == claim(old).cluster_id
    assert claim(old, cluster_id="from-zk").cluster_id == "from-zk"
    assert tree_snapshot(old) == before


@pytest.mark.parametrize(
    ("content", "position", "reason"),
    [
        # a damaged line reads as a key Kafka never writes (the garbage kept, ids changed)
        (b"#\nbroker.id=0\nversion=0\n\x07\xffgarbage\n", 24, "unknown key"),
        (b"version=0\nbroker.i\x00d=0\n", 10, "unknown key"),
        (b"#\nversion=0\ncluster.id=abc\n", 2, "version 0 without broker.id"),
        (b"version=1\nnode.id=1\n", 0, "cluster.id was not found"),
    ],
)
def test_a_malformed_file_is_refused_never_rewritten(
    tmp_path: Path, content: bytes, position: int, reason: str
) -> None:
    """Kafka refuses a malformed meta.properties; kafkalog too, naming file and byte, and
    never writes a new identity over it (issue 32.6)."""
    (tmp_path / "meta.properties").write_bytes(content)
    before = tree_snapshot(tmp_path)
    for check in (verify, claim):
        with pytest.raises(CheckpointError, match=re.escape(reason)) as e:
            check(tmp_path)
        assert e.value.path == str(tmp_path / "meta.properties")
        assert e.value.position == position
    assert tree_snapshot(tmp_path) == before


@pytest.mark.parametrize("fixture", sorted(FIXTURES.glob("*/meta.properties")))
def test_claim_never_changes_a_real_brokers_ids(tmp_path: Path, fixture: Path) -> None:
    """Every real broker's file: the ids it holds are the ones served, and the file is
    unchanged but for a version 1 file's missing directory.id (as Kafka 3.7+ adds it)."""
    data = _copy_meta(fixture.parent, tmp_path / "d")
    before = MetaProperties.read(data / "meta.properties")
    identity = claim(data)
    after = MetaProperties.read(data / "meta.properties")
    assert identity.node_id == int(before.get("node.id", before.get("broker.id", "-1")))
    if "cluster.id" in before:
        assert identity.cluster_id == before["cluster.id"]
    added = {k: v for k, v in after.items() if before.get(k) != v}
    assert added == ({} if before["version"] == "0" or "directory.id" in before else added)
    assert set(added) <= {"directory.id"} and {k: after[k] for k in before} == before


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        ({"node_id": 3}, "Stored node id 1 doesn't match previous node id 3 in "),
        ({"cluster_id": "x"}, "Invalid cluster.id in: "),
        ({"node_id": 1, "cluster_id": "x"}, "Expected x, but read MkU3OEVBNTcwNTJENDM2Qg"),
    ],
)
def test_claim_refuses_another_nodes_directory(
    tmp_path: Path, ids: dict[str, object], message: str
) -> None:
    data = _copy_meta(CP_KRAFT, tmp_path / "d")
    before = tree_snapshot(data)
    for check in (verify, claim):
        with pytest.raises(DirectoryIdentityError, match=re.escape(message)):
            check(data, **ids)  # type: ignore[arg-type]
    assert tree_snapshot(data) == before


def test_claim_refuses_an_invalid_file_naming_it(tmp_path: Path) -> None:
    (tmp_path / "meta.properties").write_bytes(b"version=1\ncluster.id=c\nnode.id=one\n")
    before = tree_snapshot(tmp_path)
    with pytest.raises(CheckpointError, match=re.escape("node.id")) as e:
        claim(tmp_path)
    assert e.value.path == str(tmp_path / "meta.properties") and e.value.position == 23
    assert tree_snapshot(tmp_path) == before


def test_logdir_keeps_high_watermarks_only_when_asked(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    with LogDir(plain, writable=True) as logdir:
        logdir.log("t", 0, create=True).append_records([Record.of(b"v")] * 3)
    assert not (plain / "replication-offset-checkpoint").exists()

    served = tmp_path / "served"
    with LogDir(served, writable=True, high_watermarks=True) as logdir:
        logdir.log("t", 0, create=True).append_records([Record.of(b"v")] * 3)
        logdir.log("u", 0, create=True)
        logdir.checkpoint()
        assert OffsetCheckpoint.read(served / "replication-offset-checkpoint") == {
            ("t", 0): 3,
            ("u", 0): 0,
        }
        logdir.log("t", 0).append_records([Record.of(b"w")])
    assert OffsetCheckpoint.read(served / "replication-offset-checkpoint") == {
        ("t", 0): 4,
        ("u", 0): 0,
    }
    # entries of partitions not opened are kept; a removed partition's go, here and in the
    # cleaner's checkpoint
    create_checkpoint(str(served))
    OffsetCheckpoint.write(served / "cleaner-offset-checkpoint", {("u", 0): 0, ("t", 0): 2})
    with LogDir(served, writable=True, high_watermarks=True) as logdir:
        logdir.log("u", 0)
        logdir.remove_partition("u", 0)
    assert OffsetCheckpoint.read(served / "replication-offset-checkpoint") == {("t", 0): 4}
    assert read_checkpoint(str(served)) == {("t", 0): 2}


def test_create_cleaner_checkpoint_only_when_missing(tmp_path: Path) -> None:
    create_checkpoint(str(tmp_path))
    assert (tmp_path / "cleaner-offset-checkpoint").read_bytes() == b"0\n0\n"
    OffsetCheckpoint.write(tmp_path / "cleaner-offset-checkpoint", {("t", 0): 5})
    create_checkpoint(str(tmp_path))
    assert read_checkpoint(str(tmp_path)) == {("t", 0): 5}


def test_a_topics_partitions_share_one_topic_id(tmp_path: Path) -> None:
    with LogDir(tmp_path, writable=True) as logdir:
        for p in range(3):
            logdir.log("t", p, create=True)
        logdir.log("t-x", 0, create=True)  # another topic, whose name starts the same
    ids = {PartitionMetadata.read(tmp_path / f"t-{p}" / "partition.metadata") for p in range(3)}
    assert len(ids) == 1
    other = PartitionMetadata.read(tmp_path / "t-x-0" / "partition.metadata")
    assert other not in ids
    # a deleted incarnation's directory does not lend its id
    deleted = tmp_path / "n-0.0123456789abcdef0123456789abcdef-delete"
    deleted.mkdir()
    PartitionMetadata.write(deleted / "partition.metadata", other.topic_id)
    with LogDir(tmp_path, writable=True) as logdir:
        logdir.log("n", 0, create=True)
    assert PartitionMetadata.read(tmp_path / "n-0" / "partition.metadata") != other


def test_leader_epoch_checkpoint_written_when_changed(tmp_path: Path) -> None:
    with LogDir(tmp_path, writable=True) as logdir:
        log = logdir.log("t", 0, create=True)
        log.append_records([Record.of(b"v")], partition_leader_epoch=0)
        path = tmp_path / "t-0" / "leader-epoch-checkpoint"
        log.write_checkpoints()
        assert path.read_bytes() == b"0\n1\n0 0\n"
        mtime = path.stat().st_mtime_ns
        os.utime(path, ns=(mtime - 10**9, mtime - 10**9))
        logdir.checkpoint()  # nothing changed: not rewritten
        assert path.stat().st_mtime_ns == mtime - 10**9
        log.append_records([Record.of(b"w")], partition_leader_epoch=3)
        logdir.checkpoint()
        assert path.read_bytes() == b"0\n2\n0 0\n3 1\n"
