"""Which log entries (v2 batches, v0/v1 messages and wrappers) cannot hold a row a reader wants,
proved from their headers, so that the columnar decoder skips them.

A reader wanting offsets [offset_lo, offset_hi) and timestamps [ts_lo, ts_hi) (ms; ``None``
unbounded) skips an entry only when what its header proves rules every one of its records out.
What a header proves (spec §8.5, §8.8):

- **v2, offsets**: base offset .. base offset + last offset delta.
- **v2, LogAppendTime**: every record reads as the max timestamp (the broker's append time):
  both bounds are exact.
- **v2, CreateTime**: the max timestamp is the largest record timestamp (the producer writes it
  and the broker's validation rewrites it), so a lower bound is exact from the header. The base
  timestamp is the *first* record's, not the smallest (later records may have negative deltas;
  with the cleaner's delete-horizon bit it is the horizon): an entry whose base timestamp is at
  or past the upper bound is skipped only after a walk of its records' timestamp deltas (its
  records area inflated first when compressed) finds none below it.
- **v0/v1 uncompressed message**: its offset and timestamp (v0: none, read as -1) are its
  record's: exact.
- **v1 compressed wrapper**: its timestamp is the largest of its records' (CreateTime: the
  producer and the broker write the inner maximum; LogAppendTime: inner v1 records read as
  the wrapper's, inner v0 ones as -1): the lower timestamp bound only. Its offset is not
  always its last record's (a v1 wrapper at offset 0 from old librdkafka producers), so
  offsets never skip it. A v0 wrapper proves nothing (no timestamp; readers accept inner
  records of either magic).

An entry is skipped only when its checksum matches (the timestamps and attributes are inside it;
without it a flipped bit could hide records) and its header offsets follow the entry before it
and precede the one after (a base offset lies outside the checksum): anything else is decoded,
so damage is reported exactly as without skipping.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kafkalog.errors import KafkalogError
from kafkalog.records import _kernels as K
from kafkalog.records import compression
from kafkalog.records.batch import HEADER_SIZE, LOG_OVERHEAD
from kafkalog.records.crc import crc32, crc32c
from kafkalog.records.types import Compression, Limits

# the columns of ``scan_entries``' header rows (see ``columnar``)
_BASE_OFFSET, _LENGTH, _MAGIC, _CRC, _ATTRS, _LOD, _BASE_TS, _MAX_TS, _COUNT = (
    0,
    1,
    3,
    4,
    5,
    6,
    7,
    8,
    12,
)
_LOG_APPEND_TIME = 0x08
_INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class RowBounds:
    """The rows a reader wants: offsets in [offset_lo, offset_hi), timestamps (ms) in
    [ts_lo, ts_hi); ``None`` is unbounded. Rows outside may still be returned (a skip needs a
    proof): a reader filters what it gets as before."""

    offset_lo: int | None = None
    offset_hi: int | None = None
    ts_lo: int | None = None
    ts_hi: int | None = None

    @property
    def bounded(self) -> bool:
        return any(b is not None for b in (self.offset_lo, self.offset_hi, self.ts_lo, self.ts_hi))


def unmatched(
    data: np.ndarray,
    positions: np.ndarray,
    fields: np.ndarray,
    bounds: RowBounds,
    limits: Limits,
    *,
    verify_crc: bool = True,
) -> np.ndarray:
    """A mask over the scanned entries (``positions``, header ``fields`` as ``scan_entries``
    fills them) of ``data``: True where the entry provably holds no row within ``bounds``."""
    n = len(positions)
    skip = np.zeros(n, np.bool_)
    if n == 0 or not bounds.bounded:
        return skip
    magic = fields[:, _MAGIC]
    v2 = magic == 2
    lod = fields[:, _LOD]
    base = fields[:, _BASE_OFFSET]
    # header offsets: a legacy entry's offset is its (last inner) record's
    last = np.where(v2 & (lod >= 0) & (base <= _INT64_MAX - np.maximum(lod, 0)), base + lod, base)
    legacy_ts, legacy_exact, legacy_single, legacy_sane = _legacy_headers(
        data, positions, fields[:, _LENGTH], magic
    )
    first = np.where(v2 | legacy_single, base, np.iinfo(np.int64).min)
    # the header's offsets follow the entry before and precede the one after: else decode
    ordered = (last >= base) & np.where(v2, lod >= 0, legacy_sane)
    if n > 1:
        step = np.where(v2[1:] | legacy_single[1:], first[1:] > last[:-1], last[1:] > last[:-1])
        ordered[1:] &= step
        ordered[:-1] &= step
    # a compressed v0/v1 wrapper's offset is not always its last record's (a v1 wrapper at
    # offset 0 from old librdkafka; v0 inner offsets are stored absolute): offsets never skip it
    if bounds.offset_lo is not None:
        skip |= (v2 | legacy_single) & (last < bounds.offset_lo)
    if bounds.offset_hi is not None:
        skip |= (v2 | legacy_single) & (first >= bounds.offset_hi)
    max_ts = np.where(v2, fields[:, _MAX_TS], legacy_ts)
    # every record's timestamp is the header's (LogAppendTime, a lone v1 message, v0)
    exact = np.where(v2, (fields[:, _ATTRS] & _LOG_APPEND_TIME) != 0, legacy_exact)
    if bounds.ts_lo is not None:
        skip |= max_ts < bounds.ts_lo
    if bounds.ts_hi is not None:
        skip |= exact & (max_ts >= bounds.ts_hi)
        walk = v2 & ~exact & ~skip & ordered & (fields[:, _BASE_TS] >= bounds.ts_hi)
        for k in np.flatnonzero(walk).tolist():
            low = _smallest_timestamp(data, int(positions[k]), fields[k], limits)
            skip[k] = low is not None and low >= bounds.ts_hi
    skip &= ordered
    if verify_crc:
        for k in np.flatnonzero(skip).tolist():
            skip[k] = _crc_matches(data, int(positions[k]), fields[k])
    return skip


def _legacy_headers(
    data: np.ndarray, positions: np.ndarray, sizes: np.ndarray, magic: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For each v0/v1 entry: its timestamp (-1 for v0), whether it is every record's, whether
    the entry is a single record (uncompressed), and whether its header can be read at all
    (long enough for its fields, a legacy codec: else it is decoded, and the decoder says)."""
    n = len(positions)
    ts = np.full(n, -1, np.int64)
    exact = np.zeros(n, np.bool_)
    single = np.zeros(n, np.bool_)
    sane = np.zeros(n, np.bool_)
    for k in np.flatnonzero(magic < 2).tolist():
        p = int(positions[k])
        attrs = int(data[p + 17])
        # crc, magic, attributes, [timestamp,] key and value lengths
        sane[k] = sizes[k] >= (14 if magic[k] == 0 else 22) and attrs & 0x07 <= 3
        if not sane[k]:
            continue
        single[k] = attrs & 0x07 == 0
        if magic[k] == 0:
            exact[k] = bool(single[k])
            ts[k] = -1 if single[k] else _INT64_MAX
            continue
        ts[k] = int.from_bytes(data[p + 18 : p + 26].tobytes(), "big", signed=True)
        if not single[k]:
            ts[k] = max(int(ts[k]), -1)  # inner v0 records read as -1
        # a wrapper's inner records may be v0 ones (-1) even with LogAppendTime: only its
        # largest timestamp is proved
        exact[k] = bool(single[k])
    return ts, exact, single, sane


