"""A broker-style data directory (one entry of ``log.dirs``): many partition logs plus the
root files Kafka keeps there (spec §1.1, §7.8-§7.9).

Read-only mode is how tools and the Spark reader open a running broker's directory: nothing is
written, renamed, resized, trimmed or locked, and partitions are opened only when asked for.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

from kafkalog import files
from kafkalog.errors import InvalidTopicError, ReadOnlyError
from kafkalog.log.checkpoints import CLEANER_OFFSET_CHECKPOINT
from kafkalog.log.layout import (
    new_partition_dir_name,
    partition_dir_name,
    partitions_in,
)
from kafkalog.log.layout import partition_directories as partition_directories  # moved there
from kafkalog.log.log import Log
from kafkalog.records.types import DEFAULT_LIMITS, Limits

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"


class LogDir:
    """The partitions under one data directory, opened lazily."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        writable: bool = False,
        limits: Limits = DEFAULT_LIMITS,
        wait: float = 0.0,
        high_watermarks: bool = False,
    ) -> None:
        """``writable`` takes the data directory as a broker does, for this process alone:
        refused while a broker holds its ``.lock``, and exclusive against other kafkalog
        writers (its ``.kafkalog.lock``), waiting up to ``wait`` seconds for one to finish.

        ``high_watermarks`` makes :meth:`checkpoint` also keep the
        ``replication-offset-checkpoint`` a broker keeps: each open log's high watermark,
        which for a single replica (``kafkalog serve``) is its log end offset, every append
        being acknowledged only once it is in the log."""
        from kafkalog.log import checkpoints

        self.path = os.fspath(path)
        self.writable = writable
        self.limits = limits
        self.keeps_high_watermarks = high_watermarks
        self._logs: dict[tuple[str, int], Log] = {}
        self._lock: Any = None
        self._cleaner_manager: Any = None
        if writable and files.is_remote(self.path):
            raise files.RemoteLocationError(
                f"cannot open {self.path} for writing: a remote store is read-only to kafkalog"
            )
        if writable:
            self._lock = _lock_data_directory(self.path, wait)
        elif not files.isdir(self.path):
            raise FileNotFoundError(f"no data directory {self.path}")
        try:
            self.had_clean_shutdown = checkpoints.CleanShutdownMarker.exists(self.path)
            if writable and self.had_clean_shutdown:
                # a crash while we hold the directory must count as unclean (KAFKA-10471)
                checkpoints.CleanShutdownMarker.remove(self.path)
            self.recovery_points = self._read_checkpoint(RECOVERY_POINT_CHECKPOINT)
            self.log_start_offsets = self._read_checkpoint(LOG_START_OFFSET_CHECKPOINT)
            #: ``replication-offset-checkpoint``: what a broker last recorded, then (with
            #: ``high_watermarks``) each open log's high watermark
            self.high_watermarks = self._read_checkpoint(REPLICATION_OFFSET_CHECKPOINT)
        except BaseException:
            if self._lock is not None:
                self._lock.release()
            raise

    def _read_checkpoint(self, name: str) -> dict[tuple[str, int], int]:
        from kafkalog.log.checkpoints import OffsetCheckpoint

        path = os.path.join(self.path, name)
        try:
            return dict(OffsetCheckpoint.read(path))
        except FileNotFoundError:
            return {}
        except Exception as e:  # unreadable: treated as empty, as Kafka's LogManager does
            from kafkalog.log.checkpoints import warn_unreadable_checkpoint

            warn_unreadable_checkpoint(path, e, once=False)  # (and says so, as Kafka's)
            return {}

    def partitions(self) -> list[tuple[str, int]]:
        """Every ``topic-partition`` directory (``-delete``/``-future``/``-stray`` excluded)."""
        return partitions_in(self.path)

    def topics(self) -> list[str]:
        return sorted({t for t, _ in self.partitions()})

    def log(self, topic: str, partition: int, *, create: bool = False, config: Any = None) -> Log:
        """The partition's log, opened (and, writable, locked and recovered) on first use."""
        key = (topic, partition)
        found = self._logs.get(key)
        if found is not None:
            return found
        if create:
            name = new_partition_dir_name(topic, partition)  # refused before anything exists
        elif "/" in topic or os.sep in topic or topic in (".", ".."):
            raise InvalidTopicError(f"topic name {topic!r} is not a directory of {self.path}")
        else:
            name = partition_dir_name(topic, partition)
        directory = os.path.join(self.path, name)
        if not files.isdir(directory):
            if not create:
                raise FileNotFoundError(f"no partition {topic}-{partition} in {self.path}")
            if not self.writable:
                raise ReadOnlyError(f"cannot create {directory}: {self.path} is open read-only")
        log = Log(
            directory,
            config,
            writable=self.writable,
            recovery_point=self.recovery_points.get(key, 0),
            # not checkpointed: the first segment's base (0 here, so that the Log does not
            # read the checkpoint file this directory has read already)
            log_start_offset=self.log_start_offsets.get(key, 0),
            had_clean_shutdown=self.had_clean_shutdown,
            limits=self.limits,
        )
        self._logs[key] = log
        return log

    @property
    def cleaner_manager(self) -> Any:
        """This directory's :class:`~kafkalog.log.cleaner.CleanerManager`: the partitions its
        cleaning passes gave up on (damaged: uncleanable, Kafka's
        ``uncleanable-partitions-count``), kept while the directory is open (made on first
        use, so that opening a directory does not load the cleaner's compiled kernels)."""
        if self._cleaner_manager is None:
            from kafkalog.log.cleaner import CleanerManager

            self._cleaner_manager = CleanerManager()
        return self._cleaner_manager

    def clean_filthiest(
        self,
        config_for: Any = None,
        *,
        now: int | None = None,
        options: Any = None,
        lock_of: Any = None,
        progress: Any = None,
    ) -> Any:
        """One pass of Kafka's cleaner over this writable directory: the compacted partition
        with the highest dirty ratio past its ``min.cleanable.dirty.ratio`` (or overdue by
        ``max.compaction.lag.ms``) gets one cleaning round, and ``compact,delete``
        partitions run retention. ``config_for(topic)`` gives each topic's
        :class:`TopicConfig` (None: the config it was opened with); ``lock_of(log)`` the
        lock its writers hold, so a server may call this from a background thread while it
        appends. Returns the :class:`~kafkalog.log.cleaner.CleanResult`, None when no
        partition needed cleaning (or the one picked was found damaged: it is then marked
        uncleanable in :attr:`cleaner_manager`, logged, and passed by from then on, so the
        other partitions are cleaned by the next passes)."""
        from kafkalog.log.cleaner import clean_filthiest

        if not self.writable:
            raise ReadOnlyError(f"cannot clean {self.path}: it is open read-only")
        from types import SimpleNamespace

        from kafkalog.errors import KafkalogError

        manager = self.cleaner_manager
        logs = []
        for topic, partition in self.partitions():
            config = config_for(topic) if config_for is not None else None
            try:
                log = self.log(topic, partition, config=config)
            except KafkalogError as e:
                # a partition that cannot even open (damage) must not stop the others
                # (the partition as the manager names it: no Log object exists for it)
                opened = SimpleNamespace(
                    directory=os.path.join(self.path, f"{topic}-{partition}"),
                    topic=topic,
                    partition=partition,
                )
                if not manager.is_uncleanable(opened):
                    from kafkalog.log.cleaner.api import report_uncleanable

                    report_uncleanable(manager, opened, e)
                continue
            if config is not None and log.config is not config:
                log.reconfigure(config)
            logs.append(log)
        return clean_filthiest(
            logs,
            now=now,
            options=options,
            lock_of=lock_of,
            progress=progress,
            manager=manager,
        )

    def remove_partition(self, topic: str, partition: int) -> None:
        """Close and delete a partition this writer created, with its root checkpoint entries
        (a job that failed after creating it). Done here, under the data directory's lock,
        so the checkpoints written at :meth:`close` never name it."""
        import shutil

        if not self.writable:
            raise ReadOnlyError(f"cannot remove a partition of {self.path}: it is open read-only")
        key = (topic, partition)
        log = self._logs.pop(key, None)
        if log is not None:
            log.close()
        self.recovery_points.pop(key, None)
        self.log_start_offsets.pop(key, None)
        self.high_watermarks.pop(key, None)
        if files.exists(os.path.join(self.path, CLEANER_OFFSET_CHECKPOINT)):
            from kafkalog.log.cleaner_checkpoint import forget_partition

            forget_partition(self.path, key)
        shutil.rmtree(
            os.path.join(self.path, partition_dir_name(topic, partition)), ignore_errors=True
        )

    def logs(self) -> Iterator[Log]:
        for topic, partition in self.partitions():
            yield self.log(topic, partition)

    def open_logs(self) -> list[Log]:
        """The logs opened so far (no partition is opened for this)."""
        return list(self._logs.values())

    def checkpoint(self) -> None:
        """Write the root checkpoints for open logs (recovery points, log start offsets, and
        with ``high_watermarks`` the high watermarks) and each open log's
        ``leader-epoch-checkpoint`` where its epochs changed since it was last written
        (retention and DeleteRecords move the first epoch's start)."""
        if not self.writable:
            return
        from kafkalog.log.checkpoints import OffsetCheckpoint

        for key, log in self._logs.items():
            self.recovery_points[key] = log.recovery_point
            self.log_start_offsets[key] = log.log_start_offset
            if os.path.isdir(log.directory):
                log.write_checkpoints()
        OffsetCheckpoint.write(
            os.path.join(self.path, RECOVERY_POINT_CHECKPOINT), self.recovery_points
        )
        OffsetCheckpoint.write(
            os.path.join(self.path, LOG_START_OFFSET_CHECKPOINT), self.log_start_offsets
        )
        self.checkpoint_high_watermarks()

    def checkpoint_high_watermarks(self) -> None:
        """With ``high_watermarks``: write the ``replication-offset-checkpoint``, each open
        log's entry its log end offset (Kafka writes it on its own interval, 5 s)."""
        if not (self.writable and self.keeps_high_watermarks):
            return
        from kafkalog.log.checkpoints import OffsetCheckpoint

        for key, log in self._logs.items():
            self.high_watermarks[key] = log.log_end_offset
        OffsetCheckpoint.write(
            os.path.join(self.path, REPLICATION_OFFSET_CHECKPOINT), self.high_watermarks
        )

    def close(self) -> None:
        """Flush and close every open log; a writable directory then records a clean shutdown."""
        from kafkalog.log.checkpoints import CleanShutdownMarker

        try:
            for log in self._logs.values():
                log.close()
            if self.writable and self._lock is not None:
                self.checkpoint()
                CleanShutdownMarker.write(self.path, None)
            self._logs.clear()
        finally:
            if self._lock is not None:
                self._lock.release()
                self._lock = None

    def __enter__(self) -> LogDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "rw" if self.writable else "r"
        return f"LogDir({self.path!r}, mode={mode!r})"


