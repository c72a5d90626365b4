"""``kafkalog verify``: check partitions against themselves, read-only.

Every batch's structure and CRC, offsets that only grow, every offset-index entry pointing at a
batch boundary with the right offsets, every time-index entry matching the largest timestamp up
to its offset, the indexes' own sanity checks, the checkpoint files (a data directory's too:
``meta.properties``, the offset checkpoints, one topic id per topic), and every name in the
partition directory against what Kafka's log loader reads. One line per problem, naming the
file and the byte position (a batch's problems at its first byte, as ``dump`` shows it, naming
its first and last offsets); a summary; exit status 1 when anything is wrong.

A file that cannot be read is a problem of its partition, and the other partitions are still
verified; a path holding no partition at all is a problem too (exit status 1). Warnings name
what is not damage but worth knowing: an incomplete batch at the end of the active segment (an
append in flight, or a crash Kafka's recovery cuts), files Kafka deletes or completes at its
next start (``.deleted``, ``.cleaned``, ``.swap``, an index without its ``.log``) or ignores.
"""

from __future__ import annotations

import argparse
import bisect
import functools
import itertools
import json
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

from kafkalog import files
from kafkalog.cli import progress
from kafkalog.errors import KafkalogError

if TYPE_CHECKING:
    from kafkalog.log.txn_check import TxnIndexCheck
    from kafkalog.records.reader import LogEntry


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
        """A problem, with the command that deals with it (every problem line names one)."""
        step = next_step(path, text)
        self.problems.append(_where(path, position, f"{text}; next: {step}"))
        entry = _entry("problem", path, position, f"{text}; next: {step}")
        entry["next"] = step
        self.entries.append(entry)

    def warning(self, path: str | None, position: int | None, text: str) -> None:
        self.warnings.append(_where(path, position, text))
        self.entries.append(_entry("warning", path, position, text))

    def error(self, e: KafkalogError, suffix: str = "") -> None:
        """A problem an exception reported (its file and byte, when it names them)."""
        path = getattr(e, "path", None)
        position = getattr(e, "position", None)
        reason = getattr(e, "reason", None)
        if reason is None or path is None:
            step = next_step(path, str(e))
            self.problems.append(f"{e}{suffix}; next: {step}")
            entry = _entry("problem", path, position, f"{e}{suffix}; next: {step}")
            entry["next"] = step
            self.entries.append(entry)
        else:
            self.problem(path, position, f"{reason}{suffix}")


def next_step(path: str | None, text: str) -> str:
    """The command (or action) that deals with a problem found in ``path``."""
    if path is None:
        return "`kafkalog repair --dry-run DIR` shows what a repair would move aside"
    name = os.path.basename(path)
    directory = os.path.dirname(path) or "."
    if "no partition here" in text:
        return "point kafkalog at a partition directory (topic-N) or a data directory"
    if "a .swap file" in text:
        return (
            f"`kafkalog repair {directory}` (moves it to a quarantine folder; the segments it "
            "would replace stay as they are)"
        )
    if "cannot read it" in text:
        return f"make it readable (permissions, the disk), then `kafkalog verify {directory}`"
    if any(
        what in text for what in ("misnamed", "where Kafka keeps a file", "not a segment file name")
    ) or text.startswith("a directory named like"):
        return "rename it as Kafka names it, or move it out of the partition directory"
    if "leader epoch" in text and "out of line" in text:
        return (
            "its records read as they are (kafkalog's readers use no epoch); a broker's leader "
            "epoch cache and clients checking epochs would take it: restore the segment from "
            "a backup"
        )
    if "records lost" in text or name.endswith(".log") or ".log." in name:
        return (
            f"`kafkalog repair {directory}` (moves the damaged bytes or leftovers into a "
            "quarantine folder; nothing is deleted)"
        )
    if name.endswith((".index", ".timeindex", ".txnindex")):
        return f"`kafkalog rebuild-index {directory}` (rewrites the index from the .log)"
    if name.endswith(".snapshot"):
        return (
            f"move it out of {directory}: a writable open rebuilds the producer state from the .log"
        )
    if name == "meta.properties":
        return "restore it from a backup or fix the line named (Kafka refuses to start on it)"
    return f"`kafkalog dump --files {path}` shows it; restore it from a backup or fix it"


def _where(path: str | None, position: int | None, text: str) -> str:
    where = path if position is None else f"{path} at byte {position}"
    return text if where is None else f"{where}: {text}"


