"""Kafka's limits in kafkalog serve (issue 25 point 5): ``queued.max.request.bytes`` bounds the
request bytes held across connections, ``connections.max.idle.ms`` closes an idle connection
(one that sent half a request too), ``max.connections`` / ``max.connections.per.ip`` refuse the
extra connection, an acks=0 produce that fails closes its connection, and a produce to an
internal topic is INVALID_TOPIC_EXCEPTION whether or not it exists yet."""

from __future__ import annotations

import socket
import struct
import threading
import time
from pathlib import Path
from typing import Any

from kio.index import load_request_schema
from kio.serial import entity_reader
from test_serve_wire import api_versions, call, closed_by_server, connect, frame, read_frame

from kafka_clients import config
from kafkalog.records import Record, encode_batch
from kafkalog.server import ServerThread
from kafkalog.server.codec import build, response_type

MiB = 1024 * 1024


def produce_frame(topic: str, records: bytes, acks: int = -1, correlation: int = 7) -> bytes:
    body = build(
        load_request_schema(0, 9),
        {
            "acks": acks,
            "timeout": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
        },
    )
    return frame(0, 9, correlation, body)


def produce_reply(sock: socket.socket) -> Any:
    reply = read_frame(sock)
    parsed, _ = entity_reader(response_type(0, 9))(reply, 5)
    return parsed.responses[0].partition_responses[0]


def create(server: ServerThread, topic: str) -> None:
    topics = [{"name": topic, "num_partitions": 1, "replication_factor": 1, "assignments": []}]
    reply = call(server, 19, 7, {"topics": topics, "timeout": 5000, "validate_only": False})
    assert reply.topics[0].error_code == 0, reply


