"""Fuzzing the decoders with mutated valid log bytes: only kafkalog errors, no hang, bounded memory.

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

The example counts (profile ``fuzz-ci``) add up to about 6000 cases, run derandomized so CI is
deterministic; ``KAFKALOG_FUZZ_SCALE=10`` (or ``HYPOTHESIS_PROFILE=fuzz-deep``, randomized) runs
more. Examples have a 2 s deadline (the numba kernels are compiled/loaded by a warm-up at import).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import faulthandler
import functools
import gc
import os
import resource
import shutil
import signal
import struct
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from fuzz_corpus import (
    INTERESTING,
    LEGACY_FIELDS,
    PATH,
    SEED_NAMES,
    SEEDS,
    T0,
    V2_FIELDS,
    Entry,
    Outcome,
    check_error,
    fix_entry,
    fix_inner_crcs,
    put_int,
    run_all_decoders,
    run_columnar,
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
    ControlType,
    LegacyEntry,
    Limits,
    LogReader,
    Record,
    RecordBatch,
    decode_range,
    encode_batch,
    encode_control_batch,
    encode_message,
)
from kafkalog.records import compression as codecs
from kafkalog.records.batch import HEADER_SIZE, assemble_batch
from kafkalog.records.crc import crc32c
from kafkalog.records.reader import read_only_buffer

# ---------------------------------------------------------------------------------------------
# settings

_SCALE = float(os.environ.get("KAFKALOG_FUZZ_SCALE", "1"))

# too_slow / data_too_large: the composite strategies draw many values per example (a seed, then
# up to a few operations each with positions and payloads), which trips hypothesis's generation
# heuristics on a loaded CI box although each example runs in milliseconds. filter_too_much: the
# CRC burst strategy filters out replacements equal to the original bytes (rarely drawn).
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


FUZZ_PEAK_RSS = int((128 << 20) * max(1.0, _SCALE))  # hypothesis's own bookkeeping grows too


@pytest.fixture
def peak_rss_guard() -> Iterator[None]:
    """No fuzz example may make the process's resident set jump: inputs are a few KB and every
    decompression of them is bounded by a few MiB, so a peak far above the start is a leak or an
    unbounded allocation (measured as VmHWM, reset at the start; Linux only)."""
    _release_free_memory()
    if not _reset_peak_rss():
        yield
        return
    before = _status_kib("VmRSS") or 0
    yield
    growth = ((_status_kib("VmHWM") or 0) - before) * 1024
    assert growth <= FUZZ_PEAK_RSS, f"peak RSS grew by {growth / 2**20:.0f} MiB during fuzzing"


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


# warm-up: loads/compiles the numba kernels and every codec before any deadline is measured;
# the seeds' decoded outcomes are the reference for the truncation tests
_FULL = {name: run_all_decoders(SEEDS[name].data) for name in SEED_NAMES}


def assert_agree(out: Outcome) -> None:
    """The object API and the columnar path must agree on every input (the findings that once
    made them differ are fixed; their regression tests are at the end of this file)."""
    if out.disagreements:
        raise AssertionError("; ".join(out.disagreements))


# ---------------------------------------------------------------------------------------------
# mutation operators: op(draw, buf, seed_entries) mutates buf in place

INTERESTING_BYTES = [0x00, 0x01, 0x02, 0x7E, 0x7F, 0x80, 0x81, 0xFE, 0xFF]
OVERLONG_VARINTS = [
    b"\x80",
    b"\xff",
    b"\xff" * 5,
    b"\x80" * 5 + b"\x00",
    b"\xff\xff\xff\xff\x0f",
    b"\xfe\xff\xff\xff\x0f",
    b"\xff\xff\xff\xff\x7f",
    b"\x80" * 10 + b"\x01",
    b"\xff" * 11,
    b"\x81\x80\x80\x80\x80\x80\x80\x80\x80\x01",
]


# The operators draw from strategies built once (and, where they depend on an argument, once per
# argument): building a strategy per draw cost hypothesis more than the decoders took. The draws
# (and so every example, in the same order) are unchanged: a strategy draws the same choices
# whichever equal object it is, and a ``map`` draws none.


@functools.cache
def _ints(lo: int, hi: int) -> st.SearchStrategy[int]:
    return st.integers(lo, hi)


@functools.cache
def _sampled(values: tuple[Any, ...]) -> st.SearchStrategy[Any]:
    return st.sampled_from(values)


class _Delta(int):
    """A drawn offset from the current value (the ``map`` tags it; the operator adds it)."""


#: an interesting value, the current value +-64, or any int64 or uint64
_VALUE = st.one_of(
    st.sampled_from(INTERESTING),
    st.integers(-64, 64).map(_Delta),
    st.integers(-(2**63), 2**64),
)


def _pos(draw: Any, buf: bytearray, lo: int = 0) -> int:
    return draw(_ints(lo, max(lo, len(buf) - 1)))


def _value(draw: Any, current: int) -> int:
    v = draw(_VALUE)
    return current + int(v) if isinstance(v, _Delta) else int(v)


def op_flip(draw: Any, buf: bytearray, entries: tuple[Entry, ...], lo: int = 0) -> None:
    if len(buf) > lo:
        buf[_pos(draw, buf, lo)] ^= 1 << draw(_ints(0, 7))


_BYTE = st.one_of(st.sampled_from(INTERESTING_BYTES), st.integers(0, 255))


def op_set(draw: Any, buf: bytearray, entries: tuple[Entry, ...], lo: int = 0) -> None:
    if len(buf) > lo:
        buf[_pos(draw, buf, lo)] = draw(_BYTE)


def op_field(draw: Any, buf: bytearray, entries: tuple[Entry, ...], lo: int = 0) -> None:
    e = draw(_sampled(entries))
    fields = V2_FIELDS if e.magic >= 2 else LEGACY_FIELDS
    name = draw(_sampled(tuple(sorted(k for k, (off, _w) in fields.items() if off >= lo))))
    off, width = fields[name]
    at = e.pos + off
    current = int.from_bytes(buf[at : at + width], "big", signed=True)
    put_int(buf, at, width, _value(draw, current))


def op_varint(draw: Any, buf: bytearray, entries: tuple[Entry, ...], lo: int = 0) -> None:
    candidates = tuple(e for e in entries if e.varints)
    if not candidates:
        return op_set(draw, buf, entries, lo)
    e = draw(_sampled(candidates))
    off, n = draw(_sampled(tuple(e.varints)))
    at = e.pos + off
    current = int.from_bytes(buf[at : at + 1], "big")
    replacement = draw(_VARINT)
    if isinstance(replacement, _Delta):
        replacement = zigzag_varint_any(current // 2 + int(replacement))
    buf[at : at + n] = replacement


def zigzag_varint_any(v: int) -> bytes:
    return zigzag_varint(v, long=not -(2**31) <= v < 2**31)


#: an overlong varint, an interesting value's, or the current value's (halved) +-64
_VARINT = st.one_of(
    st.sampled_from(OVERLONG_VARINTS),
    st.sampled_from(INTERESTING).map(zigzag_varint_any),
    st.integers(-64, 64).map(_Delta),
)


def op_truncate(draw: Any, buf: bytearray, entries: tuple[Entry, ...], lo: int = 0) -> None:
    del buf[draw(_ints(lo, len(buf))) :]


_INSERT = st.binary(min_size=1, max_size=16)


def op_insert(draw: Any, buf: bytearray, entries: tuple[Entry, ...], lo: int = 0) -> None:
    at = draw(_ints(lo, max(lo, len(buf))))
    buf[at:at] = draw(_INSERT)


def op_delete(draw: Any, buf: bytearray, entries: tuple[Entry, ...], lo: int = 0) -> None:
    if len(buf) > lo:
        at = _pos(draw, buf, lo)
        del buf[at : at + draw(_ints(1, 32))]


def op_dup(draw: Any, buf: bytearray, entries: tuple[Entry, ...], lo: int = 0) -> None:
    if len(buf) > lo:
        src = _pos(draw, buf, lo)
        piece = buf[src : src + draw(_ints(1, 80))]
        at = draw(_ints(lo, len(buf)))
        buf[at:at] = piece


def op_dup_entry(draw: Any, buf: bytearray, entries: tuple[Entry, ...], lo: int = 0) -> None:
    e = draw(_sampled(entries))
    at = draw(_sampled(tuple(sorted({x.pos for x in entries} | {len(buf)}))))
    buf[at:at] = buf[e.pos : e.end]


RAW_OPS = [
    op_flip,
    op_set,
    op_field,
    op_varint,
    op_truncate,
    op_insert,
    op_delete,
    op_dup,
    op_dup_entry,
]
BODY_OPS = [op_flip, op_set, op_field, op_varint, op_truncate, op_insert, op_delete, op_dup]
INNER_OPS = [op_flip, op_set, op_varint, op_truncate, op_insert, op_delete, op_dup]
LEGACY_INNER_OPS = [
    op_flip,
    op_set,
    op_field,
    op_truncate,
    op_insert,
    op_delete,
    op_dup,
    op_dup_entry,
]


def inner_entries(raw: bytes) -> tuple[Entry, ...]:
    """The inner messages of a (valid) decompressed legacy wrapper value."""
    out = []
    pos = 0
    while pos < len(raw):
        size = 12 + struct.unpack_from(">i", raw, pos + 8)[0]
        out.append(Entry(pos, size, raw[pos + 16], 0, False))
        pos += size
    return tuple(out)


_SEED = st.sampled_from(SEED_NAMES)
_RAW_OPS = st.lists(st.sampled_from(RAW_OPS), min_size=1, max_size=4)
_BODY_OPS = st.lists(st.sampled_from(BODY_OPS), min_size=1, max_size=3)


@st.composite
def raw_mutation(draw: Any) -> bytes:
    seed = SEEDS[draw(_SEED)]
    buf = bytearray(seed.data)
    for op in draw(_RAW_OPS):
        op(draw, buf, seed.entries)
    return bytes(buf)


def _alone(e: Entry) -> tuple[Entry, ...]:
    """``e`` relocated to position 0 (operators then work on the entry alone)."""
    return (Entry(0, e.size, e.magic, e.codec, e.is_control, e.varints),)


@st.composite
def fixed_mutation(draw: Any) -> bytes:
    """Damage inside one entry, whose size and CRC are then recomputed."""
    seed = SEEDS[draw(_SEED)]
    e = draw(_sampled(seed.entries))
    ent = bytearray(seed.data[e.pos : e.end])
    lo = 21 if e.magic >= 2 else 17  # keep offset, size, epoch/crc and magic
    for op in draw(_BODY_OPS):
        op(draw, ent, _alone(e), lo)
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
        raw = bytearray(
            codecs.decompress(e.codec, wrapper.value or b"", magic=e.magic, limit=_UNBOUNDED)
        )
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
                magic=e.magic,
                key=wrapper.key,
                value=bytes(payload),
                timestamp=wrapper.timestamp,
                attributes=wrapper.attributes,
                offset=offset,
            )
        )
    return seed.data[: e.pos] + bytes(new) + seed.data[e.end :]


# ---------------------------------------------------------------------------------------------
# the corpus itself


def test_seeds_decode_cleanly_and_identically() -> None:
    """Every seed (encoders + fixtures) is valid for every decoder, and both APIs agree."""
    assert len(SEEDS) >= 20  # 22 built by the encoders, plus fixture cuts when present
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


def _crc_covered(entry: Any) -> bytes:
    return bytes(entry.buffer[17 if isinstance(entry, RecordBatch) else 12 :])


#: The CRC-covered bytes (stored CRC included) of every seed entry.
SEED_COVERED = {_crc_covered(entry) for seed in SEEDS.values() for entry in LogReader(seed.data)}


@pytest.mark.usefixtures("peak_rss_guard")
@fuzz(1500)
@given(raw_mutation())
def test_raw_mutations(data: bytes) -> None:
    out = decode_everything(data)
    assert_agree(out)
    # An entry that passes CRC verification after a random mutation has the covered bytes of
    # some seed entry (moved, duplicated or with only baseOffset/epoch changed): anything else
    # would be a 2^-32 CRC collision, i.e. never in a derandomized run.
    with contextlib.suppress(KafkalogError):
        for entry in LogReader(data, path=PATH, verify_crc=True):
            assert _crc_covered(entry) in SEED_COVERED, "mutated entry passed CRC verification"


@pytest.mark.usefixtures("peak_rss_guard")
@fuzz(1200)
@given(fixed_mutation())
def test_mutations_with_fixed_crc(data: bytes) -> None:
    assert_agree(decode_everything(data))


@pytest.mark.usefixtures("peak_rss_guard")
@fuzz(600)
@given(inner_mutation())
def test_mutations_inside_compressed_payloads(data: bytes) -> None:
    assert_agree(decode_everything(data))


_FILES = Path(tempfile.mkdtemp(prefix="kafkalog-fuzz-"))
atexit.register(shutil.rmtree, _FILES, ignore_errors=True)


@pytest.mark.usefixtures("peak_rss_guard")
@fuzz(300)
@given(st.one_of(raw_mutation(), fixed_mutation()))
def test_file_backed_decoding_names_the_file(data: bytes) -> None:
    """The same contract through ``LogReader.open`` / ``read_only_buffer`` (read-only mmap)."""
    path = _FILES / "00000000000000000042.log"
    path.unlink(missing_ok=True)  # a new inode: earlier examples' mappings stay valid
    path.write_bytes(data)
    where = str(path)
    try:
        for entry in LogReader.open(path, verify_crc=True):
            entry.records()
    except KafkalogError as exc:
        assert isinstance(exc, CorruptRecordError) and exc.path == where and where in str(exc)
        assert exc.position is not None and 0 <= exc.position <= len(data)
    try:
        decode_range(read_only_buffer(path), path=where, include_headers=True)
    except KafkalogError as exc:
        assert isinstance(exc, CorruptRecordError) and where in str(exc)
        assert exc.position is not None and 0 <= exc.position <= len(data)


# ---------------------------------------------------------------------------------------------
# truncation: an incomplete tail, never corruption


@st.composite
def truncation(draw: Any) -> tuple[str, int]:
    name = draw(st.sampled_from(SEED_NAMES))
    return name, draw(st.integers(0, len(SEEDS[name].data)))


@pytest.mark.usefixtures("peak_rss_guard")
@fuzz(800)
@given(truncation())
def test_truncation_is_an_incomplete_tail_not_corruption(case: tuple[str, int]) -> None:
    name, cut = case
    seed = SEEDS[name]
    full = _FULL[name]
    data = seed.data[:cut]
    whole = [i for i, e in enumerate(seed.entries) if e.end <= cut]
    cut_entry = next((e for e in seed.entries if e.pos < cut < e.end), None)
    expected_tail = None
    if cut_entry is not None:
        available = cut - cut_entry.pos
        expected_tail = (cut_entry.pos, cut_entry.size if available >= 12 else None, available)
    expected_next = cut_entry.pos if cut_entry is not None else cut

    def tail_of(t: Any) -> tuple[int, int | None, int] | None:
        return None if t is None else (t.position, t.declared_size, t.available)

    with time_limit(10):
        out = run_all_decoders(data)
        assert_agree(out)
        for walk in (out.obj, out.obj_crc):
            assert walk.iter_error is None, f"truncation reported as {walk.iter_error!r}"
            assert [e.position for e in walk.entries] == [seed.entries[i].pos for i in whole]
            assert tail_of(walk.tail) == expected_tail
        # every entry fully present decodes exactly as in the intact file
        assert out.obj.complete
        assert [e.rows for e in out.obj.entries] == [full.obj.entries[i].rows for i in whole]
        # strict_tail: an IncompleteTailError (not a CorruptRecordError) iff something was cut
        if cut_entry is None:
            assert out.strict.iter_error is None
        else:
            err = out.strict.iter_error
            assert isinstance(err, IncompleteTailError) and not isinstance(err, CorruptRecordError)
            assert err.position == cut_entry.pos and PATH in str(err)
        # the columnar path: same records as the intact prefix, same tail
        n_rows = sum(len(full.obj.entries[i].rows or ()) for i in whole)
        for col in (out.col_all, out.col_crc):
            assert col.error is None, f"truncation reported as {col.error!r}"
            assert col.rows == (full.col_all.rows or [])[:n_rows]
            assert tail_of(col.result.incomplete_tail) == expected_tail
            assert col.result.next_position == expected_next
        # reading the intact buffer only up to ``end`` is the same as reading the cut copy
        reader = LogReader(seed.data, path=PATH, end=cut, verify_crc=True)
        assert [e.position for e in reader] == [seed.entries[i].pos for i in whole]
        assert tail_of(reader.incomplete_tail) == expected_tail
        res = decode_range(
            seed.data, end=cut, path=PATH, include_headers=True, control_records="include"
        )
        assert tail_of(res.incomplete_tail) == expected_tail
        assert res.batch.num_rows == n_rows


# ---------------------------------------------------------------------------------------------
# CRC: what verification must decide


@st.composite
def covered_burst(draw: Any) -> tuple[str, int, bytes]:
    """A change of 1-4 consecutive bytes inside one entry's CRC-covered bytes (or its CRC field).

    CRC-32C and CRC-32 detect every burst error of at most 32 bits, so with verification on the
    entry must be rejected; damage that spans both the stored CRC and the covered bytes is not
    generated (it is not guaranteed to be detectable).
    """
    name = draw(st.sampled_from(SEED_NAMES))
    seed = SEEDS[name]
    k = draw(st.integers(0, len(seed.entries) - 1))
    e = seed.entries[k]
    crc_at, covered_from = (17, 21) if e.magic >= 2 else (12, 16)
    if draw(st.integers(0, 4)) == 0:
        lo, hi = e.pos + crc_at, e.pos + crc_at + 4
    else:
        # v2: [21, end); legacy: [17, end) -- the magic byte is left alone (it picks the parser)
        lo, hi = e.pos + covered_from + (1 if e.magic < 2 else 0), e.end
    start = draw(st.integers(lo, hi - 1))
    width = draw(st.integers(1, min(4, hi - start)))
    old = seed.data[start : start + width]
    new = draw(st.binary(min_size=width, max_size=width).filter(lambda b: b != old))
    return name, k, seed.data[:start] + new + seed.data[start + width :]


@pytest.mark.usefixtures("peak_rss_guard")
@fuzz(1000)
@given(covered_burst())
def test_crc_verification_rejects_damage_to_covered_bytes(case: tuple[str, int, bytes]) -> None:
    name, k, data = case
    e = SEEDS[name].entries[k]
    out = decode_everything(data)
    assert_agree(out)
    err = out.obj_crc.iter_error
    assert isinstance(err, CorruptRecordError), "damaged entry passed CRC verification"
    assert len(out.obj_crc.entries) == k  # the entries before it are intact
    assert e.pos <= err.position <= e.end
    err = out.col_crc.error
    assert isinstance(err, CorruptRecordError), "columnar CRC verification missed the damage"
    assert e.pos <= err.position <= e.end


V2_ENTRIES = [(n, i) for n in SEED_NAMES for i, e in enumerate(SEEDS[n].entries) if e.magic >= 2]


@pytest.mark.usefixtures("peak_rss_guard")
@fuzz(300)
@given(
    st.sampled_from(V2_ENTRIES),
    st.integers(-(2**31), 2**31 - 1),
    st.integers(0, 2**62),
)
def test_bytes_outside_the_crc_do_not_invalidate_a_v2_batch(
    where: tuple[str, int], epoch: int, base_offset: int
) -> None:
    """baseOffset and partitionLeaderEpoch are stamped by the leader, outside the CRC (§8.2)."""
    name, k = where
    seed = SEEDS[name]
    e = seed.entries[k]
    buf = bytearray(seed.data)
    old_base = struct.unpack_from(">q", buf, e.pos)[0]
    struct.pack_into(">qii", buf, e.pos, base_offset, e.size - 12, epoch)
    out = decode_everything(bytes(buf))
    assert_agree(out)
    assert out.obj_crc.iter_error is None and out.col_crc.error is None
    assert out.obj.complete
    before = _FULL[name].obj.entries[k].rows or []
    after = out.obj.entries[k].rows or []
    shift = base_offset - old_base
    assert after == [(r[0] + shift, *r[1:]) for r in before]


# ---------------------------------------------------------------------------------------------
# resource bounds

MiB = 1 << 20
SMALL_LIMITS = Limits(
    max_batch_bytes=8 * MiB,
    max_decompression_ratio=4,
    min_decompressed_allowance=64 * 1024,
    max_decompressed_bytes=1 * MiB,
)
BOMB_SIZE = 112 * MiB  # "100+ MiB"
SLACK = 24 * MiB  # interpreter, allocator and page-granularity noise


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_peak_rss() -> bool:
    """Reset VmHWM (Linux >= 4.0: writing 5 to clear_refs); False where impossible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return _status_kib("VmHWM") is not None


