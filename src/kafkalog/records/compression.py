"""Kafka's five compression codecs, written the way Java Kafka writes them and read defensively.

Every payload read from disk is untrusted: a flipped bit must not turn a 100-byte batch into a
multi-gigabyte allocation, and nothing deeper than :class:`~kafkalog.errors.CompressionError` may
escape.  So each decoder first walks the framing of its codec (gzip members, xerial chunks, LZ4
blocks, zstd frames and blocks) in Python -- one step per block, never per byte -- to learn either
the exact output size or a tight upper bound, refuses anything beyond ``limit`` before decoding,
and then lets the native codec write straight into one pre-sized buffer.  The per-block walk is
also what lets errors carry the byte position of the bad structure.

Writers reproduce the Java client's framing (gzip header with OS byte 0xff, xerial snappy framing,
Kafka's own LZ4 frame including the KAFKA-3160 header-checksum bug for magic 0).  Readers accept
everything the Java reader accepts, with the deviations listed in :func:`decompress`.
"""

from __future__ import annotations

import struct
import threading
import zlib
from collections.abc import Callable
from typing import Any, TypeAlias

import cramjam
import numpy as np
import xxhash
import zstandard
from numpy.typing import NDArray

from kafkalog.errors import CompressionError, DecompressionLimitError, InvalidRecordError
from kafkalog.records.types import Compression

__all__ = ["BytesLike", "compress", "decompress"]

#: What the codecs accept: anything exporting a contiguous byte buffer (numpy arrays included,
#: since the columnar decoder hands over slices of its file buffers).
BytesLike: TypeAlias = bytes | bytearray | memoryview | NDArray[Any]

# ---------------------------------------------------------------------------------------------
# shared helpers
# ---------------------------------------------------------------------------------------------

#: Exceptions a native codec or a slicing mistake on hostile input can raise; they are turned into
#: CompressionError at the API boundary so callers only ever have to catch kafkalog's errors.
_WRAPPED_ERRORS: tuple[type[BaseException], ...] = (
    ValueError,
    IndexError,
    OverflowError,
    MemoryError,
    struct.error,
    zlib.error,
    cramjam.DecompressionError,
)

_U32_LE = struct.Struct("<I")
_I32_BE = struct.Struct(">i")


def _as_bytes_view(data: BytesLike) -> memoryview:
    """A flat unsigned-byte view, so slicing never copies and indexing yields ints 0..255."""
    view = data.data if isinstance(data, np.ndarray) else memoryview(data)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


def _alloc(size: int) -> memoryview:
    """An uninitialised output buffer: ``np.empty`` does not touch its pages, unlike bytearray.

    An upper bound can be far above the real output (a zstd frame without content size reserves
    128 KiB per compressed block, an LZ4 block 255x its size); untouched pages cost neither
    time nor resident memory.  Plain ``malloc`` (not Arrow's caching pool): large blocks go back
    to the OS when freed, so a reserved-but-unused bound never lingers in the resident set.
    The view keeps the array alive.
    """
    return np.empty(size, dtype=np.uint8).data


def _limit_error(
    codec: str, limit: int, position: int | None, detail: str = ""
) -> CompressionError:
    extra = f" ({detail})" if detail else ""
    return DecompressionLimitError(
        f"{codec} payload decompresses to more than the limit of {limit} bytes{extra}",
        position=position,
    )


# ---------------------------------------------------------------------------------------------
# gzip
# ---------------------------------------------------------------------------------------------

#: Java's GZIPOutputStream header: no flags, mtime 0, XFL 0, OS 0xff (JDK >= 16; older: 0).
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
_FHCRC = 0x02
_FEXTRA = 0x04
_FNAME = 0x08
_FCOMMENT = 0x10
#: Input is fed to zlib in growing windows: whatever zlib reads past a member's end comes back as a
#: copied ``unused_data``, so feeding the whole remainder would make N tiny concatenated members
#: cost O(N * len(data)).  Starting small and doubling keeps the waste proportional to the member.
_GZIP_FIRST_FEED = 4096
_GZIP_MAX_FEED = 1 << 22
_GZIP_CHUNK = 1 << 20


