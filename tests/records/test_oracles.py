"""Round trips of v2 record batches against two independent codecs: kafka-python and aiokafka.

* ours -> theirs: batches written by :func:`encode_batch` and :func:`encode_arrow` (every codec,
  headers, null key/value, out-of-order and -1 timestamps, LogAppendTime, producer id/epoch/
  sequence, transactional, control markers) decode identically with both oracles, and their CRCs
  validate with both;
* theirs -> ours: batches built by both oracles' ``DefaultRecordBatchBuilder`` (every codec) decode
  identically with our object API and our ``decode_arrow``;
* the object API and the columnar API agree with each other on all of these;
* control batches equal the §12 ``ctl_commit`` vector byte for byte and decode as markers in both
  oracles (neither oracle can *build* a control batch: both builders hard-wire the control bit
  to 0, "control batches are only created by Broker").

Legacy (magic 0/1) message sets have their own oracle tests in ``test_legacy.py``; here only one
mixed legacy + v2 buffer is checked, to cover the hand-over between the two formats.

Representation differences are normalised in ``_oracle_record``, ``_legacy_row`` and
``_arrow_rows``, each with a comment; nothing that is compared is weakened. Oracle bugs met on the
way are worked around where they occur, with the evidence in a comment (aiokafka's C builder and
a first timestamp of -1; aiokafka's C ``MemoryRecords`` and mixed magics; both oracles and an
empty xerial snappy stream).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kafkalog.records import (
    HEADERS_TYPE,
    METADATA_COLUMNS,
    ControlType,
    Header,
    LogReader,
    Record,
    RecordBatch,
    TimestampType,
    decode_arrow,
    encode_arrow,
    encode_batch,
    encode_control_batch,
    encode_message_set,
)
from kafkalog.records.model import parse_control_record

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
LIBS = ["kafka-python", "aiokafka"]
T0 = 1_700_000_000_000
INT32_MAX = 0x7FFFFFFF
INT64 = pa.int64()

# §12 of kafka-storage-spec.md, produced by Kafka's own record builder
CTL_COMMIT = bytes.fromhex(
    "000000000000005a0000004200000004025c849e380030000000000000018e9b26e0000000018e9b26e0"
    "0000000000000010920003ffffffff000000012000000008000000010c00000000000900"
)
V2_NONE = bytes.fromhex(
    "0000000000000064000000600000000702bfafce330000000000020000018bcfe568000000018bcfe5687b"
    "ffffffffffffffffffffffffffff0000000320000000086b6579310c76616c756531002600f601020104"
    "763204046831047631046832011200cf0f04046b330100"
)

HYPOTHESIS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# A decoded record, the same shape for every decoder:
# (offset, timestamp, timestampType, key, value, ((header key, header value|None), ...))
Row = tuple[int, int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


@dataclass
class BatchView:
    """What one decoder says about one batch: the header fields it exposes, and the records."""

    fields: dict[str, Any]
    records: list[Row]
    extra: dict[str, Any] = field(default_factory=dict)
    legacy: bool = False  # a magic 0/1 entry (a wrapper message and its inner messages)


# Header fields every v2 oracle view must expose (so a comparison can never silently be empty).
CORE_FIELDS = {
    "base_offset",
    "last_offset_delta",
    "next_offset",
    "magic",
    "crc",
    "crc_valid",
    "attributes",
    "compression",
    "timestamp_type",
    "is_transactional",
    "is_control",
    "first_timestamp",
    "max_timestamp",
    "producer_id",
    "producer_epoch",
    "base_sequence",
}


def increment_sequence(sequence: int, delta: int) -> int:
    """Kafka's ``DefaultRecordBatch.incrementSequence`` (wraps past Integer.MAX_VALUE to 0)."""
    if sequence == -1:
        return -1
    if sequence > INT32_MAX - delta:
        return delta - (INT32_MAX - sequence) - 1
    return sequence + delta


# ---------------------------------------------------------------------------------------------
# Decoders: the two oracles, our object API, our columnar API


def _oracle_record(r: Any) -> Row:
    # Normalisations (representation only):
    # * keys/values may come back as bytes, bytearray or memoryview -> bytes (None stays None);
    # * headers come back as a list of (str, bytes|None) pairs -> tuple of pairs; a None header
    #   value stays None and b"" stays b"" (that distinction is compared);
    # * timestamp_type is a plain int 0/1 in both oracles -> int.
    def b(x: Any) -> bytes | None:
        return None if x is None else bytes(x)

    headers = tuple((str(k), b(v)) for k, v in r.headers)
    return (r.offset, r.timestamp, int(r.timestamp_type), b(r.key), b(r.value), headers)


def _oracle_v2_fields(batch: Any, crc_valid: bool) -> dict[str, Any]:
    fields = {
        "base_offset": batch.base_offset,
        "last_offset_delta": batch.last_offset_delta,
        "next_offset": batch.next_offset,
        "magic": batch.magic,
        "crc": batch.crc,
        "crc_valid": crc_valid,
        "attributes": batch.attributes,
        "compression": batch.compression_type,
        "timestamp_type": int(batch.timestamp_type),
        "is_transactional": batch.is_transactional,
        "is_control": batch.is_control_batch,
        "first_timestamp": batch.first_timestamp,
        "max_timestamp": batch.max_timestamp,
        "producer_id": batch.producer_id,
        "producer_epoch": batch.producer_epoch,
        "base_sequence": batch.base_sequence,
    }
    # kafka-python exposes a few more header fields than aiokafka's C extension does
    for ours, theirs in (
        ("leader_epoch", "leader_epoch"),
        ("last_sequence", "last_sequence"),
        ("records_count", "records_count"),
    ):
        if hasattr(batch, theirs):
            fields[ours] = getattr(batch, theirs)
    return fields