class MemoryProbe:
    """Peak memory while running a call, measured two ways.

    * ``rss_growth``: peak resident set (VmHWM, reset before the call) minus the resident set
      before it. Sees everything that is actually touched -- Python objects, numpy, Arrow's
      memory pool, the codecs' native buffers -- and nothing that is only reserved (an
      ``np.empty`` whose pages are never written costs no memory). Linux only; where VmHWM
      cannot be reset, ``ru_maxrss`` is used, which only shows growth beyond the process's
      earlier peak (a weaker check).
    * ``traced_peak``: tracemalloc's peak. Sees Python objects and numpy arrays (numpy reports
      its buffers to tracemalloc, reserved or touched), not Arrow's pool nor native codec
      buffers.
    """

    rss_growth = 0
    traced_peak = 0
    how = ""

    def __repr__(self) -> str:
        return (
            f"<rss growth {self.rss_growth / MiB:.1f} MiB ({self.how}), "
            f"tracemalloc peak {self.traced_peak / MiB:.1f} MiB>"
        )


def _release_free_memory() -> None:
    """Give freed memory back to the OS, so the baseline RSS is not inflated by earlier tests."""
    gc.collect()
    pa.default_memory_pool().release_unused()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


@contextmanager
def probe_memory() -> Iterator[MemoryProbe]:
    probe = MemoryProbe()
    _release_free_memory()
    hwm = _reset_peak_rss()
    before = (
        (_status_kib("VmRSS") or 0) if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    )
    tracemalloc.start()
    try:
        yield probe
    finally:
        probe.traced_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        if hwm:
            probe.rss_growth = ((_status_kib("VmHWM") or 0) - before) * 1024
            probe.how = "VmHWM"
        else:
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            probe.rss_growth = max(0, peak - before) * 1024
            probe.how = "ru_maxrss"


