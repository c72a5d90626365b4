"""``kafkalog serve``'s data directory is shaped as a Kafka broker's (issue 25 §6): after
serving a real client and a clean stop it holds the files a real KRaft broker's log directory
holds (the fixtures are the reference), each in the format Kafka reads (parsed with the one
reader of each format, and byte-level checks of the layouts the spec gives), with values
that agree with what the server told its clients: the high watermark is the log end, the
topic id is the one Metadata answered, the cluster and node ids are the ones DescribeCluster
answered, and all of them survive a restart. A directory a real broker wrote keeps its ids
when served; one formatted for another node is refused, as Kafka refuses it."""

from __future__ import annotations

import os
import re
import shutil
import stat
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicCollection
from confluent_kafka.admin import AdminClient, NewTopic

from clirun import kafkalog, kafkalog_here, tree_snapshot
from kafka_clients import config, consumer_settings, rdkafka
from kafkalog.log import LogDir
from kafkalog.log.checkpoints import (
    LeaderEpochCheckpoint,
    MetaProperties,
    OffsetCheckpoint,
    PartitionMetadata,
    encode_uuid,
)
from kafkalog.log.dir_identity import DirectoryIdentityError
from kafkalog.server import ServerThread
from provenance import FIXTURES

CP_KRAFT = FIXTURES / "real-cp7.6.0-kafka3.6-kraft-lz4-flink-on-prem"
KRAFT_3_7 = FIXTURES / "real-kraft-ronem123"
ZK_2020 = FIXTURES / "volodymyrzee-kafka-2020"

#: a KRaft broker's log directory also holds the metadata quorum's files; kafkalog has no
#: metadata log, so these are the ones it does not write
KRAFT_METADATA_FILES = {"bootstrap.checkpoint"}
#: kafkalog's own files, which Kafka's loader and tools ignore
KAFKALOG_FILES = {".kafkalog-serve.json", ".kafkalog.lock", ".kafkalog-clean-shutdown"}

#: java.util.Properties.store: "#" + comment (empty), then "#" + Date.toString()
STORE_HEADER = re.compile(
    rb"#\n#(Mon|Tue|Wed|Thu|Fri|Sat|Sun) (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) "
    rb"\d\d \d\d:\d\d:\d\d [A-Z]{3,4} \d{4}\n"
)
PROPERTY_LINE = re.compile(rb"[a-z.]+=[A-Za-z0-9_-]+\n")
PARTITION_METADATA = re.compile(rb"version: 0\ntopic_id: [A-Za-z0-9_-]{22}")


def top_level_files(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir() if p.is_file()}


def file_kinds(partition: Path) -> set[str]:
    """A partition directory's files by kind (segment files by suffix), kafkalog's own left out."""
    kinds = set()
    for p in partition.iterdir():
        if p.name in KAFKALOG_FILES:
            continue
        prefix, _, suffix = p.name.partition(".")
        kinds.add(suffix if prefix.isdigit() and len(prefix) == 20 else p.name)
    return kinds


def copy_fixture(source: Path, target: Path) -> Path:
    """A writable copy of a fixture directory (the fixtures are read-only)."""
    shutil.copytree(source, target)
    for root, dirs, names in os.walk(target):
        for name in dirs + names:
            path = os.path.join(root, name)
            os.chmod(path, os.stat(path).st_mode | stat.S_IWUSR)
    os.chmod(target, os.stat(target).st_mode | stat.S_IWUSR)
    return target


def kafka_uuid(found: object) -> str:
    """A confluent-kafka ``Uuid`` as Kafka writes it (librdkafka's ``str()`` is standard,
    not URL-safe, base64)."""
    raw = b"".join(
        bits.to_bytes(8, "big", signed=True)
        for bits in (
            found.get_most_significant_bits(),  # type: ignore[attr-defined]
            found.get_least_significant_bits(),  # type: ignore[attr-defined]
        )
    )
    return encode_uuid(raw)