def _oracle_classes(lib: str) -> tuple[Callable[[bytes], Any], type]:
    """The oracle's ``MemoryRecords`` and its legacy batch class (whichever the default import
    picks: aiokafka's C extension here)."""
    if lib == "kafka-python":
        from kafka.record.legacy_records import LegacyRecordBatch
        from kafka.record.memory_records import MemoryRecords
    else:
        from aiokafka.record.legacy_records import LegacyRecordBatch
        from aiokafka.record.memory_records import MemoryRecords
    return MemoryRecords, LegacyRecordBatch


def oracle_view(lib: str, data: bytes) -> list[BatchView]:
    """Every batch of ``data`` as ``lib`` decodes it (``MemoryRecords.next_batch`` walk)."""
    memory_records, legacy_cls = _oracle_classes(lib)
    mr = memory_records(bytes(data))
    out: list[BatchView] = []
    while True:
        batch = mr.next_batch()
        if batch is None:
            break
        # CRC must be validated before iterating (both oracles assert this)
        crc_valid = bool(batch.validate_crc())
        legacy = isinstance(batch, legacy_cls)
        if legacy:
            # aiokafka's C legacy batch exposes no magic; kafka-python's does
            fields: dict[str, Any] = {"crc_valid": crc_valid}
            if hasattr(batch, "magic"):
                fields["magic"] = batch.magic
        else:
            fields = _oracle_v2_fields(batch, crc_valid)
        records = list(batch)
        extra: dict[str, Any] = {}
        if not legacy and batch.is_control_batch:
            extra["control"] = [_oracle_control(lib, r) for r in records]
        rows = [_legacy_row(r) if legacy else _oracle_record(r) for r in records]
        out.append(BatchView(fields, rows, extra, legacy))
    return out


def _legacy_row(r: Any) -> Row:
    # Legacy records: v0 reports timestamp None and timestamp_type None -> -1 / -1 (Kafka's
    # NO_TIMESTAMP / NO_TIMESTAMP_TYPE); legacy messages have no headers.
    ts = -1 if r.timestamp is None else r.timestamp
    tst = -1 if r.timestamp_type is None else int(r.timestamp_type)
    return (
        r.offset,
        ts,
        tst,
        None if r.key is None else bytes(r.key),
        None if r.value is None else bytes(r.value),
        (),
    )


def _oracle_control(lib: str, r: Any) -> tuple[int, int]:
    """(version, type) of a control record as the oracle itself parses it."""
    if lib == "kafka-python":
        from kafka.record.default_records import ControlRecord

        assert isinstance(r, ControlRecord), type(r)
        assert r.commit == (r.type == 1) and r.abort == (r.type == 0)
        return (r.version, r.type)
    from aiokafka.record.control_record import ControlRecord as AioControlRecord

    cr = AioControlRecord.parse(bytes(r.key))
    return (cr.version, cr.type_)


def ours_view(data: bytes) -> list[BatchView]:
    """Every entry of ``data`` as our object API decodes it."""
    out: list[BatchView] = []
    for entry in LogReader(data, verify_crc=False):
        if isinstance(entry, RecordBatch):
            fields = {
                "base_offset": entry.base_offset,
                "last_offset_delta": entry.last_offset_delta,
                "next_offset": entry.next_offset,
                "leader_epoch": entry.partition_leader_epoch,
                "magic": entry.magic,
                "crc": entry.crc,
                "crc_valid": entry.is_valid(),
                "attributes": entry.attributes,
                "compression": entry.compression_id,
                "timestamp_type": int(entry.timestamp_type),
                "is_transactional": entry.is_transactional,
                "is_control": entry.is_control,
                "first_timestamp": entry.base_timestamp,
                "max_timestamp": entry.max_timestamp,
                "producer_id": entry.producer_id,
                "producer_epoch": entry.producer_epoch,
                "base_sequence": entry.base_sequence,
                "last_sequence": entry.last_sequence,
                "records_count": entry.records_count,
            }
        else:
            fields = {"magic": entry.magic, "crc_valid": entry.is_valid()}
        tst = int(entry.timestamp_type)
        recs = entry.records()
        rows = [
            (r.offset, r.timestamp, tst, r.key, r.value, tuple((h.key, h.value) for h in r.headers))
            for r in recs
        ]
        extra: dict[str, Any] = {
            "position": entry.position,
            "sequences": [r.sequence for r in recs],
        }
        if entry.is_control:
            cr = entry.control_record()
            extra["control"] = [(cr.version, cr.type_id)]
            extra["control_record"] = cr
        out.append(BatchView(fields, rows, extra, not isinstance(entry, RecordBatch)))
    return out


