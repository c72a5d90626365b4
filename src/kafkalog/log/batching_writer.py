"""A producer-style writer for a :class:`Log`: one record per :meth:`BatchingWriter.send`,
Kafka-sized batches on disk.

A program that appends one event at a time pays for a write (and a batch header) per record;
Kafka's producer instead gathers records into a batch and sends it once ``batch.size`` bytes
have gathered or ``linger.ms`` has passed since the first. This writer does the same in front
of a log, with the producer's names and defaults (``batch.size`` 16384, ``linger.ms`` 5 as in
Kafka 4, ``compression.type`` none, ``buffer.memory`` 32 MiB, ``max.block.ms`` 60000): a
background thread encodes each batch (``records.small_batch.encode_rows``, compressed as
asked) and appends it; :meth:`send` returns a :class:`RecordFuture` that resolves to the
record's offset once its batch is in the log (or, with ``durable=True``, once an fsync covers
it: batches waiting for durability share fsyncs through :class:`SharedLog`).

Several threads may send at once; records of one thread keep their order, and each batch's
records are in the order their ``send`` calls took the writer's lock.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from kafkalog.errors import InvalidRecordError, KafkalogError
from kafkalog.log.group_commit import SharedLog
from kafkalog.log.log import Log
from kafkalog.records import Compression, Header
from kafkalog.records.small_batch import Row, encode_rows

INT64_MAX = 2**63 - 1
# a record's bytes besides its key, value and headers, at most (length, attributes, two
# deltas, two lengths, header count): Kafka's estimate works the same way
_RECORD_OVERHEAD = 21
_BATCH_HEADER = 61

PRODUCER_DEFAULTS: dict[str, Any] = {
    "batch.size": 16384,
    "linger.ms": 5,
    "compression.type": "none",
    "compression.level": None,
    "buffer.memory": 32 * 1024 * 1024,
    "max.block.ms": 60000,
}
"""The producer settings the writer knows, with Kafka's defaults (``linger.ms``: Kafka 4's)."""


class RecordFuture:
    """What :meth:`BatchingWriter.send` returns: the record's offset once its batch is
    appended (like the Java producer's ``Future<RecordMetadata>``)."""

    __slots__ = ("_batch", "_index")

    def __init__(self, batch: _Batch, index: int) -> None:
        self._batch = batch
        self._index = index

    def done(self) -> bool:
        return self._batch.done.is_set()

    def result(self, timeout: float | None = None) -> int:
        """The record's offset; raises the append's error, or :class:`TimeoutError`."""
        batch = self._batch
        if not batch.done.wait(timeout):
            raise TimeoutError("the record's batch was not appended in time")
        if batch.error is not None:
            raise batch.error
        return batch.base + self._index

    get = result  # the Java producer's name

    def exception(self, timeout: float | None = None) -> BaseException | None:
        batch = self._batch
        if not batch.done.wait(timeout):
            raise TimeoutError("the record's batch was not appended in time")
        return batch.error


_new_object = object.__new__
_set_future_batch = RecordFuture.__dict__["_batch"].__set__
_set_future_index = RecordFuture.__dict__["_index"].__set__


class _Batch:
    """Records gathering for one append."""

    __slots__ = ("base", "created", "done", "error", "rows", "size")

    def __init__(self) -> None:
        self.rows: list[Row] = []
        self.size = _BATCH_HEADER
        self.created = 0.0
        self.done = threading.Event()
        self.base = -1
        self.error: BaseException | None = None


def _producer_settings(
    config: Mapping[str, Any] | None, overrides: dict[str, Any]
) -> dict[str, Any]:
    settings = dict(PRODUCER_DEFAULTS)
    for source in (config or {}, overrides):
        for name, value in source.items():
            if name not in PRODUCER_DEFAULTS:
                raise KafkalogError(
                    f"unknown producer setting {name!r}; known: {', '.join(PRODUCER_DEFAULTS)}"
                )
            settings[name] = value
    for name in ("batch.size", "linger.ms", "buffer.memory", "max.block.ms"):
        if int(settings[name]) < 0:
            raise KafkalogError(f"{name} must not be negative, not {settings[name]}")
    return settings


class BatchingWriter:
    """Gathers sent records into batches and appends each to the log from a sender thread.

    ``log`` is a writable :class:`Log` (the writer serializes its own use of it; other threads
    should go through :attr:`shared`) or a :class:`SharedLog` several writers and appenders
    share. ``config`` takes Kafka producer names (:data:`PRODUCER_DEFAULTS`); the keyword
    arguments are the same settings with Python names. Closing the writer does not close the
    log.
    """

    def __init__(
        self,
        log: Log | SharedLog,
        config: Mapping[str, Any] | None = None,
        *,
        batch_size: int | None = None,
        linger_ms: float | None = None,
        compression_type: Compression | str | None = None,
        durable: bool = False,
    ) -> None:
        overrides = {
            name: value
            for name, value in (
                ("batch.size", batch_size),
                ("linger.ms", linger_ms),
                ("compression.type", compression_type),
            )
            if value is not None
        }
        settings = _producer_settings(config, overrides)
        self.shared = log if isinstance(log, SharedLog) else SharedLog(log)
        self.batch_size = int(settings["batch.size"])
        self.linger = float(settings["linger.ms"]) / 1000
        self.compression = Compression.parse(settings["compression.type"])
        self.compression_level: int | None = settings["compression.level"]
        self.buffer_memory = int(settings["buffer.memory"])
        self.max_block = float(settings["max.block.ms"]) / 1000
        self.durable = durable
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)  # the sender waits on it
        self._room = threading.Condition(self._lock)  # senders blocked by buffer.memory
        self._appended = threading.Condition(self._lock)  # the fsync thread (durable=True)
        self._open = _Batch()
        self._ready: collections.deque[_Batch] = collections.deque()
        self._queued = 0  # bytes gathered and not yet appended: buffer.memory's measure
        self._last: _Batch | None = None  # the newest batch handed to the sender
        self._flushing = 0
        self._closed = False
        self._sender = threading.Thread(
            target=self._run, name=f"kafkalog-writer {self.shared.log.directory}", daemon=True
        )
        # durable=True: appended batches wait here for an fsync (one for all of them) while
        # the sender appends the next ones
        self._unsynced: collections.deque[tuple[_Batch, int]] = collections.deque()
        self._syncer: threading.Thread | None = None
        if durable:
            self._syncer = threading.Thread(
                target=self._sync, name=f"kafkalog-fsync {self.shared.log.directory}", daemon=True
            )
            self._syncer.start()
        self._sender.start()

    # -- sending ---------------------------------------------------------------------------------
    def send(
        self,
        value: bytes | None,
        key: bytes | None = None,
        *,
        timestamp: int | None = None,
        headers: Sequence[Header | tuple[str, bytes | None]] = (),
    ) -> RecordFuture:
        """Add one record; the future gives its offset once its batch is appended. The
        timestamp defaults to now (ms) by the log's clock, as the Java producer stamps it
        (and as :meth:`Log.append_records <kafkalog.log.Log.append_records>` stamps a record
        without one)."""
        if timestamp is None:
            timestamp = int(self.shared.log.clock() * 1000)
        elif not 0 <= timestamp <= INT64_MAX:
            raise InvalidRecordError(f"record timestamp {timestamp} is not in [0, {INT64_MAX}]")
        size = _RECORD_OVERHEAD
        if value is not None:
            size += len(value)
        if key is not None:
            size += len(key)
        hdrs: tuple[Header, ...] = ()
        if headers:
            hdrs = tuple(h if isinstance(h, Header) else Header(h[0], h[1]) for h in headers)
            size += sum(len(h.key) * 4 + 10 + len(h.value or b"") for h in hdrs)
        with self._lock:
            batch = self._open
            if (
                not batch.rows
                or batch.size + size > self.batch_size
                or self._queued + size > self.buffer_memory
                or self._closed
            ):
                batch = self._batch_for(size)
            rows = batch.rows
            rows.append((key, value, timestamp, hdrs))
            batch.size += size
            self._queued += size
            index = len(rows) - 1
        future = _new_object(RecordFuture)  # RecordFuture(batch, index) at half the cost
        _set_future_batch(future, batch)
        _set_future_index(future, index)
        return future

    def _batch_for(self, size: int) -> _Batch:
        """The batch a record of ``size`` bytes joins when it is not simply the open one:
        the first record of a batch starts the linger clock, a full batch goes to the sender,
        a full ``buffer.memory`` blocks (the lock is held)."""
        if self._closed:
            raise KafkalogError("send() on a closed writer")
        cond = self._cond
        if self._queued + size > self.buffer_memory:
            self._wait_for_room(size)
        batch = self._open
        if batch.rows and batch.size + size > self.batch_size:
            self._ready.append(batch)
            self._last = batch
            batch = self._open = _Batch()
        if not batch.rows:
            batch.created = time.monotonic()
        cond.notify()
        return batch

    def _wait_for_room(self, size: int) -> None:
        """``buffer.memory`` is full: block up to ``max.block.ms`` (the lock is held)."""
        deadline = time.monotonic() + self.max_block
        while self._queued + size > self.buffer_memory and self._queued:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(
                    f"buffer.memory ({self.buffer_memory} bytes) stayed full for max.block.ms"
                )
            self._cond.notify()
            self._room.wait(remaining)

    def flush(self, timeout: float | None = None) -> None:
        """Send every gathered record now and wait until all sent so far are appended."""
        with self._cond:
            if self._open.rows:
                self._ready.append(self._open)
                self._last = self._open
                self._open = _Batch()
                self._cond.notify_all()
            last = self._last
        if last is not None and not last.done.wait(timeout):
            raise TimeoutError("flush() timed out")

    def close(self, timeout: float | None = None) -> None:
        """Flush, then stop the sender. Records sent after this raise."""
        with self._cond:
            already = self._closed
            self._closed = True
        if not already:
            self.flush(timeout)
        with self._cond:
            self._cond.notify_all()
        self._sender.join(timeout)
        if self._syncer is not None:
            self._syncer.join(timeout)

    def __enter__(self) -> BatchingWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the sender thread -----------------------------------------------------------------------
    def _next_batch(self) -> _Batch | None:
        cond = self._cond
        with cond:
            while True:
                if self._ready:
                    return self._ready.popleft()
                batch = self._open
                if batch.rows:
                    wait = batch.created + self.linger - time.monotonic()
                    if wait <= 0 or self._closed:
                        self._open = _Batch()
                        self._last = batch
                        return batch
                    cond.wait(wait)
                elif self._closed:
                    return None
                else:
                    cond.wait()

    def _run(self) -> None:
        while True:
            batch = self._next_batch()
            if batch is None:
                if self._syncer is not None:
                    with self._cond:
                        self._unsynced.append((_Batch(), -1))  # the fsync thread's stop mark
                        self._appended.notify()
                return
            try:
                data = encode_rows(
                    batch.rows,
                    compression=self.compression,
                    compression_level=self.compression_level,
                )
                info = self.shared.append(data)
                batch.base = info.first_offset
            except BaseException as e:  # every waiting future gets the error
                batch.error = e
            if self._syncer is not None and batch.error is None:
                with self._cond:
                    self._unsynced.append((batch, info.last_offset + 1))
                    self._appended.notify()
            else:
                self._finish([batch])

    def _sync(self) -> None:
        """durable=True: resolve appended batches once one fsync covers them all."""
        cond = self._appended
        while True:
            with cond:
                while not self._unsynced:
                    cond.wait()
                taken = list(self._unsynced)
                self._unsynced.clear()
            stop = taken[-1][1] < 0
            if stop:
                taken.pop()
            batches = [b for b, _ in taken]
            if taken:
                try:
                    self.shared.wait_durable(max(end for _, end in taken))
                except BaseException as e:
                    for b in batches:
                        b.error = e
                self._finish(batches)
            if stop:
                return

    def _finish(self, batches: list[_Batch]) -> None:
        with self._cond:
            for batch in batches:
                self._queued -= batch.size - _BATCH_HEADER
            self._room.notify_all()
        for batch in batches:
            batch.done.set()
