"""``kafkalog compact``: a dry run changes nothing and says what would go; a run cleans the
compacted partitions only (internal topics by default, others by --config), moves the
cleaner checkpoint, and its --json lines are the documented fields."""

from __future__ import annotations

import json
from pathlib import Path

from tests.clirun import kafkalog_here, tree_snapshot

from kafkalog.log import Log, TopicConfig
from kafkalog.records import Record


def build(data: Path) -> None:
    for topic in ("__consumer_offsets", "orders"):
        with Log(data / f"{topic}-0", TopicConfig(segment_bytes=2048)) as log:
            for i in range(60):
                log.append_records([Record(-1, 1000 + i, b"k%d" % (i % 4), b"v%d" % i)])
            log.roll()


def test_dry_run_changes_nothing_and_reports(tmp_path: Path) -> None:
    data = tmp_path / "data"
    build(data)
    before = tree_snapshot(data)
    run = kafkalog_here("compact", str(data), "--dry-run", "--json")
    assert run.returncode == 0, run.stderr
    rows = [json.loads(line) for line in run.stdout.splitlines()]
    assert tree_snapshot(data) == before
    offsets = next(r for r in rows if r.get("partition") == "__consumer_offsets-0")
    orders = next(r for r in rows if r.get("partition") == "orders-0")
    assert offsets["dry_run"] and offsets["stats"]["records_superseded"] == 56
    assert orders["skipped"] and orders["reason"] == "cleanup.policy=delete"
    assert rows[-1]["type"] == "summary" and rows[-1]["partitions"] == 1


def test_compact_cleans_and_moves_the_checkpoint(tmp_path: Path) -> None:
    data = tmp_path / "data"
    build(data)
    run = kafkalog_here("compact", str(data), "--config", "cleanup.policy=compact")
    assert run.returncode == 0, run.stderr
    assert "2 partitions cleaned, 0 skipped" in run.stdout
    assert "removed 56 superseded records" in run.stdout
    text = (data / "cleaner-offset-checkpoint").read_text().splitlines()
    assert text[:2] == ["0", "2"] and sorted(text[2:]) == ["__consumer_offsets 0 60", "orders 0 60"]
    with Log(data / "orders-0", writable=False) as log:
        assert [r.offset for r in log.records()] == [56, 57, 58, 59]


def test_a_log_all_in_its_active_segment_says_why_nothing_is_cleaned(tmp_path: Path) -> None:
    """The operators' guide's own example (a broker's one-segment ``__consumer_offsets``)
    said "offsets [0, 0) cleaned in 0 round(s)": a cleaner that looked broken. It now says
    the records are the active segment's, which Kafka's cleaner leaves until it rolls; once
    rolled, the same log is cleaned and the remark is gone."""
    data = tmp_path / "data"
    with Log(data / "__consumer_offsets-0", TopicConfig()) as log:
        for i in range(20):
            log.append_records([Record(-1, 1000 + i, b"k%d" % (i % 4), b"v%d" % i)])
    run = kafkalog_here("compact", str(data), "--dry-run")
    assert run.returncode == 0, run.stderr
    assert (
        "(nothing to clean: offsets [0, 20) are the active segment, which Kafka's cleaner "
        "never cleans until it rolls)" in run.stdout
    ), run.stdout
    with Log(data / "__consumer_offsets-0", TopicConfig()) as log:
        log.roll()
    run = kafkalog_here("compact", str(data), "--dry-run")
    assert "nothing to clean" not in run.stdout and "would remove 16 superseded" in run.stdout
