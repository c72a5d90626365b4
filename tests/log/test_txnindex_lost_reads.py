"""A ``.txnindex`` deleted or cut short in a segment holding ABORT markers (tests/damage_kinds.py
``TXNINDEX_LOST``): every read_committed reader meets the markers itself, so none returns the
aborted records as committed in silence. It reads exactly the committed records (it saw the
whole transaction, dropped it, and said so with a WARNING) or fails naming the ``.log``, the
marker's byte and ``kafkalog rebuild-index``, which writes the ``.txnindex`` again. Healthy,
compacted and abort-free logs read as before, with no warning. On real writers' transactional
shapes (tests/read_shapes.py) and Kafka's own ``v2-txn-0``."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from clirun import kafkalog_here
from damage_kinds import (
    COMMITTED_READERS,
    TXNINDEX_LOST,
    check_txnindex_lost,
    committed_planner,
    committed_truth,
    kafka_txn_log_and_shapes,
)
from read_shapes import SHAPES, write_shape

TXN_SHAPES = [name for name in SHAPES if "txn" in name]


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return kafka_txn_log_and_shapes(tmp_path_factory.mktemp("txn-lost"), TXN_SHAPES)


@pytest.mark.parametrize("reader", list(COMMITTED_READERS))
@pytest.mark.parametrize("damage", list(TXNINDEX_LOST))
def test_a_lost_txnindex_is_never_read_as_committed(
    damage: str, reader: str, sources: list[Path], tmp_path: Path
) -> None:
    outcomes = [
        check_txnindex_lost(damage, COMMITTED_READERS[reader], s, tmp_path / str(k))
        for k, s in enumerate(sources)
    ]
    assert len(outcomes) == len(TXN_SHAPES) + 1
    # a deleted file loses markers whose transactions began before what a read saw (refused);
    # a cut one only its last entry, whose whole transaction some shapes' reads hold (read)
    assert "refused" in outcomes, outcomes


def test_a_read_that_holds_the_whole_transaction_drops_it_and_says_so(
    sources: list[Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    read = []
    for k, source in enumerate(sources):
        for name, reader in COMMITTED_READERS.items():
            with caplog.at_level(logging.WARNING, logger="kafkalog"):
                caplog.clear()
                got = check_txnindex_lost(
                    "txnindex cut short", reader, source, tmp_path / str(k) / name[:5]
                )
            if got == "read":
                read.append(name)
                said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
                assert any(
                    ".log at byte" in m and "rebuild-index" in m and "ABORT marker" in m
                    for m in said
                ), said
    assert set(read) == set(COMMITTED_READERS), read


def test_failondataloss_false_reads_on_with_a_warning(
    sources: list[Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from kafkalog.spark.options import parse_read_options
    from kafkalog.spark.plan import plan_read
    from kafkalog.spark.task import read_split

    for k, source in enumerate(sources):
        d = tmp_path / str(k) / source.name
        shutil.copytree(source, d)
        lost = TXNINDEX_LOST["txnindex deleted"](d)
        opts = parse_read_options(
            {
                "path": str(d.parent),
                "subscribe": d.name.rsplit("-", 1)[0],
                "isolationLevel": "read_committed",
                "failOnDataLoss": "false",
            }
        )
        splits, aborted = plan_read(opts)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="kafkalog"):
            got = [
                int(o)
                for s in splits
                for b in read_split(
                    s,
                    include_headers=False,
                    aborted=aborted.get(s.directory),
                    fail_on_data_loss=False,
                )
                for o in b.column("offset").to_pylist()
            ]
        said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        log_path = str(lost)[: -len(".txnindex")] + ".log"
        assert any(log_path in m and "byte" in m and "rebuild-index" in m for m in said), said
        # never fewer than the committed records: only aborted ones may be left in
        assert set(committed_truth(d)) <= set(got), d


def test_healthy_compacted_and_abort_free_logs_read_as_before(
    sources: list[Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    logs = [*sources]
    for k, source in enumerate(sources):
        d = tmp_path / "compacted" / str(k) / source.name
        shutil.copytree(source, d)
        result = kafkalog_here(
            "compact",
            "--config",
            "cleanup.policy=compact",
            "--config",
            "min.cleanable.dirty.ratio=0",
            "--config",
            "delete.retention.ms=0",
            "--now",
            "2100-01-01T00:00:00Z",
            str(d),
        )
        assert result.returncode == 0, result.stderr
        logs.append(d)
    plain = write_shape(tmp_path / "plain", "v2-multi-ihuge-roll").directory
    assert not list(plain.glob("*.txnindex"))  # no abort: Kafka creates no file
    logs.append(plain)
    with caplog.at_level(logging.WARNING, logger="kafkalog"):
        for d in logs:
            want = committed_truth(d)
            for name, reader in COMMITTED_READERS.items():
                assert reader(d) == want, f"{d} / {name}"
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_read_uncommitted_never_looks(sources: list[Path], tmp_path: Path) -> None:
    """read_uncommitted decodes no control batch and checks nothing: the damage is no error."""
    from kafkalog.spark.options import parse_read_options
    from kafkalog.spark.plan import plan_read
    from kafkalog.spark.task import read_split

    d = tmp_path / sources[1].name
    shutil.copytree(sources[1], d)
    TXNINDEX_LOST["txnindex deleted"](d)
    opts = parse_read_options({"path": str(d.parent), "subscribe": d.name.rsplit("-", 1)[0]})
    splits, aborted = plan_read(opts)
    assert aborted == {}
    got = [len(b) for s in splits for b in read_split(s, include_headers=False, aborted=None)]
    assert sum(got) > len(committed_truth(d))
    with pytest.raises(Exception, match="rebuild-index"):
        committed_planner(d)


@pytest.mark.parametrize("roll", [False, True], ids=["same segment", "marker opens a segment"])
def test_a_fetch_from_an_empty_transactions_abort_marker_is_answered(
    tmp_path: Path, roll: bool
) -> None:
    """An ABORT of a transaction that wrote nothing to the partition (librdkafka purges unsent
    messages on abort; the partition was added): Kafka writes it no ``.txnindex`` entry, nor
    does kafkalog. A read_committed fetch starting exactly at that marker (a consumer tailing
    the log fetches from there) saw none of the producer's batches before it and refused the
    fetch as a lost entry, for ever (kafkalog serve's consume-transform-produce output, the
    seeded campaign tests/server/serve_campaign.py). The producer's previous batch is its
    COMMIT marker: the transaction was empty. A data batch of it before the marker, with the
    ``.txnindex`` lost, is still refused."""
    from kafkalog.log import AppendOrigin, Log, TopicConfig
    from kafkalog.log.abort_markers import UnlistedAbortError
    from kafkalog.records import Record, encode_batch
    from kafkalog.records.batch import encode_control_batch
    from kafkalog.records.model import ControlType

    def data(seq: int) -> bytes:
        records = [Record.of(b"x %d" % i) for i in range(3)]
        return encode_batch(
            records, producer_id=7, producer_epoch=0, base_sequence=seq, is_transactional=True
        )

    def marker(kind: ControlType) -> bytes:
        return encode_control_batch(kind, offset=0, timestamp=1, producer_id=7, producer_epoch=0)

    with Log(tmp_path / "t-0", TopicConfig()) as log:
        log.append(data(0))
        log.append(marker(ControlType.COMMIT), origin=AppendOrigin.COORDINATOR)  # offset 3
        if roll:
            log.roll()
        empty = log.append(marker(ControlType.ABORT), origin=AppendOrigin.COORDINATOR)
        assert empty.first_offset == 4 and log.aborted_transactions(0, 10) == []
        log.append(data(3))  # offsets 5-7, then aborted: listed
        log.append(marker(ControlType.ABORT), origin=AppendOrigin.COORDINATOR)
        for start in range(0, 9):
            read = log.fetch(start, 1 << 20, max_offset=9, include_aborted=True)
            assert read.region is not None and read.aborted is not None
            listed = [(a.first_offset, a.last_offset) for a in read.aborted]
            # (a fetch reads one segment: from the first, it ends before the aborted one)
            assert listed == ([] if roll and start < 4 else [(5, 8)]), start
        # the listed abort's entry lost: a fetch from its marker is refused, as before
        for txnindex in (tmp_path / "t-0").glob("*.txnindex"):
            txnindex.write_bytes(b"")
    with Log(tmp_path / "t-0", TopicConfig()) as log:
        assert log.fetch(4, 1 << 20, max_offset=9, include_aborted=True).region is not None
        with pytest.raises(UnlistedAbortError):
            log.fetch(8, 1 << 20, max_offset=9, include_aborted=True)
