"""Spark batch and stream reads of a damaged log (issue 23's damage matrix, the Spark readers):
with failOnDataLoss=true (the default) the query fails with kafkalog's message naming the file,
the byte and the repair command; with failOnDataLoss=false every record outside the damaged
batch is read, the damaged one skipped (and said in the executors' log), never a record read
wrong; nothing on disk changes."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from clirun import tree_snapshot
from damage_kinds import DAMAGES, segments, written
from kafkalog.records import LogReader

CASES = [
    "flip records",
    "flip base offset",
    "hole of 60 bytes",
    "base offset +16.7M, last batch of a segment",
    "segment .log missing, index left",
]


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return written(tmp_path_factory.mktemp("spark-damage"))


def _damaged_copy(source: Path, tmp_path: Path, damage: str) -> Path:
    d = tmp_path / "data" / source.name
    shutil.copytree(source, d)
    for extra in d.glob(".kafkalog*"):
        extra.unlink()
    DAMAGES[damage][0](d)
    names = {p.name for p in segments(d)}
    assert names != {p.name for p in segments(source)} or any(
        p.read_bytes() != (source / p.name).read_bytes() for p in segments(d)
    )
    return d


def _stream(spark: Any, data: Path, tmp_path: Path, fail: bool) -> tuple[Any, list[Any]]:
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    query = (
        spark.readStream.format("kafkalog")
        .option("path", str(data))
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", str(fail).lower())
        .load()
        .selectExpr("offset", "cast(value as string) as value")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(120)
    except Exception as e:  # the query's failure, as a StreamingQueryException
        return e, []
    parts = sorted(out.glob("part-*.parquet"))
    rows = spark.read.parquet(*map(str, parts)).collect() if parts else []
    return query.exception(), rows


@pytest.mark.parametrize("damage", CASES)
def test_batch_and_stream_fail_or_skip_as_asked(
    spark: Any, damage: str, source: Path, tmp_path: Path
) -> None:
    d = _damaged_copy(source, tmp_path, damage)
    before = tree_snapshot(d)
    data = d.parent
    reader = spark.read.format("kafkalog").option("path", str(data))
    with pytest.raises(Exception, match="kafkalog repair") as failed:
        reader.load().selectExpr("offset").collect()
    assert re.search(r"\.(log|index) at byte", str(failed.value)), damage
    rows = (
        reader.option("failOnDataLoss", "false")
        .load()
        .selectExpr("offset", "cast(value as string) as value")
        .collect()
    )
    offsets = sorted(r.offset for r in rows)
    assert all(r.value == f"value {r.offset:05d}" for r in rows), damage
    # a batch skipped (a hole may touch two), or the 50 records of a lost segment
    fewest = 250 if "missing" in damage else 297
    assert offsets == sorted(set(offsets)) and fewest <= len(offsets) < 300, (damage, len(offsets))

    error, _ = _stream(spark, data, tmp_path / "fail", fail=True)
    assert error is not None and "kafkalog repair" in str(error), (damage, error)
    error, streamed = _stream(spark, data, tmp_path / "skip", fail=False)
    assert error is None, (damage, error)
    assert sorted(r.offset for r in streamed) == offsets, damage
    assert all(r.value == f"value {r.offset:05d}" for r in streamed), damage
    assert tree_snapshot(d) == before


@pytest.mark.parametrize("fmt", ["kafkalog", "kafkalog_python"], ids=["jvm", "python"])
def test_a_last_batch_proven_out_of_line_fails_or_is_skipped(
    spark: Any, fmt: str, source: Path, tmp_path: Path
) -> None:
    """The log's last batch, its base offset flipped (no neighbour after it; kafkalog's own
    clean-close record proves it, tests/log/test_damage_last_batch.py): both Spark sources
    (the JVM hand-over and the Python one) fail naming file and byte, or skip it when asked."""
    from damage_kinds import flip_last_base

    d = tmp_path / "data" / source.name
    shutil.copytree(source, d)
    flip_last_base("high")(d)
    before = tree_snapshot(d)
    reader = spark.read.format(fmt).option("path", str(d.parent))
    with pytest.raises(Exception, match="kafkalog repair") as failed:
        reader.load().selectExpr("offset").collect()
    assert re.search(r"00250\.log at byte \d+", str(failed.value)), failed.value
    rows = reader.option("failOnDataLoss", "false").load().selectExpr("offset").collect()
    assert sorted(r.offset for r in rows) == list(range(299))
    assert tree_snapshot(d) == before


@pytest.mark.parametrize("damage", CASES)
@pytest.mark.parametrize("driver", ["true", "false"])
def test_pushed_counts_fail_or_skip_as_the_read_does(
    spark: Any, damage: str, driver: str, source: Path, tmp_path: Path
) -> None:
    """``count(*)`` and ``groupBy(partition).count()`` pushed down to the JVM source, counted on
    the driver (local mode) or in tasks: the same failure naming file and byte as a read, or
    with failOnDataLoss=false the same records as the read that skips the damaged batch."""
    d = _damaged_copy(source, tmp_path, damage)
    before = tree_snapshot(d)
    spark.conf.set("spark.kafkalog.jvm.driverCounts", driver)
    try:
        reader = spark.read.format("kafkalog").option("path", str(d.parent))
        with pytest.raises(Exception, match="kafkalog repair") as failed:
            reader.load().count()
        assert re.search(r"\.(log|index) at byte", str(failed.value)), damage
        skipping = reader.option("failOnDataLoss", "false")
        read = skipping.load().selectExpr("offset").collect()
        assert skipping.load().count() == len(read) < 300, damage
        by_partition = skipping.load().groupBy("partition").count().collect()
        assert [r["count"] for r in by_partition] == [len(read)], damage
    finally:
        spark.conf.unset("spark.kafkalog.jvm.driverCounts")
    assert tree_snapshot(d) == before


@pytest.mark.parametrize("damage", CASES)
def test_counts_without_crcs_check_structure(
    spark: Any, damage: str, source: Path, tmp_path: Path
) -> None:
    """``checkCrcs=false``: pushed-down counts read batch headers alone, so damage inside a
    batch's records (covered by its CRC only) goes unseen, as the option says; damage to the
    structure (an offset out of line, a hole, a lost segment) still fails naming file and
    byte, since the batch where a structural check fails is read and CRC-checked."""
    d = _damaged_copy(source, tmp_path, damage)
    reader = spark.read.format("kafkalog").option("path", str(d.parent))
    unchecked = reader.option("checkCrcs", "false")
    for driver in ("true", "false"):
        spark.conf.set("spark.kafkalog.jvm.driverCounts", driver)
        try:
            if damage == "flip records":
                assert unchecked.load().count() == 300, driver
                continue
            with pytest.raises(Exception, match="kafkalog repair") as failed:
                unchecked.load().count()
            assert re.search(r"\.(log|index) at byte", str(failed.value)), (damage, driver)
        finally:
            spark.conf.unset("spark.kafkalog.jvm.driverCounts")


#: damage done after verified batch summaries were kept (kafkalog.jvm.BatchSummaries): the
#: kinds above, the header fields a count and a window take from a summarized header, a torn
#: batch (its header whole, its length past the end)
WARM_CASES = [
    *CASES,
    "flip crc",
    "flip max timestamp",
    "flip record count",
    "last batch cut off",
]


def _outcome(query: Any, **options: str) -> tuple[str, Any]:
    """A query's answer, or its failure as kafkalog names it (file and byte, the repair hint)."""
    try:
        return "answer", query(**options)
    except Exception as e:  # a Spark failure carrying kafkalog's message
        named = sorted(set(re.findall(r"[\w-]+\.(?:log|index) at byte \d+", str(e))))
        return "failed", (named, "kafkalog repair" in str(e))


