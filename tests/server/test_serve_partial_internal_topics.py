"""A broker's data directory holds only its own replicas of ``__consumer_offsets`` (the README's
fixture: partition 16 alone, of 50). Served, every group hashing to a partition the directory
lacks failed each JoinGroup/SyncGroup/OffsetCommit with a traceback in serve's log and a
dropped connection ("__consumer_offsets has no partition 42"). The topic's partition count
is now the configured one when partitions are missing below its highest, and the coordinators
hash over the topic's count as it is (as Kafka's do), so a whole 4-partition topic keeps its
groups where they are."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from kafka import KafkaConsumer, TopicPartition

from kafkalog.log import Log, LogDir
from kafkalog.server import ServerConfig, ServerThread
from kafkalog.server.offset_store import partition_for_group
from kafkalog.server.topics import OFFSETS_TOPIC, TopicRegistry
from provenance import FIXTURES

SEANORTH = FIXTURES / "real-kafka2.8.0-zk-snappy-seanorth"


def _consume_and_commit(bootstrap: str, group: str) -> list[int]:
    consumer = KafkaConsumer(
        "some-topic",
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=5000,  # idle after the last record (the join comes first)
    )
    try:
        offsets = [m.offset for m in consumer]
        consumer.commit()
        return offsets
    finally:
        consumer.close()


def test_groups_hashing_to_partitions_the_directory_lacks_commit(tmp_path: Path) -> None:
    data = tmp_path / "data"
    shutil.copytree(SEANORTH, data)
    group = "g1"
    assert partition_for_group(group, 50) == 42  # not in the directory
    old = "simple-consumer-example"  # committed 8 by the real broker, in partition 16
    assert partition_for_group(old, 50) == 16
    # no initial rebalance delay: one consumer per group, nothing to wait for
    config = ServerConfig(port=0, group_initial_rebalance_delay_ms=0)
    with ServerThread(str(data), config) as server:
        assert _consume_and_commit(server.bootstrap, group) == list(range(9))
        # the real broker's group is found where Kafka put it: it resumes at 8
        assert _consume_and_commit(server.bootstrap, old) == [8]
        probe = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id=group)
        try:
            assert probe.committed(TopicPartition("some-topic", 0)) == 9
        finally:
            probe.close()
    assert (data / "__consumer_offsets-42").is_dir()
    with ServerThread(str(data), config) as server:  # and after a restart
        assert _consume_and_commit(server.bootstrap, group) == []


def test_a_whole_internal_topic_keeps_its_own_count(tmp_path: Path) -> None:
    """Partitions 0..3 all there: the topic has 4 (the 0.9 broker's offsets.topic.num.partitions),
    whatever serve's own default; with a hole, the configured count."""
    data = tmp_path / "data"
    for p in (0, 1, 2, 3):
        (data / f"{OFFSETS_TOPIC}-{p}").mkdir(parents=True)
    (data / "other-5").mkdir()
    with LogDir(str(data), writable=True) as logdir:
        registry = TopicRegistry(logdir, {}, {OFFSETS_TOPIC: 50})
        assert registry.topics[OFFSETS_TOPIC].partitions == 4
        assert registry.topics["other"].partitions == 6  # user topics: as before
    shutil.rmtree(data / f"{OFFSETS_TOPIC}-1")
    with LogDir(str(data), writable=True) as logdir:
        registry = TopicRegistry(logdir, {}, {OFFSETS_TOPIC: 50})
        assert registry.topics[OFFSETS_TOPIC].partitions == 50


def test_a_brokers_consumer_offsets_is_compacted_not_deleted_by_retention(tmp_path: Path) -> None:
    """The broker's ``__consumer_offsets-16`` (commits of January 2022) was served with the
    broker defaults, cleanup.policy=delete and 7 days' retention: serve's first retention pass
    deleted every record of it ("deleted 1 segment(s) of __consumer_offsets-16"), the real
    broker's group offsets with it. Its configs are now the internal topic's, compacted."""
    data = tmp_path / "data"
    shutil.copytree(SEANORTH, data)
    config = ServerConfig(port=0, log_retention_check_interval_ms=200)
    with ServerThread(str(data), config) as server:
        time.sleep(3)  # several retention passes
        probe = KafkaConsumer(
            bootstrap_servers=server.bootstrap, group_id="simple-consumer-example"
        )
        try:
            assert probe.committed(TopicPartition("some-topic", 0)) == 8
        finally:
            probe.close()
    with Log(str(data / f"{OFFSETS_TOPIC}-16"), writable=False) as log:
        assert log.log_start_offset == 0 and log.log_end_offset >= 69
