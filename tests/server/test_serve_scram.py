"""SASL/SCRAM-SHA-256 and -512 (KIP-84) with confluent-kafka, kafka-python and aiokafka,
unchanged: login, produce and consume; a wrong password is an authentication error at once;
users managed with AlterUserScramCredentials / DescribeUserScramCredentials and ``kafkalog
scram``, stored as salt, iterations and keys only, and kept across restarts."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from test_serve_security import _exchange, round_trip

from kafka_clients import config, rdkafka
from kafkalog.server import ServerThread
from kafkalog.server.scram import (
    CREDENTIALS_FILE,
    ScramError,
    ScramExchange,
    ScramStore,
    credential_from_password,
)

ALICE = "alice-secret"


def scram_config(**extra: Any) -> Any:
    return config(sasl_scram=True, **extra)


def add_user(data_dir: Path, user: str, password: str, iterations: int = 4096) -> None:
    store = ScramStore(str(data_dir))
    store.set_many(
        [
            (user, m, credential_from_password(m, password, iterations))
            for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")
        ],
        [],
    )


def sasl(mechanism: str, user: str, password: str) -> dict[str, Any]:
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def run_cli(args: list[str], stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kafkalog", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def login_error(bootstrap: str, **security: Any) -> tuple[Any, float]:
    """The first error librdkafka reports for a login (its ``error_cb``; a producer only
    fails its messages at ``message.timeout.ms``) and how long it took to come."""
    errors: list[Any] = []
    producer = Producer(rdkafka(bootstrap, error_cb=errors.append, **security))
    started = time.monotonic()
    producer.produce("login", b"x")
    while not errors and time.monotonic() - started < 10:
        producer.poll(0.05)
    elapsed = time.monotonic() - started
    producer.purge()
    producer.flush(1)
    return (errors[0].code() if errors else None), elapsed


# -- the exchange itself ----------------------------------------------------------------------


def test_rfc7677_test_vector(tmp_path: Path) -> None:
    """RFC 7677 section 3: user "user", password "pencil", the nonces and salt given there;
    the server accepts the RFC's client proof and answers the RFC's server signature."""
    store = ScramStore(str(tmp_path))
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    store.set(
        "user", "SCRAM-SHA-256", credential_from_password("SCRAM-SHA-256", "pencil", 4096, salt)
    )
    exchange = ScramExchange("SCRAM-SHA-256", store, nonce_suffix="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    first = exchange.step(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    final = exchange.step(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert exchange.done and exchange.user == "user"


def _client_proof(mechanism: str, password: str, first: bytes, server_first: bytes) -> bytes:
    """A SCRAM client's final message, written from RFC 5802 (an independent oracle)."""
    name = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
    fields = dict(item.split("=", 1) for item in server_first.decode().split(","))
    salted = hashlib.pbkdf2_hmac(
        name, password.encode(), base64.b64decode(fields["s"]), int(fields["i"])
    )
    client_key = hmac.new(salted, b"Client Key", name).digest()
    stored = hashlib.new(name, client_key).digest()
    without = f"c=biws,r={fields['r']}"
    auth = f"{first.decode()[3:]},{server_first.decode()},{without}".encode()
    signature = hmac.new(stored, auth, name).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    return f"{without},p={base64.b64encode(proof).decode()}".encode()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_exchange_refusals(tmp_path: Path, mechanism: str) -> None:
    add_user(tmp_path, "alice", ALICE)
    store = ScramStore(str(tmp_path))
    first = b"n,,n=alice,r=abcdefgh"
    ok = ScramExchange(mechanism, store)
    server_first = ok.step(first)
    assert ok.step(_client_proof(mechanism, ALICE, first, server_first)).startswith(b"v=")
    assert ok.done and ok.user == "alice"
    # a wrong password, an unknown user (the same shape of failure), a changed nonce
    for user, password in (("alice", "wrong"), ("mallory", ALICE)):
        ex = ScramExchange(mechanism, store)
        start = f"n,,n={user},r=abcdefgh".encode()
        answer = ex.step(start)
        with pytest.raises(ScramError):
            ex.step(_client_proof(mechanism, password, start, answer))
        assert not ex.done
    ex = ScramExchange(mechanism, store)
    answer = ex.step(first)
    forged = _client_proof(mechanism, ALICE, first, answer).replace(b"r=abcdefgh", b"r=abcdefgX")
    with pytest.raises(ScramError):
        ex.step(forged)
    for bad in (b"y,,n=alice,r=x", b"n,,r=x", b"n,a=bob,n=alice,r=x", b"\xff"):
        with pytest.raises(ScramError):
            ScramExchange(mechanism, store).step(bad)


def test_credentials_file_holds_no_password(tmp_path: Path) -> None:
    add_user(tmp_path, "alice", ALICE, iterations=4096)
    path = tmp_path / CREDENTIALS_FILE
    text = path.read_text()
    assert ALICE not in text
    data = json.loads(text)
    entry = data["users"]["alice"]["SCRAM-SHA-512"]
    assert set(entry) == {"salt", "iterations", "stored_key", "server_key"}
    assert entry["iterations"] == 4096
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert ScramStore(str(tmp_path)).users()["alice"]["SCRAM-SHA-256"].iterations == 4096


