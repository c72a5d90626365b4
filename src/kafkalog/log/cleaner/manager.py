"""Which partitions the cleaner leaves alone: those a cleaning is running on, and those a
cleaning failed on (Kafka's ``LogCleanerManager``: ``inProgress``, ``markPartitionUncleanable``
and its ``uncleanable-partitions-count`` / ``uncleanable-bytes`` gauges per data directory).

Why: a partition whose segments are damaged makes every cleaning of it raise. Were it tried
again on every pass, the dirtiest log being the damaged one, no other compacted partition
(``__consumer_offsets`` included) would ever be cleaned again. Kafka marks it uncleanable,
logs it and goes on; so does kafkalog. The mark lasts as long as the manager (a broker's run,
a :class:`~kafkalog.log.logdir.LogDir`'s life), as Kafka's does: after ``kafkalog repair``
moved the damage aside, a restart cleans the partition again.

A partition is being cleaned by at most one cleaning per process, whichever manager or call
started it (:func:`cleaning`): a second :meth:`Log.compact` of it raises
:class:`CleaningInProgress`, and :func:`~kafkalog.log.cleaner.clean_filthiest` passes it by.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from kafkalog.errors import KafkalogError


class CleaningInProgress(KafkalogError):
    """The partition is being cleaned already (by another thread of this process)."""


_in_progress: set[str] = set()
_in_progress_lock = threading.Lock()


def _key_of(directory: str) -> str:
    return os.path.realpath(directory)


@contextlib.contextmanager
def cleaning(directory: str) -> Iterator[None]:
    """Mark the partition at ``directory`` as being cleaned for the block (Kafka's
    ``LogCleaningInProgress``); :class:`CleaningInProgress` when it already is."""
    key = _key_of(directory)
    with _in_progress_lock:
        if key in _in_progress:
            raise CleaningInProgress(f"{directory} is being cleaned already")
        _in_progress.add(key)
    try:
        yield
    finally:
        with _in_progress_lock:
            _in_progress.discard(key)


def in_progress(directory: str) -> bool:
    """Whether a cleaning of the partition at ``directory`` is running in this process."""
    with _in_progress_lock:
        return _key_of(directory) in _in_progress


@dataclass(frozen=True)
class Uncleanable:
    """A partition the cleaner gave up on, and why (the error's message: file and byte)."""

    topic: str
    partition: int
    directory: str
    reason: str


class CleanerManager:
    """The uncleanable partitions of each data directory, for one cleaner's life."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._uncleanable: dict[str, dict[tuple[str, int], Uncleanable]] = {}

    @staticmethod
    def _data_dir(log: Any) -> str:
        return os.path.dirname(_key_of(log.directory))

    def mark_uncleanable(self, log: Any, reason: str) -> Uncleanable:
        """Kafka's ``markPartitionUncleanable``: no pass cleans it (or runs its retention)
        again while this manager lives."""
        mark = Uncleanable(log.topic, log.partition, log.directory, reason)
        with self._lock:
            self._uncleanable.setdefault(self._data_dir(log), {})[(log.topic, log.partition)] = mark
        return mark

    def is_uncleanable(self, log: Any) -> bool:
        with self._lock:
            found = self._uncleanable.get(self._data_dir(log), {})
            return (log.topic, log.partition) in found

    def uncleanable_partitions(self, data_dir: str) -> dict[tuple[str, int], Uncleanable]:
        """The uncleanable partitions of a data directory (Kafka's
        ``uncleanablePartitions(dir)``)."""
        with self._lock:
            return dict(self._uncleanable.get(_key_of(data_dir), {}))

    def uncleanable_partitions_count(self, data_dir: str) -> int:
        """Kafka's ``uncleanable-partitions-count`` gauge of the data directory."""
        return len(self.uncleanable_partitions(data_dir))

    def uncleanable_logs(self, logs: Iterable[Any], data_dir: str) -> list[Any]:
        """The logs among ``logs`` marked uncleanable in ``data_dir`` (their dirty sections make
        Kafka's ``uncleanable-bytes`` gauge: :func:`kafkalog.log.cleaner.api.uncleanable_bytes`)."""
        marked = self.uncleanable_partitions(data_dir)
        return [
            log
            for log in logs
            if self._data_dir(log) == _key_of(data_dir) and (log.topic, log.partition) in marked
        ]

    def maintain(self, logs: Iterable[Any]) -> None:
        """Forget the uncleanable partitions no longer among ``logs`` in their data
        directories whose directory is gone (Kafka's ``maintainUncleanablePartitions``: a
        deleted partition is not counted for ever; one that could not even be opened, and
        so is not among ``logs``, stays marked)."""
        present: dict[str, set[tuple[str, int]]] = {}
        for log in logs:
            present.setdefault(self._data_dir(log), set()).add((log.topic, log.partition))
        with self._lock:
            for data_dir, keys in present.items():
                marked = self._uncleanable.get(data_dir)
                if marked:
                    gone = [
                        k
                        for k, mark in marked.items()
                        if k not in keys and not os.path.isdir(mark.directory)
                    ]
                    for key in gone:
                        del marked[key]

    def forget(self, log: Any) -> None:
        """Clear the mark (the partition was repaired, or deleted and created again)."""
        with self._lock:
            self._uncleanable.get(self._data_dir(log), {}).pop((log.topic, log.partition), None)


#: the manager :func:`~kafkalog.log.cleaner.clean_filthiest` uses when given none (one
#: per process, as a broker has one cleaner)
DEFAULT_MANAGER = CleanerManager()
