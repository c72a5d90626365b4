"""CRC-32C (v2 batches) and CRC-32 (legacy messages), both from C implementations.

The ``crc32c`` package is used rather than ``google-crc32c`` because it accepts any buffer
(memoryview slices of an mmap) without a copy, at the same hardware speed.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import crc32c as _crc32c

crc32c_c: Callable[[Any], int] = _crc32c.crc32c
"""The C function itself: :func:`crc32c` costs one more Python call, which the per-append hot
path (one 16 KiB batch in well under a microsecond of CRC) cannot spare."""


def crc32c(data: Any) -> int:
    """Castagnoli CRC as Java's ``CRC32C`` computes it, over any buffer without copying."""
    return int(_crc32c.crc32c(data))


def crc32(data: Any) -> int:
    """IEEE CRC-32 (zlib's), used by magic 0 and 1 messages."""
    return zlib.crc32(data) & 0xFFFFFFFF
