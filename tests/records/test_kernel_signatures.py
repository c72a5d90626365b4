"""The encode kernels compile once per process whatever columns a table has.

numba compiles (and caches) one machine-code version per argument type, and types a read-only
array apart from a writable one; each extra ``write_batches`` version cost ~6 s in every test
worker and subprocess on a fresh clone, so callers hand the kernels one array kind.
"""

from __future__ import annotations

import pyarrow as pa
from numba import typeof

from kafkalog.records.columnar_encode import _timestamps_ms, encode_arrow


def test_timestamps_given_or_defaulted_share_one_compiled_encoder() -> None:
    """The timestamps array the kernels get has one numba type whether the table has the
    column or not (what the process compiled before does not matter: the types decide)."""
    column = pa.array([1, 2, None], pa.int64())
    defaulted = typeof(_timestamps_ms(None, 3, 7))
    assert typeof(_timestamps_ms(column, 3, 7)) == defaulted, defaulted
    values = pa.array([b"a", b"bb", None], pa.binary())
    with_ts = pa.table({"value": values, "timestamp": column})
    without_ts = pa.table({"value": values})
    first = encode_arrow(with_ts, default_timestamp=7)
    second = encode_arrow(without_ts, default_timestamp=7)
    assert bytes(first.data) != bytes(second.data)  # both really encoded, with their timestamps
