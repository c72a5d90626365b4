"""Topic configuration: Kafka's defaults (spec §10), every validation rule on both sides of its
boundary, Kafka's string parsing, unknown keys, and the round trip through properties."""

from __future__ import annotations

import dataclasses
import pickle
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalog.errors import KafkalogError
from kafkalog.log.config import (
    INT_MAX,
    LONG_MAX,
    TOPIC_CONFIG_KEYS,
    UNMODELLED_TOPIC_KEYS,
    ConfigError,
    TopicConfig,
)

INT_MIN, LONG_MIN = -(2**31), -(2**63)

# Spec §10 (and, for keys the table does not list, Kafka's LogConfig at the same commit).
SPEC_DEFAULTS: dict[str, object] = {
    "segment.bytes": 1073741824,
    "segment.ms": 604800000,
    "segment.jitter.ms": 0,
    "segment.index.bytes": 10485760,
    "index.interval.bytes": 4096,
    "retention.ms": 604800000,
    "retention.bytes": -1,
    "message.timestamp.type": "CreateTime",
    "message.timestamp.before.max.ms": LONG_MAX,
    "message.timestamp.after.max.ms": LONG_MAX,
    "message.timestamp.difference.max.ms": LONG_MAX,
    "max.message.bytes": 1048588,
    "file.delete.delay.ms": 60000,
    "flush.messages": 9223372036854775807,
    "flush.ms": 9223372036854775807,
    "preallocate": False,
    "cleanup.policy": ("delete",),
    "compression.type": "producer",
    "compression.gzip.level": -1,
    "compression.lz4.level": 9,
    "compression.zstd.level": 3,
    "max.compaction.lag.ms": LONG_MAX,
    "min.compaction.lag.ms": 0,
    "min.cleanable.dirty.ratio": 0.5,  # Kafka's LogConfig default (a double)
    "delete.retention.ms": 86400000,
}


def test_defaults_match_the_spec() -> None:
    assert set(TOPIC_CONFIG_KEYS) == set(SPEC_DEFAULTS)
    assert set(TOPIC_CONFIG_KEYS.values()) == {f.name for f in dataclasses.fields(TopicConfig)}
    default = TopicConfig()
    for key, value in SPEC_DEFAULTS.items():
        assert getattr(default, TOPIC_CONFIG_KEYS[key]) == value, key
    assert TopicConfig.from_properties({}) == default
    assert default.to_properties() == {}
    assert LONG_MAX == 9223372036854775807 and INT_MAX == 2147483647


# (key, smallest valid value) for every "at least" rule
AT_LEAST = [
    ("segment.bytes", 14),
    ("segment.ms", 1),
    ("segment.jitter.ms", 0),
    ("segment.index.bytes", 4),
    ("index.interval.bytes", 0),
    ("retention.ms", -1),
    ("max.message.bytes", 0),
    ("flush.messages", 1),
    ("flush.ms", 0),
    ("file.delete.delay.ms", 0),
    ("delete.retention.ms", 0),
    ("min.compaction.lag.ms", 0),
    ("max.compaction.lag.ms", 1),
    ("message.timestamp.before.max.ms", 0),
    ("message.timestamp.after.max.ms", 0),
    ("message.timestamp.difference.max.ms", 0),
]
INT_KEYS = {
    "segment.bytes",
    "segment.index.bytes",
    "index.interval.bytes",
    "max.message.bytes",
    "compression.gzip.level",
    "compression.lz4.level",
    "compression.zstd.level",
}


@pytest.mark.parametrize(("key", "minimum"), AT_LEAST)
def test_at_least_rules(key: str, minimum: int) -> None:
    attr = TOPIC_CONFIG_KEYS[key]
    for ok in (minimum, str(minimum), minimum + 1):
        assert getattr(TopicConfig.from_properties({key: ok}), attr) == int(ok)
    for bad in (minimum - 1, str(minimum - 1)):
        with pytest.raises(ConfigError) as info:
            TopicConfig.from_properties({key: bad})
        assert str(info.value) == f"{key}={minimum - 1} is invalid: must be at least {minimum}"
        assert (info.value.key, info.value.value, info.value.rule) == (
            key,
            minimum - 1,
            f"must be at least {minimum}",
        )


