"""TLS and SASL/PLAIN listeners with librdkafka and kafka-python, unchanged: an encrypted
session works, a wrong password or an unauthenticated request is refused, and only a listener
with TLS or SASL may face other machines."""

from __future__ import annotations

import io
import socket
import struct
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from kafka_clients import LOOPBACK_SAN, config, consumer_settings, rdkafka, self_signed
from kafkalog.server import ServerThread
from kafkalog.server.config import ListenerRefusedError, ServerConfig, read_plain_users

USERS = {"alice": "alice-secret", "bob": "b=ob"}


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1 (openssl, as an operator would make one)."""
    where = tmp_path_factory.mktemp("tls")
    cert, key = where / "server.pem", where / "server.key"
    self_signed(str(cert), str(key), "/CN=127.0.0.1", *LOOPBACK_SAN)
    return str(cert), str(key)


def round_trip(bootstrap: str, **security: Any) -> tuple[Any, list[bytes]]:
    producer = Producer(rdkafka(bootstrap, **security))
    errors: list[Any] = []
    producer.produce("secure", b"secret", on_delivery=lambda e, m: errors.append(e))
    producer.flush(10)
    if len(errors) != 1 or errors[0] is not None:  # (KafkaError cannot compare with None)
        return errors[0] if errors else "no delivery report", []
    consumer = Consumer(consumer_settings(bootstrap, "unused", **security))
    consumer.assign([TopicPartition("secure", 0, OFFSET_BEGINNING)])
    got: list[bytes] = []
    deadline = time.monotonic() + 5
    while not got and time.monotonic() < deadline:
        msg = consumer.poll(0.1)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    consumer.close()
    return None, got


def test_tls(data_dir: Path, certificate: tuple[str, str]) -> None:
    cert, key = certificate
    cfg = config(ssl_certfile=cert, ssl_keyfile=key)
    assert cfg.security_protocol == "SSL"
    with ServerThread(str(data_dir), cfg) as server:
        tls = {"security.protocol": "SSL", "ssl.ca.location": cert}
        assert round_trip(server.bootstrap, **tls) == (None, [b"secret"])
        # a plaintext client gets nowhere
        error, _ = round_trip(server.bootstrap, **{"message.timeout.ms": 1000})
        assert error is not None and error.code() == KafkaError._MSG_TIMED_OUT


def test_sasl_plain_over_tls(data_dir: Path, certificate: tuple[str, str]) -> None:
    cert, key = certificate
    cfg = config(ssl_certfile=cert, ssl_keyfile=key, sasl_plain_users=USERS)
    assert cfg.security_protocol == "SASL_SSL"
    with ServerThread(str(data_dir), cfg) as server:
        good = {
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": cert,
            "sasl.mechanism": "PLAIN",
            "sasl.username": "bob",
            "sasl.password": "b=ob",
        }
        assert round_trip(server.bootstrap, **good) == (None, [b"secret"])
        bad = {**good, "sasl.password": "guess", "message.timeout.ms": 2000}
        error, got = round_trip(server.bootstrap, **bad)
        assert got == [] and error is not None
        assert error.code() in (KafkaError._AUTHENTICATION, KafkaError._MSG_TIMED_OUT)


def test_sasl_plain_with_kafka_python(data_dir: Path) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    with ServerThread(str(data_dir), config(sasl_plain_users=USERS)) as server:
        auth = {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN",
            "sasl_plain_username": "alice",
            "sasl_plain_password": "alice-secret",
        }
        producer = KafkaProducer(bootstrap_servers=server.bootstrap, **auth)
        producer.send("py-secure", b"hello").get(10)
        producer.close()
        consumer = KafkaConsumer(
            "py-secure",
            bootstrap_servers=server.bootstrap,
            auto_offset_reset="earliest",
            consumer_timeout_ms=1000,
            **auth,
        )
        assert [m.value for m in consumer] == [b"hello"]
        consumer.close()


def _exchange(sock: socket.socket, api_key: int, version: int, fields: dict[str, Any]) -> Any:
    from kio.index import load_request_schema, load_response_schema
    from kio.serial import entity_reader, entity_writer

    from kafkalog.server.codec import build

    schema = load_request_schema(api_key, version)
    buf = io.BytesIO()
    entity_writer(schema.__header_schema__)(
        buf,
        schema.__header_schema__(
            request_api_key=api_key,
            request_api_version=version,
            correlation_id=1,
            client_id="raw",
        ),
    )
    entity_writer(schema)(buf, build(schema, fields))
    sock.sendall(struct.pack(">i", len(buf.getvalue())) + buf.getvalue())
    head = sock.recv(4, socket.MSG_WAITALL)
    if len(head) < 4:
        return None  # closed
    reply = sock.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)
    response = load_response_schema(api_key, version)
    skip = 5 if response.__flexible__ else 4
    return entity_reader(response)(reply, skip)[0]


def test_sasl_refusals_on_the_wire(data_dir: Path) -> None:
    with ServerThread(str(data_dir), config(sasl_plain_users=USERS)) as server:
        address = ("127.0.0.1", server.port)
        with socket.create_connection(address, timeout=5) as sock:  # skipping SASL
            reply = _exchange(sock, 3, 12, {"topics": None})
            assert reply is None  # the connection is closed, nothing answered
        with socket.create_connection(address, timeout=5) as sock:
            hello = _exchange(sock, 17, 1, {"mechanism": "SCRAM-SHA-256"})
            assert hello.error_code == 33 and list(hello.mechanisms) == ["PLAIN"]
            hello = _exchange(sock, 17, 1, {"mechanism": "PLAIN"})
            assert hello.error_code == 0
            denied = _exchange(sock, 36, 2, {"auth_bytes": b"\0alice\0wrong"})
            assert denied.error_code == 58  # SASL_AUTHENTICATION_FAILED
            assert "Invalid username or password" in denied.error_message
            assert sock.recv(1) == b""  # and then closed
        with socket.create_connection(address, timeout=5) as sock:
            assert _exchange(sock, 17, 1, {"mechanism": "PLAIN"}).error_code == 0
            # an authorization id other than the user is refused too
            other = _exchange(sock, 36, 2, {"auth_bytes": b"bob\0alice\0alice-secret"})
            assert other.error_code == 58
        with socket.create_connection(address, timeout=5) as sock:
            assert _exchange(sock, 17, 1, {"mechanism": "PLAIN"}).error_code == 0
            ok = _exchange(sock, 36, 2, {"auth_bytes": b"\0alice\0alice-secret"})
            assert ok.error_code == 0
            metadata = _exchange(sock, 3, 12, {"topics": None})
            assert metadata is not None and len(metadata.brokers) == 1


def test_public_listeners_need_tls_or_sasl(certificate: tuple[str, str], tmp_path: Path) -> None:
    cert, key = certificate
    with pytest.raises(ListenerRefusedError):
        ServerConfig(host="0.0.0.0").check_listener()
    ServerConfig(host="0.0.0.0", ssl_certfile=cert, ssl_keyfile=key).check_listener()
    ServerConfig(host="0.0.0.0", sasl_plain_users=USERS).check_listener()
    users = tmp_path / "users.properties"
    users.write_text("# operators\nalice = alice-secret\n\nbob=b=ob\n")
    assert read_plain_users(str(users)) == USERS