def _entry(kind: str, path: str | None, position: int | None, text: str) -> dict[str, Any]:
    return {"type": kind, "file": path, "position": position, "message": text}


def partitions_under(path: str) -> list[str]:
    """The partition directories a command was pointed at (a partition or a data directory)."""
    return list(partitions_in(path).values())


def partitions_in(path: str) -> dict[tuple[str, int], str]:
    """The partitions under ``path`` (see :func:`partitions_under`); a path with none is an
    error naming it, the same for every command (exit status 2)."""
    from kafkalog.log.logdir import partition_directories

    found = partition_directories(files.resolve(path))
    if not found:
        raise KafkalogError(
            f"no partition in {path}: neither a partition directory (topic-partition holding "
            "segment .log files) nor a data directory holding partition directories"
        )
    return found


def _unreadable(report: Report, path: str, e: OSError) -> None:
    """A file (or directory) that cannot be read is a problem of its partition, named with
    the system's reason; the other checks and partitions go on."""
    reason = e.strerror or str(e)
    report.problem(getattr(e, "filename", None) or path, None, f"cannot read it: {reason}")


def verify_partition(
    directory: str, report: Report, done: Callable[[int], object] = lambda n: None
) -> None:
    """Check one partition; ``done`` hears each segment's log size as it finishes."""
    from kafkalog.log.layout import offset_from_filename

    try:
        listing = files.scandir(directory)
    except OSError as e:
        _unreadable(report, directory, e)
        return
    logs = _verify_names(directory, listing, report)
    directories = {name for name, is_dir in listing if is_dir}
    previous_last = -1
    epochs = _Epochs(report)
    txns = _txn_check(directory, logs)
    ends: dict[int, int] = {}  # base offset -> the last offset read up to its segment's end
    for i, name in enumerate(logs):
        base = offset_from_filename(name)
        log_path = os.path.join(directory, name)
        stem = log_path[: -len(".log")]
        report.segments += 1
        active = i == len(logs) - 1
        scan: _Scan | None = None
        try:
            if txns is not None:
                txns.segment()
            scan = _verify_segment(base, log_path, active, previous_last, report, epochs, txns)
            following = offset_from_filename(logs[i + 1]) if i + 1 < len(logs) else None
            if following is not None and scan.batch_max and scan.last >= following:
                report.problem(
                    log_path,
                    scan.last_position,
                    f"the segment's batches reach offset {scan.last}, at or past the next "
                    f"segment's base offset {following}: a base offset (outside the batch "
                    "CRC) is wrong",
                )
                scan.last = following - 1  # the next segment is checked on its own
            if previous_last >= 0 and scan.first is not None and scan.first > previous_last + 1:
                _offset_gap(report, log_path, directory, previous_last, scan.first)
            previous_last = scan.last
            ends[base] = scan.last
        except OSError as e:
            _unreadable(report, log_path, e)
        for path, check in (
            (stem + ".index", _verify_offset_index),
            (stem + ".timeindex", _verify_time_index),
            (stem + ".txnindex", functools.partial(_verify_txn_index, txns=txns)),
        ):
            if os.path.basename(path) in directories:
                continue  # reported with the names
            try:
                check(path, base, scan, report, active)
            except OSError as e:
                _unreadable(report, path, e)
        done(scan.size if scan is not None else 0)
    epochs.finish()
    _verify_lost_segments(directory, {name for name, _ in listing}, ends, report)
    _verify_checkpoints(directory, report)
    _verify_snapshots(directory, [name for name, is_dir in listing if not is_dir], report)


def _verify_snapshots(directory: str, names: list[str], report: Report) -> None:
    """Each producer snapshot read as a writable open reads it: one it cannot read is
    deleted there (as Kafka does) and the producer state rebuilt without it, from an older
    snapshot or the log (whose segments retention may have taken: then the sequences and
    open transactions it held are gone), so it is named, as a warning."""
    from kafkalog.log.layout import is_offset_prefix
    from kafkalog.log.producer_snapshot import read_snapshot

    for name in sorted(names):
        prefix, _, rest = name.partition(".")
        if rest != "snapshot" or not is_offset_prefix(prefix):
            continue
        path = os.path.join(directory, name)
        try:
            read_snapshot(path)
        except KafkalogError as e:
            report.warning(
                path,
                getattr(e, "position", None),
                f"{getattr(e, 'reason', None) or e}: a producer snapshot no one can read; a "
                "writable open (kafkalog's, a broker's) deletes it and rebuilds the producer "
                "state from an older snapshot or the log",
            )
        except OSError as e:
            _unreadable(report, path, e)


