"""``kafkalog retention``: what the next retention pass would delete, and why the rest stays.

The answer to "why is my disk full": for every segment of every partition, whether Kafka's next
retention run deletes it and by which rule (below the log start offset, ``retention.bytes``,
``retention.ms``), or what keeps it (a batch with a timestamp in the future, the newest record
still within ``retention.ms``, the size within ``retention.bytes``, ``cleanup.policy`` without
``delete``, an older segment that stays: deletion goes oldest first and stops at the first
segment it keeps). The plan comes from the log layer's :meth:`Log.retention_plan`, the same
rules the real deletion runs; nothing is deleted or changed.

Topic configurations live in the cluster's metadata, not in the partition directories: a data
directory ``kafkalog serve`` keeps has them in ``.kafkalog-serve.json`` (each topic's overrides
and the dynamic broker defaults), which are each topic's configs here; otherwise Kafka's
defaults. ``--retention-ms``/``--retention-bytes``/``--cleanup-policy`` override both.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import os
import sys
import time
from typing import IO, Any

from kafkalog.cli.args import time_arg
from kafkalog.cli.served_configs import StoredConfigs
from kafkalog.errors import KafkalogError


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "retention",
        help="what the next retention pass would delete, and what keeps each segment alive",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        "  kafkalog retention /var/lib/kafka/data --retention-ms 86400000\n"
        "  kafkalog retention data/orders-3 --retention-bytes 1073741824 --json",
    )
    p.add_argument("path", help="a partition directory, or a data directory (every partition)")
    p.add_argument("--retention-ms", type=int, default=None, help="default 604800000 (7 days)")
    p.add_argument("--retention-bytes", type=int, default=None, help="default -1 (no limit)")
    p.add_argument(
        "--cleanup-policy", default=None, help="delete, compact or compact,delete (default delete)"
    )
    p.add_argument(
        "--now",
        type=time_arg,
        default=None,
        metavar="TIMESTAMP",
        help="the time of the retention pass (epoch ms or ISO 8601; default: now)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object per segment")
    p.set_defaults(run=run)


def _iso(ms: int) -> str:
    try:
        return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds")
    except (ValueError, OverflowError, OSError):
        return str(ms)


def segment_verdicts(log: Any, now: int) -> list[dict[str, Any]]:
    """One dict per segment, oldest first: ``deleted`` and the ``rule`` deleting it, or the
    ``reason`` it is kept; ``expiresAt`` on every one: the first millisecond at which
    ``retention.ms`` lets a pass delete it (its largest timestamp + retention.ms + 1, as
    Kafka deletes when ``now - largest > retention.ms``), None when no time limit applies
    (``retention.ms=-1``, or a ``cleanup.policy`` without ``delete``)."""
    plan = {seg.base_offset: rule for seg, rule in log.retention_plan(now)}
    config = log.config
    segments = log.segments
    size_left = sum(s.size for s in segments) - sum(
        s.size for s in segments if s.base_offset in plan
    )
    rows = []
    stopped = False
    for i, seg in enumerate(segments):
        largest = seg.largest_timestamp
        row: dict[str, Any] = {
            "topic": log.topic,
            "partition": log.partition,
            "baseOffset": seg.base_offset,
            "nextOffset": segments[i + 1].base_offset if i + 1 < len(segments) else None,
            "size": seg.size,
            "largestTimestamp": largest,
            "timestampFromMtime": seg.largest_record_timestamp is None,
        }
        # when retention.ms makes it deletable, whatever else deletes or keeps it (README)
        timed = config.delete and config.retention_ms >= 0
        row["expiresAt"] = largest + config.retention_ms + 1 if timed else None
        if seg.base_offset in plan:
            row.update(deleted=True, rule=plan[seg.base_offset], reason=None)
        else:
            reason = "an older segment is kept (retention deletes oldest first)"
            if not stopped:
                reason = _why_kept(log, seg, i == len(segments) - 1, now, size_left)
                stopped = True
            row.update(deleted=False, rule=None, reason=reason)
        rows.append(row)
    return rows


def _why_kept(log: Any, seg: Any, last: bool, now: int, size_left: int) -> str:
    config = log.config
    if last and seg.size == 0:
        return "the active segment, empty"
    if not config.delete:
        return (
            f"cleanup.policy={','.join(config.cleanup_policy)} has no 'delete': only segments "
            f"below the log start offset ({log.log_start_offset}) are deleted"
        )
    reasons = []
    if config.retention_bytes < 0:
        reasons.append("retention.bytes=-1 (no size limit)")
    else:
        reasons.append(
            f"the log's {size_left} bytes left minus this segment's {seg.size} would be under "
            f"retention.bytes={config.retention_bytes}"
        )
    largest = seg.largest_timestamp
    if config.retention_ms < 0:
        reasons.append("retention.ms=-1 (no time limit)")
    elif largest > now:
        reasons.append(
            f"a batch has a timestamp in the future ({largest}, {_iso(largest)}, offset "
            f"{seg.shallow_offset_of_max_timestamp_so_far}): kept until "
            f"{_iso(largest + config.retention_ms)}"
        )
    else:
        source = "the .log mtime" if seg.largest_record_timestamp is None else "newest record"
        reasons.append(
            f"{source} {_iso(largest)} is within retention.ms={config.retention_ms} "
            f"(deletable after {_iso(largest + config.retention_ms)})"
        )
    return "; ".join(reasons)


@functools.cache
def _log_start_offsets(data_dir: str) -> dict[tuple[str, int], int]:
    """The data directory's log-start-offset-checkpoint (rule (a) depends on it), if any."""
    from kafkalog.log import LogDir

    try:
        return dict(LogDir(data_dir).log_start_offsets)
    except (OSError, KafkalogError):
        return {}


