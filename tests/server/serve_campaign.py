"""A seeded crash campaign against ``kafkalog serve`` with the real clients, as an application
developer meets it: serve runs as a real process on a free loopback port and is SIGKILLed at
seeded moments (random times, and named points: a transactional Produce, TxnOffsetCommit,
EndTxn, between a transaction's state records and markers, a segment roll, the cleaner's swap on
a compacted topic), restarted on the same port each time, while unchanged clients work on:

- aiokafka, an idempotent producer: the input topic ``in`` (2 partitions, small segments);
- kafka-python, an idempotent producer: the compacted topic ``keyed`` (the cleaner runs often);
- confluent-kafka, consume-transform-produce: a read_committed consumer subscribed in a group,
  a transactional producer committing the group's offsets in its transactions, aborting some on
  purpose (then rewinding to the group's committed offsets);
- confluent-kafka, a transactional producer committing or aborting (seeded) into ``txn``;
- a partition of ``victim`` damaged on disk while serving (a base offset flipped, outside the
  CRC): the others keep serving; after the next crash it is offline (KAFKA_STORAGE_ERROR) and
  serve's log names its file and byte.

Checked at the end: every acknowledged record is there once (``in``, and ``keyed``'s last value
per key is its last acknowledged or a later one sent); nothing aborted is visible with
read_committed and every committed transaction is; the transform's output holds each input
record exactly once; the group's committed offsets are the input's ends; ``kafkalog verify`` is
clean on every partition but the damaged one (which it reports); every serve run ended by the
campaign's own SIGKILL and the next was listening within ``MAX_DOWN`` seconds.

By hand, many seeds: ``python tests/server/serve_campaign.py --seeds 1-20 --seconds 40``
(each seed in its own temporary directory; a failing seed's directory is kept and printed).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import re
import shutil
import socket
import struct
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from crashing_serve import CrashingServe

from kafka_clients import consumer_settings, rdkafka

IN_PARTITIONS = 2
KEYS = 7
#: the longest serve may be away between a kill and listening again (its restart loads every
#: log; 2 cores shared with other test workers)
MAX_DOWN = 20.0
#: librdkafka must not "re-bootstrap" after serve was away (see test_serve_txn_crash)
NO_REBOOTSTRAP = {"metadata.recovery.strategy": "none"}
CORRUPT_MESSAGE = 2
KAFKA_STORAGE_ERROR = 56

#: named kill points (crash_serve.py): the next serve run dies the N-th time it meets one
POINTS = [
    "before:Produce#{n}",
    "after:Produce#{n}",
    "before:TxnOffsetCommit#{n}",
    "after:TxnOffsetCommit#{n}",
    "before:EndTxn#{n}",
    "after:EndTxn#{n}",
    "state:PREPARE_COMMIT#{n}",
    "state:PREPARE_ABORT#{n}",
    "marker#{n}",
    "before:roll#{n}",
    "roll#{n}",
    "before:swap#1",
    "after:swap#1",
]


def transform(value: bytes) -> bytes:
    return b"out-" + value


@dataclass
class Record:
    """What the clients saw: acknowledged, maybe written (an error or a timeout), aborted."""

    acked_in: set[bytes] = field(default_factory=set)
    sent_in: set[bytes] = field(default_factory=set)
    keyed_sent: list[tuple[bytes, bytes]] = field(default_factory=list)
    keyed_acked: dict[bytes, int] = field(default_factory=dict)  # key -> index of last acked
    committed_txn: set[bytes] = field(default_factory=set)
    aborted_txn: set[bytes] = field(default_factory=set)
    unknown_txn: set[bytes] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)
    events: list[str] = field(default_factory=list)

    def note(self, what: str) -> None:
        self.events.append(f"{time.monotonic():.2f} {what}")


class Stopped(Exception):
    pass


def guarded(name: str, rec: Record, body: Callable[[], None]) -> threading.Thread:
    def run() -> None:
        try:
            body()
        except Stopped:
            pass
        except BaseException:
            rec.errors.append(f"{name}: {traceback.format_exc()}")

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread


# -- the clients --------------------------------------------------------------------------------
def aiokafka_input(bootstrap: str, rec: Record, stop: threading.Event, rng: random.Random) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError as AioError

    async def run() -> None:
        i = 0
        while not stop.is_set():
            producer = AIOKafkaProducer(
                bootstrap_servers=bootstrap,
                enable_idempotence=True,
                acks="all",
                request_timeout_ms=5000,
                retry_backoff_ms=50,
            )
            try:
                await asyncio.wait_for(producer.start(), 30)
                while not stop.is_set():
                    values = [b"in-%06d" % (i + j) for j in range(rng.randint(1, 8))]
                    i += len(values)
                    rec.sent_in.update(values)
                    futures = [
                        await producer.send("in", v, key=v, partition=int(v[-1:]) % IN_PARTITIONS)
                        for v in values
                    ]
                    for v, f in zip(values, futures, strict=True):
                        with contextlib.suppress(AioError, TimeoutError):
                            await asyncio.wait_for(f, 30)
                            rec.acked_in.add(v)
                    await asyncio.sleep(rng.random() * 0.05)
            except (AioError, TimeoutError, OSError) as e:
                rec.note(f"aiokafka producer restarts: {e!r}")
            finally:
                with contextlib.suppress(AioError, TimeoutError, OSError):
                    await asyncio.wait_for(producer.stop(), 30)

    asyncio.run(run())


def kafka_python_keyed(
    bootstrap: str, rec: Record, stop: threading.Event, rng: random.Random
) -> None:
    from kafka import KafkaProducer
    from kafka.errors import KafkaError as PyError

    i = 0
    while not stop.is_set():
        producer: Any = None
        try:
            producer = KafkaProducer(
                bootstrap_servers=bootstrap,
                enable_idempotence=True,
                acks="all",
                request_timeout_ms=5000,
                retry_backoff_ms=50,
                reconnect_backoff_ms=20,
                reconnect_backoff_max_ms=200,
                max_block_ms=30000,
            )
            while not stop.is_set():
                sent = []
                for _ in range(rng.randint(1, 10)):
                    key, value = b"k%d" % rng.randrange(KEYS), b"v-%06d" % i + bytes(80)
                    i += 1
                    rec.keyed_sent.append((key, value))
                    sent.append((len(rec.keyed_sent) - 1, key, producer.send("keyed", value, key)))
                for index, key, future in sent:
                    with contextlib.suppress(PyError):
                        future.get(timeout=30)
                        rec.keyed_acked[key] = max(rec.keyed_acked.get(key, -1), index)
                time.sleep(rng.random() * 0.05)
        except PyError as e:
            rec.note(f"kafka-python producer restarts: {e!r}")
        finally:
            if producer is not None:
                producer.close(timeout=5)


def confluent_aborter(
    bootstrap: str, rec: Record, stop: threading.Event, rng: random.Random
) -> None:
    i = 0
    while not stop.is_set():
        producer = Producer(
            rdkafka(
                bootstrap,
                **{
                    "transactional.id": "campaign-aborter",
                    "transaction.timeout.ms": 15000,
                    **NO_REBOOTSTRAP,
                },
            )
        )
        try:
            producer.init_transactions(30)
            while not stop.is_set():
                commit = rng.random() < 0.5
                values = [b"%s-%06d" % (b"c" if commit else b"a", i + j) for j in range(3)]
                i += 3
                try:
                    producer.begin_transaction()
                    for v in values:
                        producer.produce("txn", v)
                    if commit:
                        producer.commit_transaction(30)
                        rec.committed_txn.update(values)
                    else:
                        producer.abort_transaction(30)
                        rec.aborted_txn.update(values)
                except KafkaException as e:
                    rec.unknown_txn.update(values)
                    if e.args[0].txn_requires_abort():
                        producer.abort_transaction(30)
                    else:
                        raise
                time.sleep(rng.random() * 0.05)
        except KafkaException as e:
            rec.note(f"aborter restarts: {e!r}")


def rewind(consumer: Consumer) -> None:
    """Every assigned partition back to the group's committed offset (after an abort)."""
    assigned = consumer.assignment()
    if not assigned:
        return
    for tp in consumer.committed(assigned, 30):
        consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else 0))


