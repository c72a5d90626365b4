"""Produce through ``kafkalog serve`` is validated as Kafka's broker validates it (issue 25 point
1): the issue's four batches answer INVALID_RECORD (87) and write nothing; per-record problems
come back in KIP-467's ``record_errors``; a fuzz of mutated batches (CRCs recomputed, so only
the validator can refuse them) leaves a data directory that kafka-python decodes and
``kafkalog verify`` passes."""

from __future__ import annotations

import random
import struct
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "log"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from test_serve_wire import call
from test_validator import (
    _decode_with_kafka_python,
    issue_batches,
    recrc,
)

from clirun import kafkalog_here
from kafkalog.records import Record, encode_batch
from kafkalog.server import ServerThread

T0 = 1_700_000_000_000


def produce(server: ServerThread, topic: str, records: bytes, version: int = 9) -> Any:
    fields = {
        "acks": -1,
        "timeout": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
    }
    if version >= 9:  # flexible: the helper's v2 request header
        return call(server, 0, version, fields).responses[0].partition_responses[0]
    return _produce_v1_header(server, version, fields)


def _produce_v1_header(server: ServerThread, version: int, fields: dict[str, Any]) -> Any:
    """A produce below v9 (request header v1, response header v0)."""
    import io

    from kio.index import load_request_schema, load_response_schema
    from kio.schema.request_header.v1.header import RequestHeader
    from kio.serial import entity_reader, entity_writer
    from kio.static.primitive import i16, i32
    from test_serve_wire import connect, read_frame

    from kafkalog.server.codec import build

    body = build(load_request_schema(0, version), fields)
    buf = io.BytesIO()
    header = RequestHeader(
        request_api_key=i16(0),
        request_api_version=i16(version),
        correlation_id=i32(5),
        client_id="test",
    )
    entity_writer(RequestHeader)(buf, header)
    entity_writer(type(body))(buf, body)
    with connect(server) as sock:
        sock.sendall(struct.pack(">i", buf.tell()) + buf.getvalue())
        reply = read_frame(sock)
    parsed, _ = entity_reader(load_response_schema(0, version))(reply, 4)
    return parsed.responses[0].partition_responses[0]


def end_offset(server: ServerThread, topic: str) -> int:
    reply = call(
        server,
        2,
        8,
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}],
        },
    )
    return int(reply.topics[0].partitions[0].offset)


def create(server: ServerThread, topic: str, configs: dict[str, str] | None = None) -> None:
    reply = call(
        server,
        19,
        7,
        {
            "topics": [
                {
                    "name": topic,
                    "num_partitions": 1,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
                }
            ],
            "timeout": 5000,
            "validate_only": False,
        },
    )
    assert reply.topics[0].error_code == 0, reply


def good(n: int = 1) -> bytes:
    return encode_batch([Record.of(b"v%d" % i, key=b"k", timestamp=T0 + i) for i in range(n)])


def test_the_issue_batches_answer_invalid_record_and_write_nothing(
    server: ServerThread, data_dir: Path
) -> None:
    create(server, "v")
    assert produce(server, "v", good(3)).error_code == 0
    for case, bad in issue_batches().items():
        part = produce(server, "v", bad)
        assert part.error_code == 87, case  # INVALID_RECORD
        assert part.base_offset == -1
        assert part.error_message and "topic partition v-0" in part.error_message
        assert end_offset(server, "v") == 3, case
    part = produce(server, "v", good(1))
    assert (part.error_code, part.base_offset) == (0, 3)
    assert len(_decode_with_kafka_python(data_dir / "v-0")) == 4


def test_record_errors_come_back_per_record(server: ServerThread) -> None:
    create(server, "compacted", {"cleanup.policy": "compact"})
    batch = encode_batch(
        [
            Record.of(b"a", key=b"k", timestamp=T0),
            Record.of(b"b", timestamp=T0),
            Record.of(b"c", key=b"k", timestamp=T0),
            Record.of(b"d", timestamp=T0),
        ]
    )
    part = produce(server, "compacted", batch)
    assert part.error_code == 87
    assert [e.batch_index for e in part.record_errors] == [1, 3]
    assert all(
        "Compacted topic cannot accept message without key" in e.batch_index_error_message
        for e in part.record_errors
    )
    create(server, "bounded", {"message.timestamp.before.max.ms": "60000"})
    part = produce(server, "bounded", encode_batch([Record.of(b"old", timestamp=T0)]))
    assert part.error_code == 32  # INVALID_TIMESTAMP
    assert [e.batch_index for e in part.record_errors] == [0]
    assert end_offset(server, "compacted") == end_offset(server, "bounded") == 0


