"""TransactionIndex (``.txnindex``): byte layout, Kafka's quirks, file handling, fixtures.

The fixtures in ``kafka-4.0-snapshot-javacode/v2-txn-0`` were written by Kafka's own Java code;
PROVENANCE.md lists their entries, size and sha256 prefix, which is what these tests hold the
implementation to.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkalog.errors import (
    ClosedError,
    CorruptIndexError,
    InvalidOffsetError,
    InvalidRecordError,
    KafkalogError,
    ReadOnlyError,
)
from kafkalog.index.txn_index import AbortedTxn, TransactionIndex, TxnIndexSearchResult
from provenance import FileFacts, txnindexes

SIZE = AbortedTxn.SIZE

# What PROVENANCE.md says Kafka wrote (also cross-checked against the parsed PROVENANCE below).
EXPECTED_FIXTURE_ENTRIES = {
    "00000000000000000000.txnindex": [AbortedTxn(2001, 5, 13, 14)],
    "00000000000000000020.txnindex": [AbortedTxn(2002, 14, 27, 26)],
}
TXN_FACTS = txnindexes()


def _write(path: Path, txns: list[AbortedTxn], tail: bytes = b"") -> Path:
    path.write_bytes(b"".join(t.to_bytes() for t in txns) + tail)
    return path


def _raw_entry(version_short: int, pid: int, first: int, last: int, lso: int) -> bytes:
    return struct.pack(">Hqqqq", version_short, pid, first, last, lso)


def _snapshot(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


def _intact(facts: FileFacts) -> bool:
    data = facts.path.read_bytes()
    return len(data) == facts.size and hashlib.sha256(data).hexdigest().startswith(
        facts.sha256_prefix
    )


def _facts_entries(facts: FileFacts) -> list[AbortedTxn]:
    assert facts.txn_entries is not None and facts.entries_complete
    return [
        AbortedTxn(e.pid, e.first_offset, e.last_offset, e.last_stable_offset, e.version)
        for e in facts.txn_entries
    ]


# --------------------------------------------------------------------------------------------
# AbortedTxn
# --------------------------------------------------------------------------------------------
def test_byte_layout_vector_from_spec() -> None:
    txn = AbortedTxn(producer_id=7, first_offset=1, last_offset=10, last_stable_offset=11)
    expected = "000000000000000000070000000000000001000000000000000a000000000000000b"
    assert txn.to_bytes().hex() == expected
    assert len(txn.to_bytes()) == SIZE == 34
    assert AbortedTxn.from_bytes(bytes.fromhex(expected)) == txn


def test_from_bytes_at_position_and_extra_bytes() -> None:
    txn = AbortedTxn(1, 2, 3, 4)
    data = b"\xaa" * 5 + txn.to_bytes() + b"\xbb" * 3
    assert AbortedTxn.from_bytes(data, 5) == txn
    assert AbortedTxn.from_bytes(memoryview(data), 5) == txn
    assert AbortedTxn.from_bytes(bytearray(data), 5) == txn


def test_version_is_read_as_one_byte() -> None:
    # A stored short 0x0001: Kafka reads only the high byte, so this is version 0.
    assert AbortedTxn.from_bytes(_raw_entry(0x0001, 7, 1, 10, 11)) == AbortedTxn(7, 1, 10, 11)
    assert AbortedTxn.from_bytes(_raw_entry(0x00FF, 7, 1, 10, 11)).version == 0
    # Writing version 1 therefore does not round-trip (the quirk, not a bug of ours).
    assert AbortedTxn.from_bytes(AbortedTxn(7, 1, 10, 11, version=1).to_bytes()).version == 0


def test_version_byte_is_signed() -> None:
    # Java's byte is signed: 0xFF.. reads as -1, which is not > 0 and so is accepted.
    assert AbortedTxn.from_bytes(_raw_entry(0xFF00, 7, 1, 10, 11)).version == -1
    assert AbortedTxn.from_bytes(_raw_entry(0x8000, 7, 1, 10, 11)).version == -128
    assert AbortedTxn(7, 1, 10, 11, version=-1).to_bytes()[:2] == b"\xff\xff"


@pytest.mark.parametrize("short", [0x0100, 0x0101, 0x7F00])
def test_positive_version_byte_is_rejected(short: int) -> None:
    data = b"\x00" * 3 + _raw_entry(short, 7, 1, 10, 11)
    with pytest.raises(CorruptIndexError, match="Unexpected aborted transaction version") as ei:
        AbortedTxn.from_bytes(data, 3, path="some.txnindex")
    assert ei.value.position == 3
    assert ei.value.path == "some.txnindex"
    assert str(short >> 8) in ei.value.reason


@pytest.mark.parametrize("n", [0, 1, 33])
def test_from_bytes_short_buffer_is_corrupt_not_struct_error(n: int) -> None:
    with pytest.raises(CorruptIndexError) as ei:
        AbortedTxn.from_bytes(b"\x00" * (n + 4), 4)
    assert ei.value.position == 4
    with pytest.raises(ValueError):
        AbortedTxn.from_bytes(b"\x00" * 34, -1)


def test_field_ranges_are_validated() -> None:
    AbortedTxn(2**63 - 1, -(2**63), 0, 0, version=-(2**15))
    with pytest.raises(InvalidRecordError):
        AbortedTxn(2**63, 0, 0, 0)
    with pytest.raises(InvalidRecordError):
        AbortedTxn(0, 0, 0, 0, version=2**15)
    with pytest.raises(TypeError):
        AbortedTxn(0, 0, 1.5, 0)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# collect_aborted_txns
# --------------------------------------------------------------------------------------------
SPEC_EXAMPLE = [
    AbortedTxn(0, 0, 10, 11),
    AbortedTxn(1, 5, 15, 13),
    AbortedTxn(2, 18, 35, 25),
    AbortedTxn(3, 32, 50, 40),
]


@pytest.mark.parametrize(
    ("fetch", "upper", "indices", "complete"),
    [
        (0, 100, [0, 1, 2, 3], False),
        (0, 32, [0, 1, 2], True),
        (11, 35, [1, 2, 3], True),
        (20, 41, [2, 3], False),
    ],
)
def test_collect_spec_example(
    tmp_path: Path, fetch: int, upper: int, indices: list[int], complete: bool
) -> None:
    idx = TransactionIndex(tmp_path / "00000000000000000000.txnindex", 0)
    for txn in SPEC_EXAMPLE:
        idx.append(txn)
    # appended entries are visible to the same object...
    expected = TxnIndexSearchResult([SPEC_EXAMPLE[i] for i in indices], complete)
    assert idx.collect_aborted_txns(fetch, upper) == expected
    idx.close()
    # ...and to a read-only reader of the file.
    ro = TransactionIndex(tmp_path / "00000000000000000000.txnindex", 0, writable=False)
    assert ro.collect_aborted_txns(fetch, upper) == expected


def test_collect_early_stop_never_reads_past(tmp_path: Path) -> None:
    # Kafka stops at the first entry whose LSO reaches the bound, so a corrupt entry after it
    # is never looked at by that search.
    path = tmp_path / "x.txnindex"
    path.write_bytes(AbortedTxn(1, 0, 10, 50).to_bytes() + _raw_entry(0x0500, 2, 1, 2, 3))
    idx = TransactionIndex(path, 0, writable=False)
    assert idx.collect_aborted_txns(0, 20) == TxnIndexSearchResult([AbortedTxn(1, 0, 10, 50)], True)
    with pytest.raises(CorruptIndexError) as ei:
        idx.collect_aborted_txns(0, 100)
    assert ei.value.position == 34
    assert ei.value.path == str(path)


def test_collect_on_missing_file(tmp_path: Path) -> None:
    idx = TransactionIndex(tmp_path / "missing.txnindex", 0)
    assert idx.collect_aborted_txns(0, 100) == TxnIndexSearchResult([], False)


# --------------------------------------------------------------------------------------------
# reading: partial tails, corruption
# --------------------------------------------------------------------------------------------
def test_trailing_partial_entry_ignored_and_reported(tmp_path: Path) -> None:
    # The spec's case: an entry with version short 0x0001 followed by a 10-byte fragment.
    path = tmp_path / "x.txnindex"
    path.write_bytes(_raw_entry(0x0001, 7, 1, 10, 11) + b"\x01" * 10)
    idx = TransactionIndex(path, 0, writable=False)
    assert idx.all_aborted_txns() == [AbortedTxn(7, 1, 10, 11)]
    assert len(idx) == 1
    assert idx.trailing_bytes == 10
    idx.sanity_check()  # Kafka's sanity check does not look at the tail either


def test_only_partial_entry(tmp_path: Path) -> None:
    path = tmp_path / "x.txnindex"
    path.write_bytes(b"\x07" * 33)
    idx = TransactionIndex(path, 0, writable=False)
    assert idx.all_aborted_txns() == []
    assert (len(idx), idx.trailing_bytes) == (0, 33)
    assert idx.collect_aborted_txns(0, 10) == TxnIndexSearchResult([], False)


def test_corrupt_entry_position_in_big_file(tmp_path: Path) -> None:
    # More entries than one read chunk, so the position must be relocated across chunks.
    n = 3000
    good = [AbortedTxn(i, i, i, i + 1) for i in range(n)]
    path = tmp_path / "x.txnindex"
    path.write_bytes(
        b"".join(t.to_bytes() for t in good) + _raw_entry(0x0200, 0, 0, n, n) + b"\x00" * 5
    )
    idx = TransactionIndex(path, 0, writable=False)
    with pytest.raises(CorruptIndexError, match="version 2") as ei:
        idx.all_aborted_txns()
    assert ei.value.position == n * SIZE
    assert ei.value.path == str(path)
    assert str(path) in str(ei.value)
    assert len(idx) == n + 1
    assert idx.trailing_bytes == 5
    # The search stops long before the bad entry when an LSO reaches the bound.
    assert idx.collect_aborted_txns(0, 3).aborted == good[:3]


def test_text_dump_instead_of_index_is_corrupt_at_zero(tmp_path: Path) -> None:
    # e.g. the output of `xxd` saved over the binary file: '0' = 0x30 is version byte 48.
    path = tmp_path / "00000000000000000020.txnindex"
    path.write_text("00000000: 0000 0000 0000 0000 07d1 0000 0000 0000  ................\n")
    idx = TransactionIndex(path, 20, writable=False)
    with pytest.raises(CorruptIndexError, match="version 48") as ei:
        idx.sanity_check()
    assert ei.value.position == 0


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=34 * 6 + 20), fetch=st.integers(-5, 60), upper=st.integers(-5, 60))
def test_arbitrary_bytes_only_raise_corrupt_index_error(
    data: bytes, fetch: int, upper: int
) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "00000000000000000000.txnindex"
        path.write_bytes(data)
        before = _snapshot(path)
        idx = TransactionIndex(path, 0, writable=False)
        assert len(idx) == len(data) // SIZE
        assert idx.trailing_bytes == len(data) % SIZE
        ops: list[Callable[[], object]] = [
            idx.all_aborted_txns,
            idx.sanity_check,
            lambda: idx.collect_aborted_txns(fetch, upper),
        ]
        for op in ops:
            try:
                op()
            except CorruptIndexError as e:
                assert e.path == str(path)
                assert e.position is not None and e.position % SIZE == 0
                assert e.position < len(data) - len(data) % SIZE
        assert _snapshot(path) == before


# --------------------------------------------------------------------------------------------
# appending
# --------------------------------------------------------------------------------------------
def test_append_monotonicity(tmp_path: Path) -> None:
    path = tmp_path / "x.txnindex"
    idx = TransactionIndex(path, 0)
    idx.append(AbortedTxn(1, 0, 10, 11))
    assert idx.last_offset == 10
    for bad_last in (10, 9, -1):
        with pytest.raises(InvalidOffsetError, match=str(bad_last)):
            idx.append(AbortedTxn(2, 0, bad_last, 11))
    assert path.read_bytes() == AbortedTxn(1, 0, 10, 11).to_bytes()
    assert idx.last_offset == 10
    idx.append(AbortedTxn(2, 5, 11, 12))  # first_offset may go back: only last_offset ordered
    assert idx.all_aborted_txns() == [AbortedTxn(1, 0, 10, 11), AbortedTxn(2, 5, 11, 12)]


def test_reopen_does_not_restore_last_offset(tmp_path: Path) -> None:
    path = tmp_path / "x.txnindex"
    with TransactionIndex(path, 0) as idx:
        idx.append(AbortedTxn(1, 0, 10, 11))
    reopened = TransactionIndex(path, 0)
    assert reopened.last_offset is None
    reopened.append(AbortedTxn(2, 0, 5, 6))  # not checked against the file (Kafka's quirk)
    with pytest.raises(InvalidOffsetError):
        reopened.append(AbortedTxn(3, 0, 5, 6))  # ...but checked against what it appended
    assert [t.last_offset for t in reopened.all_aborted_txns()] == [10, 5]


def test_append_after_partial_tail_goes_to_end_of_file(tmp_path: Path) -> None:
    # Kafka's channel is positioned at the end of the file, fragment or not.
    path = tmp_path / "x.txnindex"
    path.write_bytes(AbortedTxn(1, 0, 10, 11).to_bytes() + b"\x00" * 4)
    idx = TransactionIndex(path, 0)
    idx.append(AbortedTxn(2, 0, 20, 21))
    assert path.read_bytes() == (
        AbortedTxn(1, 0, 10, 11).to_bytes() + b"\x00" * 4 + AbortedTxn(2, 0, 20, 21).to_bytes()
    )
    assert idx.trailing_bytes == 4


def test_close_is_final(tmp_path: Path) -> None:
    # issue 11: a closed index (its segment closed or deleted) refuses every use with a
    # kafkalog error naming the file, instead of reading a deleted file as "no aborted txn"
    path = tmp_path / "x.txnindex"
    idx = TransactionIndex(path, 0)
    idx.append(AbortedTxn(1, 0, 10, 11))
    idx.close()
    idx.close()  # idempotent
    idx.flush()  # nothing left to flush
    uses: list[Callable[[], object]] = [
        idx.all_aborted_txns,
        lambda: idx.collect_aborted_txns(0, 100),
        idx.sanity_check,
        lambda: len(idx),
        lambda: idx.trailing_bytes,
        lambda: idx.append(AbortedTxn(2, 0, 20, 21)),
        lambda: idx.truncate_to(0),
        idx.reset,
        lambda: idx.rename_to(tmp_path / "y.txnindex"),
    ]
    for use in uses:
        with pytest.raises(ClosedError, match=r"x\.txnindex"):
            use()
    assert len(TransactionIndex(path, 0, writable=False)) == 1  # the file is untouched
    assert idx.delete_if_exists()  # a closed index's file can still be deleted
    assert not path.exists()


def test_appends_visible_to_a_concurrent_reader(tmp_path: Path) -> None:
    path = tmp_path / "x.txnindex"
    writer = TransactionIndex(path, 0)
    reader = TransactionIndex(path, 0, writable=False)
    assert reader.all_aborted_txns() == []
    writer.append(AbortedTxn(1, 0, 10, 11))
    assert reader.all_aborted_txns() == [AbortedTxn(1, 0, 10, 11)]
    writer.append(AbortedTxn(2, 0, 20, 21))
    assert len(reader) == 2
    writer.close()


# --------------------------------------------------------------------------------------------
# truncate_to / reset
# --------------------------------------------------------------------------------------------
THREE = [AbortedTxn(1, 0, 10, 11), AbortedTxn(2, 5, 20, 21), AbortedTxn(3, 15, 30, 31)]


@pytest.mark.parametrize(
    ("offset", "kept", "last_offset"),
    [
        (-100, 0, None),  # before every entry
        (0, 0, None),
        (10, 0, None),  # at the first entry
        (11, 1, 10),  # between entries
        (20, 1, 10),  # at an entry
        (25, 2, 20),
        (30, 2, 20),  # at the last entry
    ],
)
def test_truncate_to(tmp_path: Path, offset: int, kept: int, last_offset: int | None) -> None:
    path = _write(tmp_path / "x.txnindex", THREE)
    idx = TransactionIndex(path, 0)
    idx.truncate_to(offset)
    assert path.read_bytes() == b"".join(t.to_bytes() for t in THREE[:kept])
    assert idx.all_aborted_txns() == THREE[:kept]
    assert idx.last_offset == last_offset
    # the monotonicity check continues from the previous entry
    if last_offset is not None:
        with pytest.raises(InvalidOffsetError):
            idx.append(AbortedTxn(9, 0, last_offset, 0))
    idx.append(AbortedTxn(9, 0, 31, 32))
    assert idx.all_aborted_txns() == [*THREE[:kept], AbortedTxn(9, 0, 31, 32)]


@pytest.mark.parametrize("offset", [31, 10**12])
def test_truncate_to_after_all_entries_changes_nothing(tmp_path: Path, offset: int) -> None:
    path = _write(tmp_path / "x.txnindex", THREE, tail=b"\x09" * 7)
    before = _snapshot(path)
    idx = TransactionIndex(path, 0)
    idx.truncate_to(offset)
    assert _snapshot(path) == before  # the partial tail is kept too
    assert idx.last_offset is None


def test_truncate_to_after_all_entries_keeps_last_offset(tmp_path: Path) -> None:
    path = _write(tmp_path / "x.txnindex", THREE)
    idx = TransactionIndex(path, 0)
    idx.append(AbortedTxn(4, 0, 40, 41))
    idx.truncate_to(41)
    assert idx.last_offset == 40  # not forgotten
    assert len(idx) == 4


def test_truncate_to_removes_partial_tail_when_cutting(tmp_path: Path) -> None:
    path = _write(tmp_path / "x.txnindex", THREE, tail=b"\x09" * 7)
    idx = TransactionIndex(path, 0)
    idx.truncate_to(30)
    assert path.read_bytes() == THREE[0].to_bytes() + THREE[1].to_bytes()
    assert idx.trailing_bytes == 0


def test_truncate_stops_before_a_corrupt_tail(tmp_path: Path) -> None:
    path = _write(tmp_path / "x.txnindex", THREE, tail=_raw_entry(0x0300, 0, 0, 0, 0))
    idx = TransactionIndex(path, 0)
    idx.truncate_to(20)  # never reaches the corrupt entry
    assert idx.all_aborted_txns() == THREE[:1]


def test_reset(tmp_path: Path) -> None:
    path = _write(tmp_path / "x.txnindex", THREE)
    idx = TransactionIndex(path, 0)
    idx.append(AbortedTxn(4, 0, 40, 41))
    idx.reset()
    assert path.exists()
    assert path.read_bytes() == b""
    assert idx.last_offset is None
    assert idx.all_aborted_txns() == []
    idx.append(AbortedTxn(5, 0, 1, 2))  # smaller than before: allowed after reset
    assert idx.all_aborted_txns() == [AbortedTxn(5, 0, 1, 2)]


def test_reset_and_truncate_never_create_the_file(tmp_path: Path) -> None:
    path = tmp_path / "x.txnindex"
    idx = TransactionIndex(path, 0)
    idx.reset()
    idx.truncate_to(0)
    idx.flush()
    idx.close()
    assert not path.exists()


# --------------------------------------------------------------------------------------------
# lazy creation, rename, delete
# --------------------------------------------------------------------------------------------
def test_lazy_creation(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    idx = TransactionIndex(path, 0)
    assert not path.exists()
    assert idx.all_aborted_txns() == []
    assert (len(idx), idx.trailing_bytes) == (0, 0)
    idx.sanity_check()
    assert not path.exists()
    idx.append(AbortedTxn(1, 0, 10, 11))
    assert path.read_bytes() == AbortedTxn(1, 0, 10, 11).to_bytes()


def test_read_only_on_missing_path_creates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    idx = TransactionIndex(path, 0, writable=False)
    assert idx.all_aborted_txns() == []
    assert idx.collect_aborted_txns(0, 10) == TxnIndexSearchResult([], False)
    assert (len(idx), idx.trailing_bytes) == (0, 0)
    idx.sanity_check()
    idx.flush()
    idx.close()
    with pytest.raises(ReadOnlyError):
        idx.append(AbortedTxn(1, 0, 10, 11))
    assert list(tmp_path.iterdir()) == []


def test_rename_with_file(tmp_path: Path) -> None:
    src = _write(tmp_path / "00000000000000000000.txnindex", THREE)
    dst = tmp_path / "00000000000000000000.txnindex.deleted"
    idx = TransactionIndex(src, 0)
    idx.append(AbortedTxn(4, 0, 40, 41))  # holds an open write descriptor across the move
    idx.rename_to(dst)
    assert idx.path == str(dst)
    assert not src.exists()
    idx.append(AbortedTxn(5, 0, 50, 51))
    idx.close()
    assert [t.last_offset for t in TransactionIndex(dst, 0, False).all_aborted_txns()] == [
        10,
        20,
        30,
        40,
        50,
    ]


def test_rename_without_file_only_changes_path(tmp_path: Path) -> None:
    src = tmp_path / "00000000000000000000.txnindex"
    dst = tmp_path / "00000000000000000000.txnindex.swap"
    idx = TransactionIndex(src, 0)
    idx.rename_to(dst)
    assert idx.path == str(dst)
    assert list(tmp_path.iterdir()) == []
    idx.append(AbortedTxn(1, 0, 10, 11))
    assert dst.exists() and not src.exists()


def test_rename_failure_still_updates_path(tmp_path: Path) -> None:
    src = _write(tmp_path / "x.txnindex", THREE)
    dst = tmp_path / "no-such-dir" / "x.txnindex"
    idx = TransactionIndex(src, 0)
    with pytest.raises(OSError):
        idx.rename_to(dst)
    assert idx.path == str(dst)
    assert src.exists()


def test_delete_if_exists(tmp_path: Path) -> None:
    path = tmp_path / "x.txnindex"
    assert TransactionIndex(path, 0).delete_if_exists() is False  # lazy creation: no file
    idx = TransactionIndex(path, 0)
    idx.append(AbortedTxn(1, 0, 10, 11))
    assert idx.delete_if_exists() is True
    assert not path.exists()
    assert idx.delete_if_exists() is False
    with pytest.raises(ClosedError):  # final, as close: "no file" must not read as "empty"
        idx.all_aborted_txns()
    with pytest.raises(ClosedError):
        idx.append(AbortedTxn(2, 0, 20, 21))
    assert not path.exists()


def test_context_manager_and_repr(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000042.txnindex"
    with TransactionIndex(path, 42) as idx:
        idx.append(AbortedTxn(1, 40, 45, 46))
        assert idx._fd is not None
    assert idx._fd is None
    assert str(path) in repr(idx) and "base_offset=42" in repr(idx)
    assert idx.base_offset == 42 and idx.writable


# --------------------------------------------------------------------------------------------
# sanity_check
# --------------------------------------------------------------------------------------------
def test_sanity_check(tmp_path: Path) -> None:
    path = _write(tmp_path / "00000000000000000020.txnindex", [AbortedTxn(1, 5, 20, 21)])
    TransactionIndex(path, 20, writable=False).sanity_check()  # last == base is fine
    TransactionIndex(path, 0, writable=False).sanity_check()
    with pytest.raises(CorruptIndexError) as ei:
        TransactionIndex(path, 21, writable=False).sanity_check()
    assert (ei.value.path, ei.value.position) == (str(path), 0)
    # first_offset may lie in an earlier segment; only last_offset counts
    path2 = _write(
        tmp_path / "00000000000000000100.txnindex",
        [AbortedTxn(1, 5, 100, 101), AbortedTxn(2, 150, 99, 160)],
    )
    with pytest.raises(CorruptIndexError, match="less than") as ei:
        TransactionIndex(path2, 100, writable=False).sanity_check()
    assert ei.value.position == 34


# --------------------------------------------------------------------------------------------
# read-only guarantees
# --------------------------------------------------------------------------------------------
def _exercise_reads(idx: TransactionIndex) -> None:
    idx.all_aborted_txns()
    idx.collect_aborted_txns(0, 2**62)
    idx.collect_aborted_txns(10, 11)
    idx.sanity_check()
    len(idx)
    _ = idx.trailing_bytes
    repr(idx)
    idx.flush()
    idx.close()


def _assert_writes_refused(idx: TransactionIndex, tmp_path: Path) -> None:
    attempts: list[Callable[[], object]] = [
        lambda: idx.append(AbortedTxn(1, 0, 2**62, 2**62)),
        lambda: idx.truncate_to(0),
        idx.reset,
        idx.delete_if_exists,
        lambda: idx.rename_to(tmp_path / "moved.txnindex"),
    ]
    for attempt in attempts:
        with pytest.raises(ReadOnlyError, match="read-only") as ei:
            attempt()
        assert idx.path in str(ei.value)
        assert isinstance(ei.value, PermissionError) and isinstance(ei.value, KafkalogError)


def test_reads_never_touch_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "x.txnindex", THREE, tail=b"\x01\x02")
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    before = _snapshot(path)
    for writable in (False, True):
        _exercise_reads(TransactionIndex(path, 0, writable=writable))
        assert _snapshot(path) == before
    ro = TransactionIndex(path, 0, writable=False)
    _assert_writes_refused(ro, tmp_path)
    assert _snapshot(path) == before
    assert not (tmp_path / "moved.txnindex").exists()


@pytest.mark.parametrize("facts", TXN_FACTS, ids=lambda f: f.rel)
def test_fixture_read_only(facts: FileFacts, tmp_path: Path) -> None:
    assert _intact(facts), f"{facts.path} does not match PROVENANCE.md: the fixture is damaged"
    expected = _facts_entries(facts)
    assert expected == EXPECTED_FIXTURE_ENTRIES[facts.path.name]
    base = facts.base_offset
    assert base is not None
    before = _snapshot(facts.path)
    idx = TransactionIndex(facts.path, base, writable=False)
    assert idx.all_aborted_txns() == expected
    assert (len(idx), idx.trailing_bytes) == (len(expected), 0)
    idx.sanity_check()
    _exercise_reads(idx)
    _assert_writes_refused(idx, tmp_path)
    assert _snapshot(facts.path) == before


@pytest.mark.parametrize("facts", TXN_FACTS, ids=lambda f: f.rel)
def test_fixture_bytes_reproduced(facts: FileFacts, tmp_path: Path) -> None:
    """Appending the listed entries reproduces the bytes Kafka wrote.

    Checked against PROVENANCE's size and sha256 prefix (Kafka's original bytes), and against
    the fixture file itself when it is intact.
    """
    expected = _facts_entries(facts)
    base = facts.base_offset
    assert base is not None
    path = tmp_path / facts.path.name
    with TransactionIndex(path, base) as idx:
        for txn in expected:
            idx.append(txn)
        idx.flush()
    data = path.read_bytes()
    assert len(data) == facts.size
    assert hashlib.sha256(data).hexdigest().startswith(facts.sha256_prefix)
    if _intact(facts):
        assert data == facts.path.read_bytes()
    # and a read-only open of Kafka's bytes parses back to the listed entries
    ro = TransactionIndex(path, base, writable=False)
    assert ro.all_aborted_txns() == expected
    ro.sanity_check()


def test_fixture_copy_collect(tmp_path: Path) -> None:
    """The two v2-txn segments as a fetch sees them (spec §7.4), from copies in tmp."""
    seg0 = tmp_path / "00000000000000000000.txnindex"
    seg20 = tmp_path / "00000000000000000020.txnindex"
    facts = {f.path.name: f for f in TXN_FACTS}
    src0 = facts[seg0.name]
    if _intact(src0):
        shutil.copyfile(src0.path, seg0)
    else:  # pragma: no cover - damaged fixture
        _write(seg0, EXPECTED_FIXTURE_ENTRIES[seg0.name])
    _write(seg20, EXPECTED_FIXTURE_ENTRIES[seg20.name])
    i0 = TransactionIndex(seg0, 0, writable=False)
    i20 = TransactionIndex(seg20, 20, writable=False)
    # fetch from 0 with an upper bound of 20 (next segment's base): LSO 14 < 20, keep going
    assert i0.collect_aborted_txns(0, 20) == TxnIndexSearchResult(
        [AbortedTxn(2001, 5, 13, 14)], False
    )
    assert i20.collect_aborted_txns(0, 20) == TxnIndexSearchResult(
        [AbortedTxn(2002, 14, 27, 26)], True
    )
    # fetch from 14 with upper bound 14: pid 2001 ends at 13 (excluded); LSO 14 completes it
    assert i0.collect_aborted_txns(14, 14) == TxnIndexSearchResult([], True)


# --------------------------------------------------------------------------------------------
# properties
# --------------------------------------------------------------------------------------------
@st.composite
def _txn_sequences(draw: st.DrawFn) -> list[AbortedTxn]:
    n = draw(st.integers(0, 12))
    txns = []
    last = draw(st.integers(-3, 20))
    for i in range(n):
        last += draw(st.integers(1, 8))
        first = last - draw(st.integers(0, 15))
        lso = draw(st.integers(first, last + 10))
        txns.append(AbortedTxn(1000 + i, first, last, lso))
    return txns


def _brute_force(txns: list[AbortedTxn], fetch: int, upper: int) -> tuple[list[AbortedTxn], bool]:
    """Spec §5.3 stated differently: the scanned prefix ends at the first LSO >= upper."""
    stops = [i for i, t in enumerate(txns) if t.last_stable_offset >= upper]
    scanned = txns[: stops[0] + 1] if stops else txns
    overlapping = [t for t in scanned if t.first_offset < upper and not t.last_offset < fetch]
    return overlapping, bool(stops)


_offsets = st.integers(-10, 140)


@settings(max_examples=120, deadline=None)
@given(
    txns=_txn_sequences(),
    queries=st.lists(st.tuples(_offsets, _offsets), min_size=1, max_size=15),
    extra_tail=st.integers(0, 33),
)
def test_collect_matches_brute_force(
    txns: list[AbortedTxn], queries: list[tuple[int, int]], extra_tail: int
) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "00000000000000000000.txnindex"
        idx = TransactionIndex(path, 0)
        for t in txns:
            idx.append(t)
        if extra_tail:
            with open(path, "ab") as f:
                f.write(b"\x00" * extra_tail)
        assert path.exists() == bool(txns or extra_tail)
        if txns:
            assert path.read_bytes()[: len(txns) * SIZE] == b"".join(t.to_bytes() for t in txns)
        assert idx.all_aborted_txns() == txns
        ro = TransactionIndex(path, 0, writable=False)
        for fetch, upper in queries:
            aborted, complete = _brute_force(txns, fetch, upper)
            assert idx.collect_aborted_txns(fetch, upper) == TxnIndexSearchResult(aborted, complete)
            assert ro.collect_aborted_txns(fetch, upper) == TxnIndexSearchResult(aborted, complete)
        idx.close()


@settings(max_examples=80, deadline=None)
@given(txns=_txn_sequences(), offset=st.integers(-10, 140))
def test_truncate_to_matches_model(txns: list[AbortedTxn], offset: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "x.txnindex"
        idx = TransactionIndex(path, 0)
        for t in txns:
            idx.append(t)
        cut = next((i for i, t in enumerate(txns) if t.last_offset >= offset), None)
        idx.truncate_to(offset)
        if cut is None:
            assert idx.all_aborted_txns() == txns
            assert idx.last_offset == (txns[-1].last_offset if txns else None)
        else:
            assert idx.all_aborted_txns() == txns[:cut]
            assert idx.last_offset == (txns[cut - 1].last_offset if cut else None)
            assert path.stat().st_size == cut * SIZE
        idx.close()


def test_a_read_racing_a_rename_finds_the_file_under_its_new_name(tmp_path: Path) -> None:
    # issue 11: retention renames a segment's files ``.deleted`` while readers hold it; a read
    # that lost the race to the rename used to take the missing old name for "no aborted
    # transactions" and answer empty, so read_committed passed aborted records
    import threading

    path = tmp_path / "00000000000000000000.txnindex"
    with TransactionIndex(path, 0) as writer:
        for i in range(3):
            writer.append(AbortedTxn(i, 10 * i, 10 * i + 5, 10 * i + 6))
    idx = TransactionIndex(path, 0)  # no write descriptor: reads open the file by name
    names = [str(path), str(path) + ".deleted"]
    stop = threading.Event()

    def rename() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            idx.rename_to(names[n % 2])

    mover = threading.Thread(target=rename)
    mover.start()
    try:
        counts = [len(idx.all_aborted_txns()) for _ in range(3000)]
    finally:
        stop.set()
        mover.join()
    assert set(counts) == {3}
    idx.close()
