"""``df.write.format("kafkalog")`` against topic limits, failed commits and live brokers: what
Spark's Kafka sink (a producer in front of a broker) would do, checked on the files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kafka.record.memory_records import MemoryRecords

from kafkalog.log import Log


def _write(df: Any, path: Path, **options: str) -> None:
    writer = df.write.format("kafkalog").option("path", str(path)).mode("append")
    for k, v in options.items():
        writer = writer.option(k, v)
    writer.save()


def _rows(spark: Any, n: int, size: int = 100) -> Any:
    """``n`` rows of ``size``-byte values that do not compress away (sha2 hex of the id)."""
    return spark.range(0, n, numPartitions=1).selectExpr(
        f"cast(substr(repeat(sha2(cast(id as string), 512), {size // 128 + 1}), 1, {size})"
        " as binary) as value"
    )


def _batches(directory: Path) -> list[tuple[int, int, int]]:
    """(base offset, record count, size in bytes) of every batch, decoded by kafka-python."""
    out = []
    for name in sorted(os.listdir(directory)):
        if name.endswith(".log"):
            records = MemoryRecords((directory / name).read_bytes())
            while (batch := records.next_batch()) is not None:
                assert batch.validate_crc()
                out.append((batch.base_offset, len(list(batch)), batch.size_in_bytes))
    return out


def _verify(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kafkalog", "verify", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize(
    ("options", "limit"),
    [
        ({"max.message.bytes": "2000"}, 2000),
        ({"max.message.bytes": "2000", "compression": "gzip"}, 2000),
        ({"segment.bytes": "3000"}, 3000),
    ],
)
def test_batches_fit_the_topic_limits(
    spark: Any, tmp_path: Path, options: dict[str, str], limit: int
) -> None:
    """Rows that each fit are all written, in batches the topic takes (a producer would split
    a refused batch); the job used to fail at the commit on a 20 KB batch."""
    data = tmp_path / "data"
    _write(_rows(spark, 200), data, topic="t", **options)
    batches = _batches(data / "t-0")
    assert sum(n for _, n, _ in batches) == 200
    assert [b for b, _, _ in batches] == sorted(b for b, _, _ in batches)
    assert max(size for _, _, size in batches) <= limit
    assert len(batches) > 1
    log = Log(data / "t-0", writable=False)
    assert [r.offset for r in log.records()] == list(range(200))
    log.close()
    assert _verify(data).returncode == 0, _verify(data).stdout


def test_row_larger_than_max_message_bytes_named(spark: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    _write(_rows(spark, 2, 10), data, topic="t")
    with pytest.raises(Exception, match=r"topic 't' partition 0 .*max\.message\.bytes \(2000\)"):
        _write(_rows(spark, 3, 5000), data, topic="t", **{"max.message.bytes": "2000"})
    log = Log(data / "t-0", writable=False)
    assert log.log_end_offset == 2
    log.close()


def test_failed_commit_removes_the_partitions_it_created(spark: Any, tmp_path: Path) -> None:
    """The commit creates a-0 and a-1, then finds b-0 locked by another writer: the job fails,
    and the new topic must not stay behind as empty partitions (a later job would take its
    partition count from them)."""
    from kafkalog.log.checkpoints import OffsetCheckpoint

    data = tmp_path / "data"
    _write(_rows(spark, 3, 10), data, topic="b")
    df = spark.range(0, 6, numPartitions=1).selectExpr(
        "cast(cast(id as string) as binary) as value",
        "case when id < 4 then 'a' else 'b' end as topic",
        "cast(case when id < 4 then id % 2 else 0 end as int) as partition",
    )
    holder = Log(data / "b-0")  # another writer holds b-0
    try:
        with pytest.raises(Exception, match=r"(?i)lock"):
            _write(df, data, numPartitions="2")
    finally:
        holder.close()
    assert sorted(p.name for p in data.iterdir() if p.is_dir()) == ["b-0"]
    assert set(OffsetCheckpoint.read(data / "recovery-point-offset-checkpoint")) == {("b", 0)}
    assert set(OffsetCheckpoint.read(data / "log-start-offset-checkpoint")) == {("b", 0)}
    log = Log(data / "b-0", writable=False)
    assert log.log_end_offset == 3
    log.close()
    _write(df.where("topic = 'a'"), data, numPartitions="4")  # a new topic again: 4 partitions
    assert sorted(n for n in os.listdir(data) if n.startswith("a-")) == [f"a-{p}" for p in range(4)]
    assert _verify(data).returncode == 0


BROKER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.lockf(fd, fcntl.LOCK_EX)
print("LOCKED", os.getpid(), flush=True)
sys.stdin.readline()
"""


