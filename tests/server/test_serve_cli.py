"""``kafkalog serve`` as a user runs it: a child process on a free loopback port; SIGTERM stops
it cleanly (clean-shutdown marker, ``kafkalog verify`` passes) and SIGKILL loses nothing a
producer had acknowledged with acks=all."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from confluent_kafka import Producer

from clirun import kafkalog, kafkalog_here
from kafka_clients import rdkafka
from kafkalog.log import LogDir

LISTEN = ("--listen", "127.0.0.1:0")


@contextmanager
def serve(data_dir: Path, *extra: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    child = subprocess.Popen(
        [sys.executable, "-m", "kafkalog", "serve", "--data", str(data_dir), *LISTEN, *extra],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert child.stderr is not None
        bootstrap = None
        for line in child.stderr:
            found = re.search(r"serving .* on (\S+) \(\w+\)$", line.strip())
            if found:
                bootstrap = found.group(1)
                break
        assert bootstrap is not None, "the server never said where it listens"
        yield child, bootstrap
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(30)
        if child.stderr is not None:
            child.stderr.close()


def produce_acks_all(bootstrap: str, count: int) -> None:
    producer = Producer(rdkafka(bootstrap, acks="all"))
    acked: list[object] = []
    for i in range(count):
        value = f"r{i}".encode()
        producer.produce("durable", value=value, on_delivery=lambda e, m: acked.append(e))
    assert producer.flush(15) == 0
    assert acked == [None] * count


def test_sigterm_stops_cleanly(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with serve(data_dir) as (child, bootstrap):
        produce_acks_all(bootstrap, 50)
        child.send_signal(signal.SIGTERM)
        assert child.wait(30) == 0
        assert child.stderr is not None
        assert "stopped cleanly" in child.stderr.read()
    assert (data_dir / ".kafka_cleanshutdown").exists()
    result = kafkalog_here("verify", str(data_dir))
    assert result.returncode == 0, result.stdout + result.stderr


def test_sigkill_loses_nothing_acknowledged(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with serve(data_dir) as (child, bootstrap):
        produce_acks_all(bootstrap, 200)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(30)
    assert not (data_dir / ".kafka_cleanshutdown").exists()
    with LogDir(str(data_dir), writable=True) as logdir:  # recovery, as a broker's restart
        log = logdir.log("durable", 0)
        assert [r.value for r in log.records(0)] == [f"r{i}".encode() for i in range(200)]


def test_a_public_address_is_refused_without_the_flag(tmp_path: Path) -> None:
    result = kafkalog("serve", "--data", str(tmp_path / "d"), "--listen", "0.0.0.0:0")
    assert result.returncode == 2
    assert "refusing to listen on 0.0.0.0:0 without TLS or SASL" in result.stderr
    assert not (tmp_path / "d").exists()


def test_the_limits_flags_reach_the_server(tmp_path: Path) -> None:
    """--max-connections-per-ip 1: a second connection from 127.0.0.1 is closed at once."""
    import socket

    with serve(
        tmp_path / "d", "--max-connections-per-ip", "1", "--connections-max-idle-ms", "60000"
    ) as (
        _,
        bootstrap,
    ):
        host, port = bootstrap.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=5) as first:
            with socket.create_connection((host, int(port)), timeout=5) as second:
                assert second.recv(1) == b""  # refused: closed by the server
            first.sendall(b"\0\0\0\x01")  # the first is served (waits for the rest)
            first.settimeout(0.5)
            try:
                first.recv(1)
                raise AssertionError("the first connection was closed too")
            except TimeoutError:
                pass


def test_limits_flags_are_checked(tmp_path: Path) -> None:
    result = kafkalog("serve", "--data", str(tmp_path / "d"), "--max-connections", "-1")
    assert result.returncode == 2 and "must be at least 0" in result.stderr


def test_a_port_in_use_is_said_with_what_to_do(tmp_path: Path) -> None:
    """A second server on a port already taken said "[Errno 98] error while attempting to bind
    on address ('127.0.0.1', 9092): address already in use"."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = kafkalog("serve", "--data", str(tmp_path / "d"), "--listen", f"127.0.0.1:{port}")
    assert result.returncode == 2, result
    assert result.stderr == (
        f"kafkalog: error: cannot listen on 127.0.0.1:{port}: the address is in use (another "
        "kafkalog serve, or a Kafka broker?); stop it, or choose another port with "
        "--listen 127.0.0.1:PORT\n"
    )


def test_a_port_alone_for_listen_is_answered_with_an_example(tmp_path: Path) -> None:
    result = kafkalog("serve", "--data", str(tmp_path / "d"), "--listen", "9093")
    assert result.returncode == 2
    assert result.stderr == (
        "kafkalog: error: --listen takes HOST:PORT, not '9093': e.g. --listen 127.0.0.1:9093\n"
    )
