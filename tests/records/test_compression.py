"""kafkalog.records.compression: Java-identical writers, defensive bounded readers.

Evidence layers: round trips over block-boundary sizes; independent decoders (Python gzip,
kafka-python, aiokafka, python-lz4, python-zstandard) read our output and their encoders' output
reads with ours; Java-written fixture batches are re-compressed byte for byte; bombs stay within
the limit in time and resident memory; hypothesis mutates valid streams and only
CompressionError (never a bare library exception, never output past the limit) may come out.
"""

from __future__ import annotations

import gzip
import io
import os
import random
import struct
import subprocess
import sys
import textwrap
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import aiokafka.codec as aiocodec
import cramjam
import kafka.codec as kcodec
import lz4.frame
import numpy as np
import pytest
import xxhash
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkalog.errors import CompressionError, InvalidRecordError
from kafkalog.records.compression import compress, decompress
from kafkalog.records.types import Compression
from provenance import FIXTURES

JAVACODE = FIXTURES / "kafka-4.0-snapshot-javacode"
BROKER_090 = FIXTURES / "kafka-0.9.0.1-broker"
SRC = Path(__file__).resolve().parents[2] / "src"

GZIP, SNAPPY, LZ4, ZSTD, NONE = (
    Compression.GZIP,
    Compression.SNAPPY,
    Compression.LZ4,
    Compression.ZSTD,
    Compression.NONE,
)
MiB = 1 << 20
BIG = 64 * MiB  # a limit that never interferes


# ---------------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------------


def _random(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


def _repetitive(n: int, seed: int) -> bytes:
    """Record-like data: a small vocabulary of byte strings, compresses 3-10x like real batches."""
    rng = random.Random(seed)
    words = [rng.randbytes(rng.randint(1, 12)) for _ in range(64)]
    out = bytearray()
    while len(out) < n:
        out += rng.choice(words)
    return bytes(out[:n])


SIZES = [0, 1, 100, 32 * 1024 - 1, 32 * 1024, 32 * 1024 + 1, 65535, 65536, 65537, 200 * 1024]
DATA = {
    f"{kind}-{n}": gen(n, n)
    for n in SIZES
    for kind, gen in (("random", _random), ("repetitive", _repetitive))
}
CODEC_MAGIC = [
    (codec, magic)
    for codec in (NONE, GZIP, SNAPPY, LZ4, ZSTD)
    for magic in (0, 1, 2)
    if codec is not ZSTD or magic == 2
]


def _id(codec: Compression, magic: int) -> str:
    return f"{codec.label}-v{magic}"


# ---------------------------------------------------------------------------------------------
# round trips
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("codec", "magic"), CODEC_MAGIC, ids=[_id(*cm) for cm in CODEC_MAGIC])
@pytest.mark.parametrize("name", list(DATA))
def test_round_trip(codec: Compression, magic: int, name: str) -> None:
    data = DATA[name]
    packed = compress(codec, data, magic=magic)
    assert isinstance(packed, bytes)
    out = decompress(codec, packed, magic=magic, limit=len(data))
    assert isinstance(out, bytes)
    assert out == data
    if data:
        with pytest.raises(CompressionError, match="limit"):
            decompress(codec, packed, magic=magic, limit=len(data) - 1)


@pytest.mark.parametrize(("codec", "magic"), CODEC_MAGIC, ids=[_id(*cm) for cm in CODEC_MAGIC])
def test_inputs_of_every_buffer_kind(codec: Compression, magic: int) -> None:
    data = DATA["repetitive-65537"]
    packed = compress(codec, data, magic=magic)
    for variant in (bytearray(data), memoryview(data), np.frombuffer(data, np.uint8)):
        assert compress(codec, variant, magic=magic) == packed
    framed = b"xx" + packed + b"yy"
    for variant in (
        memoryview(framed)[2:-2],
        bytearray(packed),
        np.frombuffer(framed, np.uint8)[2:-2],
    ):
        assert decompress(codec, variant, magic=magic, limit=len(data)) == data


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD], ids=lambda c: c.label)
def test_limit_zero_and_empty_payload(codec: Compression) -> None:
    assert decompress(codec, compress(codec, b""), limit=0) == b""
    # a compressed stream is never zero bytes long
    with pytest.raises(CompressionError) as info:
        decompress(codec, b"", limit=BIG)
    assert info.value.position == 0
    assert info.value.path is None


def test_none_codec_both_ways() -> None:
    assert compress(NONE, memoryview(b"abc")) == b"abc"
    assert decompress(NONE, memoryview(b"abc"), limit=3) == b"abc"
    with pytest.raises(CompressionError, match="limit"):
        decompress(NONE, b"abc", limit=2)


def test_codec_given_as_plain_int() -> None:
    packed = compress(3, b"hello" * 100)
    assert decompress(3, packed, limit=500) == b"hello" * 100


# ---------------------------------------------------------------------------------------------
# independent decoders read our output
# ---------------------------------------------------------------------------------------------

