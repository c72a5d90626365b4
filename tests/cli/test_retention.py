"""``kafkalog retention`` against a brute-force oracle (issue 15's proof).

Generated partitions (old and new records, a batch with a timestamp in the future, a log start
offset moved by DeleteRecords, size limits) are read by the command; the oracle scans every
record of every ``.log`` file itself (no index, no kafkalog log layer) for each segment's newest
timestamp and applies Kafka's retention passes as UnifiedLog.deleteOldSegments documents them:
the log start offset, then ``retention.bytes``, then ``retention.ms``, each deleting the oldest
segments while its rule holds, never an empty last segment.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from clirun import kafkalog_here, tree_snapshot
from kafkalog.log import LogDir, TopicConfig
from kafkalog.records import LogReader, Record

DAY = 24 * 3600 * 1000
NOW = 1_767_225_600_000  # 2026-01-01T00:00:00Z, the --now of every run
WEEK = 7 * DAY


def _write(root: Path, topic: str, stamps: list[int], log_start: int | None = None) -> Path:
    config = TopicConfig(segment_bytes=1200, retention_ms=-1, retention_bytes=-1)
    with LogDir(str(root), writable=True) as logdir:
        log = logdir.log(topic, 0, create=True, config=config)
        for i, ts in enumerate(stamps):
            log.append_records([Record.of(b"x" * 60, key=b"k%d" % i, timestamp=ts)])
        if log_start is not None:
            log.increment_log_start_offset(log_start)  # DeleteRecords; kept in the checkpoint
        logdir.checkpoint()
    return root / f"{topic}-0"


def _oracle(
    directory: Path, now: int, retention_ms: int, retention_bytes: int, start: int
) -> dict[int, str]:
    """base offset -> the rule deleting it, by Kafka's passes over a brute-force scan."""
    segments = []
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".log"):
            continue
        data = (directory / name).read_bytes()
        stamps = [r.timestamp for batch in LogReader(data) for r in batch.records()]
        largest = max(stamps) if stamps else int((directory / name).stat().st_mtime * 1000)
        segments.append((int(name[:-4]), len(data), largest))
    doomed: dict[int, str] = {}

    def run(rule: str, holds: Any) -> None:
        nonlocal segments
        n = 0
        for i, (base, size, largest) in enumerate(segments):
            nxt = segments[i + 1][0] if i + 1 < len(segments) else None
            if nxt is None and size == 0:
                break
            if not holds(base, size, largest, nxt):
                break
            doomed[base] = rule
            n += 1
        segments = segments[n:]

    run("log-start-offset", lambda b, s, t, nxt: nxt is not None and nxt <= start)
    if segments and retention_bytes >= 0:
        budget = [sum(s for _, s, _ in segments) - retention_bytes]

        def over(b: int, s: int, t: int, nxt: int | None) -> bool:
            if budget[0] - s >= 0:
                budget[0] -= s
                return True
            return False

        if budget[0] >= 0:
            run("retention.bytes", over)
    if segments and retention_ms >= 0:
        run("retention.ms", lambda b, s, t, nxt: now - t > retention_ms)
    return doomed


def _command(path: Path, *options: str) -> list[dict[str, Any]]:
    result = kafkalog_here("retention", str(path), "--now", str(NOW), "--json", *options)
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]  # nothing but JSON


