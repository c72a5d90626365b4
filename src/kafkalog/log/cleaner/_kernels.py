"""Compiled loops of the log cleaner: the records of a v2 records area walked once, keys hashed
into the offset map, and the records a cleaning keeps re-encoded against a new base timestamp.

Why compiled: a cleaning touches every record of the dirty section twice (once to build the
offset map, once to filter), and a Python object per record costs more than the rest of the
cleaning together. The batch headers, CRCs and codecs stay in Python (one call per batch).

Every walk is bounded by the area it is given and reports malformed bytes with a negative
result (the position, minus one), which the caller turns into a ``kafkalog`` error naming the
file: nothing here trusts a length field.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from kafkalog.records._kernels import _put_uvarint

_U64 = np.uint64
_MASK32 = 0xFFFFFFFF

# record flags written by scan_records
HAS_KEY = 1
HAS_VALUE = 2

_C1 = np.uint64(0x87C37B91114253D5)
_C2 = np.uint64(0x4CF5AD432745937F)


@njit(cache=True, nogil=True, inline="always")
def _rotl(x, r):  # type: ignore[no-untyped-def]
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


@njit(cache=True, nogil=True, inline="always")
def _fmix(k):  # type: ignore[no-untyped-def]
    k ^= k >> np.uint64(33)
    k *= np.uint64(0xFF51AFD7ED558CCD)
    k ^= k >> np.uint64(33)
    k *= np.uint64(0xC4CEB9FE1A85EC53)
    k ^= k >> np.uint64(33)
    return k


@njit(cache=True, nogil=True, inline="always")
def _word(buf, p):  # type: ignore[no-untyped-def]
    """Eight bytes at ``p`` as a little-endian uint64."""
    w = np.uint64(0)
    for i in range(8):
        w |= np.uint64(buf[p + i]) << np.uint64(8 * i)
    return w


@njit(cache=True, nogil=True)
def hash128(buf, start, n, seed):  # type: ignore[no-untyped-def]
    """MurmurHash3 x64 128 of ``buf[start:start + n]`` with ``seed`` (uint64): the key digest
    of the offset map (Kafka's map keeps a 16-byte MD5; any 128-bit digest serves, and this
    one runs in the compiled loop)."""
    h1 = seed
    h2 = seed
    nblocks = n // 16
    for i in range(nblocks):
        p = start + i * 16
        k1 = _word(buf, p)
        k2 = _word(buf, p + 8)
        k1 *= _C1
        k1 = _rotl(k1, 31)
        k1 *= _C2
        h1 ^= k1
        h1 = _rotl(h1, 27)
        h1 += h2
        h1 = h1 * np.uint64(5) + np.uint64(0x52DCE729)
        k2 *= _C2
        k2 = _rotl(k2, 33)
        k2 *= _C1
        h2 ^= k2
        h2 = _rotl(h2, 31)
        h2 += h1
        h2 = h2 * np.uint64(5) + np.uint64(0x38495AB5)
    tail = start + nblocks * 16
    rest = n & 15
    k1 = np.uint64(0)
    k2 = np.uint64(0)
    for i in range(rest - 1, 7, -1):
        k2 ^= np.uint64(buf[tail + i]) << np.uint64(8 * (i - 8))
    if rest > 8:
        k2 *= _C2
        k2 = _rotl(k2, 33)
        k2 *= _C1
        h2 ^= k2
    for i in range(min(rest, 8) - 1, -1, -1):
        k1 ^= np.uint64(buf[tail + i]) << np.uint64(8 * i)
    if rest > 0:
        k1 *= _C1
        k1 = _rotl(k1, 31)
        k1 *= _C2
        h1 ^= k1
    h1 ^= np.uint64(n)
    h2 ^= np.uint64(n)
    h1 += h2
    h2 += h1
    h1 = _fmix(h1)
    h2 = _fmix(h2)
    h1 += h2
    h2 += h1
    return h1, h2


@njit(cache=True, nogil=True, inline="always")
def _uvarint(buf, pos, end):  # type: ignore[no-untyped-def]
    """Unsigned varint of at most 10 bytes at ``pos``; (value, next pos), next pos -1 when it
    runs past ``end`` or is too long."""
    result = np.uint64(0)
    shift = 0
    while True:
        if pos >= end or shift > 63:
            return np.uint64(0), -1
        b = buf[pos]
        pos += 1
        result |= np.uint64(b & 0x7F) << np.uint64(shift)
        if b < 0x80:
            return result, pos
        shift += 7


@njit(cache=True, nogil=True, inline="always")
def _zigzag(u):  # type: ignore[no-untyped-def]
    return np.int64(u >> np.uint64(1)) ^ -np.int64(u & np.uint64(1))


@njit(cache=True, nogil=True, inline="always")
def _varint32(buf, pos, end):  # type: ignore[no-untyped-def]
    """A signed 32-bit zig-zag varint (at most 5 bytes); next pos -1 on error."""
    u, nxt = _uvarint(buf, pos, end)
    if nxt < 0 or nxt - pos > 5 or u > np.uint64(_MASK32):
        return 0, -1
    return _zigzag(u), nxt


@njit(cache=True, nogil=True)
def scan_records(  # type: ignore[no-untyped-def]
    area, end, count, seed, out_h1, out_h2, out_delta, out_flags, out_start, out_end
):
    """Walk ``count`` records of a v2 records area ``area[:end]``: per record its key digest,
    offset delta, flags (HAS_KEY, HAS_VALUE) and byte range. Returns ``count``, or
    ``-(position + 1)`` at the first malformed record (or bytes left after the last one)."""
    pos = 0
    for i in range(count):
        start = pos
        length, pos = _varint32(area, pos, end)
        if pos < 0 or length < 6 or pos + length > end:
            return -(start + 1)
        rec_end = pos + length
        pos += 1  # attributes
        _, pos = _uvarint(area, pos, rec_end)  # timestamp delta
        if pos < 0:
            return -(start + 1)
        delta, pos = _varint32(area, pos, rec_end)
        if pos < 0 or delta < 0:
            return -(start + 1)
        key_len, pos = _varint32(area, pos, rec_end)
        if pos < 0 or key_len < -1 or pos + max(key_len, 0) > rec_end:
            return -(start + 1)
        flags = 0
        if key_len >= 0:
            flags |= HAS_KEY
            h1, h2 = hash128(area, pos, key_len, seed)
            out_h1[i] = h1
            out_h2[i] = h2
            pos += key_len
        value_len, pos = _varint32(area, pos, rec_end)
        if pos < 0 or value_len < -1 or pos + max(value_len, 0) > rec_end:
            return -(start + 1)
        if value_len >= 0:
            flags |= HAS_VALUE
        out_delta[i] = delta
        out_flags[i] = flags
        out_start[i] = start
        out_end[i] = rec_end
        pos = rec_end
    if pos != end:
        return -(pos + 1)
    return count


@njit(cache=True, nogil=True, inline="always")
def slot_of(a, slots):  # type: ignore[no-untyped-def]
    """The home slot of digest word ``a`` in a table of ``slots`` (any count below 2**32, as
    Kafka's ``SkimpyOffsetMap`` sizes its table: memory / 24, no power of two): the top 32
    bits of the digest scaled to the table (a multiply and a shift, not a division)."""
    return np.int64(((a >> np.uint64(32)) * np.uint64(slots)) >> np.uint64(32))


@njit(cache=True, nogil=True, inline="always")
def table_get(slot_h1, slot_h2, slot_offset, a, b):  # type: ignore[no-untyped-def]
    """The offset held for a digest, -1 when absent: at the first empty slot probed, or
    after every slot was probed (a full table, as Kafka's ``SkimpyOffsetMap.get`` stops after
    ``slots`` attempts)."""
    slots = len(slot_offset)
    idx = slot_of(a, slots)
    for _ in range(slots):
        o = slot_offset[idx]
        if o < 0:
            return np.int64(-1)
        if slot_h1[idx] == a and slot_h2[idx] == b:
            return o
        idx += 1
        if idx == slots:
            idx = 0
    return np.int64(-1)


@njit(cache=True, nogil=True)
def map_put(  # type: ignore[no-untyped-def]
    slot_h1, slot_h2, slot_offset, state, h1s, h2s, offsets, keyed, first, n
):
    """Put records ``first..n-1`` (those with ``keyed`` set) into the open-addressing table,
    as Kafka's SkimpyOffsetMap.put: a key already there takes the newer offset, a new key takes
    an empty slot, and the latest offset becomes the put's. ``state`` is [entries, latest
    offset, max entries]; stops before a put once ``entries`` reaches the max (the map is
    full) and returns the index of the record it stopped at, else ``n``."""
    slots = len(slot_offset)
    for i in range(first, n):
        if not keyed[i]:
            continue
        if state[0] >= state[2]:
            return i
        a = h1s[i]
        b = h2s[i]
        idx = slot_of(a, slots)
        probes = 0
        while True:
            if slot_offset[idx] < 0:
                slot_h1[idx] = a
                slot_h2[idx] = b
                slot_offset[idx] = offsets[i]
                state[0] += 1
                break
            if slot_h1[idx] == a and slot_h2[idx] == b:
                slot_offset[idx] = offsets[i]
                break
            probes += 1
            if probes == slots:
                return i
            idx += 1
            if idx == slots:
                idx = 0
        state[1] = offsets[i]
    return n


@njit(cache=True, nogil=True)
def map_get(slot_h1, slot_h2, slot_offset, h1s, h2s, keyed, n, out):  # type: ignore[no-untyped-def]
    """The offset the map holds for each keyed record's digest (-1 when absent)."""
    for i in range(n):
        if not keyed[i]:
            out[i] = -1
            continue
        out[i] = table_get(slot_h1, slot_h2, slot_offset, h1s[i], h2s[i])