INTEROP = ["random-0", "repetitive-100", "random-32768", "repetitive-65537", "repetitive-204800"]


@pytest.mark.parametrize("name", INTEROP)
def test_our_output_decodes_elsewhere(name: str) -> None:
    data = DATA[name]
    gz = compress(GZIP, data)
    assert gz[:10] == bytes.fromhex("1f8b08000000000000ff")
    assert gzip.decompress(gz) == data
    assert kcodec.gzip_decode(gz) == data

    sn = compress(SNAPPY, data)
    assert sn[:16] == bytes.fromhex("82534e41505059000000000100000001")
    if data:  # both clients only detect xerial framing when a chunk follows the header
        assert kcodec.snappy_decode(sn) == data
        assert aiocodec.snappy_decode(sn) == data

    for magic in (1, 2):
        l4 = compress(LZ4, data, magic=magic)
        assert l4[:7] == bytes.fromhex("04224d18604082")
        assert lz4.frame.decompress(l4) == data
        assert kcodec.lz4_decode(l4) == data
    legacy = compress(LZ4, data, magic=0)
    assert legacy[:7] == bytes.fromhex("04224d1860401a")  # KAFKA-3160 checksum over the magic
    assert kcodec.lz4_decode_old_kafka(legacy) == data

    zs = compress(ZSTD, data)
    assert zstandard.ZstdDecompressor().decompressobj().decompress(zs) == data
    assert kcodec.zstd_decode(zs) == data
    params = zstandard.get_frame_parameters(zs)
    assert params.content_size == zstandard.CONTENTSIZE_UNKNOWN  # like zstd-jni's stream


def test_lz4_block_layout_matches_kafka_writer() -> None:
    """64 KiB blocks, incompressible blocks stored with bit 31, end mark, no content checksum."""
    data = _random(65536 + 10, 7)
    packed = compress(LZ4, data)
    first = struct.unpack_from("<I", packed, 7)[0]
    assert first == 0x80000000 | 65536
    assert packed[11 : 11 + 65536] == data[:65536]
    second = struct.unpack_from("<I", packed, 11 + 65536)[0]
    assert second == 0x80000000 | 10
    assert packed[-4:] == b"\x00\x00\x00\x00"
    assert len(packed) == 7 + 4 + 65536 + 4 + 10 + 4
    assert compress(LZ4, b"") == bytes.fromhex("04224d18604082") + b"\x00" * 4


def test_snappy_chunks_are_32k() -> None:
    data = _repetitive(3 * 32768 + 5, 3)
    packed = compress(SNAPPY, data)
    pos, sizes = 16, []
    while pos < len(packed):
        (length,) = struct.unpack_from(">i", packed, pos)
        block = packed[pos + 4 : pos + 4 + length]
        sizes.append(cramjam.snappy.decompress_raw_len(block))
        pos += 4 + length
    assert sizes == [32768, 32768, 32768, 5]
    assert compress(SNAPPY, b"") == bytes.fromhex("82534e41505059000000000100000001")


# ---------------------------------------------------------------------------------------------
# other encoders' output reads with ours
# ---------------------------------------------------------------------------------------------


def _foreign_streams(data: bytes) -> Iterator[tuple[str, Compression, int, bytes]]:
    yield "kafka-python gzip", GZIP, 2, kcodec.gzip_encode(data)
    yield "aiokafka gzip", GZIP, 2, aiocodec.gzip_encode(data)
    yield "python gzip", GZIP, 2, gzip.compress(data, mtime=12345)
    yield "zlib wbits=31", GZIP, 2, zlib.compress(data, wbits=31)
    named = io.BytesIO()
    with gzip.GzipFile(filename="records.bin", mode="wb", fileobj=named, mtime=1) as handle:
        handle.write(data)
    yield "gzip FNAME", GZIP, 2, named.getvalue()
    yield "kafka-python snappy xerial", SNAPPY, 2, kcodec.snappy_encode(data)
    yield "kafka-python snappy raw", SNAPPY, 2, kcodec.snappy_encode(data, xerial_compatible=False)
    yield "aiokafka snappy xerial", SNAPPY, 2, aiocodec.snappy_encode(data)
    yield "aiokafka snappy raw", SNAPPY, 2, aiocodec.snappy_encode(data, xerial_compatible=False)
    yield "xerial 8k chunks", SNAPPY, 2, kcodec.snappy_encode(data, xerial_blocksize=8192)
    yield "kafka-python lz4", LZ4, 2, kcodec.lz4_encode(data)
    yield "kafka-python lz4 old kafka", LZ4, 0, kcodec.lz4_encode_old_kafka(data)
    yield "aiokafka lz4", LZ4, 2, aiocodec.lz4_encode(data)
    yield "aiokafka lz4 level 3", LZ4, 2, aiocodec.lz4_encode(data, level=3)
    for size in (
        lz4.frame.BLOCKSIZE_MAX64KB,
        lz4.frame.BLOCKSIZE_MAX256KB,
        lz4.frame.BLOCKSIZE_MAX1MB,
        lz4.frame.BLOCKSIZE_MAX4MB,
    ):
        yield (
            f"lz4.frame block_size={size}",
            LZ4,
            1,
            lz4.frame.compress(data, block_linked=False, block_size=size),
        )
    yield (
        "lz4.frame all checksums + content size",
        LZ4,
        2,
        lz4.frame.compress(
            data,
            block_linked=False,
            content_checksum=True,
            block_checksum=True,
            store_size=True,
        ),
    )
    yield (
        "lz4.frame no content size",
        LZ4,
        2,
        lz4.frame.compress(data, block_linked=False, store_size=False),
    )
    yield "kafka-python zstd", ZSTD, 2, kcodec.zstd_encode(data)
    yield "aiokafka zstd", ZSTD, 2, aiocodec.zstd_encode(data)
    yield "zstandard content size", ZSTD, 2, zstandard.ZstdCompressor(level=3).compress(data)
    yield (
        "zstandard no content size + checksum",
        ZSTD,
        2,
        zstandard.ZstdCompressor(level=3, write_content_size=False, write_checksum=True).compress(
            data
        ),
    )
    stream = zstandard.ZstdCompressor(level=1).compressobj()
    yield "zstandard streaming", ZSTD, 2, stream.compress(data) + stream.flush()
    yield "cramjam zstd one-shot", ZSTD, 2, bytes(cramjam.zstd.compress(data, level=3))