def confluent_transform(
    bootstrap: str, rec: Record, done: threading.Event, rng: random.Random, ends: dict[int, int]
) -> None:
    """Consume-transform-produce until ``done`` is set and every input partition's committed
    offset reached ``ends`` (filled once the input is complete)."""
    attempts = 0
    while True:
        producer = Producer(
            rdkafka(
                bootstrap,
                **{
                    "transactional.id": "campaign-transform",
                    "transaction.timeout.ms": 15000,
                    **NO_REBOOTSTRAP,
                },
            )
        )
        consumer = Consumer(
            consumer_settings(
                bootstrap,
                "transform",
                **{"isolation.level": "read_committed", **NO_REBOOTSTRAP},
            )
        )
        try:
            producer.init_transactions(30)
            consumer.subscribe(["in"])
            while True:
                msgs = [m for m in consumer.consume(rng.randint(1, 12), 0.3) if m.error() is None]
                if not msgs:
                    if done.is_set() and ends:
                        assigned = consumer.assignment()
                        if len(assigned) == IN_PARTITIONS:
                            got = consumer.committed(assigned, 30)
                            if all(tp.offset == ends[tp.partition] for tp in got):
                                return
                    continue
                attempts += 1
                try:
                    producer.begin_transaction()
                    for m in msgs:
                        producer.produce("out", transform(m.value()))
                    producer.send_offsets_to_transaction(
                        consumer.position(consumer.assignment()),
                        consumer.consumer_group_metadata(),
                        30,
                    )
                    if rng.random() < 0.25:
                        producer.abort_transaction(30)
                        rewind(consumer)
                        continue
                    while True:
                        try:
                            producer.commit_transaction(30)
                            break
                        except KafkaException as e:
                            if not e.args[0].retriable():
                                raise
                except KafkaException as e:
                    if not e.args[0].txn_requires_abort():
                        raise
                    producer.abort_transaction(30)
                    rewind(consumer)
        except KafkaException as e:
            rec.note(f"transform restarts: {e!r}")
        finally:
            consumer.close()


