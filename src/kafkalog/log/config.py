"""Per-topic log configuration with Kafka's names, defaults and validation rules (spec §10).

:class:`TopicConfig` holds the topic-level settings that change what the storage layer does
(segment size and age, index spacing, retention, flushing, compaction timing, timestamps,
compression).  It is built from Kafka's dotted property names exactly as a broker would accept
them -- :meth:`TopicConfig.from_properties` parses strings the way Kafka's ``ConfigDef`` does
(trimmed, ``Integer.parseInt`` / ``Long.parseLong`` rules, case-insensitive booleans,
comma-separated lists) -- so a ``kafka-configs --describe`` dump can be fed straight in, and a
value Kafka would refuse is refused here with a :class:`ConfigError` naming the key, the value
and the rule.  Defaults are those of the Kafka commit the spec describes.
"""

from __future__ import annotations

import difflib
import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from kafkalog.errors import KafkalogError
from kafkalog.records.types import Compression

__all__ = [
    "BROKER_SYNONYMS",
    "INT_MAX",
    "LONG_MAX",
    "TOPIC_CONFIG_KEYS",
    "UNMODELLED_TOPIC_KEYS",
    "ConfigError",
    "TopicConfig",
]

LONG_MAX: Final = 2**63 - 1
"""Java ``Long.MAX_VALUE``: Kafka's "never" for time and count limits."""
INT_MAX: Final = 2**31 - 1
_INT_MIN, _LONG_MIN = -(2**31), -(2**63)

_COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
_TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
_CLEANUP_POLICIES = ("compact", "delete")

UNMODELLED_TOPIC_KEYS: Final = frozenset(
    {
        "follower.replication.throttled.replicas",
        "leader.replication.throttled.replicas",
        "local.retention.bytes",
        "local.retention.ms",
        "message.downconversion.enable",
        "message.format.version",
        "min.insync.replicas",
        "remote.log.copy.disable",
        "remote.log.delete.on.disable",
        "remote.storage.enable",
        "unclean.leader.election.enable",
    }
)
"""Real Kafka topic configs that do not affect kafkalog's storage layer (replication, tiered
storage, down-conversion, cleaner tuning).  :meth:`TopicConfig.from_properties` refuses them
unless asked to skip them, so a typo is never mistaken for one of them."""


def _display(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple | list):
        return ",".join(str(v) for v in value)
    return str(value)


class ConfigError(KafkalogError, ValueError):
    """A topic config Kafka would refuse: unknown key, wrong type, or value out of range.

    ``key``, ``value`` and ``rule`` are kept as attributes; the message reads
    ``segment.bytes=10 is invalid: must be at least 14``.
    """

    def __init__(self, key: str, value: object, rule: str) -> None:
        self.key = key
        self.value = value
        self.rule = rule
        super().__init__(f"{key}={_display(value)} is invalid: {rule}")

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.key, self.value, self.rule))


# --------------------------------------------------------------------------------------------
# rules

_Kind = Literal["int", "long", "double", "bool", "string", "list"]
_Rule = Callable[[object], str | None]  # the rule broken by a (well-typed) value, or None


def _at_least(minimum: int) -> _Rule:
    def rule(value: object) -> str | None:
        assert isinstance(value, int)
        return None if value >= minimum else f"must be at least {minimum}"

    return rule


def _between(lo: int, hi: int) -> _Rule:
    def rule(value: object) -> str | None:
        assert isinstance(value, int)
        return None if lo <= value <= hi else f"must be between {lo} and {hi}"

    return rule


def _ratio(value: object) -> str | None:
    assert isinstance(value, float)
    return None if 0.0 <= value <= 1.0 else "must be between 0 and 1"


def _gzip_level(value: object) -> str | None:
    # Deflater.DEFAULT_COMPRESSION (-1) or BEST_SPEED..BEST_COMPRESSION; 0 is not allowed
    assert isinstance(value, int)
    return None if value == -1 or 1 <= value <= 9 else "must be -1 or between 1 and 9"


def _one_of(*choices: str) -> _Rule:
    def rule(value: object) -> str | None:
        # case-sensitive, like Kafka's ValidString
        return None if value in choices else f"must be one of {', '.join(choices)}"

    return rule


def _each_one_of(*choices: str) -> _Rule:
    def rule(value: object) -> str | None:
        assert isinstance(value, tuple)
        bad = [v for v in value if v not in choices]
        if not bad:
            return None
        return f"{bad[0]!r} is not allowed; each entry must be one of {', '.join(choices)}"

    return rule


def _any(value: object) -> str | None:
    return None


@dataclass(frozen=True)
class _Key:
    name: str
    attr: str
    kind: _Kind
    rule: _Rule


