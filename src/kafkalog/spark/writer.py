"""``df.write.format("kafkalog")``: DataFrames into Kafka partition directories, atomically.

Tasks encode their rows into record batches (offsets relative, from 0) in staging files beside
the data directory; the job commit appends them, task after task, to each partition's log, which
assigns contiguous offsets and maintains the indexes and checkpoints. If any task or the commit
fails, the partitions touched are truncated back and the staging files removed: a job's rows all
become visible, or none do.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from kafkalog.errors import KafkalogError
from kafkalog.log.config import LONG_MAX, TOPIC_CONFIG_KEYS, TopicConfig
from kafkalog.log.layout import (
    DATA_DIR_FILES,
    parse_partition_dir,
    partition_dir_name,
    segment_logs,
    validate_topic,
)
from kafkalog.log.logdir import refuse_if_broker
from kafkalog.records import Compression, encode_arrow
from kafkalog.records.partitioner import partitions_for_keys
from kafkalog.spark.options import OptionError, did_you_mean, local_path, positive_option

_LENGTH_END = 12  # a batch's base offset and length: the length counts the bytes after them
_MIN_BATCH_LENGTH = 49  # the rest of a v2 batch header
_PRODUCER_BATCH_BYTES = 1024 * 1024  # encode_arrow's default batch size
_COMMIT_LOCK_WAIT = 60.0  # seconds a commit waits for another job's commit to the directory

# producer settings Spark's Kafka sink refuses (KafkaSourceProvider's sink validation); every
# other ``kafka.`` option is a producer setting, taken and ignored (there is no broker to send
# to), except ``kafka.compression.type``: the producer's compression, as option compression
SINK_REFUSED = {
    "kafka.key.serializer": "keys are written as the bytes of the key column",
    "kafka.value.serializer": "values are written as the bytes of the value column",
}

# the write options by the names docs/spark.md spells them (Spark lower-cases them)
WRITE_NAMES = ("path", "topic", "compression", "numPartitions", "maxRecordsPerBatch", "stagingDir")
WRITE_OPTIONS = {name.lower() for name in WRITE_NAMES}


@dataclass(frozen=True)
class WriteOptions:
    path: str
    topic: str | None
    compression: Compression
    num_partitions: int | None
    max_records_per_batch: int
    staging: str
    topic_config: dict[str, str]


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    opts = {k.lower(): str(v) for k, v in options.items()}
    topic_keys = {k.lower(): k for k in TOPIC_CONFIG_KEYS}
    for key in sorted(opts):
        if key in SINK_REFUSED:
            raise OptionError(f"option {key} is not supported: {SINK_REFUSED[key]}")
    unknown = sorted(
        k
        for k in opts
        if k not in WRITE_OPTIONS and k not in topic_keys and not k.startswith("kafka.")
    )
    if unknown:
        hint = did_you_mean(unknown[0], (*WRITE_NAMES, *TOPIC_CONFIG_KEYS))
        raise OptionError(
            f"unknown option {unknown[0]!r} for writing format kafkalog{hint} "
            f"(known: {', '.join(WRITE_NAMES)}, Kafka's topic configs such as segment.bytes, "
            "and kafka.* producer settings)"
        )
    if not opts.get("path"):
        raise OptionError("option path is required: the data directory to write into")
    codec = opts.get("compression", opts.get("kafka.compression.type", "none"))
    if "compression" in opts and opts.get("kafka.compression.type", codec).lower() != codec.lower():
        raise OptionError(
            "options compression and kafka.compression.type contradict each other: give one"
        )
    try:
        compression = Compression.parse(codec)
    except ValueError as e:
        raise OptionError(f"option compression: {e}") from None
    config = {topic_keys[k]: v for k, v in opts.items() if k in topic_keys}
    TopicConfig.from_properties(config)  # validated now, on the driver, with the option named
    if "topic" in opts:
        try:
            validate_topic(opts["topic"])
        except KafkalogError as e:
            raise OptionError(f"option topic: {e}") from None
    path = local_path(opts["path"])
    return WriteOptions(
        path=path,
        topic=opts.get("topic"),
        compression=compression,
        # positive, said by name on the driver: 0 quietly meant 1 partition, -1 failed every
        # task with "partition 0 does not exist", and "abc" escaped as a bare ValueError
        num_partitions=(
            positive_option("numPartitions", opts["numpartitions"])
            if "numpartitions" in opts
            else None
        ),
        max_records_per_batch=positive_option(
            "maxRecordsPerBatch", opts.get("maxrecordsperbatch", "1000")
        ),
        staging=local_path(
            opts.get("stagingdir", path.rstrip("/") + ".kafkalog-staging"), "stagingDir"
        ),
        topic_config=config,
    )


@dataclass(frozen=True)
class Staged(WriterCommitMessage):
    """One task's output: a staging file of batches per (topic, partition)."""

    task: str
    files: tuple[tuple[str, int, str, int], ...]  # topic, partition, file, records


