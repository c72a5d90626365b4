"""A broker's retention may delete a segment between a query's planning and its tasks: the task
reads the ``.deleted`` file Kafka leaves for a minute, and once that is gone too, the offsets
are lost: an error naming them, or skipped with ``failOnDataLoss=false``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kafkalog.errors import KafkalogError
from kafkalog.log import Log, TopicConfig
from kafkalog.records import Record, encode_batch
from kafkalog.spark.options import parse_read_options
from kafkalog.spark.partitions import SplitPartition, pack
from kafkalog.spark.plan import DataLossError, make_splits, resolve_ranges


def _planned(tmp_path: Path, fail_on_data_loss: str) -> tuple[list[SplitPartition], str]:
    directory = tmp_path / "t-0"
    with Log(directory, TopicConfig(segment_bytes=1000)) as log:
        for b in range(20):
            log.append(encode_batch([Record.of(b"v%d" % (b * 5 + i)) for i in range(5)]))
        first_segment = log.segments[0].log.path
        assert len(log.segments) >= 3
    opts = parse_read_options({"path": str(tmp_path), "failOnDataLoss": fail_on_data_loss})
    tasks = pack(make_splits(resolve_ranges(opts), opts), opts, {})
    return [t for t in tasks if isinstance(t, SplitPartition)], first_segment


def _offsets(tasks: list[SplitPartition]) -> list[int]:
    return sorted(o for t in tasks for b in t.read(False) for o in b.column("offset").to_pylist())


def test_a_segment_renamed_deleted_is_still_read(tmp_path: Path) -> None:
    tasks, segment = _planned(tmp_path, "true")
    os.rename(segment, segment + ".deleted")  # Kafka's retention, after planning
    assert _offsets(tasks) == list(range(100))


@pytest.mark.parametrize("fail", ["true", "false"])
def test_a_segment_gone_altogether_follows_fail_on_data_loss(tmp_path: Path, fail: str) -> None:
    tasks, segment = _planned(tmp_path, fail)
    with Log(tmp_path / "t-0", writable=False) as log:
        lost = next(s for s in log.segments if s.log.path == segment)
        lost_offsets = set(range(lost.base_offset, log.segments[1].base_offset))
    os.remove(segment)
    if fail == "true":
        with pytest.raises(DataLossError, match=r"t-0: segment .* was deleted after the query"):
            _offsets(tasks)
    else:
        assert _offsets(tasks) == sorted(set(range(100)) - lost_offsets)


def test_a_segment_the_cleaner_swapped_is_read_as_planned(tmp_path: Path) -> None:
    """Kafka's log cleaner renames the old file ``.deleted`` and moves a compacted copy into its
    name: a task planned on the old file reads the old file, never the new one's positions."""
    tasks, segment = _planned(tmp_path, "true")
    os.rename(segment, segment + ".deleted")
    with open(segment, "wb") as f:  # the "compacted" file: other bytes at the planned positions
        f.write(b"\0" * 64)
    assert _offsets(tasks) == list(range(100))
    os.remove(segment + ".deleted")  # a minute later
    with pytest.raises(KafkalogError, match=r"t-0: segment .* was rewritten .* run the query"):
        _offsets(tasks)


@pytest.mark.parametrize("fail", ["true", "false"])
def test_a_segment_cut_after_planning_follows_fail_on_data_loss(tmp_path: Path, fail: str) -> None:
    """A follower truncating to its new leader cuts the active segment: the planned records past
    the cut are gone."""
    tasks, _ = _planned(tmp_path, fail)
    with Log(tmp_path / "t-0", writable=False) as log:
        active = log.segments[-1]
        batches = list(active.entries(0))
        assert len(batches) >= 2
        path, cut, kept_last = active.log.path, batches[1].position, batches[0].last_offset
    os.truncate(path, cut)  # the first batch of the active segment stays
    if fail == "true":
        with pytest.raises(DataLossError, match=r"t-0: segment .* was cut from \d+ to \d+ bytes"):
            _offsets(tasks)
    else:
        assert _offsets(tasks) == list(range(kept_last + 1))
