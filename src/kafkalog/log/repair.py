"""Repairing a damaged partition log without losing anything (``kafkalog repair``).

kafkalog never cuts or skips damage on its own (:mod:`kafkalog.log.damage`); this is the
explicit step an operator takes. For each segment whose bytes stop being whole, valid batches:

1. the segment's files are copied, as they are, into a quarantine folder (beside the partition
   by default), with ``REPAIR.json`` saying what was found and done: nothing is ever deleted;
2. the valid batches *after* the damage are salvaged (found by a resync scan, each with its
   CRC checked) when their offsets continue the log: offsets only grow, and a segment holds
   only offsets below the next segment's base;
3. the segment is rewritten as its valid prefix followed by the salvaged batches (written as a
   ``.cleaned`` file and renamed over the ``.log``, so a crash at any moment leaves either the
   old file or the new one; the loader removes a ``.cleaned`` file left behind), its derived
   indexes are removed, and the log is opened for recovery, which rebuilds them and checks the
   result.

A crash during a repair leaves the log as it was, or repaired; running the repair again
resumes it. ``dry_run`` reports the same plan and changes nothing.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from dataclasses import asdict, dataclass, field

from kafkalog.errors import KafkalogError, unreadable_file
from kafkalog.log.config import TopicConfig
from kafkalog.log.damage import Problem, first_problem
from kafkalog.log.layout import (
    CLEANED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    parse_partition_dir,
    segment_file,
    segment_logs,
)
from kafkalog.log.segment import LogSegment, offset_order_problem
from kafkalog.records import LogReader
from kafkalog.records.resync import next_valid_entry
from kafkalog.records.types import DEFAULT_LIMITS, Limits

logger = logging.getLogger("kafkalog.log")


@dataclass(frozen=True)
class Salvaged:
    """A run of whole, valid batches found after the damage and kept."""

    position: int
    size: int
    first_offset: int
    last_offset: int
    records: int


@dataclass
class SegmentRepair:
    """What the repair of one segment finds and does."""

    segment: str
    base_offset: int
    size: int
    damage_position: int
    damage: str
    kept_bytes: int  # the valid prefix
    kept_last_offset: int | None
    salvaged: list[Salvaged] = field(default_factory=list)
    quarantined_bytes: int = 0  # bytes after the prefix that are not salvaged

    @property
    def salvaged_records(self) -> int:
        return sum(s.records for s in self.salvaged)


@dataclass(frozen=True)
class LostRecords:
    """Offsets whose segment is gone (see :class:`~kafkalog.log.damage.LostSegment`)."""

    first_offset: int
    last_offset: int | None  # None: up to the log's end
    what: str
    leftovers: list[str]  # the index files left of the segment


@dataclass
class RepairReport:
    """A partition's repair: the damaged segments, and where their original files went."""

    directory: str
    dry_run: bool
    segments: list[SegmentRepair] = field(default_factory=list)
    quarantine: str | None = None
    log_end_offset: int | None = None  # after the repair (None on a dry run)
    #: segments lost (their .log is missing, an index left): what is gone, and the index
    #: files moved to the quarantine (the readers then read past the loss)
    lost: list[LostRecords] = field(default_factory=list)
    #: ``.swap`` files that are not whole, valid batches (a writable open refuses to complete
    #: them): each path with its damage, moved whole to the quarantine
    swaps: list[dict[str, str]] = field(default_factory=list)

    @property
    def damaged(self) -> bool:
        return bool(self.segments) or bool(self.lost) or bool(self.swaps)

    def to_json(self) -> dict[str, object]:
        out = asdict(self)
        for seg, repaired in zip(out["segments"], self.segments, strict=True):
            seg["salvaged_records"] = repaired.salvaged_records
        return out


