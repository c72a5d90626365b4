"""One :class:`Log` shared by many threads, with group commit: appenders that wait for
durability share one fsync.

A :class:`Log` is not thread-safe; :class:`SharedLog` puts its appends, reads and flushes under
one lock. ``append(..., durable=True)`` returns once an fsync covering the appended offsets has
completed (the log's recovery point, which :meth:`Log.flush` moves only after its fsyncs, is at
or past them). One waiting thread at a time becomes the *leader* and calls :meth:`Log.flush`
for everything appended so far; the threads that appended meanwhile find their offsets covered
when it returns, or elect the next leader among themselves. With eight appenders and an fsync
much slower than an append, one fsync covers several appends (the benchmark shows how many).

Kafka's own ``flush.messages`` and ``flush.ms`` still apply on every append (the log checks
them); a broker also flushes a log whose ``flush.ms`` has passed while no append came
(LogManager's scheduled ``flushDirtyLogs``), which ``flush_scheduler=True`` does here in a
background thread.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from typing import Any

from kafkalog.errors import KafkalogError
from kafkalog.log.log import AppendInfo, Log
from kafkalog.records import Compression, Record

LONG_MAX = 2**63 - 1


class SharedLog:
    """A writable :class:`Log` for several threads: serialized appends, shared fsyncs."""

    def __init__(self, log: Log, *, flush_scheduler: bool = False) -> None:
        if not log.writable:
            raise KafkalogError(f"{log.directory} was opened read-only: nothing to append to")
        self.log = log
        self.lock = threading.RLock()
        """Held around every use of :attr:`log` (callers doing their own reads take it too)."""
        self._durability = threading.Condition(threading.Lock())
        self._leader = False
        self._closed = False
        self.fsyncs = 0
        self._synced = 0  # every offset below it was fsynced by group commit
        self._bases: tuple[int, ...] = ()  # the segments when it was, to see new files
        """How many flushes group commit (and the scheduler) made: the benchmark's figure of
        how many appends one fsync covered."""
        self._scheduler: threading.Thread | None = None
        self._stop = threading.Event()
        if flush_scheduler:
            self._scheduler = threading.Thread(
                target=self._flush_dirty, name=f"kafkalog-flusher {log.directory}", daemon=True
            )
            self._scheduler.start()

    # -- appending -------------------------------------------------------------------------------
    def append(self, data: bytes | bytearray | memoryview, *, durable: bool = False) -> AppendInfo:
        """:meth:`Log.append` under the lock; with ``durable`` it returns once fsynced."""
        with self.lock:
            self._require_open()
            info = self.log.append(data)
        if durable:
            self.wait_durable(info.last_offset + 1)
        return info

    def append_records(
        self,
        records: Sequence[Record],
        *,
        durable: bool = False,
        compression: Compression | str = Compression.NONE,
        **batch_options: Any,
    ) -> AppendInfo:
        """:meth:`Log.append_records` under the lock; with ``durable`` it returns once
        fsynced."""
        with self.lock:
            self._require_open()
            info = self.log.append_records(records, compression=compression, **batch_options)
        if durable:
            self.wait_durable(info.last_offset + 1)
        return info

    @property
    def durable_offset(self) -> int:
        """Every offset below this one is on disk: fsynced by group commit, or below the
        log's recovery point (which its own flushes move)."""
        return max(self._synced, int(self.log.recovery_point))

    def wait_durable(self, end_offset: int, timeout: float | None = None) -> None:
        """Block until every offset below ``end_offset`` is fsynced: become the leader and
        fsync, or wait for the leader's fsync to cover it. Raises :class:`TimeoutError`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        cond = self._durability
        while self.durable_offset < end_offset:
            with cond:
                if self.durable_offset >= end_offset:
                    return
                if self._leader:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise TimeoutError(f"offset {end_offset - 1} not yet durable")
                    cond.wait(remaining)
                    continue
                self._leader = True
            try:
                self._sync()
            finally:
                with cond:
                    self._leader = False
                    cond.notify_all()

    def _sync(self) -> None:
        """The leader's fsync: of the ``.log`` files written since the last one, taken under
        the lock (as duplicated descriptors, so a segment closed meanwhile is still synced
        safely) and fsynced outside it, so appenders go on appending (the next fsync covers
        them); the directory too when segments came or went. The recovery point stays where
        the log's own flushes put it: the records are on disk, and the indexes above the
        recovery point are what a recovery checks and rebuilds anyway (Kafka's model)."""
        # the threads the last fsync released are appending again: let them, so this fsync
        # covers their records too (without it, a leader elected at once syncs ~half as many)
        time.sleep(0)
        with self.lock:
            log = self.log
            end = log.log_end_offset
            floor = self.durable_offset
            if end <= floor:
                return
            segments = [
                seg
                for i, seg in enumerate(log.segments)
                if seg.base_offset >= floor
                or i + 1 == len(log.segments)
                or log.segments[i + 1].base_offset > floor
            ]
            fds = [os.dup(seg.log.fd) for seg in segments if seg.log.fd >= 0]
            bases = tuple(seg.base_offset for seg in log.segments)
            new_files = bases != self._bases
            self._bases = bases
        try:
            for fd in fds:
                os.fsync(fd)
            if new_files:
                dir_fd = os.open(log.directory, os.O_RDONLY)
                try:
                    os.fsync(dir_fd)
                finally:
                    os.close(dir_fd)
        finally:
            for fd in fds:
                os.close(fd)
        self.fsyncs += 1
        self._synced = max(self._synced, end)

    def flush(self) -> None:
        """:meth:`Log.flush`: fsync everything appended so far, indexes included, and move
        the recovery point."""
        with self.lock:
            log = self.log
            if log.writable and log.log_end_offset > log.recovery_point:
                log.flush()

    # -- flush.ms without appends ----------------------------------------------------------------
    def _flush_dirty(self) -> None:
        """LogManager's ``flushDirtyLogs``: flush when ``flush.ms`` has passed since the last
        flush and something is unflushed."""
        while not self._stop.is_set():
            flush_ms = int(getattr(self.log.config, "flush_ms", LONG_MAX))
            if flush_ms >= LONG_MAX:
                self._stop.wait(1.0)  # never due; the config may be swapped, so look again
                continue
            with self.lock:
                if self._closed:
                    return
                log = self.log
                now = int(log.clock() * 1000)
                due = now - log.last_flush_ms >= flush_ms
                if due and log.log_end_offset > log.recovery_point:
                    log.flush()
                wait_ms = max(1, flush_ms - (now - log.last_flush_ms)) if not due else flush_ms
            with self._durability:
                self._durability.notify_all()
            self._stop.wait(min(wait_ms, 1000) / 1000)

    # -- closing ---------------------------------------------------------------------------------
    def _require_open(self) -> None:
        if self._closed:
            raise KafkalogError(f"the shared log of {self.log.directory} is closed")

    def close(self) -> None:
        """Stop the flusher and close the log (which flushes it)."""
        self._stop.set()
        if self._scheduler is not None:
            self._scheduler.join()
        with self.lock:
            if not self._closed:
                self._closed = True
                self.log.close()

    def __enter__(self) -> SharedLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
