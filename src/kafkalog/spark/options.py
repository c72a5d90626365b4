"""The read options of Spark's Kafka source, parsed and checked the way Spark checks them.

Existing Spark Kafka code switches to kafkalog by changing the format name, so the option names,
their defaults and their precedence follow Spark's Kafka integration guide; kafkalog adds only
``path``. Unknown or contradictory options are refused with an error naming the option.
"""

from __future__ import annotations

import difflib
import json
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kafkalog import files
from kafkalog.errors import KafkalogError

EARLIEST = -2
LATEST = -1

logger = logging.getLogger("kafkalog.spark")

# the read options by the names Spark's guide and docs/spark.md spell them (Spark hands a
# Python source its option names lower-cased, so a message names an option this way)
OPTION_NAMES = (
    "path",
    "subscribe",
    "subscribePattern",
    "assign",
    "startingOffsets",
    "endingOffsets",
    "startingOffsetsByTimestamp",
    "endingOffsetsByTimestamp",
    "startingTimestamp",
    "endingTimestamp",
    "startingOffsetsByTimestampStrategy",
    "includeHeaders",
    "failOnDataLoss",
    "minPartitions",
    "maxRecordsPerPartition",
    "isolationLevel",
    "maxOffsetsPerTrigger",
    "maxBytesPerSplit",
    "maxTimestampLatenessMs",
    # kafkalog's own: turn filter pushdown off for one query, and count the bytes tasks read
    "pushdown",
    "statsDir",
    "columns",
    # the JVM source's pushed-down counts: false counts whole batches from their headers alone
    "checkCrcs",
    # the JVM source's verified batch summaries (kept in kafkalog's cache directory): false
    # neither uses nor keeps them for this read
    "batchSummaries",
)
KNOWN_OPTIONS = {name.lower() for name in OPTION_NAMES}
# accepted for drop-in compatibility with Spark's Kafka source; meaningless without a broker.
# Every ``kafka.``-prefixed option is accepted too (Spark hands them to its consumer), except
# ``kafka.isolation.level`` (honoured) and those Spark itself refuses (KAFKA_REFUSED).
IGNORED_OPTIONS = {
    "groupidprefix",
    "fetchoffset.numretries",
    "fetchoffset.retryintervalms",
    "kafkaconsumer.polltimeoutms",
}
# streaming-only options Spark's Kafka source ignores (with a warning) in batch queries
BATCH_IGNORED_OPTIONS = {"minoffsetspertrigger", "maxtriggerdelay"}
# what a batch query warns about, by its user-facing name (KafkaSourceProvider.validateBatchOptions)
STREAM_ONLY_OPTIONS = ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay")
# the options a stream refuses: a stream has no end (KafkaSourceProvider.validateStreamOptions)
BATCH_ONLY_OPTIONS = ("endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp")
# consumer settings Spark's Kafka source refuses (KafkaSourceProvider.validateGeneralOptions)
KAFKA_REFUSED = {
    "kafka.auto.offset.reset": "set startingOffsets to earliest or latest instead",
    "kafka.key.deserializer": "keys are returned as binary; deserialize them with DataFrame "
    "operations",
    "kafka.value.deserializer": "values are returned as binary; deserialize them with "
    "DataFrame operations",
    "kafka.enable.auto.commit": "no consumer group offsets are committed",
    "kafka.interceptor.classes": "interceptors could change the records read",
}


class OptionError(KafkalogError, ValueError):
    """A read or write option that is unknown, malformed or contradicts another."""


#: the largest task by default: a Spark task of a Python source costs ~0.1 s to start whatever
#: it reads, so tasks are large (bench/RESULTS.md: 4 tasks of 390 MB read a 1.5 GiB topic
#: ~20% faster than 8 of 195 MB); ``minPartitions`` asks for more where there are more cores
DEFAULT_MAX_BYTES_PER_SPLIT = 1024 * 1024 * 1024
#: below this much per task, fewer tasks rather than the floor of four (see ``task_count``)
MIN_TASK_BYTES = 64 * 1024 * 1024