def _arrow_rows(
    data: bytes, control_records: str = "include"
) -> tuple[list[Row], list[dict[str, Any]]]:
    """Records and per-record batch metadata as our columnar API decodes ``data``."""
    rb = decode_arrow(
        data, include_headers=True, metadata=list(METADATA_COLUMNS), control_records=control_records
    )
    assert rb.schema.field("timestamp").type == pa.timestamp("ms", tz="UTC")
    # timestamp[ms, UTC] -> its int64 epoch milliseconds (to_pylist would give datetimes)
    ts = rb.column("timestamp").cast(pa.int64()).to_pylist()
    headers = rb.column("headers").to_pylist()
    rows: list[Row] = []
    meta: list[dict[str, Any]] = []
    cols = {name: rb.column(name).to_pylist() for name in rb.schema.names if name != "timestamp"}
    for i in range(rb.num_rows):
        # decode_arrow represents "no headers" as a null list (documented); a present list is
        # never empty. Check that rule, then map null -> () like the other decoders.
        h = headers[i]
        assert h is None or len(h) > 0, f"row {i}: empty non-null header list"
        hdrs = () if h is None else tuple((e["key"], e["value"]) for e in h)
        rows.append(
            (
                cols["offset"][i],
                ts[i],
                cols["timestampType"][i],
                cols["key"][i],
                cols["value"][i],
                hdrs,
            )
        )
        meta.append({name: cols[name][i] for name in METADATA_COLUMNS})
    return rows, meta


# ---------------------------------------------------------------------------------------------
# Comparisons


def assert_oracle_matches_ours(lib: str, theirs: list[BatchView], ours: list[BatchView]) -> None:
    assert len(theirs) == len(ours), f"{lib}: {len(theirs)} batches, ours {len(ours)}"
    for i, (t, o) in enumerate(zip(theirs, ours, strict=True)):
        assert t.legacy == o.legacy, f"{lib} batch {i}: legacy/v2 mismatch"
        if not t.legacy:
            missing = CORE_FIELDS - t.fields.keys()
            assert not missing, f"{lib} view lacks {missing}"
        for name, value in t.fields.items():
            assert o.fields[name] == value, (
                f"{lib} batch {i}: {name} theirs {value!r} ours {o.fields[name]!r}"
            )
        assert t.records == o.records, f"{lib} batch {i}: records differ"
        if "control" in t.extra or "control" in o.extra:
            assert t.extra.get("control") == o.extra.get("control"), f"{lib} batch {i}: control"


def assert_columnar_matches_object(data: bytes, ours: list[BatchView]) -> None:
    """decode_arrow (control records included) == the object API, record for record, with the
    metadata columns equal to the owning batch's header fields."""
    rows, meta = _arrow_rows(data, "include")
    expected_rows: list[Row] = []
    expected_meta: list[dict[str, Any]] = []
    for b in ours:
        for row in b.records:
            expected_rows.append(row)
            v2 = not b.legacy
            expected_meta.append(
                {
                    "producerId": b.fields["producer_id"] if v2 else -1,
                    "producerEpoch": b.fields["producer_epoch"] if v2 else -1,
                    "leaderEpoch": b.fields["leader_epoch"] if v2 else -1,
                    "isControl": b.fields["is_control"] if v2 else False,
                    "isTransactional": b.fields["is_transactional"] if v2 else False,
                    "batchPosition": b.extra["position"],
                }
            )
    assert rows == expected_rows
    assert meta == expected_meta
    # without headers the kernel skips over them instead of copying: same records otherwise
    plain = decode_arrow(data, control_records="include")
    assert "headers" not in plain.schema.names
    assert [
        (o, t, tt, k, v)
        for o, t, tt, k, v in zip(
            plain.column("offset").to_pylist(),
            plain.column("timestamp").cast(pa.int64()).to_pylist(),
            plain.column("timestampType").to_pylist(),
            plain.column("key").to_pylist(),
            plain.column("value").to_pylist(),
            strict=True,
        )
    ] == [r[:5] for r in rows]
    # with control_records="skip", exactly the control batches' records disappear
    skipped, _ = _arrow_rows(data, "skip")
    assert skipped == [r for b in ours if not b.fields.get("is_control") for r in b.records]


def check_everywhere(data: bytes) -> list[BatchView]:
    """Decode ``data`` with both oracles, our object API and our columnar API; all must agree
    and every CRC must be valid. Returns our object view for further checks."""
    ours = ours_view(data)
    assert all(b.fields["crc_valid"] for b in ours)
    for lib in LIBS:
        theirs = oracle_view(lib, data)
        assert all(b.fields["crc_valid"] for b in theirs), f"{lib}: CRC invalid"
        assert_oracle_matches_ours(lib, theirs, ours)
    assert_columnar_matches_object(data, ours)
    return ours


# ---------------------------------------------------------------------------------------------
# Generated inputs

_header_key = st.text(max_size=8)
_header_value = st.one_of(st.none(), st.just(b""), st.binary(max_size=16))
_headers = st.lists(st.tuples(_header_key, _header_value), max_size=3)
_bytes = st.one_of(
    st.none(),
    st.just(b""),
    st.binary(min_size=1, max_size=48),
    st.binary(min_size=49, max_size=2048),
)
_timestamp = st.one_of(
    st.just(-1),
    st.integers(0, 2**41),
    st.integers(T0 - 10**6, T0 + 10**6),
    st.integers(2**41, 2**62),  # deltas needing 9-10 byte varlongs, both signs
)


@dataclass(frozen=True)
class Spec:
    """One record to write: offset delta within its batch, then the record fields."""

    delta: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