def described(bootstrap: str, topics: list[str]) -> tuple[str, int, dict[str, str]]:
    """(cluster id, node id, topic ids) as a real client's AdminClient gets them."""
    admin = AdminClient(rdkafka(bootstrap))
    cluster = admin.describe_cluster().result(15)
    found = admin.describe_topics(TopicCollection(topics))
    ids = {name: kafka_uuid(future.result(15).topic_id) for name, future in found.items()}
    (node,) = cluster.nodes
    return cluster.cluster_id, node.id, ids


def produce(bootstrap: str, topic: str, count: int, partitions: int) -> dict[int, int]:
    """``count`` records round the partitions, acks=all; the acknowledged offsets' ends."""
    producer = Producer(rdkafka(bootstrap, acks="all", **{"linger.ms": 5}))
    ends: dict[int, int] = {}

    def acked(err: object, msg: object) -> None:
        assert err is None, err
        ends[msg.partition()] = max(ends.get(msg.partition(), 0), msg.offset() + 1)  # type: ignore[attr-defined]

    for i in range(count):
        producer.produce(topic, value=b"v%d" % i, partition=i % partitions, on_delivery=acked)
    assert producer.flush(15) == 0
    return ends


def log_end_offsets(data: Path) -> dict[tuple[str, int], int]:
    with LogDir(data) as logdir:
        return {(log.topic, log.partition): log.log_end_offset for log in logdir.logs()}


def test_fixture_rules_hold_for_the_real_brokers_files() -> None:
    """The byte-level rules the served directory is held to below, checked on real brokers'
    files first (so a rule cannot be one that only kafkalog's own files pass)."""
    for broker_dir in (CP_KRAFT, KRAFT_3_7):
        data = (broker_dir / "meta.properties").read_bytes()
        header = STORE_HEADER.match(data)
        assert header is not None, data
        lines = data[header.end() :].splitlines(keepends=True)
        assert all(PROPERTY_LINE.fullmatch(line) for line in lines), lines
        partitions = [p for p in broker_dir.iterdir() if (p / "partition.metadata").exists()]
        assert partitions
        for p in partitions:
            assert PARTITION_METADATA.fullmatch((p / "partition.metadata").read_bytes())
    assert {"meta.properties", "replication-offset-checkpoint"} <= KAFKA_LOG_DIR_FILES


#: the files of a real KRaft broker's log directory (3.6 and 3.7+), the metadata quorum's
#: files aside
KAFKA_LOG_DIR_FILES = (top_level_files(CP_KRAFT) | top_level_files(KRAFT_3_7)) - (
    KRAFT_METADATA_FILES
)


