"""Zig-zag varints as Kafka's ``ByteUtils`` writes them, with bounds checks for hostile input.

The raising readers serve the object API and the encoders' small fields. :func:`scanners`
builds the readers that never raise (position -1 on error), written once in plain Python that
numba can compile: the record walk runs them interpreted for a few records and compiled for
many, and the compiled loops (``records/_kernels.py``, the cleaner's) compile the same code over
their own byte access (an array, or a raw address).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kafkalog.errors import CorruptRecordError

#: A reader: (value, next position), next position -1 when cut off by ``end`` or too long.
Scanner = Callable[[Any, int, int], tuple[int, int]]

_LOW63 = 0x7FFFFFFFFFFFFFFF


def scanners(load: Callable[[Any, int], int]) -> tuple[Scanner, Scanner]:
    """(32-bit, 64-bit) zig-zag varint readers over ``load(buf, pos)`` (the byte at ``pos``).

    Kafka's rules: at most 5 (10) bytes, the last with its continuation bit clear; a 5th byte's
    excess high bits are dropped, as are a 10th byte's beyond the 64th bit. The arithmetic
    stays inside a signed 64-bit register so the compiled form gives the interpreted one's
    results: ``& 0xFF`` makes a byte a 64-bit integer, the mask after ``>> 1`` makes the shift
    logical.
    """

    def scan_varint(buf: Any, pos: int, end: int) -> tuple[int, int]:
        if pos >= end:
            return 0, -1
        b = load(buf, pos) & 0xFF
        if b < 0x80:  # one byte: most lengths and deltas
            return (b >> 1) ^ -(b & 1), pos + 1
        result = b & 0x7F
        shift = 7
        pos += 1
        while True:
            if pos >= end:
                return 0, -1
            b = load(buf, pos) & 0xFF
            pos += 1
            if shift == 28:
                if b & 0x80:
                    return 0, -1
                result |= (b & 0x0F) << 28
                break
            result |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
        return (result >> 1) ^ -(result & 1), pos

    def scan_varlong(buf: Any, pos: int, end: int) -> tuple[int, int]:
        if pos >= end:
            return 0, -1
        b = load(buf, pos) & 0xFF
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
        result = b & 0x7F
        shift = 7
        pos += 1
        while True:
            if pos >= end:
                return 0, -1
            b = load(buf, pos) & 0xFF
            pos += 1
            if shift == 63:
                if b & 0x80:
                    return 0, -1
                result |= (b & 1) << 63
                break
            result |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
        return ((result >> 1) & _LOW63) ^ -(result & 1), pos

    return scan_varint, scan_varlong


def byte_at(buf: Any, pos: int) -> int:
    """The byte at ``pos`` of an indexable buffer (bytes, bytearray, a uint8 array)."""
    b: int = buf[pos]
    return b


#: The readers over an indexable buffer.
scan_varint, scan_varlong = scanners(byte_at)


def zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def unzigzag(u: int) -> int:
    return (u >> 1) ^ -(u & 1)


def read_varint(buf: bytes | memoryview, pos: int, end: int) -> tuple[int, int]:
    """Signed 32-bit varint at ``pos``; returns ``(value, next position)``.

    Like Kafka: at most 5 bytes, a 5th byte with its continuation bit set is an error, excess
    high bits of the 5th byte are dropped.
    """
    result = 0
    shift = 0
    start = pos
    while True:
        if pos >= end:
            raise CorruptRecordError("varint runs past the end of its record", position=start)
        b = buf[pos]
        pos += 1
        if shift == 28:
            if b & 0x80:
                raise CorruptRecordError("varint longer than 5 bytes", position=start)
            result |= (b & 0x0F) << 28
            break
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
    # interpret as unsigned 32-bit then un-zigzag
    result &= 0xFFFFFFFF
    return (result >> 1) ^ -(result & 1), pos


def read_varlong(buf: bytes | memoryview, pos: int, end: int) -> tuple[int, int]:
    """Signed 64-bit varint (at most 10 bytes) at ``pos``; returns ``(value, next position)``."""
    result = 0
    shift = 0
    start = pos
    while True:
        if pos >= end:
            raise CorruptRecordError("varlong runs past the end of its record", position=start)
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varlong longer than 10 bytes", position=start)
    result &= 0xFFFFFFFFFFFFFFFF
    return (result >> 1) ^ -(result & 1), pos


def write_unsigned(out: bytearray, u: int) -> None:
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)


def write_varint(out: bytearray, n: int) -> None:
    """Append a signed 32-bit zig-zag varint."""
    write_unsigned(out, ((n << 1) ^ (n >> 31)) & 0xFFFFFFFF)


def write_varlong(out: bytearray, n: int) -> None:
    """Append a signed 64-bit zig-zag varint."""
    write_unsigned(out, ((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF)


def varint_size(n: int) -> int:
    u = ((n << 1) ^ (n >> 31)) & 0xFFFFFFFF
    size = 1
    while u >= 0x80:
        u >>= 7
        size += 1
    return size