def check_input_schema(schema: StructType, topic_option: str | None) -> None:
    """The input columns Spark's Kafka sink takes, with its types, checked on the driver: a
    wrong type would otherwise fail in every task, and an unknown column is ignored as the sink
    ignores it. Names match exactly, as the sink finds them."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        StringType,
        StructType,
        TimestampType,
    )

    def header_ok(t: Any) -> bool:  # Spark's value is binary; a string one goes as UTF-8
        if not isinstance(t, ArrayType) or not isinstance(t.elementType, StructType):
            return False
        fields = t.elementType.fields
        return (
            [f.name for f in fields] == ["key", "value"]
            and isinstance(fields[0].dataType, StringType)
            and isinstance(fields[1].dataType, (StringType, BinaryType))
        )

    allowed: dict[str, tuple[str, Any]] = {
        "key": ("string or binary", lambda t: isinstance(t, (StringType, BinaryType))),
        "value": ("string or binary", lambda t: isinstance(t, (StringType, BinaryType))),
        "topic": ("string", lambda t: isinstance(t, StringType)),
        "partition": ("int", lambda t: isinstance(t, IntegerType)),
        "timestamp": ("timestamp", lambda t: isinstance(t, TimestampType)),
        "headers": ("array<struct<key:string,value:binary>>", header_ok),
    }
    fields = {f.name: f.dataType for f in schema.fields}
    if "value" not in fields:
        raise OptionError("a 'value' column is required to write format kafkalog")
    if topic_option is None and "topic" not in fields:
        raise OptionError("give option topic or a 'topic' column")
    for name, (wanted, ok) in allowed.items():
        if name in fields and not ok(fields[name]):
            raise OptionError(
                f"column {name!r} must be {wanted} to write format kafkalog, "
                f"not {fields[name].simpleString()}"
            )


def refuse_if_partition(path: str) -> None:
    """Refuse a partition directory given where a data directory is meant, before any task
    runs. Why: the writer would put its topics' directories and the data directory's root
    files (checkpoints, the clean-shutdown marker) inside the partition, where no reader looks,
    and Kafka would find a directory among the partition's segments."""
    parent = os.path.dirname(os.path.normpath(os.path.abspath(path)))
    if os.path.isdir(path) and segment_logs(path):
        raise OptionError(
            f"option path={path!r} is a partition directory (it holds .log segments), not a "
            f"data directory: write into its data directory, {parent}"
        )
    # a partition's name in a data directory, not made yet (``out/events-0``): the job would
    # make a data directory there, which a read of ``out`` takes for an empty partition
    try:
        parse_partition_dir(path)
        holds = (
            set(os.listdir(parent)) if not os.path.exists(path) or not os.listdir(path) else set()
        )
    except (ValueError, OSError):
        return
    if holds & DATA_DIR_FILES:
        raise OptionError(
            f"option path={path!r} names a partition directory of the data directory {parent} "
            f"(it holds {sorted(holds & DATA_DIR_FILES)[0]}), not a data directory: write "
            f"into {parent} with option topic"
        )