NUMERIC_KEYS = [k for k, v in SPEC_DEFAULTS.items() if type(v) is int]
LEVEL_KEYS = {"compression.gzip.level", "compression.lz4.level", "compression.zstd.level"}


@pytest.mark.parametrize("key", NUMERIC_KEYS)
def test_integer_width(key: str) -> None:
    """INT keys take Java ints, LONG keys Java longs; one past the top is a type error."""
    attr = TOPIC_CONFIG_KEYS[key]
    top = INT_MAX if key in INT_KEYS else LONG_MAX
    if key not in LEVEL_KEYS:  # levels are bounded well below INT_MAX by their own rule
        assert getattr(TopicConfig.from_properties({key: str(top)}), attr) == top
    width = "32" if key in INT_KEYS else "64"
    for too_big in (top + 1, str(top + 1)):
        with pytest.raises(ConfigError, match=f"must be a {width}-bit integer"):
            TopicConfig.from_properties({key: too_big})


def test_retention_bytes_accepts_any_long() -> None:
    """Kafka gives retention.bytes no validator: every negative value means "unlimited"."""
    for value in (LONG_MIN, -2, -1, 0, 1, LONG_MAX):
        assert TopicConfig.from_properties({"retention.bytes": value}).retention_bytes == value
    with pytest.raises(ConfigError, match="64-bit"):
        TopicConfig.from_properties({"retention.bytes": LONG_MIN - 1})


@pytest.mark.parametrize(
    ("key", "valid", "invalid", "rule"),
    [
        ("compression.gzip.level", [-1, 1, 5, 9], [-2, 0, 10], "must be -1 or between 1 and 9"),
        ("compression.lz4.level", [1, 9, 17], [0, 18, -1], "must be between 1 and 17"),
        (
            "compression.zstd.level",
            [-131072, -1, 0, 3, 22],
            [-131073, 23],
            "must be between -131072 and 22",
        ),
    ],
)
def test_compression_level_rules(key: str, valid: list[int], invalid: list[int], rule: str) -> None:
    attr = TOPIC_CONFIG_KEYS[key]
    for value in valid:
        assert getattr(TopicConfig.from_properties({key: str(value)}), attr) == value
    for value in invalid:
        with pytest.raises(ConfigError) as info:
            TopicConfig.from_properties({key: value})
        assert str(info.value) == f"{key}={value} is invalid: {rule}"


def test_compression_type_values() -> None:
    """Kafka's topic compression.type is BrokerCompressionType: ``uncompressed``, not ``none``
    (spec §10 lists ``none``; Kafka's validator refuses it), case-sensitive."""
    for value in ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer", " gzip "):
        cfg = TopicConfig.from_properties({"compression.type": value})
        assert cfg.compression_type == value.strip()
    for bad in ("none", "GZIP", "", "brotli"):
        with pytest.raises(ConfigError) as info:
            TopicConfig.from_properties({"compression.type": bad})
        assert info.value.rule == "must be one of uncompressed, zstd, lz4, snappy, gzip, producer"


def test_message_timestamp_type_values() -> None:
    for value in ("CreateTime", "LogAppendTime"):
        assert (
            TopicConfig.from_properties({"message.timestamp.type": value}).message_timestamp_type
            == value
        )
    for bad in ("createtime", "LOGAPPENDTIME", "NoTimestampType"):
        with pytest.raises(ConfigError, match="must be one of CreateTime, LogAppendTime"):
            TopicConfig.from_properties({"message.timestamp.type": bad})
    with pytest.raises(ConfigError, match="must be a string"):
        TopicConfig.from_properties({"message.timestamp.type": 0})


