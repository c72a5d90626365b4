"""Seed corpus, mutation helpers and the all-decoders harness for ``test_fuzz.py``.

Kept apart from the tests so the corpus can be reused from a shell for longer fuzzing runs::

    PYTHONPATH=src:tests/records python -c "import fuzz_corpus; print(fuzz_corpus.SEEDS.keys())"

Nothing here asserts on *valid* input except :func:`seed_problems`; the harness
(:func:`run_all_decoders`) asserts the properties every input, valid or not, must have.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from kafkalog.errors import CorruptRecordError, IncompleteTailError, KafkalogError
from kafkalog.records import (
    METADATA_COLUMNS,
    ControlType,
    LegacyEntry,
    LogReader,
    Record,
    RecordBatch,
    TimestampType,
    decode_range,
    encode_arrow,
    encode_batch,
    encode_control_batch,
    encode_message,
    encode_message_set,
)
from kafkalog.records.batch import HEADER_SIZE
from kafkalog.records.crc import crc32, crc32c
from kafkalog.records.varint import read_varint, read_varlong
from provenance import FIXTURES

JAVACODE = FIXTURES / "kafka-4.0-snapshot-javacode"
BROKER_090 = FIXTURES / "kafka-0.9.0.1-broker"

#: The file name every decoder is given; every positioned error must name it.
PATH = "fuzz-topic-0/00000000000000000000.log"
ALL_METADATA = list(METADATA_COLUMNS)
T0 = 1_700_000_000_000
SEED_BUDGET = 3000  # bytes of a fixture file kept as a seed (whole entries only)


# ---------------------------------------------------------------------------------------------
# seeds


@dataclass(frozen=True)
class Entry:
    """Where one log entry of a (valid) seed lies, and what it is."""

    pos: int
    size: int
    magic: int
    codec: int
    is_control: bool
    #: (offset inside the entry, byte length) of every varint of every record; only filled for
    #: uncompressed v2 batches (for compressed ones see :func:`varint_fields` on the payload).
    varints: tuple[tuple[int, int], ...] = ()

    @property
    def end(self) -> int:
        return self.pos + self.size


@dataclass(frozen=True)
class Seed:
    name: str
    data: bytes
    entries: tuple[Entry, ...] = field(default=())


def varint_fields(area: bytes | memoryview, count: int) -> list[tuple[int, int]]:
    """(offset, length) of every varint in a valid v2 records area of ``count`` records."""
    out: list[tuple[int, int]] = []
    pos = 0
    end = len(area)

    def take(reader: Callable[..., tuple[int, int]], limit: int) -> int:
        nonlocal pos
        start = pos
        value, pos = reader(area, pos, limit)
        out.append((start, pos - start))
        return value

    for _ in range(count):
        length = take(read_varint, end)
        rec_end = pos + length
        pos += 1  # attributes
        take(read_varlong, rec_end)
        take(read_varint, rec_end)
        key_len = take(read_varint, rec_end)
        pos += max(key_len, 0)
        value_len = take(read_varint, rec_end)
        pos += max(value_len, 0)
        for _h in range(take(read_varint, rec_end)):
            pos += take(read_varint, rec_end)
            pos += max(take(read_varint, rec_end), 0)
        pos = rec_end
    return out


def describe(data: bytes) -> tuple[Entry, ...]:
    """Entries of a valid buffer (raises if it is not valid)."""
    out = []
    for e in LogReader(data, verify_crc=True, strict_tail=True):
        varints: tuple[tuple[int, int], ...] = ()
        if isinstance(e, RecordBatch):
            control = e.is_control
            if e.compression_id == 0:
                varints = tuple(
                    (HEADER_SIZE + off, n)
                    for off, n in varint_fields(bytes(e.buffer[HEADER_SIZE:]), e.records_count)
                )
        else:
            control = False
        out.append(Entry(e.position, e.size_in_bytes, e.magic, e.compression_id, control, varints))
    return tuple(out)


#: Encoder failures met while building seeds (a failing test reports them).
ENCODER_PROBLEMS: dict[str, str] = {}

RECORDS = [
    Record.of(b"value-0", key=b"key-0", timestamp=T0, headers=[("h1", b"x"), ("h2", None)]),
    Record.of(b"", key=None, timestamp=T0 - 5),  # null key, empty value, negative ts delta
    Record.of(None, key=b"tombstone", timestamp=T0 + 7, headers=[("\u00e9t\u00e9", b"")]),
    Record.of(b"v" * 40, key=b"k", timestamp=T0 + 9),
]
LEGACY_RECORDS = [
    Record.of(b"value-0", key=b"key-0", timestamp=T0),
    Record.of(b"", key=None, timestamp=T0 + 1),
    Record.of(None, key=b"tombstone", timestamp=T0 + 2),
]


def _built_seeds() -> dict[str, bytes]:
    out: dict[str, bytes] = {}

    def add(name: str, build: Callable[[], bytes]) -> None:
        try:
            out[name] = build()
        except Exception as exc:
            ENCODER_PROBLEMS.setdefault(name, repr(exc))

    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        add(f"v2-{codec}", lambda c=codec: encode_batch(RECORDS, compression=c, base_offset=100))
    add(
        "v2-idempotent-logappend",
        lambda: encode_batch(
            RECORDS[:2],
            producer_id=7,
            producer_epoch=3,
            base_sequence=2**31 - 1,
            timestamp_type=TimestampType.LOG_APPEND_TIME,
            log_append_time=T0 + 50,
        ),
    )
    add("v2-empty-horizon", lambda: encode_batch([], base_offset=5, delete_horizon_ms=T0))
    add(
        "v2-txn-commit",
        lambda: (
            encode_batch(
                RECORDS[:2],
                compression="lz4",
                base_offset=10,
                producer_id=42,
                producer_epoch=1,
                base_sequence=0,
                is_transactional=True,
            )
            + encode_control_batch(
                ControlType.COMMIT,
                offset=12,
                timestamp=T0,
                producer_id=42,
                producer_epoch=1,
                coordinator_epoch=5,
            )
            + encode_control_batch(
                ControlType.ABORT, offset=13, timestamp=T0, producer_id=43, producer_epoch=0
            )
        ),
    )
    add(
        "v2-leader-change",
        lambda: (
            encode_control_batch(
                ControlType.LEADER_CHANGE,
                offset=0,
                timestamp=T0,
                producer_id=-1,
                producer_epoch=-1,
                value=b"\x00\x00\x00\x00\x00\x01",
            )
            + encode_batch(RECORDS[3:], base_offset=1)
        ),
    )
    table = pa.table(
        {
            "key": pa.array([b"a", None, b"c", b""], pa.binary()),
            "value": pa.array([b"1", b"22", None, b"4444"], pa.binary()),
            "timestamp": pa.array([T0, T0 + 1, T0 - 1, T0 + 3], pa.int64()),
            "headers": pa.array(
                [[{"key": "k", "value": b"v"}], None, [], [{"key": "z", "value": None}]],
                pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
            ),
        }
    )
    for codec in ("none", "snappy", "zstd"):
        add(
            f"arrow-{codec}",
            lambda c=codec: (
                encode_arrow(table, base_offset=1000, compression=c, max_records_per_batch=2).data
            ),
        )
    for magic in (0, 1):
        for codec in ("none", "gzip", "snappy", "lz4"):
            add(
                f"v{magic}-{codec}",
                lambda m=magic, c=codec: encode_message_set(
                    LEGACY_RECORDS, magic=m, base_offset=20, compression=c
                ),
            )
    add(
        "v1-lz4-logappend",
        lambda: encode_message_set(
            LEGACY_RECORDS,
            magic=1,
            base_offset=3,
            compression="lz4",
            timestamp_type=TimestampType.LOG_APPEND_TIME,
            log_append_time=T0 + 99,
        ),
    )
    add(
        "mixed-v1-v2",
        lambda: (
            encode_message_set(LEGACY_RECORDS[:2], magic=1, base_offset=0)
            + encode_batch(RECORDS[:2], base_offset=2)
            + encode_message(magic=0, key=b"k", value=b"v", offset=4)
        ),
    )
    return out


FIXTURE_SEEDS = {
    "fx-v2-none": JAVACODE / "v2-none-0/00000000000000000000.log",
    "fx-v2-gzip": JAVACODE / "v2-gzip-0/00000000000000000000.log",
    "fx-v2-snappy": JAVACODE / "v2-snappy-0/00000000000000000000.log",
    "fx-v2-lz4": JAVACODE / "v2-lz4-0/00000000000000000000.log",
    "fx-v2-zstd": JAVACODE / "v2-zstd-0/00000000000000000000.log",
    "fx-v2-txn": JAVACODE / "v2-txn-0/00000000000000000000.log",
    "fx-v2-logappend": JAVACODE / "v2-logappendtime-0/00000000000000000000.log",
    "fx-v1-gzip": JAVACODE / "v1-gzip-0/00000000000000000000.log",
    "fx-v1-snappy": JAVACODE / "v1-snappy-0/00000000000000000000.log",
    "fx-v0-lz4-broker": BROKER_090 / "v0-lz4-0/00000000000000000000.log",
    "fx-v0-gzip-broker": BROKER_090 / "v0-gzip-0/00000000000000000000.log",
}


def _fixture_seed(path: Path) -> bytes:
    """The first whole entries of a fixture file, at most :data:`SEED_BUDGET` bytes (>= 1)."""
    data = path.read_bytes()
    end = 0
    for e in LogReader(data):
        if end and e.position + e.size_in_bytes > SEED_BUDGET:
            break
        end = e.position + e.size_in_bytes
    return data[:end]


def _all_seeds() -> dict[str, Seed]:
    raw = _built_seeds()
    for name, path in FIXTURE_SEEDS.items():
        if path.is_file():
            raw[name] = _fixture_seed(path)
    seeds = {}
    for name, data in raw.items():
        try:
            seeds[name] = Seed(name, bytes(data), describe(bytes(data)))
        except Exception as exc:
            ENCODER_PROBLEMS.setdefault(f"seed {name} does not decode", repr(exc))
    return seeds


SEEDS: dict[str, Seed] = _all_seeds()
SEED_NAMES = sorted(SEEDS)


# ---------------------------------------------------------------------------------------------
# mutation helpers

#: (offset, width) of the header fields of a v2 batch and of a legacy message.
V2_FIELDS = {
    "baseOffset": (0, 8),
    "length": (8, 4),
    "leaderEpoch": (12, 4),
    "magic": (16, 1),
    "crc": (17, 4),
    "attributes": (21, 2),
    "lastOffsetDelta": (23, 4),
    "baseTimestamp": (27, 8),
    "maxTimestamp": (35, 8),
    "producerId": (43, 8),
    "producerEpoch": (51, 2),
    "baseSequence": (53, 4),
    "count": (57, 4),
}
LEGACY_FIELDS = {
    "offset": (0, 8),
    "size": (8, 4),
    "crc": (12, 4),
    "magic": (16, 1),
    "attributes": (17, 1),
    "timestamp|keyLength": (18, 8),
    "keyLength(v0)": (18, 4),
    "keyLength(v1)": (26, 4),
}

#: Values that sit on the boundaries the decoders check.
INTERESTING = [
    0,
    1,
    2,
    3,
    4,
    5,
    6,
    7,
    8,
    13,
    14,
    15,
    21,
    48,
    49,
    50,
    60,
    61,
    62,
    0x7F,
    0x80,
    0xFF,
    0x100,
    0x7FFF,
    0x8000,
    0xFFFF,
    0x10000,
    0x7FFFFF,
    2**24,
    2**31 - 12,
    2**31 - 13,
    2**31 - 1,
    2**31,
    2**32 - 1,
    2**63 - 1,
    2**63,
    2**64 - 1,
    -1,
    -2,
    -(2**31),
    -(2**63),
]


def put_int(buf: bytearray, pos: int, width: int, value: int) -> None:
    """Write ``value`` (any int, wrapped to ``width`` bytes) big-endian at ``pos`` (clipped)."""
    raw = (value % (1 << (8 * width))).to_bytes(width, "big")
    n = max(0, min(width, len(buf) - pos))
    buf[pos : pos + n] = raw[:n]


def zigzag_varint(value: int, long: bool = False) -> bytes:
    bits = 64 if long else 32
    u = ((value << 1) ^ (value >> (bits - 1))) & ((1 << bits) - 1)
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def fix_entry(entry: bytearray, magic: int) -> bytearray:
    """Rewrite an entry's size field and CRC so only its *content* is wrong."""
    if len(entry) >= 12:
        struct.pack_into(">i", entry, 8, len(entry) - 12)
    if magic >= 2 and len(entry) >= 21:
        struct.pack_into(">I", entry, 17, crc32c(bytes(entry[21:])))
    elif magic < 2 and len(entry) >= 17:
        struct.pack_into(">I", entry, 12, crc32(bytes(entry[16:])))
    return entry


