"""Fetch's isolation levels over transactions already in a log (written through ``Log``, as a
broker's would be): read_committed stops at the last stable offset and drops aborted records by
the ``.txnindex``; read_uncommitted sees everything."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from kafka_clients import config, consumer_settings
from kafkalog.log import LogDir
from kafkalog.records import ControlType, Record, encode_batch, encode_control_batch
from kafkalog.server import ServerThread


def _txn(log: object, pid: int, values: list[bytes]) -> None:
    records = [Record.of(v, timestamp=1000) for v in values]
    log.append(  # type: ignore[attr-defined]
        encode_batch(
            records, producer_id=pid, producer_epoch=0, base_sequence=0, is_transactional=True
        )
    )


def _marker(log: object, pid: int, kind: ControlType) -> None:
    end = log.log_end_offset  # type: ignore[attr-defined]
    log.append(  # type: ignore[attr-defined]
        encode_control_batch(kind, offset=end, timestamp=1000, producer_id=pid, producer_epoch=0),
        origin="coordinator",
    )


def _plain(log: object, values: list[bytes]) -> None:
    log.append(encode_batch([Record.of(v, timestamp=1000) for v in values]))  # type: ignore[attr-defined]


def write_transactions(data_dir: Path) -> None:
    with LogDir(str(data_dir), writable=True) as logdir:
        log = logdir.log("txn", 0, create=True)
        _plain(log, [b"a", b"b"])  # 0, 1
        _txn(log, 5, [b"aborted-1", b"aborted-2"])  # 2, 3
        _marker(log, 5, ControlType.ABORT)  # 4
        _txn(log, 6, [b"committed-1", b"committed-2"])  # 5, 6
        _marker(log, 6, ControlType.COMMIT)  # 7
        _plain(log, [b"c"])  # 8
        _txn(log, 7, [b"open"])  # 9: no marker yet, so the LSO is 9


def read_all(bootstrap: str, isolation: str, count: int) -> tuple[list[bytes], tuple[int, int]]:
    consumer = Consumer(consumer_settings(bootstrap, "unused", **{"isolation.level": isolation}))
    try:
        consumer.assign([TopicPartition("txn", 0, OFFSET_BEGINNING)])
        got: list[bytes] = []
        deadline = time.monotonic() + 10
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        marks = consumer.get_watermark_offsets(TopicPartition("txn", 0), cached=False)
        assert consumer.poll(0.3) is None  # and nothing more
        return got, marks
    finally:
        consumer.close()


def test_read_committed_and_read_uncommitted(data_dir: Path) -> None:
    write_transactions(data_dir)
    with ServerThread(str(data_dir), config()) as server:
        committed, marks = read_all(server.bootstrap, "read_committed", 5)
        assert committed == [b"a", b"b", b"committed-1", b"committed-2", b"c"]
        assert marks == (0, 9)  # the last stable offset: the open transaction's first offset
        everything, marks = read_all(server.bootstrap, "read_uncommitted", 8)
        assert everything == [
            b"a",
            b"b",
            b"aborted-1",
            b"aborted-2",
            b"committed-1",
            b"committed-2",
            b"c",
            b"open",
        ]
        assert marks == (0, 10)