def v2_batch(payload: bytes, codec: int, count: int = 1) -> bytes:
    return assemble_batch(
        payload,
        base_offset=0,
        last_offset_delta=max(count - 1, 0),
        records_count=count,
        base_timestamp=T0,
        max_timestamp=T0,
        attributes=codec,
    )


def _zstd_rle_frame(total: int) -> bytes:
    """A zstd frame of RLE blocks (4 bytes per 128 KiB of output), no content size."""
    block = 128 * 1024
    out = bytearray(b"\x28\xb5\x2f\xfd\x00\x38")  # magic, FHD 0, window 2^(10+7) = 128 KiB
    n = total // block
    for i in range(n):
        header = (1 if i == n - 1 else 0) | (1 << 1) | (block << 3)
        out += header.to_bytes(3, "little") + b"\x00"
    return bytes(out)


def _snappy_lie(declared: int) -> bytes:
    """A raw snappy block whose preamble declares ``declared`` bytes, followed by 3 literals."""
    pre = bytearray()
    u = declared
    while u >= 0x80:
        pre.append((u & 0x7F) | 0x80)
        u >>= 7
    pre.append(u)
    return bytes(pre) + b"\x08abc"


def _bombs() -> dict[str, tuple[int, Callable[[], bytes]]]:
    zeros = lambda: bytes(BOMB_SIZE)  # noqa: E731
    return {
        "zstd": (4, lambda: codecs.compress(4, zeros())),
        "zstd-rle-1GiB": (4, lambda: _zstd_rle_frame(1 << 30)),
        "gzip": (1, lambda: codecs.compress(1, zeros())),
        "lz4": (3, lambda: codecs.compress(3, zeros())),
        "snappy": (2, lambda: codecs.compress(2, zeros())),
        "snappy-declared-4GiB": (2, lambda: _snappy_lie(2**32 - 1)),
        "snappy-xerial-declared": (
            2,
            lambda: (
                b"\x82SNAPPY\x00"
                + struct.pack(">ii", 1, 1)
                + b"".join(
                    struct.pack(">i", len(_snappy_lie(2**31))) + _snappy_lie(2**31)
                    for _ in range(4)
                )
            ),
        ),
    }