def fix_inner_crcs(data: bytearray) -> bytearray:
    """Recompute the CRC of every inner legacy message whose framing is still intact."""
    pos = 0
    while len(data) - pos >= 26:
        size = struct.unpack_from(">i", data, pos + 8)[0]
        if size < 14 or pos + 12 + size > len(data):
            break
        struct.pack_into(">I", data, pos + 12, crc32(bytes(data[pos + 16 : pos + 12 + size])))
        pos += 12 + size
    return data


# ---------------------------------------------------------------------------------------------
# the harness: run every decoder, check the error contract, return what each decoded


Row = tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


def check_error(exc: KafkalogError, data: bytes, *, tail_ok: bool = False) -> None:
    """The contract of an error raised while decoding ``data`` read from :data:`PATH`."""
    if isinstance(exc, IncompleteTailError):
        assert tail_ok, f"IncompleteTailError without strict_tail: {exc}"
    else:
        assert isinstance(exc, CorruptRecordError), (
            f"{type(exc).__name__} is not a positioned corruption error: {exc!r}"
        )
    assert isinstance(exc.reason, str) and exc.reason, f"no reason: {exc!r}"
    assert exc.position is not None, f"no position: {exc!r}"
    assert 0 <= exc.position <= len(data), f"position outside [0, {len(data)}]: {exc!r}"
    assert exc.path == PATH and PATH in str(exc), f"path missing from {exc!r}"


