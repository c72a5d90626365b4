"""One definition of where a log's valid bytes end, and whether what follows is a torn tail or
damage.

A crash can leave only one thing behind: the last batch of the last segment written in part
(cut off, zero-filled, or with a CRC that no longer matches), with nothing valid after it.
That is the end of the log: a read stops there and a writable open's recovery cuts it, as
Kafka does. Anything else that is not whole, valid batches is damage (a flipped byte, a hole,
garbage, an absurd length, bytes that fail where valid batches follow, a bad segment that is not
the last): Kafka can afford to truncate there because a follower refills the log from its
leader; kafkalog has no replica, so it raises :class:`~kafkalog.errors.DamagedLogError` naming
the file and the byte, and leaves the bytes where they are for ``kafkalog repair``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from kafkalog.errors import BatchTooLargeError, CorruptRecordError, DamagedLogError
from kafkalog.log.segment import LogSegment, offset_order_problem
from kafkalog.records.reader import IncompleteTail

logger = logging.getLogger("kafkalog.log")


@dataclass(frozen=True)
class Problem:
    """The first place in a segment where its bytes stop being whole, valid batches."""

    path: str
    position: int  # the first byte of the entry that is not whole and valid
    reason: str
    expected_offset: int | None  # the offset the entry there should start at, when known
    declared_size: int | None = None  # for an entry cut off by the end of the file
    absurd: bool = False  # a length no writer can have written (larger than any batch)

    def describe(self) -> str:
        if self.expected_offset is None:
            return self.reason
        return f"{self.reason} (expected a batch from offset {self.expected_offset})"


def first_problem(
    seg: LogSegment, start: int = 0, expected_offset: int | None = None
) -> Problem | None:
    """Walk the entries of ``seg`` from byte ``start`` (an entry boundary), every CRC checked;
    the first entry that is not whole and valid, or None when the file ends on a whole one."""
    tail: list[IncompleteTail | None] = []
    position = start
    expected = seg.base_offset if start == 0 and expected_offset is None else expected_offset
    previous = seg.base_offset - 1 if expected is None else expected - 1
    # the entry before the last, for an offset that is out of order: a base offset is outside
    # the CRC, and when the entry before goes back into line without the last one, the last
    # one is the damaged one (its flipped offset only shows at the next entry)
    before: tuple[int, int, int | None] | None = None  # (position, previous, expected) then
    try:
        for entry in seg.log.entries(start, limits=seg.limits, verify_crc=True, tail=tail):
            wrong = offset_order_problem(entry, previous, seg.base_offset)
            if wrong is not None:
                if (
                    before is not None
                    and offset_order_problem(entry, before[1], seg.base_offset) is None
                ):
                    at, _, was_expected = before
                    return Problem(
                        seg.log.path,
                        at,
                        f"non-consecutive offsets: the batch at byte {at} holds offsets past "
                        f"the batch after it ({wrong})",
                        was_expected,
                    )
                return Problem(seg.log.path, position, wrong, expected)
            before = (position, previous, expected)
            previous = entry.last_offset
            position = entry.position + entry.size_in_bytes
            expected = entry.last_offset + 1
    except CorruptRecordError as e:
        return Problem(
            seg.log.path,
            position,
            e.reason,
            expected,
            absurd=isinstance(e, BatchTooLargeError),
        )
    cut = tail[0] if tail else None
    if cut is None:
        return None
    declared = cut.declared_size
    what = "entry header" if declared is None else f"entry of {declared} bytes"
    return Problem(
        seg.log.path,
        cut.position,
        f"incomplete {what}: only {cut.available} bytes before the end of the file",
        expected,
        declared_size=declared,
    )


def check_tail(seg: LogSegment, problem: Problem, *, is_last: bool, directory: str) -> None:
    """Return when ``problem`` is a torn tail (see the module doc); raise
    :class:`DamagedLogError` otherwise."""
    if problem.absurd:
        why: str | None = "with a length no writer can have written"
    elif not is_last:
        why = "in a segment that is not the last one (later segments follow it)"
    else:
        why = seg.cut_off_damage(problem.position, problem.expected_offset)
    if why is not None:
        raise damaged(problem, directory, why)


def damaged(problem: Problem, directory: str, why: str) -> DamagedLogError:
    return DamagedLogError.found(
        f"{problem.describe()}, {why}",
        path=problem.path,
        position=problem.position,
        partition=directory,
    )


def log_cut(problem: Problem, size: int) -> None:
    """Every byte recovery cuts is said, with the file, where and why."""
    logger.warning(
        "cutting the torn tail of %s: %d bytes from byte %d (%s)",
        problem.path,
        size - problem.position,
        problem.position,
        problem.describe(),
    )
