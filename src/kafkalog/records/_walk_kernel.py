"""The record walk compiled: :func:`kafkalog.records.walk_body.walk_records` itself, given to
numba as it stands (~8 ns a record instead of ~1 us interpreted; see :mod:`record_walk`).

Importing ``_kernels`` tells numba the compiled form of the varint readers the walk calls;
:func:`wrap_long` compiles as the identity, because an int64 sum wraps by itself.

numba's cache (``cache=True``) is keyed on the source file of the function it compiles,
``walk_body.py``: an edit of ``varint.py`` or ``_kernels.py`` alone leaves a stale compiled
walk in ``__pycache__`` (an installed package changes every file at once, so only a
developer's tree is affected: delete ``records/__pycache__/*.nb?`` after such an edit).
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.extending import overload

from kafkalog.records import _kernels  # noqa: F401 (registers the varint readers with numba)
from kafkalog.records.walk_body import walk_records, wrap_long


@overload(wrap_long, inline="always")
def _wrap_long_compiled(n):  # type: ignore[no-untyped-def]
    return lambda n: n


walk_v2_records = njit(cache=True, nogil=True)(walk_records)


@njit(cache=True, nogil=True)
def walk_v2_plain(buf, start, end, count, base_ts, need_key):  # type: ignore[no-untyped-def]
    """The append fast path's walk (no timestamp bounds, nothing collected), with six
    arguments: numba's dispatch costs per argument. Returns (0 when sound, largest
    timestamp)."""
    result = walk_v2_records(
        buf, start, end, count, base_ts, 0, False, need_key, False, 0, 0, np.empty(0, np.int8)
    )
    return result[0] | result[3], result[5]
