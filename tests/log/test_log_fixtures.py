"""Every partition directory in the fixtures opens read-only as a Log: records, offset reads and
``offsets_for_times`` agree with a brute-force scan, and not one byte or mtime of the fixture
tree changes. Recovering Kafka-written segments rebuilds Kafka's index files byte for byte."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from kafkalog.log import Log, LogDir, TopicConfig
from kafkalog.log.segment import LogSegment, TxnState
from provenance import FIXTURES, fixture_partitions

PARTITIONS = list(fixture_partitions())


def _tree_state() -> dict[str, tuple[int, str]]:
    state = {}
    for root, _, files in os.walk(FIXTURES):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                state[path] = (os.stat(path).st_mtime_ns, hashlib.sha256(f.read()).hexdigest())
    return state


@pytest.fixture(scope="module")
def tree_before() -> dict[str, tuple[int, str]]:
    return _tree_state()


def test_there_are_many_partitions() -> None:
    assert len(PARTITIONS) >= 40


def _brute(log: Log, *, control: bool = False) -> list[tuple[int, int, int]]:
    """(segment index, offset, timestamp) of every record, by scanning every segment."""
    rows = []
    for i, seg in enumerate(log.segments):
        for entry in seg.entries(0):
            if entry.magic < 2 and entry.compression.label == "zstd":
                continue
            if entry.is_control and not control:
                continue
            try:
                recs = entry.records()
            except Exception:
                continue
            rows.extend((i, r.offset, r.timestamp) for r in recs)
    return rows


@pytest.mark.parametrize("directory", PARTITIONS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_fixture_partition_reads_like_a_scan(directory: Path) -> None:
    log = Log(directory, writable=False)
    rows = _brute(log)
    offsets = [o for _, o, _ in rows]
    recs = [(r.offset, r.timestamp) for r in log.records() if not _is_skipped(r)]
    assert [o for o, _ in recs] == [o for o in offsets if o >= log.log_start_offset]
    assert log.log_end_offset == (log.active_segment.read_next_offset())
    # reading from any offset (present or in a gap) starts at the first record at or after it
    probes = sorted(set(offsets) | {o + 1 for o in offsets[:50]} | {log.log_start_offset})
    for target in probes[:: max(1, len(probes) // 60)]:
        first = next(iter(log.records(target)), None)
        expected = next((o for o in offsets if o >= target), None)
        assert (first.offset if first else None) == expected
    # offsets_for_times equals Kafka's rule applied by brute force: the first segment whose
    # largest timestamp reaches the target, then its first record at or after it
    stamps = sorted({t for _, _, t in rows if t >= 0})
    targets = stamps[:: max(1, len(stamps) // 40)] + [s + 1 for s in stamps[:10]] + [0]
    if stamps:
        targets.append(stamps[-1] + 1)
    # (Kafka's time lookup walks control records too: a marker can be the answer)
    with_control = _brute(log, control=True)
    for target in targets:
        got = log.offsets_for_times(target)
        want = _kafka_rule(log, with_control, target)
        assert (None if got is None else (got.timestamp, got.offset)) == want, target
    log.close()


def _is_skipped(_record: object) -> bool:
    return False


def _kafka_rule(log: Log, rows: list[tuple[int, int, int]], target: int) -> tuple[int, int] | None:
    for i, seg in enumerate(log.segments):
        if seg.largest_timestamp >= target:
            for j, offset, ts in rows:
                if j == i and ts >= target and offset >= log.log_start_offset:
                    return ts, offset
            return None
    return None


def test_fixture_data_dirs_open_read_only() -> None:
    for root in (
        "volodymyrzee-kafka-2020",
        "real-kraft-ronem123",
        "kafka-0.9.0.1-broker",
        "kafka-4.0-snapshot-javacode",
    ):
        with LogDir(FIXTURES / root) as d:
            parts = d.partitions()
            assert parts
            for log in d.logs():
                assert log.log_end_offset >= log.log_start_offset


def test_fixture_tree_is_unchanged(tree_before: dict[str, tuple[int, str]]) -> None:
    """Runs after the read-only tests of this module (pytest keeps file order)."""
    assert _tree_state() == tree_before


# Segments that Kafka (its own Java code, or real brokers that appended one batch per request
# and never restarted mid-segment) wrote with a known index.interval.bytes.
ONE_BATCH_PER_APPEND = [
    ("kafka-4.0-snapshot-javacode/v2-none-0", 512),
    ("kafka-4.0-snapshot-javacode/v2-gzip-0", 512),
    ("kafka-4.0-snapshot-javacode/v2-snappy-0", 512),
    ("kafka-4.0-snapshot-javacode/v2-lz4-0", 512),
    ("kafka-4.0-snapshot-javacode/v2-zstd-0", 512),
    ("kafka-4.0-snapshot-javacode/v2-idempotent-0", 128),
    ("kafka-4.0-snapshot-javacode/v2-txn-0", 100),
    ("kafka-4.0-snapshot-javacode/v2-bigoffset-0", 64),
    ("kafka-4.0-snapshot-javacode/v1-gzip-0", 256),
    ("real-cp7.6.0-kafka3.6-kraft-lz4-flink-on-prem/_confluent-monitoring-0", 4096),
    ("real-kraft-ronem123/__cluster_metadata-0", 4096),
]


@pytest.mark.parametrize(("rel", "interval"), ONE_BATCH_PER_APPEND, ids=lambda x: str(x))
def test_recovery_rebuilds_kafkas_index_files(rel: str, interval: int, tmp_path: Path) -> None:
    src = FIXTURES / rel
    config = TopicConfig(index_interval_bytes=interval)
    state = TxnState()  # transactions carry across segments, as the broker's producer state does
    for log_file in sorted(src.glob("*.log")):
        base = int(log_file.name.split(".")[0])
        shutil.copy(log_file, tmp_path / log_file.name)
        seg = LogSegment(tmp_path, base, config, file_already_exists=True)
        assert seg.recover(None, state) == 0
        seg.close()
        stem = log_file.name[: -len(".log")]
        for suffix in (".index", ".timeindex", ".txnindex"):
            kafka = src / (stem + suffix)
            ours = tmp_path / (stem + suffix)
            if kafka.exists():
                assert ours.read_bytes() == kafka.read_bytes(), f"{stem}{suffix}"
            elif suffix == ".txnindex":
                assert not ours.exists() or ours.stat().st_size == 0