FOREIGN_DATA = ["random-0", "repetitive-100", "random-65537", "repetitive-204800"]


@pytest.mark.parametrize("name", FOREIGN_DATA)
def test_foreign_output_decodes_with_ours(name: str) -> None:
    data = DATA[name]
    seen = 0
    for label, codec, magic, packed in _foreign_streams(data):
        assert decompress(codec, packed, magic=magic, limit=len(data)) == data, label
        seen += 1
    assert seen == 26


def test_gzip_header_fields_and_concatenated_members() -> None:
    body_c = zlib.compressobj(6, zlib.DEFLATED, -15)
    body = body_c.compress(b"payload") + body_c.flush()
    trailer = struct.pack("<II", zlib.crc32(b"payload"), 7)
    flags = 0x04 | 0x08 | 0x10 | 0x02  # FEXTRA, FNAME, FCOMMENT, FHCRC
    head = bytearray(b"\x1f\x8b\x08" + bytes([flags]) + b"\x00" * 4 + b"\x00\x03")
    head += struct.pack("<H", 5) + b"ab\x00cd" + b"name\x00" + b"a comment\x00"
    head += struct.pack("<H", zlib.crc32(head) & 0xFFFF)
    member = bytes(head) + body + trailer
    assert gzip.decompress(member) == b"payload"
    assert decompress(GZIP, member, limit=7) == b"payload"
    two = member + compress(GZIP, b"-second")
    assert decompress(GZIP, two, limit=14) == b"payload-second"
    with pytest.raises(CompressionError, match="limit"):
        decompress(GZIP, two, limit=13)
    bad_hcrc = bytearray(member)
    bad_hcrc[len(head) - 1] ^= 0xFF
    with pytest.raises(CompressionError, match="header CRC") as info:
        decompress(GZIP, bytes(bad_hcrc), limit=7)
    assert info.value.position == len(head) - 2


def test_many_empty_gzip_members_are_linear() -> None:
    """Each member's leftover input is copied by zlib; the growing feed keeps that bounded."""
    empty = compress(GZIP, b"")
    stream = empty * 50_000
    start = time.perf_counter()
    assert decompress(GZIP, stream, limit=0) == b""
    assert time.perf_counter() - start < 5.0


def test_xerial_header_repeated_mid_stream() -> None:
    a, b = _repetitive(40000, 1), _random(1000, 2)
    joined = compress(SNAPPY, a) + compress(SNAPPY, b) + compress(SNAPPY, b"")
    assert decompress(SNAPPY, joined, limit=41000) == a + b


def test_lz4_concatenated_frames() -> None:
    a, b = _repetitive(70000, 4), b"tail"
    joined = compress(LZ4, a) + lz4.frame.compress(b, block_linked=False, content_checksum=True)
    assert decompress(LZ4, joined, limit=70004) == a + b


def test_zstd_multiple_and_skippable_frames() -> None:
    a, b = _repetitive(150000, 5), _random(300, 6)
    skippable = struct.pack("<II", 0x184D2A5E, 3) + b"xyz"
    joined = skippable + compress(ZSTD, a) + skippable + zstandard.ZstdCompressor().compress(b)
    assert decompress(ZSTD, joined, limit=len(a) + len(b)) == a + b


# ---------------------------------------------------------------------------------------------
# Java-written fixtures
# ---------------------------------------------------------------------------------------------