def _root_files(data: Path) -> dict[str, tuple[bytes, int]]:
    return {
        n: ((data / n).read_bytes(), (data / n).stat().st_mtime_ns)
        for n in os.listdir(data)
        if (data / n).is_file()
    }


def test_directory_of_a_running_broker_left_untouched(spark: Any, tmp_path: Path) -> None:
    """A running broker holds ``.lock`` and has deleted ``.kafka_cleanshutdown``; the writer
    used to refuse its partitions but still rewrite the root checkpoints (which the broker
    owns) and leave a clean-shutdown marker, so a broker crash would skip log recovery."""
    data = tmp_path / "data"
    _write(_rows(spark, 5, 10), data, topic="t")
    (data / ".kafka_cleanshutdown").unlink()  # what a broker does when it starts
    broker = subprocess.Popen(
        [sys.executable, "-c", BROKER, str(data / ".lock")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert broker.stdout is not None
        assert broker.stdout.readline().split()[0] == "LOCKED"
        os.utime(data / "recovery-point-offset-checkpoint", ns=(10**9, 10**9))
        os.utime(data / "log-start-offset-checkpoint", ns=(10**9, 10**9))
        before = _root_files(data)
        for df, options in [
            (_rows(spark, 5, 10), {"topic": "t"}),
            (_rows(spark, 5, 10), {"topic": "new"}),
        ]:
            with pytest.raises(Exception, match=r"(?i)kafka broker is using this data directory"):
                _write(df, data, **options)
            assert _root_files(data) == before
            assert sorted(p.name for p in data.iterdir() if p.is_dir()) == ["t-0"]
    finally:
        assert broker.stdin is not None
        broker.stdin.close()
        broker.wait()
    log = Log(data / "t-0", writable=False)
    assert log.log_end_offset == 5
    log.close()


@pytest.mark.parametrize(
    ("options", "codec"),
    [
        ({"compression.type": "gzip"}, 1),
        ({"compression.type": "zstd", "compression.zstd.level": "9", "compression": "lz4"}, 4),
        ({"compression.type": "uncompressed", "compression": "lz4"}, 0),
        ({"compression.type": "producer", "compression": "snappy"}, 2),
    ],
)
def test_topic_compression_type_is_what_gets_stored(
    spark: Any, tmp_path: Path, options: dict[str, str], codec: int
) -> None:
    """A broker stores batches in the topic's compression.type (recompressing the producer's),
    unless it is ``producer``; the option was validated and then ignored."""
    data = tmp_path / "data"
    _write(_rows(spark, 50), data, topic="t", **options)
    raw = (data / "t-0" / "00000000000000000000.log").read_bytes()
    records = MemoryRecords(raw)
    values = []
    while (batch := records.next_batch()) is not None:
        assert batch.validate_crc()
        assert batch.compression_type == codec
        values.extend(bytes(r.value) for r in batch)
    assert len(values) == 50 and all(len(v) == 100 for v in values)
    assert _verify(data).returncode == 0


@pytest.mark.parametrize("micros", [-1, -5000, -86_400_000_000 * 365])
def test_timestamps_before_1970_refused(spark: Any, tmp_path: Path, micros: int) -> None:
    """Spark's Kafka sink refuses them (the producer takes timestamps >= 0 or null); -1 us
    was stored as record timestamp -1, which Kafka reads as "no timestamp"."""
    data = tmp_path / "data"
    df = spark.range(0, 3, numPartitions=1).selectExpr(
        "cast('v' as binary) as value",
        f"timestamp_micros(case when id = 1 then {micros} else 0 end) as timestamp",
    )
    with pytest.raises(
        Exception, match=r"topic 't' partition 0 has timestamp 19\d\d-.*before 1970"
    ):
        _write(df, data, topic="t")
    assert not (data / "t-0").exists()


def test_timestamps_truncated_to_ms_far_future_and_null(spark: Any, tmp_path: Path) -> None:
    import time

    data = tmp_path / "data"
    df = spark.createDataFrame(
        [(b"a", 1_700_000_000_000_999), (b"b", 253_402_300_799_999_999), (b"c", None)],
        "value binary, us long",
    ).selectExpr("value", "timestamp_micros(us) as timestamp")
    start = int(time.time() * 1000)
    _write(df.coalesce(1), data, topic="t")
    end = int(time.time() * 1000)
    records = MemoryRecords((data / "t-0" / "00000000000000000000.log").read_bytes())
    stamps = {}
    while (batch := records.next_batch()) is not None:
        stamps.update({bytes(r.value): r.timestamp for r in batch})
    assert stamps[b"a"] == 1_700_000_000_000
    assert stamps[b"b"] == 253_402_300_799_999
    assert start <= stamps[b"c"] <= end


def _job(path: Path, tag: str, parts: list[list[int]]) -> tuple[Any, list[Any]]:
    """A writer and its tasks' commit messages, one task per list of target partitions."""
    import pyarrow as pa
    from pyspark.sql.types import BinaryType, IntegerType, StructField, StructType

    from kafkalog.spark.writer import KafkaLogWriter, parse_write_options

    schema = StructType(
        [StructField("value", BinaryType()), StructField("partition", IntegerType())]
    )
    options = {"path": str(path), "topic": "t", "numPartitions": "2"}
    writer = KafkaLogWriter(parse_write_options(options), schema, False)
    messages = []
    for n, task in enumerate(parts):
        batch = pa.RecordBatch.from_pydict(
            {
                "value": [f"{tag}{n}.{i}".encode() for i in range(len(task))],
                "partition": pa.array(task, pa.int32()),
            }
        )
        messages.append(writer.write(iter([batch])))
    return writer, messages


def _values(path: Path) -> dict[int, list[tuple[int, bytes]]]:
    out = {}
    for p in (0, 1):
        log = Log(path / f"t-{p}", writable=False)
        out[p] = [(r.offset, r.value) for r in log.records()]
        log.close()
    return out


@pytest.mark.parametrize("wait", [60.0, 0.3])
def test_concurrent_commits_one_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wait: float
) -> None:
    """Job B commits while job A is half-way through its commit (B takes the partitions in
    the other order). B used to write the clean-shutdown marker and the root checkpoints while
    A was still appending. B now waits for A and then commits all its rows, or, after the
    wait, is refused by name with none of them."""
    import threading

    from kafkalog.spark import writer as module

    monkeypatch.setattr(module, "_COMMIT_LOCK_WAIT", wait)
    data = tmp_path / "data"
    a, a_messages = _job(data, "a", [[0, 0, 1, 1]])
    b, b_messages = _job(data, "b", [[1], [0]])
    append = module._append_file
    seen: dict[str, Any] = {}

    def b_commit() -> None:
        try:
            b.commit(b_messages)
        except Exception as e:
            seen["error"] = e

    def hooked(log: Any, path: str) -> None:
        append(log, path)
        if "thread" not in seen:
            seen["thread"] = threading.Thread(target=b_commit)
            seen["thread"].start()
            seen["thread"].join(0.6)  # B runs (and, with a short wait, gives up) meanwhile
            seen["marker"] = (data / ".kafka_cleanshutdown").exists()

    monkeypatch.setattr(module, "_append_file", hooked)
    a.commit(a_messages)
    seen["thread"].join(10)
    assert seen["marker"] is False  # nobody declared the directory cleanly closed mid-commit
    a_rows = {0: [b"a0.0", b"a0.1"], 1: [b"a0.2", b"a0.3"]}
    values = _values(data)
    if wait > 1:
        assert "error" not in seen
        expected = {0: [*a_rows[0], b"b1.0"], 1: [*a_rows[1], b"b0.0"]}
    else:
        assert "another writer has the data directory open" in str(seen["error"])
        expected = a_rows
    assert values == {p: list(enumerate(v)) for p, v in expected.items()}
    assert (data / ".kafka_cleanshutdown").exists()
    assert _verify(data).returncode == 0


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("numPartitions", "0"),
        ("numPartitions", "-1"),
        ("numPartitions", "abc"),
        ("maxRecordsPerBatch", "0"),
        ("maxRecordsPerBatch", "1.5"),
    ],
)
def test_counts_must_be_positive(tmp_path: Path, name: str, value: str) -> None:
    """0 partitions quietly meant 1, -1 failed every task with "partition 0 does not exist",
    and "abc" escaped as a bare ValueError."""
    from kafkalog.spark.options import OptionError
    from kafkalog.spark.writer import parse_write_options

    with pytest.raises(OptionError, match=rf"option {name}={value!r} must be a positive integer"):
        parse_write_options({"path": str(tmp_path), "topic": "t", name: value})
    assert parse_write_options({"path": str(tmp_path), name: "3"}) is not None