@st.composite
def record_specs(draw: Any, min_size: int = 1, max_size: int = 12, gaps: bool = True) -> list[Spec]:
    n = draw(st.integers(min_size, max_size))
    step = (
        st.one_of(st.integers(1, 3), st.integers(4, 2**20))
        if gaps and draw(st.booleans())
        else st.just(1)
    )
    delta = 0
    out = []
    for i in range(n):
        if i:
            delta += draw(step)
        out.append(Spec(delta, draw(_timestamp), draw(_bytes), draw(_bytes), tuple(draw(_headers))))
    return out


@st.composite
def producer_state(draw: Any) -> dict[str, Any]:
    if draw(st.booleans()):
        return {
            "producer_id": -1,
            "producer_epoch": -1,
            "base_sequence": -1,
            "is_transactional": False,
        }
    return {
        "producer_id": draw(st.integers(0, 2**48)),
        "producer_epoch": draw(st.integers(0, 32767)),
        "base_sequence": draw(
            st.one_of(st.integers(0, 1000), st.integers(INT32_MAX - 20, INT32_MAX))
        ),
        "is_transactional": draw(st.booleans()),
    }


def expected_rows(
    specs: Sequence[Spec], base_offset: int, log_append_time: int | None
) -> list[Row]:
    return [
        (
            base_offset + s.delta,
            s.timestamp if log_append_time is None else log_append_time,
            0 if log_append_time is None else 1,
            s.key,
            s.value,
            s.headers,
        )
        for s in specs
    ]


# ---------------------------------------------------------------------------------------------
# 1. ours -> theirs: encode_batch


FIXED_SPECS = [
    Spec(0, T0, b"key1", b"value1" * 50, (("h1", b"v1"), ("h2", None))),
    Spec(1, T0 + 123, None, b"no key" * 40, ()),
    Spec(2, T0 - 1000, b"null value", None, (("", b""),)),
    Spec(3, -1, b"", b"", (("\u00e9\u4e2d", b"\x00\xff"), ("dup", b"a"), ("dup", None))),
    Spec(4, T0 + 7, None, None, ()),
    Spec(5, T0 + 2**33, b"big", bytes(range(256)) * 40, (("z", b"z" * 300),)),
]


def _records(specs: Sequence[Spec], base_offset: int, explicit_offsets: bool) -> list[Record]:
    return [
        Record(
            base_offset + s.delta if explicit_offsets else -1,
            s.timestamp,
            s.key,
            s.value,
            tuple(Header(k, v) for k, v in s.headers),
        )
        for s in specs
    ]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("log_append", [False, True])
def test_encode_batch_decodes_identically(codec: str, log_append: bool) -> None:
    lat = T0 + 99_999 if log_append else None
    data = encode_batch(
        _records(FIXED_SPECS, 1000, explicit_offsets=False),
        base_offset=1000,
        compression=codec,
        timestamp_type=TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME,
        log_append_time=lat,
        partition_leader_epoch=17,
        producer_id=4242,
        producer_epoch=3,
        base_sequence=INT32_MAX - 2,  # wraps inside the batch
        is_transactional=True,
    )
    (ours,) = check_everywhere(data)
    assert ours.records == expected_rows(FIXED_SPECS, 1000, lat)
    assert ours.fields | {"crc": None} == {
        "base_offset": 1000,
        "last_offset_delta": 5,
        "next_offset": 1006,
        "leader_epoch": 17,
        "magic": 2,
        "crc": None,
        "crc_valid": True,
        "attributes": CODEC_IDS[codec] | 0x10 | (0x08 if log_append else 0),
        "compression": CODEC_IDS[codec],
        "timestamp_type": int(log_append),
        "is_transactional": True,
        "is_control": False,
        "first_timestamp": T0,
        "max_timestamp": lat if log_append else T0 + 2**33,
        "producer_id": 4242,
        "producer_epoch": 3,
        "base_sequence": INT32_MAX - 2,
        "last_sequence": 2,
        "records_count": 6,
    }
    assert ours.extra["sequences"] == [INT32_MAX - 2, INT32_MAX - 1, INT32_MAX, 0, 1, 2]


@HYPOTHESIS
@given(
    specs=record_specs(),
    codec=st.sampled_from(CODECS),
    base_offset=st.integers(0, 2**40),
    explicit=st.booleans(),
    lat=st.one_of(st.none(), st.integers(0, 2**41)),
    epoch=st.integers(-1, INT32_MAX),
    producer=producer_state(),
)
def test_encode_batch_decodes_identically_generated(
    specs: list[Spec],
    codec: str,
    base_offset: int,
    explicit: bool,
    lat: int | None,
    epoch: int,
    producer: dict[str, Any],
) -> None:
    if not explicit:  # offset -1 means "next offset": deltas are then 0, 1, 2, ...
        specs = [Spec(i, s.timestamp, s.key, s.value, s.headers) for i, s in enumerate(specs)]
    data = encode_batch(
        _records(specs, base_offset, explicit),
        base_offset=base_offset,
        compression=codec,
        timestamp_type=TimestampType.CREATE_TIME if lat is None else TimestampType.LOG_APPEND_TIME,
        log_append_time=lat,
        partition_leader_epoch=epoch,
        **producer,
    )
    (ours,) = check_everywhere(data)
    assert ours.records == expected_rows(specs, base_offset, lat)
    f = ours.fields
    assert f["compression"] == CODEC_IDS[codec]
    assert f["first_timestamp"] == specs[0].timestamp
    assert f["max_timestamp"] == (max(s.timestamp for s in specs) if lat is None else lat)
    assert f["last_offset_delta"] == specs[-1].delta
    assert (f["producer_id"], f["producer_epoch"], f["base_sequence"], f["is_transactional"]) == (
        producer["producer_id"],
        producer["producer_epoch"],
        producer["base_sequence"],
        producer["is_transactional"],
    )
    assert f["leader_epoch"] == epoch
    assert ours.extra["sequences"] == [
        increment_sequence(producer["base_sequence"], s.delta) for s in specs
    ]


