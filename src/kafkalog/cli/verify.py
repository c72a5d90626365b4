"""``kafkalog verify``: check partitions against themselves, read-only.

Every batch's structure and CRC, offsets that only grow, every offset-index entry pointing at a
batch boundary with the right offsets, every time-index entry matching the largest timestamp up
to its offset, the indexes' own sanity checks, and the checkpoint files. One line per problem,
naming the file and the byte position; a summary; exit status 1 when anything is wrong.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

from kafkalog import files
from kafkalog.cli import progress
from kafkalog.errors import KafkalogError


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "verify",
        help="check batches, CRCs, indexes and checkpoints of partitions (read-only)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  kafkalog verify /var/lib/kafka/data\n"
        "  kafkalog verify /var/lib/kafka/data/orders-3\n"
        "  kafkalog verify 's3://backups/kafka-logs?region=eu-west-1'",
    )
    p.add_argument(
        "paths",
        nargs="+",
        help="data directories or partition directories (paths, or URIs pyarrow.fs resolves)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per problem or warning (type, file, position, message), then a "
        "summary object",
    )
    p.set_defaults(run=run)


@dataclass
class Report:
    segments: int = 0
    batches: int = 0
    records_checked: int = 0
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: every problem and warning as ``--json`` prints it: type, file, position, message
    entries: list[dict[str, Any]] = field(default_factory=list)

    def problem(self, path: str | None, position: int | None, text: str) -> None:
        self.problems.append(_where(path, position, text))
        self.entries.append(_entry("problem", path, position, text))

    def warning(self, path: str | None, position: int | None, text: str) -> None:
        self.warnings.append(_where(path, position, text))
        self.entries.append(_entry("warning", path, position, text))

    def error(self, e: KafkalogError, suffix: str = "") -> None:
        """A problem an exception reported (its file and byte, when it names them)."""
        path = getattr(e, "path", None)
        position = getattr(e, "position", None)
        reason = getattr(e, "reason", None)
        if reason is None or path is None:
            self.problems.append(f"{e}{suffix}")
            self.entries.append(_entry("problem", path, position, f"{e}{suffix}"))
        else:
            self.problem(path, position, f"{reason}{suffix}")


def _where(path: str | None, position: int | None, text: str) -> str:
    where = path if position is None else f"{path} at byte {position}"
    return text if where is None else f"{where}: {text}"


def _entry(kind: str, path: str | None, position: int | None, text: str) -> dict[str, Any]:
    return {"type": kind, "file": path, "position": position, "message": text}


def partitions_under(path: str) -> list[str]:
    """The partition directories a command was pointed at (a partition or a data directory)."""
    from kafkalog.log.logdir import partition_directories

    return list(partition_directories(files.resolve(path)).values())


def verify_partition(
    directory: str, report: Report, done: Callable[[int], object] = lambda n: None
) -> None:
    """Check one partition; ``done`` hears each segment's log size as it finishes."""
    from kafkalog.log.layout import segment_logs

    logs = segment_logs(directory)
    previous_last = -1
    for i, (base, log_path) in enumerate(logs):
        report.segments += 1
        active = i == len(logs) - 1
        previous_last = _verify_segment(directory, base, log_path, active, previous_last, report)
        done(files.getsize(log_path))
    _verify_checkpoints(directory, report)


def _verify_segment(
    directory: str, base: int, log_path: str, active: bool, previous_last: int, report: Report
) -> int:
    from kafkalog.records import LogReader, RecordBatch
    from kafkalog.records.reader import read_only_buffer

    data = read_only_buffer(log_path)
    reader = LogReader(data, path=log_path)
    starts: dict[int, tuple[int, int]] = {}  # position -> (first offset, last offset)
    batch_max: list[tuple[int, int, int]] = []  # (base offset, last offset, running max ts)
    running = -1
    try:
        for entry in reader:
            report.batches += 1
            first = entry.base_offset if isinstance(entry, RecordBatch) else entry.offset
            if not entry.is_valid():
                report.problem(
                    log_path,
                    entry.position + (17 if entry.magic >= 2 else 12),
                    f"CRC mismatch in the batch at offset {entry.last_offset}",
                )
            if entry.last_offset <= previous_last:
                report.problem(
                    log_path,
                    entry.position,
                    f"offset {entry.last_offset} does not follow {previous_last}",
                )
            if isinstance(entry, RecordBatch) and entry.base_offset < base:
                report.problem(
                    log_path,
                    entry.position,
                    f"batch base offset {entry.base_offset} is below the segment's "
                    f"base offset {base}",
                )
            try:
                report.records_checked += len(entry.records())
            except KafkalogError as e:
                report.error(e)
            previous_last = max(previous_last, entry.last_offset)
            running = max(running, entry.max_timestamp)
            starts[entry.position] = (first, entry.last_offset)
            batch_max.append((first, entry.last_offset, running))
    except KafkalogError as e:
        report.error(e, " (the rest of the segment cannot be read)")
    tail = reader.incomplete_tail
    if tail is not None:
        text = (
            f"incomplete batch at the end ({tail.available} of {tail.declared_size or '?'} bytes)"
        )
        if active:
            report.warning(log_path, tail.position, f"{text} (active segment)")
        else:
            report.problem(log_path, tail.position, text)
    stem = log_path[: -len(".log")]
    _verify_offset_index(stem + ".index", base, starts, report, active)
    _verify_time_index(stem + ".timeindex", base, batch_max, report, active)
    _verify_txn_index(stem + ".txnindex", base, report)
    return previous_last