_KEYS: tuple[_Key, ...] = (
    _Key("segment.bytes", "segment_bytes", "int", _at_least(14)),
    _Key("segment.ms", "segment_ms", "long", _at_least(1)),
    _Key("segment.jitter.ms", "segment_jitter_ms", "long", _at_least(0)),
    _Key("segment.index.bytes", "segment_index_bytes", "int", _at_least(4)),
    _Key("index.interval.bytes", "index_interval_bytes", "int", _at_least(0)),
    _Key("retention.ms", "retention_ms", "long", _at_least(-1)),
    # Kafka defines retention.bytes without a validator: any negative value means unlimited.
    _Key("retention.bytes", "retention_bytes", "long", _any),
    _Key("max.message.bytes", "max_message_bytes", "int", _at_least(0)),
    _Key("flush.messages", "flush_messages", "long", _at_least(1)),
    _Key("flush.ms", "flush_ms", "long", _at_least(0)),
    _Key("file.delete.delay.ms", "file_delete_delay_ms", "long", _at_least(0)),
    _Key("preallocate", "preallocate", "bool", _any),
    _Key("cleanup.policy", "cleanup_policy", "list", _each_one_of(*_CLEANUP_POLICIES)),
    _Key("delete.retention.ms", "delete_retention_ms", "long", _at_least(0)),
    _Key("min.compaction.lag.ms", "min_compaction_lag_ms", "long", _at_least(0)),
    _Key("max.compaction.lag.ms", "max_compaction_lag_ms", "long", _at_least(1)),
    _Key("min.cleanable.dirty.ratio", "min_cleanable_dirty_ratio", "double", _ratio),
    _Key("compression.type", "compression_type", "string", _one_of(*_COMPRESSION_TYPES)),
    _Key("compression.gzip.level", "compression_gzip_level", "int", _gzip_level),
    _Key("compression.lz4.level", "compression_lz4_level", "int", _between(1, 17)),
    _Key("compression.zstd.level", "compression_zstd_level", "int", _between(-131072, 22)),
    _Key("message.timestamp.type", "message_timestamp_type", "string", _one_of(*_TIMESTAMP_TYPES)),
    _Key(
        "message.timestamp.before.max.ms", "message_timestamp_before_max_ms", "long", _at_least(0)
    ),
    _Key("message.timestamp.after.max.ms", "message_timestamp_after_max_ms", "long", _at_least(0)),
    _Key(
        "message.timestamp.difference.max.ms",
        "message_timestamp_difference_max_ms",
        "long",
        _at_least(0),
    ),
)
_BY_NAME: dict[str, _Key] = {k.name: k for k in _KEYS}

TOPIC_CONFIG_KEYS: Final[Mapping[str, str]] = {k.name: k.attr for k in _KEYS}
"""Kafka property name -> :class:`TopicConfig` attribute, for every modelled key."""

#: Kafka's broker-level names of the topic configs (the topic defaults a broker sets, and may
#: change dynamically): broker name -> topic name
BROKER_SYNONYMS: Final[Mapping[str, str]] = {
    "log.segment.bytes": "segment.bytes",
    "log.roll.ms": "segment.ms",
    "log.roll.jitter.ms": "segment.jitter.ms",
    "log.index.size.max.bytes": "segment.index.bytes",
    "log.index.interval.bytes": "index.interval.bytes",
    "log.retention.ms": "retention.ms",
    "log.retention.bytes": "retention.bytes",
    "message.max.bytes": "max.message.bytes",
    "log.flush.interval.messages": "flush.messages",
    "log.flush.interval.ms": "flush.ms",
    "log.segment.delete.delay.ms": "file.delete.delay.ms",
    "log.preallocate": "preallocate",
    "log.cleanup.policy": "cleanup.policy",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "log.cleaner.max.compaction.lag.ms": "max.compaction.lag.ms",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
    "compression.type": "compression.type",
    "compression.gzip.level": "compression.gzip.level",
    "compression.lz4.level": "compression.lz4.level",
    "compression.zstd.level": "compression.zstd.level",
    "log.message.timestamp.type": "message.timestamp.type",
    "log.message.timestamp.before.max.ms": "message.timestamp.before.max.ms",
    "log.message.timestamp.after.max.ms": "message.timestamp.after.max.ms",
    "log.message.timestamp.difference.max.ms": "message.timestamp.difference.max.ms",
}


# --------------------------------------------------------------------------------------------
# parsing, as Kafka's ConfigDef.parseType

