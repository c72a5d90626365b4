"""Skipping record batches by their headers (``decode_range(within=)``): what each kind of
header proves, and nothing more. A skipped entry must hold no row of the bounds; every row of
the bounds must come back; damage must be reported as without skipping."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from kafkalog.errors import CorruptRecordError
from kafkalog.records import Record, TimestampType, decode_range, encode_batch
from kafkalog.records.header_prune import RowBounds
from kafkalog.records.legacy import encode_message_set
from read_shapes import truth, write_shape


def _rows(data: bytes, within: RowBounds) -> tuple[list[tuple[int, int]], int]:
    got = decode_range(data, within=within)
    offsets = got.batch.column("offset").to_pylist()
    stamps = got.batch.column("timestamp").cast("int64").to_pylist()
    return list(zip(offsets, stamps, strict=True)), got.skipped


def _inside(rows: list[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    return [r for r in rows if lo <= r[1] < hi]


def _batch(stamps: list[int], base: int, **kw: object) -> bytes:
    records = [Record.of(b"v%d" % i, None, ts) for i, ts in enumerate(stamps)]
    return encode_batch(records, base_offset=base, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("codec", ["none", "zstd", "gzip"])
def test_a_base_timestamp_is_not_the_smallest(codec: str) -> None:
    """The base timestamp is the first record's: a later one may be earlier. An upper bound
    skips a batch only once its records' deltas are walked (inflated first if compressed)."""
    data = _batch([100, 50, 70], 0, compression=codec) + _batch([300, 200], 3, compression=codec)
    every = [(0, 100), (1, 50), (2, 70), (3, 300), (4, 200)]
    for lo, hi, skipped in ((0, 60, 1), (0, 50, 2), (60, 101, 1), (101, 250, 1), (201, 400, 1)):
        got, n = _rows(data, RowBounds(ts_lo=lo, ts_hi=hi))
        assert _inside(got, lo, hi) == _inside(every, lo, hi), (lo, hi)
        assert n == skipped, (lo, hi)


def test_a_delete_horizon_base_proves_nothing() -> None:
    """With the cleaner's delete-horizon bit the base timestamp is the horizon."""
    data = _batch([1000, 2000], 0, delete_horizon_ms=5000)
    got, n = _rows(data, RowBounds(ts_lo=0, ts_hi=1500))
    assert _inside(got, 0, 1500) == [(0, 1000)] and n == 0
    assert _rows(data, RowBounds(ts_lo=2001, ts_hi=9000))[1] == 1


def test_log_append_time_is_exact_for_both_bounds() -> None:
    """Every record of a LogAppendTime batch reads as the header's max timestamp, whatever
    its own delta says."""
    data = _batch(
        [10, 20], 0, timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=500
    ) + _batch([10, 20], 2, timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=900)
    got, n = _rows(data, RowBounds(ts_lo=0, ts_hi=600))
    assert got == [(0, 500), (1, 500)] and n == 1
    got, n = _rows(data, RowBounds(ts_lo=600, ts_hi=1000))
    assert got == [(2, 900), (3, 900)] and n == 1


def test_offsets_skip_batches_outside() -> None:
    data = _batch([1, 2, 3], 0) + _batch([4, 5], 3) + _batch([6], 5)
    got, n = _rows(data, RowBounds(offset_lo=3, offset_hi=5))
    assert got == [(3, 4), (4, 5)] and n == 2


def test_legacy_entries() -> None:
    """A v1 message's timestamp is its record's (exact); a compressed v1 wrapper holds the
    largest of its records' (the lower bound only); v0 messages read -1."""
    plain = encode_message_set(
        [Record.of(b"a", None, 100), Record.of(b"b", None, 10)], magic=1, base_offset=0
    )
    wrapper = encode_message_set(
        [Record.of(b"c", None, 300), Record.of(b"d", None, 20)],
        magic=1,
        base_offset=2,
        compression="gzip",
    )
    data = plain + wrapper
    every = [(0, 100), (1, 10), (2, 300), (3, 20)]
    for lo, hi, skipped in ((0, 50, 1), (50, 200, 1), (200, 400, 2), (301, 500, 3)):
        got, n = _rows(data, RowBounds(ts_lo=lo, ts_hi=hi))
        assert _inside(got, lo, hi) == _inside(every, lo, hi), (lo, hi)
        assert n == skipped, (lo, hi)
    v0 = encode_message_set([Record.of(b"e", None, -1)] * 2, magic=0, base_offset=0)
    assert _rows(v0, RowBounds(ts_lo=0))[1] == 2
    assert _rows(v0, RowBounds(ts_lo=-1, ts_hi=0)) == ([(0, -1), (1, -1)], 0)


def test_damage_in_a_skippable_batch_is_still_reported() -> None:
    """A batch the bounds rule out, but whose CRC does not match, is decoded: its damage is
    an error as without the bounds (a flipped timestamp must not hide records)."""
    data = bytearray(_batch([100, 50], 0) + _batch([1000], 2))
    data[-3] ^= 0x01  # inside the second batch's records: its CRC no longer matches
    with pytest.raises(CorruptRecordError, match="CRC"):
        decode_range(bytes(data), within=RowBounds(ts_lo=0, ts_hi=200))
    # a base offset (outside the CRC) out of order: both batches are decoded, so the reader's
    # offset checks see it
    data = bytearray(_batch([1000], 0) + _batch([100, 50], 1))
    assert _rows(bytes(data), RowBounds(ts_lo=0, ts_hi=60))[1] == 1
    second = len(_batch([1000], 0))
    data[second : second + 8] = (0).to_bytes(8, "big")
    got, n = _rows(bytes(data), RowBounds(ts_lo=0, ts_hi=60))
    assert n == 0 and got == [(0, 1000), (0, 100), (1, 50)]


@pytest.mark.parametrize(
    "name",
    [
        "v2-scrambled-multi-i1-codecs-roll",
        "v1-scrambled-i4096-roll",
        "v2-logappendtime-multi-i1-roll",
    ],
)
def test_windows_on_scrambled_shapes(tmp_path: Path, name: str) -> None:
    """Every segment of a shape, one-percent windows: every row of each window, and most
    batches skipped."""
    shape = write_shape(tmp_path, name)
    t = truth(shape.directory)
    stamps = sorted(r.timestamp for r in t.records if not r.control)
    width = max(1, (stamps[-1] - stamps[0]) // 100)
    rng = random.Random(name)
    skipped = entries = 0
    for _ in range(12):
        lo = rng.choice(stamps)
        hi = lo + width
        want = [
            (r.offset, r.timestamp) for r in t.records if not r.control and lo <= r.timestamp < hi
        ]
        got: list[tuple[int, int]] = []
        for segment in sorted(shape.directory.glob("*.log")):
            data = segment.read_bytes()
            result = decode_range(data, path=str(segment), within=RowBounds(ts_lo=lo, ts_hi=hi))
            skipped += result.skipped
            entries += result.entries
            offsets = result.batch.column("offset").to_pylist()
            ts = result.batch.column("timestamp").cast("int64").to_pylist()
            got += _inside(list(zip(offsets, ts, strict=True)), lo, hi)
        assert got == want, (lo, hi)
    assert skipped > entries // 3, (skipped, entries)