@pytest.mark.parametrize("damage", WARM_CASES)
def test_warm_summaries_fail_or_skip_as_without(
    spark: Any, damage: str, source: Path, tmp_path: Path
) -> None:
    """Summaries warm (a count, a full read and a timestamp window of the undamaged log checked
    and summarized every batch), then the damage done in place: counts (on the driver and in
    tasks), reads and windows, failOnDataLoss true and false, fail naming the same file and byte
    or answer the same as with summaries off. The one exception, as ARCHITECTURE.md says: a
    byte flipped inside a summarized batch's records (its header unchanged) is not seen by a
    count, which answers as the verified batch did; every read of the rows still fails."""
    from kafkalog.log import Log

    d = tmp_path / "data" / source.name
    shutil.copytree(source, d)
    for extra in d.glob(".kafkalog*"):
        extra.unlink()
    with Log(d, writable=False) as log:
        stamps = sorted(r.timestamp for r in log.records())
    lo, hi = stamps[100], stamps[140]
    where = f"timestamp >= timestamp_millis({lo}) and timestamp < timestamp_millis({hi})"
    spark.conf.set("spark.kafkalog.batchSummaries.dir", str(tmp_path / "summaries"))
    try:

        def load(**options: str) -> Any:
            reader = spark.read.format("kafkalog").option("path", str(d.parent))
            return reader.options(**options).load()

        queries = {
            "count(*)": lambda **o: load(**o).count(),
            "by partition": lambda **o: [
                tuple(r) for r in load(**o).groupBy("partition").count().collect()
            ],
            "window": lambda **o: load(**o).where(where).count(),
            "offsets": lambda **o: sorted(
                r.offset for r in load(**o).selectExpr("offset").collect()
            ),
        }
        assert load().count() == 300
        assert len(load().selectExpr("offset").collect()) == 300
        assert load().where(where).count() == sum(1 for s in stamps if lo <= s < hi)
        assert list((tmp_path / "summaries").glob("*.sum"))
        undamaged = {name: query() for name, query in queries.items() if name != "offsets"}
        DAMAGES[damage][0](d)
        before = tree_snapshot(d)
        for driver in ("true", "false"):
            spark.conf.set("spark.kafkalog.jvm.driverCounts", driver)
            for name, query in queries.items():
                if driver == "false" and name != "count(*)":
                    continue  # only counts are made on the driver or in tasks
                for fail in ("true", "false"):
                    warm = _outcome(query, failOnDataLoss=fail)
                    off = _outcome(query, failOnDataLoss=fail, batchSummaries="false")
                    what = (damage, name, f"failOnDataLoss={fail}", f"driver={driver}", warm, off)
                    if damage == "flip records" and name != "offsets":
                        # the flipped batch summarized: counted or skipped as verified
                        assert warm == ("answer", undamaged[name]), what
                        continue
                    assert warm == off, what
    finally:
        spark.conf.unset("spark.kafkalog.jvm.driverCounts")
        spark.conf.unset("spark.kafkalog.batchSummaries.dir")
    assert tree_snapshot(d) == before