@pytest.mark.parametrize(
    ("offset_ms", "options", "refused"),
    [
        (2 * 3600_000, {"message.timestamp.after.max.ms": "3600000"}, "after"),
        (600_000, {"message.timestamp.after.max.ms": "3600000"}, None),
        (-2 * 86400_000, {"message.timestamp.before.max.ms": "86400000"}, "before"),
        (-2 * 86400_000, {"message.timestamp.difference.max.ms": "86400000"}, "before"),
        (-3600_000, {"message.timestamp.before.max.ms": "86400000"}, None),
        (
            2 * 3600_000,
            {
                "message.timestamp.after.max.ms": "3600000",
                "message.timestamp.type": "LogAppendTime",
            },
            None,
        ),
    ],
)
def test_timestamp_window_of_the_topic(
    spark: Any, tmp_path: Path, offset_ms: int, options: dict[str, str], refused: str | None
) -> None:
    """A broker refuses a CreateTime batch with a timestamp outside the topic's window; the
    options were validated and then ignored."""
    import time

    data = tmp_path / "data"
    stamp = int(time.time() * 1000) + offset_ms
    df = spark.range(0, 3, numPartitions=1).selectExpr(
        "cast('v' as binary) as value",
        f"timestamp_millis(case when id = 1 then {stamp} else unix_millis(now()) end) as timestamp",
    )
    if refused:
        with pytest.raises(
            Exception, match=rf"topic 't' partition 0 .*message\.timestamp\.{refused}\.max\.ms"
        ):
            _write(df, data, topic="t", **options)
        assert not (data / "t-0").exists()
    else:
        _write(df, data, topic="t", **options)
        assert sum(n for _, n, _ in _batches(data / "t-0")) == 3