def _verify_lost_segments(
    directory: str, names: set[str], ends: dict[int, int], report: Report
) -> None:
    """An index left without its ``.log`` after a segment that ends before it: a segment
    lost (the readers refuse to read across it, see ``kafkalog.log.damage.LostSegment``)."""
    from kafkalog.log.damage import LostSegment
    from kafkalog.log.layout import is_offset_prefix

    bases = sorted(ends)
    seen: set[int] = set()
    for name in sorted(names):
        stem, _, suffix = name.partition(".")
        if suffix not in ("index", "timeindex", "txnindex") or not is_offset_prefix(stem):
            continue
        base = int(stem)
        if base in seen or f"{stem}.log" in names:
            continue
        if any(f"{stem}.log{s}" in names for s in (".deleted", ".cleaned", ".swap")):
            continue
        floor = [b for b in bases if b <= base]
        if not floor or ends[floor[-1]] >= base:
            continue  # before the first segment (retention), or covered (a cleaned segment)
        seen.add(base)
        later = [b for b in bases if b > base]
        lost = LostSegment(base, later[0] - 1 if later else None, os.path.join(directory, name))
        report.problem(lost.evidence, None, lost.describe())


def _offset_gap(report: Report, log_path: str, directory: str, last: int, first: int) -> None:
    """Offsets that are in no batch between two segments: what the log cleaner leaves in a
    compacted topic, and what a lost or emptied segment leaves anywhere else (only the topic's
    ``cleanup.policy`` tells, which a partition directory does not hold): a warning, unless
    the directory shows compaction (a topic Kafka always compacts, an entry in the data
    directory's ``cleaner-offset-checkpoint``), as every reader says it."""
    from kafkalog.log.damage import shows_compaction

    if shows_compaction(directory):
        return  # compacted (an internal topic, or one the cleaner-offset-checkpoint lists)
    report.warning(
        log_path,
        0,
        f"offsets {last + 1}..{first - 1} ({first - last - 1} offsets) are in no batch before "
        "this segment: the log cleaner leaves such gaps in a compacted topic; in any other "
        "topic those records are missing (a lost or emptied segment)",
    )


#: Files of a partition directory Kafka's log loader reads, by name alone.
_CHECKPOINT_FILES = ("leader-epoch-checkpoint", "partition.metadata", "quorum-state")
#: KRaft's metadata snapshots (``__cluster_metadata``): end offset and epoch
_KRAFT_SNAPSHOT = re.compile(r"[0-9]{20}-[0-9]{10}\.checkpoint")
_OUR_FILES = (".kafkalog.lock",)
_SEGMENT_KINDS = ("log", "index", "timeindex", "txnindex", "snapshot")
_LEFTOVERS = {
    "deleted": "a file scheduled for deletion (Kafka removes it after file.delete.delay.ms, "
    "or at its next start)",
    "cleaned": "a log cleaner's unfinished output (Kafka deletes it at its next start)",
    "swap": "a segment swap the cleaner did not finish (Kafka completes it at its next start, "
    "replacing the segments it covers)",
}


def _verify_swap(directory: str, name: str, report: Report) -> None:
    """A ``.swap`` that is not whole, valid batches: a writable open refuses to complete it
    (it would replace readable segments), so it is a problem, not a leftover to ignore."""
    from kafkalog.log.loader import swap_file_damage

    try:
        damage = swap_file_damage(directory, name)
    except (KafkalogError, OSError) as e:  # unreadable: named as the other files are
        report.problem(os.path.join(directory, name), 0, f"cannot read it: {e}")
        return
    if damage is not None:
        report.problem(damage.path, damage.position, damage.reason)


