"""A data directory written through ``kafkalog serve`` by a real client (confluent-kafka, i.e.
librdkafka): a transactional topic with an aborted transaction, a compacted topic (cleaned by
``kafkalog compact`` after a clean stop: the cleaner's gaps), and ``__consumer_offsets`` with
committed groups. Small (a few seconds), written at test time: the damage matrix's
serve-written source (tests/server/test_serve_damage_matrix.py)."""

from __future__ import annotations

import contextlib
import gc
import io
from pathlib import Path

from kafka_clients import config, rdkafka
from kafkalog.log import Log, LogDir
from kafkalog.server import ServerThread

#: the groups committed, and the offset each committed on ``txn``
GROUPS = {f"matrix-group-{g}": 10 * g + 5 for g in range(6)}
SEGMENT_BYTES = "2048"


def value(topic: str, i: int) -> bytes:
    return b"%s value %05d" % (topic.encode(), i)


def write_serve_source(data: Path) -> dict[str, Path]:
    """The partitions of the directory ``data`` written as the module doc says, by name."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    from kafkalog.cli.main import main

    data.mkdir(parents=True)
    with ServerThread(str(data), config(transaction_state_num_partitions=3)) as server:
        boot = server.bootstrap
        admin = AdminClient(rdkafka(boot))
        topics = [
            NewTopic("txn", 1, 1, config={"segment.bytes": SEGMENT_BYTES}),
            NewTopic(
                "compacted",
                1,
                1,
                config={"segment.bytes": SEGMENT_BYTES, "cleanup.policy": "compact"},
            ),
        ]
        for future in admin.create_topics(topics).values():
            future.result(15)
        producer = Producer(rdkafka(boot, **{"transactional.id": "matrix-tx", "linger.ms": 2}))
        producer.init_transactions(15)
        n = 0
        for round_ in range(8):
            producer.begin_transaction()
            for _ in range(15):
                producer.produce("txn", key=b"k%d" % (n % 5), value=value("txn", n))
                n += 1
            if round_ == 3:
                producer.abort_transaction(15)  # an aborted transaction between committed ones
            else:
                producer.commit_transaction(15)
        plain = Producer(rdkafka(boot, **{"linger.ms": 2, "enable.idempotence": True}))
        for i in range(240):
            # a few keys written once among keys overwritten: the cleaner leaves gaps between
            key = b"solo %d" % i if i % 7 == 0 else b"key %d" % (i % 12)
            plain.produce("compacted", key=key, value=value("compacted", i))
            if i % 20 == 19:
                plain.flush(15)
        assert plain.flush(15) == 0
        del plain, producer  # destroyed (their connections closed) before the server stops
        gc.collect()
        for group, offset in GROUPS.items():
            consumer = Consumer(rdkafka(boot, **{"group.id": group, "enable.auto.commit": False}))
            try:
                for step in (2, 1, 0):  # several commits each: several batches per partition
                    consumer.commit(
                        offsets=[TopicPartition("txn", 0, offset - step)], asynchronous=False
                    )
            finally:
                consumer.close()
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(["compact", str(data)])
    assert code == 0, out.getvalue()
    # a broker's restart after the cleaning: its loader removes the swapped-out segments'
    # ``.deleted`` files (a writable open in the matrix would, and must change nothing else)
    with LogDir(data, writable=True) as restarted:
        restarted.log("compacted", 0)
    assert not list(data.glob("*/*.deleted"))
    offsets = [p for p in sorted(data.glob("__consumer_offsets-*")) if _records(p)]
    assert offsets, "no group committed"
    found = {"txn": data / "txn-0", "compacted": data / "compacted-0"}
    found["__consumer_offsets"] = max(offsets, key=lambda p: len(_records(p)))
    compacted = _records(found["compacted"])
    assert compacted != list(range(compacted[0], compacted[0] + len(compacted))), (
        "the cleaner left no gap: the compacted source would prove nothing"
    )
    assert len(sorted(found["txn"].glob("*.log"))) >= 2, "the transactional topic rolled no segment"
    return found


def _records(d: Path) -> list[int]:
    with Log(d, writable=False) as log:
        return [r.offset for r in log.records()]