_JAVA_TRIM = "".join(map(chr, range(33)))  # String.trim(): every char <= U+0020
_JAVA_INT = re.compile(r"[+-]?\d+")
# Java's Double.parseDouble, decimal forms (what a config dump holds): sign, digits with an
# optional fraction or a bare fraction, an optional exponent, an optional d/f suffix
_JAVA_DOUBLE = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?[dDfF]?")
_LIST_SEPARATOR = re.compile(r"[ \t\n\x0b\f\r]*,[ \t\n\x0b\f\r]*")


def _parse(key: _Key, value: object) -> object:
    """Turn a property value (string, or an already-typed value) into the attribute's type."""
    if key.kind in ("int", "long"):
        lo, hi = (_INT_MIN, INT_MAX) if key.kind == "int" else (_LONG_MIN, LONG_MAX)
        what = "a 32-bit integer" if key.kind == "int" else "a 64-bit integer"
        number: int | None = None
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        elif isinstance(value, str):
            text = value.strip(_JAVA_TRIM)
            number = int(text) if _JAVA_INT.fullmatch(text) else None
        if number is None or not lo <= number <= hi:
            raise ConfigError(key.name, value, f"must be {what}")
        return number
    if key.kind == "double":
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            text = value.strip(_JAVA_TRIM)
            if _JAVA_DOUBLE.fullmatch(text):
                return float(text.rstrip("dDfF"))
        raise ConfigError(key.name, value, "must be a number")
    if key.kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip(_JAVA_TRIM).lower() in ("true", "false"):
            return value.strip(_JAVA_TRIM).lower() == "true"
        raise ConfigError(key.name, value, "must be true or false")
    if key.kind == "string":
        if isinstance(value, str):
            return value.strip(_JAVA_TRIM)
        raise ConfigError(key.name, value, "must be a string")
    # list
    if isinstance(value, str):
        text = value.strip(_JAVA_TRIM)
        return tuple(_LIST_SEPARATOR.split(text)) if text else ()
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise ConfigError(key.name, value, "must be a comma-separated list")


def _render(value: object) -> str:
    """A typed value as the property string Kafka would accept back."""
    return _display(value)


# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TopicConfig:
    """A topic's storage-relevant configuration; every field defaults to Kafka's default.

    Construction validates (so ``dataclasses.replace(cfg, segment_bytes=10)`` raises
    :class:`ConfigError` too); field values must already have their Python types -- use
    :meth:`from_properties` for strings.  ``cleanup_policy`` may be given as a list or as a
    comma-separated string and is stored as a tuple.
    """

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    retention_ms: int = 604800000
    retention_bytes: int = -1
    max_message_bytes: int = 1048588
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    file_delete_delay_ms: int = 60000
    preallocate: bool = False
    cleanup_policy: tuple[str, ...] = ("delete",)
    delete_retention_ms: int = 86400000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5
    compression_type: str = "producer"
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    message_timestamp_difference_max_ms: int = LONG_MAX

    def __post_init__(self) -> None:
        for key in _KEYS:
            value: object = getattr(self, key.attr)
            if (key.kind == "list" and isinstance(value, str | list)) or (
                key.kind == "double" and isinstance(value, int) and not isinstance(value, bool)
            ):
                value = _parse(key, value)
                object.__setattr__(self, key.attr, value)
            self._check_type(key, value)
            broken = key.rule(value)
            if broken is not None:
                raise ConfigError(key.name, value, broken)
        # Kafka's LogConfig.validateValues: a record cannot have to wait longer to become
        # compactable than the longest it may stay uncompacted.
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            raise ConfigError(
                "min.compaction.lag.ms",
                self.min_compaction_lag_ms,
                f"must not exceed max.compaction.lag.ms ({self.max_compaction_lag_ms})",
            )

    @staticmethod
    def _check_type(key: _Key, value: object) -> None:
        if key.kind in ("int", "long"):
            lo, hi = (_INT_MIN, INT_MAX) if key.kind == "int" else (_LONG_MIN, LONG_MAX)
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                width = "32" if key.kind == "int" else "64"
                raise ConfigError(key.name, value, f"must be a {width}-bit integer")
        elif key.kind == "double" and not isinstance(value, float):
            raise ConfigError(key.name, value, "must be a number")
        elif key.kind == "bool" and not isinstance(value, bool):
            raise ConfigError(key.name, value, "must be true or false")
        elif key.kind == "string" and not isinstance(value, str):
            raise ConfigError(key.name, value, "must be a string")
        elif key.kind == "list" and not (
            isinstance(value, tuple) and all(isinstance(v, str) for v in value)
        ):
            raise ConfigError(key.name, value, "must be a comma-separated list")

    # -- properties <-> config

    @classmethod
    def from_properties(
        cls, properties: Mapping[str, object], *, ignore_unmodelled: bool = False
    ) -> TopicConfig:
        """Build from Kafka topic properties (``{"segment.bytes": "1048576", ...}``).

        Values may be strings (parsed like Kafka: trimmed, Java integer syntax, ``true`` /
        ``false`` in any case, comma-separated lists) or already-typed Python values.  Missing
        keys take Kafka's defaults.  Unknown keys raise :class:`ConfigError` (with a
        suggestion for near misses); keys of :data:`UNMODELLED_TOPIC_KEYS` raise too unless
        ``ignore_unmodelled`` is set.
        """
        kwargs: dict[str, Any] = {}
        for name, value in properties.items():
            key = _BY_NAME.get(name)
            if key is None:
                if name in UNMODELLED_TOPIC_KEYS:
                    if ignore_unmodelled:
                        continue
                    raise ConfigError(
                        name,
                        value,
                        "a Kafka topic config kafkalog does not model "
                        "(pass ignore_unmodelled=True to skip it)",
                    )
                close = difflib.get_close_matches(name, list(_BY_NAME), n=1)
                hint = f" (did you mean {close[0]}?)" if close else ""
                raise ConfigError(name, value, f"unknown topic config{hint}")
            kwargs[key.attr] = _parse(key, value)
        return cls(**kwargs)

    def to_properties(self) -> dict[str, str]:
        """The settings that differ from Kafka's defaults, as Kafka property strings."""
        default = _DEFAULT
        out: dict[str, str] = {}
        for key in _KEYS:
            value = getattr(self, key.attr)
            if value != getattr(default, key.attr):
                out[key.name] = _render(value)
        return out

    # -- derived values, as Kafka's LogConfig computes them

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def max_segment_ms(self) -> int:
        """How old a segment may get before it is rolled (spec §6.9).

        ``segment.ms``, except that a compacted topic rolls at least every
        ``max.compaction.lag.ms`` -- the active segment is never cleaned, so a record could
        otherwise wait longer than the promised lag.
        """
        if self.compact and self.max_compaction_lag_ms > 0:
            return min(self.max_compaction_lag_ms, self.segment_ms)
        return self.segment_ms

    @property
    def init_file_size(self) -> int:
        """Size a new ``.log`` file is created with: ``segment.bytes`` when preallocating."""
        return self.segment_bytes if self.preallocate else 0

    @property
    def effective_message_timestamp_before_max_ms(self) -> int:
        """``message.timestamp.before.max.ms``, falling back to the deprecated
        ``message.timestamp.difference.max.ms`` while left at ``LONG_MAX``."""
        if self.message_timestamp_before_max_ms != LONG_MAX:
            return self.message_timestamp_before_max_ms
        return self.message_timestamp_difference_max_ms

    @property
    def effective_message_timestamp_after_max_ms(self) -> int:
        """Like :attr:`effective_message_timestamp_before_max_ms`, for future timestamps."""
        if self.message_timestamp_after_max_ms != LONG_MAX:
            return self.message_timestamp_after_max_ms
        return self.message_timestamp_difference_max_ms

    def target_compression(self, source: Compression) -> tuple[Compression, int | None]:
        """The codec (and level) a batch compressed with ``source`` is stored with: the topic's
        ``compression.type``, or ``source`` itself under ``producer`` (Kafka's
        ``BrokerCompressionType.targetCompression``); the level is the topic's
        ``compression.<codec>.level`` when the broker compresses, None (the codec's default)
        when the producer's codec is kept."""
        wanted = self.compression_type
        if wanted == "producer":
            return source, None
        if wanted == "uncompressed":
            return Compression.NONE, None
        codec = Compression.parse(wanted)
        levels = {
            Compression.GZIP: self.compression_gzip_level,
            Compression.LZ4: self.compression_lz4_level,
            Compression.ZSTD: self.compression_zstd_level,
        }
        return codec, levels.get(codec)

    def random_segment_jitter(self, rng: random.Random | None = None) -> int:
        """A segment's roll jitter in ms, drawn as Kafka draws it (spec §6.9).

        0 without ``segment.jitter.ms``; otherwise ``abs(randomInt) % min(jitter, segment.ms)``
        where ``randomInt`` is a uniform signed 32-bit int and ``abs(Integer.MIN_VALUE)`` is
        taken as 0 (Kafka's ``Utils.abs``), so the result never exceeds ``2**31 - 1``.  Jitter
        spreads the rolls of partitions created together so they do not all roll at once.
        """
        if self.segment_jitter_ms == 0:
            return 0
        bits = (rng if rng is not None else random).getrandbits(32)
        signed = bits - 2**32 if bits >= 2**31 else bits
        magnitude = 0 if signed == _INT_MIN else abs(signed)
        return magnitude % min(self.segment_jitter_ms, self.segment_ms)


_DEFAULT: Final = TopicConfig()
