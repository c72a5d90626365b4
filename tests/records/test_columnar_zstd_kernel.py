"""zstd payloads inflated inside the decode kernel must be indistinguishable from the per-batch
path (``compression.decompress_buffer`` per payload, then the kernel).

The kernel takes only the common shape (one frame, output bounded within the limit by its own
headers) and, on any failure, the range is decoded again the per-batch way; so every case here
is decoded both ways (the kernel path switched off by clearing ``ZSTD_IN_KERNEL``) and the
Arrow output, or the error (class, text, position), must be the same.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator

import cramjam
import numpy as np
import pyarrow as pa
import pytest
import zstandard

from kafkalog.errors import KafkalogError
from kafkalog.records import (
    METADATA_COLUMNS,
    Compression,
    ControlType,
    Header,
    Limits,
    Record,
    columnar,
    compression,
    decode_range,
    encode_arrow,
    encode_batch,
    encode_control_batch,
)
from kafkalog.records import _kernels as K
from kafkalog.records.batch import assemble_batch, encode_record


def test_the_kernel_reaches_libzstd() -> None:
    """cffi is a declared dependency, so python-zstandard's cffi module is always there: a
    silent fall back to the slower per-batch path would be a packaging defect."""
    assert K.ZSTD_IN_KERNEL


ZSTD = int(Compression.ZSTD)
SKIPPABLE = struct.pack("<II", 0x184D2A50, 4) + b"skip"
Outcome = tuple[str, pa.RecordBatch | None, int | None, str | None]


def _records(n: int, *, value_size: int = 100, headers: int = 0, seed: int = 0) -> list[Record]:
    out = []
    for i in range(n):
        key = None if (i + seed) % 7 == 3 else b"key-%06d" % i
        value = (
            None if (i + seed) % 11 == 5 else bytes((i * 31 + t) % 251 for t in range(value_size))
        )
        hdrs = tuple(Header(f"header-key-{j}-" + "x" * (i % 9), b"v" * j) for j in range(headers))
        out.append(Record(-1, 1_700_000_000_000 + i, key, value, hdrs))
    return out


def _area(records: list[Record]) -> bytes:
    area = bytearray()
    base_ts = records[0].timestamp if records else 0
    for i, rec in enumerate(records):
        encode_record(area, rec, i, base_ts)
    return bytes(area)


def _batch(
    records: list[Record],
    payload: Callable[[bytes], bytes],
    *,
    codec: int = ZSTD,
    base_offset: int = 0,
    count: int | None = None,
) -> bytes:
    """A v2 batch whose records area is ``payload(records area)``, with a correct CRC."""
    stamps = [r.timestamp for r in records] or [0]
    return assemble_batch(
        payload(_area(records)),
        base_offset=base_offset,
        last_offset_delta=max(len(records) - 1, 0),
        records_count=len(records) if count is None else count,
        base_timestamp=stamps[0],
        max_timestamp=max(stamps),
        attributes=codec,
    )


def _kafka_zstd(area: bytes) -> bytes:
    """Kafka's (zstd-jni streaming) framing: no content size, an empty last block."""
    return compression.compress(Compression.ZSTD, area)


def _one_shot(area: bytes) -> bytes:
    """One-shot framing: the content size is declared, with a content checksum."""
    return zstandard.ZstdCompressor(write_checksum=True).compress(area)


def _decode(
    data: bytes, *, in_kernel: bool, monkeypatch: pytest.MonkeyPatch, **options: object
) -> Outcome:
    with monkeypatch.context() as m:
        if not in_kernel:
            m.setattr(K, "ZSTD_IN_KERNEL", False)
        try:
            res = decode_range(data, path="seg.log", **options)  # type: ignore[arg-type]
        except KafkalogError as exc:
            return type(exc).__name__, None, exc.position, str(exc)
        return "ok", res.batch, res.next_position, None


def assert_same(data: bytes, monkeypatch: pytest.MonkeyPatch, **options: object) -> Outcome:
    """Both ways give the same outcome; returns it."""
    options = {
        "include_headers": True,
        "control_records": "include",
        "metadata": tuple(METADATA_COLUMNS),
        **options,
    }
    fast = _decode(data, in_kernel=True, monkeypatch=monkeypatch, **options)
    slow = _decode(data, in_kernel=False, monkeypatch=monkeypatch, **options)
    assert fast[0] == slow[0] and fast[2:] == slow[2:], (fast, slow)
    if fast[1] is not None:
        assert slow[1] is not None
        assert fast[1].equals(slow[1]), (fast[1].to_pydict(), slow[1].to_pydict())
    return fast


