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


# -- retention or the cleaner *during* planning (found by tests/spark/live_campaign.py) -----------
def _written(tmp_path: Path) -> Path:
    directory = tmp_path / "t-0"
    with Log(directory, TopicConfig(segment_bytes=1000)) as log:
        for b in range(20):
            log.append(encode_batch([Record.of(b"v%d" % (b * 5 + i)) for i in range(5)]))
        assert len(log.segments) >= 3
    return directory


def test_a_segment_deleted_while_planning_is_planned_as_opened(tmp_path: Path) -> None:
    """Retention deleting a segment between the planner's open of the log and its byte ranges
    made planning fail with a bare FileNotFoundError naming no offset: the range's file identity
    was a ``stat`` of the path. It is now the file the open log holds, so the plan stands and
    its task meets the deletion as any task does (an error naming the offsets, or a skip)."""
    directory = _written(tmp_path)
    with Log(directory, writable=False) as log:
        first = log.segments[0]
        held = os.stat(first.log.path)
        os.remove(first.log.path)  # retention, after the open
        ranges = log.ranges(0, log.log_end_offset)
    assert ranges[0].path == first.log.path
    assert ranges[0].identity == (held.st_dev, held.st_ino)


def test_a_segment_swapped_while_planning_keeps_the_planned_files_identity(tmp_path: Path) -> None:
    """The cleaner's swap between the open and the byte ranges: the positions describe the file
    the log opened, so the identity must be that file's, never the new one's (a task would then
    read the new file at the old positions unwarned)."""
    directory = _written(tmp_path)
    with Log(directory, writable=False) as log:
        first = log.segments[0]
        held = os.stat(first.log.path)
        os.rename(first.log.path, first.log.path + ".deleted")
        with open(first.log.path, "wb") as f:
            f.write(b"\0" * 64)
        ranges = log.ranges(0, log.log_end_offset)
    assert ranges[0].identity == (held.st_dev, held.st_ino)
    assert ranges[0].identity != (os.stat(first.log.path).st_dev, os.stat(first.log.path).st_ino)


@pytest.mark.parametrize("fail", ["true", "false"])
def test_earliest_to_an_end_retention_passed_is_lost_data(
    tmp_path: Path, fail: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``endingOffsets`` written when the log started lower, retention since past it: the start
    (earliest) is after the end, but the user asked for no start. That is lost data (an error
    naming the offsets; with failOnDataLoss=false nothing, and a WARNING), not Spark's "start
    after the end" refusal of a start the user gave, which blamed a ``startingOffsets`` never
    given."""
    directory = _written(tmp_path)
    with Log(directory, TopicConfig(segment_bytes=1000)) as log:
        third = log.segments[2].base_offset
        log.increment_log_start_offset(third)
        log.delete_old_segments()
    options = {
        "path": str(tmp_path),
        "endingOffsets": '{"t": {"0": 7}}',
        "failOnDataLoss": fail,
    }
    opts = parse_read_options(options)
    if fail == "true":
        with pytest.raises(
            DataLossError, match=rf"t-0: ending offset 7 is gone .*starts at {third}"
        ):
            resolve_ranges(opts)
        return
    with caplog.at_level("WARNING", logger="kafkalog"):
        (r,) = resolve_ranges(opts)
    assert r.start == r.end == third
    assert any(
        f"offsets before 7 were asked for but are not there (the log starts at {third})"
        in m.getMessage()
        for m in caplog.records
    )
    # a start given below the log start reads the same: nothing, with a WARNING
    explicit = parse_read_options({**options, "startingOffsets": '{"t": {"0": 3}}'})
    (r,) = resolve_ranges(explicit)
    assert r.start == r.end == third