def _row(rec: Record) -> Row:
    return (
        rec.offset,
        rec.timestamp,
        rec.key,
        rec.value,
        tuple((h.key, h.value) for h in rec.headers),
    )


@dataclass
class EntryResult:
    position: int
    is_control: bool
    rows: list[Row] | None
    error: KafkalogError | None


@dataclass
class ObjectResult:
    entries: list[EntryResult]
    iter_error: KafkalogError | None
    tail: Any
    end_position: int

    @property
    def complete(self) -> bool:
        """Iteration succeeded and every entry (control batches included) decoded."""
        return self.iter_error is None and all(e.error is None for e in self.entries)

    @property
    def complete_data(self) -> bool:
        """Iteration succeeded and every entry's records decoded. Control batches count too:
        the columnar path decodes (validates) them even when it drops their rows, as a Kafka
        consumer iterates them; only a malformed marker key/value is the object API's own
        business (``control_record()``), checked separately."""
        return self.complete

    def rows(self, *, control: bool) -> list[Row]:
        return [r for e in self.entries if control or not e.is_control for r in e.rows or ()]


def _decode_entry(entry: RecordBatch | LegacyEntry, data: bytes) -> list[Row]:
    # header-derived properties must never fail with anything but a positioned error
    _ = (
        entry.last_offset,
        entry.next_offset,
        entry.timestamp_type,
        entry.max_timestamp,
        entry.is_control,
        entry.is_transactional,
        entry.size_in_bytes,
    )
    if isinstance(entry, RecordBatch):
        _ = (entry.last_sequence, entry.delete_horizon_ms, entry.compression)
        rows = [_row(r) for r in entry.records()]
        if entry.is_control:
            try:
                entry.control_record()
            except KafkalogError as exc:  # positioned like every error, but not a record error
                check_error(exc, data)
        return rows
    rows = [_row(r) for r in entry.records()]
    if entry.is_compressed:
        _ = (entry.base_offset, entry.records_count)
        for inner in entry.inner_entries():
            assert inner.is_valid()
            _ = (inner.timestamp_type, inner.records())
    return rows


