"""Work run later on one background thread (Kafka's KafkaScheduler, with one thread).

What kafkalog runs later is what a broker does: the removal of a deleted segment's files once
``file.delete.delay.ms`` has passed (see :mod:`kafkalog.log.deletion`). One thread serves the
whole process (a broker has one scheduler, not one per partition); it is started by the first
task and is a daemon, so a process that exits with deletions still pending simply leaves their
``.deleted`` files, which the next open of the log removes, as after a broker crash.

Tasks run in due order. :meth:`Scheduler.cancel` drops a task that has not started and waits
for one that is running, so that whoever cancels knows the task is not touching anything any
more when it returns.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable

_log = logging.getLogger(__name__)

_PENDING, _RUNNING, _DONE, _CANCELLED = range(4)


class ScheduledTask:
    """One task given to :meth:`Scheduler.schedule`."""

    __slots__ = ("due", "name", "run", "state")

    def __init__(self, name: str, due: float, run: Callable[[], None]) -> None:
        self.name = name
        self.due = due
        self.run = run
        self.state = _PENDING

    @property
    def done(self) -> bool:
        return self.state == _DONE

    @property
    def cancelled(self) -> bool:
        return self.state == _CANCELLED

    def __repr__(self) -> str:
        state = ("pending", "running", "done", "cancelled")[self.state]
        return f"ScheduledTask({self.name!r}, {state})"


class Scheduler:
    """Runs each scheduled task once, after its delay, on a daemon thread."""

    def __init__(self, thread_name: str = "kafkalog-scheduler") -> None:
        self._thread_name = thread_name
        self._changed = threading.Condition(threading.Lock())
        self._queue: list[tuple[float, int, ScheduledTask]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def schedule(self, name: str, delay_s: float, run: Callable[[], None]) -> ScheduledTask:
        """Run ``run()`` once ``delay_s`` seconds from now (monotonic time). An exception it
        raises is logged (logger ``kafkalog.log.scheduler``), as Kafka's scheduler logs it."""
        task = ScheduledTask(name, time.monotonic() + max(0.0, delay_s), run)
        with self._changed:
            heapq.heappush(self._queue, (task.due, next(self._order), task))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._work, name=self._thread_name)
                self._thread.daemon = True
                self._thread.start()
            self._changed.notify_all()
        return task

    def cancel(self, task: ScheduledTask) -> bool:
        """True if ``task`` will never run; False if it ran, after waiting for it to finish
        when it is running (unless called from the task itself)."""
        with self._changed:
            if task.state == _PENDING:
                task.state = _CANCELLED
                self._changed.notify_all()
                return True
            if task.state == _CANCELLED:
                return True
            if threading.current_thread() is not self._thread:
                while task.state == _RUNNING:
                    self._changed.wait()
            return False

    def pending(self) -> int:
        """Tasks not yet started."""
        with self._changed:
            return sum(1 for _, _, t in self._queue if t.state == _PENDING)

    def _next_task(self) -> ScheduledTask:
        with self._changed:
            while True:
                while self._queue and self._queue[0][2].state != _PENDING:
                    heapq.heappop(self._queue)  # cancelled
                if not self._queue:
                    self._changed.wait()
                    continue
                wait = self._queue[0][0] - time.monotonic()
                if wait > 0:
                    self._changed.wait(wait)
                    continue
                task = heapq.heappop(self._queue)[2]
                task.state = _RUNNING
                return task

    def _work(self) -> None:
        while True:
            task = self._next_task()
            try:
                task.run()
            except Exception:
                _log.warning("scheduled task %r failed", task.name, exc_info=True)
            finally:
                with self._changed:
                    task.state = _DONE
                    self._changed.notify_all()


_shared: Scheduler | None = None
_shared_lock = threading.Lock()


def shared_scheduler() -> Scheduler:
    """The process's scheduler (created on first use)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = Scheduler()
        return _shared


def _forget_after_fork() -> None:
    # a forked child has no scheduler thread, and its locks may have been held at the fork
    global _shared, _shared_lock
    _shared = None
    _shared_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)