def big_requests(server: ServerThread, count: int, size: int) -> list[int]:
    """``count`` connections each sending one produce request of ``size`` bytes at once; the
    error code each gets back (no such topic: refused cheaply, once read)."""
    request = produce_frame("big", bytes(size))
    codes: list[int] = []
    failures: list[BaseException] = []

    def one() -> None:
        try:
            with socket.create_connection(("127.0.0.1", server.port), timeout=60) as sock:
                sock.sendall(request)
                codes.append(produce_reply(sock).error_code)
        except BaseException as e:  # reported by the test thread
            failures.append(e)

    threads = [threading.Thread(target=one) for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures
    return codes


def test_eight_48_mib_requests_stay_under_queued_max_request_bytes(data_dir: Path) -> None:
    bound = 100 * MiB
    with ServerThread(str(data_dir), config(queued_max_request_bytes=bound)) as server:
        codes = big_requests(server, 8, 48 * MiB)
        memory = server.server.request_memory
        assert len(codes) == 8 and all(c == 3 for c in codes)  # every one answered
        assert memory.peak <= bound
        assert memory.peak >= 2 * 48 * MiB  # two at a time were let in
        assert memory.waits > 0  # and the others waited, unread
        assert memory.held == 0


def test_without_the_bound_the_same_requests_are_held_together(data_dir: Path) -> None:
    """What the counter shows when nothing bounds it: the bound above is what held it down."""
    with ServerThread(str(data_dir), config(queued_max_request_bytes=-1)) as server:
        big_requests(server, 8, 48 * MiB)
        memory = server.server.request_memory
        assert memory.peak > 100 * MiB and memory.waits == 0


def test_idle_connections_are_closed_even_half_way_through_a_request(data_dir: Path) -> None:
    with ServerThread(str(data_dir), config(connections_max_idle_ms=300)) as server:
        silent = connect(server)
        half = connect(server)
        half.sendall(struct.pack(">i", 100) + b"\0" * 10)  # 10 of 100 bytes, then nothing
        busy = connect(server)
        start = time.monotonic()
        while time.monotonic() - start < 1.0:  # active for longer than the idle time
            assert api_versions(busy)[0] == 0
            time.sleep(0.1)
        assert closed_by_server(silent) and closed_by_server(half)
        assert time.monotonic() - start < 4
        assert api_versions(busy)[0] == 0  # activity keeps a connection open
        for sock in (silent, half, busy):
            sock.close()


def test_a_slow_large_request_is_not_idle(data_dir: Path) -> None:
    """Idle means no bytes for connections.max.idle.ms, not a request slower than that."""
    with ServerThread(str(data_dir), config(connections_max_idle_ms=400)) as server:
        request = produce_frame("slow", bytes(3 * MiB))
        with connect(server) as sock:
            for n in range(0, len(request), MiB // 2):
                sock.sendall(request[n : n + MiB // 2])
                time.sleep(0.15)  # the whole request takes about 1 s
            assert produce_reply(sock).error_code == 3  # answered: no such topic


def test_max_connections_per_ip_refuses_the_extra_connection(data_dir: Path) -> None:
    with ServerThread(str(data_dir), config(max_connections_per_ip=2)) as server:
        first, second = connect(server), connect(server)
        assert api_versions(first)[0] == 0 and api_versions(second)[0] == 0
        extra = connect(server)
        assert closed_by_server(extra)
        extra.close()
        first.close()
        time.sleep(0.2)  # the server sees the close
        again = connect(server)
        assert api_versions(again)[0] == 0
        for sock in (second, again):
            sock.close()


def test_max_connections_refuses_beyond_the_total(data_dir: Path) -> None:
    with ServerThread(str(data_dir), config(max_connections=1)) as server:
        first = connect(server)
        assert api_versions(first)[0] == 0
        extra = connect(server)
        assert closed_by_server(extra)
        assert api_versions(first)[0] == 0
        first.close()
        extra.close()


def test_acks_0_produce_errors_close_the_connection(server: ServerThread) -> None:
    good = encode_batch([Record.of(b"v", key=b"k")])
    bad = bytearray(good)
    bad[17] ^= 0xFF  # the CRC
    create(server, "zero")
    with connect(server) as sock:
        sock.sendall(produce_frame("zero", good, acks=0))
        assert api_versions(sock)[0] == 0  # a good acks=0 produce leaves it open
        sock.sendall(produce_frame("zero", bytes(bad), acks=0))
        assert closed_by_server(sock)
    with connect(server) as sock:  # only that connection
        sock.sendall(produce_frame("zero", good))
        assert produce_reply(sock).error_code == 0


def test_produce_to_internal_topics_before_they_exist(server: ServerThread) -> None:
    good = encode_batch([Record.of(b"v", key=b"k")])
    for name in ("__consumer_offsets", "__transaction_state"):
        with connect(server) as sock:
            sock.sendall(produce_frame(name, good))
            reply = produce_reply(sock)
        assert reply.error_code == 17, name  # INVALID_TOPIC_EXCEPTION, as Kafka
        assert "internal topic" in (reply.error_message or "")


def test_flush_messages_1_fsyncs_before_the_ack(server: ServerThread) -> None:
    """The README's durability paragraph: with flush.messages=1 an acknowledged produce is at
    or below the log's recovery point (fsynced); without it, it is not."""
    topics = [
        {
            "name": name,
            "num_partitions": 1,
            "replication_factor": 1,
            "assignments": [],
            "configs": configs,
        }
        for name, configs in (("synced", [{"name": "flush.messages", "value": "1"}]), ("fast", []))
    ]
    reply = call(server, 19, 7, {"topics": topics, "timeout": 5000, "validate_only": False})
    assert [t.error_code for t in reply.topics] == [0, 0]
    broker = server.server.broker
    assert broker is not None
    for n in range(3):
        for name in ("synced", "fast"):
            with connect(server) as sock:
                sock.sendall(produce_frame(name, encode_batch([Record.of(b"v%d" % n)])))
                assert produce_reply(sock).error_code == 0
    synced = broker.registry.log(broker.registry.get("synced"), 0)
    fast = broker.registry.log(broker.registry.get("fast"), 0)
    assert synced.recovery_point == synced.log_end_offset == 3
    assert fast.recovery_point == 0 and fast.log_end_offset == 3
