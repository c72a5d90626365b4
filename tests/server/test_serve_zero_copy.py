"""Fetch responses send segment bytes with sendfile: the spliced frame is byte for byte the frame
the codec writes with the bytes in it, for every Fetch version served, and real clients read
every record through it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from kafka_clients import consumer_settings, rdkafka
from kafkalog.log import Log
from kafkalog.log.segment import FileRegion
from kafkalog.records import Record
from kafkalog.server import ServerThread, zero_copy
from kafkalog.server.codec import SUPPORTED, build, encode_response, response_type

FETCH = 1


def _log(tmp_path: Path, name: str, values: list[bytes]) -> Log:
    log = Log(str(tmp_path / name))
    for i in range(0, len(values), 7):
        log.append_records([Record.of(v, key=b"k%d" % i) for v in values[i : i + 7]])
    return log


def _materialised(pieces: list[zero_copy.Piece]) -> bytes:
    return b"".join(p if isinstance(p, bytes) else p.read() for p in pieces)


@pytest.mark.parametrize("version", range(SUPPORTED[FETCH][0], SUPPORTED[FETCH][1] + 1))
def test_spliced_frame_is_the_codec_frame(tmp_path: Path, version: int) -> None:
    small = _log(tmp_path, "a-0", [b"x" * 10] * 3)
    # large enough that a flexible version's length prefix grows to three varint bytes
    big = _log(tmp_path, "a-1", [os.urandom(300) for _ in range(400)])
    try:
        regions = [small.read_region(0, 1 << 20), big.read_region(0, 1 << 20)]
        assert all(isinstance(r, FileRegion) for r in regions)
        result: dict[str, Any] = {
            "responses": [
                {
                    "topic": "a",
                    "partitions": [
                        {"partition_index": 0, "high_watermark": 3, "records": regions[0]},
                        {"partition_index": 1, "high_watermark": 400, "records": b""},
                        {"partition_index": 2, "high_watermark": 400, "records": regions[1]},
                    ],
                }
            ]
        }
        with_bytes = {
            "responses": [
                {
                    "topic": "a",
                    "partitions": [
                        {
                            **partition,
                            "records": partition["records"].read()
                            if isinstance(partition["records"], FileRegion)
                            else partition["records"],
                        }
                        for partition in result["responses"][0]["partitions"]
                    ],
                }
            ]
        }
        schema = response_type(FETCH, version)
        want = encode_response(FETCH, version, 42, build(schema, with_bytes))
        placeholders = zero_copy.take_regions(result)
        assert len(placeholders) == 2
        frame = encode_response(FETCH, version, 42, build(schema, result))
        pieces = zero_copy.splice(frame, placeholders)
        assert [type(p) for p in pieces] == [bytes, FileRegion, bytes, FileRegion, bytes]
        assert _materialised(pieces) == want
    finally:
        small.close()
        big.close()


def test_a_region_outlives_its_segment(tmp_path: Path) -> None:
    """The descriptor sendfile reads from is the sender's own: closing the log and deleting
    its files meanwhile changes nothing it sends."""
    log = _log(tmp_path, "b-0", [b"v%d" % i for i in range(50)])
    region = log.read_region(0, 1 << 20)
    assert region is not None
    expected = region.read()
    fd = region.file.duplicate_fd()
    try:
        log.close()
        for name in os.listdir(tmp_path / "b-0"):
            os.unlink(tmp_path / "b-0" / name)
        assert os.pread(fd, region.length, region.position) == expected
    finally:
        os.close(fd)


def test_clients_consume_through_sendfile(
    server: ServerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[int] = []
    real_sendfile = os.sendfile

    def counting(out_fd: int, in_fd: int, offset: int | None, count: int) -> int:
        n = real_sendfile(out_fd, in_fd, offset, count)
        sent.append(n)
        return n

    monkeypatch.setattr(os, "sendfile", counting)
    values = [os.urandom(1024) for _ in range(3000)]
    producer = Producer(rdkafka(server.bootstrap, **{"linger.ms": 5}))
    for i, v in enumerate(values):
        producer.produce("zc", value=v, key=b"%d" % i, partition=0)
    assert producer.flush(15) == 0
    consumer = Consumer(
        consumer_settings(server.bootstrap, "zc-group", **{"max.partition.fetch.bytes": 300_000})
    )
    consumer.assign([TopicPartition("zc", 0, OFFSET_BEGINNING)])
    got: list[bytes] = []
    try:
        while len(got) < len(values):
            message = consumer.poll(10)
            assert message is not None, f"stalled after {len(got)} records"
            assert message.error() is None, message.error()
            assert message.key() == b"%d" % len(got)
            got.append(message.value())
    finally:
        consumer.close()
    assert got == values
    assert sum(sent) >= len(values) * 1024  # the record bytes went through sendfile