def refuse_if_broker(path: str) -> None:
    """Refuse a data directory whose ``.lock`` a running Kafka broker holds, before writing
    anything in it. Why the whole directory and not only its partitions: a writer rewrites the
    root files the broker owns, the recovery-point and log-start-offset checkpoints and the
    clean-shutdown marker, whose presence after a broker crash would make it skip recovery."""
    from kafkalog.log.lock import LockedError, broker_holds

    if os.path.isdir(path) and broker_holds(path):
        raise LockedError(
            path,
            f"refusing to write: a Kafka broker is using this data directory (it holds "
            f"{os.path.join(path, '.lock')}); stop the broker or write to a copy",
            broker=True,
        )


def _lock_data_directory(path: str, wait: float) -> Any:
    """Lock ``path`` (a data directory) for this writer alone, as a broker locks its ``.lock``.

    Why: a writable data directory owns root files every partition shares, the recovery-point
    and log-start-offset checkpoints and the clean-shutdown marker. Two writers at once (a
    Spark job's commit and ``kafkalog ingest``, say) would each rewrite the checkpoints with
    what they read when they opened them, and the first to close would mark a clean shutdown
    while the other still appends: a crash then skips the recovery its torn tail needs."""
    from kafkalog.log.lock import DirectoryLock, LockedError

    os.makedirs(path, exist_ok=True)
    lock = DirectoryLock(path)
    deadline = time.monotonic() + max(0.0, wait)
    while True:
        refuse_if_broker(path)
        try:
            lock.acquire()
            return lock
        except LockedError as e:
            if e.broker or time.monotonic() >= deadline:
                waited = f"; waited {wait:g} s" if wait > 0 else ""
                raise LockedError(
                    path,
                    f"another writer has the data directory open ({e.reason}){waited}",
                    holder_pid=e.holder_pid,
                    broker=e.broker,
                ) from e
        time.sleep(0.05)