def run_object_api(
    data: bytes, *, verify_crc: bool, strict_tail: bool = False, decode: bool = True
) -> ObjectResult:
    reader = LogReader(data, path=PATH, verify_crc=verify_crc, strict_tail=strict_tail)
    entries: list[EntryResult] = []
    iter_error = None
    try:
        for entry in reader:
            assert entry.path == PATH
            if verify_crc:
                assert entry.is_valid()
            rows: list[Row] | None = None
            error = None
            if decode:
                try:
                    rows = _decode_entry(entry, data)
                except KafkalogError as exc:
                    check_error(exc, data)
                    error = exc
            entries.append(EntryResult(entry.position, entry.is_control, rows, error))
    except KafkalogError as exc:
        check_error(exc, data, tail_ok=strict_tail)
        iter_error = exc
    if strict_tail and iter_error is None:
        assert reader.incomplete_tail is None
    return ObjectResult(entries, iter_error, reader.incomplete_tail, reader.end_position)


@dataclass
class ColumnarResult:
    rows: list[Row] | None
    error: KafkalogError | None
    result: Any = None


def arrow_rows(batch: pa.RecordBatch) -> list[Row]:
    # (timestamps as int64: decoded garbage can lie outside Python's datetime range)
    ts = batch.column("timestamp").cast(pa.int64()).to_pylist()
    cols = batch.drop_columns(["timestamp"]).to_pydict()
    headers = cols.get("headers") or [None] * batch.num_rows
    return [
        (o, t, k, v, tuple((h["key"], h["value"]) for h in hs or ()))
        for o, t, k, v, hs in zip(
            cols["offset"], ts, cols["key"], cols["value"], headers, strict=True
        )
    ]