def _verify_names(directory: str, listing: list[tuple[str, bool]], report: Report) -> list[str]:
    """Check every name in a partition directory against what Kafka's LogLoader reads (spec
    §1.3, §7.9), and return the segment ``.log`` names, oldest first.

    A problem: a name Kafka would misread (a ``.log``/``.index``/... whose offset is not 20
    digits: Kafka opens the 20-digit name for that offset instead, and never reads this file;
    a ``.snapshot`` it still reads, a warning) or fail on (a prefix that is not a number: the
    broker cannot load the partition), and a directory where a segment file is expected. A
    warning: what Kafka deletes or completes at its next start (``.deleted``, ``.cleaned``,
    ``.swap``, an index without its ``.log``, a checkpoint's ``.tmp``) and names it ignores."""
    from kafkalog.log.layout import is_offset_prefix

    logs: list[tuple[int, str]] = []
    names = {name for name, _ in listing}
    for name, is_dir in sorted(listing):
        path = os.path.join(directory, name)
        prefix, _, rest = name.partition(".")
        if name in _CHECKPOINT_FILES or name in _OUR_FILES or _KRAFT_SNAPSHOT.fullmatch(name):
            if is_dir:
                report.problem(path, None, "a directory where Kafka keeps a file")
            continue
        if rest in _SEGMENT_KINDS:
            if is_dir:
                report.problem(
                    path, None, f"a directory named like a .{rest} file: it cannot be read as one"
                )
                continue
            if not is_offset_prefix(prefix):
                report.problem(
                    path,
                    None,
                    f"not a segment file name: Kafka's loader reads {prefix!r} as a base "
                    "offset and cannot (it fails to load the partition); a segment's files "
                    "are named by a 20-digit offset",
                )
                continue
            if len(prefix) != 20 and rest == "snapshot":
                # Kafka's producer state lists snapshots by suffix and reads each one
                report.warning(
                    path,
                    None,
                    f"not named as Kafka names it ({int(prefix):020d}.snapshot); it is "
                    f"still read as the producer snapshot at offset {int(prefix)}",
                )
                continue
            if len(prefix) != 20:
                right = f"{int(prefix):020d}.{rest}"
                report.problem(
                    path,
                    None,
                    f"misnamed: Kafka names offset {int(prefix)} {right} and reads that "
                    "name, never this file" + (f" ({right} exists too)" if right in names else ""),
                )
                continue  # not one of the log's segments, for Kafka: not walked as one
            if rest == "log":
                logs.append((int(prefix), name))
            elif rest != "snapshot" and f"{prefix}.log" not in names:
                report.warning(path, None, "an index without its .log (Kafka's loader deletes it)")
            continue
        suffix = name.rpartition(".")[2] if "." in name else ""
        if suffix in _LEFTOVERS and not is_dir:
            report.warning(path, None, _LEFTOVERS[suffix])
            if name.endswith(".log.swap"):
                _verify_swap(directory, name, report)
        elif name.endswith(".checkpoint.part") and not is_dir:
            report.warning(path, None, "a KRaft snapshot being written (or left by a crash)")
        elif name.endswith(".tmp") and not is_dir:
            report.warning(path, None, "a checkpoint's temporary file (an interrupted write)")
        elif is_dir:
            report.warning(path, None, "a directory in a partition directory (Kafka ignores it)")
        else:
            report.warning(path, None, "not a file Kafka keeps in a partition (it ignores it)")
    return [name for _, name in sorted(logs)]


def _entry_name(entry: LogEntry) -> str:
    """A batch named as ``dump`` shows it: its first and last offsets."""
    from kafkalog.records import RecordBatch

    if isinstance(entry, RecordBatch):
        return f"batch {entry.base_offset}..{entry.last_offset}"
    if entry.compression.value == 0:
        return f"message at offset {entry.offset}"
    return f"message set ending at offset {entry.last_offset}"


@dataclass
class _Scan:
    """What the index checks need of a segment's walk."""

    size: int = 0
    #: position -> (first offset, last offset) of every batch read
    starts: dict[int, tuple[int, int]] = field(default_factory=dict)
    #: (first offset, last offset, largest timestamp up to it) of every batch read
    batch_max: list[tuple[int, int, int]] = field(default_factory=list)
    #: the largest offset of this segment and those before it
    last: int = -1

    @property
    def first(self) -> int | None:
        """The first offset of this segment's first batch read (None: none read)."""
        return self.batch_max[0][0] if self.batch_max else None

    #: positions of entries the reader refused (reported with the .log, not again)
    refused: set[int] = field(default_factory=set)
    #: the position of the last entry read
    last_position: int = 0