# -- reading back -------------------------------------------------------------------------------
def read_all(
    bootstrap: str, topic: str, partitions: int, committed: bool
) -> dict[int, list[tuple[int, bytes | None, bytes | None]]]:
    """Every record of the topic's partitions, to their ends (read_committed: to the LSO)."""
    level = "read_committed" if committed else "read_uncommitted"
    settings = {"isolation.level": level, "enable.partition.eof": True}
    consumer = Consumer(consumer_settings(bootstrap, "reader", **settings))
    try:
        out: dict[int, list[tuple[int, bytes | None, bytes | None]]] = {}
        for p in range(partitions):
            # to the end: librdkafka's position stops before a control batch that ends the
            # log; its end-of-partition event does not
            consumer.assign([TopicPartition(topic, p, 0)])
            got: list[tuple[int, bytes | None, bytes | None]] = []
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                m = consumer.poll(0.2)
                if m is None:
                    continue
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        break
                    raise AssertionError(f"{topic}-{p}: {m.error()}")
                got.append((m.offset(), m.key(), m.value()))
            else:
                raise AssertionError(f"{topic}-{p} not read to its end in 60 s")
            out[p] = got
        return out
    finally:
        consumer.close()


def check(bootstrap: str, rec: Record, ends: dict[int, int]) -> list[str]:
    problems: list[str] = []
    # the input: every acknowledged record once; nothing never sent
    inputs = [
        v for recs in read_all(bootstrap, "in", IN_PARTITIONS, False).values() for _, _, v in recs
    ]
    counts = Counter(inputs)
    dup = sorted(v for v, c in counts.items() if c > 1 and v is not None)
    lost = sorted(rec.acked_in - set(counts))
    alien = sorted(set(counts) - rec.sent_in)  # type: ignore[operator]
    if dup or lost or alien:
        problems.append(f"in: duplicated {dup[:5]}, lost {lost[:5]}, never sent {alien[:5]}")
    # the transform: each input record exactly once (read_committed)
    outputs = Counter(v for _, _, v in read_all(bootstrap, "out", 1, True)[0])
    want = Counter(transform(v) for v in inputs if v is not None)
    if outputs != want:
        problems.append(
            f"out: {len(outputs - want)} extra (e.g. {list(outputs - want)[:3]}), "
            f"{len(want - outputs)} missing (e.g. {list(want - outputs)[:3]})"
        )
    # the group's committed offsets: the input's ends
    group = Consumer(consumer_settings(bootstrap, "transform"))
    try:
        got = group.committed([TopicPartition("in", p) for p in range(IN_PARTITIONS)], 30)
        offsets = {tp.partition: tp.offset for tp in got}
    finally:
        group.close()
    if offsets != ends:
        problems.append(f"committed offsets {offsets}, the input ends at {ends}")
    # transactions: none aborted visible, every committed one visible, once
    txn = Counter(v for _, _, v in read_all(bootstrap, "txn", 1, True)[0])
    visible_aborted = sorted(set(txn) & rec.aborted_txn)  # type: ignore[operator]
    missing = sorted(rec.committed_txn - set(txn))
    twice = sorted(v for v, c in txn.items() if c > 1 and v is not None)
    if visible_aborted or missing or twice:
        problems.append(
            f"txn: aborted visible {visible_aborted[:5]}, committed missing {missing[:5]}, "
            f"twice {twice[:5]}"
        )
    # the compacted topic: each key's last value is its last acknowledged one or a later send
    last: dict[bytes, bytes] = {}
    for _, key, value in read_all(bootstrap, "keyed", 1, False)[0]:
        if key is not None and value is not None:
            last[key] = value
    index = {value: i for i, (_, value) in enumerate(rec.keyed_sent)}
    for key, acked in rec.keyed_acked.items():
        value = last.get(key)
        if value is None or index.get(value, -1) < acked:
            problems.append(f"keyed: {key!r} reads {value!r}, acked up to send {acked}")
    return problems


