"""``kafkalog ingest`` as a user runs it: JSON Lines, CSV and Parquet into a partition that
kafkalog, Kafka's dump format and an independent decoder all read back."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from kafka.record.memory_records import MemoryRecords

from clirun import kafkalog_here
from kafkalog.log import Log


def test_ingest_jsonl_then_append(tmp_path: Path) -> None:
    src = tmp_path / "events.jsonl"
    lines = [json.dumps({"user": f"u{i % 3}", "ts": 1767225600000 + i, "n": i}) for i in range(500)]
    src.write_text("\n".join(lines) + "\n")
    data = tmp_path / "data"
    result = kafkalog_here(
        "ingest",
        str(src),
        "--data",
        str(data),
        "--topic",
        "events",
        "--key-field",
        "user",
        "--timestamp-field",
        "ts",
        "--compression",
        "zstd",
        "--config",
        "segment.bytes=3000",
    )
    assert result.returncode == 0, result.stderr
    assert "ingested 500 records into events-0 at offsets 0..499" in result.stdout
    log = Log(data / "events-0", writable=False)
    records = list(log.records())
    assert [r.value.decode() for r in records] == lines
    assert [r.key for r in records[:3]] == [b"u0", b"u1", b"u2"]
    assert records[10].timestamp == 1767225600010
    assert len(log.segments) > 1
    raw = Path(log.segments[0].log.path).read_bytes()
    batch = MemoryRecords(raw).next_batch()  # kafka-python reads what we wrote
    assert batch is not None and batch.validate_crc()
    log.close()
    again = kafkalog_here("ingest", str(src), "--data", str(data), "--topic", "events")
    assert "at offsets 500..999" in again.stdout
    assert kafkalog_here("verify", str(data)).returncode == 0


def test_ingest_csv_and_parquet(tmp_path: Path) -> None:
    csv = tmp_path / "orders.csv"
    csv.write_text("id,amount,at\n1,10,2026-01-01T00:00:00Z\n2,20,2026-01-01T00:00:01Z\n")
    data = tmp_path / "data"
    result = kafkalog_here(
        "ingest",
        str(csv),
        "--data",
        str(data),
        "--topic",
        "orders",
        "--key-column",
        "id",
        "--timestamp-column",
        "at",
    )
    assert result.returncode == 0, result.stderr
    log = Log(data / "orders-0", writable=False)
    rows = list(log.records())
    assert [json.loads(r.value)["amount"] for r in rows] == [10, 20]
    assert [r.key for r in rows] == [b"1", b"2"]
    assert rows[1].timestamp == 1767225601000
    log.close()
    parquet = tmp_path / "values.parquet"
    pq.write_table(pa.table({"value": [b"a", b"b", None], "k": ["x", "y", "z"]}), parquet)
    result = kafkalog_here(
        "ingest",
        str(parquet),
        "--data",
        str(data),
        "--topic",
        "vals",
        "--partition",
        "3",
        "--key-column",
        "k",
    )
    assert result.returncode == 0, result.stderr
    log = Log(data / "vals-3", writable=False)
    assert [(r.key, r.value) for r in log.records()] == [(b"x", b"a"), (b"y", b"b"), (b"z", None)]
    log.close()


def test_ingest_errors_are_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "x.jsonl"
    bad.write_text('{"a": 1}\nnot json\n')
    result = kafkalog_here(
        "ingest", str(bad), "--data", str(tmp_path / "d"), "--topic", "t", "--key-field", "a"
    )
    assert result.returncode == 2 and "line 2: not JSON" in result.stderr
    assert "Traceback" not in result.stderr
    result = kafkalog_here(
        "ingest",
        str(bad),
        "--data",
        str(tmp_path / "d"),
        "--topic",
        "t",
        "--config",
        "segment.bytes=3",
    )
    assert result.returncode == 2 and "segment.bytes" in result.stderr


def test_ingest_refuses_an_illegal_topic_before_writing(tmp_path: Path) -> None:
    src = tmp_path / "x.jsonl"
    src.write_text('{"a": 1}\n')
    result = kafkalog_here("ingest", str(src), "--data", str(tmp_path / "d"), "--topic", "../up")
    assert result.returncode == 2, result.stderr
    assert "topic name '../up' is illegal" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "up-0").exists()