@pytest.mark.parametrize("codec", CODECS)
def test_encode_batch_delete_horizon_keeps_record_timestamps(codec: str) -> None:
    """A batch with the delete-horizon bit stores the horizon as baseTimestamp, and Kafka's
    ``MemoryRecordsBuilder`` then writes every record's timestamp delta relative to *that* base
    (``if (hasDeleteHorizonMs()) this.baseTimestamp = deleteHorizonMs`` and
    ``timestampDelta = timestamp - baseTimestamp``), so readers -- the oracles, Java, and ours --
    still get the records' own timestamps back."""
    horizon = T0 + 86_400_000
    specs = FIXED_SPECS[:3]
    data = encode_batch(
        _records(specs, 0, explicit_offsets=False), compression=codec, delete_horizon_ms=horizon
    )
    (ours,) = check_everywhere(data)
    assert ours.fields["attributes"] & 0x40
    assert ours.fields["first_timestamp"] == horizon
    for lib in LIBS:
        (theirs,) = oracle_view(lib, data)
        assert [r[1] for r in theirs.records] == [s.timestamp for s in specs], lib
    assert ours.records == expected_rows(specs, 0, None)


# ---------------------------------------------------------------------------------------------
# 1b. ours -> theirs: encode_arrow (several batches)


def _arrow_table(specs: Sequence[Spec], ts_type: pa.DataType = INT64) -> pa.Table:
    return pa.table(
        {
            "key": pa.array([s.key for s in specs], pa.binary()),
            "value": pa.array([s.value for s in specs], pa.binary()),
            "timestamp": pa.array([s.timestamp for s in specs], pa.int64()).cast(ts_type),
            # no headers -> alternately a null list and an empty list (both mean 0 headers)
            "headers": pa.array(
                [
                    [{"key": k, "value": v} for k, v in s.headers] if s.headers or i % 2 else None
                    for i, s in enumerate(specs)
                ],
                HEADERS_TYPE,
            ),
        }
    )


def _check_encode_arrow(
    specs: list[Spec],
    codec: str,
    per_batch: int,
    base_offset: int,
    lat: int | None,
    epoch: int,
    producer: dict[str, Any],
    ts_type: pa.DataType = INT64,
    max_batch_bytes: int | None = None,
) -> None:
    ts_kind = TimestampType.CREATE_TIME if lat is None else TimestampType.LOG_APPEND_TIME
    enc = encode_arrow(
        _arrow_table(specs, ts_type),
        base_offset=base_offset,
        compression=codec,
        max_records_per_batch=per_batch,
        **({} if max_batch_bytes is None else {"max_batch_bytes": max_batch_bytes}),
        timestamp_type=ts_kind,
        log_append_time=lat,
        partition_leader_epoch=epoch,
        **producer,
    )
    data = enc.data
    ours = check_everywhere(data)
    if max_batch_bytes is None:
        chunks = [specs[i : i + per_batch] for i in range(0, len(specs), per_batch)]
    else:  # cut by size too: take the cuts from the batches, check them below
        counts = [b.fields["records_count"] for b in ours]
        assert all(1 <= c <= per_batch for c in counts)
        starts = [sum(counts[:k]) for k in range(len(counts))]
        chunks = [specs[s0 : s0 + c] for s0, c in zip(starts, counts, strict=True)]
    assert len(ours) == len(chunks) == enc.batch_count
    assert [int(c) for c in enc.record_counts] == [len(c) for c in chunks]
    assert [b.extra["position"] for b in ours] == [int(p) for p in enc.positions]
    assert ours_rows(ours) == expected_rows(specs, base_offset, lat)
    first = 0
    for b, chunk in zip(ours, chunks, strict=True):
        f = b.fields
        assert f["base_offset"] == base_offset + first
        assert f["last_offset_delta"] == len(chunk) - 1
        assert f["compression"] == CODEC_IDS[codec]
        assert f["first_timestamp"] == chunk[0].timestamp
        assert f["max_timestamp"] == (max(s.timestamp for s in chunk) if lat is None else lat)
        assert f["leader_epoch"] == epoch
        assert (f["producer_id"], f["producer_epoch"], f["is_transactional"]) == (
            producer["producer_id"],
            producer["producer_epoch"],
            producer["is_transactional"],
        )
        assert f["base_sequence"] == increment_sequence(producer["base_sequence"], first)
        # 4. object API and columnar API agree on the bytes: the same chunk written by
        # encode_batch is byte-identical (compression included: same codec, same level)
        same = encode_batch(
            _records(chunk, base_offset + first, explicit_offsets=False),
            base_offset=base_offset + first,
            compression=codec,
            timestamp_type=ts_kind,
            log_append_time=lat,
            partition_leader_epoch=epoch,
            producer_id=producer["producer_id"],
            producer_epoch=producer["producer_epoch"],
            base_sequence=f["base_sequence"],
            is_transactional=producer["is_transactional"],
        )
        start = b.extra["position"]
        assert data[start : start + len(same)] == same
        if max_batch_bytes is not None and len(chunk) > 1:
            # uncompressed size (what the limit is about) within the limit, unless one record
            uncompressed = encode_batch(
                _records(chunk, 0, explicit_offsets=False),
                timestamp_type=ts_kind,
                log_append_time=lat,
            )
            assert len(uncompressed) <= max_batch_bytes
        first += len(chunk)
    assert first == len(specs)