# -- real clients -------------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_confluent_kafka_scram(data_dir: Path, mechanism: str) -> None:
    add_user(data_dir, "alice", ALICE)
    with ServerThread(str(data_dir), scram_config()) as server:
        good = sasl(mechanism, "alice", ALICE)
        assert round_trip(server.bootstrap, **good) == (None, [b"secret"])
        code, elapsed = login_error(server.bootstrap, **{**good, "sasl.password": "guess"})
        assert code == KafkaError._AUTHENTICATION
        assert elapsed < 3  # refused at once, not a hang until a timeout


def test_kafka_python_scram(data_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.errors import KafkaError as PyKafkaError

    add_user(data_dir, "alice", ALICE)
    with ServerThread(str(data_dir), scram_config()) as server:
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            auth = {
                "security_protocol": "SASL_PLAINTEXT",
                "sasl_mechanism": mechanism,
                "sasl_plain_username": "alice",
                "sasl_plain_password": ALICE,
            }
            producer = KafkaProducer(bootstrap_servers=server.bootstrap, **auth)
            producer.send("py-scram", mechanism.encode()).get(10)
            producer.close()
        consumer = KafkaConsumer(
            "py-scram",
            bootstrap_servers=server.bootstrap,
            auto_offset_reset="earliest",
            consumer_timeout_ms=1000,
            **auth,
        )
        assert [m.value for m in consumer] == [b"SCRAM-SHA-256", b"SCRAM-SHA-512"]
        consumer.close()
        # kafka-python keeps retrying a bootstrap whose login failed (until its own timeout),
        # so the proof is what it logs: each attempt ends in SaslAuthenticationFailedError
        # (error 58) from the server, none in a dropped connection
        with caplog.at_level(logging.ERROR, logger="kafka"), pytest.raises(PyKafkaError):
            KafkaProducer(
                bootstrap_servers=server.bootstrap,
                **{**auth, "sasl_plain_password": "guess"},
                max_block_ms=2000,
                request_timeout_ms=2000,
                bootstrap_timeout_ms=3000,  # kafka-python 3's default waits 30 s
            )
        lost = [r.getMessage() for r in caplog.records if "Connection lost" in r.getMessage()]
        assert lost and all("SaslAuthenticationFailedError" in m for m in lost), lost


def test_aiokafka_scram(data_dir: Path) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.errors import KafkaError as AioKafkaError

    add_user(data_dir, "alice", ALICE)

    async def main(bootstrap: str) -> list[bytes]:
        auth = {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": "alice",
            "sasl_plain_password": ALICE,
        }
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **auth)
        await producer.start()
        try:
            await producer.send_and_wait("aio-scram", b"one")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            "aio-scram", bootstrap_servers=bootstrap, auto_offset_reset="earliest", **auth
        )
        await consumer.start()
        try:
            got = [(await asyncio.wait_for(consumer.getone(), 10)).value]
        finally:
            await consumer.stop()
        wrong = AIOKafkaProducer(
            bootstrap_servers=bootstrap, **{**auth, "sasl_plain_password": "guess"}
        )
        started = time.monotonic()
        with pytest.raises(AioKafkaError):
            await wrong.start()
        await wrong.stop()
        assert time.monotonic() - started < 5
        return [v for v in got if v is not None]

    with ServerThread(str(data_dir), scram_config()) as server:
        assert asyncio.run(main(server.bootstrap)) == [b"one"]


