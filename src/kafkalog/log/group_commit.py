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
        """Every offset below this one is on disk (fsynced): the log's recovery point."""
        return int(self.log.recovery_point)

    def wait_durable(self, end_offset: int, timeout: float | None = None) -> None:
        """Block until every offset below ``end_offset`` is fsynced: become the leader and
        flush, or wait for the leader's flush to cover it. Raises :class:`TimeoutError`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        cond = self._durability
        while self.log.recovery_point < end_offset:
            with cond:
                if self.log.recovery_point >= end_offset:
                    return
                if self._leader:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise TimeoutError(f"offset {end_offset - 1} not yet durable")
                    cond.wait(remaining)
                    continue
                self._leader = True
            try:
                self.flush()
            finally:
                with cond:
                    self._leader = False
                    cond.notify_all()

    def flush(self) -> None:
        """fsync everything appended so far (:meth:`Log.flush`)."""
        with self.lock:
            log = self.log
            if log.writable and log.log_end_offset > log.recovery_point:
                log.flush()
                self.fsyncs += 1

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
                    self.fsyncs += 1
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