def ours_rows(views: list[BatchView]) -> list[Row]:
    return [r for b in views for r in b.records]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("log_append", [False, True])
def test_encode_arrow_decodes_identically(codec: str, log_append: bool) -> None:
    specs = [Spec(i, s.timestamp, s.key, s.value, s.headers) for i, s in enumerate(FIXED_SPECS * 2)]
    _check_encode_arrow(
        specs,
        codec,
        per_batch=5,
        base_offset=77,
        lat=T0 + 5 if log_append else None,
        epoch=3,
        producer={
            "producer_id": 9,
            "producer_epoch": 1,
            "base_sequence": INT32_MAX - 6,
            "is_transactional": True,
        },
        ts_type=pa.timestamp("ms", tz="UTC"),
    )


@HYPOTHESIS
@given(
    specs=record_specs(max_size=30, gaps=False),
    codec=st.sampled_from(CODECS),
    per_batch=st.integers(1, 12),
    base_offset=st.integers(0, 2**40),
    lat=st.one_of(st.none(), st.integers(0, 2**41)),
    epoch=st.integers(-1, INT32_MAX),
    producer=producer_state(),
    max_batch_bytes=st.one_of(st.none(), st.integers(100, 6000)),
)
def test_encode_arrow_decodes_identically_generated(
    specs: list[Spec],
    codec: str,
    per_batch: int,
    base_offset: int,
    lat: int | None,
    epoch: int,
    producer: dict[str, Any],
    max_batch_bytes: int | None,
) -> None:
    _check_encode_arrow(
        specs,
        codec,
        per_batch,
        base_offset,
        lat,
        epoch,
        producer,
        max_batch_bytes=max_batch_bytes,
    )


# ---------------------------------------------------------------------------------------------
# 2. theirs -> ours


def oracle_build(lib: str, codec: str, specs: Sequence[Spec], producer: dict[str, Any]) -> bytes:
    if lib == "kafka-python":
        from kafka.record.default_records import DefaultRecordBatchBuilder
    else:
        from aiokafka.record.default_records import DefaultRecordBatchBuilder
    builder = DefaultRecordBatchBuilder(
        2,
        CODEC_IDS[codec],
        producer["is_transactional"],
        producer["producer_id"],
        producer["producer_epoch"],
        producer["base_sequence"],
        64 * 1024 * 1024,
    )
    for s in specs:
        meta = builder.append(s.delta, s.timestamp, s.key, s.value, list(s.headers))
        assert meta is not None
    return bytes(builder.build())


NO_PRODUCER = {
    "producer_id": -1,
    "producer_epoch": -1,
    "base_sequence": -1,
    "is_transactional": False,
}


def _check_theirs(lib: str, codec: str, specs: list[Spec], producer: dict[str, Any]) -> BatchView:
    data = oracle_build(lib, codec, specs, producer)
    (ours,) = check_everywhere(data)
    assert ours.records == expected_rows(specs, 0, None)
    f = ours.fields
    assert (f["base_offset"], f["last_offset_delta"], f["records_count"]) == (
        0,
        specs[-1].delta,
        len(specs),
    )
    assert f["first_timestamp"] == specs[0].timestamp
    assert f["max_timestamp"] == max(s.timestamp for s in specs)
    assert (f["producer_id"], f["producer_epoch"], f["base_sequence"], f["is_transactional"]) == (
        producer["producer_id"],
        producer["producer_epoch"],
        producer["base_sequence"],
        producer["is_transactional"],
    )
    assert ours.extra["sequences"] == [
        increment_sequence(producer["base_sequence"], s.delta) for s in specs
    ]
    # Same records through our encoder, with the header fields the oracle chose (its leader
    # epoch: 0 for kafka-python, -1 for aiokafka; its codec: both builders fall back to
    # "none" when compression does not shrink the records). Uncompressed, the bytes must be
    # identical; compressed, everything but length, CRC and the compressed payload.
    mine = encode_batch(
        _records(specs, 0, explicit_offsets=True),
        compression=f["compression"],
        partition_leader_epoch=f["leader_epoch"],
        producer_id=producer["producer_id"],
        producer_epoch=producer["producer_epoch"],
        base_sequence=producer["base_sequence"],
        is_transactional=producer["is_transactional"],
    )
    if f["compression"] == 0:
        assert mine == data
    else:
        (again,) = ours_view(mine)
        skip = {"crc", "crc_valid"}
        assert {k: v for k, v in again.fields.items() if k not in skip} == {
            k: v for k, v in f.items() if k not in skip
        }
        theirs_batch = next(iter(LogReader(data)))
        mine_batch = next(iter(LogReader(mine)))
        assert bytes(mine_batch.records_area()) == bytes(theirs_batch.records_area())
    return ours