# -- damage while serving -----------------------------------------------------------------------
def fill_victim(bootstrap: str) -> None:
    producer = Producer(rdkafka(bootstrap, **{"linger.ms": 0, "batch.num.messages": 5}))
    for i in range(150):
        for p in range(2):
            producer.produce("victim", b"victim %d" % i + bytes(60), partition=p)
        if i % 10 == 9:
            producer.flush(30)
    assert producer.flush(30) == 0


def batch_starts(seg: Path) -> list[int]:
    data = seg.read_bytes()
    starts, at = [], 0
    while at + 12 <= len(data):
        starts.append(at)
        at += 12 + struct.unpack_from(">i", data, at + 8)[0]
    return starts


def damage_victim(data_dir: Path) -> tuple[Path, int]:
    """A byte of the base offset of a batch in the first segment of ``victim-0`` flipped in
    place (no truncation: the file serve has open changes under it, as a disk's would)."""
    seg = sorted((data_dir / "victim-0").glob("*.log"))[0]
    starts = batch_starts(seg)
    at = starts[len(starts) // 2] + 5
    with open(seg, "r+b") as f:
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 0xFF]))
    return seg, starts[len(starts) // 2]


def fetch_error(bootstrap: str, partition: int) -> int | None:
    """The first error a consumer of ``victim-<partition>`` from offset 0 meets (None: it
    read the partition to its end)."""
    consumer = Consumer(consumer_settings(bootstrap, "victim-reader"))
    try:
        tp = TopicPartition("victim", partition, 0)
        high = -1
        for _ in range(5):  # (librdkafka may answer while its broker handle reconnects)
            with contextlib.suppress(KafkaException):
                high = consumer.get_watermark_offsets(TopicPartition("victim", partition), 10)[1]
                break
            time.sleep(0.5)
        consumer.assign([tp])
        deadline = time.monotonic() + 20
        last = -1
        while time.monotonic() < deadline and last < high - 1:
            m = consumer.poll(0.2)
            if m is None:
                continue
            if m.error() is not None:
                return int(m.error().code())
            last = m.offset()
        return None if last == high - 1 else -1
    finally:
        consumer.close()


# -- the campaign -------------------------------------------------------------------------------
def connected(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), 0.2).close()
        return True
    except OSError:
        return False