def test_admin_client_manages_users(data_dir: Path) -> None:
    """AlterUserScramCredentials from confluent-kafka (the client salts the password), then
    the new user logs in; DescribeUserScramCredentials lists mechanisms and iterations; the
    errors are Kafka's; the users survive a restart."""
    add_user(data_dir, "admin", "admin-secret")
    admin_auth = sasl("SCRAM-SHA-256", "admin", "admin-secret")
    with ServerThread(str(data_dir), scram_config()) as server:
        admin = AdminClient(rdkafka(server.bootstrap, **admin_auth))
        futures = admin.alter_user_scram_credentials(
            [
                UserScramCredentialUpsertion(
                    "carol",
                    ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                    b"carol-secret",
                    b"some-salt",
                ),
                UserScramCredentialUpsertion(
                    "dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 1000), b"pw"
                ),
                UserScramCredentialDeletion("nobody", ScramMechanism.SCRAM_SHA_256),
            ]
        )
        futures["carol"].result(10)
        for user, code in (("dave", "UNACCEPTABLE_CREDENTIAL"), ("nobody", "RESOURCE_NOT_FOUND")):
            with pytest.raises(KafkaException) as failed:
                futures[user].result(10)
            assert failed.value.args[0].name() == code
        described = admin.describe_user_scram_credentials(["carol", "nobody"])
        carol = described["carol"].result(10)
        infos = [(i.mechanism, i.iterations) for i in carol.scram_credential_infos]
        assert infos == [(ScramMechanism.SCRAM_SHA_512, 8192)]
        with pytest.raises(KafkaException) as missing:
            described["nobody"].result(10)
        assert missing.value.args[0].name() == "RESOURCE_NOT_FOUND"
        everyone = admin.describe_user_scram_credentials().result(10)
        assert sorted(everyone) == ["admin", "carol"]
        carol_auth = sasl("SCRAM-SHA-512", "carol", "carol-secret")
        assert round_trip(server.bootstrap, **carol_auth) == (None, [b"secret"])
        # carol has no SCRAM-SHA-256 credential: that login fails
        code, _ = login_error(server.bootstrap, **sasl("SCRAM-SHA-256", "carol", "carol-secret"))
        assert code == KafkaError._AUTHENTICATION
    assert "carol-secret" not in (data_dir / CREDENTIALS_FILE).read_text()
    with ServerThread(str(data_dir), scram_config()) as server:  # restarted: still there
        carol_auth = sasl("SCRAM-SHA-512", "carol", "carol-secret")
        producer = Producer(rdkafka(server.bootstrap, **carol_auth))
        producer.produce("after-restart", b"x")
        assert producer.flush(10) == 0
        admin = AdminClient(rdkafka(server.bootstrap, **admin_auth))
        gone = admin.alter_user_scram_credentials(
            [UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_512)]
        )
        gone["carol"].result(10)
        assert login_error(server.bootstrap, **carol_auth)[0] == KafkaError._AUTHENTICATION


def test_admin_api_errors_on_the_wire(data_dir: Path) -> None:
    add_user(data_dir, "alice", ALICE)
    with ServerThread(str(data_dir), scram_config(sasl_plain_users={"p": "p"})) as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            hello = _exchange(sock, 17, 1, {"mechanism": "PLAIN"})
            assert list(hello.mechanisms) == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
            assert _exchange(sock, 36, 2, {"auth_bytes": b"\0p\0p"}).error_code == 0
            upsert = {"name": "x", "iterations": 4096, "salt": b"s", "salted_password": b"p"}
            reply = _exchange(
                sock,
                51,
                0,
                {
                    "deletions": [],
                    "upsertions": [
                        {**upsert, "mechanism": 3},
                        {**upsert, "name": "y", "mechanism": 1, "iterations": 20000},
                        {**upsert, "name": "", "mechanism": 1},
                        {**upsert, "name": "z", "mechanism": 1},
                        {**upsert, "name": "z", "mechanism": 1},
                        {**upsert, "name": "ok", "mechanism": 2},
                    ],
                },
            )
            codes = {r.user: (r.error_code, r.error_message) for r in reply.results}
            assert codes["x"][0] == 33  # UNSUPPORTED_SASL_MECHANISM
            assert codes["y"][0] == 93 and "Too many iterations" in codes["y"][1]
            assert codes[""][0] == 93  # UNACCEPTABLE_CREDENTIAL
            assert codes["z"][0] == 92  # DUPLICATE_RESOURCE
            assert codes["ok"][0] == 0
            described = _exchange(sock, 50, 0, {"users": [{"name": "z"}, {"name": "ok"}]})
            by_user = {r.user: r for r in described.results}
            assert by_user["z"].error_code == 91  # never written: RESOURCE_NOT_FOUND
            assert [(i.mechanism, i.iterations) for i in by_user["ok"].credential_infos] == [
                (2, 4096)
            ]
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            assert _exchange(sock, 17, 1, {"mechanism": "SCRAM-SHA-256"}).error_code == 0
            denied = _exchange(sock, 36, 2, {"auth_bytes": b"not scram"})
            assert denied.error_code == 58
            assert "SCRAM-SHA-256" in denied.error_message
            assert sock.recv(1) == b""


def test_cli_adds_a_user_a_running_server_accepts(data_dir: Path) -> None:
    with ServerThread(str(data_dir), scram_config()) as server:
        auth = sasl("SCRAM-SHA-256", "erin", "erin-secret")
        assert login_error(server.bootstrap, **auth)[0] == KafkaError._AUTHENTICATION
        result = run_cli(
            ["scram", "--data", str(data_dir), "--add", "erin", "--password-stdin"],
            stdin="erin-secret\n",
        )
        assert result.returncode == 0, result.stderr
        assert round_trip(server.bootstrap, **auth) == (None, [b"secret"])
    listed = run_cli(["scram", "--data", str(data_dir), "--list"])
    assert "erin: SCRAM-SHA-256 (8192 iterations), SCRAM-SHA-512 (8192 iterations)" in listed.stdout
    deleted = run_cli(["scram", "--data", str(data_dir), "--delete", "erin"])
    assert deleted.returncode == 0 and ScramStore(str(data_dir)).users() == {}
    again = run_cli(["scram", "--data", str(data_dir), "--delete", "erin"])
    assert again.returncode == 1