def test_served_directory_has_a_kraft_brokers_files(data_dir: Path) -> None:
    with ServerThread(str(data_dir), config()) as server:
        admin = AdminClient(rdkafka(server.bootstrap))
        admin.create_topics([NewTopic("orders", 2, 1)])["orders"].result(15)
        acked = produce(server.bootstrap, "orders", 50, 2)
        consumer = Consumer(consumer_settings(server.bootstrap, "g"))
        consumer.subscribe(["orders"])
        seen = 0
        while seen < 50:
            msg = consumer.poll(10)
            assert msg is not None and msg.error() is None
            seen += 1
        consumer.commit(asynchronous=False)
        consumer.close()
        cluster_id, node_id, topic_ids = described(
            server.bootstrap, ["orders", "__consumer_offsets"]
        )

    # the same set of log directory files as a real KRaft broker's, kafkalog's own aside
    ours = top_level_files(data_dir)
    assert ours - KAFKALOG_FILES == KAFKA_LOG_DIR_FILES, sorted(ours)

    # meta.properties: Properties.store's bytes, version 1 (KRaft) with Kafka's keys
    raw = (data_dir / "meta.properties").read_bytes()
    header = STORE_HEADER.match(raw)
    assert header is not None, raw
    lines = raw[header.end() :].splitlines(keepends=True)
    assert all(PROPERTY_LINE.fullmatch(line) for line in lines), lines
    keys = set(MetaProperties.read(data_dir / "meta.properties"))
    assert keys == set(MetaProperties.read(KRAFT_3_7 / "meta.properties"))
    meta = MetaProperties.load(data_dir / "meta.properties")
    assert (meta.version, meta.node_id, meta.cluster_id) == (1, node_id, cluster_id)
    assert meta.directory_id is not None and node_id == 1

    # the high watermarks are the log ends, and those are what the producer was acked up to
    ends = log_end_offsets(data_dir)
    hw = OffsetCheckpoint.read(data_dir / "replication-offset-checkpoint")
    assert hw == ends
    assert {p: hw[("orders", p)] for p in (0, 1)} == acked == {0: 25, 1: 25}
    assert sum(v for (t, _), v in hw.items() if t == "__consumer_offsets") > 0
    assert OffsetCheckpoint.read(data_dir / "recovery-point-offset-checkpoint") == ends
    assert set(OffsetCheckpoint.read(data_dir / "log-start-offset-checkpoint")) == set(ends)
    assert OffsetCheckpoint.read(data_dir / "cleaner-offset-checkpoint") is not None

    # per partition: the files a real broker's partition has, its topic id the one Metadata
    # gave, its leader epoch the one in every batch
    with_data = file_kinds(CP_KRAFT / "promotions-0")
    assert with_data == {
        "log",
        "index",
        "timeindex",
        "snapshot",
        "leader-epoch-checkpoint",
        "partition.metadata",
    }
    empty = file_kinds(ZK_2020 / "__consumer_offsets-0") | {"partition.metadata"}
    epoch_file = (CP_KRAFT / "promotions-0" / "leader-epoch-checkpoint").read_bytes()
    assert epoch_file == b"0\n1\n0 0\n"
    for (topic, partition), end in ends.items():
        directory = data_dir / f"{topic}-{partition}"
        assert file_kinds(directory) == (with_data if end else empty), directory
        raw = (directory / "partition.metadata").read_bytes()
        assert PARTITION_METADATA.fullmatch(raw), raw
        assert (
            PartitionMetadata.read(directory / "partition.metadata").topic_id == (topic_ids[topic])
        )
        # leader epoch 0 from the log start: byte for byte the real broker's file
        assert (directory / "leader-epoch-checkpoint").read_bytes() == epoch_file
        assert LeaderEpochCheckpoint.read(directory / "leader-epoch-checkpoint") == [(0, 0)]
    with LogDir(data_dir) as logdir:
        epochs = {b.partition_leader_epoch for b in logdir.log("orders", 0).batches(0)}
    assert epochs == {0}


def test_restart_keeps_the_ids_and_moves_the_high_watermark(data_dir: Path) -> None:
    with ServerThread(str(data_dir), config()) as server:
        produce(server.bootstrap, "t", 10, 1)
        first = described(server.bootstrap, ["t"])
    meta_bytes = (data_dir / "meta.properties").read_bytes()
    with ServerThread(str(data_dir), config()) as server:
        assert described(server.bootstrap, ["t"]) == first
        produce(server.bootstrap, "t", 5, 1)
    assert (data_dir / "meta.properties").read_bytes() == meta_bytes  # not rewritten
    assert OffsetCheckpoint.read(data_dir / "replication-offset-checkpoint") == {("t", 0): 15}
    assert (
        PartitionMetadata.read(data_dir / "t-0" / "partition.metadata").topic_id == (first[2]["t"])
    )
    assert LeaderEpochCheckpoint.read(data_dir / "t-0" / "leader-epoch-checkpoint") == [(0, 0)]


def test_high_watermarks_are_checkpointed_on_the_interval(data_dir: Path) -> None:
    from kafka_clients import wait_until

    # on its own interval (Kafka's 5 s), not the minute of the other checkpoints
    settings = config(replica_high_watermark_checkpoint_interval_ms=100)
    with ServerThread(str(data_dir), settings) as server:
        produce(server.bootstrap, "t", 7, 1)
        path = data_dir / "replication-offset-checkpoint"
        assert wait_until(
            lambda: path.exists() and OffsetCheckpoint.read(path).get(("t", 0)) == 7, 10
        )


