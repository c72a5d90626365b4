"""Cleaning a log, or the filthiest log of a data directory, and the ``cleaner-offset-checkpoint``
that remembers how far each log was cleaned (Kafka's ``LogCleaner`` and ``LogCleanerManager``).

The checkpoint is the data directory's (the parent of the partition directories), in Kafka's
offset-checkpoint format, so a broker started on the directory carries on where kafkalog
stopped, and the other way round.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kafkalog.errors import KafkalogError
from kafkalog.log.cleaner import cleaning
from kafkalog.log.cleaner.batch_filter import FilterStats
from kafkalog.log.cleaner.chunk_walk import ReadBuffers
from kafkalog.log.cleaner.cleaning import (
    CleanableLog,
    CleaningAborted,
    OnStep,
    Progress,
    Round,
    SegmentsSplit,
)
from kafkalog.log.cleaner.dirty import DirtySection, dirty_section
from kafkalog.log.cleaner.manager import (
    DEFAULT_MANAGER,
    CleanerManager,
    CleaningInProgress,
    in_progress,
)
from kafkalog.log.cleaner.manager import (
    cleaning as cleaning_partition,
)
from kafkalog.log.cleaner.offset_map import OffsetMap
from kafkalog.log.cleaner_checkpoint import (
    _write_checkpoint,
    checkpoint_path,
    read_checkpoint,
)

_log = logging.getLogger("kafkalog.log.cleaner")

DEFAULT_DEDUPE_BUFFER = 128 * 1024 * 1024  # log.cleaner.dedupe.buffer.size
DEFAULT_LOAD_FACTOR = 0.9  # log.cleaner.io.buffer.load.factor


@dataclass(frozen=True)
class CleanerOptions:
    """The broker-wide cleaner settings (``log.cleaner.*``)."""

    dedupe_buffer_size: int = DEFAULT_DEDUPE_BUFFER
    load_factor: float = DEFAULT_LOAD_FACTOR


@dataclass
class CleanResult:
    """What cleaning one log did (or, with ``dry_run``, would do in its first round)."""

    topic: str
    partition: int
    first_dirty: int
    end_offset: int  # the cleaner checkpoint now (where the next cleaning starts)
    rounds: int
    dirty_ratio: float
    size_before: int
    size_after: int
    segments_before: int
    segments_after: int
    stats: FilterStats = field(default_factory=FilterStats)
    dry_run: bool = False
    more_rounds: bool = False  # the offset map filled up: the dirty section is not done
    deleted_segments: int = 0  # by retention, for cleanup.policy=compact,delete

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "stats"}
        out["stats"] = {k: v for k, v in self.stats.__dict__.items() if k != "removed_offsets"}
        return out


def _local(log: Any) -> Any:
    return log.local


def dirty_section_of(log: CleanableLog, now: int | None = None) -> DirtySection:
    """The log's dirty section as the cleaner sees it now."""
    now = int(log.clock() * 1000) if now is None else now
    checkpoint = read_checkpoint(os.path.dirname(checkpoint_path(log.directory))).get(
        (log.topic, log.partition)
    )
    return dirty_section(_local(log), log.config, checkpoint, log.last_stable_offset(), now)


def uncleanable_bytes(manager: CleanerManager, logs: Iterable[Any], data_dir: str) -> int:
    """Kafka's ``uncleanable-bytes`` gauge: the bytes of the dirty sections the cleaner cannot
    clean, over the partitions among ``logs`` that ``manager`` marked uncleanable in
    ``data_dir`` (a partition whose dirty section cannot even be found counts its segments
    below the active one)."""
    total = 0
    for log in manager.uncleanable_logs(logs, data_dir):
        try:
            total += dirty_section_of(log).cleanable_bytes
        except (KafkalogError, OSError):
            segments = list(log.local.segments)
            total += sum(seg.size for seg in segments[:-1])
    return total


