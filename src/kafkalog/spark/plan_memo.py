"""Each partition's share of a batch plan, kept by a long-lived planner while the partition's
files stay as they were (issue 31: a count over a log being written to re-plans only the
partitions written to).

The JVM source's planner (:mod:`kafkalog.spark.jvm_bridge`) lives as long as the driver, and
every query asks it for a plan: opening each partition's log (reading the tail of every
segment), resolving the offsets and cutting the byte ranges costs ~2 ms per partition of 13
segments, most of a warm count's planning. What a partition contributes to a plan (its offset
range, its segment pieces, its aborted transactions) is a function of the options, the pushed
filters and the files it was read from; so it is kept, and used again while a *look* at those
files is unchanged:

- the partition directory, each of its entries (segments, indexes, snapshots, checkpoints,
  markers), and each file of its data directory (the checkpoints a log reads at open): name,
  device, inode, size, mtime and ctime, taken *before* planning, so a change made meanwhile
  shows at the next look;
- every one of those times older than the settle margin (``settle_ms``, 2 s; the JVM sends
  ``spark.kafkalog.jvm.planCache.settleMs``): a write in the same clock tick as the look could
  leave a file's times unchanged, but not those of a file settled before it (git's racy-entry
  reasoning, as ``KeptAnswers.java``'s). An append changes a segment's size and times, a roll
  or a deletion the directory's entries, a rewrite (the cleaner's swap, a checkpoint's rename)
  an inode, a byte written in place and the mtime put back a ctime.

A partition being written to is therefore planned every time; the others of the same read are
not. Never kept: a partition whose planning logged anything (failOnDataLoss=false's warnings are
said at every plan) or failed (errors are raised at every plan), remote paths (no ctime).
"""

from __future__ import annotations

import logging
import os
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TypeVar

from kafkalog.log.segment_facts import SegmentFacts

#: how old (ms) every file time must be for a partition's plan to be kept
SETTLE_MS = 2000
#: partitions' plans kept at most (the least recently used go)
MAX_KEPT = 4096

T = TypeVar("T")
#: one file as a look sees it: name, device, inode, size, mtime ns, ctime ns
Entry = tuple[str, int, int, int, int, int]


class _Logged(logging.Handler):
    """Counts the records kafkalog's loggers emit while a partition is planned."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


def _stat(path: str, name: str) -> Entry:
    st = os.stat(path)
    return (name, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _entries(directory: str, files_only: bool) -> list[Entry]:
    out: list[Entry] = []
    with os.scandir(directory) as it:
        for entry in it:
            if files_only and entry.is_dir():
                continue
            st = entry.stat()
            out.append(
                (entry.name, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            )
    out.sort()
    return out


class PartitionMemo:
    """Partitions' plans by (directory, question), each with the look it was made after."""

    def __init__(self) -> None:
        self._kept: OrderedDict[tuple[str, str], tuple[tuple[Entry, ...], object]] = OrderedDict()
        #: the data directory's files, looked at once per plan (see :meth:`begin`)
        self._parents: dict[str, list[Entry]] = {}
        #: sealed segments' verified ends, for the partitions planned again
        self.segments = SegmentFacts()

    def begin(self) -> None:
        """A new plan: data directories are looked at again."""
        self._parents.clear()

    def _look(self, directory: str, settle_ms: int) -> tuple[tuple[Entry, ...], bool] | None:
        """The look at a partition directory and whether it is settled; None: unreadable."""
        try:
            parent = os.path.dirname(os.path.abspath(directory))
            if parent not in self._parents:
                self._parents[parent] = _entries(parent, files_only=True)
            seen = [_stat(directory, "."), *_entries(directory, files_only=False)]
            seen.extend(("../" + e[0], *e[1:]) for e in self._parents[parent])
        except OSError:
            return None
        before = time.time_ns() - settle_ms * 1_000_000
        settled = all(e[4] < before and e[5] < before for e in seen)
        return tuple(seen), settled

    def plan(self, directory: str, question: str, settle_ms: int, make: Callable[[], T]) -> T:
        """``make()``'s answer for this partition and question: the one kept, while the
        partition's look is as it was when it was made; else made now (and kept, when the
        look was settled and making it logged nothing)."""
        key = (directory, question)
        look = self._look(directory, settle_ms)
        kept = self._kept.get(key)
        if kept is not None and look is not None and kept[0] == look[0]:
            self._kept.move_to_end(key)
            return kept[1]  # type: ignore[return-value]
        logged = _Logged()
        logger = logging.getLogger("kafkalog")
        logger.addHandler(logged)
        try:
            answer = make()
        finally:
            logger.removeHandler(logged)
        if look is not None and look[1] and not logged.count:
            self._kept[key] = (look[0], answer)
            self._kept.move_to_end(key)
            while len(self._kept) > MAX_KEPT:
                self._kept.popitem(last=False)
        else:
            self._kept.pop(key, None)
        return answer