def campaign(seed: int, base: Path, seconds: float, kills: int) -> list[str]:
    rng = random.Random(seed)
    data_dir = base / "data"
    data_dir.mkdir(parents=True)
    points = []
    for _ in range(kills):
        if rng.random() < 0.6:
            points.append(rng.choice(POINTS).format(n=rng.randint(1, 4)))
        else:
            points.append("none")  # killed at a random moment
    serve = CrashingServe(
        data_dir,
        ["none"],
        serve_args=["--topic-config", "segment.bytes=4096"],
        config={"log_cleaner_backoff_ms": 200, "offsets_topic_segment_bytes": 4096},
    )
    rec = Record()
    stop = threading.Event()
    done = threading.Event()
    ends: dict[int, int] = {}
    threads: list[threading.Thread] = []
    down: list[float] = []
    problems: list[str] = []
    try:
        serve.wait_ready()
        admin = AdminClient({"bootstrap.servers": serve.bootstrap})
        compact = {
            "cleanup.policy": "compact",
            "segment.bytes": "2048",
            "min.cleanable.dirty.ratio": "0.01",
        }
        created = admin.create_topics(
            [
                NewTopic("in", IN_PARTITIONS, 1),
                NewTopic("out", 1, 1),
                NewTopic("txn", 1, 1),
                NewTopic("victim", 2, 1),
                NewTopic("keyed", 1, 1, config=compact),
            ]
        )
        for future in created.values():
            future.result(30)
        fill_victim(serve.bootstrap)
        bootstrap = serve.bootstrap
        threads = [
            guarded(
                "aiokafka",
                rec,
                lambda: aiokafka_input(bootstrap, rec, stop, random.Random(rng.random())),
            ),
            guarded(
                "kafka-python",
                rec,
                lambda: kafka_python_keyed(bootstrap, rec, stop, random.Random(rng.random())),
            ),
            guarded(
                "aborter",
                rec,
                lambda: confluent_aborter(bootstrap, rec, stop, random.Random(rng.random())),
            ),
        ]
        transformer = guarded(
            "transform",
            rec,
            lambda: confluent_transform(bootstrap, rec, done, random.Random(rng.random()), ends),
        )
        # the kills: each at its point or, within the slot, at a random moment
        slot = seconds / max(1, kills)
        damage_at = rng.randrange(kills) if kills else -1
        damaged: tuple[Path, int] | None = None
        for k, point in enumerate(points):
            time.sleep(slot * rng.uniform(0.3, 0.9))
            if k == damage_at:
                damaged = damage_victim(data_dir)
                rec.note(f"damaged {damaged}")
                code = fetch_error(bootstrap, 0)
                if code not in (CORRUPT_MESSAGE, KAFKA_STORAGE_ERROR):
                    problems.append(f"victim-0 damaged while serving: fetch from 0 gave {code}")
                if fetch_error(bootstrap, 1) is not None:
                    problems.append("victim-1 unreadable beside the damaged victim-0")
            # arm the running serve's successor? no: the point arms the next run
            serve.points.append(point)
            runs = len(serve.hit)
            killed = time.monotonic()
            serve.crash()  # this run killed now; the next runs armed with ``point``
            down.append(time.monotonic() - killed)
            rec.note(f"killed run {runs + 1}; next armed {point}")
            # a point the next run never meets: it is killed at the next iteration anyway
        time.sleep(slot * 0.5)
        serve.points.append("none")  # the last run is stopped cleanly, no point armed
        serve.crash()
        stop.set()
        for t in threads:
            t.join(120)
            if t.is_alive():
                problems.append(f"{t.name} did not stop in 120 s")
        # the input is complete: its ends, then the transform finishes
        consumer = Consumer(consumer_settings(bootstrap, "ends"))
        try:
            for p in range(IN_PARTITIONS):
                ends[p] = consumer.get_watermark_offsets(TopicPartition("in", p), 30)[1]
        finally:
            consumer.close()
        done.set()
        transformer.join(180)
        if transformer.is_alive():
            problems.append("the transform did not finish in 180 s")
        problems += rec.errors
        problems += check(bootstrap, rec, ends)
        if damaged is not None:
            # after restarts: the damage met (CORRUPT_MESSAGE, a flushed segment is not scanned
            # again at start, as Kafka's recovery) or the partition offline
            code = fetch_error(bootstrap, 0)
            rec.note(f"victim-0 after restarts: {code}")
            if code not in (CORRUPT_MESSAGE, KAFKA_STORAGE_ERROR):
                problems.append(f"victim-0 after restarts: fetch from 0 gave {code}")
            if fetch_error(bootstrap, 1) is not None:
                problems.append("victim-1 unreadable beside the offline victim-0")
            said = "".join(p.read_text(errors="replace") for p in base.glob("serve-*.log"))
            named = re.search(re.escape(damaged[0].name) + r".*byte", said)
            if named is None:
                problems.append(f"no serve log line names {damaged[0].name} and a byte")
    except BaseException:
        problems.append(traceback.format_exc())
    finally:
        stop.set()
        done.set()
        try:
            if serve._current != "none":  # stopped early: the last run is to stop unarmed
                serve.points[:] = ["none"]
                serve.crash()
            serve.stop()
        except AssertionError as e:
            problems.append(f"serve: {e}")
    slow = [d for d in down if d > MAX_DOWN]
    if slow:
        problems.append(f"serve was down {max(slow):.1f} s after a kill")
    problems += verify(data_dir, damaged_partition="victim-0" if damage_at >= 0 else None)
    if problems:
        problems.append("events:\n" + "\n".join(rec.events[-30:]))
        problems.append(f"kill points met: {serve.hit}; armed: {points}; down: {down}")
    return problems