class _Epochs:
    """Partition leader epochs never go down along a log (a leader appends with its own, and
    every new leader's is higher): a v2 batch's epoch is outside its CRC, so a flipped one is
    found only against its neighbours'. Of a pair going down, the batch named is the one the
    batch after the pair sides against (an epoch that jumped up, or one that fell); at the
    log's end, the batch before the pair decides."""

    Seen = tuple[str, int, str, int]  # (path, byte, name, epoch)

    def __init__(self, report: Report) -> None:
        self.report = report
        self.before = -1  # the epoch of the batch before ``held``
        self.held: _Epochs.Seen | None = None
        self.pending: _Epochs.Seen | None = None  # a batch whose epoch is below ``held``'s

    def see(self, path: str, position: int, name: str, epoch: int) -> None:
        if epoch < 0:
            return  # none (v0/v1; a v2 batch no leader stamped)
        seen = (path, position, name, epoch)
        held, pending = self.held, self.pending
        if held is None:
            self.held = seen
            return
        if pending is None:
            if epoch < held[3]:
                self.pending = seen
            else:
                self.before, self.held = held[3], seen
            return
        self.pending = None
        if epoch >= held[3]:  # the line goes on from the held one: the pending one fell
            self._blame(pending, held[3])
            self.before, self.held = held[3], seen
        elif epoch >= pending[3]:  # ... from the pending one: the held one jumped
            self._blame(held, pending[3])
            self.before, self.held = pending[3], seen
        else:
            self._blame(pending, held[3])
            self.see(path, position, name, epoch)

    def finish(self) -> None:
        if self.pending is not None and self.held is not None:
            fell = self.before > self.pending[3]
            self._blame(
                self.pending if fell else self.held, self.held[3] if fell else self.pending[3]
            )
        self.pending = None

    def _blame(self, seen: Seen, other: int) -> None:
        self.report.problem(
            seen[0],
            seen[1],
            f"{seen[2]}: partition leader epoch {seen[3]} is out of line with the batches "
            f"around it (epoch {other}; epochs never go down along a log): its leader epoch, "
            "outside the batch CRC, is wrong",
        )


def _verify_segment(
    base: int,
    log_path: str,
    active: bool,
    previous_last: int,
    report: Report,
    epochs: _Epochs | None = None,
    txns: TxnIndexCheck | None = None,
) -> _Scan:
    """Walk the segment's batches; record where each starts for the index checks. A batch
    the reader refuses (an unknown magic byte) is reported and stepped over by its length
    field, so what follows it is still checked; any other refusal ends the walk there."""
    from kafkalog.log.segment import (
        first_offset_held,
        held_is_damaged,
        offset_order_problem,
        wrapper_inner_offsets,
        wrapper_offset_problem,
    )
    from kafkalog.records import LogReader, RecordBatch
    from kafkalog.records.reader import read_only_buffer

    data = read_only_buffer(log_path)
    scan = _Scan(size=len(data))
    starts, batch_max = scan.starts, scan.batch_max
    running = -1
    position = 0
    # the entry before: (position, the last offset before it, its name)
    held: tuple[LogEntry, int, str] | None = None
    blamed = False  # the entry at hand is the one out of line
    last_entry: LogEntry | None = None
    while True:
        reader = LogReader(data, path=log_path, start=position)
        try:
            for entry in reader:
                report.batches += 1
                first = first_offset_held(entry)
                name = _entry_name(entry)
                if not entry.is_valid():
                    report.problem(
                        log_path,
                        entry.position,
                        f"{name}: CRC mismatch (stored {entry.crc}, computed "
                        f"{entry.compute_crc()})",
                    )
                # offsets only grow (the log's own rule; the segment's base is checked below)
                if offset_order_problem(entry, previous_last, previous_last + 1) is not None:
                    if held is not None and held_is_damaged(held[0], entry, held[1], base):
                        # in line with the batches before the last one, and the last one's
                        # span fits there: its base offset (outside the CRC) is the damaged one
                        report.problem(
                            log_path,
                            held[0].position,
                            f"{held[2]}: its offsets run past the batch after it (offsets "
                            f"from {first}): its base offset, outside the batch CRC, is wrong",
                        )
                        previous_last = held[1]
                    else:
                        report.problem(
                            log_path,
                            entry.position,
                            f"{name}: "
                            + (
                                wrapper_offset_problem(entry, wrapper_inner_offsets(entry))
                                or f"offsets {first}..{entry.last_offset} do not follow "
                                f"{previous_last}: its base offset, outside the batch CRC, "
                                "is wrong"
                            ),
                        )
                        blamed = True
                held = (entry, previous_last, name)
                if epochs is not None and isinstance(entry, RecordBatch):
                    epochs.see(log_path, entry.position, name, entry.partition_leader_epoch)
                if first < base:  # a v0/v1 message's too (a segment renamed below it)
                    report.problem(
                        log_path,
                        entry.position,
                        f"{name}: first offset {first} is below the segment's base offset {base}",
                    )
                try:
                    report.records_checked += len(entry.records())
                except KafkalogError as e:
                    report.problem(log_path, entry.position, f"{name}: {_reason_at(e)}")
                if txns is not None and not blamed and entry.is_valid():
                    txns.see(entry)
                if not blamed:  # the entries after a damaged one follow the ones before it
                    previous_last = max(previous_last, entry.last_offset)
                blamed = False
                scan.last_position = entry.position
                last_entry = entry
                running = max(running, entry.max_timestamp)
                starts[entry.position] = (first, entry.last_offset)
                batch_max.append((first, entry.last_offset, running))
        except KafkalogError as e:
            at = reader.end_position
            if active and _torn_absurd(data, at, previous_last + 1):
                report.warning(
                    log_path,
                    at,
                    f"{len(data) - at} bytes after the last batch whose size field reads "
                    "larger than any batch, nothing valid after them: a torn tail (a crash's "
                    "leftovers); a writable open cuts them, keeping a copy beside the segment",
                )
                break
            scan.refused.add(reader.end_position)
            resume = _refused(data, log_path, reader.end_position, e, report)
            if resume is None:
                break
            report.batches += 1
            position = resume
            continue
        tail = reader.incomplete_tail
        if tail is not None:
            text = (
                f"incomplete batch at the end ({tail.available} of "
                f"{tail.declared_size or '?'} bytes)"
            )
            if active:
                report.warning(log_path, tail.position, f"{text} (active segment)")
            else:
                report.problem(log_path, tail.position, text)
        elif (
            active
            and last_entry is not None
            and last_entry.position + last_entry.size_in_bytes == len(data)
        ):
            _check_last_batch(base, log_path, data, last_entry, report)
        break
    scan.last = previous_last
    return scan