BOMBS = _bombs()


@pytest.mark.parametrize("limits", [None, SMALL_LIMITS], ids=["default-limits", "small-limits"])
@pytest.mark.parametrize("bomb", sorted(BOMBS))
def test_decompression_bombs_are_bounded(bomb: str, limits: Limits | None) -> None:
    codec, build = BOMBS[bomb]
    payload = build()
    data = v2_batch(payload, codec)
    lim = limits or Limits()
    bound = lim.decompressed_bound(len(payload))
    kwargs: dict[str, Any] = {} if limits is None else {"limits": limits}
    for api in ("object", "columnar"):
        t0 = time.perf_counter()
        with probe_memory() as mem, pytest.raises(CorruptRecordError) as info:
            if api == "object":
                for entry in LogReader(data, path=PATH, **kwargs):
                    entry.records(lim)
            else:
                decode_range(data, path=PATH, include_headers=True, **kwargs)
        elapsed = time.perf_counter() - t0
        check_error(info.value, data)
        assert elapsed < 10, f"{api}: {elapsed:.1f} s"
        # the output may grow to the bound before it is refused: never much beyond it
        assert mem.rss_growth <= bound + SLACK, f"{api}: {mem!r}, bound {bound / MiB:.1f} MiB"
        assert mem.traced_peak <= bound + SLACK, f"{api}: {mem!r}, bound {bound / MiB:.1f} MiB"
        if bound < BOMB_SIZE:
            assert "limit" in info.value.reason, info.value.reason


