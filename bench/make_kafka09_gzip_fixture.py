"""Make ``tests/fixtures/kafka-0.9.0.1-gzip-kafka-python/``: a partition a real Apache Kafka
0.9.0.1 broker (``bench/jvm_kafka.py``) wrote from kafka-python's gzip message sets
(``api_version=(0, 9)``, ``compression_type="gzip"``), where ``kafkalog verify`` once
reported false problems (issue 32). Run: ``python3 bench/make_kafka09_gzip_fixture.py``."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import sys
import tempfile

from kafka import KafkaProducer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from jvm_kafka import jvm_kafka

HERE = os.path.dirname(os.path.abspath(__file__))
TARGET = os.path.join(HERE, "..", "tests", "fixtures", "kafka-0.9.0.1-gzip-kafka-python")
TOPIC = "kp-gzip"
RECORDS = 2000
PER_REQUEST = 10


def value(i: int, rng: random.Random) -> bytes:
    choices = ("alpha", "beta", "gamma", "delta", "kafka", "log")
    words = " ".join(rng.choice(choices) for _ in range(12))
    return f"value {i:05d} {words}".encode()


def main() -> None:
    rng = random.Random(32)
    work = tempfile.mkdtemp(prefix="kafka09-fixture-")
    kept = os.path.join(work, "data")
    props = "log.segment.bytes=65536\nlog.index.interval.bytes=4096\n"
    with jvm_kafka(props, keep=kept) as address:
        producer = KafkaProducer(
            bootstrap_servers=address,
            api_version=(0, 9),
            compression_type="gzip",
            linger_ms=5000,
            batch_size=1_000_000,
            acks="all",
        )
        for start in range(0, RECORDS, PER_REQUEST):
            for i in range(start, start + PER_REQUEST):
                producer.send(TOPIC, key=b"key-%05d" % i, value=value(i, rng))
            producer.flush()  # one produce request, one gzip message set, per PER_REQUEST
        producer.close()
    partition = os.path.join(kept, f"{TOPIC}-0")
    target = os.path.join(TARGET, f"{TOPIC}-0")
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(partition, target)
    for name in ("recovery-point-offset-checkpoint", "replication-offset-checkpoint"):
        with open(os.path.join(kept, name)) as f:
            lines = f.read().splitlines()
        with open(os.path.join(TARGET, name), "w") as f:  # this partition's line only
            kept_lines = [line for line in lines[2:] if line.startswith(TOPIC + " ")]
            f.write("\n".join([lines[0], str(len(kept_lines)), *kept_lines]) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    for name in sorted(os.listdir(target)):
        path = os.path.join(target, name)
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        print(f"{name} {os.path.getsize(path)} {digest[:16]}")


if __name__ == "__main__":
    main()