def run_columnar(
    data: bytes, *, verify_crc: bool, control_records: str, timestamp_unit: str = "ms"
) -> ColumnarResult:
    try:
        res = decode_range(
            data,
            path=PATH,
            include_headers=True,
            metadata=ALL_METADATA,
            control_records=control_records,  # type: ignore[arg-type]
            verify_crc=verify_crc,
            timestamp_unit=timestamp_unit,  # type: ignore[arg-type]
        )
    except KafkalogError as exc:
        check_error(exc, data)
        return ColumnarResult(None, exc)
    batch = res.batch
    batch.validate(full=True)
    assert batch.schema.names[:5] == ["key", "value", "offset", "timestamp", "timestampType"]
    assert 0 <= res.next_position <= len(data)
    return ColumnarResult(arrow_rows(batch), None, res)


@dataclass
class Outcome:
    data: bytes
    obj: ObjectResult  # verify_crc=False, every entry decoded
    obj_crc: ObjectResult  # verify_crc=True, iteration only
    strict: ObjectResult  # strict_tail=True, iteration only
    col_skip: ColumnarResult  # verify_crc=False, control_records="skip"
    col_all: ColumnarResult  # verify_crc=False, control_records="include"
    col_crc: ColumnarResult  # verify_crc=True, control_records="include"
    col_us: ColumnarResult  # as col_all, timestamp_unit="us"
    disagreements: list[str]


