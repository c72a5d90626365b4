"""Zig-zag varints as Kafka's ``ByteUtils`` writes them, with bounds checks for hostile input.

These serve the object API and the encoders' small fields; the columnar kernels carry their own
compiled copies of the same rules.
"""

from __future__ import annotations

from kafkalog.errors import CorruptRecordError


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
