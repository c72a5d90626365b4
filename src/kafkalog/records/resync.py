"""Finding the next whole, valid entry in bytes that are not one: what tells a torn tail
(nothing valid after it: a crash's leftovers) from damage (valid batches further on: a flipped
length, a hole, garbage in the middle).

Positions are tried only where the bytes look like an entry header (magic 0, 1 or 2 and a
length an entry can have that fits before the end), so zeros and garbage are passed over with
a vectorised test; each candidate is then parsed with its CRC checked.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kafkalog.errors import CorruptRecordError
from kafkalog.records.batch import LOG_OVERHEAD
from kafkalog.records.reader import MIN_ENTRY_SIZE, LogReader
from kafkalog.records.types import Limits

_CHUNK = 8 * 1024 * 1024
_HEADER = 17  # bytes of an entry up to and including its magic byte
_MAX_CANDIDATES = 100_000  # header-shaped positions tried before giving up


def next_valid_entry(
    read: Callable[[int, int], bytes], end: int, start: int, limits: Limits
) -> int | None:
    """The first position in [start, end) where a whole entry with a valid CRC starts, the
    bytes read by ``read(position, length)``; None when there is none."""
    tried = 0
    chunk_start = start
    while chunk_start + LOG_OVERHEAD + MIN_ENTRY_SIZE <= end:
        data = read(chunk_start, min(_CHUNK + _HEADER, end - chunk_start))
        arr = np.frombuffer(data, dtype=np.uint8)
        n = len(arr) - _HEADER
        if n <= 0:
            return None
        lengths = (
            (arr[8 : 8 + n].astype(np.int64) << 24)
            | (arr[9 : 9 + n].astype(np.int64) << 16)
            | (arr[10 : 10 + n].astype(np.int64) << 8)
            | arr[11 : 11 + n].astype(np.int64)
        )
        entry_ends = np.arange(n, dtype=np.int64) + chunk_start + LOG_OVERHEAD + lengths
        shaped = (
            (arr[16 : 16 + n] <= 2)
            & (lengths >= MIN_ENTRY_SIZE)
            & (lengths + LOG_OVERHEAD <= limits.max_batch_bytes)
            & (entry_ends <= end)
        )
        for rel in np.flatnonzero(shaped).tolist():
            tried += 1
            if tried > _MAX_CANDIDATES:
                return None
            at = chunk_start + int(rel)
            if _whole_valid_entry(read(at, int(lengths[rel]) + LOG_OVERHEAD), limits):
                return at
        chunk_start += n
    return None


def _whole_valid_entry(data: bytes, limits: Limits) -> bool:
    reader = LogReader(data, limits=limits, verify_crc=True)
    try:
        entries = list(reader)
    except CorruptRecordError:
        return False
    return len(entries) == 1 and reader.incomplete_tail is None