def run_all_decoders(data: bytes) -> Outcome:
    """Every decoder over ``data``; asserts the error contract and the cross-decoder invariants.

    Returns the outcome; validity disagreements between the object API and the columnar path are
    returned (not asserted) so the caller decides which are known findings.
    """
    data = bytes(data)
    obj = run_object_api(data, verify_crc=False)
    obj_crc = run_object_api(data, verify_crc=True, decode=False)
    strict = run_object_api(data, verify_crc=False, strict_tail=True, decode=False)
    col_skip = run_columnar(data, verify_crc=False, control_records="skip")
    col_all = run_columnar(data, verify_crc=False, control_records="include")
    col_crc = run_columnar(data, verify_crc=True, control_records="include")
    col_us = run_columnar(data, verify_crc=False, control_records="include", timestamp_unit="us")

    # the tail is reported identically by every walk that reached it
    if obj.iter_error is None:
        assert (strict.iter_error is None) == (obj.tail is None)
        if obj.tail is not None:
            assert isinstance(strict.iter_error, IncompleteTailError)
            assert strict.iter_error.position == obj.tail.position
            assert obj.tail.available == len(data) - obj.tail.position
    for col in (col_skip, col_all, col_crc):
        if col.error is None and obj.iter_error is None:
            assert col.result.incomplete_tail == obj.tail
            assert col.result.next_position == obj.end_position
            assert col.result.entries == len(obj.entries)
    # CRC verification: the entries the object walk yields all verify (checked in the walk);
    # when every CRC is fine, verifying changes nothing
    if obj.iter_error is None and obj_crc.iter_error is None:
        assert len(obj_crc.entries) == len(obj.entries)
        if col_all.error is None:
            assert col_crc.error is None, f"columnar CRC check failed alone: {col_crc.error}"
            assert col_crc.rows == col_all.rows
    if col_crc.error is None:
        assert col_all.error is None and col_crc.rows == col_all.rows
        assert obj_crc.iter_error is None, f"only the object walk failed: {obj_crc.iter_error!r}"
    # columnar: including control batches never makes a valid range invalid the other way round
    if col_all.error is None:
        assert col_skip.error is None

    disagreements = []
    if obj.complete_data and col_skip.error is None:
        got, want = col_skip.rows, obj.rows(control=False)
        if got != want:
            disagreements.append(f"records differ: object {want!r} columnar {got!r}")
    elif obj.complete_data != (col_skip.error is None):
        what = (
            f"columnar raised {col_skip.error!r}"
            if col_skip.error is not None
            else f"object API raised {obj.iter_error or _first_error(obj)!r}"
        )
        disagreements.append(f"validity differs ({what}, the other decoded)")
    if obj.complete and col_all.error is None and col_all.rows != obj.rows(control=True):
        disagreements.append("records differ with control records included")
    # microsecond timestamps are the millisecond ones times 1000, when that is an int64;
    # when it is not, the 'us' decode must refuse it with a clear error
    int64 = range(-(2**63), 2**63)
    too_big_for_us = col_all.rows is not None and any(
        r[1] * 1000 not in int64 for r in col_all.rows
    )
    if too_big_for_us:
        if col_us.error is None or "microseconds" not in col_us.error.reason:
            disagreements.append(f"timestamp_unit='us' accepted an overflow: {col_us.error!r}")
    elif (col_all.error is None) != (col_us.error is None):
        disagreements.append(f"timestamp_unit='us' validity differs: {col_us.error!r}")
    elif col_all.rows is not None and col_us.rows is not None:
        want_us = [(*r[:1], r[1] * 1000, *r[2:]) for r in col_all.rows]
        if want_us != col_us.rows:
            disagreements.append("timestamp_unit='us' is not the 'ms' timestamp times 1000")
    return Outcome(data, obj, obj_crc, strict, col_skip, col_all, col_crc, col_us, disagreements)


def _first_error(obj: ObjectResult) -> KafkalogError | None:
    return next((e.error for e in obj.entries if e.error is not None and not e.is_control), None)


def seed_problems() -> list[str]:
    """Seeds that do not decode identically and cleanly through every decoder."""
    problems = list(f"{k}: {v}" for k, v in ENCODER_PROBLEMS.items())
    for seed in SEEDS.values():
        out = run_all_decoders(seed.data)
        if not (out.obj.complete and out.col_crc.error is None and out.obj.tail is None):
            problems.append(f"{seed.name}: does not decode cleanly")
        problems += [f"{seed.name}: {d}" for d in out.disagreements]
    return problems