def _v2_payloads(path: Path) -> list[tuple[int, int, bytes]]:
    """(base offset, codec, compressed stream) of every v2 batch in a .log file."""
    raw = path.read_bytes()
    out = []
    pos = 0
    while pos + 12 <= len(raw):
        base, length = struct.unpack_from(">qi", raw, pos)
        batch = raw[pos : pos + 12 + length]
        assert batch[16] == 2
        codec = struct.unpack_from(">h", batch, 21)[0] & 7
        out.append((base, codec, batch[61 : 12 + length]))
        pos += 12 + length
    assert pos == len(raw)
    return out


def _legacy_payloads(path: Path) -> list[tuple[int, int, int, bytes]]:
    """(offset, magic, codec, wrapper value) of every legacy log entry."""
    raw = path.read_bytes()
    out = []
    pos = 0
    while pos + 12 <= len(raw):
        offset, size = struct.unpack_from(">qi", raw, pos)
        message = raw[pos + 12 : pos + 12 + size]
        assert zlib.crc32(message[4:]) == struct.unpack_from(">I", message, 0)[0]
        magic, attributes = message[4], message[5]
        p = 6 + (8 if magic == 1 else 0)
        (key_len,) = struct.unpack_from(">i", message, p)
        p += 4 + max(key_len, 0)
        (value_len,) = struct.unpack_from(">i", message, p)
        out.append((offset, magic, attributes & 7, message[p + 4 : p + 4 + value_len]))
        pos += 12 + size
    assert pos == len(raw)
    return out


def _inner_message_count(data: bytes) -> int:
    """Walk a decompressed legacy message set; every inner message must pass its CRC-32."""
    pos = count = 0
    while pos < len(data):
        _offset, size = struct.unpack_from(">qi", data, pos)
        message = data[pos + 12 : pos + 12 + size]
        assert len(message) == size
        assert zlib.crc32(message[4:]) == struct.unpack_from(">I", message, 0)[0]
        pos += 12 + size
        count += 1
    return count


@pytest.mark.parametrize("topic", ["v2-gzip-0", "v2-snappy-0", "v2-lz4-0", "v2-zstd-0"])
def test_java_v2_batches_recompress_byte_identical(topic: str) -> None:
    """Decompress each Java batch, recompress, compare bytes.

    gzip: JDK 17 GZIPOutputStream (OS byte 0xff) vs zlib raw deflate level 6.  snappy: xerial
    1.1.8.4 (C++ snappy) vs cramjam's snap.  lz4: lz4-java 1.8.0 fast compressor vs cramjam's
    liblz4 LZ4_compress_default.  zstd: zstd-jni stream + flush + end vs cramjam's streaming
    compressor.  All identical here; only gzip identity is promised by the spec, the others
    are pinned so that a change of the native libraries is noticed.
    """
    payloads = _v2_payloads(JAVACODE / topic / "00000000000000000000.log")
    assert len(payloads) == 5
    for base, codec, packed in payloads:
        assert codec == Compression.parse(topic.split("-")[1])
        data = decompress(codec, packed, limit=BIG)
        assert len(data) > 0
        assert compress(codec, data) == packed, (topic, base)


def test_java_v2_recompressed_zstd_and_txn_zstd() -> None:
    for path in (
        JAVACODE / "v2-recompress-zstd-0" / "00000000000000000000.log",
        *sorted((JAVACODE / "v2-txn-0").glob("*.log")),
    ):
        for _base, codec, packed in _v2_payloads(path):
            if codec == ZSTD:
                assert compress(ZSTD, decompress(ZSTD, packed, limit=BIG)) == packed


@pytest.mark.parametrize(
    ("root", "topic"),
    [
        (JAVACODE, "v0-gzip-0"),
        (JAVACODE, "v0-snappy-0"),
        (JAVACODE, "v0-lz4-0"),
        (JAVACODE, "v1-gzip-0"),
        (JAVACODE, "v1-snappy-0"),
        (JAVACODE, "v1-lz4-0"),
        (BROKER_090, "v0-gzip-0"),
        (BROKER_090, "v0-snappy-0"),
        (BROKER_090, "v0-lz4-0"),
    ],
    ids=lambda v: v.name if isinstance(v, Path) else v,
)
def test_java_legacy_wrappers(root: Path, topic: str) -> None:
    entries = _legacy_payloads(root / topic / "00000000000000000000.log")
    assert entries
    for offset, magic, codec, packed in entries:
        assert codec == Compression.parse(topic.split("-")[1])
        data = decompress(codec, packed, magic=magic, limit=BIG)
        assert _inner_message_count(data) >= 1
        assert compress(codec, data, magic=magic) == packed, (topic, offset)