MEDIUM_LIMITS = Limits(min_decompressed_allowance=64 * MiB, max_decompressed_bytes=64 * MiB)
ACCEPTED_SIZE = 56 * MiB


@pytest.mark.parametrize("codec", [1, 2, 3, 4], ids=["gzip", "snappy", "lz4", "zstd"])
def test_decompression_within_the_limit_peaks_near_the_limit(codec: int) -> None:
    """A payload inside the bound (56 MiB of zeros, bound 64 MiB) is inflated, then rejected as
    records; peak memory must stay near the bound, not at a multiple of it (copies of the
    decompressed output count: they are what makes the bound meaningful)."""
    payload = codecs.compress(codec, bytes(ACCEPTED_SIZE))
    data = v2_batch(payload, codec)
    bound = MEDIUM_LIMITS.decompressed_bound(len(payload))
    assert bound == 64 * MiB
    failures = []
    for api in ("object", "columnar"):
        with probe_memory() as mem, pytest.raises(CorruptRecordError) as info:
            if api == "object":
                for entry in LogReader(data, path=PATH, limits=MEDIUM_LIMITS):
                    entry.records(MEDIUM_LIMITS)
            else:
                decode_range(data, path=PATH, include_headers=True, limits=MEDIUM_LIMITS)
        check_error(info.value, data)
        assert "limit" not in info.value.reason  # the codec accepted it; the records did not
        if mem.rss_growth > bound + SLACK:
            failures.append(f"{api}: {mem!r} for {ACCEPTED_SIZE / MiB:.0f} MiB of output")
    assert not failures, failures


