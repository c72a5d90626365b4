"""The wire itself: framing bounds, unknown APIs and versions, malformed and random bytes. The
server answers what Kafka answers or closes that one connection, and keeps serving everyone
else."""

from __future__ import annotations

import io
import logging
import random
import socket
import struct
import time
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.request_header.v2.header import RequestHeader
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from kafka_clients import config, consumer_settings, rdkafka
from kafkalog.server import ListenerRefusedError, ServerConfig, ServerThread
from kafkalog.server.codec import SUPPORTED


def frame(api_key: int, version: int, correlation: int, body: Any) -> bytes:
    buf = io.BytesIO()
    header = RequestHeader(
        request_api_key=i16(api_key),
        request_api_version=i16(version),
        correlation_id=i32(correlation),
        client_id="test",
    )
    entity_writer(RequestHeader)(buf, header)
    entity_writer(type(body))(buf, body)
    payload = buf.getvalue()
    return struct.pack(">i", len(payload)) + payload


def connect(server: ServerThread) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    return sock


def read_frame(sock: socket.socket) -> bytes:
    head = _read_exactly(sock, 4)
    return _read_exactly(sock, struct.unpack(">i", head)[0])


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out


def closed_by_server(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def api_versions(sock: socket.socket, version: int = 3) -> tuple[int, dict[int, tuple[int, int]]]:
    """Send ApiVersions; parse the answer as the version the server must use (v0 when it
    refuses the version asked)."""
    from kio.index import load_response_schema

    body = ApiVersionsRequest(client_software_name="t", client_software_version="1")
    sock.sendall(frame(18, version, 7, body))
    reply = read_frame(sock)
    assert struct.unpack_from(">i", reply, 0)[0] == 7
    schema = load_response_schema(18, version if version in range(4) else 0)
    parsed, _ = entity_reader(schema)(reply, 4)
    ranges = {k.api_key: (k.min_version, k.max_version) for k in parsed.api_keys}
    return int(parsed.error_code), ranges


def test_api_versions_lists_what_is_served(server: ServerThread) -> None:
    with connect(server) as sock:
        body = ApiVersionsRequest(client_software_name="t", client_software_version="1")
        sock.sendall(frame(18, 3, 5, body))
        reply = read_frame(sock)
    from kio.schema.api_versions.v3.response import ApiVersionsResponse

    # flexible ApiVersions still answers with response header v0 (correlation id only)
    assert struct.unpack_from(">i", reply, 0)[0] == 5
    parsed, _ = entity_reader(ApiVersionsResponse)(reply, 4)
    assert {k.api_key: (k.min_version, k.max_version) for k in parsed.api_keys} == SUPPORTED


def test_a_newer_api_versions_gets_unsupported_version_and_the_ranges(
    server: ServerThread,
) -> None:
    with connect(server) as sock:
        error, ranges = api_versions(sock, version=99)
        assert error == 35  # UNSUPPORTED_VERSION, in a v0 body the client can read
        assert ranges == SUPPORTED
        error, _ = api_versions(sock)  # the connection stays usable
        assert error == 0


def test_unknown_api_key_or_version_closes_only_that_connection(server: ServerThread) -> None:
    body = MetadataRequest(
        topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )
    for key, version in [(3, 13), (3, 99), (250, 0), (-1, 0)]:
        with connect(server) as sock:
            raw = bytearray(frame(3, 12, 1, body))
            struct.pack_into(">hh", raw, 4, key, version)
            sock.sendall(raw)
            assert closed_by_server(sock)
    with connect(server) as sock:
        assert api_versions(sock)[0] == 0


def test_a_frame_over_socket_request_max_bytes_is_refused_unread(data_dir: Any) -> None:
    with ServerThread(str(data_dir), config(socket_request_max_bytes=1024)) as server:
        with connect(server) as sock:
            sock.sendall(struct.pack(">i", 1025))  # nothing more: the server must not wait
            assert closed_by_server(sock)
        with connect(server) as sock:
            sock.sendall(struct.pack(">i", -5))
            assert closed_by_server(sock)
        with connect(server) as sock:
            assert api_versions(sock)[0] == 0


def test_malformed_bodies_close_the_connection(server: ServerThread) -> None:
    good = frame(
        3,
        12,
        3,
        MetadataRequest(
            topics=(MetadataRequestTopic(name="x", topic_id=None),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        ),
    )
    for cut in range(10, len(good) - 4):
        with connect(server) as sock:
            truncated = good[4:cut]
            sock.sendall(struct.pack(">i", len(truncated)) + truncated)
            assert closed_by_server(sock), cut
    with connect(server) as sock:
        sock.sendall(good)
        reply = read_frame(sock)
        assert struct.unpack_from(">i", reply, 0)[0] == 3


def test_listeners_beyond_loopback_need_an_explicit_choice(data_dir: Any) -> None:
    with pytest.raises(ListenerRefusedError, match="without TLS or SASL"):
        ServerThread(str(data_dir), ServerConfig(host="0.0.0.0", port=0)).start()
    ServerConfig(host="0.0.0.0", allow_plaintext_non_loopback=True).check_listener()
    ServerConfig(host="::1").check_listener()
    ServerConfig(host="localhost").check_listener()


def _garbage(rng: random.Random, templates: list[bytes]) -> bytes:
    kind = rng.randrange(5)
    if kind == 0:  # random bytes with a plausible size prefix
        payload = rng.randbytes(rng.randrange(0, 200))
        return struct.pack(">i", len(payload)) + payload
    if kind == 1:  # pure noise, size prefix included
        return rng.randbytes(rng.randrange(1, 64))
    template = bytearray(rng.choice(templates))
    if kind == 2:  # flipped bytes in a real request
        for _ in range(rng.randrange(1, 6)):
            i = rng.randrange(4, len(template))
            template[i] = rng.randrange(256)
        return bytes(template)
    if kind == 3:  # a real request cut short, with its size fixed up
        cut = rng.randrange(4, len(template))
        body = template[4:cut]
        return struct.pack(">i", len(body)) + bytes(body)
    # a real request whose size prefix lies
    struct.pack_into(">i", template, 0, rng.randrange(-(2**31), 2**31))
    return bytes(template)


def test_fuzzed_requests_never_stop_the_server(
    server: ServerThread, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kafkalog.server")
    rng = random.Random(20261124)
    templates = [
        frame(18, 3, 1, ApiVersionsRequest(client_software_name="f", client_software_version="1")),
        frame(
            3,
            12,
            2,
            MetadataRequest(
                topics=(MetadataRequestTopic(name="fuzz", topic_id=None),),
                allow_auto_topic_creation=True,
                include_topic_authorized_operations=False,
            ),
        ),
    ]
    producer = Producer(rdkafka(server.bootstrap, **{"linger.ms": 0}))
    consumer = Consumer(consumer_settings(server.bootstrap, "unused"))
    consumer.assign([TopicPartition("alive", 0, OFFSET_BEGINNING)])
    sent = 0
    delivered: list[Any] = []
    deadline = time.monotonic() + 30
    for round_ in range(30):
        for _ in range(60):
            if time.monotonic() > deadline:
                break
            # one bad request per connection, then end of input: every one is parsed (and
            # answered or refused) before the server sees the connection end
            with connect(server) as sock:
                try:
                    sock.sendall(_garbage(rng, templates))
                    sock.shutdown(socket.SHUT_WR)
                    while sock.recv(65536):
                        pass
                except OSError:
                    pass  # reset by the server: an answer too
            sent += 1
        producer.produce(
            "alive", value=str(round_).encode(), on_delivery=lambda e, m: delivered.append(e)
        )
        producer.poll(0)
    assert producer.flush(15) == 0
    assert sent >= 1000
    assert delivered and all(e is None for e in delivered)
    got = []
    end = time.monotonic() + 15
    while len(got) < len(delivered) and time.monotonic() < end:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            got.append(int(msg.value()))
    consumer.close()
    assert got == list(range(len(delivered)))
    with connect(server) as sock:
        assert api_versions(sock)[0] == 0
    # every bad request was refused as bad input, none reached a handler as a crash
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len([r for r in caplog.records if "closing connection" in r.getMessage()]) > 500


def test_a_damaged_partition_is_offline_and_the_rest_served(
    data_dir: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with ServerThread(str(data_dir), config()) as server:
        producer = Producer(rdkafka(server.bootstrap, **{"linger.ms": 0}))
        for i in range(3):
            producer.produce("damaged", str(i).encode())
            producer.flush(10)  # one batch each
    segment = data_dir / "damaged-0" / "00000000000000000000.log"
    raw = bytearray(segment.read_bytes())
    first = struct.unpack_from(">i", raw, 8)[0]
    struct.pack_into(">i", raw, 12 + first + 8, 0x7FFFFF00)  # the second batch's length lies
    segment.write_bytes(bytes(raw))

    caplog.set_level(logging.INFO, logger="kafkalog.server")
    with ServerThread(str(data_dir), config()) as server:
        consumer = Consumer(consumer_settings(server.bootstrap, "unused"))
        consumer.assign([TopicPartition("damaged", 0, 2)])
        for _ in range(5):
            consumer.poll(0.1)
        consumer.close()
        messages = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert any(f"{segment} at byte " in m and "entry size" in m for m in messages), messages
        producer = Producer(rdkafka(server.bootstrap))
        producer.produce("healthy", b"fine")
        assert producer.flush(10) == 0
        consumer = Consumer(consumer_settings(server.bootstrap, "unused"))
        consumer.assign([TopicPartition("healthy", 0, OFFSET_BEGINNING)])
        got = None
        for _ in range(50):
            got = consumer.poll(0.1)
            if got is not None:
                break
        consumer.close()
        assert got is not None and got.value() == b"fine"
    assert segment.read_bytes() == bytes(raw)  # nothing was "repaired" behind the operator


def call(server: ServerThread, api_key: int, version: int, fields: dict[str, Any]) -> Any:
    """One request built from ``fields`` at ``version``, its parsed response."""
    from kio.index import load_request_schema, load_response_schema

    from kafkalog.server.codec import build

    body = build(load_request_schema(api_key, version), fields)
    with connect(server) as sock:
        sock.sendall(frame(api_key, version, 11, body))
        reply = read_frame(sock)
    schema = load_response_schema(api_key, version)
    start = 4 + (1 if schema.__flexible__ else 0)  # correlation id (+ tagged fields)
    parsed, _ = entity_reader(schema)(reply, start)
    return parsed


def test_list_offsets_max_timestamp_and_offset_for_leader_epoch(server: ServerThread) -> None:
    producer = Producer(rdkafka(server.bootstrap, **{"linger.ms": 0}))
    for i, ts in enumerate([5000, 9000, 7000]):
        producer.produce("epochs", str(i).encode(), timestamp=ts)
        producer.flush(10)

    def list_offsets(timestamp: int) -> tuple[int, int, int]:
        response = call(
            server,
            2,
            8,
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [
                    {
                        "name": "epochs",
                        "partitions": [{"partition_index": 0, "timestamp": timestamp}],
                    }
                ],
            },
        )
        part = response.topics[0].partitions[0]
        assert part.error_code == 0
        return part.timestamp, part.offset, part.leader_epoch

    assert list_offsets(-3) == (9000, 1, 0)  # MAX_TIMESTAMP: the record holding the largest
    assert list_offsets(-2)[1] == 0 and list_offsets(-1)[1] == 3
    assert list_offsets(6000) == (9000, 1, 0)  # the first record at or after 6000 by offset
    assert list_offsets(10_000)[1] == -1

    def end_for(epoch: int) -> tuple[int, int]:
        response = call(
            server,
            23,
            4,
            {
                "replica_id": -1,
                "topics": [
                    {
                        "topic": "epochs",
                        "partitions": [{"partition": 0, "leader_epoch": epoch}],
                    }
                ],
            },
        )
        part = response.topics[0].partitions[0]
        assert part.error_code == 0
        return part.leader_epoch, part.end_offset

    assert end_for(0) == (0, 3)  # the current epoch ends at the log end
    assert end_for(3) == (-1, -1)  # an epoch this partition never had


def test_idempotent_retries_are_answered_once_and_gaps_refused(server: ServerThread) -> None:
    """A retried batch (same producer id, epoch and sequence) gets its first offsets and is not
    written again; a sequence gap is OUT_OF_ORDER_SEQUENCE_NUMBER (the log's producer state)."""
    from kafkalog.records import Record, encode_batch

    pid_reply = call(server, 22, 4, {"transactional_id": None, "transaction_timeout": 60000})
    assert pid_reply.error_code == 0
    pid, epoch = pid_reply.producer_id, pid_reply.producer_epoch

    def produce(sequence: int, values: list[bytes]) -> tuple[int, int]:
        batch = encode_batch(
            [Record.of(v, timestamp=1000) for v in values],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=sequence,
        )
        fields = {
            "acks": -1,
            "timeout": 5000,
            "topic_data": [{"name": "idem", "partition_data": [{"index": 0, "records": batch}]}],
        }
        reply = call(server, 0, 9, fields)
        part = reply.responses[0].partition_responses[0]
        return int(part.error_code), int(part.base_offset)

    call(server, 3, 12, {"topics": [{"name": "idem"}], "allow_auto_topic_creation": True})
    assert produce(0, [b"a", b"b"]) == (0, 0)
    assert produce(2, [b"c"]) == (0, 2)
    assert produce(0, [b"a", b"b"]) == (0, 0)  # a retry: the first answer, nothing written
    assert produce(2, [b"c"]) == (0, 2)
    assert produce(9, [b"gap"])[0] == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
    assert produce(3, [b"d"]) == (0, 3)
    end = call(
        server,
        2,
        8,
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [{"name": "idem", "partitions": [{"partition_index": 0, "timestamp": -1}]}],
        },
    )
    assert end.topics[0].partitions[0].offset == 4