@pytest.fixture
def no_python_inflate(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Counts per-batch (Python) inflations, so a test can show the kernel did the work."""
    calls: list[int] = []
    real = compression.decompress_buffer

    def spy(codec: Compression | int, *args: object, **kwargs: object) -> object:
        calls.append(int(codec))
        return real(codec, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(compression, "decompress_buffer", spy)
    yield calls


SHAPES: dict[str, list[Record]] = {
    "one record": _records(1),
    "1000 records": _records(1000),
    "headers (their buffers grow)": _records(300, headers=3),
    "empty and null values": _records(50, value_size=0),
    "values over one zstd block": _records(3, value_size=300_000),
}
FRAMINGS: dict[str, Callable[[bytes], bytes]] = {
    "kafka": _kafka_zstd,
    "one-shot": _one_shot,
    "skippable first": lambda area: SKIPPABLE + _kafka_zstd(area),
    "two frames": lambda area: (
        _kafka_zstd(area[: len(area) // 2]) + _one_shot(area[len(area) // 2 :])
    ),
}


@pytest.mark.parametrize("framing", sorted(FRAMINGS))
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_shape_and_framing_decodes_the_same(
    shape: str, framing: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = SHAPES[shape]
    data = _batch(records, FRAMINGS[framing], base_offset=5) + _batch(
        _records(20, seed=3), _kafka_zstd, base_offset=5 + len(records)
    )
    outcome = assert_same(data, monkeypatch)
    assert outcome[0] == "ok"
    assert outcome[1] is not None and outcome[1].num_rows == len(records) + 20


def test_the_kernel_inflates_kafka_framed_batches(
    no_python_inflate: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    table = pa.table({"value": pa.array([b"v%d" % i for i in range(5000)], pa.binary())})
    data = bytes(encode_arrow(table, compression="zstd", max_records_per_batch=1000).data)
    outcome = _decode(data, in_kernel=True, monkeypatch=monkeypatch)
    assert outcome[0] == "ok" and outcome[1] is not None and outcome[1].num_rows == 5000
    assert no_python_inflate == []
    # and skippable/multi-frame payloads are still left to the per-batch path
    odd = _batch(_records(4), FRAMINGS["two frames"])
    assert _decode(odd, in_kernel=True, monkeypatch=monkeypatch)[0] == "ok"
    assert no_python_inflate == [ZSTD]


def test_mixed_codecs_control_batches_and_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    parts = []
    offset = 0
    for i, codec in enumerate(["zstd", "none", "gzip", "zstd", "snappy", "lz4", "zstd"]):
        records = _records(40 + i, headers=i % 2, seed=i)
        parts.append(encode_batch(records, base_offset=offset, compression=codec))
        offset += len(records)
        if i == 3:
            parts.append(
                encode_control_batch(
                    ControlType.COMMIT, offset=offset, timestamp=1, producer_id=7, producer_epoch=0
                )
            )
            offset += 1
    data = b"".join(parts)
    for threads in (1, 2):
        for control in ("include", "skip"):
            outcome = assert_same(
                data, monkeypatch, decompress_threads=threads, control_records=control
            )
            assert outcome[0] == "ok"


def test_a_cut_off_tail_is_reported_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _batch(_records(100), _kafka_zstd) + _batch(_records(100), _kafka_zstd, base_offset=100)
    for cut in (len(data) - 1, len(data) - 200, len(data) // 2 + 10):
        outcome = assert_same(data[:cut], monkeypatch)
        assert outcome[0] == "ok" and outcome[1] is not None and outcome[1].num_rows == 100


# ---------------------------------------------------------------------------------------------
# bounds and errors: the per-batch path's error, exactly


def _small_limits() -> Limits:
    return Limits(max_decompression_ratio=2, min_decompressed_allowance=1000)


def test_output_beyond_the_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    records = _records(200)  # ~25 KB of records, compressing far beyond ratio 2
    for framing in (_kafka_zstd, _one_shot):
        data = _batch(_records(3), _kafka_zstd) + _batch(records, framing, base_offset=3)
        outcome = assert_same(data, monkeypatch, limits=_small_limits())
        assert outcome[0] == "CompressionError" and "limit" in str(outcome[3])


def test_a_bomb_stops_at_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """A frame declaring a small content size but inflating further (libzstd stops at the
    capacity it is given: the declared size)."""
    area = _area(_records(100))
    frame = bytearray(_one_shot(area))
    fhd = frame[4]
    assert fhd >> 6 == 1 and fhd & 0x20  # 2-byte content size field right after the descriptor
    struct.pack_into("<H", frame, 5, len(area) - 256 - 10)
    data = _batch(_records(100), lambda _: bytes(frame))
    outcome = assert_same(data, monkeypatch)
    assert outcome[0] == "CompressionError"


@pytest.mark.parametrize(
    "damage",
    ["flip a byte mid-frame", "cut the frame short", "bad magic", "reserved block type"],
)
def test_corrupt_payloads_fail_the_same(damage: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def payload(area: bytes) -> bytes:
        frame = bytearray(_kafka_zstd(area))
        if damage == "flip a byte mid-frame":
            frame[len(frame) // 2] ^= 0x5A
        elif damage == "cut the frame short":
            del frame[-40:]
        elif damage == "bad magic":
            frame[0] ^= 1
        else:
            frame[6] |= 0x06  # first block header: type 3
        return bytes(frame)

    data = _batch(_records(50), _kafka_zstd) + _batch(_records(500), payload, base_offset=50)
    outcome = assert_same(data, monkeypatch)
    assert outcome[0] in ("CompressionError", "CorruptRecordError")


@pytest.mark.parametrize("count", [501, 499, 10**6, 2**31 - 1])
def test_wrong_record_counts_fail_the_same(count: int, monkeypatch: pytest.MonkeyPatch) -> None:
    data = _batch(_records(10), _kafka_zstd) + _batch(
        _records(500), _kafka_zstd, base_offset=10, count=count
    )
    outcome = assert_same(data, monkeypatch)
    assert outcome[0] == "CorruptRecordError"


def test_corrupt_records_inside_a_good_frame_fail_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    records = _records(20)
    third = len(_area(records[:2]))

    def payload(area: bytes) -> bytes:
        broken = bytearray(area)
        broken[third] = 0x01  # the third record's length: -1
        return _kafka_zstd(bytes(broken))

    data = _batch(_records(20), _kafka_zstd) + _batch(records, payload, base_offset=20)
    outcome = assert_same(data, monkeypatch)
    assert outcome[0] == "CorruptRecordError" and "decompressed records" in str(outcome[3])


def test_an_error_in_an_earlier_batch_wins_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """A corrupt kernel-inflated batch before a corrupt per-batch one: the first is reported."""
    bad_frame = lambda area: _kafka_zstd(area)[:-30]  # noqa: E731
    data = (
        _batch(_records(30), bad_frame)
        + _batch(_records(30), lambda a: SKIPPABLE + bad_frame(a), base_offset=30)
        + _batch(_records(30), _kafka_zstd, base_offset=60, count=10**5)
    )
    outcome = assert_same(data, monkeypatch)
    assert outcome[0] == "CompressionError" and outcome[2] == 61


def test_plan_refuses_what_it_cannot_bound() -> None:
    """The kernel's frame walk leaves everything unusual to the per-batch path (-1)."""
    area = _area(_records(100))
    good = _kafka_zstd(area)
    cases = {
        "kafka": (good, 1 << 17),
        "one-shot": (_one_shot(area), len(area)),
        "skippable": (SKIPPABLE + good, -1),
        "two frames": (good + good, -1),
        "trailing byte": (good + b"\x00", -1),
        "truncated": (good[:-1], -1),
        "not zstd": (bytes(cramjam.snappy.compress_raw(area)), -1),
        "empty": (b"", -1),
    }
    for name, (payload, expected) in cases.items():
        buf = np.frombuffer(payload + b"pad", np.uint8)
        out = np.empty(1, np.int64)
        limits = np.array([1 << 20], np.int64)
        K.plan_zstd(buf, np.array([0]), np.array([len(payload)]), limits, out)
        assert out[0] == expected, name
        limits[0] = len(area) - 1  # a bound above the limit: the per-batch path decides
        K.plan_zstd(buf, np.array([0]), np.array([len(payload)]), limits, out)
        assert out[0] == -1, name


def test_scratch_buffer_is_reused_per_thread() -> None:
    dctx, first = columnar._zstd_kernel_state(1000)
    again, second = columnar._zstd_kernel_state(500)
    assert again == dctx and second is first
    _, big = columnar._zstd_kernel_state(columnar._SCRATCH_KEEP + 1)
    assert len(big) > columnar._SCRATCH_KEEP and columnar._zstd_kernel_state(10)[1] is first


@pytest.mark.parametrize("threads", [2, 3, 8])
def test_threads_split_the_kernel_runs_and_join_them(
    threads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without headers, ``decompress_threads`` runs the kernel on runs of batches in parallel;
    the joined columns equal one run's (and the per-batch path's), with every codec mixed in."""
    parts = []
    offset = 0
    for i in range(23):
        codec = ["zstd", "zstd", "none", "lz4", "zstd", "gzip"][i % 6]
        records = _records(1 + (i * 37) % 90, value_size=(i * 13) % 150, seed=i)
        parts.append(encode_batch(records, base_offset=offset, compression=codec))
        offset += len(records)
    data = b"".join(parts)
    one = assert_same(data, monkeypatch, include_headers=False)
    many = assert_same(data, monkeypatch, include_headers=False, decompress_threads=threads)
    assert one[0] == many[0] == "ok" and one[1] is not None and many[1] is not None
    assert many[1].equals(one[1]) and many[2] == one[2]
    assert many[1].column("offset").to_pylist() == list(range(offset))


def test_threads_report_errors_as_one_run(monkeypatch: pytest.MonkeyPatch) -> None:
    good = [_batch(_records(50, seed=i), _kafka_zstd, base_offset=50 * i) for i in range(8)]
    for bad_at in (0, 5, 7):
        parts = list(good)
        parts[bad_at] = _batch(
            _records(50), lambda a: _kafka_zstd(a)[:-25], base_offset=50 * bad_at
        )
        data = b"".join(parts)
        one = assert_same(data, monkeypatch, include_headers=False)
        many = assert_same(data, monkeypatch, include_headers=False, decompress_threads=3)
        assert one[0] == many[0] == "CompressionError" and one[2:] == many[2:]
