"""Enumerations and limits shared by every record-format module."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Literal

TimestampUnit = Literal["ms", "us"]  # of the timestamp column in Arrow outputs


class Compression(enum.IntEnum):
    """Codec ids as stored in bits 0-2 of the batch (or legacy message) attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def parse(cls, value: str | int | Compression) -> Compression:
        """Accept the names Kafka's ``compression.type`` uses, or an id."""
        if isinstance(value, Compression):
            return value
        if isinstance(value, int):
            return cls(value)
        try:
            return cls[value.strip().upper()]
        except KeyError:
            raise ValueError(
                f"unknown compression {value!r}; expected one of none, gzip, snappy, lz4, zstd"
            ) from None

    @property
    def label(self) -> str:
        """The lower-case name Kafka's tools print (``compresscodec: lz4``)."""
        return self.name.lower()


class TimestampType(enum.IntEnum):
    """Kafka's timestamp types; -1 is what magic 0 (no timestamps) reports."""

    NO_TIMESTAMP = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1

    @property
    def label(self) -> str:
        return {-1: "NoTimestampType", 0: "CreateTime", 1: "LogAppendTime"}[int(self)]


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds that protect a reader from length fields it must not trust.

    ``max_batch_bytes`` bounds one log entry as stored (12-byte log overhead included). Kafka's
    default ``max.message.bytes`` is 1048588; brokers are often configured higher, so the default
    leaves generous room while still refusing a 2 GiB length read from a flipped bit.
    A compressed payload may inflate to at most ``max(compressed * max_decompression_ratio,
    min_decompressed_allowance)`` bytes, and never beyond ``max_decompressed_bytes``.
    """

    max_batch_bytes: int = 8 * 1024 * 1024
    max_decompression_ratio: int = 1024
    min_decompressed_allowance: int = 4 * 1024 * 1024
    max_decompressed_bytes: int = 256 * 1024 * 1024

    def decompressed_bound(self, compressed_len: int) -> int:
        """Largest output a payload of ``compressed_len`` bytes may decompress to."""
        bound = max(compressed_len * self.max_decompression_ratio, self.min_decompressed_allowance)
        return min(bound, self.max_decompressed_bytes)


DEFAULT_LIMITS = Limits()
