"""The varint readers that never raise (``varint.scan_varint``/``scan_varlong``): their
interpreted form, their compiled forms over arrays and over raw addresses (``_kernels``) and
the raising readers of the object API agree on every input, hostile bytes included."""

from __future__ import annotations

import random

import numpy as np
from numba import njit

from kafkalog.errors import CorruptRecordError
from kafkalog.records import _kernels as K
from kafkalog.records.varint import (
    read_varint,
    read_varlong,
    scan_varint,
    scan_varlong,
    write_varint,
    write_varlong,
)


@njit(cache=False)
def _array_scans(buf, pos, end):  # type: ignore[no-untyped-def]
    return K.scan_varint(buf, pos, end), K.scan_varlong(buf, pos, end)


@njit(cache=False)
def _address_scans(addr, pos, end):  # type: ignore[no-untyped-def]
    return K._varint(addr, pos, end), K._varlong(addr, pos, end)


def _raising(read, buf: bytes, end: int) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    try:
        value, pos = read(buf, 0, end)
    except CorruptRecordError:
        return 0, -1
    return value, pos


def _inputs() -> list[bytes]:
    rng = random.Random(11)
    out: list[bytes] = []
    for n in [0, 1, -1, 63, -64, 64, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63), 2**40 + 3]:
        enc = bytearray()
        write_varlong(enc, n)
        out.append(bytes(enc))
        if -(2**31) <= n < 2**31:
            enc = bytearray()
            write_varint(enc, n)
            out.append(bytes(enc))
    out += [b"\xff" * k + b"\x01" for k in range(12)]  # up to 13 bytes: too long past 5 / 10
    out += [b"\xff" * 4 + bytes([b]) for b in (0x0F, 0x7F, 0x70)]  # 5th byte's high bits
    out += [b"\xff" * 9 + bytes([b]) for b in (0x01, 0x7F, 0x02)]  # 10th byte's high bits
    out += [rng.randbytes(rng.randint(1, 12)) for _ in range(3000)]
    return out


def test_every_reader_agrees() -> None:
    for data in _inputs():
        arr = np.frombuffer(data + b"\0", np.uint8)  # a byte past ``end``, never read
        for end in {len(data), max(len(data) - 1, 0), min(len(data), 3)}:
            py32, py64 = scan_varint(data, 0, end), scan_varlong(data, 0, end)
            assert _raising(read_varint, data, end) == py32, data
            assert _raising(read_varlong, data, end) == py64, data
            assert _array_scans(arr, 0, end) == (py32, py64), data
            assert _address_scans(arr.ctypes.data, 0, end) == (py32, py64), data
