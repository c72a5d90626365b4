"""A time lookup over a log whose middle segment lost its ``.timeindex`` (tryout18): that
segment's largest timestamp is then its ``.log``'s mtime (as Kafka takes it), later than any
record of it, so the lookup chose it for every later timestamp, found no record there and
answered "none" though later segments hold the records (``kafkalog lookup``/``cat
--timestamp``, Spark's ``startingTimestamp``, serve's ListOffsets). Every timestamp's answer
is checked against a brute force over the records."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from damage_kinds import FILE_DAMAGES
from kafkalog.log import Log, TopicConfig
from kafkalog.records import Record

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))


def _log(tmp_path: Path) -> Path:
    d = tmp_path / "data" / "t-0"
    with Log(d, TopicConfig(segment_bytes=4096)) as log:
        for i in range(300):
            log.append_records([Record.of(b"v%05d" % i, b"k", 1_700_000_000_000 + i * 1000)])
    for extra in d.glob(".kafkalog*"):
        extra.unlink()
    FILE_DAMAGES["middle .timeindex removed"](d)
    return d


def test_every_timestamp_finds_the_first_record_at_or_after_it(tmp_path: Path) -> None:
    d = _log(tmp_path)
    with Log(d, writable=False) as log:
        stamps = [(r.offset, r.timestamp) for r in log.records()]
        for ts in range(1_700_000_000_000 - 500, 1_700_000_300_000, 500):
            expected = next((o for o, t in stamps if t >= ts), None)
            found = log.offsets_for_times(ts)
            assert (found.offset if found else None) == expected, ts


def test_serve_list_offsets_and_spark_planner_by_time(tmp_path: Path) -> None:
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as RdTopicPartition

    from kafka_clients import config, consumer_settings
    from kafkalog.server import ServerThread
    from kafkalog.spark.options import parse_read_options
    from kafkalog.spark.plan import plan_read

    d = _log(tmp_path)
    copy = tmp_path / "copy"
    shutil.copytree(d.parent, copy)
    opts = parse_read_options(
        {"path": str(d.parent), "subscribe": "t", "startingTimestamp": "1700000250000"}
    )
    splits, _ = plan_read(opts)
    assert min(s.start_offset for s in splits) == 250
    with ServerThread(str(copy), config()) as server:
        consumer = Consumer(consumer_settings(server.bootstrap, "by-time"))
        answer = consumer.offsets_for_times([RdTopicPartition("t", 0, 1_700_000_250_000)], 10)
        consumer.close()
    assert answer[0].offset == 250