def _reseal(buf: bytearray) -> bytes:
    struct.pack_into(">I", buf, 17, crc32c(bytes(buf[21:])))
    return bytes(buf)


def _absurd_cases() -> dict[str, bytes]:
    plain = encode_batch([Record.of(b"value", key=b"key", timestamp=T0, headers=[("h", b"v")])])
    cases: dict[str, bytes] = {}
    for name, value in [("count=2^31-1", 2**31 - 1), ("count=-2^31", -(2**31))]:
        buf = bytearray(plain)
        struct.pack_into(">i", buf, 57, value)
        cases[name] = _reseal(buf)
        zbuf = bytearray(v2_batch(codecs.compress(4, plain[HEADER_SIZE:]), 4))
        struct.pack_into(">i", zbuf, 57, value)
        cases[name + " zstd"] = _reseal(zbuf)
    # varints inside the record: length, key length, value length, header count, header key
    area = plain[HEADER_SIZE:]
    fields = varint_fields(area, 1)
    for label, idx in [
        ("record length", 0),
        ("key length", 3),
        ("value length", 4),
        ("header count", 5),
        ("header key length", 6),
    ]:
        off, n = fields[idx]
        for value in (2**31 - 1, -(2**31)):
            new_area = area[:off] + zigzag_varint(value) + area[off + n :]
            cases[f"{label}={value}"] = v2_batch(new_area, 0)
    legacy = bytearray(encode_message(magic=1, key=b"k", value=b"v", timestamp=T0))
    struct.pack_into(">i", legacy, 26, 2**31 - 1)  # key length
    cases["legacy key length=2^31-1"] = bytes(legacy)
    return cases


ABSURD = _absurd_cases()


@pytest.mark.parametrize("case", sorted(ABSURD))
def test_absurd_counts_and_lengths_fail_fast_without_allocating(case: str) -> None:
    data = ABSURD[case]
    for _ in range(2):  # the second run is measured: caches and kernels are warm
        # CPU time, not wall clock: "fast" is about the work done, and a loaded machine (the
        # suite's other worker, other jobs) stretched the wall clock past the bound
        t0 = time.process_time()
        with probe_memory() as mem:
            out = run_all_decoders(data)
        elapsed = time.process_time() - t0
    assert not out.obj.complete and out.col_all.error is not None
    assert out.obj_crc.iter_error is None or "CRC" not in out.obj_crc.iter_error.reason
    assert elapsed < 1.0
    assert mem.rss_growth <= 8 * MiB and mem.traced_peak <= 2 * MiB, repr(mem)