def _check_last_batch(base: int, log_path: str, data: Any, entry: LogEntry, report: Report) -> None:
    """The log's last batch (no batch or segment after it to show its base offset, outside
    the CRC, in line), judged by its segment's own evidence (kafkalog.log.last_batch)."""
    from kafkalog.log.last_batch import judge_files
    from kafkalog.records import LogReader

    wrong = judge_files(
        os.path.dirname(log_path),
        base,
        entry,
        lambda a, b: list(LogReader(data[a:b], base_position=a)),
    )
    if wrong is not None:
        report.problem(log_path, entry.position, wrong)


def _torn_absurd(data: memoryview, position: int, expected: int) -> bool:
    """Whether the entry at ``position`` of the last segment is a torn tail whose size field
    reads absurd (the readers' rule, ``kafkalog.log.segment.torn_absurd_entry``)."""
    from kafkalog.log.segment import torn_absurd_entry
    from kafkalog.records import DEFAULT_LIMITS

    def read(at: int, n: int) -> bytes:
        return bytes(data[at : at + n])

    return torn_absurd_entry(read, len(data), position, expected, True, DEFAULT_LIMITS, True)


def _reason_at(e: KafkalogError) -> str:
    reason = getattr(e, "reason", None) or str(e)
    position = getattr(e, "position", None)
    return reason if position is None else f"{reason} (at byte {position})"


def _refused(
    data: memoryview, log_path: str, at: int, e: KafkalogError, report: Report
) -> int | None:
    """Report the entry at byte ``at`` the reader refused; where to go on, if anywhere."""
    from kafkalog.records.reader import MAGIC_OFFSET

    offset = int.from_bytes(data[at : at + 8], "big", signed=True) if at + 8 <= len(data) else None
    name = "entry" if offset is None else f"entry with offset field {offset}"
    if getattr(e, "position", None) == at + MAGIC_OFFSET:
        # the length field passed the reader's checks before it read the magic byte
        size = 12 + int.from_bytes(data[at + 8 : at + 12], "big", signed=True)
        report.problem(
            log_path, at, f"{name}: {_reason_at(e)}; its {size} bytes are skipped, not read"
        )
        return at + size
    report.problem(
        log_path, at, f"{name}: {_reason_at(e)} (the rest of the segment cannot be read)"
    )
    return None


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


def _grown(index_path: str, scan: _Scan) -> int:
    """Bytes appended to the index's ``.log`` since the scan read it (0: none, or unknown).
    Why: on a live directory (a broker, ``kafkalog serve``) the indexes are read after the
    ``.log``, and the writer's appends in between leave entries for batches the scan never
    saw: those are not damage, and ``rebuild-index`` is no answer to them."""
    log_path = index_path.rpartition(".")[0] + ".log"
    try:
        return max(0, files.getsize(log_path) - scan.size)
    except OSError:
        return 0


def _unchecked_warning(path: str, skipped: int, scan: _Scan, grown: int, report: Report) -> None:
    if skipped:
        report.warning(
            path,
            None,
            f"{skipped} entries past byte {scan.size} of the .log not checked: it grew by "
            f"{grown} bytes while verify read it (a live writer); verify again once it stops "
            "to check them",
        )