def test_cleanup_policy_values() -> None:
    parse = TopicConfig.from_properties
    assert parse({"cleanup.policy": "compact"}).cleanup_policy == ("compact",)
    assert parse({"cleanup.policy": " compact , delete "}).cleanup_policy == ("compact", "delete")
    assert parse({"cleanup.policy": "delete,compact"}).cleanup_policy == ("delete", "compact")
    assert parse({"cleanup.policy": ["compact"]}).cleanup_policy == ("compact",)
    # an empty list is valid at this Kafka version: neither deleted nor compacted
    empty = parse({"cleanup.policy": ""})
    assert empty.cleanup_policy == () and not empty.compact and not empty.delete
    assert parse({"cleanup.policy": "compact"}).to_properties() == {"cleanup.policy": "compact"}
    for bad in ("delete,", "Compact", "delete;compact", "none"):
        with pytest.raises(ConfigError, match="each entry must be one of compact, delete"):
            parse({"cleanup.policy": bad})
    with pytest.raises(ConfigError, match="comma-separated list"):
        parse({"cleanup.policy": 1})


def test_boolean_parsing() -> None:
    parse = TopicConfig.from_properties
    for value, expected in [("true", True), ("FALSE", False), (" True ", True), (True, True)]:
        assert parse({"preallocate": value}).preallocate is expected
    for bad in ("yes", "1", 1, ""):
        with pytest.raises(ConfigError, match="must be true or false"):
            parse({"preallocate": bad})


def test_integer_parsing_follows_java() -> None:
    parse = TopicConfig.from_properties
    assert parse({"segment.bytes": " 1048576\t"}).segment_bytes == 1048576
    assert parse({"segment.bytes": "+1048576"}).segment_bytes == 1048576
    assert parse({"segment.ms": 3600000}).segment_ms == 3600000
    for bad in ("1_048_576", "1e6", "0x100000", "1048576.0", "", "ten", 1048576.0, True, None):
        with pytest.raises(ConfigError, match="must be a 32-bit integer"):
            parse({"segment.bytes": bad})


def test_unknown_and_unmodelled_keys() -> None:
    with pytest.raises(ConfigError) as info:
        TopicConfig.from_properties({"segment.byte": "100"})
    assert str(info.value) == (
        "segment.byte=100 is invalid: unknown topic config (did you mean segment.bytes?)"
    )
    with pytest.raises(ConfigError, match=r"unknown topic config$"):
        TopicConfig.from_properties({"zzz": "1"})
    with pytest.raises(ConfigError, match="unknown"):
        TopicConfig.from_properties({"log.segment.bytes": "100"})  # a broker key, not a topic key
    assert "min.insync.replicas" in UNMODELLED_TOPIC_KEYS
    props = {"min.insync.replicas": "2", "segment.ms": "1000"}
    with pytest.raises(ConfigError, match="does not model"):
        TopicConfig.from_properties(props)
    cfg = TopicConfig.from_properties(props, ignore_unmodelled=True)
    assert cfg.segment_ms == 1000
    assert not set(UNMODELLED_TOPIC_KEYS) & set(TOPIC_CONFIG_KEYS)


def test_compaction_lag_consistency() -> None:
    """Kafka refuses min.compaction.lag.ms above max.compaction.lag.ms."""
    ok = TopicConfig.from_properties({"min.compaction.lag.ms": 500, "max.compaction.lag.ms": 500})
    assert (ok.min_compaction_lag_ms, ok.max_compaction_lag_ms) == (500, 500)
    with pytest.raises(ConfigError) as info:
        TopicConfig.from_properties({"min.compaction.lag.ms": 501, "max.compaction.lag.ms": 500})
    assert info.value.key == "min.compaction.lag.ms"
    assert "max.compaction.lag.ms (500)" in info.value.rule


def test_config_error_type() -> None:
    with pytest.raises(ConfigError) as info:
        TopicConfig(segment_bytes=13)
    err = info.value
    assert isinstance(err, ValueError) and isinstance(err, KafkalogError)
    assert str(err) == "segment.bytes=13 is invalid: must be at least 14"
    copy = pickle.loads(pickle.dumps(err))
    assert (copy.key, copy.value, copy.rule, str(copy)) == (err.key, err.value, err.rule, str(err))


