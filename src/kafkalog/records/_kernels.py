"""Compiled (numba) loops of the columnar path: header scan, record decode, record encode.

Varint parsing cannot be vectorised with numpy (every record's field positions depend on the
previous varints), so these loops are compiled. They never raise: a problem is returned as an
error code with the byte position, and the Python caller turns it into a positioned
``CorruptRecordError`` naming the file.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from kafkalog.records import varint
from kafkalog.records.record_codes import (
    ERR_BATCH_LENGTH,
    ERR_BATCH_TRAILING,
    ERR_ENTRY_SIZE,
    ERR_ENTRY_TOO_LARGE,
    ERR_HEADER_COUNT,
    ERR_HEADER_KEY,
    ERR_HEADER_VALUE,
    ERR_INFLATE,
    ERR_KEY_LENGTH,
    ERR_MAGIC,
    ERR_OVERFLOW,
    ERR_RECORD_COUNT,
    ERR_RECORD_LENGTH,
    ERR_RECORD_TRAILING,
    ERR_VALUE_LENGTH,
    ERR_VARINT,
    OK,
)
from kafkalog.records.varint import byte_at, scanners

_I64_MAX = np.int64(2**63 - 1)
_I64_MIN = np.int64(-(2**63))


# The decoder reads its sources through raw addresses (``arr.ctypes.data``), not arrays: an
# array handed to an inlined helper is reference-counted on every call (an atomic increment and
# decrement per varint, which numba's refcount pruning cannot remove across the helpers'
# branches), and that cost half of the decode loop. Plain integers carry no reference; the
# caller keeps every source alive for the duration of the call, and every read is still
# bounds-checked against the batch's end exactly as before.


@intrinsic
def _load(typingctx, addr, pos):  # type: ignore[no-untyped-def]
    """The byte at ``addr + pos``."""
    sig = types.uint8(addr, pos)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        base, offset = args
        ptr = builder.gep(builder.inttoptr(base, cgutils.voidptr_t), [offset])
        return builder.load(ptr)

    return sig, codegen


@intrinsic
def _store(typingctx, addr, value):  # type: ignore[no-untyped-def]
    """Write one byte at ``addr``."""
    sig = types.void(addr, value)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        base, byte = args
        builder.store(byte, builder.inttoptr(base, cgutils.voidptr_t))
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def _memcpy_at(typingctx, dst, src, n):  # type: ignore[no-untyped-def]
    """``memcpy`` between two addresses."""
    sig = types.void(dst, src, n)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        d, s, count = args
        dptr = builder.inttoptr(d, cgutils.voidptr_t)
        sptr = builder.inttoptr(s, cgutils.voidptr_t)
        cgutils.raw_memcpy(builder, dptr, sptr, count, 1)  # type: ignore[no-untyped-call]
        return context.get_dummy_value()

    return sig, codegen


@njit(cache=True, nogil=True, inline="always")
def _copy_at(dst, src, n):  # type: ignore[no-untyped-def]
    """Copy ``n`` bytes between addresses; the caller has bounds-checked both ranges."""
    if n > 16:
        _memcpy_at(dst, src, n)  # type: ignore[call-arg]
    else:
        for t in range(n):
            _store(dst + t, _load(src, t))  # type: ignore[call-arg]


def _varlong_reader(load: Any) -> Any:
    """The compiled 64-bit reader over ``load``: ``varint.scan_varlong``'s rules in unsigned
    64-bit arithmetic. The shared signed form compiles too, and gives the same results, but
    ran the record walk at half speed (measured: ~21 against ~12 ns a record), so this one
    reader keeps a compiled body of its own; ``tests/records/test_varint_scan.py`` holds the
    two against each other."""

    def varlong(buf, pos, end):  # type: ignore[no-untyped-def]
        if pos >= end:
            return 0, -1
        first = np.int64(load(buf, pos))
        if first < 0x80:  # one byte: most timestamp deltas of a batch
            return (first >> 1) ^ -(first & 1), pos + 1
        result = np.uint64(0)
        shift = np.uint64(0)
        while True:
            if pos >= end or shift > np.uint64(63):
                return 0, -1
            b = np.uint64(load(buf, pos))
            pos += 1
            result |= (b & np.uint64(0x7F)) << shift
            if b < np.uint64(0x80):
                break
            shift += np.uint64(7)
        v = np.int64(result >> np.uint64(1))
        if result & np.uint64(1):
            v = ~v
        return v, pos

    return njit(nogil=True, inline="always")(varlong)


# The varint readers (``records/varint.py``; the 64-bit one above) compiled over raw addresses
# (``_varint``, ``_varlong``: the decoder) and over arrays (``scan_varint``, ``scan_varlong``:
# the cleaner's loops, and the record walk, which calls the Python readers by name: numba is
# told that their compiled form is these).
_byte_at = njit(inline="always")(byte_at)
_varint = njit(nogil=True, inline="always")(scanners(_load)[0])  # type: ignore[arg-type]
_varlong = _varlong_reader(_load)
scan_varint = njit(nogil=True, inline="always")(scanners(_byte_at)[0])
scan_varlong = _varlong_reader(_byte_at)


def _compile_as(py_reader: Callable[..., Any], compiled: Any) -> None:
    """Compile calls of the Python ``py_reader`` as calls of ``compiled`` (a one-line
    wrapper that LLVM inlines; numba's IR-level inlining here warns, for nothing faster)."""

    @overload(py_reader)
    def _reader(buf, pos, end):  # type: ignore[no-untyped-def]
        return lambda buf, pos, end: compiled(buf, pos, end)


_compile_as(varint.scan_varint, scan_varint)
_compile_as(varint.scan_varlong, scan_varlong)


@intrinsic
def _memcpy(typingctx, dst, dpos, src, spos, n):  # type: ignore[no-untyped-def]
    """``memcpy`` between two uint8 arrays: numba's element loop does not vectorise, and a
    ctypes call would make the kernels uncacheable."""
    sig = types.void(dst, dpos, src, spos, n)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        d_arr, d_pos, s_arr, s_pos, count = args
        dptr = context.make_array(signature.args[0])(context, builder, d_arr).data
        sptr = context.make_array(signature.args[2])(context, builder, s_arr).data
        dptr = builder.gep(dptr, [d_pos])
        sptr = builder.gep(sptr, [s_pos])
        cgutils.raw_memcpy(builder, dptr, sptr, count, 1)  # type: ignore[no-untyped-call]
        return context.get_dummy_value()

    return sig, codegen


@njit(cache=True, nogil=True, inline="always")
def _copy(dst, dpos, src, spos, n):  # type: ignore[no-untyped-def]
    """Copy ``n`` bytes; the caller has bounds-checked both ranges."""
    if n > 16:
        _memcpy(dst, dpos, src, spos, n)  # type: ignore[call-arg]
    else:
        for t in range(n):
            dst[dpos + t] = src[spos + t]


# ---------------------------------------------------------------------------------------------
# zstd inside the decode kernel
#
# Inflating each batch from Python costs a call, a fresh output allocation (page faults once the
# allocator has trimmed its heap: ~5,000 per 200 batches when other work runs in between) and a
# trip of every inflated byte through memory before the kernel reads it back. The kernel calls
# libzstd itself instead, into one small reused buffer that stays in cache, and decodes the
# records straight out of it. libzstd is python-zstandard's bundled copy, reached through its
# cffi module's function table; the symbol is registered with LLVM by name, so the cached kernel
# links against whichever process loads it. Without that module a stub is registered and the
# caller never asks the kernel to inflate.

_ZSTD_SYMBOL = "kafkalog_ZSTD_decompressDCtx"
_ZstdFn = ctypes.CFUNCTYPE(
    ctypes.c_int64,
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_int64,
    ctypes.c_void_p,
    ctypes.c_int64,
)


def _zstd_unavailable(dctx: int, dst: int, cap: int, src: int, n: int) -> int:
    """Linked in place of libzstd when python-zstandard has no cffi module; never called."""
    return -1


_ZSTD_STUB = _ZstdFn(_zstd_unavailable)


def _register_zstd() -> bool:
    try:
        from zstandard._cffi import ffi, lib

        address = int(ffi.cast("uintptr_t", ffi.addressof(lib, "ZSTD_decompressDCtx")))
    except (ImportError, AttributeError):  # pragma: no cover - depends on the installed wheel
        llvm.add_symbol(_ZSTD_SYMBOL, ctypes.cast(_ZSTD_STUB, ctypes.c_void_p).value)
        return False
    llvm.add_symbol(_ZSTD_SYMBOL, address)
    return True


#: True when the decode kernel can inflate zstd payloads itself.
ZSTD_IN_KERNEL = _register_zstd()


@intrinsic
def _zstd_decompress(typingctx, dctx, dst, cap, src, n):  # type: ignore[no-untyped-def]
    """``ZSTD_decompressDCtx``: the output size, or a negative libzstd error code. libzstd never
    writes past ``cap`` (output that would not fit is an error)."""
    sig = types.int64(dctx, dst, cap, src, n)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        i64 = ir.IntType(64)
        ptr = ir.IntType(8).as_pointer()
        fnty = ir.FunctionType(i64, [ptr, ptr, i64, ptr, i64])
        fn = cgutils.get_or_insert_function(builder.module, fnty, _ZSTD_SYMBOL)  # type: ignore[no-untyped-call]
        d, out, room, inp, size = args
        return builder.call(
            fn,
            [
                builder.inttoptr(d, ptr),
                builder.inttoptr(out, ptr),
                context.cast(builder, room, signature.args[2], types.int64),
                builder.inttoptr(inp, ptr),
                context.cast(builder, size, signature.args[4], types.int64),
            ],
        )

    return sig, codegen


_ZSTD_MAGIC = 0xFD2FB528
_MIN_RECORD_SIZE = 7  # batch.MIN_RECORD_SIZE (not imported: the kernels depend on numpy only)
_ZSTD_BLOCK_MAX = 128 * 1024


@njit(cache=True, nogil=True)
def plan_zstd(buf, starts, ends, limits, out_cap):  # type: ignore[no-untyped-def]
    """The output bound of each zstd payload ``buf[starts[i]:ends[i]]`` the kernel may inflate.

    Only the common shape qualifies: exactly one frame filling the payload, whose header and
    block headers (RFC 8878) bound its output within ``limits[i]`` -- the declared content size,
    or raw/RLE block sizes plus min(window, 128 KiB) per compressed block. Anything else
    (skippable or several frames, malformed headers, a bound above the limit) gets -1 and is
    left to ``compression.decompress_buffer``, which reports it with its reason and position.
    """
    for i in range(starts.shape[0]):
        out_cap[i] = -1
        p = starts[i]
        end = ends[i]
        if end - p < 6:
            continue
        magic = (
            np.int64(buf[p])
            | (np.int64(buf[p + 1]) << 8)
            | (np.int64(buf[p + 2]) << 16)
            | (np.int64(buf[p + 3]) << 24)
        )
        if magic != _ZSTD_MAGIC:
            continue
        fhd = np.int64(buf[p + 4])
        if fhd & 0x08:
            continue
        single = (fhd & 0x20) != 0
        fcs_code = fhd >> 6
        fcs_size = 0 if fcs_code == 0 else (2 if fcs_code == 1 else (4 if fcs_code == 2 else 8))
        if single and fcs_size == 0:
            fcs_size = 1
        did_code = fhd & 0x03
        did_size = 0 if did_code == 0 else (1 if did_code == 1 else (2 if did_code == 2 else 4))
        header_len = 5 + (0 if single else 1) + did_size + fcs_size
        if end - p < header_len:
            continue
        q = p + 5
        window = np.int64(0)
        if not single:
            descriptor = np.int64(buf[q])
            window_log = 10 + (descriptor >> 3)
            if window_log > 41:
                continue
            window = (np.int64(1) << window_log) + ((np.int64(1) << window_log) >> 3) * (
                descriptor & 0x07
            )
            q += 1
        q += did_size
        content = np.int64(-1)
        if fcs_size:
            if fcs_size == 8 and buf[q + 7] >= 0x80:
                continue  # beyond int64: far above any limit
            content = np.int64(0)
            for t in range(fcs_size):
                content |= np.int64(buf[q + t]) << (8 * t)
            if fcs_size == 2:
                content += 256
            q += fcs_size
        if single:
            window = content
        block_max = _ZSTD_BLOCK_MAX if window > _ZSTD_BLOCK_MAX else window
        upper = np.int64(0)
        ok = False
        while True:
            if end - q < 3:
                break
            header = np.int64(buf[q]) | (np.int64(buf[q + 1]) << 8) | (np.int64(buf[q + 2]) << 16)
            block_type = (header >> 1) & 0x03
            block_size = header >> 3
            start = q + 3
            if block_type == 0:
                q = start + block_size
                upper += block_size
            elif block_type == 1:
                q = start + 1
                upper += block_size
            elif block_type == 2:
                if block_size > block_max:
                    break
                q = start + block_size
                upper += block_max
            else:
                break
            if q > end or upper > limits[i]:
                break
            if header & 1:
                ok = True
                break
        if not ok:
            continue
        if fhd & 0x04:
            q += 4
        if q != end:
            continue
        bound = content if content >= 0 else upper
        if bound <= limits[i]:
            out_cap[i] = bound


@njit(cache=True, nogil=True)
def _be_i64(buf, p):  # type: ignore[no-untyped-def]
    v = np.int64(0)
    for i in range(8):
        v = (v << 8) | np.int64(buf[p + i])
    return v


@njit(cache=True, nogil=True)
def _be_i32(buf, p):  # type: ignore[no-untyped-def]
    v = (
        (np.int64(buf[p]) << 24)
        | (np.int64(buf[p + 1]) << 16)
        | (np.int64(buf[p + 2]) << 8)
        | np.int64(buf[p + 3])
    )
    if v >= 0x80000000:
        v -= 0x100000000
    return v


@njit(cache=True, nogil=True)
def _be_i16(buf, p):  # type: ignore[no-untyped-def]
    v = (np.int64(buf[p]) << 8) | np.int64(buf[p + 1])
    if v >= 0x8000:
        v -= 0x10000
    return v


@njit(cache=True, nogil=True)
def scan_entries(buf, start, end, max_entry, out_pos, out_fields):  # type: ignore[no-untyped-def]
    """Walk log entries like ``FileLogInputStream`` and read every v2 header field.

    ``out_fields[i]`` holds: base offset, batch length, leader epoch, magic, crc, attributes,
    last offset delta, base ts, max ts, producer id, producer epoch, base sequence, count
    (legacy entries: only offset, length and magic are filled).
    Returns (error code, n entries, position reached, error position).
    """
    pos = start
    n = 0
    cap = out_pos.shape[0]
    while n < cap:
        remaining = end - pos
        if remaining < 18:
            return OK, n, pos, -1
        size = _be_i32(buf, pos + 8)
        if size < 14:
            return ERR_ENTRY_SIZE, n, pos, pos + 8
        if size + 12 > max_entry:
            return ERR_ENTRY_TOO_LARGE, n, pos, pos + 8
        if size > remaining - 12:
            return OK, n, pos, -1
        magic = np.int64(buf[pos + 16])
        if magic > 2:  # no Kafka log format but 0, 1 and 2 (negative as Java reads >= 128)
            return ERR_MAGIC, n, pos, pos + 16
        f = out_fields[n]
        f[0] = _be_i64(buf, pos)
        f[1] = size
        f[3] = magic
        if magic >= 2:
            if size < 49:
                return ERR_BATCH_LENGTH, n, pos, pos + 8
            f[2] = _be_i32(buf, pos + 12)
            f[4] = _be_i32(buf, pos + 17) & 0xFFFFFFFF
            f[5] = _be_i16(buf, pos + 21)
            f[6] = _be_i32(buf, pos + 23)
            f[7] = _be_i64(buf, pos + 27)
            f[8] = _be_i64(buf, pos + 35)
            f[9] = _be_i64(buf, pos + 43)
            f[10] = _be_i16(buf, pos + 51)
            f[11] = _be_i32(buf, pos + 53)
            f[12] = _be_i32(buf, pos + 57)
        out_pos[n] = pos
        n += 1
        pos += 12 + size
    return OK, n, pos, -1


# fmt: off
# The error returns repeat the whole state on purpose: a flag-and-break version of this loop
# measured 4x slower (numba/LLVM keep the hot path tight only with early returns).
@njit(cache=True, nogil=True)
def decode_v2(  # type: ignore[no-untyped-def]
    src_addrs, b_src, b_start, b_end, b_count, b_base_offset, b_base_ts, b_fixed_ts, b_use_fixed_ts,
    want_headers, want_key, want_value, out_offset, out_ts, key_off, key_data, key_valid, val_off,
    val_data, val_valid, hl_off, hk_off, hk_data, hv_off, hv_data, hv_valid, dctx, scratch, b_zcap,
):
    """Decode the records of many batches straight into Arrow-shaped buffers.

    Each batch's records area lies in the source at address ``src_addrs[b_src[b]]`` (the file
    is source 0, payloads decompressed by the caller follow, so nothing is copied twice; the
    caller keeps them alive) between ``b_start`` and ``b_end``. Addresses in an int64 array,
    not a ``numba.typed.List`` of arrays: a typed list's methods are compiled afresh in every
    process (no cache), which cost each new Spark task worker seconds before its first batch.
    A batch with ``b_zcap[b] >= 0`` holds a zstd payload there instead, inflated here
    with the libzstd context ``dctx`` into the buffer at address ``scratch`` (at most
    ``b_zcap[b]`` bytes, which it has room for) and decoded from it; a payload libzstd refuses
    is ERR_INFLATE, too many declared records for its output ERR_RECORD_COUNT. Header buffers
    grow on demand and are returned. Keys (values) are checked but not copied unless
    ``want_key`` (``want_value``): their outputs are then not written and may be of length 1.
    Returns (error, batch, error pos, records, key bytes, value bytes, headers, hk bytes,
    hv bytes, hk_off, hk_data, hv_off, hv_data, hv_valid).
    """
    n = 0
    kp = 0
    vp = 0
    h = 0
    hkp = 0
    hvp = 0
    key_off[0] = 0
    val_off[0] = 0
    hl_off[0] = 0
    hk_off[0] = 0
    hv_off[0] = 0
    for b in range(b_start.shape[0]):
        buf = src_addrs[b_src[b]]
        kaddr = np.int64(key_data.ctypes.data)
        vaddr = np.int64(val_data.ctypes.data)
        pos = b_start[b]
        end = b_end[b]
        cap = b_zcap[b]
        if cap >= 0:
            got: int = _zstd_decompress(dctx, scratch, cap, buf + pos, end - pos)  # type: ignore[call-arg]
            if got < 0:
                return (ERR_INFLATE, b, pos, n, kp, vp, h, hkp, hvp,
                        hk_off, hk_data, hv_off, hv_data, hv_valid)
            if b_count[b] * _MIN_RECORD_SIZE > got:
                return (ERR_RECORD_COUNT, b, pos, n, kp, vp, h, hkp, hvp,
                        hk_off, hk_data, hv_off, hv_data, hv_valid)
            buf = np.int64(scratch)
            pos = 0
            end = got
        base_off = b_base_offset[b]
        base_ts = b_base_ts[b]
        fixed = b_use_fixed_ts[b]
        fixed_ts = b_fixed_ts[b]
        for _ in range(b_count[b]):
            rstart = pos
            length, pos = _varint(buf, pos, end)
            if pos < 0:
                return (ERR_VARINT, b, rstart, n, kp, vp, h, hkp, hvp,
                        hk_off, hk_data, hv_off, hv_data, hv_valid)
            if length < 6 or length > end - pos:
                return (ERR_RECORD_LENGTH, b, rstart, n, kp, vp, h, hkp, hvp,
                        hk_off, hk_data, hv_off, hv_data, hv_valid)
            rend = pos + length
            pos += 1
            tsd, pos = _varlong(buf, pos, rend)
            if pos < 0:
                return (ERR_VARINT, b, rstart, n, kp, vp, h, hkp, hvp,
                        hk_off, hk_data, hv_off, hv_data, hv_valid)
            od, pos = _varint(buf, pos, rend)
            if pos < 0:
                return (ERR_VARINT, b, rstart, n, kp, vp, h, hkp, hvp,
                        hk_off, hk_data, hv_off, hv_data, hv_valid)
            kl, pos = _varint(buf, pos, rend)
            if pos < 0:
                return (ERR_VARINT, b, rstart, n, kp, vp, h, hkp, hvp,
                        hk_off, hk_data, hv_off, hv_data, hv_valid)
            if kl >= 0:
                if kl > rend - pos:
                    return (ERR_KEY_LENGTH, b, rstart, n, kp, vp, h, hkp, hvp,
                            hk_off, hk_data, hv_off, hv_data, hv_valid)
                if want_key:
                    _copy_at(kaddr + kp, buf + pos, kl)
                    kp += kl
                    key_valid[n] = True
                pos += kl
            elif kl == -1:
                if want_key:
                    key_valid[n] = False
            else:
                return (ERR_KEY_LENGTH, b, rstart, n, kp, vp, h, hkp, hvp,
                        hk_off, hk_data, hv_off, hv_data, hv_valid)
            if want_key:
                key_off[n + 1] = kp
            vl, pos = _varint(buf, pos, rend)
            if pos < 0:
                return (ERR_VARINT, b, rstart, n, kp, vp, h, hkp, hvp,
                        hk_off, hk_data, hv_off, hv_data, hv_valid)
            if vl >= 0:
                if vl > rend - pos:
                    return (ERR_VALUE_LENGTH, b, rstart, n, kp, vp, h, hkp, hvp,
                            hk_off, hk_data, hv_off, hv_data, hv_valid)
                if want_value:
                    _copy_at(vaddr + vp, buf + pos, vl)
                    vp += vl
                    val_valid[n] = True
                pos += vl
            elif vl == -1:
                if want_value:
                    val_valid[n] = False
            else:
                return (ERR_VALUE_LENGTH, b, rstart, n, kp, vp, h, hkp, hvp,
                        hk_off, hk_data, hv_off, hv_data, hv_valid)
            if want_value:
                val_off[n + 1] = vp
            hc, pos = _varint(buf, pos, rend)
            if pos < 0:
                return (ERR_VARINT, b, rstart, n, kp, vp, h, hkp, hvp,
                        hk_off, hk_data, hv_off, hv_data, hv_valid)
            if hc < 0 or hc > rend - pos:
                return (ERR_HEADER_COUNT, b, rstart, n, kp, vp, h, hkp, hvp,
                        hk_off, hk_data, hv_off, hv_data, hv_valid)
            for _j in range(hc):
                hkl, pos = _varint(buf, pos, rend)
                if pos < 0:
                    return (ERR_VARINT, b, rstart, n, kp, vp, h, hkp, hvp,
                            hk_off, hk_data, hv_off, hv_data, hv_valid)
                if hkl < 0 or hkl > rend - pos:
                    return (ERR_HEADER_KEY, b, rstart, n, kp, vp, h, hkp, hvp,
                            hk_off, hk_data, hv_off, hv_data, hv_valid)
                kstart = pos
                pos += hkl
                hvl, pos = _varint(buf, pos, rend)
                if pos < 0:
                    return (ERR_VARINT, b, rstart, n, kp, vp, h, hkp, hvp,
                            hk_off, hk_data, hv_off, hv_data, hv_valid)
                if hvl < -1 or hvl > rend - pos:
                    return (ERR_HEADER_VALUE, b, rstart, n, kp, vp, h, hkp, hvp,
                            hk_off, hk_data, hv_off, hv_data, hv_valid)
                if want_headers:
                    if h + 1 >= hk_off.shape[0]:
                        cap = hk_off.shape[0] * 2
                        t1 = np.empty(cap, np.int32)
                        t1[: h + 1] = hk_off[: h + 1]
                        hk_off = t1
                        t2 = np.empty(cap, np.int32)
                        t2[: h + 1] = hv_off[: h + 1]
                        hv_off = t2
                        t3 = np.empty(cap, np.bool_)
                        t3[:h] = hv_valid[:h]
                        hv_valid = t3
                    if hkp + hkl > hk_data.shape[0]:
                        t4 = np.empty(max(hk_data.shape[0] * 2, hkp + hkl), np.uint8)
                        t4[:hkp] = hk_data[:hkp]
                        hk_data = t4
                    _copy_at(np.int64(hk_data.ctypes.data) + hkp, buf + kstart, hkl)
                    hkp += hkl
                    hk_off[h + 1] = hkp
                    if hvl >= 0:
                        if hvp + hvl > hv_data.shape[0]:
                            t5 = np.empty(max(hv_data.shape[0] * 2, hvp + hvl), np.uint8)
                            t5[:hvp] = hv_data[:hvp]
                            hv_data = t5
                        _copy_at(np.int64(hv_data.ctypes.data) + hvp, buf + pos, hvl)
                        hvp += hvl
                        hv_valid[h] = True
                    else:
                        hv_valid[h] = False
                    hv_off[h + 1] = hvp
                    h += 1
                if hvl > 0:
                    pos += hvl
            if pos != rend:
                return (ERR_RECORD_TRAILING, b, rstart, n, kp, vp, h, hkp, hvp,
                        hk_off, hk_data, hv_off, hv_data, hv_valid)
            if want_headers:
                hl_off[n + 1] = h
            # An offset beyond int64 is refused (both APIs). Timestamps wrap like Java's long
            # addition, which is how a Java writer's wrapped delta reads back exactly.
            if (od > 0 and base_off > _I64_MAX - od) or (od < 0 and base_off < _I64_MIN - od):
                return (ERR_OVERFLOW, b, rstart, n, kp, vp, h, hkp, hvp,
                        hk_off, hk_data, hv_off, hv_data, hv_valid)
            out_offset[n] = base_off + od
            out_ts[n] = fixed_ts if fixed else np.int64(np.uint64(base_ts) + np.uint64(tsd))
            n += 1
        if pos != end:
            return (ERR_BATCH_TRAILING, b, pos, n, kp, vp, h, hkp, hvp,
                    hk_off, hk_data, hv_off, hv_data, hv_valid)
    return (OK, -1, -1, n, kp, vp, h, hkp, hvp, hk_off, hk_data, hv_off, hv_data, hv_valid)
# fmt: on


@njit(cache=True, nogil=True)
def min_timestamp(buf, start, end, count, base_ts):  # type: ignore[no-untyped-def]
    """(walked, smallest timestamp) of the ``count`` records of a v2 records area
    ``buf[start:end]`` (uncompressed), reading only each record's length and timestamp delta
    (a batch's base timestamp is its first record's, not its smallest: later records may have
    negative deltas). ``walked`` is False when the lengths do not hold together: the caller
    then decodes the batch, and the decoder says what is wrong."""
    pos = start
    lo = _I64_MAX
    for _ in range(count):
        length, pos = scan_varint(buf, pos, end)
        if pos < 0 or length < 6 or length > end - pos:
            return False, lo
        rend = pos + length
        tsd, p = scan_varlong(buf, pos + 1, rend)
        if p < 0:
            return False, lo
        ts = np.int64(np.uint64(base_ts) + np.uint64(tsd))
        if ts < lo:
            lo = ts
        pos = rend
    return pos == end, lo


# ---------------------------------------------------------------------------------------------
# Encoding


@njit(cache=True, nogil=True, inline="always")
def _uvarint_size(u):  # type: ignore[no-untyped-def]
    size = 1
    while u >= 0x80:
        u >>= 7
        size += 1
    return size


@njit(cache=True, nogil=True, inline="always")
def _varint_size(v):  # type: ignore[no-untyped-def]
    return _uvarint_size(((v << 1) ^ (v >> 31)) & 0xFFFFFFFF)


@njit(cache=True, nogil=True, inline="always")
def _varlong_size(v):  # type: ignore[no-untyped-def]
    u = (v << 1) ^ (v >> 63)
    if u < 0:  # zig-zag of a huge magnitude: all 64 bits in use
        return 10
    size = 1
    while u >= 0x80:
        u >>= 7
        size += 1
    return size


@njit(cache=True, nogil=True, inline="always")
def _put_uvarint(out, p, u):  # type: ignore[no-untyped-def]
    while u >= np.uint64(0x80):
        out[p] = np.uint8((u & np.uint64(0x7F)) | np.uint64(0x80))
        u >>= np.uint64(7)
        p += 1
    out[p] = np.uint8(u)
    return p + 1


@njit(cache=True, nogil=True, inline="always")
def _put_varint(out, p, v):  # type: ignore[no-untyped-def]
    return _put_uvarint(out, p, np.uint64(((v << 1) ^ (v >> 31)) & 0xFFFFFFFF))


@njit(cache=True, nogil=True, inline="always")
def _put_varlong(out, p, v):  # type: ignore[no-untyped-def]
    return _put_uvarint(out, p, np.uint64((v << 1) ^ (v >> 63)))


@njit(cache=True, nogil=True, inline="always")
def _put_be(out, p, v, nbytes):  # type: ignore[no-untyped-def]
    for i in range(nbytes):
        out[p + i] = np.uint8((v >> (8 * (nbytes - 1 - i))) & 0xFF)


@njit(cache=True, nogil=True, inline="always")
def _record_body_size(  # type: ignore[no-untyped-def]
    i,
    tsd,
    od,
    key_off,
    key_valid,
    val_off,
    val_valid,
    has_headers,
    hl_off,
    hl_valid,
    hk_off,
    hv_off,
    hv_valid,
):
    size = 1 + _varlong_size(tsd) + _varint_size(od)
    if key_valid[i]:
        kl = key_off[i + 1] - key_off[i]
        size += _varint_size(kl) + kl
    else:
        size += 1
    if val_valid[i]:
        vl = val_off[i + 1] - val_off[i]
        size += _varint_size(vl) + vl
    else:
        size += 1
    hc = 0
    if has_headers and hl_valid[i]:
        hc = hl_off[i + 1] - hl_off[i]
        for j in range(hl_off[i], hl_off[i + 1]):
            hkl = hk_off[j + 1] - hk_off[j]
            size += _varint_size(hkl) + hkl
            if hv_valid[j]:
                hvl = hv_off[j + 1] - hv_off[j]
                size += _varint_size(hvl) + hvl
            else:
                size += 1
    size += _varint_size(hc)
    return size


# fmt: off
@njit(cache=True, nogil=True, inline="always")
def _plan(  # type: ignore[no-untyped-def]
    ts, key_off, key_valid, val_off, val_valid, has_headers, hl_off, hl_valid, hk_off, hv_off,
    hv_valid, max_records, max_area_bytes, out_first, out_area, rec_size,
):
    n = ts.shape[0]
    nb = 0
    i = 0
    while i < n:
        first = i
        base_ts = ts[i]
        area = 0
        while i < n and i - first < max_records:
            t = ts[i]
            if t < -1:
                return -(i + 1)
            body = _record_body_size(
                i,
                t - base_ts,
                i - first,
                key_off,
                key_valid,
                val_off,
                val_valid,
                has_headers,
                hl_off,
                hl_valid,
                hk_off,
                hv_off,
                hv_valid,
            )
            total = body + _varint_size(body)
            if area > 0 and area + total > max_area_bytes:
                break
            rec_size[i] = body
            area += total
            i += 1
        out_first[nb] = first
        out_area[nb] = area
        nb += 1
    out_first[nb] = n
    return nb


@njit(cache=True, nogil=True)
def plan_batches(  # type: ignore[no-untyped-def]
    ts, key_off, key_valid, val_off, val_valid, has_headers, hl_off, hl_valid, hk_off, hv_off,
    hv_valid, max_records, max_area_bytes, out_first, out_area, rec_size,
):
    """Cut records into batches (at most ``max_records`` and about ``max_area_bytes`` each) and
    size every record given its batch's base timestamp. Returns the number of batches, or
    -(i+1) when record ``i`` has an invalid timestamp.

    ``has_headers`` is passed on as a literal so each inlined copy drops the other's branch: a
    run-time flag inside the record loop made it ten times slower.
    """
    if has_headers:
        return _plan(
            ts, key_off, key_valid, val_off, val_valid, True, hl_off, hl_valid, hk_off, hv_off,
            hv_valid, max_records, max_area_bytes, out_first, out_area, rec_size,
        )
    return _plan(
        ts, key_off, key_valid, val_off, val_valid, False, hl_off, hl_valid, hk_off, hv_off,
        hv_valid, max_records, max_area_bytes, out_first, out_area, rec_size,
    )


@njit(cache=True, nogil=True)
def size_given_batches(  # type: ignore[no-untyped-def]
    ts, key_off, key_valid, val_off, val_valid, has_headers, hl_off, hl_valid, hk_off, hv_off,
    hv_valid, b_first, nb, out_area, rec_size,
):
    """Size the records of batches whose boundaries the caller chose (``b_first``: one append
    call each, as an embedded log's buffered appends keep them). Returns 0, or -(i+1) when
    record ``i`` has an invalid timestamp."""
    for b in range(nb):
        first = b_first[b]
        base_ts = ts[first]
        area = 0
        for i in range(first, b_first[b + 1]):
            t = ts[i]
            if t < -1:
                return -(i + 1)
            body = _record_body_size(
                i, t - base_ts, i - first, key_off, key_valid, val_off, val_valid, has_headers,
                hl_off, hl_valid, hk_off, hv_off, hv_valid,
            )
            rec_size[i] = body
            area += body + _varint_size(body)
        out_area[b] = area
    return 0


def _crc32c_tables() -> np.ndarray:
    """The eight 256-entry tables of slicing-by-8 for the Castagnoli polynomial (reflected)."""
    tables = np.zeros((8, 256), np.uint32)
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        tables[0, n] = c
    for n in range(256):
        c = int(tables[0, n])
        for k in range(1, 8):
            c = int(tables[0, c & 0xFF]) ^ (c >> 8)
            tables[k, n] = c
    return tables


_CRC32C_TABLES = _crc32c_tables()


@njit(cache=True, nogil=True, inline="always")
def _crc32c(buf, start, end, tables):  # type: ignore[no-untyped-def]
    crc = np.uint32(0xFFFFFFFF)
    p = start
    while p + 8 <= end:
        lo = crc ^ (
            np.uint32(buf[p])
            | (np.uint32(buf[p + 1]) << np.uint32(8))
            | (np.uint32(buf[p + 2]) << np.uint32(16))
            | (np.uint32(buf[p + 3]) << np.uint32(24))
        )
        crc = (
            tables[7, lo & np.uint32(0xFF)]
            ^ tables[6, (lo >> np.uint32(8)) & np.uint32(0xFF)]
            ^ tables[5, (lo >> np.uint32(16)) & np.uint32(0xFF)]
            ^ tables[4, lo >> np.uint32(24)]
            ^ tables[3, buf[p + 4]]
            ^ tables[2, buf[p + 5]]
            ^ tables[1, buf[p + 6]]
            ^ tables[0, buf[p + 7]]
        )
        p += 8
    while p < end:
        crc = tables[0, (crc ^ np.uint32(buf[p])) & np.uint32(0xFF)] ^ (crc >> np.uint32(8))
        p += 1
    return crc ^ np.uint32(0xFFFFFFFF)


@njit(cache=True, nogil=True)
def crc32c_of(buf, start, end):  # type: ignore[no-untyped-def]
    """CRC-32C of ``buf[start:end]`` (for tests of the compiled CRC against the C one)."""
    return _crc32c(buf, start, end, _CRC32C_TABLES)


@njit(cache=True, nogil=True)
def stamp_small_crcs(out, b_pos, sizes, nb, max_size):  # type: ignore[no-untyped-def]
    """Stamp the CRC-32C of every batch of at most ``max_size`` bytes (written by
    ``write_batches``, CRC field zero); returns how many were larger and left to the caller.

    Small batches are the embedded log's one-record appends, where a C CRC called from Python
    per batch costs more than encoding the record; slicing-by-8 here does a 200-byte batch in
    a fraction of that. Large ones go to the hardware CRC of the C library."""
    left = 0
    for b in range(nb):
        size = sizes[b]
        if size > max_size:
            left += 1
            continue
        p = b_pos[b]
        _put_be(out, p + 17, _crc32c(out, p + 21, p + size, _CRC32C_TABLES), 4)
    return left


@njit(cache=True, nogil=True, inline="always")
def _write(  # type: ignore[no-untyped-def]
    out, b_pos, b_first, nb, base_offset, attributes, leader_epoch, producer_id, producer_epoch,
    base_sequence, log_append_time, use_log_append_time, ts, rec_size, key_off, key_data,
    key_valid, val_off, val_data, val_valid, has_headers, hl_off, hl_valid, hk_off, hk_data,
    hv_off, hv_data, hv_valid, out_max_ts, out_max_ts_offset,
):
    for b in range(nb):
        first = b_first[b]
        last = b_first[b + 1]
        p0 = b_pos[b]
        base_ts = ts[first]
        p = p0 + 61
        max_ts = ts[first]
        max_ts_i = first
        for i in range(first, last):
            t = ts[i]
            if t > max_ts:
                max_ts = t
                max_ts_i = i
            p = _put_varint(out, p, rec_size[i])
            out[p] = 0
            p += 1
            p = _put_varlong(out, p, t - base_ts)
            p = _put_varint(out, p, i - first)
            if key_valid[i]:
                kl = key_off[i + 1] - key_off[i]
                p = _put_varint(out, p, kl)
                _copy(out, p, key_data, key_off[i], kl)
                p += kl
            else:
                p = _put_varint(out, p, -1)
            if val_valid[i]:
                vl = val_off[i + 1] - val_off[i]
                p = _put_varint(out, p, vl)
                _copy(out, p, val_data, val_off[i], vl)
                p += vl
            else:
                p = _put_varint(out, p, -1)
            if has_headers and hl_valid[i]:
                p = _put_varint(out, p, hl_off[i + 1] - hl_off[i])
                for j in range(hl_off[i], hl_off[i + 1]):
                    hkl = hk_off[j + 1] - hk_off[j]
                    p = _put_varint(out, p, hkl)
                    _copy(out, p, hk_data, hk_off[j], hkl)
                    p += hkl
                    if hv_valid[j]:
                        hvl = hv_off[j + 1] - hv_off[j]
                        p = _put_varint(out, p, hvl)
                        _copy(out, p, hv_data, hv_off[j], hvl)
                        p += hvl
                    else:
                        p = _put_varint(out, p, -1)
            else:
                out[p] = 0
                p += 1
        if use_log_append_time:
            max_ts = log_append_time
            max_ts_i = last - 1
        out_max_ts[b] = max_ts
        out_max_ts_offset[b] = base_offset + max_ts_i
        _put_be(out, p0, base_offset + first, 8)
        _put_be(out, p0 + 8, p - p0 - 12, 4)
        _put_be(out, p0 + 12, leader_epoch, 4)
        out[p0 + 16] = 2
        _put_be(out, p0 + 17, 0, 4)
        _put_be(out, p0 + 21, attributes, 2)
        _put_be(out, p0 + 23, last - 1 - first, 4)
        _put_be(out, p0 + 27, base_ts, 8)
        _put_be(out, p0 + 35, max_ts, 8)
        _put_be(out, p0 + 43, producer_id, 8)
        _put_be(out, p0 + 51, producer_epoch, 2)
        seq = base_sequence
        if seq >= 0:
            seq = (seq + first) % 2147483648
        _put_be(out, p0 + 53, seq, 4)
        _put_be(out, p0 + 57, last - first, 4)


@njit(cache=True, nogil=True)
def write_batches(  # type: ignore[no-untyped-def]
    out, b_pos, b_first, nb, base_offset, attributes, leader_epoch, producer_id, producer_epoch,
    base_sequence, log_append_time, use_log_append_time, ts, rec_size, key_off, key_data,
    key_valid, val_off, val_data, val_valid, has_headers, hl_off, hl_valid, hk_off, hk_data,
    hv_off, hv_data, hv_valid, out_max_ts, out_max_ts_offset,
):
    """Write complete v2 batches (CRC left zero) for the plan made by ``plan_batches``."""
    if has_headers:
        _write(
            out, b_pos, b_first, nb, base_offset, attributes, leader_epoch, producer_id,
            producer_epoch, base_sequence, log_append_time, use_log_append_time, ts, rec_size,
            key_off, key_data, key_valid, val_off, val_data, val_valid, True, hl_off, hl_valid,
            hk_off, hk_data, hv_off, hv_data, hv_valid, out_max_ts, out_max_ts_offset,
        )
    else:
        _write(
            out, b_pos, b_first, nb, base_offset, attributes, leader_epoch, producer_id,
            producer_epoch, base_sequence, log_append_time, use_log_append_time, ts, rec_size,
            key_off, key_data, key_valid, val_off, val_data, val_valid, False, hl_off, hl_valid,
            hk_off, hk_data, hv_off, hv_data, hv_valid, out_max_ts, out_max_ts_offset,
        )
# fmt: on