def verify(data_dir: Path, damaged_partition: str | None) -> list[str]:
    """``kafkalog verify`` on every partition directory: clean, but the damaged one, which it
    must report."""
    from kafkalog.cli.main import main as kafkalog

    problems = []
    for d in sorted(p for p in data_dir.iterdir() if p.is_dir() and "-" in p.name):
        out = sys.stdout
        try:
            with contextlib.redirect_stdout(None):
                code = kafkalog(["verify", str(d)])
        finally:
            sys.stdout = out
        if (code != 0) != (d.name == damaged_partition):
            problems.append(f"kafkalog verify {d.name}: exit {code}")
    return problems


def quiet() -> None:
    """The Python clients' reconnect chatter off (each kill makes pages of it)."""
    import logging

    for name in ("kafka", "aiokafka"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def main() -> int:
    quiet()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1-5", help="a seed or a range A-B")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--kills", type=int, default=8)
    args = parser.parse_args()
    first, _, last = args.seeds.partition("-")
    failed = 0
    for seed in range(int(first), int(last or first) + 1):
        base = Path(tempfile.mkdtemp(prefix=f"serve-campaign-{seed}-"))
        started = time.monotonic()
        problems = campaign(seed, base, args.seconds, args.kills)
        took = time.monotonic() - started
        if problems:
            failed += 1
            print(f"seed {seed}: FAILED in {took:.0f} s ({base})", flush=True)
            for p in problems:
                print("   ", p.replace("\n", "\n    "), flush=True)
        else:
            print(f"seed {seed}: ok in {took:.0f} s", flush=True)
            shutil.rmtree(base, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