OffsetSpec = dict[str, dict[int, int]]  # topic -> partition -> offset (or -1/-2)


@dataclass(frozen=True)
class ReadOptions:
    path: str
    subscribe: tuple[str, ...] | None = None
    subscribe_pattern: str | None = None
    assign: dict[str, tuple[int, ...]] | None = None
    starting_offsets: int | OffsetSpec = EARLIEST
    ending_offsets: int | OffsetSpec = LATEST
    starting_by_timestamp: int | dict[str, dict[int, int]] | None = None
    ending_by_timestamp: int | dict[str, dict[int, int]] | None = None
    starting_strategy: str = "error"
    include_headers: bool = False
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    read_committed: bool = False
    #: twice Parquet's 128 MiB: a Python data source task costs ~0.1 s to start (measured on
    #: local[2]: 16 tasks of 100 MB read 24 M records at 5.7 M/s, 8 of 200 MB at 6.7 M/s)
    max_bytes_per_split: int = DEFAULT_MAX_BYTES_PER_SPLIT
    max_offsets_per_trigger: int | None = None
    #: the retired ``maxTimestampLatenessMs``: parsed (a malformed value is still an error),
    #: warned about and ignored; upper timestamp bounds prune exactly without it
    max_timestamp_lateness_ms: int | None = None
    extra: dict[str, str] = field(default_factory=dict)
    #: ``path`` as given (a URI keeps its query string): executors resolve its filesystem again
    location: str = ""
    #: ``pushdown=false``: this query ignores the filters Spark offers (a real full scan, with
    #: Spark still filtering the rows), whatever ``spark.sql.python.filterPushdown.enabled`` says
    pushdown: bool = True
    #: ``statsDir``: a local directory (seen by every executor) where each task leaves a small
    #: JSON file with the bytes it read (see :mod:`kafkalog.spark.stats`)
    stats_dir: str | None = None
    #: streams: a micro-batch waits for at least this many new offsets (all partitions together)
    #: or until ``max_trigger_delay_ms`` has passed since the last one, as Spark's Kafka source
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60 * 1000
    #: ``columns``: the Kafka columns to read, by name ("offset,timestamp,value"): the schema
    #: the source declares, so nothing else is decoded (Spark cannot prune a Python source's
    #: columns; this is ``.schema(...)`` without writing the types)
    columns: tuple[str, ...] | None = None
    #: ``checkCrcs=false`` (Kafka's consumer setting ``check.crcs``): the JVM source's pushed-down
    #: counts take a whole batch's record count from its header after the structural checks
    #: alone, without reading the batch to check its CRC; every read of rows checks every CRC
    check_crcs: bool = True
    #: ``batchSummaries=false``: the JVM source neither uses nor keeps verified batch summaries
    #: for this read (the session's ``spark.kafkalog.batchSummaries`` sets the default)
    batch_summaries: bool = True


_TIME_UNITS_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000}
_TIME_UNITS_MS["d"] = 24 * _TIME_UNITS_MS["h"]