def plan_repair(directory: str, *, limits: Limits = DEFAULT_LIMITS) -> RepairReport:
    """What :func:`repair` would do to the partition in ``directory``, reading only."""
    report = RepairReport(os.path.abspath(directory), dry_run=True)
    report.lost = _lost(directory, limits)
    report.swaps = _damaged_swaps(directory, limits)
    bases = [base for base, _ in segment_logs(directory)]
    for k, base in enumerate(bases):
        upper = bases[k + 1] if k + 1 < len(bases) else None
        try:
            seg = LogSegment(directory, base, TopicConfig(), writable=False, limits=limits)
        except (IsADirectoryError, PermissionError) as e:
            path = os.path.join(directory, os.path.basename(e.filename or str(base)))
            raise unreadable_file(
                path,
                e.strerror,
                first="repair quarantines bytes it can read; ",
                then=" (its offsets are then a lost segment, which repair reports)",
            ) from e
        seg.is_last = upper is None
        seg.next_base = upper
        try:
            problem = first_problem(seg)
            if problem is not None:
                report.segments.append(_plan_segment(seg, problem, upper, limits))
        finally:
            seg.close_handlers()
    return report


def _damaged_swaps(directory: str, limits: Limits) -> list[dict[str, str]]:
    """The ``.log.swap`` files a writable open would refuse (see
    :func:`~kafkalog.log.loader.swap_damage`): the segments they would replace are readable and
    stay; the swap itself is moved aside."""
    from kafkalog.log.layout import SWAP_SUFFIX
    from kafkalog.log.loader import swap_file_damage

    out = []
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".log" + SWAP_SUFFIX):
            continue
        damage = swap_file_damage(directory, name, limits)
        if damage is not None:
            out.append({"path": os.path.join(directory, name), "damage": str(damage)})
    return out


def _lost(directory: str, limits: Limits) -> list[LostRecords]:
    """The lost segments a read-only open finds, each with the index files left of it."""
    from kafkalog.log.log import Log

    try:
        with Log(directory, writable=False, limits=limits) as log:
            lost = list(log.lost_segments)
    except KafkalogError:
        return []  # damage that stops the open: the segment plan reports it
    out = []
    for gone in lost:
        if gone.unreadable:
            continue  # a .log that cannot be opened: the segment plan refuses it
        stem = os.path.basename(gone.evidence).partition(".")[0]
        leftovers = sorted(
            os.path.join(directory, n)
            for n in os.listdir(directory)
            if n.partition(".")[0] == stem
            and n.partition(".")[2] in ("index", "timeindex", "txnindex")
        )
        out.append(LostRecords(gone.first, gone.last, gone.describe(), leftovers))
    return out


def _plan_segment(
    seg: LogSegment, problem: Problem, upper: int | None, limits: Limits
) -> SegmentRepair:
    size = seg.size
    kept_last = None if problem.expected_offset is None else problem.expected_offset - 1
    if kept_last is not None and kept_last < seg.base_offset:
        kept_last = None
    repair = SegmentRepair(
        seg.log.path,
        seg.base_offset,
        size,
        problem.position,
        problem.describe(),
        problem.position,
        kept_last,
    )
    previous = seg.base_offset - 1 if kept_last is None else kept_last
    position = problem.position
    while position < size:
        found = next_valid_entry(seg.log.read, size, position + 1, limits)
        if found is None:
            break
        position = found
        run_start, run_first, run_last, run_records = found, None, previous, 0
        try:
            for entry in LogReader(
                seg.log.read(found, size - found),
                limits=limits,
                verify_crc=True,
                base_position=found,
            ):
                if offset_order_problem(entry, run_last, seg.base_offset) is not None or (
                    upper is not None and entry.last_offset >= upper
                ):
                    break
                if run_first is None:
                    run_first = entry.base_offset
                run_last = entry.last_offset
                run_records += len(entry.records(limits))
                position = entry.position + entry.size_in_bytes
        except KafkalogError:
            pass  # the run ends at the next bytes that are not a whole, valid batch
        if run_first is None:
            continue  # a valid batch whose offsets do not continue the log: quarantined only
        repair.salvaged.append(
            Salvaged(run_start, position - run_start, run_first, run_last, run_records)
        )
        previous = run_last
    repair.quarantined_bytes = size - repair.kept_bytes - sum(s.size for s in repair.salvaged)
    return repair