def test_broken_v0_lz4_header_checksum_from_real_090_broker() -> None:
    entries = _legacy_payloads(BROKER_090 / "v0-lz4-0" / "00000000000000000000.log")
    assert len(entries) == 4
    for _offset, magic, _codec, packed in entries:
        assert magic == 0
        correct = (xxhash.xxh32_intdigest(packed[4:6]) >> 8) & 0xFF
        broken = (xxhash.xxh32_intdigest(packed[0:6]) >> 8) & 0xFF
        assert packed[6] == broken != correct
        data = decompress(LZ4, packed, magic=0, limit=BIG)
        assert _inner_message_count(data) in (1, 5, 3, 100)
        for strict_magic in (1, 2):
            with pytest.raises(CompressionError, match="header checksum") as info:
                decompress(LZ4, packed, magic=strict_magic, limit=BIG)
            assert info.value.position == 6
        # magic 0 ignores HC entirely, as Kafka does: the correct value is fine too
        fixed = packed[:6] + bytes([correct]) + packed[7:]
        assert decompress(LZ4, fixed, magic=0, limit=BIG) == data
        assert decompress(LZ4, fixed, magic=2, limit=BIG) == data


# ---------------------------------------------------------------------------------------------
# rejected input: codec/magic rules, framing errors with positions
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec_id", [5, 6, 7, 8, -1])
def test_unknown_codec_ids(codec_id: int) -> None:
    with pytest.raises(CompressionError, match=f"unknown compression codec id {codec_id}"):
        decompress(codec_id, b"\x00\x01", limit=10)
    with pytest.raises(CompressionError, match=f"unknown compression codec id {codec_id}"):
        compress(codec_id, b"x")


@pytest.mark.parametrize("magic", [0, 1])
def test_zstd_needs_magic_2(magic: int) -> None:
    packed = compress(ZSTD, b"abc")
    with pytest.raises(CompressionError, match="zstd requires magic 2"):
        compress(ZSTD, b"abc", magic=magic)
    with pytest.raises(CompressionError, match="zstd requires magic 2"):
        decompress(ZSTD, packed, magic=magic, limit=10)


def test_levels() -> None:
    data = _repetitive(100000, 9)
    for level in (1, 9, -1):
        assert decompress(GZIP, compress(GZIP, data, level=level), limit=len(data)) == data
    assert compress(GZIP, data, level=-1) == compress(GZIP, data)
    assert compress(GZIP, data, level=6) == compress(GZIP, data)
    for level in (1, 9, 12, 17):
        assert decompress(LZ4, compress(LZ4, data, level=level), limit=len(data)) == data
    assert compress(LZ4, data, level=9) == compress(LZ4, data)
    for level in (-5, 1, 3, 19):
        assert decompress(ZSTD, compress(ZSTD, data, level=level), limit=len(data)) == data
    for codec, level in ((GZIP, 0), (GZIP, 10), (LZ4, 0), (LZ4, 18), (ZSTD, 23), (SNAPPY, 1)):
        with pytest.raises(InvalidRecordError):
            compress(codec, data, level=level)
    with pytest.raises(ValueError, match="limit"):
        decompress(GZIP, compress(GZIP, b""), limit=-1)


def test_gzip_errors_and_positions() -> None:
    good = compress(GZIP, b"hello world")
    n = len(good)
    cases: list[tuple[bytes, str, int]] = [
        (good + b"\x00", "truncated gzip header", n),
        (good + b"garbage!!!!!", "not a gzip member", n),
        (good[:5], "truncated gzip header", 0),
        (b"\x1f\x8c" + good[2:], "bad magic", 0),
        (good[:2] + b"\x07" + good[3:], "compression method", 2),
        (good[:-8], "truncated trailer", n - 8),
        (good[:12], "truncated deflate", 12),
        (good[:-8] + b"\x00" * 4 + good[-4:], "CRC-32 mismatch", n - 8),
        (good[:-4] + b"\x00" * 4, "ISIZE mismatch", n - 4),
        (good[:10] + b"\xff" + good[11:], "corrupt deflate", 10),
    ]
    for packed, message, position in cases:
        with pytest.raises(CompressionError, match=message) as info:
            decompress(GZIP, packed, limit=BIG)
        assert info.value.position == position, message
        assert info.value.path is None
        moved = info.value.located("seg.log", 1000)
        assert moved.position == position + 1000
        assert moved.path == "seg.log"


def test_snappy_errors_and_positions() -> None:
    good = compress(SNAPPY, _repetitive(40000, 11))
    (first_len,) = struct.unpack_from(">i", good, 16)
    second = 20 + first_len
    cases: list[tuple[bytes, str, int]] = [
        (good + b"\x00\x00", "truncated chunk length", len(good)),
        (good[:-1], "truncated", second),
        (good[:16] + struct.pack(">i", -5) + good[20:], "negative chunk length", 16),
        (good + b"\x82SNAPPY\x00\x00\x00", "corrupt stream header", len(good)),
        (good + b"\x82SNAPPY\x00" + struct.pack(">ii", 0, 1), "incompatible", len(good) + 8),
        (good[:16] + struct.pack(">i", 0) + good[16:], "preamble", 20),
        (good[:20] + b"\xff\xff\xff\xff\xff\x01" + good[26:], "varint", 20),
        (good[:20] + b"\x81" + good[21:], "snappy block", 20),
        (b"\x05abc", "snappy block", 0),
    ]
    for packed, message, position in cases:
        with pytest.raises(CompressionError, match=message) as info:
            decompress(SNAPPY, packed, limit=BIG)
        assert info.value.position == position, message


