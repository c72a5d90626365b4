"""``kafkalog groups``: where every consumer group was, from the files alone.

The ``__consumer_offsets`` partitions of a data directory are replayed in offset order, as a
group coordinator loads them: offset commits and group metadata by key, tombstones deleting,
transactional offset commits applied only when their producer's COMMIT marker follows (and
dropped on ABORT). With the log end offset of each partition this gives every group's committed
offsets, its lag per partition and in total, and when it last committed; ``--at`` stops the
replay at a time (records appended after it are ignored); ``--offsets-for-time`` prints the
first offset at or after a time per partition (through the time index) in the CSV that
``kafka-consumer-groups.sh --reset-offsets --from-file`` reads.

Reads only; nothing under the data directory is changed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from kafkalog.cli.args import time_arg
from kafkalog.errors import KafkalogError
from kafkalog.log.internal_replay import InternalEntry, entries_of, in_effect

OFFSETS_TOPIC = "__consumer_offsets"


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "groups",
        help="consumer groups' committed offsets and lag from __consumer_offsets (no broker)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="restore consumers from the CSV with:\n"
        "  kafka-consumer-groups.sh --bootstrap-server ... --group orders-app --reset-offsets"
        " --from-file reset.csv --execute\n\n"
        "examples:\n"
        "  kafkalog groups /var/lib/kafka/data\n"
        "  kafkalog groups data --group orders-app --at 2026-01-01T12:00:00Z --json\n"
        "  kafkalog groups data --group orders-app --offsets-for-time 2026-01-01T12:00:00Z"
        " > reset.csv",
    )
    p.add_argument("path", help="a Kafka data directory (holding __consumer_offsets-N)")
    p.add_argument("--group", action="append", default=None, help="only this group (repeatable)")
    p.add_argument(
        "--at",
        type=time_arg,
        default=None,
        metavar="TIMESTAMP",
        help="the groups as they were at this time (epoch ms or ISO 8601): records of the "
        "offsets log appended later are not replayed",
    )
    p.add_argument(
        "--offsets-for-time",
        type=time_arg,
        default=None,
        metavar="TIMESTAMP",
        help="print topic,partition,offset: the first offset at or after this time in each "
        "partition the group(s) committed to, the CSV kafka-consumer-groups.sh "
        "--reset-offsets --from-file reads (group,topic,partition,offset for several groups)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.set_defaults(run=run)


# -- the replay ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Commit:
    """One committed offset, as the coordinator holds it."""

    offset: int
    commit_timestamp: int
    metadata: str
    leader_epoch: int
    log_offset: int  # where in __consumer_offsets it was written


@dataclass
class GroupState:
    """The replayed content of the offsets topic."""

    offsets: dict[tuple[str, str, int], Commit] = field(default_factory=dict)
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)  # group metadata values

    def group_names(self) -> list[str]:
        return sorted({g for g, _, _ in self.offsets} | set(self.groups))


OffsetsEntry = InternalEntry


def offsets_entries(log: Any) -> Iterator[OffsetsEntry]:
    """Every record of one ``__consumer_offsets`` partition, in offset order."""
    return entries_of(log.batches(), log.log_start_offset)


def replay(entries: Iterable[OffsetsEntry], at: int | None = None) -> GroupState:
    """The coordinator's view after the records (in offset order) appended at or before
    ``at``. Transactional commits wait for their producer's marker (``in_effect``)."""
    from kafkalog.records.internal_topics import CONSUMER_OFFSETS, UnknownRecordType

    state = GroupState()
    upto = entries if at is None else (e for e in entries if e.timestamp <= at)
    for e in in_effect(upto):
        if e.key is None:
            continue
        try:
            key = CONSUMER_OFFSETS.decode_key(e.key, what=f"{OFFSETS_TOPIC} offset {e.log_offset}")
        except UnknownRecordType:
            continue  # records of newer group types: not offsets this tool reports
        if key.name == "GroupMetadataKey":
            group = key.data["group"]
            if e.value is None:
                state.groups.pop(group, None)
            else:
                value = CONSUMER_OFFSETS.decode_value(key.version, e.value)
                assert value is not None
                state.groups[group] = value.data
            continue
        if key.name != "OffsetCommitKey":
            continue
        tp = (key.data["group"], key.data["topic"], key.data["partition"])
        if e.value is None:
            state.offsets.pop(tp, None)
            continue
        v = CONSUMER_OFFSETS.decode_value(key.version, e.value)
        assert v is not None
        state.offsets[tp] = Commit(
            v.data["offset"],
            v.data["commitTimestamp"],
            v.data["metadata"],
            v.data.get("leaderEpoch", -1),
            e.log_offset,
        )
    return state


# -- the command ---------------------------------------------------------------------------------
def load(path: str, at: int | None = None) -> tuple[GroupState, dict[tuple[str, int], str]]:
    """The replayed state of every ``__consumer_offsets`` partition under ``path``, and the
    partition directories there."""
    from kafkalog.log import Log
    from kafkalog.log.layout import partitions_in
    from kafkalog.log.logdir import partition_directories

    dirs = partition_directories(path)
    offsets_dirs = sorted((p, d) for (t, p), d in dirs.items() if t == OFFSETS_TOPIC)
    if not offsets_dirs:
        parent = os.path.dirname(os.path.normpath(path))
        try:
            beside = [t for t, _ in partitions_in(parent)] if len(dirs) == 1 else []
        except (OSError, ValueError):
            beside = []
        if OFFSETS_TOPIC in beside:
            hint = f"; it is a partition of the data directory {parent}: give that"
        else:  # a data directory where no consumer group ever committed
            hint = " (no consumer group has committed an offset in this data directory)"
        raise KafkalogError(f"{path}: no {OFFSETS_TOPIC} partition here{hint}")
    merged = GroupState()
    for _, directory in offsets_dirs:
        # a group lives in exactly one offsets partition (hash of its id), so the partitions
        # replay independently and merge without conflicts
        with Log(directory, writable=False) as log:
            state = replay(offsets_entries(log), at)
        merged.offsets.update(state.offsets)
        merged.groups.update(state.groups)
    return merged, dirs