def test_direct_construction_is_validated_and_typed() -> None:
    with pytest.raises(ConfigError, match="32-bit"):
        TopicConfig(segment_bytes="1048576")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="true or false"):
        TopicConfig(preallocate=1)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="must be a string"):
        TopicConfig(compression_type=None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="list"):
        TopicConfig(cleanup_policy=("compact", 1))  # type: ignore[arg-type]
    assert TopicConfig(cleanup_policy="compact,delete").cleanup_policy == ("compact", "delete")  # type: ignore[arg-type]
    assert TopicConfig(cleanup_policy=["compact"]).cleanup_policy == ("compact",)  # type: ignore[arg-type]
    cfg = TopicConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.segment_bytes = 100  # type: ignore[misc]
    with pytest.raises(ConfigError):
        dataclasses.replace(cfg, segment_ms=0)
    assert dataclasses.replace(cfg, segment_ms=5).segment_ms == 5


def test_max_segment_ms() -> None:
    day, hour = 86400000, 3600000
    assert TopicConfig(segment_ms=day).max_segment_ms == day
    # the compaction lag only matters for compacted topics
    assert TopicConfig(segment_ms=day, max_compaction_lag_ms=hour).max_segment_ms == day
    compacted = TopicConfig(segment_ms=day, cleanup_policy=("compact",), max_compaction_lag_ms=hour)
    assert compacted.max_segment_ms == hour
    both = TopicConfig(segment_ms=hour, cleanup_policy=("compact", "delete"))
    assert both.max_segment_ms == hour  # default lag (LONG_MAX) is larger
    assert TopicConfig(cleanup_policy=("compact",)).compact
    assert TopicConfig().delete and not TopicConfig().compact


def test_derived_values() -> None:
    assert TopicConfig().init_file_size == 0
    assert TopicConfig(preallocate=True, segment_bytes=4096).init_file_size == 4096
    cfg = TopicConfig()
    assert cfg.effective_message_timestamp_before_max_ms == LONG_MAX
    fallback = TopicConfig(message_timestamp_difference_max_ms=1000)
    assert fallback.effective_message_timestamp_before_max_ms == 1000
    assert fallback.effective_message_timestamp_after_max_ms == 1000
    explicit = dataclasses.replace(
        fallback, message_timestamp_before_max_ms=5, message_timestamp_after_max_ms=7
    )
    assert explicit.effective_message_timestamp_before_max_ms == 5
    assert explicit.effective_message_timestamp_after_max_ms == 7


class _FixedBits(random.Random):
    """A ``Random`` whose next 32-bit draw is chosen by the test."""

    def __init__(self, bits: int) -> None:
        super().__init__(0)
        self.bits = bits

    def getrandbits(self, k: int) -> int:
        assert k == 32
        return self.bits


def test_random_segment_jitter() -> None:
    # no jitter configured: always 0, no randomness consumed
    assert TopicConfig().random_segment_jitter() == 0
    assert TopicConfig().random_segment_jitter(_FixedBits(12345)) == 0
    cfg = TopicConfig(segment_jitter_ms=1000, segment_ms=600)
    # bound = min(jitter, segment.ms) = 600; abs of the signed 32-bit draw
    assert cfg.random_segment_jitter(_FixedBits(1234)) == 1234 % 600
    assert cfg.random_segment_jitter(_FixedBits(2**32 - 1234)) == 1234 % 600  # -1234
    assert cfg.random_segment_jitter(_FixedBits(2**31)) == 0  # Integer.MIN_VALUE -> 0
    assert cfg.random_segment_jitter(_FixedBits(2**31 - 1)) == (2**31 - 1) % 600
    huge = TopicConfig(segment_jitter_ms=LONG_MAX, segment_ms=LONG_MAX)
    assert huge.random_segment_jitter(_FixedBits(2**31 + 1)) == 2**31 - 1
    rng = random.Random(7)
    draws = [cfg.random_segment_jitter(rng) for _ in range(1000)]
    assert all(0 <= d < 600 for d in draws) and len(set(draws)) > 300
    # reproducible for a seeded generator
    assert [cfg.random_segment_jitter(random.Random(3)) for _ in range(2)] == [
        cfg.random_segment_jitter(random.Random(3))
    ] * 2
    assert 0 <= cfg.random_segment_jitter() < 600