def test_snappy_preamble_checked_before_allocation() -> None:
    raw = b"\xff\xff\xff\xff\x0f" + b"\x00" * 10  # declares 4 GiB
    with pytest.raises(CompressionError, match="limit") as info:
        decompress(SNAPPY, raw, limit=MiB)
    assert info.value.position == 0
    framed = bytes.fromhex("82534e41505059000000000100000001") + struct.pack(">i", 15) + raw
    with pytest.raises(CompressionError, match="limit") as info:
        decompress(SNAPPY, framed, limit=MiB)
    assert info.value.position == 16


def _frame(flg: int, bd: int, body: bytes, hc: int | None = None) -> bytes:
    descriptor = bytes([flg, bd])
    if hc is None:
        hc = (xxhash.xxh32_intdigest(descriptor) >> 8) & 0xFF
    return b"\x04\x22\x4d\x18" + descriptor + bytes([hc]) + body


def test_lz4_errors_and_positions() -> None:
    data = _repetitive(70000, 12)
    good = compress(LZ4, data)
    (first_word,) = struct.unpack_from("<I", good, 7)
    second = 11 + (first_word & 0x7FFFFFFF)
    block = struct.pack("<I", 3 | 0x80000000) + b"abc"
    cases: list[tuple[bytes, str, int]] = [
        (good[:-4], "without an end mark", len(good) - 4),
        (good[:-2], "without an end mark", len(good) - 4),
        (good[: second + 10], "truncated", second),
        (good + b"junk", "trailing bytes", len(good)),
        (good[:5], "truncated frame header", 0),
        (b"\x04\x22\x4d\x19" + good[4:], "bad magic", 0),
        (_frame(0xA0, 0x40, block + b"\0" * 4), "unsupported version", 4),
        (_frame(0x40, 0x40, block + b"\0" * 4), "dependent blocks", 4),
        (_frame(0x61, 0x40, block + b"\0" * 4), "reserved FLG", 4),
        (_frame(0x60, 0x30, block + b"\0" * 4), "block size code", 5),
        (_frame(0x60, 0x41, block + b"\0" * 4), "reserved BD", 5),
        (_frame(0x60, 0x40, block + b"\0" * 4, hc=0), "header checksum", 6),
        (
            _frame(0x60, 0x40, struct.pack("<I", 65537 | 0x80000000) + b"\0" * 65537),
            "exceeds the frame maximum",
            7,
        ),
        (_frame(0x60, 0x40, struct.pack("<I", 5) + b"\xff" * 5 + b"\0" * 4), "corrupt", 7),
        (_frame(0x64, 0x40, block + b"\0" * 4 + b"\0\0"), "truncated content checksum", 18),
        (_frame(0x64, 0x40, block + b"\0" * 8), "content checksum mismatch", 0),
        (_frame(0x70, 0x40, block + b"\0\0\0\0" + b"\0" * 4), "block checksum mismatch", 14),
        (_frame(0x68, 0x40, b"\0" * 3), "content size", 6),
    ]
    for packed, message, position in cases:
        with pytest.raises(CompressionError, match=message) as info:
            decompress(LZ4, packed, limit=BIG)
        assert info.value.position == position, message


def test_lz4_flag_variants_accepted() -> None:
    block = struct.pack("<I", 3 | 0x80000000) + b"abc"
    checksum = struct.pack("<I", xxhash.xxh32_intdigest(b"abc"))
    # Kafka reads a masked size of zero (0x80000000) as the end mark too
    assert decompress(LZ4, _frame(0x60, 0x40, block + b"\0\0\0\x80"), limit=3) == b"abc"
    with_all = _frame(
        0x7C,
        0x70,
        b"",
        hc=(xxhash.xxh32_intdigest(bytes([0x7C, 0x70]) + struct.pack("<Q", 3)) >> 8) & 0xFF,
    )
    with_all = with_all[:6] + struct.pack("<Q", 3) + with_all[6:]
    with_all += block + checksum + b"\0\0\0\0" + checksum
    assert decompress(LZ4, with_all, limit=3) == b"abc"


def test_zstd_errors_and_positions() -> None:
    good = compress(ZSTD, _repetitive(1000, 13))
    cases: list[tuple[bytes, str, int]] = [
        (good + b"\x00\x01", "truncated frame magic", len(good)),
        (good + b"garbage", "trailing bytes", len(good)),
        (b"\x28\xb5\x2f\xfe" + good[4:], "bad magic", 0),
        (good[:5], "truncated frame header", 0),
        (good[:-1], "truncated block", len(good) - 3),
        (good[:-3], "truncated block header", len(good) - 3),
        (good[:4] + bytes([good[4] | 0x08]) + good[5:], "reserved header bit", 4),
        (struct.pack("<II", 0x184D2A50, 10) + b"abc", "truncated skippable", 0),
        (good[:-3] + b"\x07\x00\x00", "reserved block type", len(good) - 3),
        (good[:-9] + b"\xff" * 6 + good[-3:], "corrupt data", 0),  # sequences section
    ]
    for packed, message, position in cases:
        with pytest.raises(CompressionError, match=message) as info:
            decompress(ZSTD, packed, limit=BIG)
        assert info.value.position == position, message
    checksum = zstandard.ZstdCompressor(write_checksum=True).compress(b"x" * 1000)
    with pytest.raises(CompressionError, match="checksum"):
        decompress(ZSTD, checksum[:-1] + bytes([checksum[-1] ^ 1]), limit=BIG)


