"""The cleaner's offset map: key digest -> latest offset, bounded in memory (Kafka's
``SkimpyOffsetMap`` under ``log.cleaner.dedupe.buffer.size``).

Each slot holds a 16-byte key digest and an 8-byte offset, 24 bytes as in Kafka, in numpy
arrays searched by open addressing (linear probing) in compiled loops. The slots are Kafka's:
the dedupe buffer / 24, not rounded to a power of two (a digest finds its home slot by a
multiply and a shift, :func:`._kernels.slot_of`), with the buffer capped at ``Int.MaxValue``
bytes as Kafka's ``LogCleaner`` caps it, so a round holds as many keys as a broker's (128 MiB:
5,592,405 slots, 5,033,164 keys at load factor 0.9). The table starts small and grows while
the dirty section needs it, never past those slots: a log of any size is cleaned within that
memory, in several rounds when its dirty keys do not fit (Kafka's "the map is full": entries
reach slots x load factor). Every probe loop is bounded by the table's slots: a lookup in a
full table (load factor 1.0) of a key it lacks answers "absent", as Kafka's does.

A digest stands for its key: two keys with the same 128-bit digest would be taken for one
(Kafka accepts the same of MD5). The digest is seeded afresh for each map, so no fixed set of
keys collides in every cleaning.
"""

from __future__ import annotations

import secrets
from typing import Any

import numpy as np

from kafkalog.log.cleaner import _kernels as K

BYTES_PER_ENTRY = 24
#: Kafka's LogCleaner gives its map at most Int.MaxValue bytes of the dedupe buffer
MAX_MEMORY = 2**31 - 1
_FIRST_SLOTS = 1 << 12


class OffsetMap:
    """Key digests to their latest offset, at most ``memory`` bytes of slots."""

    def __init__(self, memory: int, load_factor: float = 0.9) -> None:
        if not 0 < load_factor <= 1:
            raise ValueError(f"load factor {load_factor} is not in (0, 1]")
        self.max_slots = min(memory, MAX_MEMORY) // BYTES_PER_ENTRY
        self.load_factor = load_factor
        if int(self.max_slots * load_factor) < 1:
            raise ValueError(
                f"a dedupe buffer of {memory} bytes holds no key at load factor {load_factor} "
                f"({BYTES_PER_ENTRY} bytes per slot)"
            )
        self.seed = np.uint64(secrets.randbits(64))
        self._allocate(min(_FIRST_SLOTS, self.max_slots))
        # [entries, latest offset, max entries of the current table]
        self._state = np.array([0, -1, 0], dtype=np.int64)
        self._set_limit()

    def _allocate(self, slots: int) -> None:
        self._h1 = np.zeros(slots, dtype=np.uint64)
        self._h2 = np.zeros(slots, dtype=np.uint64)
        self._offsets = np.full(slots, -1, dtype=np.int64)

    def _set_limit(self) -> None:
        slots = len(self._offsets)
        if slots < self.max_slots:
            self._state[2] = int(slots * 0.5)  # grow before probing gets long
        else:
            self._state[2] = int(slots * self.load_factor)

    @property
    def slots(self) -> int:
        """The slots the memory bound allows (the table may still be smaller)."""
        return self.max_slots

    @property
    def size(self) -> int:
        return int(self._state[0])

    @property
    def latest_offset(self) -> int:
        """The offset of the last put (or as moved by :meth:`update_latest_offset`); -1 when
        nothing was put."""
        return int(self._state[1])

    @property
    def memory_in_use(self) -> int:
        return len(self._offsets) * BYTES_PER_ENTRY

    @property
    def utilization(self) -> float:
        return self.size / self.max_slots

    @property
    def is_full(self) -> bool:
        return self.size >= int(self.max_slots * self.load_factor)

    def clear(self) -> None:
        self._offsets.fill(-1)
        self._state[0] = 0
        self._state[1] = -1

    def update_latest_offset(self, offset: int) -> None:
        self._state[1] = offset

    def put_many(self, h1: Any, h2: Any, offsets: Any, keyed: Any, n: int) -> int:
        """Put records 0..n-1 that have ``keyed`` set, in order; returns how many records
        were handled (``n`` unless the map filled up first: the index of the first record
        not put)."""
        done = 0
        while True:
            done = int(
                K.map_put(
                    self._h1, self._h2, self._offsets, self._state, h1, h2, offsets, keyed, done, n
                )
            )
            if done >= n or len(self._offsets) >= self.max_slots:
                return done
            self._grow()

    def get_many(self, h1: Any, h2: Any, keyed: Any, n: int, out: Any) -> None:
        K.map_get(self._h1, self._h2, self._offsets, h1, h2, keyed, n, out)

    def put(self, key: bytes, offset: int) -> bool:
        """One key (tests and small callers); False when the map is full."""
        h1, h2 = self.digest(key)
        done = self.put_many(
            np.array([h1], np.uint64),
            np.array([h2], np.uint64),
            np.array([offset], np.int64),
            np.ones(1, np.bool_),
            1,
        )
        return done == 1

    def get(self, key: bytes) -> int:
        h1, h2 = self.digest(key)
        out = np.empty(1, np.int64)
        self.get_many(
            np.array([h1], np.uint64), np.array([h2], np.uint64), np.ones(1, np.bool_), 1, out
        )
        return int(out[0])

    def digest(self, key: bytes) -> tuple[int, int]:
        buf = np.frombuffer(key, dtype=np.uint8) if key else np.zeros(0, np.uint8)
        h1, h2 = K.hash128(buf, 0, len(key), self.seed)
        return int(h1), int(h2)

    def table(self) -> tuple[Any, Any, Any, Any]:
        """The slot arrays and the state, in the compiled passes' argument order (the arrays
        change when the table grows: take them again after :meth:`grow`)."""
        return self._h1, self._h2, self._offsets, self._state

    @property
    def can_grow(self) -> bool:
        """Whether the table may still double before the memory bound."""
        return len(self._offsets) < self.max_slots

    def grow(self) -> None:
        """Double the table (up to the memory bound), its entries rehashed."""
        self._grow()

    def _grow(self) -> None:
        old = (self._h1, self._h2, self._offsets)
        self._allocate(min(len(self._offsets) * 2, self.max_slots))
        K.map_rehash(*old, self._h1, self._h2, self._offsets)
        self._set_limit()
