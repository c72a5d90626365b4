"""The producer-style writer: batches on disk as Kafka's producer would make them.

* eight producing threads: every record stored once, each thread's records in its send order,
  each future resolving to the offset that holds exactly that record's bytes;
* ``batch.size`` bounds the batches written, ``linger.ms`` holds a lone record back until it
  passes (and ``flush()`` forces it out), ``compression.type`` compresses the batches, which
  kafka-python decodes;
* ``durable=True`` resolves a future only once the record is fsynced;
* the Kafka names and defaults, unknown settings refused, errors reaching the futures.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from kafkalog.errors import InvalidRecordError, KafkalogError
from kafkalog.log import Log, TopicConfig
from kafkalog.log.batching_writer import PRODUCER_DEFAULTS, BatchingWriter, RecordFuture
from kafkalog.records import Compression, Header, RecordBatch


def test_many_threads_every_record_once_in_order(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", TopicConfig(segment_bytes=256 * 1024))
    sent: dict[int, list[tuple[bytes, RecordFuture]]] = {}
    with BatchingWriter(log, batch_size=4096, linger_ms=1) as writer:

        def produce(t: int) -> None:
            mine = sent.setdefault(t, [])
            for i in range(1500):
                value = b"%d:%d:" % (t, i) + bytes([i % 256]) * (i % 300)
                mine.append((value, writer.send(value, key=b"k%d" % t, headers=[("i", b"%d" % i)])))

        threads = [threading.Thread(target=produce, args=(t,)) for t in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        writer.flush()
    by_offset = {r.offset: r for r in log.records()}
    assert len(by_offset) == 8 * 1500 == log.log_end_offset
    assert len(log.segments) > 1  # rolled under the writer
    for t, records in sent.items():
        offsets = [f.result(0) for _, f in records]
        assert offsets == sorted(offsets)  # a thread's records keep their order
        for i, (value, future) in enumerate(records):
            stored = by_offset[future.result(0)]
            assert stored.value == value and stored.key == b"k%d" % t
            assert stored.headers == (Header("i", b"%d" % i),)
    log.close()


def test_batch_size_bounds_the_batches(tmp_path: Path) -> None:
    with (
        Log(tmp_path / "t-0") as log,
        BatchingWriter(log, {"batch.size": 2000, "linger.ms": 50}) as writer,
    ):
        futures = [writer.send(b"v" * 100, timestamp=1_700_000_000_000) for _ in range(200)]
        writer.flush()
        assert [f.result(0) for f in futures] == list(range(200))
        batches = [b for b in log.batches() if isinstance(b, RecordBatch)]
        assert all(b.size_in_bytes <= 2000 for b in batches)
        assert len(batches) <= 200 * 121 // 1900 + 2  # full batches, not one per record


def test_linger_holds_a_record_and_flush_forces_it_out(tmp_path: Path) -> None:
    with Log(tmp_path / "t-0") as log, BatchingWriter(log, linger_ms=300) as writer:
        first = writer.send(b"a")
        time.sleep(0.05)
        assert not first.done() and log.log_end_offset == 0  # lingering
        assert first.result(timeout=5) == 0  # out once linger.ms passed
        second = writer.send(b"b")
        started = time.monotonic()
        writer.flush()
        assert second.done() and time.monotonic() - started < 0.25
        assert second.result() == 1


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compression_type(tmp_path: Path, codec: str) -> None:
    from kafka.record.memory_records import MemoryRecords

    with Log(tmp_path / "t-0") as log:
        with BatchingWriter(log, compression_type=codec, linger_ms=1000) as writer:
            for i in range(50):
                writer.send(b"value %d " % i * 10, key=b"%d" % i)
        (batch,) = list(log.batches())
        assert isinstance(batch, RecordBatch) and batch.compression is Compression.parse(codec)
        oracle = MemoryRecords(log.read(0, 1 << 20)).next_batch()
        assert oracle.validate_crc()
        assert [bytes(r.value) for r in oracle] == [b"value %d " % i * 10 for i in range(50)]


def test_durable_futures_resolve_after_the_fsync(tmp_path: Path) -> None:
    with Log(tmp_path / "t-0") as log, BatchingWriter(log, durable=True, linger_ms=0) as writer:
        for i in range(200):
            future = writer.send(b"%d" % i)
            offset = future.result(timeout=10)
            assert writer.shared.durable_offset > offset
        assert writer.shared.fsyncs <= 200


def test_settings_and_errors(tmp_path: Path) -> None:
    assert PRODUCER_DEFAULTS["batch.size"] == 16384 and PRODUCER_DEFAULTS["linger.ms"] == 5
    with Log(tmp_path / "t-0", TopicConfig(max_message_bytes=1000)) as log:
        with pytest.raises(KafkalogError, match="unknown producer setting 'acks'"):
            BatchingWriter(log, {"acks": "all"})
        with pytest.raises(KafkalogError, match=r"linger\.ms"):
            BatchingWriter(log, linger_ms=-1)
        writer = BatchingWriter(log, linger_ms=0)
        with pytest.raises(InvalidRecordError):
            writer.send(b"x", timestamp=-5)
        too_big = writer.send(b"x" * 5000)  # larger than max.message.bytes: its append fails
        with pytest.raises(InvalidRecordError, match=r"max\.message\.bytes"):
            too_big.result(timeout=10)
        assert isinstance(too_big.exception(), InvalidRecordError)
        assert writer.send(b"small").result(timeout=10) == 0  # the writer goes on
        writer.close()
        with pytest.raises(KafkalogError, match="closed"):
            writer.send(b"late")