def clean_log(
    log: Any,
    *,
    now: int | None = None,
    options: CleanerOptions | None = None,
    lock: Any = None,
    progress: Progress | None = None,
    dry_run: bool = False,
    max_rounds: int | None = None,
    record_removed: bool = False,
    on_step: OnStep | None = None,
) -> CleanResult:
    """Clean ``log`` (a writable :class:`~kafkalog.log.log.Log` whose topic config has
    ``cleanup.policy`` ``compact``): rounds until the dirty section is done (more than one
    when its keys do not fit the dedupe buffer), the cleaner checkpoint moved after each,
    then retention for ``compact,delete``. The dirty ratio is not waited for (that is for
    choosing which log to clean, :func:`clean_filthiest`).

    ``lock`` is held while the cleaning reads the log's state and for each swap; give the
    lock your threads take around the log's writes (a :class:`SharedLog`'s ``lock``) to
    clean while they append. ``dry_run`` writes nothing and reports the first round.
    ``now`` (ms) stands for the clock (delete horizons, compaction lags).

    Any error (damage, named by file and byte) leaves the log as it was; a log being cleaned
    already by another thread raises :class:`CleaningInProgress`. Segments below the log
    start go after the cleaning whatever the policy (``compact,delete`` also runs its
    retention), as Kafka's cleaner thread deletes them."""
    if not log.config.compact:
        raise KafkalogError(
            f"{log.directory}: cleanup.policy={','.join(log.config.cleanup_policy)} has no "
            "'compact': nothing to clean (give the topic's config)"
        )
    if not log.writable and not dry_run:
        raise KafkalogError(f"cannot clean {log.directory}: the log was opened read-only")
    with contextlib.nullcontext() if dry_run else cleaning_partition(log.directory):
        return _clean_log(
            log,
            now=now,
            options=options,
            lock=lock,
            progress=progress,
            dry_run=dry_run,
            max_rounds=max_rounds,
            record_removed=record_removed,
            on_step=on_step,
        )


def _clean_log(
    log: Any,
    *,
    now: int | None,
    options: CleanerOptions | None,
    lock: Any,
    progress: Progress | None,
    dry_run: bool,
    max_rounds: int | None,
    record_removed: bool,
    on_step: OnStep | None,
) -> CleanResult:
    options = options or CleanerOptions()
    now = int(log.clock() * 1000) if now is None else now
    guard = lock if lock is not None else contextlib.nullcontext()
    with guard:
        section = dirty_section_of(log, now)
        size_before = sum(s.size for s in _local(log).segments)
        segments_before = len(_local(log).segments)
    result = CleanResult(
        log.topic,
        log.partition,
        section.first_dirty,
        section.first_dirty,
        0,
        section.dirty_ratio,
        size_before,
        size_before,
        segments_before,
        segments_before,
        dry_run=dry_run,
    )
    offset_map = OffsetMap(options.dedupe_buffer_size, options.load_factor)
    key = (log.topic, log.partition)
    buffers = ReadBuffers()  # one set for every round: memory bounded whatever the log's size
    splits = 0
    while section.first_dirty < section.first_uncleanable:
        this_round = Round(
            log,
            offset_map,
            now=now,
            lock=lock,
            progress=progress,
            dry_run=dry_run,
            record_removed=record_removed,
            on_step=on_step,
            buffers=buffers,
        )
        try:
            one = this_round.run(section.first_dirty, section.first_uncleanable)
        except SegmentsSplit as split:
            # Kafka aborts the cleaning after a split and cleans the pieces next time: here
            # the next round starts now (a split happens once per segment: bounded)
            splits += 1
            if splits > len(_local(log).segments):
                raise
            _log.info("%s", split)
            continue
        result.rounds += 1
        result.stats.add(one.stats)
        result.end_offset = one.end_offset
        if dry_run:
            result.more_rounds = one.end_offset < section.first_uncleanable
            result.size_after = size_before - one.stats.bytes_read + one.stats.bytes_kept
            return result
        _write_checkpoint(log.directory, key, one.end_offset)
        cleaning.step("checkpointed")
        if on_step is not None:
            on_step("checkpointed")
        if one.end_offset <= section.first_dirty:
            break  # nothing moved (cannot happen with a map that holds a key): never spin
        if max_rounds is not None and result.rounds >= max_rounds:
            result.more_rounds = one.end_offset < section.first_uncleanable
            break
        with guard:
            # the dirty section as of the call, no further: with appends going on meanwhile
            # the log never stops having more to clean, and the call would never return
            bound = section.first_uncleanable
            section = dirty_section_of(log, now)
            if section.first_uncleanable > bound:
                section = dataclasses.replace(section, first_uncleanable=bound)
    if not dry_run:
        # Kafka's cleaner runs deleteOldSegments on every compacted log after cleaning: for
        # compact,delete its retention, for compact alone the segments below the log start
        with guard:
            result.deleted_segments = log.delete_old_segments(now)
    with guard:
        result.size_after = sum(s.size for s in _local(log).segments)
        result.segments_after = len(_local(log).segments)
    return result


