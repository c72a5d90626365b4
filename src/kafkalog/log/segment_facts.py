"""What a read-only reader verified of a sealed segment's files, kept while they stay as they
were (issue 31: a fresh plan re-checked every sealed segment's end on every query).

A read to a sealed segment's end checks that its last batch ends below the next segment's base
offset (``LocalLog._check_end_below``: the offset index loaded, the batches after its last entry
walked). That answer is a function of the segment's ``.log`` and ``.index`` bytes and the next
base; so a long-lived reader (the JVM source's planner) keeps it by the two files' *stamps* —
device, inode, size, mtime and ctime, taken before the check — and takes it again while a new
stamp is equal, without opening either file. Kept only when every time in the stamps is older
than the settle margin: a write in the same clock tick as the stamp could leave the times
unchanged, never those of a file settled before it (git's racy-entry reasoning, as
``plan_memo`` and ``BatchSummaries.java``). An append, a truncation or a cleaner's swap changes
a size, a time or an inode; a byte written in place with its mtime put back a ctime. Only a
check that passed is kept (damage is found and said at every plan); remote files (no ctime)
are never kept. A live log's active segment is never sealed, so always read anew.
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict

#: how old (ms) every time in a stamp must be for a fact to be kept
SETTLE_MS = 2000
#: segments kept at most (the least recently used go)
MAX_KEPT = 65536

#: one file as a stamp sees it: device, inode, size, mtime ns, ctime ns
Stamp = tuple[int, int, int, int, int]


def stamp_of(path: str) -> Stamp | None:
    """``path``'s stamp, or None (gone, unreadable: nothing is taken or kept)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class SegmentFacts:
    """Sealed segments' verified ends by ``.log`` path, each with the stamps it was found
    under. Thread-safe enough for one planner (a dict's single operations)."""

    def __init__(self, settle_ms: int = SETTLE_MS) -> None:
        self.settle_ms = settle_ms
        self._ends: OrderedDict[str, tuple[Stamp, Stamp | None, int]] = OrderedDict()

    def stamps(self, log_path: str, index_path: str) -> tuple[Stamp, Stamp | None] | None:
        """The stamps of a segment's ``.log`` and ``.index`` (None for an index that is not
        there: a read-only segment may lack it), or None when the ``.log`` cannot be stamped."""
        log = stamp_of(log_path)
        if log is None:
            return None
        return log, stamp_of(index_path)

    def settled(self, stamps: tuple[Stamp, Stamp | None]) -> bool:
        before = time.time_ns() - self.settle_ms * 1_000_000
        return all(s is None or (s[3] < before and s[4] < before) for s in stamps)

    def end(self, log_path: str, stamps: tuple[Stamp, Stamp | None]) -> int | None:
        """The offset after the segment's last batch, as verified under equal stamps, or
        None (not kept, or the files changed since)."""
        kept = self._ends.get(log_path)
        if kept is None or (kept[0], kept[1]) != stamps:
            return None
        self._ends.move_to_end(log_path)
        return kept[2]

    def keep(self, log_path: str, stamps: tuple[Stamp, Stamp | None], end: int) -> None:
        """Keep ``end`` for the segment when ``stamps`` (taken before it was found) are
        settled; forget any older fact otherwise."""
        if not self.settled(stamps):
            self._ends.pop(log_path, None)
            return
        self._ends[log_path] = (stamps[0], stamps[1], end)
        self._ends.move_to_end(log_path)
        while len(self._ends) > MAX_KEPT:
            self._ends.popitem(last=False)