def time_string_ms(name: str, value: str) -> int:
    """A duration as Spark reads one (``JavaUtils.timeStringAsMs``): a number and a unit (us,
    ms, s, m or min, h, d), milliseconds without one."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", value.lower())
    if m is None or m.group(2) not in ("", *_TIME_UNITS_MS):
        raise OptionError(f"option {name}={value!r} must be a duration such as 15m, 30s or 500ms")
    return int(int(m.group(1)) * _TIME_UNITS_MS.get(m.group(2) or "ms", 1))


#: the Kafka columns a read can name, in Spark's Kafka source's order, with their DDL types
KAFKA_COLUMNS = {
    "key": "binary",
    "value": "binary",
    "topic": "string",
    "partition": "int",
    "offset": "long",
    "timestamp": "timestamp",
    "timestampType": "int",
    "headers": "array<struct<key:string,value:binary>>",
}


def _column_names(value: str) -> tuple[str, ...]:
    by_lower = {name.lower(): name for name in KAFKA_COLUMNS}
    names: list[str] = []
    for raw in value.split(","):
        name = by_lower.get(raw.strip().lower())
        if name is None or name in names:
            what = "repeated" if name is not None else "unknown"
            raise OptionError(
                f"option columns={value!r}: {what} column {raw.strip()!r} (the Kafka columns: "
                f"{', '.join(KAFKA_COLUMNS)})"
            )
        names.append(name)
    return tuple(names)


def _given(
    opts: Mapping[str, str], name: str, parse: Callable[[str, str], int], default: Any = None
) -> Any:
    """Option ``name`` (looked up in lower case) parsed by ``parse``, or ``default`` when it is
    not given."""
    key = name.lower()
    return parse(name, opts[key]) if key in opts else default


def _bool(name: str, value: str) -> bool:
    v = value.strip().lower()
    if v not in ("true", "false"):
        raise OptionError(f"option {name}={value!r} must be true or false")
    return v == "true"


def positive_option(name: str, value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise OptionError(f"option {name}={value!r} must be a positive integer") from None
    if n <= 0:
        raise OptionError(f"option {name}={value!r} must be a positive integer")
    return n


def _json(name: str, value: str) -> object:
    try:
        return json.loads(value)
    except ValueError as e:
        raise OptionError(f"option {name} is not valid JSON: {e}") from None


def _per_partition(name: str, value: str, *, allow_special: bool) -> dict[str, dict[int, int]]:
    parsed = _json(name, value)
    if not isinstance(parsed, dict):
        raise OptionError(f"option {name} must be a JSON object of topic -> partition -> value")
    out: dict[str, dict[int, int]] = {}
    for topic, parts in parsed.items():
        if not isinstance(parts, dict):
            raise OptionError(f"option {name}: {topic!r} must map partitions to values")
        out[topic] = {}
        for p, v in parts.items():
            try:
                part = int(p)
            except ValueError:
                raise OptionError(f"option {name}: partition {p!r} is not an integer") from None
            if not isinstance(v, int) or isinstance(v, bool):
                raise OptionError(f"option {name}: {topic}-{part} value {v!r} is not an integer")
            if v < 0 and not (allow_special and v in (EARLIEST, LATEST)):
                raise OptionError(f"option {name}: {topic}-{part} value {v} is negative")
            out[topic][part] = v
    return out


def _offsets(name: str, value: str) -> int | OffsetSpec:
    v = value.strip()
    if v.lower() == "earliest":
        return EARLIEST
    if v.lower() == "latest":
        return LATEST
    return _per_partition(name, v, allow_special=True)


def parse_read_options(
    options: Mapping[str, str], *, streaming: bool | None = False
) -> ReadOptions:
    """Spark passes options case-insensitively; so do we (keys compared lower-case).

    Streams start at ``latest`` unless told otherwise and take no end, as in Spark.
    ``streaming=None`` is ``load()``: Spark asks a Python source for its schema without saying
    whether the read is a batch or a stream (the same call, with the same options, for
    ``spark.read`` and ``spark.readStream``), so every check that holds for both is made then,
    and the ones that depend on it (a ``latest`` start, an end given to a stream) wait for
    ``reader()`` or ``streamReader()``, the first calls that say which it is."""
    opts = {k.lower(): str(v) for k, v in options.items()}
    _check_names(opts)
    if "path" not in opts or not opts["path"]:
        raise OptionError("option path is required: a Kafka data directory or partition directory")
    selectors = [k for k in ("subscribe", "subscribepattern", "assign") if k in opts]
    if len(selectors) > 1:
        raise OptionError(
            f"options {' and '.join(selectors)} contradict each other: give only one of "
            "assign, subscribe, subscribePattern"
        )
    subscribe = None
    if "subscribe" in opts:
        subscribe = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not subscribe:
            raise OptionError("option subscribe lists no topic")
    pattern = None
    if "subscribepattern" in opts:
        pattern = opts["subscribepattern"].strip()  # as Spark
        if not pattern:
            raise OptionError("option subscribePattern is empty")
        try:
            re.compile(pattern)
        except re.error as e:
            raise OptionError(f"option subscribePattern is not a valid regex: {e}") from None
    assign = None
    if "assign" in opts:
        parsed = _json("assign", opts["assign"])
        if not isinstance(parsed, dict) or not all(
            isinstance(v, list) and all(isinstance(p, int) for p in v) for v in parsed.values()
        ):
            raise OptionError('option assign must look like {"topicA":[0,1],"topicB":[2,4]}')
        assign = {t: tuple(ps) for t, ps in parsed.items()}
    if streaming:
        for name in BATCH_ONLY_OPTIONS:
            if name.lower() in opts:
                raise OptionError(
                    f"option {name} is not allowed for streaming queries: a stream has no end"
                )
    elif streaming is False:
        for name in STREAM_ONLY_OPTIONS:
            if name.lower() in opts:
                logger.warning("option %s is ignored in batch queries", name)
    # precedence, as Spark (KafkaSourceProvider.getKafkaOffsetRangeLimit):
    # startingTimestamp > startingOffsetsByTimestamp > startingOffsets, the ending ones alike.
    # Spark never reads an option that lost, so neither is it checked here.
    default_start = "latest" if streaming else "earliest"
    starting: int | OffsetSpec = LATEST if streaming else EARLIEST
    if "startingtimestamp" not in opts and "startingoffsetsbytimestamp" not in opts:
        starting = _offsets("startingOffsets", opts.get("startingoffsets", default_start))
    ending: int | OffsetSpec = LATEST
    if "endingtimestamp" not in opts and "endingoffsetsbytimestamp" not in opts:
        ending = _offsets("endingOffsets", opts.get("endingoffsets", "latest"))
    batch = streaming is False
    if batch and starting == LATEST:
        raise OptionError("option startingOffsets=latest is not allowed for batch queries")
    if ending == EARLIEST:
        raise OptionError("option endingOffsets=earliest is not allowed for batch queries")
    if batch and isinstance(starting, dict) and LATEST in _values(starting):
        raise OptionError("option startingOffsets: -1 (latest) is not allowed for batch queries")
    if isinstance(ending, dict) and EARLIEST in _values(ending):
        raise OptionError("option endingOffsets: -2 (earliest) is not allowed for batch queries")
    start_ts: int | dict[str, dict[int, int]] | None = None
    if "startingtimestamp" in opts:
        start_ts = _timestamp("startingTimestamp", opts["startingtimestamp"])
    elif "startingoffsetsbytimestamp" in opts:
        start_ts = _per_partition(
            "startingOffsetsByTimestamp", opts["startingoffsetsbytimestamp"], allow_special=False
        )
    end_ts: int | dict[str, dict[int, int]] | None = None
    if "endingtimestamp" in opts:
        end_ts = _timestamp("endingTimestamp", opts["endingtimestamp"])
    elif "endingoffsetsbytimestamp" in opts:
        end_ts = _per_partition(
            "endingOffsetsByTimestamp", opts["endingoffsetsbytimestamp"], allow_special=False
        )
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise OptionError(
            f"option startingOffsetsByTimestampStrategy={strategy!r} must be error or latest"
        )
    _check_offset_limits(starting, ending, start_ts, end_ts)
    isolation = _isolation(opts)
    max_per_trigger = _given(opts, "maxOffsetsPerTrigger", positive_option)
    # checked whenever given, so that a stream's load() refuses a bad value
    min_per_trigger = _given(opts, "minOffsetsPerTrigger", positive_option)
    both = min_per_trigger is not None and max_per_trigger is not None
    if both and min_per_trigger > max_per_trigger:  # KafkaSourceProvider.validateGeneralOptions
        raise OptionError(
            f"option minOffsetsPerTrigger={min_per_trigger} is above "
            f"maxOffsetsPerTrigger={max_per_trigger}"
        )
    if "maxtimestamplatenessms" in opts:
        logger.warning(
            "option maxTimestampLatenessMs is deprecated and ignored: a timestamp filter's "
            "upper bound now skips exactly the record batches whose headers rule it out, "
            "whatever the timestamps' order, so no lateness is assumed and no row is lost"
        )
    return ReadOptions(
        path=read_location(opts["path"]),
        location=opts["path"],
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=assign,
        starting_offsets=starting,
        ending_offsets=ending,
        starting_by_timestamp=start_ts,
        ending_by_timestamp=end_ts,
        starting_strategy=strategy,
        include_headers=_bool("includeHeaders", opts.get("includeheaders", "false")),
        fail_on_data_loss=_bool("failOnDataLoss", opts.get("failondataloss", "true")),
        min_partitions=_given(opts, "minPartitions", positive_option),
        max_records_per_partition=_given(opts, "maxRecordsPerPartition", positive_option),
        read_committed=isolation == "read_committed",
        max_bytes_per_split=_given(
            opts, "maxBytesPerSplit", positive_option, DEFAULT_MAX_BYTES_PER_SPLIT
        ),
        max_offsets_per_trigger=max_per_trigger,
        max_timestamp_lateness_ms=_given(opts, "maxTimestampLatenessMs", _timestamp),
        pushdown=_bool("pushdown", opts.get("pushdown", "true")),
        stats_dir=local_path(opts["statsdir"], "statsDir") if opts.get("statsdir") else None,
        min_offsets_per_trigger=min_per_trigger,
        max_trigger_delay_ms=_given(opts, "maxTriggerDelay", time_string_ms, 15 * 60 * 1000),
        columns=_column_names(opts["columns"]) if "columns" in opts else None,
        check_crcs=_bool("checkCrcs", opts.get("checkcrcs", "true")),
        batch_summaries=_bool("batchSummaries", opts.get("batchsummaries", "true")),
    )


def _check_names(opts: Mapping[str, str]) -> None:
    """Refuse unknown options by name. ``kafka.``-prefixed ones are consumer settings in Spark's
    Kafka source: accepted (there is no consumer to give them to) except the ones Spark refuses,
    so that code carrying ``kafka.security.protocol`` or ``kafka.ssl.*`` switches unchanged."""
    for key in sorted(opts):
        if key in KAFKA_REFUSED:
            raise OptionError(f"option {key} is not supported: {KAFKA_REFUSED[key]}")
        if key.startswith("kafka.") or key in KNOWN_OPTIONS or key in IGNORED_OPTIONS:
            continue
        if key in BATCH_IGNORED_OPTIONS:
            continue  # read by streams; a batch query ignores them, as Spark's Kafka source
        raise OptionError(
            f"unknown option {key!r} for format kafkalog{did_you_mean(key, READ_NAMES)} "
            f"(known: {', '.join(OPTION_NAMES)})"
        )


READ_NAMES = (*OPTION_NAMES, "minOffsetsPerTrigger", "maxTriggerDelay")


def did_you_mean(key: str, names: tuple[str, ...]) -> str:
    """``: did you mean startingTimestamp?`` for a misspelt option, by the name the docs spell
    (Spark lower-cases option names before a Python source sees them), or nothing."""
    by_lower = {name.lower(): name for name in names}
    close = difflib.get_close_matches(key.lower(), list(by_lower), n=1, cutoff=0.75)
    return f": did you mean {by_lower[close[0]]}?" if close else ""


def _isolation(opts: Mapping[str, str]) -> str:
    """``isolationLevel``, or Spark's way of saying it: the consumer setting
    ``kafka.isolation.level``, which Spark's Kafka source honours (its offset reader lists
    offsets and its consumers read with it). Both given must agree."""
    chosen: dict[str, str] = {}
    for name in ("isolationLevel", "kafka.isolation.level"):
        key = name.lower()
        if key in opts:
            value = opts[key].strip().lower()
            if value not in ("read_uncommitted", "read_committed"):
                raise OptionError(
                    f"option {name}={value!r} must be read_uncommitted or read_committed"
                )
            chosen[name] = value
    if len(set(chosen.values())) > 1:
        raise OptionError(
            "options isolationLevel and kafka.isolation.level contradict each other: "
            f"{chosen['isolationLevel']} and {chosen['kafka.isolation.level']}"
        )
    return next(iter(chosen.values()), "read_uncommitted")


def _check_offset_limits(
    starting: int | OffsetSpec,
    ending: int | OffsetSpec,
    start_ts: int | dict[str, dict[int, int]] | None,
    end_ts: int | dict[str, dict[int, int]] | None,
) -> None:
    """Spark's ``checkOffsetLimitValidity``: per-partition starting and ending JSON of the same
    kind must name the same partitions, and no start may lie after its end."""
    # a losing option is never parsed, so a dict here is the winner of its side
    pairs: list[tuple[str, str, object, object]] = [
        ("startingOffsets", "endingOffsets", starting, ending),
        ("startingOffsetsByTimestamp", "endingOffsetsByTimestamp", start_ts, end_ts),
    ]
    for start_name, end_name, start, end in pairs:
        if not (isinstance(start, dict) and isinstance(end, dict)):
            continue
        start_tps = {(t, p) for t, parts in start.items() for p in parts}
        end_tps = {(t, p) for t, parts in end.items() for p in parts}
        if start_tps != end_tps:
            raise OptionError(
                f"options {start_name} and {end_name} name different partitions: "
                f"{_tps(start_tps)} and {_tps(end_tps)}"
            )
        for topic, part in sorted(start_tps):
            lo, hi = start[topic][part], end[topic][part]
            if lo >= 0 and hi >= 0 and lo > hi:
                raise OptionError(
                    f"option {start_name}: {topic}-{part} starts at {lo}, after its {end_name} {hi}"
                )


def _tps(tps: set[tuple[str, int]]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in sorted(tps)) or "none"


def _values(spec: OffsetSpec) -> set[int]:
    return {v for parts in spec.values() for v in parts.values()}


def _timestamp(name: str, value: str) -> int:
    try:
        ts = int(value.strip())
    except ValueError:
        raise OptionError(f"option {name}={value!r} must be epoch milliseconds") from None
    if ts < 0:
        raise OptionError(f"option {name}={value!r} must not be negative")
    return ts


_URI = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def read_location(value: str, option: str = "path") -> str:
    """A ``path`` to read from: an absolute local path (a plain path or a ``file://`` URI), or
    any URI ``pyarrow.fs`` resolves (``s3://``, ``gs://``, ``abfs://``, ``hdfs://``; settings such
    as ``endpoint_override`` or ``region`` go in its query string), returned without its query
    and with its filesystem registered in this process (see :mod:`kafkalog.files`)."""
    try:
        return files.resolve(value)
    except files.RemoteLocationError as e:
        raise OptionError(f"option {option}={files.redacted(value)!r}: {e}") from None


def local_path(value: str, option: str = "path") -> str:
    """A ``path`` to write to, as an absolute local path: a plain path, or a URI that
    ``pyarrow.fs`` resolves to the local filesystem (``file:///...``, percent-encoding decoded).

    Writing needs what object stores lack -- an exclusive lock per partition and an atomic
    rename at commit -- so a remote store is refused by name rather than half supported: write
    locally (or to a mounted filesystem) and copy the finished directory.
    """
    match = _URI.match(value)
    if match is not None and match.group(1).lower() != "file":
        raise OptionError(
            f"option {option}={value!r}: writing to {match.group(1).lower()}:// is not "
            "supported; kafkalog writes commit by an atomic rename under an exclusive lock, "
            "which object stores do not offer (write to a local or mounted path)"
        )
    return read_location(value, option)
