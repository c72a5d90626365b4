"""Filters on ``topic``, ``partition``, ``offset`` and ``timestamp`` turned into pruning bounds.

Every filter is still handed back to Spark, which evaluates it on the rows read, so pruning only
has to be safe (never drop a matching row), not exact. Offsets, partitions and topics prune
exactly. A lower timestamp bound starts the read through the time index (Kafka's
``offsetsForTimes``: every record before that offset is older). Neither index proves where an
upper timestamp bound ends a read (records may arrive in any timestamp order), so both bounds
go to the tasks, which skip every batch whose header proves it holds no record between them
(``plan.task_timestamps``, ``records/header_prune.py``): exact, whatever the order.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
    StringStartsWith,
)

INT64_MAX = 2**63 - 1


@dataclass
class Bounds:
    """What the filters allow: offsets [lo, hi), timestamps [lo, hi) in ms, topics, partitions."""

    offset_lo: int = 0
    offset_hi: int = INT64_MAX
    ts_lo: int | None = None
    ts_hi: int | None = None
    topics: set[str] | None = None
    partitions: set[int] | None = None
    partition_lo: int = -(2**31)
    partition_hi: int = 2**31
    topic_prefixes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def allows_partition(self, topic: str, partition: int) -> bool:
        if self.topics is not None and topic not in self.topics:
            return False
        if not all(topic.startswith(p) for p in self.topic_prefixes):
            return False
        if self.partitions is not None and partition not in self.partitions:
            return False
        return self.partition_lo <= partition < self.partition_hi

    @property
    def empty(self) -> bool:
        return self.offset_lo >= self.offset_hi


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MICROSECOND = dt.timedelta(microseconds=1)


def _millis(value: Any) -> int | None:
    """The millisecond a timestamp literal falls in (floored), exactly.

    Not ``int(value.timestamp() * 1000)``: that float is a hair below a whole millisecond for
    some values (``2107-12-14 20:50:43.320`` gives ...319), which made ``timestamp <= x`` end a
    read before the record at ``x``; and ``int`` rounds a negative one up, not down. Spark hands
    aware UTC datetimes; a naive one is taken in the worker's local time, as Python does.
    """
    if isinstance(value, dt.datetime):
        aware = value if value.tzinfo is not None else value.astimezone()
        return (aware - _EPOCH) // _MICROSECOND // 1000
    return None


def _plain(f: Filter) -> Filter:
    """``f`` with what cannot match taken out, for the same pruning: ``col <=> v`` with a
    value is ``col = v`` (these columns are never null), and a null in an IN list matches no
    row (it only makes a non-matching row null instead of false, and both are dropped)."""
    if isinstance(f, EqualNullSafe) and f.value is not None:
        return EqualTo(f.attribute, f.value)
    if isinstance(f, In) and any(v is None for v in f.value):
        return In(f.attribute, tuple(v for v in f.value if v is not None))
    return f


def bounds_from_filters(filters: list[Filter]) -> Bounds:
    b = Bounds()
    for f in map(_plain, filters):
        attr = getattr(f, "attribute", None)
        if not attr or len(attr) != 1:
            continue
        name = attr[0].lower()
        if name == "offset":
            _offset(b, f)
        elif name == "timestamp":
            _timestamp(b, f)
        elif name == "partition":
            _partition(b, f)
        elif name == "topic":
            if isinstance(f, EqualTo) and isinstance(f.value, str):
                b.topics = {f.value} if b.topics is None else b.topics & {f.value}
            elif isinstance(f, In) and all(isinstance(v, str) for v in f.value):
                vals = set(f.value)
                b.topics = vals if b.topics is None else b.topics & vals
            elif isinstance(f, StringStartsWith) and isinstance(f.value, str):
                b.topic_prefixes.append(f.value)  # topic like 'orders%', startswith(topic, ..)
    return b


def _offset(b: Bounds, f: Filter) -> None:
    v = getattr(f, "value", None)
    if isinstance(f, In):
        vals = [x for x in f.value if isinstance(x, int)]
        if len(vals) == len(f.value) and vals:
            b.offset_lo = max(b.offset_lo, min(vals))
            b.offset_hi = min(b.offset_hi, max(vals) + 1)
        return
    if not isinstance(v, int) or isinstance(v, bool):
        return
    if isinstance(f, EqualTo):
        b.offset_lo, b.offset_hi = max(b.offset_lo, v), min(b.offset_hi, v + 1)
    elif isinstance(f, GreaterThan):
        b.offset_lo = max(b.offset_lo, v + 1)
    elif isinstance(f, GreaterThanOrEqual):
        b.offset_lo = max(b.offset_lo, v)
    elif isinstance(f, LessThan):
        b.offset_hi = min(b.offset_hi, v)
    elif isinstance(f, LessThanOrEqual):
        b.offset_hi = min(b.offset_hi, v + 1)


def _partition(b: Bounds, f: Filter) -> None:
    if isinstance(f, In):
        vals = {x for x in f.value if isinstance(x, int)}
        if len(vals) == len(set(f.value)):
            b.partitions = vals if b.partitions is None else b.partitions & vals
        return
    v = getattr(f, "value", None)
    if not isinstance(v, int) or isinstance(v, bool):
        return
    if isinstance(f, EqualTo):
        b.partitions = {v} if b.partitions is None else b.partitions & {v}
    elif isinstance(f, GreaterThan):
        b.partition_lo = max(b.partition_lo, v + 1)
    elif isinstance(f, GreaterThanOrEqual):
        b.partition_lo = max(b.partition_lo, v)
    elif isinstance(f, LessThan):
        b.partition_hi = min(b.partition_hi, v)
    elif isinstance(f, LessThanOrEqual):
        b.partition_hi = min(b.partition_hi, v + 1)


def _timestamp(b: Bounds, f: Filter) -> None:
    if isinstance(f, In):
        vals = [_millis(x) for x in f.value]
        known = [v for v in vals if v is not None]
        if known and len(known) == len(vals):
            first, last = min(known), max(known) + 1
            b.ts_lo = first if b.ts_lo is None else max(b.ts_lo, first)
            b.ts_hi = last if b.ts_hi is None else min(b.ts_hi, last)
        return
    ms = _millis(getattr(f, "value", None))
    if ms is None:
        return
    # microseconds below a millisecond are truncated: widen by one ms on the safe side
    lo: int | None
    hi: int | None
    if isinstance(f, EqualTo):
        lo, hi = ms, ms + 1
    elif isinstance(f, GreaterThan | GreaterThanOrEqual):
        lo, hi = ms, None
    elif isinstance(f, LessThan | LessThanOrEqual):
        lo, hi = None, ms + 1
    else:
        return
    if lo is not None:
        b.ts_lo = lo if b.ts_lo is None else max(b.ts_lo, lo)
    if hi is not None:
        b.ts_hi = hi if b.ts_hi is None else min(b.ts_hi, hi)