@pytest.fixture(scope="module")
def multi_record_sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Logs in real writers' shapes, batches of several records (tests/read_shapes.py)."""
    from read_shapes import write_shape

    root = tmp_path_factory.mktemp("spark-shapes")
    names = ["v2-multi-i1", "v2-txn-multi-i1-roll"]
    return {name: write_shape(root / name, name).directory for name in names}


@pytest.mark.parametrize("fmt", ["kafkalog", "kafkalog_python"], ids=["jvm", "python"])
@pytest.mark.parametrize("delta", [2, -2])
def test_a_base_offset_moved_by_less_than_a_batch_is_never_read_wrong(
    spark: Any, fmt: str, delta: int, multi_record_sources: dict[str, Path], tmp_path: Path
) -> None:
    """A batch's base offset (outside the CRC) moved by 2, overlapping a neighbour by less than
    a batch: the read, a pushed-down count and a count without CRC checks fail naming the
    moved batch's byte, never its good neighbour's; with failOnDataLoss=false every record is
    the one written at its offset, and only the moved batch's are missing. (The JVM source
    decoded a batch moved up before it saw the batch after it, and handed its records out at
    offsets they never had.)"""
    from damage_kinds import shifted_batch
    from kafkalog.log import Log

    # one shape each way: a transactional log's markers (no rows) beside the batch moved up
    name = "v2-txn-multi-i1-roll" if delta > 0 else "v2-multi-i1"
    for source in [multi_record_sources[name]]:
        with Log(source, writable=False) as log:
            pristine = {r.offset: r.value for r in log.records()}
        d = tmp_path / name / source.name
        shutil.copytree(source, d)
        for extra in d.glob(".kafkalog*"):
            extra.unlink()
        seg, position = shifted_batch(d, delta)
        moved = next(e for e in LogReader(seg.read_bytes()) if e.position == position)
        moved_count = sum(1 for _ in moved.records()) if not moved.is_control else 0
        before = tree_snapshot(d)
        reader = spark.read.format(fmt).option("path", str(d.parent))
        where = f"{name} {delta:+d} at byte {position}"
        queries: dict[str, Any] = {"read": lambda r: r.load().selectExpr("offset").collect()}
        if fmt == "kafkalog":  # the JVM source's header-only counts (the Python one reads)
            queries["count"] = lambda r: r.load().count()
            queries["count, no CRCs"] = lambda r: r.option("checkCrcs", "false").load().count()
        for query_name, query in queries.items():
            with pytest.raises(Exception, match="kafkalog repair") as failed:
                query(reader)
            assert f"{seg.name} at byte {position}:" in str(failed.value), (where, query_name)
        skipping = reader.option("failOnDataLoss", "false")
        rows = skipping.load().selectExpr("offset", "value").collect()
        wrong = [r.offset for r in rows if pristine.get(r.offset) != r.value]
        assert not wrong, (where, wrong[:5])
        assert len(rows) == len(pristine) - moved_count, where
        assert skipping.load().count() == len(rows), where
        assert tree_snapshot(d) == before, where