def _zero_tail(path: str, entries: int, entry_size: int, active: bool, report: Report) -> None:
    """A rolled segment's index was trimmed to its entries: bytes after the last valid entry
    mean lost entries (or a crash before the trim). The active one is preallocated, so a zero
    tail is normal there, but anything else after its valid entries is damage: the read-only
    open stops at the first entry out of order, and would otherwise hide it."""
    length = files.getsize(path)
    start = entries * entry_size
    if length <= start:
        return
    if not active:
        report.problem(
            path,
            start,
            f"{length - start} bytes after the last valid entry "
            "(zero-filled or damaged) in a rolled segment's index",
        )
        return
    damaged = _first_nonzero(path, start, length)
    if damaged is not None:
        where = f"after entry {entries - 1}," if entries else "from the first slot on,"
        report.problem(
            path,
            damaged - (damaged - start) % entry_size,  # the start of the first damaged entry
            f"{where} the active segment's index holds entries out of index order "
            "(corrupt or stale)",
        )


def _first_nonzero(path: str, start: int, end: int) -> int | None:
    """The position of the first non-zero byte of ``path`` in ``[start, end)``, read in
    bounded chunks (a preallocated index is 10 MiB by default)."""
    handle = files.open_read(path)
    try:
        pos = start
        while pos < end:
            chunk = handle.pread(min(end - pos, 1 << 20), pos)
            if not chunk:
                return None
            stripped = chunk.lstrip(b"\0")
            if stripped:
                return pos + len(chunk) - len(stripped)
            pos += len(chunk)
        return None
    finally:
        handle.close()


def _verify_offset_index(
    path: str, base: int, starts: dict[int, tuple[int, int]], report: Report, active: bool
) -> None:
    from kafkalog.index import OffsetIndex

    if not files.exists(path):
        report.problem(path, None, "offset index missing (rebuild-index recreates it)")
        return
    with OffsetIndex(path, base, writable=False) as index:
        _zero_tail(path, index.entries, 8, active, report)
        try:
            index.sanity_check()
        except KafkalogError as e:
            report.error(e)
        position_of_last = {last: pos for pos, (_, last) in starts.items()}
        for n in range(index.entries):
            offset, position = index.entry(n)
            found = starts.get(position)
            if found is None:
                report.problem(
                    path, n * 8, f"entry {n} ({offset}, {position}) does not point at a batch start"
                )
                continue
            first, _ = found
            # an entry keys the last offset of an append (one or more batches) starting here
            if first > offset or position_of_last.get(offset, -1) < position:
                report.problem(
                    path,
                    n * 8,
                    f"entry {n} maps offset {offset} to position {position}, where "
                    f"the batch holds offsets {found[0]}..{found[1]}",
                )


def _verify_time_index(
    path: str, base: int, batch_max: list[tuple[int, int, int]], report: Report, active: bool
) -> None:
    from kafkalog.index import TimeIndex

    if not files.exists(path):
        return  # logs older than Kafka 0.10.1 have none
    with TimeIndex(path, base, writable=False) as index:
        _zero_tail(path, index.entries, 12, active, report)
        try:
            index.sanity_check()
        except KafkalogError as e:
            report.error(e)
        previous = None
        for n in range(index.entries):
            ts, offset = index.entry(n)
            if previous is not None and (ts <= previous[0] or offset < previous[1]):
                report.problem(path, n * 12, f"entry {n} ({ts}, {offset}) is out of order")
            holder = next((m for f, last, m in batch_max if f <= offset <= last), None)
            if holder is None:
                report.problem(path, n * 12, f"entry {n}: offset {offset} is not in the log")
            elif holder != ts:
                report.problem(
                    path,
                    n * 12,
                    f"entry {n}: timestamp {ts} but the largest timestamp up to "
                    f"offset {offset} is {holder}",
                )
            previous = (ts, offset)


def _verify_txn_index(path: str, base: int, report: Report) -> None:
    from kafkalog.index import TransactionIndex

    if not files.exists(path):
        return
    index = TransactionIndex(path, base, writable=False)
    try:
        index.sanity_check()
        if index.trailing_bytes:
            report.problem(
                path,
                len(index) * 34,
                f"{index.trailing_bytes} trailing bytes are not a whole entry",
            )
    except KafkalogError as e:
        report.error(e)
    finally:
        index.close()


def _verify_checkpoints(directory: str, report: Report) -> None:
    from kafkalog.log.checkpoints import LeaderEpochCheckpoint, PartitionMetadata

    for name, read in (
        ("leader-epoch-checkpoint", LeaderEpochCheckpoint.read),
        ("partition.metadata", PartitionMetadata.read),
    ):
        path = os.path.join(directory, name)
        if files.exists(path):
            try:
                read(path)
            except KafkalogError as e:
                report.error(e)


def run(args: argparse.Namespace, out: IO[str] | None = None) -> int:
    out = out or sys.stdout
    report = Report()
    partitions = [p for path in args.paths for p in partitions_under(path)]
    with progress.bar("verifying", sum(progress.log_bytes(p) for p in partitions)) as shown:
        for directory in partitions:
            verify_partition(directory, report, shown.update)
    if args.json:
        for entry in report.entries:
            print(json.dumps(entry), file=out)
        summary = {
            "type": "summary",
            "partitions": len(partitions),
            "segments": report.segments,
            "batches": report.batches,
            "records": report.records_checked,
            "problems": len(report.problems),
            "warnings": len(report.warnings),
            "ok": not report.problems,
        }
        print(json.dumps(summary), file=out)
        return 1 if report.problems else 0
    for line in report.problems:
        print(f"PROBLEM {line}", file=out)
    for line in report.warnings:
        print(f"warning {line}", file=out)
    status = "OK" if not report.problems else f"{len(report.problems)} problem(s)"
    print(
        f"verified {len(partitions)} partition(s), {report.segments} segment(s), "
        f"{report.batches} batch(es), {report.records_checked} record(s): {status}",
        file=out,
    )
    return 1 if report.problems else 0
