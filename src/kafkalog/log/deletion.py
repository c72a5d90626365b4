"""How a log deletes segments: renamed ``.deleted`` at once, removed ``file.delete.delay.ms``
later (Kafka's ``LocalLog.deleteSegmentFiles`` with ``asyncDelete``, and
``deleteProducerSnapshots`` for the segment's ``.snapshot``).

Why the delay: a reader that got hold of a segment just before retention (or a truncation)
removed it from the log keeps reading it. Its files are renamed, not closed: the open
descriptors and index mappings stay valid, so every read through the held segment works and
gives the same answers during the delay. When the delay has passed, the scheduled task closes
the segment (waiting for reads in flight, see :class:`~kafkalog.files.HandleUsers` and
:mod:`kafkalog.index.base`) and removes its files; from then on every use of the segment raises
:class:`~kafkalog.errors.ClosedError`, never touches unmapped memory.

Closing the log drops the deletions still waiting, as a broker's scheduler drops its delayed
tasks at shutdown: their segments are closed, and their ``.deleted`` files stay for the next
open of the log to remove (Kafka's LogLoader does the same). A delay of 0 deletes at once, in the
caller's thread.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Sequence

from kafkalog.log.layout import DELETED_SUFFIX
from kafkalog.log.scheduler import ScheduledTask, Scheduler, shared_scheduler
from kafkalog.log.segment import LogSegment


class SegmentDeleter:
    """The deletions one log has scheduled (see the module doc)."""

    def __init__(self, scheduler: Scheduler | None = None) -> None:
        self._scheduler = scheduler
        self._pending: dict[ScheduledTask, tuple[Scheduler, list[LogSegment]]] = {}
        self._lock = threading.Lock()
        self._closed = False

    def delete(
        self, segments: Sequence[LogSegment], snapshots: Sequence[str], delay_ms: int
    ) -> None:
        """Rename ``segments`` (already out of the log) and the producer ``snapshots`` that go
        with them ``.deleted``; remove them now if ``delay_ms`` is 0, else after it."""
        segs = list(segments)
        marked: list[str] = []
        for seg in segs:
            if not seg.has_suffix(DELETED_SUFFIX):
                seg.change_file_suffixes("", DELETED_SUFFIX)
        for path in snapshots:
            if delay_ms == 0:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path)
                continue
            with contextlib.suppress(FileNotFoundError):  # already gone: nothing to delete
                os.replace(path, path + DELETED_SUFFIX)
                marked.append(path + DELETED_SUFFIX)
        if delay_ms == 0:
            _remove(segs, marked)
            return
        with self._lock:
            if self._closed:  # the log is closing: left for its next open to remove
                for seg in segs:
                    seg.close_handlers()
                return
            scheduler = self._scheduler or shared_scheduler()
            holder: list[ScheduledTask] = []

            def run() -> None:
                with self._lock:
                    self._pending.pop(holder[0], None)
                _remove(segs, marked)

            names = ", ".join(seg.log.path for seg in segs)
            task = scheduler.schedule(f"delete-file {names}", delay_ms / 1000, run)
            holder.append(task)
            self._pending[task] = (scheduler, segs)

    @property
    def pending(self) -> list[LogSegment]:
        """The segments whose files are still waiting for their delay."""
        with self._lock:
            return [seg for _, segs in self._pending.values() for seg in segs]

    def close(self) -> None:
        """Drop the deletions still waiting (their segments are closed, their ``.deleted``
        files stay) and wait for one that is running."""
        with self._lock:
            self._closed = True
            pending = list(self._pending.items())
            self._pending.clear()
        for task, (scheduler, segs) in pending:
            if scheduler.cancel(task):
                for seg in segs:
                    seg.close_handlers()


def _remove(segments: list[LogSegment], paths: list[str]) -> None:
    for seg in segments:
        seg.delete_if_exists()
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