def _smallest_timestamp(data: np.ndarray, p: int, f: np.ndarray, limits: Limits) -> int | None:
    """The smallest record timestamp of the v2 batch at ``p``, or None when it cannot be
    found without an error (the decoder then meets the batch and names the error)."""
    count = int(f[_COUNT])
    end = p + LOG_OVERHEAD + int(f[_LENGTH])
    codec = int(f[_ATTRS]) & 0x07
    if count < 0 or codec > 4:
        return None
    area: np.ndarray = data
    start = p + HEADER_SIZE
    if codec != 0:
        body = data[start:end]
        try:
            raw = compression.decompress_buffer(
                Compression(codec), body, magic=2, limit=limits.decompressed_bound(len(body))
            )
        except KafkalogError:
            return None
        area, start, end = np.frombuffer(raw, np.uint8), 0, len(raw)
    walked, low = K.min_timestamp(area, start, end, count, int(f[_BASE_TS]))
    return int(low) if walked else None


def _crc_matches(data: np.ndarray, p: int, f: np.ndarray) -> bool:
    end = p + LOG_OVERHEAD + int(f[_LENGTH])
    if f[_MAGIC] == 2:
        return crc32c(data[p + 21 : end]) == int(f[_CRC])
    stored = int.from_bytes(data[p + 12 : p + 16].tobytes(), "big")
    return crc32(data[p + 16 : end]) == stored
