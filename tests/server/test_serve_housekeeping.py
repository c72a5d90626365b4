"""``kafkalog serve`` runs a broker's background duties (issue 25 §2): retention on
``log.retention.check.interval.ms`` with each topic's own configs while a consumer reads,
producer-id expiration, and the data directory's recovery-point and log-start-offset
checkpoints on their interval."""

from __future__ import annotations

import time
from pathlib import Path

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from kafka_clients import config, wait_until
from kafkalog.log.checkpoints import OffsetCheckpoint
from kafkalog.server import ServerThread


def test_retention_runs_while_serving_and_a_consumer_reads_on(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    settings = config(
        log_retention_check_interval_ms=200,
        log_flush_offset_checkpoint_interval_ms=200,
        topic_defaults={"retention.ms": "1500", "segment.bytes": "2048"},
    )
    with ServerThread(str(data), settings) as server:
        producer = KafkaProducer(bootstrap_servers=server.bootstrap, linger_ms=0)
        old = int(time.time() * 1000) - 60_000  # records a minute old: past retention.ms
        for i in range(150):
            producer.send("aged", b"value %d" % i, timestamp_ms=old)
            producer.flush()  # one batch each: many segments
        producer.close()
        part = data / "aged-0"
        consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, enable_auto_commit=False)
        tp = TopicPartition("aged", 0)
        consumer.assign([tp])
        try:
            # retention removes every old segment but the active one, on its own schedule
            assert wait_until(lambda: consumer.beginning_offsets([tp])[tp] > 0)
            assert wait_until(lambda: len(list(part.glob("*.log"))) == 1)
            start = consumer.beginning_offsets([tp])[tp]
            # the consumer reads on from the log start, and new records are kept
            producer = KafkaProducer(bootstrap_servers=server.bootstrap)
            producer.send("aged", b"fresh").get(timeout=10)
            producer.close()
            consumer.seek_to_beginning(tp)
            got: list[tuple[int, bytes]] = []
            wait_until(
                lambda: (
                    got.extend(
                        (m.offset, m.value)
                        for ms in consumer.poll(timeout_ms=100).values()
                        for m in ms
                    )
                    or (got and got[-1][1] == b"fresh")
                )
            )
            # retention may have moved the log start on meanwhile (once every record left is
            # past retention.ms it rolls the active segment and deletes it, as Kafka does),
            # so the read starts at a log start seen between the two looks, and skips nothing
            now_start = consumer.beginning_offsets([tp])[tp]
            first = got[0][0] if got else -1
            assert start <= first <= now_start, (start, got[:3], now_start)
            assert [o for o, _ in got] == list(range(first, 151)), got[:3]
            assert got[-1] == (150, b"fresh")
            # the data directory's checkpoints follow on their own interval, not only at close
            points = data / "recovery-point-offset-checkpoint"
            starts = data / "log-start-offset-checkpoint"
            assert wait_until(lambda: points.exists() and starts.exists())
            assert wait_until(
                lambda: (
                    OffsetCheckpoint.read(str(starts)).get(("aged", 0))
                    == consumer.beginning_offsets([tp])[tp]
                )
            )
        finally:
            consumer.close()