def repair(
    directory: str,
    *,
    dry_run: bool = False,
    quarantine: str | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> RepairReport:
    """Repair the partition in ``directory`` (see the module doc); with ``dry_run``, only
    report what would be done. ``quarantine`` is the folder the damaged segments' original
    files go to (default: ``<partition>.quarantine-<UTC time>`` beside the partition)."""
    from kafkalog.log.lock import DirectoryLock, LockedError, broker_holds
    from kafkalog.log.log import Log

    directory = os.path.abspath(directory)
    parse_partition_dir(directory)  # a partition directory, or a ValueError naming it
    parent = os.path.dirname(directory)
    if broker_holds(parent):
        raise LockedError(directory, f"a Kafka broker holds {parent}/.lock", broker=True)
    if dry_run:  # reads only: no lock taken, nothing written
        return plan_repair(directory, limits=limits)
    lock = DirectoryLock(directory)
    lock.acquire()
    try:
        report = plan_repair(directory, limits=limits)
        report.dry_run = False
        if not report.damaged:
            return report
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        target = quarantine or f"{directory}.quarantine-{stamp}"
        os.makedirs(target, exist_ok=True)
        report.quarantine = target
        for seg in report.segments:
            _quarantine_and_rewrite(directory, seg, target, report)
        for swap in report.swaps:
            _write_manifest(target, report)
            shutil.move(swap["path"], os.path.join(target, os.path.basename(swap["path"])))
            logger.warning(
                "repair: %s moved to %s (not whole batches; the segments it would have "
                "replaced stay as they are)",
                swap["path"],
                target,
            )
        for gone in report.lost:
            _write_manifest(target, report)
            for path in gone.leftovers:
                shutil.move(path, os.path.join(target, os.path.basename(path)))
            logger.warning(
                "repair: %s: %s moved to %s (the log reads past the loss from now on)",
                directory,
                gone.what,
                target,
            )
        _fsync(directory)
    finally:
        lock.release()
    # recovery rebuilds the removed indexes of the rewritten segments and checks the result
    with Log(directory, had_clean_shutdown=False, limits=limits) as log:
        report.log_end_offset = log.log_end_offset
    return report


def _quarantine_and_rewrite(
    directory: str, seg: SegmentRepair, target: str, report: RepairReport
) -> None:
    files_of = [
        segment_file(directory, seg.base_offset, suffix)
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
    ]
    for path in files_of:
        if os.path.exists(path):
            copy = os.path.join(target, os.path.basename(path))
            shutil.copy2(path, copy)
            _fsync(copy)
    _write_manifest(target, report)
    _fsync(target)
    log_path = files_of[0]
    cleaned = log_path + CLEANED_SUFFIX
    with open(log_path, "rb") as src, open(cleaned, "wb") as out:
        out.write(src.read(seg.kept_bytes))
        for s in seg.salvaged:
            src.seek(s.position)
            out.write(src.read(s.size))
        out.flush()
        os.fsync(out.fileno())
    logger.warning(
        "repair: %s: %d bytes from byte %d (%s) copied to %s; kept %d bytes and %d salvaged "
        "records, %d bytes left in quarantine only",
        log_path,
        seg.size - seg.kept_bytes,
        seg.damage_position,
        seg.damage,
        target,
        seg.kept_bytes,
        seg.salvaged_records,
        seg.quarantined_bytes,
    )
    for path in files_of[1:]:  # derived from the .log (copies are in the quarantine)
        if os.path.exists(path):
            os.remove(path)
    os.replace(cleaned, log_path)
    _fsync(directory)


def _write_manifest(target: str, report: RepairReport) -> None:
    path = os.path.join(target, "REPAIR.json")
    with open(path, "w") as f:
        json.dump(report.to_json(), f, indent=2)
        f.flush()
        os.fsync(f.fileno())


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