class KafkaLogWriter(DataSourceArrowWriter):
    def __init__(self, opts: WriteOptions, schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise OptionError("kafkalog appends to logs: use mode('append')")
        check_input_schema(schema, opts.topic)
        self.opts = opts
        self.job = uuid.uuid4().hex
        refuse_if_broker(opts.path)  # before any task runs
        refuse_if_partition(opts.path)  # likewise
        self.partition_counts = _partition_counts(opts.path)

    def _count(self, topic: str) -> int:
        existing = self.partition_counts.get(topic)
        if existing:
            return existing
        return self.opts.num_partitions or 1

    # -- on the executors ---------------------------------------------------------------------
    def write(self, iterator: Iterator[pa.RecordBatch]) -> Staged:
        task = uuid.uuid4().hex
        directory = os.path.join(self.opts.staging, self.job, task)
        os.makedirs(directory, exist_ok=True)
        counts: dict[tuple[str, int], int] = {}
        files: dict[tuple[str, int], Any] = {}
        config = TopicConfig.from_properties(self.opts.topic_config)
        try:
            for batch in iterator:
                for (topic, partition), rows in self._route(batch):
                    encoded = _encode(rows, self.opts, config, topic, partition)
                    key = (topic, partition)
                    if key not in files:
                        files[key] = open(  # noqa: SIM115 - closed in finally
                            os.path.join(directory, f"{topic}-{partition}.batches"), "wb"
                        )
                    files[key].write(encoded.data)
                    counts[key] = counts.get(key, 0) + rows.num_rows
        finally:
            for f in files.values():
                f.flush()
                os.fsync(f.fileno())
                f.close()
        return Staged(
            task,
            tuple(
                (t, p, os.path.join(directory, f"{t}-{p}.batches"), n)
                for (t, p), n in sorted(counts.items())
            ),
        )

    def _route(self, batch: pa.RecordBatch) -> Iterator[tuple[tuple[str, int], pa.Table]]:
        table = pa.Table.from_batches([batch])
        n = table.num_rows
        if n == 0:
            return
        if self.opts.topic is not None:
            topics = np.full(n, self.opts.topic, dtype=object)
        else:
            topics = np.asarray(table.column("topic").to_pylist(), dtype=object)
            if any(t is None for t in topics):
                raise KafkalogError("a row has a null topic and no topic option is set")
            for topic in set(topics.tolist()):
                validate_topic(topic)  # before it names a staging file or a directory
        partitions = np.empty(n, np.int64)
        names = table.schema.names
        given = given_valid = None
        if "partition" in names:
            column = table.column("partition").combine_chunks()
            given = column.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
            given_valid = np.asarray(column.is_valid(), dtype=np.bool_)
        for topic in set(topics.tolist()):
            rows = np.flatnonzero(topics == topic)
            count = self._count(topic)
            if given is not None and given_valid is not None:
                # a null partition goes where the producer's partitioner puts it, as in Spark
                chosen = given_valid[rows]
                partitions[rows[chosen]] = given[rows[chosen]]
                rows = rows[~chosen]
            if len(rows) and "key" in names:
                partitions[rows] = _key_partitions(table.column("key"), rows, count)
            elif len(rows):
                partitions[rows] = np.arange(len(rows)) % count
            rows = np.flatnonzero(topics == topic)
            bad = partitions[rows][(partitions[rows] < 0) | (partitions[rows] >= count)]
            if bad.size:
                raise KafkalogError(
                    f"partition {int(bad[0])} does not exist in topic {topic!r} "
                    f"({count} partitions)"
                )
        keep = [c for c in ("key", "value", "timestamp", "headers") if c in names]
        body = table.select(keep)
        for topic in sorted(set(topics.tolist())):
            for partition in sorted(set(partitions[topics == topic].tolist())):
                rows = np.flatnonzero((topics == topic) & (partitions == partition))
                yield (str(topic), int(partition)), body.take(pa.array(rows))

    # -- on the driver --------------------------------------------------------------------------
    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        staged = [m for m in messages if isinstance(m, Staged)]
        self._commit(staged)

    def _commit(self, staged: list[Staged]) -> None:
        from kafkalog.log import LogDir

        config = TopicConfig.from_properties(self.opts.topic_config)
        before: dict[tuple[str, int], int] = {}
        created: list[tuple[str, int]] = []
        # one writer of the data directory at a time: another job's commit (or `kafkalog
        # ingest`) is waited for, a running broker refused before anything is written
        logdir = LogDir(self.opts.path, writable=True, wait=_COMMIT_LOCK_WAIT)

        def open_log(topic: str, partition: int) -> Any:
            if (topic, partition) not in before and not os.path.isdir(
                os.path.join(self.opts.path, partition_dir_name(topic, partition))
            ):
                created.append((topic, partition))
            log = logdir.log(topic, partition, create=True, config=config)
            before.setdefault((topic, partition), log.log_end_offset)
            return log

        try:
            for message in staged:
                for topic, partition, path, _ in message.files:
                    _append_file(open_log(topic, partition), path)
            for topic, count in self._new_topic_counts(staged).items():
                for p in range(count):  # a new topic gets all its partitions, even empty ones
                    open_log(topic, p)
        except BaseException:
            for (topic, partition), leo in before.items():
                with contextlib.suppress(KafkalogError):
                    if (topic, partition) in created:
                        # truncated to empty it would stay as a partition of a topic the job
                        # never wrote, and a later job would take the topic's count from it
                        logdir.remove_partition(topic, partition)
                    else:
                        logdir.log(topic, partition).truncate_to(leo)
            logdir.close()
            self._remove_staging()
            raise
        logdir.close()
        self._remove_staging()

    def _new_topic_counts(self, staged: list[Staged]) -> dict[str, int]:
        topics = {t for m in staged for t, _, _, _ in m.files}
        return {t: self._count(t) for t in topics if t not in self.partition_counts}

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self._remove_staging()

    def _remove_staging(self) -> None:
        shutil.rmtree(os.path.join(self.opts.staging, self.job), ignore_errors=True)
        with contextlib.suppress(OSError):
            os.rmdir(self.opts.staging)


def _encode(
    rows: pa.Table, opts: WriteOptions, config: TopicConfig, topic: str, partition: int
) -> Any:
    """A partition's rows as batches the topic takes, each at most ``max.message.bytes`` and
    ``segment.bytes`` (and a producer's 1 MiB).

    Why: a producer whose batch the broker refuses as too large splits it and retries, so with
    Spark's Kafka sink every row that fits on its own gets written; the log refuses a staged
    batch over either limit whole, at the commit, failing the job. ``encode_arrow`` bounds the
    uncompressed size; a batch that compression made larger is cut again, smaller. A row too
    large on its own is refused here, in the task, naming its partition."""
    limit = min(config.max_message_bytes, config.segment_bytes)
    target = min(_PRODUCER_BATCH_BYTES, limit)
    codec, level = _codec(opts, config)
    _refuse_before_epoch(rows, topic, partition)
    _check_timestamp_window(rows, config, topic, partition)
    while True:
        encoded = encode_arrow(
            rows,
            compression=codec,
            compression_level=level,
            max_records_per_batch=opts.max_records_per_batch,
            max_batch_bytes=target,
        )
        over = encoded.sizes > limit
        if not over.any():
            return encoded
        if (encoded.record_counts[over] > 1).any() and target > 1:
            target //= 2
            continue
        biggest = int(encoded.sizes.max())
        name = "max.message.bytes" if limit == config.max_message_bytes else "segment.bytes"
        raise KafkalogError(
            f"a row for topic {topic!r} partition {partition} is {biggest} bytes as a record "
            f"batch, larger than the topic's {name} ({limit}): Kafka would refuse it too"
        )


def _refuse_before_epoch(rows: pa.Table, topic: str, partition: int) -> None:
    """Refuse a timestamp before 1970, as Spark's Kafka sink does (its producer record takes
    only timestamps >= 0, or null for now). Why: encoded as is, 1969-12-31 23:59:59.999 became
    a record timestamp of -1, which Kafka reads as "no timestamp", and earlier ones failed
    with a row number counted within one staged partition of one Arrow batch."""
    if "timestamp" not in rows.column_names:
        return
    column = rows.column("timestamp")
    lowest = pc.min(column.cast(pa.int64())).as_py()
    if lowest is not None and lowest < 0:
        raise KafkalogError(
            f"a row for topic {topic!r} partition {partition} has timestamp "
            f"{pc.min(column).as_py()}, before 1970-01-01: Kafka takes record timestamps "
            f"from the epoch on (a null timestamp means the time of writing)"
        )


def _check_timestamp_window(
    rows: pa.Table, config: TopicConfig, topic: str, partition: int
) -> None:
    """Refuse a CreateTime row whose timestamp is further in the past or future than the
    topic's ``message.timestamp.before.max.ms`` / ``after.max.ms`` (or the deprecated
    ``difference.max.ms``) allow, as a broker refuses the batch. Why: the options were taken
    and validated, then ignored, so rows Kafka would refuse were written."""
    before = config.effective_message_timestamp_before_max_ms
    after = config.effective_message_timestamp_after_max_ms
    if config.message_timestamp_type != "CreateTime" or "timestamp" not in rows.column_names:
        return
    if before == LONG_MAX and after == LONG_MAX:
        return
    column = rows.column("timestamp")
    ms = column.cast(pa.timestamp("ms", column.type.tz), safe=False).cast(pa.int64())
    extremes = pc.min_max(ms)
    lowest, highest = extremes["min"].as_py(), extremes["max"].as_py()
    if lowest is None:
        return  # all null: the time of writing
    now = int(time.time() * 1000)
    for value, bad, limit, name in (
        (lowest, now - lowest > before, before, "before"),
        (highest, highest - now > after, after, "after"),
    ):
        if bad:
            shown = pa.scalar(value, pa.timestamp("ms", column.type.tz)).as_py()
            raise KafkalogError(
                f"a row for topic {topic!r} partition {partition} has timestamp {shown}, "
                f"further from now than the topic's message.timestamp.{name}.max.ms ({limit}) "
                f"allows: Kafka would refuse it"
            )


def _codec(opts: WriteOptions, config: TopicConfig) -> tuple[Compression, int | None]:
    """The codec the batches are stored with, and its level: the topic's ``compression.type``
    unless it is ``producer`` (the default), else the ``compression`` option.

    Why: a broker recompresses every batch it takes into the topic's ``compression.type``
    (``uncompressed`` decompresses them), at the topic's ``compression.<codec>.level``; the
    option was accepted and then ignored, so the files did not hold what Kafka would store."""
    return config.target_compression(opts.compression)


def _key_partitions(column: pa.ChunkedArray, rows: np.ndarray, count: int) -> np.ndarray:
    """Kafka's default partitioner (murmur2 of the key) for ``rows``; null keys round robin."""
    keys = column.take(pa.array(rows)).combine_chunks()
    if pa.types.is_string(keys.type):
        keys = keys.cast(pa.binary())
    bufs = keys.buffers()
    offsets = np.frombuffer(bufs[1], np.int32)[keys.offset : keys.offset + len(keys) + 1]
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.empty(0, np.uint8)
    valid = np.asarray(keys.is_valid(), dtype=np.bool_)
    return partitions_for_keys(data, offsets.astype(np.int64), valid, count)


def _append_file(log: Any, path: str) -> None:
    """Append a staging file's batches to ``log`` one by one, as a leader appends producer
    batches, so the indexes come out as a broker's would. Read batch by batch: a task's file
    can be larger than the driver's memory."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        position = 0
        while position < size:
            head = f.read(_LENGTH_END)
            length = int.from_bytes(head[8:_LENGTH_END], "big", signed=True)
            end = position + _LENGTH_END + length
            if len(head) < _LENGTH_END or length < _MIN_BATCH_LENGTH or end > size:
                raise KafkalogError(
                    f"staging file {path} has no whole batch at byte {position} ({size} bytes)"
                )
            log.append(head + f.read(length))
            position = end


def _partition_counts(path: str) -> dict[str, int]:
    from kafkalog.log import LogDir

    if not os.path.isdir(path):
        return {}
    counts: dict[str, int] = {}
    for topic, partition in LogDir(path, writable=False).partitions():
        counts[topic] = max(counts.get(topic, 0), partition + 1)
    return counts