@pytest.mark.parametrize("magic", [0, 1, 2])
@pytest.mark.parametrize("at_end", [False, True])
def test_absurd_entry_size_is_too_large_not_a_tail(magic: int, at_end: bool) -> None:
    """An entry size of 2^31-1 exceeds max_batch_bytes: corruption, even at the end of the data."""
    entry = bytearray(
        encode_batch([Record.of(b"v")])
        if magic == 2
        else encode_message(magic=magic, key=None, value=b"v")
    )
    struct.pack_into(">i", entry, 8, 2**31 - 1)
    data = bytes(entry) if at_end else bytes(entry) + bytes(entry)
    with probe_memory() as mem:
        out = run_all_decoders(data)
    for err in (out.obj.iter_error, out.strict.iter_error, out.col_all.error):
        assert isinstance(err, BatchTooLargeError) and err.position == 8, repr(err)
    assert mem.traced_peak <= 2 * MiB and mem.rss_growth <= 8 * MiB, repr(mem)
    # a reader allowed such sizes reports a cut-off tail instead, still without allocating
    big = Limits(max_batch_bytes=2**31 + 12)
    reader = LogReader(data, path=PATH, limits=big)
    assert list(reader) == [] and reader.incomplete_tail is not None
    assert reader.incomplete_tail.declared_size == 2**31 + 11
    res = decode_range(data, path=PATH, limits=big)
    assert res.batch.num_rows == 0 and res.incomplete_tail == reader.incomplete_tail


# ---------------------------------------------------------------------------------------------
# findings: minimal regression tests (each names the source location and the suggested fix)


def _v1_wrapper(inner_offsets: list[int], wrapper_offset: int) -> bytes:
    inner = b"".join(
        encode_message(magic=1, key=None, value=b"v%d" % i, timestamp=T0, offset=off)
        for i, off in enumerate(inner_offsets)
    )
    payload = codecs.compress(1, inner, magic=1)
    return encode_message(
        magic=1, key=None, value=payload, timestamp=T0, attributes=1, offset=wrapper_offset
    )


def test_regression_legacy_inner_offsets_beyond_int64_do_not_crash_decode_range() -> None:
    """BUG: ``OverflowError`` escapes ``decode_range`` (columnar.py ``_decode_legacy``:
    ``pa.array(rows["offset"], pa.int64())``) for a CRC-valid v1 gzip wrapper at offset 2^63-1
    whose last inner relative offset is -5: ``LegacyEntry.inner_entries`` computes absolute
    offsets ``base + relative`` = 2^63+4 with Python ints. Fix: reject absolute inner offsets
    outside [0, 2^63-1] in ``inner_entries`` (CorruptRecordError at the wrapper).
    """
    data = _v1_wrapper([0, -5], 2**63 - 1)
    out = decode_everything(data)
    for row in out.obj.rows(control=True):
        assert -(2**63) <= row[0] < 2**63, f"object API offset {row[0]} is not an int64"
    assert_agree(out)


def _resealed_v2(batch: bytes, at: int, fmt: str, value: int) -> bytes:
    buf = bytearray(batch)
    struct.pack_into(fmt, buf, at, value)
    return _reseal(buf)


def _int64_overflow_batch(field: str) -> bytes:
    if field == "offset":  # baseOffset is outside the CRC: only the leader's stamp is off
        batch = encode_batch([Record.of(b"a", timestamp=T0), Record.of(b"b", timestamp=T0)])
        return _resealed_v2(batch, 0, ">q", 2**63 - 1)
    batch = encode_batch([Record.of(b"a", timestamp=0), Record.of(b"b", timestamp=10)])
    return _resealed_v2(batch, 27, ">q", 2**63 - 5)  # baseTimestamp


@pytest.mark.parametrize("field", ["offset", "timestamp"])
def test_regression_v2_offset_or_timestamp_beyond_int64_decodes_alike(field: str) -> None:
    """FINDING: base + delta beyond int64. The object API (batch.py ``_decode_record``: ``Record(
    base_offset + offset_delta, base_ts + ts_delta, ...)``) returns Python ints >= 2^63; the
    columnar kernel (``_kernels.decode_v2``) wraps to negative int64 (as Java's long arithmetic
    does). They must agree; suggested fix: raise CorruptRecordError in both when an offset or
    timestamp leaves int64 (an offset can never legitimately do so).
    """
    out = decode_everything(_int64_overflow_batch(field))
    for row in out.obj.rows(control=True):
        assert -(2**63) <= row[0] < 2**63 and -(2**63) <= row[1] < 2**63, row
    assert not out.disagreements, out.disagreements


def test_regression_invalid_utf8_header_key_is_read_leniently_by_both_apis() -> None:
    """FINDING (object vs columnar validity): a header key that is not UTF-8 makes
    ``RecordBatch.records()`` raise ("header key is not valid UTF-8", batch.py ``_decode_record``)
    while ``decode_range`` decodes it with U+FFFD replacements (columnar.py ``_headers``).
    Java (``Utils.utf8`` -> ``new String(bytes, UTF_8)``) is lenient, so the columnar path is
    right; fix: ``.decode("utf-8", "replace")`` in ``_decode_record``.
    """
    batch = bytearray(encode_batch([Record.of(b"v", timestamp=T0, headers=[("\u00e9", b"x")])]))
    at = bytes(batch).index("\u00e9".encode())
    batch[at] = 0xFF  # b"\xff\xa9": not UTF-8
    data = _reseal(batch)
    res = decode_range(data, path=PATH, include_headers=True)
    assert res.batch.column("headers").to_pylist() == [[{"key": "\ufffd\ufffd", "value": b"x"}]]
    (entry,) = LogReader(data, path=PATH, verify_crc=True)
    (record,) = entry.records()
    assert record.headers[0].key == "\ufffd\ufffd"