def test_partitions_written_without_a_topic_id_get_one_that_stays(data_dir: Path) -> None:
    """A directory ``kafkalog ingest`` (or a pre-2.8 broker) wrote has no partition.metadata:
    the id Metadata gives is written there, so the next start answers the same one."""
    from kafkalog.records import Record

    with LogDir(data_dir, writable=True) as logdir:
        for p in range(2):
            logdir.log("plain", p, create=True).append_records([Record.of(b"v", key=b"k")])
    # the log layer gives a topic's partitions one id
    ids = {PartitionMetadata.read(data_dir / f"plain-{p}" / "partition.metadata") for p in (0, 1)}
    assert len(ids) == 1
    for p in range(2):  # as a broker older than 2.8 leaves them
        (data_dir / f"plain-{p}" / "partition.metadata").unlink()
    with ServerThread(str(data_dir), config()) as server:
        _, _, first = described(server.bootstrap, ["plain"])
    for p in range(2):
        path = data_dir / f"plain-{p}" / "partition.metadata"
        assert PartitionMetadata.read(path).topic_id == first["plain"]
    with ServerThread(str(data_dir), config()) as server:
        assert described(server.bootstrap, ["plain"])[2] == first


def test_a_real_kraft_brokers_directory_keeps_its_ids(tmp_path: Path) -> None:
    data = copy_fixture(CP_KRAFT, tmp_path / "cp")
    topics = {p.name.rpartition("-")[0]: p for p in data.iterdir() if p.is_dir()}
    ids_on_disk = {
        t: PartitionMetadata.read(p / "partition.metadata").topic_id for t, p in topics.items()
    }
    before = {t: (p / "partition.metadata").read_bytes() for t, p in topics.items()}
    epochs_before = {t: (p / "leader-epoch-checkpoint").read_bytes() for t, p in topics.items()}
    others = OffsetCheckpoint.read(data / "replication-offset-checkpoint")
    with ServerThread(str(data), config()) as server:
        cluster_id, node_id, ids = described(server.bootstrap, sorted(topics))
        assert (cluster_id, node_id) == ("MkU3OEVBNTcwNTJENDM2Qg", 1)
        assert ids == ids_on_disk
        ends = produce(server.bootstrap, "promotions", 3, 1)
    meta = MetaProperties.read(data / "meta.properties")
    # Kafka's keys kept; a directory.id added, as a 3.7+ broker adds one
    assert {k: meta[k] for k in ("version", "node.id", "cluster.id")} == {
        "version": "1",
        "node.id": "1",
        "cluster.id": "MkU3OEVBNTcwNTJENDM2Qg",
    }
    assert MetaProperties.load(data / "meta.properties").directory_id is not None
    assert {t: (p / "partition.metadata").read_bytes() for t, p in topics.items()} == before
    assert {
        t: (p / "leader-epoch-checkpoint").read_bytes() for t, p in topics.items()
    } == epochs_before
    hw = OffsetCheckpoint.read(data / "replication-offset-checkpoint")
    assert hw[("promotions", 0)] == ends[0]
    # the broker's entries for partitions this copy does not hold are kept
    unchanged = {k: v for k, v in others.items() if k[0] not in topics}
    assert unchanged and all(hw[k] == v for k, v in unchanged.items())


def test_a_zookeeper_brokers_directory_keeps_its_ids(tmp_path: Path) -> None:
    """meta.properties version 0 (broker.id=0): served as node 0 of its cluster, the file
    left at version 0."""
    data = copy_fixture(ZK_2020, tmp_path / "zk")
    meta_before = (data / "meta.properties").read_bytes()
    with ServerThread(str(data), config()) as server:
        cluster_id, node_id, ids = described(server.bootstrap, ["first_topic"])
        assert (cluster_id, node_id) == ("lRaQCIBoRh2xRKLuP9CAQg", 0)
    assert (data / "meta.properties").read_bytes() == meta_before
    for p in range(3):
        path = data / f"first_topic-{p}" / "partition.metadata"
        assert PartitionMetadata.read(path).topic_id == ids["first_topic"]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"node_id": 2}, "Stored node id 1 doesn't match previous node id 2 in "),
        ({"cluster_id": "other"}, "Expected other, but read MkU3OEVBNTcwNTJENDM2Qg"),
    ],
)
def test_a_directory_of_another_node_or_cluster_is_refused(
    tmp_path: Path, settings: dict[str, object], message: str
) -> None:
    data = copy_fixture(CP_KRAFT, tmp_path / "cp")
    before = tree_snapshot(data)
    with pytest.raises(DirectoryIdentityError, match=re.escape(message)):
        ServerThread(str(data), config(**settings)).start()
    assert tree_snapshot(data) == before  # refused before anything was written
    assert top_level_files(data) == top_level_files(CP_KRAFT)


