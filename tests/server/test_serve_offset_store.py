"""The ``__consumer_offsets`` records the server writes are Kafka's: checked against the offset
commits real brokers wrote in the fixtures (group-to-partition hashing, key and value bytes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkalog.log import Log
from kafkalog.server.offset_store import (
    CommittedOffset,
    ConsumerOffsetsTopic,
    KafkaOffsetCodec,
    java_string_hash,
    partition_for_group,
)
from provenance import FIXTURES


def test_java_string_hash() -> None:
    # values of java.lang.String.hashCode
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112  # Java's famous collision


def _fixture_partitions() -> list[Path]:
    return sorted(FIXTURES.glob("*/__consumer_offsets-*"))


def test_commits_written_by_real_brokers_decode_and_re_encode() -> None:
    codec = KafkaOffsetCodec()
    commits = v3_values = 0
    for directory in _fixture_partitions():
        partition = int(directory.name.rsplit("-", 1)[1])
        log = Log(directory, writable=False)
        try:
            for record in log.records(log.log_start_offset):
                assert record.key is not None
                found = codec.decode(record.key, record.value)
                if found is None:
                    continue  # group metadata
                group, (topic, p), committed = found
                commits += 1
                # the group's partition, as Kafka chose it (offsets.topic.num.partitions=50)
                assert partition_for_group(group, 50) == partition, directory
                if record.key[:2] == b"\x00\x01":
                    assert codec.encode_key(group, topic, p) == record.key
                if record.value is not None and record.value[:2] == b"\x00\x03":
                    assert committed is not None
                    assert codec.encode_value(committed) == record.value
                    v3_values += 1
        finally:
            log.close()
    assert commits > 1000 and v3_values > 100


def test_a_store_reads_back_what_it_committed() -> None:
    appended: list[tuple[int, bytes]] = []

    def read_all():  # type: ignore[no-untyped-def]
        from kafkalog.records import LogReader

        for partition in sorted({p for p, _ in appended}):
            yield [b for p, data in appended if p == partition for b in LogReader(data)]

    store = ConsumerOffsetsTopic(50, lambda p, b: appended.append((p, b)), read_all)
    store.commit("g", {("t", 0): CommittedOffset(5, 0, "meta", 1), ("t", 1): CommittedOffset(9)})
    store.commit("g", {("t", 0): CommittedOffset(7, 0, None, 2)})
    assert {p for p, _ in appended} == {partition_for_group("g", 50)}
    loaded = store.load()
    # a null metadata is stored as "", as Kafka's coordinator stores it (NoMetadata)
    assert loaded["g"][("t", 0)].offset == 7 and loaded["g"][("t", 0)].metadata == ""
    assert loaded["g"][("t", 1)].offset == 9


@pytest.mark.parametrize("bad", [b"\x00\x01\x00", b"\x00\x01\x00\x05ab"])
def test_a_cut_key_is_a_clear_error(bad: bytes) -> None:
    from kafkalog.errors import KafkalogError

    with pytest.raises(KafkalogError, match=r"__consumer_offsets.*bytes needed, \d+ left"):
        KafkaOffsetCodec().decode(bad, None)
