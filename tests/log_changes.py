"""What a writer does to a partition's files, for the tests of answers kept while the files
stay as they were (tests/spark/test_plan_memo.py, tests/spark/test_settled_summaries.py): each
change must make them ask again."""

from __future__ import annotations

from pathlib import Path

from kafkalog.log import Log, TopicConfig
from kafkalog.records import Record


def roll(d: Path, config: TopicConfig, timestamp: int) -> None:
    """A new segment, one record in it."""
    with Log(d, config) as log:
        log.roll()
        log.append_records([Record.of(b"rolled", b"k", timestamp)])


def retention(d: Path, config: TopicConfig) -> None:
    """The log start moved to the second segment and the first deleted."""
    with Log(d, config) as log:
        second = sorted(d.glob("*.log"))[1]
        log.increment_log_start_offset(int(second.name.split(".")[0]))
        assert log.delete_old_segments() >= 1


def truncate(d: Path, config: TopicConfig, back: int) -> None:
    """The last ``back`` offsets truncated away."""
    with Log(d, config) as log:
        log.truncate_to(log.log_end_offset - back)


def compact(d: Path, config: TopicConfig) -> None:
    """A roll, then the cleaner's rewrite of the segments (``config`` compacted)."""
    with Log(d, config) as log:
        log.roll()
        log.compact()