def _topic_config(data_dir: str, topic: str, stored: dict[str, str], flags: dict[str, str]) -> Any:
    """The topic's stored configs with the command line's over them."""
    from kafkalog.log import TopicConfig

    try:
        return TopicConfig.from_properties({**stored, **flags}, ignore_unmodelled=True)
    except KafkalogError as e:
        raise KafkalogError(f"{data_dir}: the stored configs of topic {topic}: {e}") from None


def run(args: argparse.Namespace, out: IO[str] | None = None) -> int:
    from kafkalog.cli.verify import partitions_in
    from kafkalog.log import Log, TopicConfig

    out = out or sys.stdout
    now = int(time.time() * 1000) if args.now is None else args.now
    settings: dict[str, str] = {}
    if args.retention_ms is not None:
        settings["retention.ms"] = str(args.retention_ms)
    if args.retention_bytes is not None:
        settings["retention.bytes"] = str(args.retention_bytes)
    if args.cleanup_policy is not None:
        settings["cleanup.policy"] = args.cleanup_policy
    TopicConfig.from_properties(settings)  # a bad flag is refused before any partition
    stored = StoredConfigs()
    total_deleted = 0
    total_bytes = 0
    for (topic, partition), directory in sorted(partitions_in(args.path).items()):
        data_dir = os.path.dirname(directory)
        config = _topic_config(data_dir, topic, stored.of(data_dir, topic), settings)
        start = _log_start_offsets(data_dir).get((topic, partition))
        with Log(directory, config, writable=False, log_start_offset=start) as log:
            rows = segment_verdicts(log, now)
        for row in rows:
            if row["deleted"]:
                total_deleted += 1
                total_bytes += row["size"]
            if args.json:
                print(json.dumps({"type": "segment", **row}), file=out)
            else:
                verdict = f"DELETE ({row['rule']})" if row["deleted"] else f"keep: {row['reason']}"
                print(
                    f"{row['topic']}-{row['partition']} {row['baseOffset']:020d}.log "
                    f"{row['size']} bytes, newest {_iso(row['largestTimestamp'])}: {verdict}",
                    file=out,
                )
    if args.json:
        print(
            json.dumps(
                {"type": "summary", "now": now, "segments": total_deleted, "bytes": total_bytes}
            ),
            file=out,
        )
    else:
        print(
            f"next retention pass at {_iso(now)}: {total_deleted} segments, {total_bytes} bytes",
            file=out,
        )
    return 0
