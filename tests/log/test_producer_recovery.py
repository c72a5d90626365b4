"""Recovery with producer state (Kafka's LogLoaderTest and LogSegmentTest scenarios that involve
it), the ``.txnindex`` fault of one segment rebuilt alone, and the snapshots real brokers wrote.

The fault: a transaction begun in one segment and aborted in the next; rebuilding the second
segment's indexes alone (its ``.index`` missing or corrupt, or it lies past the recovery point)
wrote an aborted-transaction entry whose first offset was the marker's and whose LSO ignored
other open transactions, so a read_committed reader got the aborted records. Kafka rebuilds the
producer state up to the segment's base offset before it recovers it (LogLoader.recoverSegment).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from test_producer_state import T0, data, marker

from kafkalog.index.txn_index import AbortedTxn, TransactionIndex
from kafkalog.log import Log, LogSegment, TopicConfig
from kafkalog.log import loader as loader_module
from kafkalog.log.producer_snapshot import encode_snapshot, read_snapshot
from kafkalog.log.producer_state import ProducerStateEntry, ProducerStateManager
from kafkalog.log.segment import TxnState
from kafkalog.records import Record, encode_batch
from provenance import FIXTURES as FIXTURES_ROOT

CONFIG = TopicConfig(segment_bytes=100_000, file_delete_delay_ms=0, index_interval_bytes=1)


def plain(n: int = 1) -> bytes:
    return encode_batch([Record.of(b"plain-%d" % i, None, T0 + i) for i in range(n)])


def name(directory: Path, base: int, suffix: str) -> Path:
    return directory / f"{base:020d}{suffix}"


def txns(directory: Path) -> dict[int, list[AbortedTxn]]:
    out = {}
    for p in sorted(directory.glob("*.txnindex")):
        base = int(p.name[:20])
        idx = TransactionIndex(str(p), base, writable=False)
        try:
            found = idx.all_aborted_txns()
        finally:
            idx.close()
        if found:  # an empty .txnindex and none at all are the same
            out[base] = found
    return out


def across_segments(directory: Path) -> list[int]:
    """Producer 7's transaction spans a roll and is aborted in the second segment, producer 8's
    begun in the first stays open; producer 9 aborts inside the third. Returns the bases."""
    log = Log(directory, CONFIG)
    log.append(data(7, 0, 2, txn=True))  # 0, 1
    log.append(data(8, 0, txn=True))  # 2
    log.append(plain(3))  # 3..5
    log.roll()
    log.append(plain())  # 6
    log.append(marker(7, abort=True), origin="coordinator")  # 7: AbortedTxn(7, 0, 7, lso 2)
    log.append(plain(2))  # 8, 9
    log.roll()
    log.append(data(9, 0, txn=True))  # 10
    log.append(marker(9, abort=True), origin="coordinator")  # 11: AbortedTxn(9, 10, 11, lso 2)
    log.append(plain())  # 12
    bases = [s.base_offset for s in log.segments]
    log.close()
    return bases


EXPECTED = {
    6: [AbortedTxn(7, 0, 7, 2)],
    10: [AbortedTxn(9, 10, 11, 2)],
}


def test_writes_the_expected_transaction_indexes(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    assert across_segments(directory) == [0, 6, 10]
    assert txns(directory) == EXPECTED


@pytest.mark.parametrize("damage", ["missing .index", "corrupt .index", "corrupt .txnindex"])
@pytest.mark.parametrize("snapshots", [True, False], ids=["snapshots", "no-snapshots"])
def test_rebuilding_one_segment_keeps_a_transaction_begun_earlier(
    tmp_path: Path, damage: str, snapshots: bool
) -> None:
    directory = tmp_path / "t-0"
    across_segments(directory)
    if not snapshots:  # a log written before kafkalog kept producer state
        for p in directory.glob("*.snapshot"):
            p.unlink()
    for base in (6, 10):
        if damage == "missing .index":
            name(directory, base, ".index").unlink()
        elif damage == "corrupt .index":
            with open(name(directory, base, ".index"), "ab") as f:
                f.write(b"\x00\x00\x00")
        else:  # an entry ending before the segment's base (LogLoader: CorruptIndexException)
            path = name(directory, base, ".txnindex")
            path.write_bytes(path.read_bytes() + bytes(34))
    with Log(directory, CONFIG, had_clean_shutdown=True) as log:
        assert txns(directory) == EXPECTED
        assert log.last_stable_offset() == 2
        assert [r.offset for r in log.records()] == [*range(0, 7), 8, 9, 10, 12]


@pytest.mark.parametrize("recovery_point", [6, 10, 12])
def test_recovery_past_the_recovery_point(tmp_path: Path, recovery_point: int) -> None:
    # LogLoader.recoverLog -> recoverSegment for each segment from the one holding the point
    directory = tmp_path / "t-0"
    across_segments(directory)
    for p in directory.glob("*.txnindex"):
        p.write_bytes(b"")
    with Log(directory, CONFIG, recovery_point=recovery_point, had_clean_shutdown=False) as log:
        first = 6 if recovery_point < 10 else 10
        assert txns(directory) == {b: e for b, e in EXPECTED.items() if b >= first}
        assert log.last_stable_offset() == 2


def test_a_missing_time_index_alone_leaves_the_other_files_alone(tmp_path: Path) -> None:
    # Kafka's sanityCheck(timeIndexFileNewlyCreated) does not recover such a segment; kafkalog
    # rebuilds the time index only, and the .txnindex and .index are not rewritten
    directory = tmp_path / "t-0"
    across_segments(directory)
    time_index = name(directory, 6, ".timeindex")
    want = time_index.read_bytes()
    keep = {
        p.name: (p.read_bytes(), p.stat().st_mtime_ns)
        for p in directory.iterdir()
        if p.name.startswith(f"{6:020d}") and p.suffix in (".txnindex", ".index", ".log")
    }
    time_index.unlink()
    with Log(directory, CONFIG, had_clean_shutdown=True) as log:
        assert log.offsets_for_times(T0 + 1) is not None
    assert time_index.read_bytes() == want
    for n, (content, mtime) in keep.items():
        assert ((directory / n).read_bytes(), (directory / n).stat().st_mtime_ns) == (
            content,
            mtime,
        ), n


def test_segment_recover_rebuilds_the_transaction_index(tmp_path: Path) -> None:
    # LogSegmentTest.testRecoverTransactionIndex: pid1's and pid2's transactions at 100 and 102,
    # pid2 aborted at 106 (LSO 100: pid1's is open), pid1 committed at 107
    seg = LogSegment(tmp_path, 100, TopicConfig())
    for raw, base in (
        (data(5, 100, 2, txn=True, offset=100), 100),
        (data(10, 100, 2, txn=True, offset=102), 102),
        (encode_batch([Record.of(b"a", None, T0)] * 2, base_offset=104), 104),
        (marker(10, abort=True, offset=106), 106),
        (marker(5, abort=False, offset=107), 107),
    ):
        last = base + (1 if base < 106 else 0)
        seg.append(last, -1, -1, memoryview(raw))
    state = TxnState()
    seg.recover(None, state)
    assert state.map_end_offset == 108
    assert seg.txn_index.all_aborted_txns() == [AbortedTxn(10, 102, 106, 100)]
    # again, pid2's transaction having begun in an earlier segment, at 75
    state = ProducerStateManager(str(tmp_path), writable=False)
    state.load_entry(ProducerStateEntry(10, 0, 0, -1, 75))
    seg.recover(None, state)
    assert state.map_end_offset == 108
    assert seg.txn_index.all_aborted_txns() == [AbortedTxn(10, 75, 106, 100)]
    seg.close()


def test_unclean_open_replays_only_from_the_newest_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # LogLoaderTest (testSkipTruncateAndReloadIfNewMessageFormatAndCleanShutdown and friends):
    # a snapshot at each roll lets recovery from the recovery point scan that segment only
    directory = tmp_path / "t-0"
    across_segments(directory)
    replayed: list[int] = []
    real = loader_module.replay_segment

    def spy(log: Log, seg: LogSegment, *args: object) -> None:
        replayed.append(seg.base_offset)
        real(log, seg, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(loader_module, "replay_segment", spy)
    with Log(directory, CONFIG, recovery_point=10, had_clean_shutdown=False) as log:
        assert log.last_stable_offset() == 2
    assert replayed == []  # 10.snapshot (the roll) and 13.snapshot (recovery) say it all
    for p in directory.glob("*.snapshot"):
        p.unlink()
    with Log(directory, CONFIG, recovery_point=10, had_clean_shutdown=False) as log:
        assert log.last_stable_offset() == 2
    assert replayed == [0, 6]  # without snapshots, from the log start up to segment 10


def test_snapshots_after_an_unclean_open_equal_a_replay_from_the_start(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    across_segments(directory)
    with Log(directory, CONFIG, recovery_point=0):
        pass
    for p in sorted(directory.glob("*.snapshot")):
        offset = int(p.name[:20])
        state = ProducerStateManager(str(directory), writable=False)
        with Log(directory, writable=False) as log:
            for seg in log.segments:
                loader_module.replay_segment(log, seg, state, seg.base_offset, offset)
        assert read_snapshot(p) == state.entries(), p.name


# -- snapshots written by real brokers ------------------------------------------------------------
FIXTURE_SNAPSHOTS = sorted(FIXTURES_ROOT.glob("**/*.snapshot"))


@pytest.mark.parametrize("path", FIXTURE_SNAPSHOTS, ids=lambda p: str(p.relative_to(FIXTURES_ROOT)))
def test_broker_snapshots_hold_the_state_their_logs_imply(path: Path) -> None:
    offset = int(path.name[:20])
    with Log(path.parent, writable=False) as log:
        state = ProducerStateManager(str(path.parent), writable=False)
        for seg in log.segments:
            loader_module.replay_segment(log, seg, state, seg.base_offset, offset)
    kafka = read_snapshot(path)
    assert sorted(kafka, key=lambda e: e.producer_id) == state.entries()
    assert encode_snapshot(kafka) == path.read_bytes()  # our writer, Kafka's bytes


def test_a_broker_partition_opens_with_its_snapshot(tmp_path: Path) -> None:
    src = FIXTURES_ROOT / "kafka-4.0-snapshot-javacode" / "v2-txn-0"
    directory = tmp_path / "v2-txn-0"
    shutil.copytree(src, directory)
    kafka = read_snapshot(directory / f"{30:020d}.snapshot")
    assert any(e.current_txn_first_offset >= 0 for e in kafka) or kafka
    with Log(src, writable=False) as reader:
        read_only_lso = reader.last_stable_offset()
    with Log(directory, TopicConfig(), had_clean_shutdown=True) as log:
        assert log.log_end_offset == 30
        assert log.producer_state.entries() == sorted(kafka, key=lambda e: e.producer_id)
        open_txns = [e.current_txn_first_offset for e in kafka if e.current_txn_first_offset >= 0]
        assert log.last_stable_offset() == min(open_txns, default=30) == read_only_lso
    assert sorted(os.listdir(src)) == sorted(os.listdir(src))  # the fixture is untouched
