"""The compiled walk behind :meth:`LogSegment.append_run`: how many of a run of batches the
active segment takes without a roll, and the index entries they get.

An embedded log's buffered appends reach the segment as thousands of one-record batches at
once. Appended one call at a time, each would pass :meth:`LogSegment.try_append`'s checks and
get an index entry every ``index.interval.bytes``; doing that per batch in Python costs more than
encoding the record. The walk (:func:`kafkalog.log.index_interval.plan_run`) makes the same
checks and the same entries, batch by batch, and stops at the first batch that would need
anything else (a roll, a full index), which the caller then appends the usual way: the files are
the ones per-call appends write.

The walk and the ``index.interval.bytes`` rule it calls are written once, in plain Python, in
``index_interval`` (which the segment imports without loading numba); they are compiled here,
the rule inlined into the walk.
"""

from __future__ import annotations

from numba import njit
from numba.extending import register_jitable

from kafkalog.log import index_interval as _rules
from kafkalog.log.index_interval import STATE_FIELDS as STATE_FIELDS

register_jitable(inline="always")(_rules.entry_due)  # so the walk can call it compiled
plan_run = njit(cache=True, nogil=True)(_rules.plan_run)