@njit(cache=True, nogil=True)
def map_rehash(old_h1, old_h2, old_offset, new_h1, new_h2, new_offset):  # type: ignore[no-untyped-def]
    """Move every entry into a larger table (the map grows up to its memory bound)."""
    slots = len(new_offset)  # larger than the old table: an empty slot is always found
    for j in range(len(old_offset)):
        if old_offset[j] < 0:
            continue
        a = old_h1[j]
        idx = slot_of(a, slots)
        while new_offset[idx] >= 0:
            idx += 1
            if idx == slots:
                idx = 0
        new_h1[idx] = a
        new_h2[idx] = old_h2[j]
        new_offset[idx] = old_offset[j]


@njit(cache=True, nogil=True, inline="always")
def _zz64(v):  # type: ignore[no-untyped-def]
    return (np.uint64(v) << np.uint64(1)) ^ np.uint64(v >> 63)


@njit(cache=True, nogil=True)
def rebuild_records(  # type: ignore[no-untyped-def]
    area, rec_start, rec_end, keep, n, old_base_ts, new_base_ts, base_from_first, fixed_ts, out
):
    """Write the kept records of ``area`` into ``out`` as Kafka's MemoryRecordsBuilder writes
    a record (``DefaultRecord.writeTo``): attributes 0, the timestamp delta against
    ``new_base_ts``, and the offset delta, key, value and headers as they were (the base
    offset is kept, so the offset delta is). With ``base_from_first`` the new base timestamp
    is the first kept record's (the builder's rule without a delete horizon). ``fixed_ts`` >=
    0 is a LogAppendTime batch's time, which every record carries. Returns (bytes written, max
    timestamp, base timestamp) or (-(position + 1), 0, 0) for a malformed record; ``out`` is
    sized by the caller (every record grows by at most 9 bytes)."""
    p = 0
    max_ts = np.int64(-1)
    for i in range(n):
        if not keep[i]:
            continue
        s = rec_start[i]
        e = rec_end[i]
        _, q = _varint32(area, s, e)
        if q < 0:
            return -(s + 1), np.int64(0), np.int64(0)
        q += 1  # attributes
        u, q = _uvarint(area, q, e)
        if q < 0:
            return -(s + 1), np.int64(0), np.int64(0)
        # (a wrapping sum, as Java's long addition)
        ts = fixed_ts if fixed_ts >= 0 else old_base_ts + _zigzag(u)
        if ts > max_ts:
            max_ts = ts
        if base_from_first:
            new_base_ts = ts
            base_from_first = False
        dz = _zz64(ts - new_base_ts)
        # body: attributes byte, timestamp delta, then the rest of the record as it was
        dsize = 1
        t = dz
        while t >= np.uint64(0x80):
            t >>= np.uint64(7)
            dsize += 1
        body = 1 + dsize + (e - q)
        p = _put_uvarint(out, p, _zz64(np.int64(body)))
        out[p] = 0
        p += 1
        p = _put_uvarint(out, p, dz)
        out[p : p + (e - q)] = area[q:e]
        p += e - q
    return p, max_ts, new_base_ts