def test_zstd_declared_content_size_refused_before_decoding() -> None:
    frame = zstandard.ZstdCompressor().compress(b"\0" * (8 * MiB))
    with pytest.raises(CompressionError, match="declares 8388608 bytes") as info:
        decompress(ZSTD, frame, limit=MiB)
    assert info.value.position == 0
    assert decompress(ZSTD, frame, limit=8 * MiB) == b"\0" * (8 * MiB)


# ---------------------------------------------------------------------------------------------
# bombs
# ---------------------------------------------------------------------------------------------

_BOMB_BUILDERS = textwrap.dedent(
    """
    import struct, zlib, cramjam, zstandard
    from kafkalog.records.compression import compress
    MiB = 1 << 20
    ZERO = bytes(MiB)

    def gzip_bomb():
        c = zlib.compressobj(9, zlib.DEFLATED, -15)
        body = b"".join(c.compress(ZERO) for _ in range(50)) + c.flush()
        return compress(1, b"")[:10] + body + struct.pack("<II", 0, 50 * MiB)

    def snappy_bomb():
        block = bytes(cramjam.snappy.compress_raw(ZERO[:32768]))
        chunk = struct.pack(">i", len(block)) + block
        return compress(2, b"") + chunk * 1600

    def raw_snappy_bomb():
        return bytes(cramjam.snappy.compress_raw(ZERO))  # preamble says 1 MiB

    def lz4_bomb():
        block = bytes(cramjam.lz4.compress_block(ZERO[:65536], store_size=False))
        return compress(3, b"")[:7] + (struct.pack("<I", len(block)) + block) * 800 + bytes(4)

    def zstd_bomb():
        c = zstandard.ZstdCompressor(level=3, write_content_size=False).compressobj()
        return b"".join(c.compress(ZERO) for _ in range(50)) + c.flush()

    BOMBS = {
        "gzip": (1, gzip_bomb),
        "snappy": (2, snappy_bomb),
        "raw-snappy": (2, raw_snappy_bomb),
        "lz4": (3, lz4_bomb),
        "zstd": (4, zstd_bomb),
    }
    """
)


@pytest.mark.parametrize("name", ["gzip", "snappy", "raw-snappy", "lz4", "zstd"])
def test_bomb_raises_quickly(name: str) -> None:
    scope: dict[str, object] = {}
    exec(_BOMB_BUILDERS, scope)
    codec, build = scope["BOMBS"][name]  # type: ignore[index]
    payload = build()
    limit = MiB // 2 if name == "raw-snappy" else MiB
    start = time.perf_counter()
    with pytest.raises(CompressionError, match="limit") as info:
        decompress(codec, payload, limit=limit)
    assert time.perf_counter() - start < 1.0
    assert info.value.position is not None


_CAN_RESET_PEAK = os.access("/proc/self/clear_refs", os.W_OK)


@pytest.mark.skipif(not _CAN_RESET_PEAK, reason="needs Linux /proc/self/clear_refs")
def test_bombs_stay_within_memory() -> None:
    """The resident-memory peak must not grow by anything like the 50 MiB a bomb inflates to.

    A fresh interpreter builds the bombs (never materialising their output), resets the kernel's
    peak-RSS counter (``clear_refs`` 5) and reads ``VmHWM`` after each decode.  A control run of
    an unbounded zlib inflate of the same gzip bomb proves the measurement sees 50 MiB.
    """
    script = _BOMB_BUILDERS + textwrap.dedent(
        """
        import gc
        from kafkalog.errors import CompressionError
        from kafkalog.records.compression import decompress

        def peak_kib():
            for line in open("/proc/self/status"):
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])

        payloads = {name: (codec, build()) for name, (codec, build) in BOMBS.items()}
        del ZERO
        gc.collect()
        for name, (codec, payload) in payloads.items():
            with open("/proc/self/clear_refs", "w") as refs:
                refs.write("5")
            base = peak_kib()
            try:
                decompress(codec, payload, limit=MiB // 2)
                print(name, "NO-ERROR")
            except CompressionError:
                print(name, peak_kib() - base)
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
        base = peak_kib()
        inflated = zlib.decompressobj(-15).decompress(payloads["gzip"][1][10:])
        print("control", peak_kib() - base, len(inflated))
        """
    )
    env = dict(os.environ, PYTHONPATH=str(SRC))
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    growth = {
        line.split()[0]: line.split()[1] for line in result.stdout.split("\n") if line.strip()
    }
    assert set(growth) == {"gzip", "snappy", "raw-snappy", "lz4", "zstd", "control"}, result.stdout
    assert int(growth.pop("control")) > 40 * 1024, result.stdout  # the probe does see 50 MiB
    for name, kib in growth.items():
        assert kib != "NO-ERROR", name
        assert int(kib) < 8 * 1024, (name, kib)  # KiB; limit is 512 KiB, the bombs are 50 MiB