def _gzip_compress(data: BytesLike, level: int | None) -> bytes:
    """Java's GZIPOutputStream bytes: the spec verified zlib raw deflate + this header match."""
    if level is None or level == -1:
        level = 6
    elif not 1 <= level <= 9:
        raise InvalidRecordError(f"gzip level must be 1..9 or -1 (default), got {level}")
    data = _as_bytes_view(data)
    deflater = zlib.compressobj(level, zlib.DEFLATED, -15, 8, zlib.Z_DEFAULT_STRATEGY)
    body = deflater.compress(data) + deflater.flush()
    trailer = struct.pack("<II", zlib.crc32(data), len(data) & 0xFFFFFFFF)
    return b"".join((_GZIP_HEADER, body, trailer))


def _find_nul(view: memoryview, start: int, end: int) -> int:
    """Index of the NUL ending a gzip FNAME/FCOMMENT field, searched in doubling windows.

    Converting the whole remainder to bytes for one ``find`` would copy it once per member.
    """
    window = 256
    pos = start
    while pos < end:
        stop = min(end, pos + window)
        hit = bytes(view[pos:stop]).find(b"\x00")
        if hit >= 0:
            return pos + hit
        pos = stop
        window *= 2
    return -1


def _gzip_member_body(view: memoryview, pos: int, n: int, first: bool) -> int:
    """Parse the member header at ``pos`` like java.util.zip; return where the deflate starts."""
    what = "gzip stream" if first else f"bytes after the gzip member ending at byte {pos}"
    if n - pos < 10:
        if n - pos >= 2 and (view[pos] != 0x1F or view[pos + 1] != 0x8B):
            raise CompressionError(f"{what}: not a gzip member (bad magic)", position=pos)
        raise CompressionError(f"{what}: truncated gzip header", position=pos)
    if view[pos] != 0x1F or view[pos + 1] != 0x8B:
        raise CompressionError(f"{what}: not a gzip member (bad magic)", position=pos)
    if view[pos + 2] != 8:
        raise CompressionError(
            f"gzip member: unsupported compression method {view[pos + 2]} (only 8, deflate)",
            position=pos + 2,
        )
    flags = view[pos + 3]
    p = pos + 10
    if flags & _FEXTRA:
        if n - p < 2:
            raise CompressionError("gzip header: truncated FEXTRA length", position=p)
        xlen = view[p] | (view[p + 1] << 8)
        p += 2 + xlen
        if p > n:
            raise CompressionError("gzip header: truncated FEXTRA field", position=p - xlen - 2)
    for flag, name in ((_FNAME, "FNAME"), (_FCOMMENT, "FCOMMENT")):
        if flags & flag:
            nul = _find_nul(view, p, n)
            if nul < 0:
                raise CompressionError(f"gzip header: unterminated {name} field", position=p)
            p = nul + 1
    if flags & _FHCRC:
        if n - p < 2:
            raise CompressionError("gzip header: truncated header CRC", position=p)
        stored = view[p] | (view[p + 1] << 8)
        if stored != zlib.crc32(view[pos:p]) & 0xFFFF:
            raise CompressionError("gzip header: header CRC mismatch", position=p)
        p += 2
    return p


def _gzip_decompress(view: memoryview, magic: int, limit: int) -> bytes | memoryview:
    """Read concatenated gzip members like GZIPInputStream, bounded by ``limit``.

    zlib's ``max_length`` caps each call's output, so a bomb stops after ``limit`` bytes (plus one
    probe byte that proves there is more); CRC-32 and ISIZE trailers are verified per member.
    """
    n = len(view)
    if n == 0:
        raise CompressionError("empty gzip stream", position=0)
    out_buf = _alloc(limit)  # untouched pages cost nothing until written
    produced = 0
    pos = 0
    first = True
    while True:
        body = _gzip_member_body(view, pos, n, first)
        first = False
        inflater = zlib.decompressobj(-15)
        crc = 0
        member_out = 0
        feed_pos = body
        feed = _GZIP_FIRST_FEED
        pending: bytes | memoryview = b""
        need_input = True
        while True:
            if need_input:
                if feed_pos >= n:
                    raise CompressionError(
                        f"gzip member at byte {pos}: truncated deflate data", position=n
                    )
                pending = view[feed_pos : feed_pos + feed]
                feed_pos += len(pending)
                feed = min(feed * 2, _GZIP_MAX_FEED)
            room = limit - produced
            # small chunks copied into one buffer: peak memory stays near the output itself
            chunk = min(room, _GZIP_CHUNK) if room > 0 else 1
            try:
                out = inflater.decompress(pending, chunk)
            except zlib.error as exc:
                raise CompressionError(
                    f"gzip member at byte {pos}: corrupt deflate data ({exc})", position=body
                ) from None
            if out:
                if room <= 0:
                    raise _limit_error("gzip", limit, body)
                out_buf[produced : produced + len(out)] = out
                produced += len(out)
                member_out += len(out)
                crc = zlib.crc32(out, crc)
            if inflater.eof:
                break
            pending = inflater.unconsumed_tail
            # zlib can still have output buffered when it stopped because max_length was reached.
            need_input = not pending and len(out) < chunk
        end = feed_pos - len(inflater.unused_data)
        if n - end < 8:
            raise CompressionError(
                f"gzip member at byte {pos}: truncated trailer (CRC-32 and ISIZE)", position=end
            )
        stored_crc, stored_size = struct.unpack_from("<II", view, end)
        if stored_crc != crc:
            raise CompressionError(
                f"gzip member at byte {pos}: CRC-32 mismatch "
                f"(stored 0x{stored_crc:08x}, computed 0x{crc:08x})",
                position=end,
            )
        if stored_size != member_out & 0xFFFFFFFF:
            raise CompressionError(
                f"gzip member at byte {pos}: ISIZE mismatch "
                f"(stored {stored_size}, decompressed {member_out})",
                position=end + 4,
            )
        pos = end + 8
        if pos >= n:
            break
    return out_buf[:produced]