def _verify_offset_index(
    path: str, base: int, scan: _Scan | None, report: Report, active: bool
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
        if scan is None:
            return  # the .log could not be read (reported): nothing to hold the entries to
        starts = scan.starts
        ordered = sorted(starts)
        entries = [index.entry(n) for n in range(index.entries)]
        grown, skipped = -1, 0
        for n in range(index.entries):
            offset, position = index.entry(n)
            if position >= scan.size:
                if grown < 0:
                    grown = _grown(path, scan)
                if grown:  # an append after the scan: not checked, said once below
                    skipped += 1
                    continue
                report.problem(
                    path,
                    n * 8,
                    f"entry {n} ({offset}, {position}) points past the end of the .log "
                    f"({scan.size} bytes: cut after the index was written?)",
                )
                continue
            found = starts.get(position)
            if found is None and position in scan.refused:
                continue  # the entry there is refused: one problem, with the .log
            if found is None:
                report.problem(
                    path, n * 8, f"entry {n} ({offset}, {position}) does not point at a batch start"
                )
                continue
            first, _ = found
            # an entry names the append (one or more batches) starting here by an offset it
            # holds: its last since Kafka 0.10.1, its first before (a 0.9 broker's); the
            # append's batches are those before the next entry's position
            following = entries[n + 1][1] if n + 1 < len(entries) else scan.size
            lo = bisect.bisect_left(ordered, position)
            hi = max(lo + 1, bisect.bisect_left(ordered, following))
            last_of_append = max(starts[p][1] for p in ordered[lo:hi])
            if not first <= offset <= last_of_append:
                report.problem(
                    path,
                    n * 8,
                    f"entry {n} maps offset {offset} to position {position}, where "
                    f"the batch holds offsets {found[0]}..{found[1]}",
                )
        _unchecked_warning(path, skipped, scan, grown, report)


def _verify_time_index(
    path: str, base: int, scan: _Scan | None, report: Report, active: bool
) -> None:
    import bisect

    from kafkalog.index import TimeIndex

    if not files.exists(path):
        return  # logs older than Kafka 0.10.1 have none
    with TimeIndex(path, base, writable=False) as index:
        _zero_tail(path, index.entries, 12, active, report)
        try:
            index.sanity_check()
        except KafkalogError as e:
            report.error(e)
        if scan is None:
            return
        batch_max = scan.batch_max
        lasts = [last for _, last, _ in batch_max]
        ordered = all(a < b for a, b in itertools.pairwise(lasts))
        previous = None
        read_last = max(lasts, default=-1)  # the last offset the scan read in this segment
        grown, skipped = -1, 0
        for n in range(index.entries):
            ts, offset = index.entry(n)
            if offset > read_last:
                if grown < 0:
                    grown = _grown(path, scan)
                if grown:  # an append after the scan: not checked, said once below
                    skipped += 1
                    previous = (ts, offset)
                    continue
            if previous is not None and (ts <= previous[0] or offset < previous[1]):
                report.problem(path, n * 12, f"entry {n} ({ts}, {offset}) is out of order")
            if ordered:  # the usual case: the holding batch by bisection
                i = bisect.bisect_left(lasts, offset)
                hit = batch_max[i] if i < len(batch_max) else None
                holder = hit[2] if hit is not None and hit[0] <= offset else None
            else:
                holder = next((m for f, last, m in batch_max if f <= offset <= last), None)
            if holder is None:
                refused = "".join(
                    f" (or in the entry refused at byte {p})" for p in sorted(scan.refused)
                )
                report.problem(
                    path, n * 12, f"entry {n}: offset {offset} is not in the log{refused}"
                )
            elif holder != ts:
                report.problem(
                    path,
                    n * 12,
                    f"entry {n}: timestamp {ts} but the largest timestamp up to "
                    f"offset {offset} is {holder}",
                )
            previous = (ts, offset)
        _unchecked_warning(path, skipped, scan, grown, report)


def _txn_check(directory: str, logs: list[str]) -> TxnIndexCheck | None:
    """The check of the ``.txnindex`` files against the batches (kafkalog.log.txn_check)."""
    from kafkalog.log.layout import offset_from_filename
    from kafkalog.log.txn_check import TxnIndexCheck

    if not logs:
        return None
    try:
        return TxnIndexCheck(directory, offset_from_filename(logs[0]))
    except OSError:
        return None  # the directory's listing failed: reported with the partition


def _verify_txn_index(
    path: str,
    base: int,
    scan: _Scan | None,
    report: Report,
    active: bool,
    txns: TxnIndexCheck | None = None,
) -> None:
    from kafkalog.index import TransactionIndex

    exists = files.exists(path)
    index = TransactionIndex(path, base, writable=False) if exists else None
    try:
        entries = index.positioned_entries() if index is not None else []
        if index is not None:
            index.sanity_check()
            if index.trailing_bytes:
                report.problem(
                    path,
                    len(index) * 34,
                    f"{index.trailing_bytes} trailing bytes are not a whole entry",
                )
        if txns is not None and scan is not None and not scan.refused:
            for position, text in txns.problems(entries):
                report.problem(path, position, text)
    except KafkalogError as e:
        report.error(e)
    finally:
        if index is not None:
            index.close()


def _verify_checkpoints(directory: str, report: Report) -> None:
    from kafkalog.log.checkpoints import LeaderEpochCheckpoint, PartitionMetadata

    _read_each(
        directory,
        [
            ("leader-epoch-checkpoint", LeaderEpochCheckpoint.read),
            ("partition.metadata", PartitionMetadata.read),
        ],
        report,
    )


def _read_each(
    directory: str, checks: list[tuple[str, Callable[[str], object]]], report: Report
) -> None:
    """Each of the files ``checks`` names that ``directory`` holds, read by its parser: what
    the parser refuses, or the file system, is reported."""
    for name, read in checks:
        path = os.path.join(directory, name)
        if files.exists(path):
            try:
                read(path)
            except KafkalogError as e:
                report.error(e)
            except OSError as e:
                _unreadable(report, path, e)


#: the offset checkpoints of a data directory (spec §1.1), one format
_ROOT_CHECKPOINTS = (
    "recovery-point-offset-checkpoint",
    "log-start-offset-checkpoint",
    "replication-offset-checkpoint",
    "cleaner-offset-checkpoint",
)


def _verify_data_directory(root: str, partitions: list[str], report: Report) -> None:
    """The files a broker keeps at a data directory's root, each read by its one parser
    (``meta.properties`` with Kafka's typed checks, the four offset checkpoints), and the
    topic ids of a topic's partitions, which Kafka requires to agree."""
    from kafkalog.log import dir_identity
    from kafkalog.log.checkpoints import (
        META_PROPERTIES,
        OffsetCheckpoint,
        PartitionMetadata,
    )
    from kafkalog.log.layout import parse_partition_dir

    # meta.properties as serve reads it: Kafka's typed checks, and no line Kafka never writes
    checks: list[tuple[str, Callable[[str], object]]] = [(META_PROPERTIES, dir_identity.load)]
    checks += [(name, OffsetCheckpoint.read) for name in _ROOT_CHECKPOINTS]
    _read_each(root, checks, report)
    first_id: dict[str, tuple[str, str]] = {}
    for directory in sorted(partitions):
        path = os.path.join(directory, "partition.metadata")
        try:
            topic, _ = parse_partition_dir(directory)
            topic_id = PartitionMetadata.read(path).topic_id
        except (ValueError, OSError, KafkalogError):
            continue  # no file, or reported with the partition
        seen = first_id.setdefault(topic, (topic_id, path))
        if seen[0] != topic_id:
            report.problem(
                path,
                None,
                f"topic id {topic_id} differs from {seen[0]} in {seen[1]}: a topic has one id, "
                "and Kafka refuses to load a partition whose partition.metadata names another",
            )


def run(args: argparse.Namespace, out: IO[str] | None = None) -> int:
    out = out or sys.stdout
    report = Report()
    partitions = []
    for path in args.paths:
        found = partitions_under(path)  # a path that does not exist: a usage error (exit 2)
        root = files.resolve(path).rstrip("/")
        if any(os.path.dirname(p.rstrip("/")) == root for p in found):
            _verify_data_directory(root, found, report)
        partitions += found
    with progress.bar("verifying", sum(_log_bytes(p) for p in partitions)) as shown:
        for directory in partitions:
            verify_partition(directory, report, shown.update)
    if args.json:
        # problems first, then warnings, as the text lists them
        for entry in sorted(report.entries, key=lambda e: e["type"] != "problem"):
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


def _log_bytes(directory: str) -> int:
    """The progress bar's share of a partition; one that cannot be listed counts nothing
    (its problem is reported when its turn comes)."""
    try:
        return progress.log_bytes(directory)
    except OSError:
        return 0