# ---------------------------------------------------------------------------------------------
# hypothesis: mutated streams
# ---------------------------------------------------------------------------------------------

_ENCODERS: dict[str, tuple[Compression, int, Callable[[bytes], bytes]]] = {
    "gzip": (GZIP, 2, lambda d: compress(GZIP, d)),
    "gzip-2-members": (GZIP, 2, lambda d: compress(GZIP, d[:7]) + compress(GZIP, d[7:])),
    "snappy": (SNAPPY, 2, lambda d: kcodec.snappy_encode(d, xerial_blocksize=512)),
    "snappy-raw": (SNAPPY, 2, lambda d: kcodec.snappy_encode(d, xerial_compatible=False)),
    "lz4": (LZ4, 2, lambda d: compress(LZ4, d)),
    "lz4-v0": (LZ4, 0, lambda d: compress(LZ4, d, magic=0)),
    "lz4-checksums": (
        LZ4,
        2,
        lambda d: lz4.frame.compress(
            d, block_linked=False, block_checksum=True, content_checksum=True, store_size=True
        ),
    ),
    "zstd": (ZSTD, 2, lambda d: compress(ZSTD, d)),
    "zstd-size-checksum": (
        ZSTD,
        2,
        lambda d: zstandard.ZstdCompressor(write_checksum=True).compress(d),
    ),
}

_mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10**6), st.integers(0, 7)),
    st.tuples(st.just("truncate"), st.integers(0, 10**6), st.just(0)),
    st.tuples(st.just("insert"), st.integers(0, 10**6), st.integers(0, 255)),
    st.tuples(st.just("delete"), st.integers(0, 10**6), st.just(0)),
    st.tuples(st.just("set"), st.integers(0, 10**6), st.sampled_from([0, 0x7F, 0x80, 0xFF])),
)


def _mutate(packed: bytes, mutations: list[tuple[str, int, int]]) -> bytes:
    out = bytearray(packed)
    for kind, where, value in mutations:
        if not out:
            break
        i = where % (len(out) + (1 if kind in ("insert", "truncate") else 0))
        if kind == "flip":
            out[i] ^= 1 << value
        elif kind == "truncate":
            del out[i:]
        elif kind == "insert":
            out.insert(i, value)
        elif kind == "delete":
            del out[i]
        else:
            out[i] = value
    return bytes(out)


_payload = st.one_of(
    st.binary(max_size=600),
    st.builds(lambda b, k: b * k, st.binary(min_size=1, max_size=40), st.integers(1, 3000)),
)


@settings(
    max_examples=2500,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    encoder=st.sampled_from(sorted(_ENCODERS)),
    data=_payload,
    mutations=st.lists(_mutation, min_size=0, max_size=4),
    slack=st.integers(-50, 200),
)
def test_mutated_streams_only_raise_compression_error(
    encoder: str, data: bytes, mutations: list[tuple[str, int, int]], slack: int
) -> None:
    codec, magic, encode = _ENCODERS[encoder]
    packed = encode(data)
    limit = max(0, len(data) + slack)
    mutated = _mutate(packed, mutations)
    try:
        out = decompress(codec, mutated, magic=magic, limit=limit)
    except CompressionError as exc:
        assert exc.path is None
        assert exc.position is None or 0 <= exc.position <= len(mutated)
        if mutated == packed:
            assert limit < len(data)
        return
    assert isinstance(out, bytes)
    assert len(out) <= limit
    if mutated == packed:
        assert out == data


@settings(max_examples=1000, deadline=None)
@given(codec=st.sampled_from([GZIP, SNAPPY, LZ4, ZSTD]), junk=st.binary(max_size=300))
def test_random_bytes_only_raise_compression_error(codec: Compression, junk: bytes) -> None:
    for magic in (0, 2) if codec is not ZSTD else (2,):
        try:
            out = decompress(codec, junk, magic=magic, limit=1000)
        except CompressionError:
            continue
        assert len(out) <= 1000


def test_zstd_truncated_frame_header_position_inside_data() -> None:
    """Regression (found by hypothesis): a header cut inside its dictionary-id field reported a
    position past the end of the data."""
    data = b"\x28\xb5\x2f\xfd\x03\x00"
    with pytest.raises(CompressionError, match="truncated frame header") as info:
        decompress(Compression.ZSTD, data, limit=100)
    assert info.value.position is not None and info.value.position <= len(data)