def test_the_cli_refuses_another_nodes_directory(tmp_path: Path) -> None:
    data = copy_fixture(CP_KRAFT, tmp_path / "cp")
    done = kafkalog("serve", "--data", str(data), "--listen", "127.0.0.1:0", "--node-id", "7")
    assert done.returncode != 0
    assert "Stored node id 1 doesn't match previous node id 7" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_cli_refuses_a_malformed_file_and_leaves_it(tmp_path: Path) -> None:
    """A damaged meta.properties (a garbage line, broker.id's key garbled): serve refuses it
    naming file and byte, and writes nothing (no new cluster.id, no broker.id 1)."""
    data = copy_fixture(ZK_2020, tmp_path / "zk")
    meta = data / "meta.properties"
    meta.write_bytes(meta.read_bytes().replace(b"broker.id=0", b"broker.i\x01d=0") + b"\x7fzz\n")
    before = tree_snapshot(data)
    done = kafkalog("serve", "--data", str(data), "--listen", "127.0.0.1:0")
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert f"{meta}" in done.stderr and "malformed meta.properties: unknown key" in done.stderr
    assert tree_snapshot(data) == before


def test_kafkalog_commands_accept_a_served_directory(data_dir: Path) -> None:
    with ServerThread(str(data_dir), config()) as server:
        produce(server.bootstrap, "t", 20, 1)
        consumer = Consumer(consumer_settings(server.bootstrap, "g"))
        consumer.subscribe(["t"])
        assert consumer.poll(10) is not None
        consumer.commit(asynchronous=False)
        consumer.close()
    verify = kafkalog_here("verify", str(data_dir))
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "warning" not in verify.stdout.lower(), verify.stdout
    log = sorted((data_dir / "t-0").glob("*.log"))[0]
    dump = kafkalog_here("dump", "--files", str(log))
    assert dump.returncode == 0 and "baseOffset: 0" in dump.stdout, dump.stdout + dump.stderr
    for args in (
        ("retention", str(data_dir)),
        ("groups", str(data_dir)),
        ("cat", str(data_dir / "t-0"), "--max", "1"),
        ("lookup", "--offset", "3", str(data_dir / "t-0")),
    ):
        done = kafkalog_here(*args)
        assert done.returncode == 0, (args, done.stdout, done.stderr)


def test_a_kraft_brokers_metadata_log_is_not_a_topic(tmp_path: Path) -> None:
    """``__cluster_metadata-0`` belongs to the KRaft quorum: a broker's log manager neither
    loads nor lists it nor runs retention on it, and neither does serve (its old segments
    are far past the default retention). The rest keeps its ids; a meta.properties that has
    everything is not rewritten."""
    import time

    data = copy_fixture(KRAFT_3_7, tmp_path / "kraft")
    metadata_log = tree_snapshot(data / "__cluster_metadata-0")
    meta = (data / "meta.properties").read_bytes()
    ids_on_disk = PartitionMetadata.read(data / "__consumer_offsets-31" / "partition.metadata")
    with ServerThread(str(data), config(log_retention_check_interval_ms=50)) as server:
        admin = AdminClient(rdkafka(server.bootstrap))
        assert "__cluster_metadata" not in admin.list_topics(timeout=15).topics
        cluster_id, node_id, ids = described(server.bootstrap, ["__consumer_offsets"])
        assert (cluster_id, node_id) == ("0wHLXdrKStejkyBzi8qBEw", 1)
        assert ids["__consumer_offsets"] == ids_on_disk.topic_id
        future = admin.create_topics([NewTopic("__cluster_metadata", 1, 1)])["__cluster_metadata"]
        with pytest.raises(Exception, match="prohibited"):
            future.result(15)
        time.sleep(0.5)  # retention passes run meanwhile
    assert tree_snapshot(data / "__cluster_metadata-0") == metadata_log
    assert (data / "meta.properties").read_bytes() == meta