def clean_filthiest(
    logs: Iterable[Any],
    *,
    now: int | None = None,
    options: CleanerOptions | None = None,
    lock_of: Callable[[Any], Any] | None = None,
    progress: Progress | None = None,
    manager: CleanerManager | None = None,
) -> CleanResult | None:
    """One pass of Kafka's cleaner thread over ``logs`` (the writable logs of one data
    directory): the compacted log with the highest dirty ratio among those past their
    ``min.cleanable.dirty.ratio`` (or overdue by ``max.compaction.lag.ms``) gets one cleaning
    round; then every other compacted log runs retention (``compact,delete``) or loses its
    segments below the log start (``compact``). None when no log was cleaned.
    ``lock_of(log)`` gives the lock its writers hold (see :func:`clean_log`).

    As Kafka's ``LogCleanerManager``: a log whose checkpoint is out of range has it rewritten
    (picked or not); a log being cleaned already is passed by; a log whose dirty section or
    cleaning fails (damage) is marked uncleanable in ``manager`` (default: the process's
    :data:`~kafkalog.log.cleaner.manager.DEFAULT_MANAGER`) with an ERROR log line naming it
    and the error, and no later pass of that manager touches it, so one damaged partition
    never keeps the others from being cleaned."""
    manager = manager if manager is not None else DEFAULT_MANAGER
    logs = list(logs)
    manager.maintain(logs)

    def locked(log: Any) -> Any:
        lock = lock_of(log) if lock_of is not None else None
        return lock if lock is not None else contextlib.nullcontext()

    best: tuple[float, Any] | None = None
    compacted = []
    for log in logs:
        if not log.config.compact or manager.is_uncleanable(log) or in_progress(log.directory):
            continue
        compacted.append(log)
        try:
            with locked(log):
                section = dirty_section_of(log, now)
            if section.checkpoint_reset:
                # Kafka's forceUpdateCheckpoint: written now, whether the log is picked or not
                _write_checkpoint(log.directory, (log.topic, log.partition), section.first_dirty)
        except (KafkalogError, OSError) as e:
            report_uncleanable(manager, log, e)
            continue
        if section.is_cleanable(log.config.min_cleanable_dirty_ratio) and (
            best is None or section.dirty_ratio > best[0]
        ):
            best = (section.dirty_ratio, log)
    result = None
    cleaned = best[1] if best is not None else None
    if cleaned is not None:
        try:
            result = clean_log(
                cleaned,
                now=now,
                options=options,
                lock=lock_of(cleaned) if lock_of is not None else None,
                progress=progress,
                max_rounds=1,
            )
        except CleaningAborted:
            raise  # the log changed under the round (retention, truncation): not damage
        except CleaningInProgress:
            pass  # another thread began cleaning it since: its turn
        except (KafkalogError, OSError) as e:
            report_uncleanable(manager, cleaned, e)
    for log in compacted:
        if log is cleaned or manager.is_uncleanable(log) or in_progress(log.directory):
            continue
        try:
            with locked(log):
                log.delete_old_segments(now)
        except (KafkalogError, OSError) as e:
            report_uncleanable(manager, log, e)
    return result


def report_uncleanable(manager: CleanerManager, log: Any, error: BaseException) -> None:
    """Mark ``log`` uncleanable in ``manager`` and say so at ERROR, with the error (file and
    byte): Kafka's "Marking its partition as uncleanable" line."""
    manager.mark_uncleanable(log, str(error))
    _log.error(
        "error while cleaning %s-%d (%s); marking the partition uncleanable (the cleaner "
        "passes it by until it is repaired and the cleaner restarted): %s",
        log.topic,
        log.partition,
        log.directory,
        error,
    )