def run(args: argparse.Namespace, out: IO[str] | None = None) -> int:
    from kafkalog.log import Log

    out = out or sys.stdout
    state, dirs = load(args.path, args.at)
    wanted = set(args.group) if args.group else None
    offsets = {tp: c for tp, c in state.offsets.items() if wanted is None or tp[0] in wanted}
    groups = [g for g in state.group_names() if wanted is None or g in wanted]

    def open_log(topic: str, partition: int) -> Any:
        directory = dirs.get((topic, partition))
        return None if directory is None else Log(directory, writable=False)

    if args.offsets_for_time is not None:
        return _offsets_for_time(args, out, offsets, groups, dirs, open_log)

    ends: dict[tuple[str, int], int | None] = {}
    for _, topic, partition in offsets:
        if (topic, partition) not in ends:
            log = open_log(topic, partition)
            ends[(topic, partition)] = None if log is None else log.log_end_offset
            if log is not None:
                log.close()
    rows = []
    for group in groups:
        mine = sorted((tp, c) for tp, c in offsets.items() if tp[0] == group)
        total = 0
        last = -1
        for (_, topic, partition), commit in mine:
            end = ends[(topic, partition)]
            lag = None if end is None else end - commit.offset
            total += lag or 0
            last = max(last, commit.commit_timestamp)
            rows.append(
                {
                    "type": "offset",
                    "group": group,
                    "topic": topic,
                    "partition": partition,
                    "offset": commit.offset,
                    "logEndOffset": end,
                    "lag": lag,
                    "commitTimestamp": commit.commit_timestamp,
                    "leaderEpoch": commit.leader_epoch,
                    "metadata": commit.metadata,
                }
            )
        meta = state.groups.get(group)
        rows.append(
            {
                "type": "group",
                "group": group,
                "partitions": len(mine),
                "totalLag": total,
                "lastCommitTimestamp": last if mine else None,
                "protocolType": None if meta is None else meta.get("protocolType"),
                "generation": None if meta is None else meta.get("generation"),
                "members": None if meta is None else len(meta.get("members") or []),
            }
        )
    if args.json:
        for row in rows:
            print(json.dumps(row), file=out)
        return 0
    _print_table(rows, out)
    return 0


def _iso(ms: int | None) -> str:
    if ms is None or ms < 0:
        return "-"
    try:
        return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds")
    except (ValueError, OverflowError, OSError):
        return str(ms)


def _print_table(rows: list[dict[str, Any]], out: IO[str]) -> None:
    header = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "COMMITTED")
    table = [header]
    summaries = []
    for r in rows:
        if r["type"] == "offset":
            table.append(
                (
                    r["group"],
                    r["topic"],
                    str(r["partition"]),
                    str(r["offset"]),
                    "-" if r["logEndOffset"] is None else str(r["logEndOffset"]),
                    "-" if r["lag"] is None else str(r["lag"]),
                    _iso(r["commitTimestamp"]),
                )
            )
        else:
            summaries.append(
                f"{r['group']}: {r['partitions']} partitions, total lag {r['totalLag']}, "
                f"last commit {_iso(r['lastCommitTimestamp'])}"
            )
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip(), file=out)
    if summaries:
        print(file=out)
    for line in summaries:
        print(line, file=out)


def _offsets_for_time(
    args: argparse.Namespace,
    out: IO[str],
    offsets: dict[tuple[str, str, int], Commit],
    groups: list[str],
    dirs: dict[tuple[str, int], str],
    open_log: Any,
) -> int:
    """Per partition, the first offset whose record is at or after the time (Kafka's
    ``--to-datetime``: the log end when none is), as kafka-consumer-groups.sh's CSV."""
    if offsets:
        targets = sorted({(g, t, p) for g, t, p in offsets})
    else:  # no group: every partition of the user topics, to seed a new group
        targets = sorted(("", t, p) for t, p in dirs if not t.startswith("__"))
    several = len({g for g, _, _ in targets}) > 1
    found: dict[tuple[str, int], int] = {}
    for group, topic, partition in targets:
        if (topic, partition) not in found:
            log = open_log(topic, partition)
            if log is None:
                continue
            with log:
                hit = log.offsets_for_times(args.offsets_for_time)
                found[(topic, partition)] = log.log_end_offset if hit is None else hit.offset
        if (topic, partition) not in found:
            continue
        offset = found[(topic, partition)]
        if args.json:
            row = {"group": group or None, "topic": topic, "partition": partition}
            print(json.dumps({"type": "resetOffset", **row, "offset": offset}), file=out)
        elif several:
            print(f"{group},{topic},{partition},{offset}", file=out)
        else:
            print(f"{topic},{partition},{offset}", file=out)
    return 0