def _long(lo: int) -> st.SearchStrategy[int]:
    return st.integers(lo, LONG_MAX)


_CONFIGS = st.builds(
    TopicConfig,
    segment_bytes=st.integers(14, INT_MAX),
    segment_ms=_long(1),
    segment_jitter_ms=_long(0),
    segment_index_bytes=st.integers(4, INT_MAX),
    index_interval_bytes=st.integers(0, INT_MAX),
    retention_ms=_long(-1),
    retention_bytes=st.integers(LONG_MIN, LONG_MAX),
    max_message_bytes=st.integers(0, INT_MAX),
    flush_messages=_long(1),
    flush_ms=_long(0),
    file_delete_delay_ms=_long(0),
    preallocate=st.booleans(),
    cleanup_policy=st.lists(st.sampled_from(["compact", "delete"]), max_size=2).map(tuple),
    delete_retention_ms=_long(0),
    min_compaction_lag_ms=st.just(0),
    max_compaction_lag_ms=_long(1),
    compression_type=st.sampled_from(["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"]),
    compression_gzip_level=st.sampled_from([-1, 1, 9]),
    compression_lz4_level=st.integers(1, 17),
    compression_zstd_level=st.integers(-131072, 22),
    message_timestamp_type=st.sampled_from(["CreateTime", "LogAppendTime"]),
    message_timestamp_before_max_ms=_long(0),
    message_timestamp_after_max_ms=_long(0),
    message_timestamp_difference_max_ms=_long(0),
)


@settings(max_examples=200, deadline=None)
@given(_CONFIGS)
def test_properties_round_trip(cfg: TopicConfig) -> None:
    props = cfg.to_properties()
    assert all(isinstance(v, str) for v in props.values())
    assert set(props) <= set(TOPIC_CONFIG_KEYS)
    assert TopicConfig.from_properties(props) == cfg
    for key, value in props.items():  # only non-defaults are listed
        assert getattr(cfg, TOPIC_CONFIG_KEYS[key]) != SPEC_DEFAULTS[key], value


def test_properties_rendering() -> None:
    cfg = TopicConfig.from_properties(
        {
            "segment.bytes": "1048576",
            "preallocate": "true",
            "cleanup.policy": "compact,delete",
            "retention.ms": -1,
            "compression.type": "zstd",
        }
    )
    assert cfg.to_properties() == {
        "segment.bytes": "1048576",
        "retention.ms": "-1",
        "preallocate": "true",
        "cleanup.policy": "compact,delete",
        "compression.type": "zstd",
    }


def test_min_cleanable_dirty_ratio_is_a_double_between_0_and_1() -> None:
    """The cleaner's trigger: parsed as Java's Double.parseDouble, refused outside [0, 1]."""
    assert TopicConfig.from_properties({"min.cleanable.dirty.ratio": " 0.25 "}) == TopicConfig(
        min_cleanable_dirty_ratio=0.25
    )
    assert TopicConfig(min_cleanable_dirty_ratio=1).min_cleanable_dirty_ratio == 1.0
    for bad in ("1.5", "-0.1", "half", "", "true"):
        with pytest.raises(ConfigError, match=r"min\.cleanable\.dirty\.ratio"):
            TopicConfig.from_properties({"min.cleanable.dirty.ratio": bad})
    assert TopicConfig(min_cleanable_dirty_ratio=0.1).to_properties() == {
        "min.cleanable.dirty.ratio": "0.1"
    }
