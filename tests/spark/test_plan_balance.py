"""Planning without Spark: how many tasks, and that they carry equal bytes, since on a few
cores a lone oversized or undersized last task leaves the others idle."""

from __future__ import annotations

import itertools

import pytest

from kafkalog.spark.options import DEFAULT_MAX_BYTES_PER_SPLIT, parse_read_options
from kafkalog.spark.partitions import SplitPartition, pack
from kafkalog.spark.plan import make_splits, resolve_ranges, task_count
from provenance import FIXTURES

MB = 1 << 20
TASK = DEFAULT_MAX_BYTES_PER_SPLIT


@pytest.mark.parametrize(
    ("total", "extra", "expected"),
    [
        (0, {}, 1),
        (5 * MB, {}, 1),
        (100 * MB, {}, 1),  # tasks of at least 64 MiB
        (130 * MB, {}, 2),
        (200 * MB, {}, 4),  # three tasks would leave a core idle on 2 or 4 cores
        (TASK, {}, 4),  # at least four tasks
        (TASK + 1, {}, 4),
        (3 * TASK, {}, 4),
        (5 * TASK, {}, 8),
        (9 * TASK, {}, 16),
        (17 * TASK, {}, 24),
        (MB, {"minPartitions": "3"}, 4),
        (MB, {"minPartitions": "8"}, 8),
        (MB, {"minPartitions": "10"}, 16),
        (10 * MB, {"maxBytesPerSplit": str(MB)}, 16),
    ],
)
def test_task_count(total: int, extra: dict[str, str], expected: int) -> None:
    opts = parse_read_options({"path": str(FIXTURES), **extra})
    assert task_count(total, opts) == expected


@pytest.mark.parametrize("min_partitions", ["2", "3", "6", "16"])
def test_tasks_carry_equal_bytes_and_every_split_once(min_partitions: str) -> None:
    path = FIXTURES / "real-kafka2.1-snapshot-zk-large-index-william0423" / "__consumer_offsets-28"
    opts = parse_read_options({"path": str(path), "minPartitions": min_partitions})
    splits = make_splits(resolve_ranges(opts), opts)
    tasks = pack(splits, opts, {})
    assert all(isinstance(t, SplitPartition) for t in tasks)
    dealt = [s for t in tasks for s in t.splits]  # type: ignore[attr-defined]
    assert dealt == splits  # in order, each once
    total = sum(s.size for s in splits)
    count = task_count(total, opts)
    assert len(tasks) == count >= int(min_partitions)
    largest = max(s.size for s in splits)
    assert largest <= -(-total // (count * 4)) * 2  # splits are cut to about a quarter task
    for task in tasks:
        size = sum(s.size for s in task.splits)  # type: ignore[attr-defined]
        assert abs(size - total / count) <= largest, (size, total / count)
    # byte ranges of one segment never overlap and cover it from the first split's start
    by_segment: dict[str, list[tuple[int, int]]] = {}
    for s in splits:
        by_segment.setdefault(s.segment, []).append((s.start_position, s.end_position))
    for ranges in by_segment.values():
        assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))


def test_min_partitions_never_mixes_kafka_partitions() -> None:
    """As Spark's Kafka source: with minPartitions every task reads one Kafka partition
    (issue 34 §5: 16 tasks, one of them reading two partitions); every split once, in order."""
    path = FIXTURES / "kafka-4.0-snapshot-javacode"
    for wanted in ("2", "16", "40"):
        opts = parse_read_options({"path": str(path), "minPartitions": wanted})
        splits = make_splits(resolve_ranges(opts), opts)
        tasks = pack(splits, opts, {})
        dealt = [s for t in tasks for s in t.splits]  # type: ignore[attr-defined]
        assert dealt == splits
        partitions = {(s.topic, s.partition) for s in splits}
        assert len(tasks) >= min(int(wanted), len(partitions))
        for task in tasks:
            assert len({(s.topic, s.partition) for s in task.splits}) == 1  # type: ignore[attr-defined]
    # without it, small partitions share tasks (a Python task costs ~0.1 s to start)
    opts = parse_read_options({"path": str(path)})
    tasks = pack(make_splits(resolve_ranges(opts), opts), opts, {})
    assert len(tasks) == 1