@pytest.fixture(scope="module")
def txn_sources(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    from damage_kinds import kafka_txn_log_and_shapes

    return kafka_txn_log_and_shapes(
        tmp_path_factory.mktemp("spark-txn"),
        ["v2-txn-single-i4096", "v2-txn-nested-aborts-follower-i1-roll"],
    )


@pytest.mark.parametrize("damage", ["txnindex deleted", "txnindex cut short"])
@pytest.mark.parametrize("fmt", ["kafkalog", "kafkalog_python"], ids=["jvm", "python"])
def test_a_lost_txnindex_is_never_read_as_committed(
    spark: Any, fmt: str, damage: str, txn_sources: list[Path], tmp_path: Path
) -> None:
    """A ``.txnindex`` deleted or cut short (tests/damage_kinds.py ``TXNINDEX_LOST``) under a
    read_committed batch read and count of both Spark sources (the JVM meets the ABORT marker
    and hands the split to the Python reader): exactly the committed records, or a failure
    naming the ``.log``, the byte and ``kafkalog rebuild-index``, as the Python read planned
    without Spark does; with failOnDataLoss=false the read goes on, every committed record in
    it."""
    from damage_kinds import TXNINDEX_LOST, committed_planner, committed_truth

    outcomes = []
    for k, source in enumerate(txn_sources):
        d = tmp_path / str(k) / source.name
        shutil.copytree(source, d)
        want = committed_truth(d)
        lost = TXNINDEX_LOST[damage](d)
        before = tree_snapshot(d)
        log_path = str(lost)[: -len(".txnindex")] + ".log"
        try:
            expected: list[int] | None = committed_planner(d)
        except Exception:
            expected = None
        reader = (
            spark.read.format(fmt)
            .option("path", str(d.parent))
            .option("isolationLevel", "read_committed")
        )
        if expected is None:
            for counted in (False, True):
                with pytest.raises(Exception, match="rebuild-index") as failed:
                    loaded = reader.load()
                    loaded.count() if counted else loaded.selectExpr("offset").collect()
                assert re.search(re.escape(log_path) + r" at byte \d+", str(failed.value))
            rows = reader.option("failOnDataLoss", "false").load().selectExpr("offset").collect()
            assert set(want) <= {r.offset for r in rows}
            outcomes.append("refused")
        else:
            assert expected == want
            rows = reader.load().selectExpr("offset").collect()
            assert sorted(r.offset for r in rows) == want, (fmt, damage, d)
            assert reader.load().count() == len(want)
            outcomes.append("read")
        assert tree_snapshot(d) == before
    assert "refused" in outcomes


@pytest.mark.parametrize("fmt", ["kafkalog", "kafkalog_python"], ids=["jvm", "python"])
def test_a_log_compacted_by_kafka_before_3_1_reads_as_healthy(
    spark: Any, fmt: str, tmp_path: Path
) -> None:
    """ABORT markers of emptied transactions that no ``.txnindex`` entry lists and no delete
    horizon marks, as a Kafka older than 3.1 leaves them (tests/read_shapes.py
    ``compacted_before_kafka_31``): the JVM hands each such split to the Python reader, which
    looks back and finds nothing of the transaction left; both sources read exactly the
    committed records, and count them."""
    from damage_kinds import committed_truth
    from read_shapes import compacted_before_kafka_31, write_shape

    for name in ["v2-txn-multi-i1-roll", "v2-txn-nested-aborts-follower-i1-roll"]:
        d = compacted_before_kafka_31(write_shape(tmp_path / "w", name), tmp_path / "pre31")
        want = committed_truth(d)
        before = tree_snapshot(d)
        reader = (
            spark.read.format(fmt)
            .option("path", str(d.parent))
            .option("isolationLevel", "read_committed")
        )
        rows = reader.load().selectExpr("offset").collect()
        assert sorted(r.offset for r in rows) == want, (fmt, name)
        assert reader.load().count() == len(want)
        assert tree_snapshot(d) == before