# compressible enough that both builders keep the codec (they drop it when it does not help)
COMPRESSIBLE_SPECS = [
    Spec(0, T0, b"key1", b"value1" * 50, (("h1", b"v1"), ("h2", None))),
    Spec(1, T0 + 123, None, b"no key" * 40, ()),
    Spec(3, T0 - 1000, b"null value", None, (("", b""),)),  # offset gap, negative ts delta
    Spec(4, -1, b"", b"", (("\u00e9\u4e2d", b"\x00\xff"), ("dup", b"a"), ("dup", None))),
    Spec(7, T0 + 7, None, None, ()),
    Spec(8, T0 + 2**33, b"big", bytes(range(256)) * 40, (("z", b"z" * 300),)),
]


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("codec", CODECS)
def test_oracle_built_batch_decodes_identically(lib: str, codec: str) -> None:
    producer = {
        "producer_id": 4242,
        "producer_epoch": 3,
        "base_sequence": INT32_MAX - 3,
        "is_transactional": True,
    }
    ours = _check_theirs(lib, codec, COMPRESSIBLE_SPECS, producer)
    assert ours.fields["compression"] == CODEC_IDS[codec]
    assert ours.fields["leader_epoch"] == (0 if lib == "kafka-python" else -1)


@HYPOTHESIS
@given(
    lib=st.sampled_from(LIBS),
    codec=st.sampled_from(CODECS),
    specs=record_specs(),
    producer=producer_state(),
)
def test_oracle_built_batch_decodes_identically_generated(
    lib: str, codec: str, specs: list[Spec], producer: dict[str, Any]
) -> None:
    # aiokafka's C builder (the default import) takes a first timestamp of -1 for "not set yet":
    # it then writes the *second* record's timestamp as firstTimestamp and delta 0 for both,
    # so record 0 reads back with record 1's timestamp in every decoder (its pure-Python
    # builder and kafka-python's write -1 correctly). An oracle bug, not ours: skip that input.
    assume(not (lib == "aiokafka" and specs[0].timestamp == -1))
    _check_theirs(lib, codec, specs, producer)


@pytest.mark.parametrize("codec", CODECS)
def test_oracle_built_batches_concatenated(codec: str) -> None:
    """Several oracle-built batches back to back (base offsets rewritten as a broker does: the
    base offset lies outside the CRC), from both libraries, decoded in one pass."""
    parts = []
    next_offset = 0
    expected: list[Row] = []
    for i, lib in enumerate(LIBS * 2):
        specs = COMPRESSIBLE_SPECS[: len(COMPRESSIBLE_SPECS) - i]
        raw = bytearray(oracle_build(lib, codec, specs, NO_PRODUCER))
        struct.pack_into(">q", raw, 0, next_offset)
        parts.append(bytes(raw))
        expected += expected_rows(specs, next_offset, None)
        next_offset += specs[-1].delta + 1
    ours = check_everywhere(b"".join(parts))
    assert ours_rows(ours) == expected


def test_spec_vector_v2_none_decodes_identically() -> None:
    """The §12 batch written by Kafka's own builder: both oracles and both our APIs agree."""
    (ours,) = check_everywhere(V2_NONE)
    assert ours.records == [
        (100, T0, 0, b"key1", b"value1", ()),
        (101, T0 + 123, 0, None, b"v2", (("h1", b"v1"), ("h2", None))),
        (102, T0 - 1000, 0, b"k3", None, ()),
    ]
    assert ours.fields["leader_epoch"] == 7


@pytest.mark.parametrize("codec", CODECS)
def test_empty_batch_decodes_identically(codec: str) -> None:
    """A batch with no records (what compaction can leave): header fields agree everywhere."""
    data = encode_batch(
        [], base_offset=5, compression=codec, producer_id=8, producer_epoch=1, base_sequence=4
    )
    if codec == "snappy":
        # An empty xerial stream is just the 16-byte header (Java writes it so, and so do the
        # oracles' own snappy_encode(b"")), but both oracles' snappy_decode only recognise the
        # xerial framing when the payload is *longer* than 16 bytes and then fail on it as a raw
        # block. So: same bytes as the oracles would write, decoded by our two APIs only.
        import aiokafka.codec
        import kafka.codec

        assert data[61:] == kafka.codec.snappy_encode(b"") == aiokafka.codec.snappy_encode(b"")
        (ours,) = ours_view(data)
        assert ours.fields["crc_valid"]
        assert_columnar_matches_object(data, [ours])
    else:
        (ours,) = check_everywhere(data)
    assert ours.records == []
    f = ours.fields
    assert (f["records_count"], f["first_timestamp"], f["max_timestamp"]) == (0, -1, -1)
    assert (f["producer_id"], f["producer_epoch"], f["base_sequence"]) == (8, 1, 4)


# ---------------------------------------------------------------------------------------------
# 3. control batches


def test_control_batch_matches_spec_vector() -> None:
    data = encode_control_batch(
        ControlType.COMMIT,
        offset=90,
        timestamp=1712000000000,
        producer_id=4242,
        producer_epoch=3,
        coordinator_epoch=9,
        partition_leader_epoch=4,
    )
    assert data.hex() == CTL_COMMIT.hex()