@pytest.mark.parametrize(
    ("name", "topic"),
    [
        ("real-kafka3.9-snapshot-zk-gzip-leader-epochs-biggerbrain", "lsx1"),
        ("real-kafka2.8.0-zk-snappy-seanorth", "some-topic"),
        ("real-kafka2.1-snapshot-zk-large-index-william0423", "debug_topic"),
    ],
)
def test_append_to_a_directory_kafka_wrote(
    spark: Any, tmp_path: Path, name: str, topic: str
) -> None:
    """A copy of a real broker's data directory takes an append (LogAppendTime): offsets go
    on from Kafka's, the old records stay, kafka-python reads every batch, verify passes."""
    import shutil
    import time

    from provenance import FIXTURES

    data = tmp_path / name
    shutil.copytree(FIXTURES / name, data)
    for p in [data, *data.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    log = Log(data / f"{topic}-0", writable=False)
    old = [(r.offset, r.value) for r in log.records()]
    log.close()
    start = int(time.time() * 1000)
    _write(_rows(spark, 30, 20), data, topic=topic, **{"message.timestamp.type": "LogAppendTime"})
    log = Log(data / f"{topic}-0", writable=False)
    now = [(r.offset, r.value) for r in log.records()]
    log.close()
    assert now[: len(old)] == old
    assert [o for o, _ in now] == list(range(len(old) + 30))
    tail = _batches(data / f"{topic}-0")[-1]
    assert tail[0] == len(old) and tail[1] == 30
    records = MemoryRecords((data / f"{topic}-0" / f"{len(old):020d}.log").read_bytes())
    batch = records.next_batch()
    assert batch is not None and batch.timestamp_type == 1
    assert start <= batch.max_timestamp <= int(time.time() * 1000)
    result = _verify(data)
    assert result.returncode == 0, result.stdout


def test_commit_failing_half_way_truncates_back(tmp_path: Path) -> None:
    """The second task's staging file is gone by the commit: the first task's rows, already
    appended, are truncated away and the staging directory removed."""
    data = tmp_path / "data"
    first, messages = _job(data, "a", [[0, 1]])
    first.commit(messages)
    writer, messages = _job(data, "b", [[0, 0, 1], [1, 0]])
    os.remove(messages[1].files[0][2])
    with pytest.raises(FileNotFoundError):
        writer.commit(messages)
    writer.abort(messages)  # what Spark does after a failed commit
    assert _values(data) == {0: [(0, b"a0.0")], 1: [(0, b"a0.1")]}
    assert not (tmp_path / "data.kafkalog-staging").exists()
    assert _verify(data).returncode == 0
    writer, messages = _job(data, "c", [[1, 0]])
    writer.commit(messages)
    assert _values(data) == {0: [(0, b"a0.0"), (1, b"c0.1")], 1: [(0, b"a0.1"), (1, b"c0.0")]}