def test_protocol_rules_before_the_log(server: ServerThread) -> None:
    """Kafka's ProduceRequest.validateRecords: one batch per partition, zstd from v7 on."""
    create(server, "p")
    assert produce(server, "p", good(1) + good(1)).error_code == 87
    zstd = encode_batch([Record.of(b"z", timestamp=T0)], compression="zstd")
    assert produce(server, "p", zstd, version=6).error_code == 76  # UNSUPPORTED_COMPRESSION_TYPE
    assert produce(server, "p", zstd, version=7).error_code == 0
    control = bytearray(good(1))
    control[22] |= 0x20
    assert produce(server, "p", recrc(control)).error_code == 87  # clients write no markers
    assert end_offset(server, "p") == 1


def _mutate(rng: random.Random, data: bytearray) -> bytearray:
    """A random byte flip, a header field changed, or both; the CRC recomputed after."""
    fields = [(23, ">i"), (57, ">i"), (35, ">q"), (27, ">q"), (21, ">h"), (43, ">q"), (53, ">i")]
    for _ in range(rng.randint(1, 3)):
        if rng.random() < 0.5:
            i = rng.randrange(21, len(data))
            data[i] ^= 1 << rng.randrange(8)
        else:
            offset, fmt = rng.choice(fields)
            (old,) = struct.unpack_from(fmt, data, offset)
            new = rng.choice([old + 1, old - 1, 0, -1, old * 2 + 1, rng.randrange(-5, 5)])
            bits = struct.calcsize(fmt) * 8
            new = ((new + (1 << (bits - 1))) % (1 << bits)) - (1 << (bits - 1))
            struct.pack_into(fmt, data, offset, new)
    return bytearray(recrc(data))


def test_fuzzed_batches_through_the_wire_leave_a_readable_log(
    server: ServerThread, data_dir: Path
) -> None:
    rng = random.Random(2025)
    create(server, "fuzz")
    create(server, "fuzzc", {"cleanup.policy": "compact", "compression.type": "gzip"})
    accepted = refused = 0
    for i in range(300):
        topic = "fuzzc" if i % 3 == 0 else "fuzz"
        recs = [
            Record.of(
                rng.randbytes(rng.randint(0, 40)),
                key=None if rng.random() < 0.02 else rng.randbytes(rng.randint(0, 6)),
                timestamp=T0 + rng.randint(0, 1000),
            )
            for _ in range(rng.randint(1, 25))
        ]
        codec = rng.choice(["none", "none", "gzip", "lz4"])
        data = bytearray(encode_batch(recs, compression=codec))
        mutated = rng.random() < 0.8
        if mutated:
            data = _mutate(rng, data)
        before = end_offset(server, topic)
        part = produce(server, topic, bytes(data))
        if part.error_code == 0:
            accepted += 1
            assert part.base_offset == before
        else:
            refused += 1
            keyless = topic == "fuzzc" and any(r.key is None for r in recs)
            assert mutated or keyless, part.error_message  # else an untouched batch is taken
            # 53: a flipped transactional bit in a request without a transactional id, which
            # Kafka's handleProduceRequest refuses as TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            assert part.error_code in (2, 10, 32, 53, 87), part.error_message
            assert end_offset(server, topic) == before
    assert accepted > 60 and refused > 60
    total = sum(end_offset(server, t) for t in ("fuzz", "fuzzc"))
    server.stop()
    decoded = sum(len(_decode_with_kafka_python(data_dir / f"{t}-0")) for t in ("fuzz", "fuzzc"))
    assert decoded == total
    verified = kafkalog_here("verify", str(data_dir))
    assert verified.returncode == 0, verified.stdout + verified.stderr