@pytest.mark.parametrize("ctype", [ControlType.COMMIT, ControlType.ABORT])
def test_control_batch_decodes_as_marker(ctype: ControlType) -> None:
    ts = 1712000000000
    data = encode_control_batch(
        ctype,
        offset=90,
        timestamp=ts,
        producer_id=4242,
        producer_epoch=3,
        coordinator_epoch=9,
        partition_leader_epoch=4,
    )
    (ours,) = check_everywhere(data)
    marker_value = struct.pack(">hi", 0, 9)
    assert ours.records == [(90, ts, 0, struct.pack(">hh", 0, int(ctype)), marker_value, ())]
    assert ours.extra["control"] == [(0, int(ctype))]
    cr = ours.extra["control_record"]
    assert (cr.type, cr.coordinator_epoch, cr.marker_version) == (ctype, 9, 0)
    for lib in LIBS:
        (theirs,) = oracle_view(lib, data)
        f = theirs.fields
        assert f["is_control"] and f["is_transactional"] and f["crc_valid"]
        assert (f["attributes"], f["producer_id"], f["producer_epoch"], f["base_sequence"]) == (
            0x30,
            4242,
            3,
            -1,
        )
        assert theirs.extra["control"] == [(0, int(ctype))]
        # neither oracle parses the marker value; its raw bytes carry the coordinator epoch
        assert parse_control_record(theirs.records[0][3], theirs.records[0][4]) == cr
    # aiokafka's own abort test (Fetcher._is_aborted compares with ABORT_MARKER)
    from aiokafka.record.control_record import ABORT_MARKER, COMMIT_MARKER, ControlRecord

    (aio,) = oracle_view("aiokafka", data)
    parsed = ControlRecord.parse(aio.records[0][3])
    assert parsed == (COMMIT_MARKER if ctype is ControlType.COMMIT else ABORT_MARKER)


@pytest.mark.parametrize("codec", CODECS)
def test_transaction_then_marker(codec: str) -> None:
    """A transactional data batch followed by its COMMIT marker, then an ABORTed one: the
    oracles see the control bits; decode_arrow skips exactly the markers by default."""
    producer = {
        "producer_id": 77,
        "producer_epoch": 2,
        "base_sequence": 0,
        "is_transactional": True,
    }
    data1 = encode_batch(
        _records(FIXED_SPECS, 0, False), base_offset=0, compression=codec, **producer
    )
    commit = encode_control_batch(
        ControlType.COMMIT, offset=6, timestamp=T0, producer_id=77, producer_epoch=2
    )
    data2 = encode_batch(
        _records(FIXED_SPECS[:2], 7, False),
        base_offset=7,
        compression=codec,
        **(producer | {"base_sequence": 6}),
    )
    abort = encode_control_batch(
        ControlType.ABORT,
        offset=9,
        timestamp=T0 + 1,
        producer_id=77,
        producer_epoch=2,
        coordinator_epoch=5,
    )
    ours = check_everywhere(data1 + commit + data2 + abort)
    assert [b.fields["is_control"] for b in ours] == [False, True, False, True]
    assert [b.fields["is_transactional"] for b in ours] == [True] * 4
    assert [b.extra.get("control") for b in ours] == [None, [(0, 1)], None, [(0, 0)]]
    assert [r[0] for r in ours_rows(ours)] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]


# ---------------------------------------------------------------------------------------------
# Legacy, lightly: one buffer mixing v0, v1 and v2 entries


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
def test_mixed_legacy_and_v2_buffer(codec: str) -> None:
    recs = [
        Record.of(b"v0", key=b"k0", timestamp=T0),
        Record.of(None, timestamp=T0 + 5),
        Record.of(b"v2" * 100, key=b"", timestamp=T0 - 3),
    ]
    v0 = encode_message_set(recs, magic=0, base_offset=0, compression=codec)
    v1 = encode_message_set(recs, magic=1, base_offset=3, compression=codec)
    v2 = encode_batch(recs, base_offset=6, compression=codec)
    data = v0 + v1 + v2
    ours = ours_view(data)
    assert all(b.fields["crc_valid"] for b in ours)
    theirs = oracle_view("kafka-python", data)
    assert all(b.fields["crc_valid"] for b in theirs)
    assert_oracle_matches_ours("kafka-python", theirs, ours)
    # aiokafka's C MemoryRecords cannot walk a buffer whose entries change magic (v1 then v2
    # raises SystemError "Negative size passed to PyBytes_FromStringAndSize", v2 then v1
    # CorruptRecordException "-23 unconsumed bytes"; its pure-Python _MemoryRecordsPy copes),
    # and it refuses LZ4 in magic 0 by design ("LZ4 is not supported for broker version
    # 0.8/0.9"). So it gets each magic as its own buffer, and no magic-0 LZ4.
    for part in ([v0] if codec != "lz4" else []) + [v1, v2]:
        aio = oracle_view("aiokafka", part)
        assert all(b.fields["crc_valid"] for b in aio)
        assert_oracle_matches_ours("aiokafka", aio, ours_view(part))
    assert_columnar_matches_object(data, ours)
    assert ours_rows(ours) == [
        (0, -1, -1, b"k0", b"v0", ()),
        (1, -1, -1, None, None, ()),
        (2, -1, -1, b"", b"v2" * 100, ()),
        (3, T0, 0, b"k0", b"v0", ()),
        (4, T0 + 5, 0, None, None, ()),
        (5, T0 - 3, 0, b"", b"v2" * 100, ()),
        (6, T0, 0, b"k0", b"v0", ()),
        (7, T0 + 5, 0, None, None, ()),
        (8, T0 - 3, 0, b"", b"v2" * 100, ()),
    ]