def _control_batch_variants() -> dict[str, bytes]:
    marker = encode_control_batch(
        ControlType.COMMIT, offset=5, timestamp=T0, producer_id=1, producer_epoch=0
    )
    fields = varint_fields(marker[HEADER_SIZE:], 1)
    out = {}
    out["negative count"] = _resealed_v2(marker, 57, ">i", -1)
    out["unknown codec"] = _resealed_v2(marker, 21, ">h", 0x0037)
    buf = bytearray(marker)
    buf[HEADER_SIZE + fields[0][0]] = 0x7F  # record length -64
    out["corrupt record"] = _reseal(buf)
    buf = bytearray(marker[:HEADER_SIZE] + codecs.compress(3, marker[HEADER_SIZE:])[:-6])
    struct.pack_into(">h", buf, 21, 0x0033)  # transactional control batch, lz4
    out["truncated lz4 payload"] = bytes(fix_entry(buf, 2))
    data = encode_batch([Record.of(b"data", timestamp=T0)], base_offset=0)
    return {k: data + v for k, v in out.items()}


@pytest.mark.parametrize("case", sorted(_control_batch_variants()))
def test_regression_skipped_control_batches_are_validated_consistently(case: str) -> None:
    """FINDING: ``decode_range(control_records="skip")`` rejects a corrupt control batch when
    the damage is in its header (negative count, unknown codec: checked for *all* batches in
    columnar.py ``_decode_v2`` before the skip filter) but silently accepts it when the damage
    is in its records or compressed payload (never decoded). Kafka's consumer iterates control
    batches (to read the marker), so a corrupt control batch is an error there; the issue asks
    that a corrupt batch raise. Fix: decode skipped control batches too (drop their rows), or
    at least validate them the same way whatever the damage.
    """
    data = _control_batch_variants()[case]
    include = run_columnar(data, verify_crc=True, control_records="include")
    skip = run_columnar(data, verify_crc=True, control_records="skip")
    assert include.error is not None  # corrupt whatever the mode
    assert skip.error is not None, f"{case}: skipped control batch accepted"


def test_regression_short_tail_declared_size_is_read_alike() -> None:
    """FINDING: for a tail shorter than 18 bytes ``LogReader`` reads the size field as a signed
    int32 (``IncompleteTail.declared_size`` = -222691328 + 12 here) and ``decode_range`` as
    unsigned (columnar.py ``decode_range``: ``int.from_bytes(..., "big")`` without
    ``signed=True``: 4072275968 + 12). Fix: ``signed=True`` (Kafka's size field is an int32).
    """
    data = bytes.fromhex("1eb0794270066328f2ba000000000000")
    reader = LogReader(data, path=PATH)
    assert list(reader) == []
    res = decode_range(data, path=PATH)
    assert reader.incomplete_tail is not None
    assert res.incomplete_tail == reader.incomplete_tail


@pytest.mark.parametrize("magic", [1, 2])
def test_regression_microsecond_timestamps_beyond_int64_are_reported(magic: int) -> None:
    """BUG (magic 1) / FINDING (magic 2): ``decode_range(timestamp_unit="us")`` scales ms by 1000
    without a range check. For legacy entries (columnar.py ``_decode_legacy``:
    ``np.asarray(rows["timestamp"], np.int64)`` after ``rec.timestamp * 1000``) a timestamp of
    2^62 ms raises ``OverflowError``; for v2 batches (columnar.py ``_timestamps``: ``ts_ms *
    1000``) it silently wraps (to 0 here). Fix: check ``abs(ts) <= (2^63-1) // 1000`` and raise
    CorruptRecordError naming the batch (or saturate, documented) in both paths.
    """
    if magic == 2:
        data = encode_batch([Record.of(b"v", timestamp=2**62)])
    else:
        data = encode_message(magic=1, key=None, value=b"v", timestamp=2**62)
    assert decode_range(data, path=PATH).batch.column("timestamp").cast(pa.int64()).to_pylist() == [
        2**62
    ]
    with pytest.raises(KafkalogError):
        decode_range(data, path=PATH, timestamp_unit="us")


@pytest.mark.parametrize("api", ["object", "columnar"])
def test_regression_v2_payload_that_does_not_decompress_raises_compression_error(
    api: str,
) -> None:
    """FINDING (error class): a v2 batch whose payload cannot be decompressed, or decompresses
    beyond the limit, raises a plain CorruptRecordError (batch.py ``records_area`` and
    columnar.py ``_decode_v2`` re-raise ``CorruptRecordError``), while legacy wrappers raise
    ``CompressionError``, the class errors.py documents for exactly this. Fix: raise
    ``CompressionError`` (a CorruptRecordError subclass) in both v2 paths.
    """
    data = v2_batch(_snappy_lie(2**32 - 1), 2)
    with pytest.raises(CompressionError):
        if api == "object":
            for entry in LogReader(data, path=PATH):
                entry.records()
        else:
            decode_range(data, path=PATH)