CASES = {
    # ten days old then fresh: the time rule deletes the old prefix
    "aging": (lambda i: NOW - 10 * DAY + i * 60_000 if i < 40 else NOW - DAY, None),
    # one batch stamped a year ahead in the second segment keeps it and all after
    "future": (lambda i: NOW + 365 * DAY if i == 20 else NOW - 30 * DAY + i, None),
    # DeleteRecords moved the log start offset past the first segments
    "deleted-records": (lambda i: NOW - DAY + i, 47),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize(
    ("retention_ms", "retention_bytes"), [(WEEK, -1), (-1, 3000), (WEEK, 5000), (-1, -1)]
)
def test_retention_matches_a_brute_force_scan(
    tmp_path: Path, case: str, retention_ms: int, retention_bytes: int
) -> None:
    stamp, start = CASES[case]
    directory = _write(tmp_path / "data", case, [stamp(i) for i in range(90)], start)
    before = tree_snapshot(tmp_path / "data")
    rows = _command(
        directory, "--retention-ms", str(retention_ms), "--retention-bytes", str(retention_bytes)
    )
    segments = [r for r in rows if r["type"] == "segment"]
    expected = _oracle(directory, NOW, retention_ms, retention_bytes, start or 0)
    assert {r["baseOffset"]: r["rule"] for r in segments if r["deleted"]} == expected
    assert len(segments) == len(list(directory.glob("*.log"))) > 3
    kept = [r for r in segments if not r["deleted"]]
    assert all(r["reason"] for r in kept)  # every kept segment says why
    (summary,) = [r for r in rows if r["type"] == "summary"]
    assert summary["segments"] == len(expected)
    assert summary["bytes"] == sum(r["size"] for r in segments if r["deleted"])
    assert tree_snapshot(tmp_path / "data") == before  # read only


def test_a_future_timestamp_is_named_as_what_keeps_the_segment(tmp_path: Path) -> None:
    stamp, _ = CASES["future"]
    directory = _write(tmp_path / "data", "future", [stamp(i) for i in range(90)])
    rows = _command(directory, "--retention-ms", str(WEEK))
    first_kept = next(r for r in rows if r["type"] == "segment" and not r["deleted"])
    assert "future" in first_kept["reason"] and "offset 20" in first_kept["reason"]
    later = [r for r in rows if r["type"] == "segment" and not r["deleted"]][1:]
    assert later and all("older segment is kept" in r["reason"] for r in later)


@pytest.mark.parametrize(
    ("options", "policy_deletes"),
    [
        (["--retention-ms", str(WEEK)], True),
        (["--retention-ms", "-1"], False),
        (["--retention-ms", str(WEEK), "--cleanup-policy", "compact"], False),
        (["--retention-ms", str(WEEK), "--retention-bytes", "3000"], True),
    ],
)
def test_every_segment_says_when_it_expires(
    tmp_path: Path, options: list[str], policy_deletes: bool
) -> None:
    """The README lists ``expiresAt`` among every segment's fields; it was there only for
    kept segments under a time limit, so a script reading it failed on the others. It is
    the first millisecond retention.ms deletes the segment at (Kafka: now - largest >
    retention.ms), null when no time limit applies, and deleted segments have it too."""
    stamp, _ = CASES["aging"]
    directory = _write(tmp_path / "data", "aging", [stamp(i) for i in range(90)])
    segments = [r for r in _command(directory, *options) if r["type"] == "segment"]
    assert any(r["deleted"] for r in segments) == policy_deletes
    kept_by_time = False
    for row in segments:
        assert "expiresAt" in row
        if policy_deletes:
            assert row["expiresAt"] == row["largestTimestamp"] + WEEK + 1
            # deleted by time exactly when it has expired at --now
            if row["rule"] == "retention.ms":
                assert row["expiresAt"] <= NOW
            if not row["deleted"] and "within retention.ms" in row["reason"]:
                assert row["expiresAt"] > NOW
                kept_by_time = True
        else:
            assert row["expiresAt"] is None
    assert kept_by_time == policy_deletes  # the first kept segment waits for its expiry
    readme = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    documented = next(
        line for line in readme.splitlines() if line.startswith("| `retention` | `segment`")
    )
    assert all(f"`{field}`" in documented for field in segments[0] if field != "type")


def test_the_configs_kafkalog_serve_stored_are_the_topic_s(tmp_path: Path) -> None:
    """A directory ``kafkalog serve`` keeps: the topic's altered override and the dynamic broker
    default it stored are the topic's configs here, the command line's flags over them."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    from kafka_clients import config, rdkafka
    from kafkalog.server import ServerThread

    stamp, _ = CASES["aging"]
    directory = _write(tmp_path / "data", "aging", [stamp(i) for i in range(90)])
    with ServerThread(str(tmp_path / "data"), config()) as server:
        admin = AdminClient(rdkafka(server.bootstrap))
        for kind, name, key, value in (
            (ConfigResource.Type.TOPIC, "aging", "retention.ms", str(5 * DAY)),
            (ConfigResource.Type.BROKER, "1", "log.retention.bytes", "5000"),
        ):
            entry = ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
            resource = ConfigResource(kind, name, incremental_configs=[entry])
            admin.incremental_alter_configs([resource])[resource].result(10)
    stored = _command(directory)
    flagged = _command(directory, "--retention-bytes", "-1", "--retention-ms", str(WEEK))
    for rows, retention_ms, retention_bytes in (
        (stored, 5 * DAY, 5000),
        (flagged, WEEK, -1),
    ):
        expected = _oracle(directory, NOW, retention_ms, retention_bytes, 0)
        got = {r["baseOffset"]: r["rule"] for r in rows if r["type"] == "segment" and r["deleted"]}
        assert got == expected
    # the stored configs make a difference here: the size rule deletes what the flags keep
    assert "retention.bytes" in {r["rule"] for r in stored if r["type"] == "segment"}
    assert stored != flagged