# ---------------------------------------------------------------------------------------------
# snappy (xerial framing)
# ---------------------------------------------------------------------------------------------

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEAD = _XERIAL_MAGIC[:4]
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024


def _snappy_compress(data: BytesLike, level: int | None) -> bytes:
    """xerial SnappyOutputStream output: 16-byte header, then length-prefixed 32 KiB raw blocks."""
    if level is not None:
        raise InvalidRecordError("snappy has no compression level")
    view = _as_bytes_view(data)
    parts: list[bytes | memoryview | cramjam.Buffer] = [_XERIAL_HEADER]
    for start in range(0, len(view), _XERIAL_BLOCK):
        block = cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK])
        parts.append(_I32_BE.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_preamble(view: memoryview, start: int, end: int) -> int:
    """The uncompressed length a raw snappy block declares (uint32 varint, at most 5 bytes).

    Read here rather than by the codec so the size can be checked against the limit before the
    codec allocates it.
    """
    value = 0
    shift = 0
    p = start
    while True:
        if p >= end:
            raise CompressionError(
                "snappy block: truncated uncompressed-length preamble", position=start
            )
        byte = view[p]
        value |= (byte & 0x7F) << shift
        p += 1
        if byte < 0x80:
            break
        shift += 7
        if shift >= 35:
            raise CompressionError(
                "snappy block: uncompressed-length varint longer than 5 bytes", position=start
            )
    if value > 0xFFFFFFFF:
        raise CompressionError("snappy block: uncompressed length exceeds 2^32-1", position=start)
    return value


def _snappy_decompress(view: memoryview, magic: int, limit: int) -> bytes | memoryview:
    """xerial framing (headers may repeat mid-stream), or one raw block when the magic is absent."""
    n = len(view)
    blocks: list[tuple[int, int, int]] = []  # (start, end, uncompressed length)
    total = 0
    if n >= 16 and view[:8] == _XERIAL_MAGIC:
        pos = 0
        while pos < n:
            if n - pos < 4:
                raise CompressionError(
                    "snappy (xerial): truncated chunk length at end of stream", position=pos
                )
            if view[pos : pos + 4] == _XERIAL_HEAD:
                # A concatenated stream: xerial treats this "length" as the next header.
                if n - pos < 16 or view[pos : pos + 8] != _XERIAL_MAGIC:
                    raise CompressionError("snappy (xerial): corrupt stream header", position=pos)
                version = _I32_BE.unpack_from(view, pos + 8)[0]
                if version < 1:
                    raise CompressionError(
                        f"snappy (xerial): incompatible stream version {version}",
                        position=pos + 8,
                    )
                pos += 16
                continue
            length = _I32_BE.unpack_from(view, pos)[0]
            if length < 0:
                raise CompressionError(
                    f"snappy (xerial): negative chunk length {length}", position=pos
                )
            start = pos + 4
            end = start + length
            if end > n:
                raise CompressionError(
                    f"snappy (xerial): chunk of {length} bytes truncated ({n - start} bytes left)",
                    position=pos,
                )
            size = _snappy_preamble(view, start, end)
            total += size
            if total > limit:
                raise _limit_error("snappy", limit, pos)
            blocks.append((start, end, size))
            pos = end
    else:
        size = _snappy_preamble(view, 0, n)
        if size > limit:
            raise _limit_error("snappy", limit, 0, f"raw block declares {size} bytes")
        blocks.append((0, n, size))
        total = size
    out = _alloc(total)
    opos = 0
    for start, end, size in blocks:
        try:
            got = cramjam.snappy.decompress_raw_into(view[start:end], out[opos : opos + size])
        except cramjam.DecompressionError as exc:
            raise CompressionError(f"snappy block: {exc}", position=start) from None
        if got != size:
            raise CompressionError(
                f"snappy block: declared {size} bytes but decoded {got}", position=start
            )
        opos += size
    return out


# ---------------------------------------------------------------------------------------------
# lz4 (Kafka's LZ4 frame)
# ---------------------------------------------------------------------------------------------

_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_FLG = 0x60  # version 01, independent blocks, no checksums, no content size
_LZ4_BD = 0x40  # 64 KiB max block
_LZ4_BLOCK = 64 * 1024
_LZ4_STORED = 0x80000000
_LZ4_END_MARK = b"\x00\x00\x00\x00"
_LZ4_DEFAULT_LEVEL = 9
#: One LZ4 input byte expands to at most 255 output bytes (a 0xff match-length byte), so a
#: compressed block of s bytes bounds its output by 255*s: small blocks reserve little space.
_LZ4_MAX_RATIO = 255


def _lz4_header(magic: int) -> bytes:
    """Frame header; magic 0 hashes the magic bytes too (KAFKA-3160, kept for old readers)."""
    descriptor = bytes((_LZ4_FLG, _LZ4_BD))
    hashed = _LZ4_MAGIC + descriptor if magic == 0 else descriptor
    hc = (xxhash.xxh32_intdigest(hashed) >> 8) & 0xFF
    return _LZ4_MAGIC + descriptor + bytes((hc,))


_LZ4_HEADER_V0 = _lz4_header(0)
_LZ4_HEADER = _lz4_header(2)


def _lz4_compress(data: BytesLike, magic: int, level: int | None) -> bytes:
    """Kafka's Lz4BlockOutputStream: 64 KiB independent blocks, stored raw when not smaller."""
    if level is None:
        level = _LZ4_DEFAULT_LEVEL
    if not 1 <= level <= 17:
        raise InvalidRecordError(f"lz4 level must be 1..17, got {level}")
    view = _as_bytes_view(data)
    parts: list[bytes | memoryview | cramjam.Buffer] = [
        _LZ4_HEADER_V0 if magic == 0 else _LZ4_HEADER
    ]
    for start in range(0, len(view), _LZ4_BLOCK):
        chunk = view[start : start + _LZ4_BLOCK]
        if level == _LZ4_DEFAULT_LEVEL:
            block = cramjam.lz4.compress_block(chunk, store_size=False)
        else:
            block = cramjam.lz4.compress_block(
                chunk, mode="high_compression", compression=level, store_size=False
            )
        if len(block) >= len(chunk):
            parts.append(_U32_LE.pack(len(chunk) | _LZ4_STORED))
            parts.append(chunk)
        else:
            parts.append(_U32_LE.pack(len(block)))
            parts.append(block)
    parts.append(_LZ4_END_MARK)
    return b"".join(parts)


# A planned LZ4 block: (source start, source size, compressed?, output upper bound).
_Lz4Block = tuple[int, int, bool, int]
# A planned frame: (frame start, blocks, content checksum or None).
_Lz4Frame = tuple[int, list[_Lz4Block], int | None]


def _lz4_scan_frame(
    view: memoryview, pos: int, n: int, magic: int
) -> tuple[_Lz4Frame, int, int, int]:
    """Validate one frame's header and block headers; return (frame, end, lower, upper) sizes."""
    if n - pos < 7:
        raise CompressionError("lz4 frame: truncated frame header", position=pos)
    if view[pos : pos + 4] != _LZ4_MAGIC:
        raise CompressionError("lz4 frame: bad magic (expected 04 22 4d 18)", position=pos)
    flg = view[pos + 4]
    bd = view[pos + 5]
    if flg >> 6 != 1:
        raise CompressionError(f"lz4 frame: unsupported version {flg >> 6}", position=pos + 4)
    if flg & 0x03:
        raise CompressionError("lz4 frame: reserved FLG bits set", position=pos + 4)
    if not flg & 0x20:
        raise CompressionError("lz4 frame: dependent blocks are not supported", position=pos + 4)
    block_checksum = bool(flg & 0x10)
    content_checksum = bool(flg & 0x04)
    if bd & 0x8F:
        raise CompressionError("lz4 frame: reserved BD bits set", position=pos + 5)
    code = (bd >> 4) & 0x07
    if code < 4:
        raise CompressionError(f"lz4 frame: invalid block size code {code}", position=pos + 5)
    block_max = 1 << (2 * code + 8)
    p = pos + 6
    if flg & 0x08:  # content size: skipped, like Kafka (it is never trusted for allocation)
        if n - p < 8:
            raise CompressionError("lz4 frame: truncated content size", position=p)
        p += 8
    if p >= n:
        raise CompressionError("lz4 frame: truncated header checksum", position=p)
    if magic != 0:  # Kafka ignores HC for magic 0, whose writers hashed the magic bytes too
        expected = (xxhash.xxh32_intdigest(view[pos + 4 : p]) >> 8) & 0xFF
        if view[p] != expected:
            raise CompressionError(
                f"lz4 frame: header checksum mismatch (stored 0x{view[p]:02x}, "
                f"expected 0x{expected:02x})",
                position=p,
            )
    p += 1
    blocks: list[_Lz4Block] = []
    lower = 0
    upper = 0
    while True:
        if n - p < 4:
            raise CompressionError(
                "lz4 frame: stream ends without an end mark (truncated)", position=p
            )
        word = _U32_LE.unpack_from(view, p)[0]
        size = word & 0x7FFFFFFF
        if size == 0:  # Kafka treats 0x80000000 as an end mark too
            p += 4
            break
        if size > block_max:
            raise CompressionError(
                f"lz4 frame: block size {size} exceeds the frame maximum {block_max}", position=p
            )
        start = p + 4
        if n - start < size:
            raise CompressionError(
                f"lz4 frame: block of {size} bytes truncated ({n - start} bytes left)", position=p
            )
        end = start + size
        if block_checksum:
            if n - end < 4:
                raise CompressionError("lz4 frame: truncated block checksum", position=end)
            if xxhash.xxh32_intdigest(view[start:end]) != _U32_LE.unpack_from(view, end)[0]:
                raise CompressionError("lz4 frame: block checksum mismatch", position=end)
            end += 4
        if word & _LZ4_STORED:
            blocks.append((start, size, False, size))
            lower += size
            upper += size
        else:
            bound = min(block_max, size * _LZ4_MAX_RATIO)
            blocks.append((start, size, True, bound))
            upper += bound
        p = end
    checksum: int | None = None
    if content_checksum:
        if n - p < 4:
            raise CompressionError("lz4 frame: truncated content checksum", position=p)
        checksum = _U32_LE.unpack_from(view, p)[0]
        p += 4
    return (pos, blocks, checksum), p, lower, upper


def _lz4_decompress(view: memoryview, magic: int, limit: int) -> bytes | memoryview:
    """Kafka's LZ4 frame reader, plus concatenated frames; each block decoded in place."""
    n = len(view)
    frames: list[_Lz4Frame] = []
    pos = 0
    lower = 0
    upper = 0
    while True:
        frame, pos, frame_lower, frame_upper = _lz4_scan_frame(view, pos, n, magic)
        frames.append(frame)
        lower += frame_lower
        upper += frame_upper
        if lower > limit:
            raise _limit_error("lz4", limit, frame[0])
        if pos >= n:
            break
        if view[pos : pos + 4] != _LZ4_MAGIC:
            raise CompressionError(
                "lz4: trailing bytes after the end of the frame are not another frame",
                position=pos,
            )
    size = min(upper, limit)
    limited = upper > limit
    out = _alloc(size)
    opos = 0
    for frame_pos, blocks, checksum in frames:
        frame_out = opos
        for start, length, compressed, bound in blocks:
            room = min(bound, size - opos)
            if not compressed:
                if length > room:
                    raise _limit_error("lz4", limit, start - 4)
                out[opos : opos + length] = view[start : start + length]
                opos += length
                continue
            try:
                got = cramjam.lz4.decompress_block_into(
                    view[start : start + length], out[opos : opos + room]
                )
            except cramjam.DecompressionError as exc:
                if limited and room < bound:
                    raise _limit_error(
                        "lz4", limit, start - 4, "or the block at this position is corrupt"
                    ) from None
                raise CompressionError(
                    f"lz4 block: corrupt data ({exc})", position=start - 4
                ) from None
            opos += got
        if checksum is not None and xxhash.xxh32_intdigest(out[frame_out:opos]) != checksum:
            raise CompressionError("lz4 frame: content checksum mismatch", position=frame_pos)
    return out[:opos]


# ---------------------------------------------------------------------------------------------
# zstd
# ---------------------------------------------------------------------------------------------

_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_SKIPPABLE_MASK = 0xFFFFFFF0
_ZSTD_SKIPPABLE = 0x184D2A50
_ZSTD_BLOCK_MAX = 128 * 1024
_ZSTD_DEFAULT_LEVEL = 3
_ZSTD_MIN_LEVEL = -(1 << 17)
_ZSTD_MAX_LEVEL = 22
_FCS_SIZES = (0, 2, 4, 8)
_DID_SIZES = (0, 1, 2, 4)


def _zstd_compress(data: BytesLike, magic: int, level: int | None) -> bytes:
    """zstd-jni's ZstdOutputStream bytes, as Kafka drives it: stream, flush, then end the frame.

    Streaming leaves the content size out of the frame header, the flush closes the data block
    and ending the frame adds an empty last block (``01 00 00``) -- exactly what Kafka's
    BufferedOutputStream.close() -> flush -> close sequence produces (verified byte-identical
    against Java-written fixtures).  The one-shot ``cramjam.zstd.compress`` would be equally
    valid but records the content size, so its bytes differ from Java's.
    """
    if magic < 2:
        raise CompressionError(f"zstd requires magic 2 (got magic {magic})")
    if level is None:
        level = _ZSTD_DEFAULT_LEVEL
    if not _ZSTD_MIN_LEVEL <= level <= _ZSTD_MAX_LEVEL:
        raise InvalidRecordError(f"zstd level must be {_ZSTD_MIN_LEVEL}..22, got {level}")
    compressor = cramjam.zstd.Compressor(level=level)
    # The streaming compressor only takes real bytes objects; anything else costs one copy.
    compressor.compress(data if type(data) is bytes else bytes(_as_bytes_view(data)))
    body = compressor.flush()
    return bytes(body) + bytes(compressor.finish())


# A planned zstd frame: (start, end, output upper bound, exact size known?).
_ZstdFrame = tuple[int, int, int, bool]


def _zstd_scan_frame(view: memoryview, pos: int, n: int) -> tuple[_ZstdFrame, int]:
    """Walk one frame's header and block headers (RFC 8878) to bound its output.

    Raw and RLE blocks state their exact size; a compressed block yields at most
    min(window, 128 KiB).  A declared content size is exact (libzstd verifies it).
    """
    if n - pos < 6:
        raise CompressionError("zstd frame: truncated frame header", position=pos)
    fhd = view[pos + 4]
    if fhd & 0x08:
        raise CompressionError("zstd frame: reserved header bit set", position=pos + 4)
    single_segment = bool(fhd & 0x20)
    fcs_size = _FCS_SIZES[fhd >> 6]
    if single_segment and fcs_size == 0:
        fcs_size = 1
    header_len = 5 + (0 if single_segment else 1) + _DID_SIZES[fhd & 0x03] + fcs_size
    if n - pos < header_len:
        raise CompressionError("zstd frame: truncated frame header", position=pos)
    p = pos + 5
    window = 0
    if not single_segment:
        descriptor = view[p]
        window_log = 10 + (descriptor >> 3)
        window = (1 << window_log) + ((1 << window_log) >> 3) * (descriptor & 0x07)
        p += 1
    p += _DID_SIZES[fhd & 0x03]
    content_size = -1
    if fcs_size:
        if n - p < fcs_size:
            raise CompressionError("zstd frame: truncated frame header", position=pos)
        content_size = int.from_bytes(view[p : p + fcs_size], "little")
        if fcs_size == 2:
            content_size += 256
        p += fcs_size
    if single_segment:
        window = content_size
    block_max = min(window, _ZSTD_BLOCK_MAX)
    upper = 0
    while True:
        if n - p < 3:
            raise CompressionError("zstd frame: truncated block header", position=p)
        header = view[p] | (view[p + 1] << 8) | (view[p + 2] << 16)
        block_type = (header >> 1) & 0x03
        block_size = header >> 3
        start = p + 3
        if block_type == 0:  # raw
            p = start + block_size
            upper += block_size
        elif block_type == 1:  # RLE: one byte repeated block_size times
            p = start + 1
            upper += block_size
        elif block_type == 2:
            if block_size > block_max:
                raise CompressionError(
                    f"zstd frame: compressed block of {block_size} bytes exceeds the "
                    f"block maximum {block_max}",
                    position=p,
                )
            p = start + block_size
            upper += block_max
        else:
            raise CompressionError("zstd frame: reserved block type", position=p)
        if p > n:
            raise CompressionError("zstd frame: truncated block", position=start - 3)
        if header & 1:
            break
    if fhd & 0x04:
        p += 4
        if p > n:
            raise CompressionError("zstd frame: truncated content checksum", position=p - 4)
    if content_size >= 0:
        return (pos, p, content_size, True), p
    return (pos, p, upper, False), p


def _zstd_decompress(view: memoryview, magic: int, limit: int) -> bytes | memoryview:
    """Bounded zstd: plan every frame, then decode each into a slice sized by its bound.

    ``cramjam.zstd.decompress`` is not safe here: it ignores ``output_len`` as a bound (grows
    past it, and pads short output with zeros).  ``decompress_into`` on a fixed slice fails with
    "failed to write whole buffer" instead of writing past it, which is the bound we need.
    """
    if magic < 2:
        raise CompressionError(f"zstd requires magic 2 (got magic {magic})", position=0)
    n = len(view)
    if n == 0:
        raise CompressionError("empty zstd stream", position=0)
    frames: list[_ZstdFrame] = []
    lower = 0
    upper = 0
    pos = 0
    while pos < n:
        if n - pos < 4:
            raise CompressionError("zstd: truncated frame magic", position=pos)
        frame_magic = _U32_LE.unpack_from(view, pos)[0]
        if frame_magic & _ZSTD_SKIPPABLE_MASK == _ZSTD_SKIPPABLE:
            if n - pos < 8:
                raise CompressionError("zstd: truncated skippable frame", position=pos)
            skip = _U32_LE.unpack_from(view, pos + 4)[0]
            if n - pos - 8 < skip:
                raise CompressionError("zstd: truncated skippable frame", position=pos)
            pos += 8 + skip
            continue
        if frame_magic != _ZSTD_MAGIC:
            what = "bad magic" if pos == 0 else "trailing bytes after the last frame"
            raise CompressionError(f"zstd: {what} (not a zstd frame)", position=pos)
        frame, pos = _zstd_scan_frame(view, pos, n)
        if frame[3]:
            lower += frame[2]
            if lower > limit:
                raise _limit_error("zstd", limit, frame[0], f"frame declares {frame[2]} bytes")
        upper += frame[2]
        frames.append(frame)
    size = min(upper, limit)
    limited = upper > limit
    if len(frames) == 1:
        return _zstd_one_frame(view, frames[0], size, limited)
    out = _alloc(size)
    opos = 0
    for start, end, bound, exact in frames:
        room = min(bound, size - opos)
        try:
            got = cramjam.zstd.decompress_into(view[start:end], out[opos : opos + room])
        except cramjam.DecompressionError as exc:
            if "whole buffer" in str(exc):
                if limited and room < bound:
                    raise _limit_error("zstd", limit, start) from None
                raise CompressionError(
                    "zstd frame: decodes to more bytes than its header and blocks allow",
                    position=start,
                ) from None
            raise CompressionError(f"zstd frame: corrupt data ({exc})", position=start) from None
        if exact and got != bound:
            raise CompressionError(
                f"zstd frame: declared content size {bound} but decoded {got}", position=start
            )
        opos += got
    return out[:opos]


_ZSTD_LOCAL = threading.local()


def _zstd_one_frame(view: memoryview, frame: _ZstdFrame, size: int, limited: bool) -> bytes:
    """The common case (one frame per batch) through python-zstandard: its bundled libzstd
    decodes ~15% faster than cramjam's and it drops the GIL while it works. The frame was
    already walked and bounded; ``max_output_size`` caps the one allocation it makes (one byte
    of slack, because libzstd reports a buffer filled to the last byte as unfinished)."""
    start, end, bound, exact = frame
    dctx = getattr(_ZSTD_LOCAL, "dctx", None)
    if dctx is None:
        dctx = _ZSTD_LOCAL.dctx = zstandard.ZstdDecompressor()
    try:
        out: bytes = dctx.decompress(view[start:end], max_output_size=size + 1)
    except zstandard.ZstdError as exc:
        text = str(exc)
        if limited and ("full frame" in text or "too small" in text):
            raise _limit_error("zstd", size, start) from None
        raise CompressionError(f"zstd frame: corrupt data ({text})", position=start) from None
    if len(out) > size:
        if limited:
            raise _limit_error("zstd", size, start)
        raise CompressionError(
            "zstd frame: decodes to more bytes than its header and blocks allow", position=start
        )
    if exact and len(out) != bound:
        raise CompressionError(
            f"zstd frame: declared content size {bound} but decoded {len(out)}", position=start
        )
    return out


# ---------------------------------------------------------------------------------------------
# public API
# ---------------------------------------------------------------------------------------------

_Decoder = Callable[[memoryview, int, int], bytes | memoryview]
_DECODERS: dict[int, _Decoder] = {
    Compression.GZIP: _gzip_decompress,
    Compression.SNAPPY: _snappy_decompress,
    Compression.LZ4: _lz4_decompress,
    Compression.ZSTD: _zstd_decompress,
}


def compress(
    codec: Compression | int,
    data: BytesLike,
    *,
    magic: int = 2,
    level: int | None = None,
) -> bytes:
    """Compress ``data`` the way the Java client would for a batch/wrapper of ``magic``.

    ``level`` follows Kafka's ``compression.<codec>.level`` ranges (gzip 1..9 or -1, lz4 1..17
    where 9 selects the fast compressor, zstd -131072..22); a bad level is the caller's mistake
    and raises :class:`InvalidRecordError`.  zstd with magic 0/1 and unknown codec ids raise
    :class:`CompressionError`, matching what Kafka rejects.
    """
    cid = int(codec)
    if cid == Compression.NONE:
        if level is not None:
            raise InvalidRecordError("codec none has no compression level")
        return bytes(data)
    if cid == Compression.GZIP:
        return _gzip_compress(data, level)
    if cid == Compression.SNAPPY:
        return _snappy_compress(data, level)
    if cid == Compression.LZ4:
        return _lz4_compress(data, magic, level)
    if cid == Compression.ZSTD:
        return _zstd_compress(data, magic, level)
    raise CompressionError(f"unknown compression codec id {cid}")


def decompress(
    codec: Compression | int,
    data: BytesLike,
    *,
    magic: int = 2,
    limit: int,
) -> bytes:
    """As :func:`decompress_buffer`, returning ``bytes``."""
    out = decompress_buffer(codec, data, magic=magic, limit=limit)
    return out if isinstance(out, bytes) else out.tobytes()


def decompress_buffer(
    codec: Compression | int,
    data: BytesLike,
    *,
    magic: int = 2,
    limit: int,
) -> bytes | memoryview:
    """Decompress one batch's (or legacy wrapper's) payload, producing at most ``limit`` bytes.

    Output larger than ``limit`` raises :class:`CompressionError` before more than ``limit``
    bytes are produced or reserved.  Malformed, truncated or unknown-codec input raises
    :class:`CompressionError` with ``position`` = byte offset in ``data`` where the problem was
    found (``path`` is None: callers relocate with ``.located()``).

    Stricter than Kafka's Java reader, on purpose (bytes Java writers never produce): trailing
    bytes after the last gzip member / LZ4 frame / zstd frame are errors (Java ignores them for
    gzip and LZ4; LZ4 frames that follow are decoded, Java would ignore them too); a 1-3 byte
    tail after the last xerial chunk is an error (xerial stops silently); LZ4 content checksums
    are verified (the 4.0 snapshot skipped them, later Kafka verifies them).  Like Kafka, an LZ4
    frame without its end mark is an error and the LZ4 header checksum is ignored for magic 0.
    Codec NONE returns ``bytes(data)`` (still subject to ``limit``).
    """
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    cid = int(codec)
    if cid == Compression.NONE:
        view = _as_bytes_view(data)
        if len(view) > limit:
            raise _limit_error("uncompressed", limit, None)
        return bytes(view)
    decoder = _DECODERS.get(cid)
    if decoder is None:
        raise CompressionError(f"unknown compression codec id {cid}", position=None)
    try:
        return decoder(_as_bytes_view(data), magic, limit)
    except CompressionError:
        raise
    except _WRAPPED_ERRORS as exc:
        name = Compression(cid).label
        raise CompressionError(
            f"{name} payload cannot be decompressed ({type(exc).__name__}: {exc})", position=None
        ) from None
