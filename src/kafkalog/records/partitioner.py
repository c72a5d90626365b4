"""Kafka's default partitioner for keyed records: ``toPositive(murmur2(key)) % partitions``.

Writers that do not say which partition a row goes to place it where a Java producer would, so a
topic written by kafkalog has its keys in the partitions Kafka clients expect.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_M = np.uint32(0x5BD1E995)
_SEED = np.uint32(0x9747B28C)


@njit(cache=True, nogil=True)
def _murmur2(data, start, length):  # type: ignore[no-untyped-def]
    m = np.uint32(0x5BD1E995)
    h = np.uint32(0x9747B28C) ^ np.uint32(length)
    n4 = length // 4
    for i in range(n4):
        p = start + 4 * i
        k = (
            np.uint32(data[p])
            | (np.uint32(data[p + 1]) << np.uint32(8))
            | (np.uint32(data[p + 2]) << np.uint32(16))
            | (np.uint32(data[p + 3]) << np.uint32(24))
        )
        k = np.uint32(k * m)
        k ^= k >> np.uint32(24)
        k = np.uint32(k * m)
        h = np.uint32(h * m)
        h ^= k
    tail = start + (length & ~3)
    rem = length % 4
    if rem == 3:
        h ^= np.uint32(data[tail + 2]) << np.uint32(16)
    if rem >= 2:
        h ^= np.uint32(data[tail + 1]) << np.uint32(8)
    if rem >= 1:
        h ^= np.uint32(data[tail])
        h = np.uint32(h * m)
    h ^= h >> np.uint32(13)
    h = np.uint32(h * m)
    h ^= h >> np.uint32(15)
    return h


@njit(cache=True, nogil=True)
def _partitions(data, offsets, valid, num_partitions, out):  # type: ignore[no-untyped-def]
    rr = 0
    for i in range(out.shape[0]):
        if valid[i]:
            h = _murmur2(data, offsets[i], offsets[i + 1] - offsets[i])
            out[i] = np.int64(h & np.uint32(0x7FFFFFFF)) % num_partitions
        else:
            out[i] = rr % num_partitions  # null keys: spread round robin
            rr += 1


def murmur2(key: bytes) -> int:
    """Kafka's ``Utils.murmur2`` as a signed 32-bit int."""
    h = int(_murmur2(np.frombuffer(key, np.uint8), 0, len(key)))
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for_key(key: bytes, num_partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


def partitions_for_keys(
    data: np.ndarray, offsets: np.ndarray, valid: np.ndarray, num_partitions: int
) -> np.ndarray:
    """Partition of every key of an Arrow binary column (offsets/data/validity buffers)."""
    if num_partitions < 1:
        raise ValueError("num_partitions must be at least 1")
    out = np.empty(len(valid), np.int64)
    _partitions(data, offsets, valid, num_partitions, out)
    return out
