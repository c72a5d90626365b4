"""Produce, Fetch, ListOffsets, OffsetForLeaderEpoch and DeleteRecords over the partition logs.

Produced batches go through ``Log.append`` (CRC, max.message.bytes, offsets, LogAppendTime and
the log's producer state); fetched bytes are the segment bytes as stored, never decoded, their
offsets and CRCs checked by the log (``verify_crcs``: librdkafka checks no CRC by default) the
first time they are fetched.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from kafkalog.errors import (
    CompressionError,
    DecompressionLimitError,
    InvalidRecordError,
    KafkalogError,
)
from kafkalog.log import LATEST_TIMESTAMP, Log
from kafkalog.log.abort_markers import UnlistedAbortError
from kafkalog.log.segment import FileRegion, TxnState
from kafkalog.records import RecordBatch
from kafkalog.records.compression import decompress_buffer
from kafkalog.records.crc import crc32c_c
from kafkalog.server import errors as E
from kafkalog.server.topics import INTERNAL_TOPICS, TopicError

if TYPE_CHECKING:
    from kafkalog.server.broker_interface import BrokerInterface as Broker

_logger = logging.getLogger("kafkalog.server")
_said: dict[str, float] = {}


def log_error(message: str, *args: object) -> None:
    """An error of a partition, logged once a minute however many requests meet it (a
    damaged log is met by every Fetch of every consumer)."""
    text = message % args
    now = time.monotonic()
    if now - _said.get(text, -60.0) < 60.0:
        return
    if len(_said) > 1000:
        _said.clear()
    _said[text] = now
    _logger.error("%s", text)


READ_COMMITTED = 1


class LastStableOffset:
    """A partition's last stable offset, kept up to date by reading only the batches appended
    since the last call (``Log.last_stable_offset`` rescans the log each time, too slow for
    every read_committed fetch, librdkafka's default). Once the log layer tracks producer state
    itself (the ``logstate`` work), this defers to it."""

    def __init__(self) -> None:
        self.state = TxnState()
        self.scanned_to: int | None = None

    def of(self, log: Log) -> int:
        if getattr(log, "producer_state", None) is not None:
            return log.last_stable_offset()  # the log keeps its own producer state: O(1)
        start = log.log_start_offset if self.scanned_to is None else self.scanned_to
        if start < log.log_end_offset:
            for batch in log.batches(start):
                if isinstance(batch, RecordBatch) and batch.base_offset >= start:
                    with contextlib.suppress(KafkalogError):
                        self.state.update(batch, log.limits)
        self.scanned_to = log.log_end_offset
        return min(self.state.ongoing.values(), default=log.log_end_offset)


def _partition_log(broker: Broker, topic: str, partition: int) -> Log:
    t = broker.registry.get(topic)
    if t is None or not 0 <= partition < t.partitions:
        raise TopicError(E.UNKNOWN_TOPIC_OR_PARTITION, f"unknown partition {topic}-{partition}")
    try:
        return broker.registry.log(t, partition)
    except TopicError:
        raise
    except (KafkalogError, OSError) as e:  # a log that cannot be opened: offline, as Kafka's
        log_error("cannot open %s-%d: %s", topic, partition, e)
        raise TopicError(E.KAFKA_STORAGE_ERROR, f"{topic}-{partition}: {e}") from None


#: Kafka's ReplicaManager.isValidRequiredAcks
VALID_ACKS = (-1, 0, 1)
_HEADER = 61  # a v2 batch's header, up to and including its record count
_CRC_AT = 17
_ATTRIBUTES_AT = 21
_TRANSACTIONAL = 0x10

_inflater: ThreadPoolExecutor | None = None


def _inflate_pool() -> ThreadPoolExecutor:
    """Where a produced batch's bounded decompression runs: off the event loop, so a batch
    that inflates to the bound (a decompression bomb) costs the loop nothing and the other
    connections are served meanwhile. Two threads (the machine may have two cores); zlib,
    cramjam and zstandard drop the GIL while they inflate."""
    global _inflater
    if _inflater is None:
        _inflater = ThreadPoolExecutor(max_workers=2, thread_name_prefix="kafkalog-inflate")
    return _inflater


def _is_transactional(records: Any) -> bool:
    """Kafka's ``RequestUtils.hasTransactionalRecords``: the first batch's transactional bit."""
    return (
        records is not None
        and len(records) >= _HEADER
        and records[_MAGIC_AT] == 2
        and bool(records[_ATTRIBUTES_AT + 1] & _TRANSACTIONAL)
    )


async def produce(broker: Broker, body: Any, version: int) -> dict[str, Any]:
    """Kafka's ``KafkaApis.handleProduceRequest`` then ``ReplicaManager.appendRecords``, check
    by check: a request with transactional batches but no transactional id is refused whole
    (TRANSACTIONAL_ID_AUTHORIZATION_FAILED); per partition, an internal or unknown topic, then
    ``ProduceRequest.validateRecords`` (exactly one whole v2 batch, zstd from v7); then acks
    outside -1/0/1 (INVALID_REQUIRED_ACKS), ``min.insync.replicas`` above this one replica
    with acks=-1 (NOT_ENOUGH_REPLICAS), a compressed batch inflating beyond the topic's
    ``max.message.bytes`` (MESSAGE_TOO_LARGE, stopped at the bound, off the loop), and the
    log's own checks (size, CRC, records, producer state). Nothing is written for a refused
    partition."""
    acks = int(body.acks)
    refuse_all: tuple[int, str] | None = None
    if getattr(body, "transactional_id", None) is None and any(
        _is_transactional(pd.records) for topic in body.topic_data for pd in topic.partition_data
    ):
        refuse_all = (
            E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            "a produce request holding transactional batches needs a transactional id",
        )
    responses = []
    for topic in body.topic_data:
        parts = []
        for pd in topic.partition_data:
            index = int(pd.index)
            if refuse_all is not None:
                parts.append(_refused(index, *refuse_all))
                continue
            parts.append(
                await _produce_partition(broker, topic.name, index, pd.records, version, acks)
            )
        responses.append({"name": topic.name, "partition_responses": parts})
    broker.appended()
    return {"responses": responses}


def _refused(partition: int, code: int, message: str) -> dict[str, Any]:
    return {
        "index": partition,
        "base_offset": -1,
        "log_append_time": None,
        "error_code": code,
        "error_message": message,
    }


def _check_produce_records(records: Any, version: int) -> None:
    """Kafka's ``ProduceRequest.validateRecords``, before the log sees the bytes: from produce
    v3 on exactly one whole batch per partition (a length field claiming more bytes than the
    request holds leaves no whole batch: nothing is "corrected"), of magic 2, and zstd only
    from v7 on."""
    length = (
        int.from_bytes(records[8:12], "big", signed=True)
        if records is not None and len(records) >= 12
        else -1
    )
    if records is None or len(records) < _HEADER or length + 12 > len(records) or length < 49:
        raise TopicError(
            E.INVALID_RECORD,
            f"Produce requests with version {version} must have at least one record batch per "
            f"partition (the records hold {0 if records is None else len(records)} bytes, the "
            f"batch's length field claims {length + 12})",
        )
    if records[_MAGIC_AT] != 2:
        raise TopicError(
            E.INVALID_RECORD,
            f"Produce requests with version {version} are only allowed to contain record "
            "batches with magic version 2",
        )
    if length + 12 < len(records):
        raise TopicError(
            E.INVALID_RECORD,
            f"Produce requests with version {version} are only allowed to contain exactly one "
            "record batch per partition",
        )
    if version < 7 and records[_CODEC_AT] & 0x07 == _ZSTD:
        raise TopicError(
            E.UNSUPPORTED_COMPRESSION_TYPE,
            f"Produce requests with version {version} are not allowed to use ZStandard compression",
        )


_MAGIC_AT = 16  # the magic byte of a batch
_CODEC_AT = 22  # the low byte of a batch's attributes
_ZSTD = 4


def _inflates_beyond(records: bytes, bound: int) -> str | None:
    """Why the batch's records inflate beyond ``bound`` bytes, or None: decompressed as a
    stream that stops at the bound (a bomb is never inflated further). A batch whose CRC does
    not match is not decompressed (Kafka checks the CRC first; the log answers it), and one
    that does not decompress is the log's to report."""
    view = memoryview(records)
    if crc32c_c(view[_ATTRIBUTES_AT:]) != int.from_bytes(records[_CRC_AT:_ATTRIBUTES_AT], "big"):
        return None
    try:
        decompress_buffer(records[_CODEC_AT] & 0x07, view[_HEADER:], magic=2, limit=bound)
    except DecompressionLimitError:
        return (
            f"the batch's records decompress to more than max.message.bytes ({bound}); "
            "stopped there"
        )
    except CompressionError:
        return None
    return None


def _min_insync_replicas(broker: Broker, topic: str) -> int:
    t = broker.registry.get(topic)
    raw = {**broker.registry.defaults, **(t.overrides if t is not None else {})}.get(
        "min.insync.replicas", "1"
    )
    try:
        return int(raw)
    except ValueError:
        return 1


async def _produce_partition(
    broker: Broker, topic: str, partition: int, records: Any, version: int = 9, acks: int = -1
) -> dict[str, Any]:
    out: dict[str, Any] = {"index": partition, "base_offset": -1, "log_append_time": None}
    try:
        if topic in INTERNAL_TOPICS:  # by name, created yet or not (Kafka's ReplicaManager)
            raise TopicError(E.INVALID_TOPIC_EXCEPTION, f"Cannot append to internal topic {topic}")
        log = _partition_log(broker, topic, partition)
        out["log_start_offset"] = log.log_start_offset
        _check_produce_records(records, version)
        if acks not in VALID_ACKS:
            raise TopicError(E.INVALID_REQUIRED_ACKS, f"acks={acks} is not -1, 0 or 1")
        if acks == -1 and _min_insync_replicas(broker, topic) > 1:
            raise TopicError(
                E.NOT_ENOUGH_REPLICAS,
                f"min.insync.replicas of {topic} is {_min_insync_replicas(broker, topic)}; this "
                "broker is the partition's only in-sync replica",
            )
        if records[_CODEC_AT] & 0x07:
            bound = log.config.max_message_bytes
            data = bytes(records)
            too_large = await asyncio.get_running_loop().run_in_executor(
                _inflate_pool(), _inflates_beyond, data, bound
            )
            if too_large is not None:
                raise TopicError(
                    E.MESSAGE_TOO_LARGE, f"topic partition {topic}-{partition}: {too_large}"
                )
            # the topic or its config may have changed meanwhile: the log decides again
            log = _partition_log(broker, topic, partition)
            records = data
        info = log.append(records, leader_epoch=broker.registry.leader_epoch(topic, partition))
    except TopicError as e:
        out.update(error_code=e.code, error_message=str(e))
        return out
    except InvalidRecordError as e:
        # KIP-467: the records at fault (their index in the batch: one batch per partition)
        out.update(
            error_code=E.append_error_code(e),
            error_message=str(e),
            record_errors=[
                {"batch_index": r.record_index, "batch_index_error_message": r.message}
                for r in e.record_errors
            ],
        )
        return out
    except KafkalogError as e:
        out.update(error_code=E.append_error_code(e), error_message=str(e))
        return out
    except OSError as e:  # the disk refused: nothing was acknowledged
        log_error("append to %s-%d failed: %s", topic, partition, e)
        out.update(error_code=E.KAFKA_STORAGE_ERROR, error_message=str(e))
        return out
    out["error_code"] = E.NONE
    out["base_offset"] = info.first_offset
    if log.config.message_timestamp_type == "LogAppendTime":
        out["log_append_time"] = info.max_timestamp
    return out


def _fetch_once(broker: Broker, body: Any, version: int) -> tuple[list[Any], int, bool]:
    isolation = int(getattr(body, "isolation_level", 0))
    budget = int(getattr(body, "max_bytes", 0x7FFFFFFF))
    total = 0
    errored = False
    responses = []
    for topic in body.topics:
        parts = []
        for fp in topic.partitions:
            p = int(fp.partition)
            entry: dict[str, Any] = {"partition_index": p, "records": b""}
            try:
                log = _partition_log(broker, topic.topic, p)
            except TopicError as e:
                entry.update(error_code=e.code, high_watermark=-1)
                errored = True
                parts.append(entry)
                continue
            hw = log.log_end_offset
            lso = broker.last_stable_offset(log) if isolation == READ_COMMITTED else hw
            entry.update(high_watermark=hw, last_stable_offset=lso)
            entry["log_start_offset"] = log.log_start_offset
            offset = int(fp.fetch_offset)
            if offset < log.log_start_offset or offset > hw:
                entry["error_code"] = E.OFFSET_OUT_OF_RANGE  # with empty records, as Kafka
                errored = True
                parts.append(entry)
                continue
            upper = lso if isolation == READ_COMMITTED else hw
            if isolation == READ_COMMITTED:
                entry["aborted_transactions"] = []
            if offset < upper and budget > 0:
                limit = min(int(fp.partition_max_bytes), budget)
                try:
                    # the log's read path: whole batches, none at or past ``upper`` (the LSO
                    # for read_committed), bounded by position; the batches go from the file
                    # to the socket unread (zero_copy)
                    read = log.fetch(
                        offset,
                        limit,
                        max_offset=upper,
                        min_one_message=total == 0,
                        include_aborted=isolation == READ_COMMITTED,
                        verify_crcs=True,  # librdkafka checks none by default
                    )
                    data: bytes | FileRegion = b"" if read.region is None else read.region
                    if read.aborted is not None:
                        entry["aborted_transactions"] = [
                            {"producer_id": a.producer_id, "first_offset": a.first_offset}
                            for a in read.aborted
                        ]
                except OSError as e:  # the disk failed: Kafka's storage error
                    log_error("fetch from %s-%d at offset %d failed: %s", topic.topic, p, offset, e)
                    entry.update(error_code=E.KAFKA_STORAGE_ERROR, records=b"")
                    errored = True
                    parts.append(entry)
                    continue
                except UnlistedAbortError as e:
                    # an ABORT marker no .txnindex entry lists: the batches before it may be
                    # that transaction's, so none is answered (KAFKA_STORAGE_ERROR, as for a
                    # failed disk: the consumer retries, never reads them as committed)
                    log_error("fetch from %s-%d at offset %d: %s", topic.topic, p, offset, e)
                    entry.update(error_code=E.KAFKA_STORAGE_ERROR, records=b"")
                    errored = True
                    parts.append(entry)
                    continue
                except KafkalogError as e:
                    # damage the log's read met: the whole batches before it are answered;
                    # a fetch that starts at it answers CORRUPT_MESSAGE, which Kafka's
                    # consumers raise to the application rather than retry for ever (the
                    # others partitions and the connection carry on)
                    before = _read_before_damage(
                        log, offset, limit, upper, isolation == READ_COMMITTED
                    )
                    if before is None:
                        log_error(
                            "fetch from %s-%d at offset %d met damage: %s",
                            topic.topic,
                            p,
                            offset,
                            e,
                        )
                        entry.update(error_code=E.CORRUPT_MESSAGE, records=b"")
                        errored = True
                        parts.append(entry)
                        continue
                    data, aborted = before
                    if aborted is not None:
                        entry["aborted_transactions"] = aborted
                entry["records"] = data
                total += len(data)
                budget -= len(data)
            parts.append(entry)
        responses.append({"topic": topic.topic, "partitions": parts})
    return responses, total, errored


def _read_before_damage(
    log: Log, offset: int, limit: int, upper: int, committed: bool
) -> tuple[bytes | FileRegion, list[dict[str, int]] | None] | None:
    """The whole batches from ``offset`` that a read can return before the damage a read of
    ``limit`` bytes met (the log layer says where reads fail; nothing is re-detected here):
    reads of half the bytes, then half again, down to the first batch alone. None when even
    that fails (the damage is at ``offset``)."""
    size = limit
    while size > 1:
        size //= 2
        try:
            read = log.fetch(
                offset,
                size,
                max_offset=upper,
                min_one_message=True,
                include_aborted=committed,
                verify_crcs=True,
            )
        except (KafkalogError, OSError):
            continue
        if read.region is None:
            return None
        aborted = (
            None
            if read.aborted is None
            else [
                {"producer_id": a.producer_id, "first_offset": a.first_offset} for a in read.aborted
            ]
        )
        return read.region, aborted
    return None


async def fetch(broker: Broker, body: Any, version: int) -> dict[str, Any]:
    """Answer at once with data or an error; else wait for appends until ``min_bytes`` are
    there or ``max_wait`` has passed (the long poll)."""
    loop = asyncio.get_running_loop()
    max_wait = body.max_wait.total_seconds()
    deadline = loop.time() + max(0.0, max_wait)
    min_bytes = int(body.min_bytes)
    while True:
        waiter = broker.append_waiter()
        responses, total, errored = _fetch_once(broker, body, version)
        remaining = deadline - loop.time()
        if errored or total >= min_bytes or (total > 0 and min_bytes <= 1) or remaining <= 0:
            return {"responses": responses}
        try:
            await asyncio.wait_for(waiter.wait(), remaining)
        except TimeoutError:
            responses, _, _ = _fetch_once(broker, body, version)
            return {"responses": responses}


async def list_offsets(broker: Broker, body: Any, version: int) -> dict[str, Any]:
    isolation = int(getattr(body, "isolation_level", 0))
    topics = []
    for topic in body.topics:
        parts = []
        for lp in topic.partitions:
            p = int(lp.partition_index)
            entry: dict[str, Any] = {"partition_index": p, "timestamp": -1, "offset": -1}
            try:
                log = _partition_log(broker, topic.name, p)
            except TopicError as e:
                entry["error_code"] = e.code
                parts.append(entry)
                continue
            ts = int(lp.timestamp)
            if ts == LATEST_TIMESTAMP and isolation == READ_COMMITTED:
                epoch = broker.registry.leader_epoch(topic.name, p)
                entry.update(offset=broker.last_stable_offset(log), leader_epoch=epoch)
            else:
                try:
                    found = log.offsets_for_times(ts)
                except ValueError:
                    entry["error_code"] = E.INVALID_REQUEST  # an unknown negative timestamp
                    parts.append(entry)
                    continue
                if found is not None:
                    epoch = found.leader_epoch if found.leader_epoch is not None else -1
                    entry.update(timestamp=found.timestamp, offset=found.offset, leader_epoch=epoch)
            entry["error_code"] = E.NONE
            parts.append(entry)
        topics.append({"name": topic.name, "partitions": parts})
    return {"topics": topics}


async def offset_for_leader_epoch(broker: Broker, body: Any, version: int) -> dict[str, Any]:
    topics = []
    for topic in body.topics:
        parts = []
        for op in topic.partitions:
            p = int(op.partition)
            entry: dict[str, Any] = {"partition": p}
            try:
                log = _partition_log(broker, topic.topic, p)
            except TopicError as e:
                entry["error_code"] = e.code
                parts.append(entry)
                continue
            cache = log.leader_epochs
            requested = int(op.leader_epoch)
            if cache is None or not cache.entries:
                # nothing appended yet: this broker's leadership is the only epoch there is
                current = broker.registry.leader_epoch(topic.topic, p)
                epoch, end = (current, log.log_end_offset) if requested == current else (-1, -1)
            else:
                epoch, end = cache.end_offset_for(requested, log.log_end_offset)
            entry.update(error_code=E.NONE, leader_epoch=epoch, end_offset=end)
            parts.append(entry)
        topics.append({"topic": topic.topic, "partitions": parts})
    return {"topics": topics}


async def delete_records(broker: Broker, body: Any, version: int) -> dict[str, Any]:
    topics = []
    for topic in body.topics:
        parts = []
        for dp in topic.partitions:
            p = int(dp.partition_index)
            entry: dict[str, Any] = {"partition_index": p, "low_watermark": -1}
            try:
                log = _partition_log(broker, topic.name, p)
                offset = int(dp.offset)
                if offset == -1:
                    offset = log.log_end_offset
                if offset < 0 or offset > log.log_end_offset:
                    raise TopicError(E.OFFSET_OUT_OF_RANGE, f"offset {offset} is out of range")
                log.increment_log_start_offset(offset)
                entry.update(error_code=E.NONE, low_watermark=log.log_start_offset)
            except TopicError as e:
                entry["error_code"] = e.code
            parts.append(entry)
        topics.append({"name": topic.name, "partitions": parts})
    broker.registry.logdir.checkpoint()
    return {"topics": topics}
