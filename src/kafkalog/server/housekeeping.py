"""A broker's background duties, on Kafka's intervals.

A Kafka broker schedules, besides serving requests: the retention pass over every log
(``log.retention.check.interval.ms``, 5 minutes), the expiry of producer ids idle longer than
``transactional.id.expiration.ms``/``producer.id.expiration.ms`` (checked every
``producer.id.expiration.check.interval.ms``, 10 minutes), and the writing of the data
directory's ``recovery-point-offset-checkpoint`` and ``log-start-offset-checkpoint``
(``log.flush.offset.checkpoint.interval.ms`` and ``log.flush.start.offset.checkpoint.interval.ms``,
1 minute each), so that a crash recovers only what was written since, the high watermarks'
``replication-offset-checkpoint`` (``replica.high.watermark.checkpoint.interval.ms``, 5 s),
and the log cleaner over
compacted topics (``log.cleaner.backoff.ms`` between passes, 15 s), whose rounds run in a
worker thread. ``kafkalog serve`` runs
the same duties on the same defaults, on its event loop between requests (each is short: a
retention pass renames files, removal comes later through ``file.delete.delay.ms``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kafkalog.errors import KafkalogError
from kafkalog.server.config import ServerConfig

if TYPE_CHECKING:
    from kafkalog.server.broker import Broker

_log = logging.getLogger("kafkalog.server")


@dataclass(frozen=True)
class Duty:
    """One background duty: what it is called, how often it runs, what it does."""

    name: str
    interval_ms: int
    run: Callable[[Broker, int], Awaitable[None] | None]


def retention(broker: Broker, now_ms: int) -> None:
    """Kafka's retention pass over every partition of every topic (its topic configs: time,
    size, and the log start offset; a compacted topic only the log start offset)."""
    for topic in list(broker.registry.topics.values()):
        for partition in range(topic.partitions):
            if not broker.registry.exists(topic, partition):
                continue
            if (topic.name, partition) in broker.registry.offline:
                continue  # logged when it went offline; nothing to retain until a restart
            try:
                log = broker.registry.log(topic, partition)
                deleted = log.delete_old_segments(now_ms)
            except (KafkalogError, OSError) as e:
                _log.error("retention of %s-%d failed: %s", topic.name, partition, e)
                continue
            if deleted:
                _log.info(
                    "retention: deleted %d segment(s) of %s-%d; the log starts at offset %d",
                    deleted,
                    topic.name,
                    partition,
                    log.log_start_offset,
                )


def expire_producers(broker: Broker, now_ms: int) -> None:
    """Forget producer ids idle longer than ``producer.id.expiration.ms`` (their state is no
    longer needed to detect duplicates), as Kafka's removeExpiredProducers does."""
    for log in broker.logdir.open_logs():
        log.remove_expired_producers(now_ms, broker.config.producer_id_expiration_ms)


def checkpoints(broker: Broker, now_ms: int) -> None:
    """The data directory's recovery-point and log-start-offset checkpoints (and with them
    the high watermarks and the partitions' changed leader-epoch checkpoints)."""
    broker.logdir.checkpoint()


def high_watermarks(broker: Broker, now_ms: int) -> None:
    """The ``replication-offset-checkpoint``, on its own shorter interval as Kafka's replica
    manager writes it (``replica.high.watermark.checkpoint.interval.ms``, 5 s)."""
    broker.logdir.checkpoint_high_watermarks()


async def clean(broker: Broker, now_ms: int) -> None:
    """One pass of Kafka's log cleaner over the compacted partitions, internal topics
    included (the filthiest past its ``min.cleanable.dirty.ratio`` gets one round; see
    :func:`kafkalog.log.cleaner.clean_filthiest`), in a worker thread: appends and fetches go
    on, the cleaner taking each log's lock only to read its state and to swap segments in."""
    from kafkalog.log.cleaner import CleanerOptions, CleaningAborted, clean_filthiest

    logs = []
    for topic in list(broker.registry.topics.values()):
        if "compact" not in broker.registry.config(topic).cleanup_policy:
            continue
        for partition in range(topic.partitions):
            # an offline partition (its log cannot open) is left out, not every pass failed
            if broker.registry.exists(topic, partition) and broker.registry.online(
                topic, partition
            ):
                logs.append(broker.registry.log(topic, partition))
    if not logs:
        return
    options = CleanerOptions(dedupe_buffer_size=broker.config.log_cleaner_dedupe_buffer_size)
    try:
        result = await asyncio.wrap_future(
            broker.background.submit(
                clean_filthiest,
                logs,
                now=now_ms,
                options=options,
                lock_of=lambda log: log.lock,
                # a damaged partition is marked uncleanable there (an ERROR line naming it)
                # and passed by, so the others are still cleaned (Kafka's LogCleanerManager)
                manager=broker.logdir.cleaner_manager,
            )
        )
    except CleaningAborted as aborted:
        # retention or a truncation took segments of the group being cleaned: nothing was
        # swapped in for it, and the next pass cleans it again (Kafka logs this at info too)
        _log.info("log cleaning aborted: %s", aborted)
        return
    if result is not None:
        _log.info(
            "cleaned %s-%d: %d to %d bytes, %d to %d segment(s)",
            result.topic,
            result.partition,
            result.size_before,
            result.size_after,
            result.segments_before,
            result.segments_after,
        )


def duties(config: ServerConfig) -> list[Duty]:
    """The duties a server runs, on the intervals of its configuration."""
    out = [
        Duty("retention", config.log_retention_check_interval_ms, retention),
        Duty(
            "producer-id expiration",
            config.producer_id_expiration_check_interval_ms,
            expire_producers,
        ),
        Duty("checkpoints", config.log_flush_offset_checkpoint_interval_ms, checkpoints),
        Duty(
            "high watermarks",
            config.replica_high_watermark_checkpoint_interval_ms,
            high_watermarks,
        ),
    ]
    if config.log_cleaner_enable:
        out.append(Duty("log cleaner", config.log_cleaner_backoff_ms, clean))
    return out


async def run_duty(get_broker: Callable[[], Broker | None], duty: Duty) -> None:
    """Run ``duty`` every ``duty.interval_ms`` until the broker is gone (or the task is
    cancelled); a failing run is logged and the next one comes on time."""
    while True:
        await asyncio.sleep(duty.interval_ms / 1000)
        broker = get_broker()
        if broker is None:
            return
        try:
            done = duty.run(broker, int(time.time() * 1000))
            if done is not None:
                await done
        except (KafkalogError, OSError) as e:
            _log.error("%s failed: %s", duty.name, e)
        broker.appended()  # waiting fetches see a log start that moved
