"""The small text files a Kafka broker keeps beside its segments, read and written byte-exactly.

Kafka stores everything it must remember across restarts that is not record data in tiny text
files (spec §1.1, §1.4):

* the four *offset checkpoints* of a log directory (``recovery-point-offset-checkpoint``,
  ``log-start-offset-checkpoint``, ``replication-offset-checkpoint``,
  ``cleaner-offset-checkpoint``) -- :class:`OffsetCheckpoint`;
* the per-partition ``leader-epoch-checkpoint`` -- :class:`LeaderEpochCheckpoint`, plus the
  in-memory rules Kafka applies to it (:class:`LeaderEpochCache`, spec §7.11);
* the per-partition ``partition.metadata`` holding the topic id -- :class:`PartitionMetadata`;
* the ``.kafka_cleanshutdown`` marker -- :class:`CleanShutdownMarker`;
* the log directory's ``meta.properties`` -- :class:`MetaProperties` (read with Java's
  ``Properties.load`` rules, written with ``Properties.store``'s).

Readers accept exactly what Kafka's readers accept (Java ``readLine`` line endings, Java
``Integer.parseInt`` numbers, ``\\s+`` token splitting) so a directory Kafka can load, kafkalog
can load, and they refuse the rest with a :class:`CheckpointError` that names the file and the
byte offset of the offending line.  Writers produce the bytes Kafka writes and replace files the
way Kafka does (temporary ``<file>.tmp``, fsync, atomic rename, fsync of the directory) so a
crash never leaves a half-written checkpoint behind.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import contextlib
import json
import logging
import os
import re
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple, TypeVar

from kafkalog import files
from kafkalog.errors import KafkalogError, _PositionedError

__all__ = [
    "CLEANER_OFFSET_CHECKPOINT",
    "CLEAN_SHUTDOWN_FILE",
    "LEADER_EPOCH_CHECKPOINT",
    "LOG_START_OFFSET_CHECKPOINT",
    "METADATA_TOPIC_ID",
    "META_PROPERTIES",
    "PARTITION_METADATA",
    "RECOVERY_POINT_OFFSET_CHECKPOINT",
    "REPLICATION_OFFSET_CHECKPOINT",
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "ZERO_UUID",
    "CheckpointError",
    "CleanShutdownMarker",
    "EpochEntry",
    "LeaderEpochCache",
    "LeaderEpochCheckpoint",
    "MetaProperties",
    "OffsetCheckpoint",
    "PartitionMetadata",
    "PartitionMetadataInfo",
    "decode_uuid",
    "encode_uuid",
    "new_topic_id",
]

StrPath = str | os.PathLike[str]
T = TypeVar("T")

# File names, as Kafka spells them (spec §1.1, §1.3).
RECOVERY_POINT_OFFSET_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
META_PROPERTIES = "meta.properties"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
#: a standalone Log's own clean-shutdown marker, in its partition directory (see LogCleanShutdown)
LOG_CLEAN_SHUTDOWN_FILE = ".kafkalog-clean-shutdown"

ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"
"""Kafka's ``Uuid.ZERO_UUID``: never a valid topic id (``partition.metadata`` rejects it)."""
METADATA_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAQ"
"""Kafka's ``Uuid.METADATA_TOPIC_ID`` (= ``ONE_UUID``), the topic id of ``__cluster_metadata``."""

UNDEFINED_EPOCH = -1
"""What :meth:`LeaderEpochCache.end_offset_for` answers when no epoch applies (Kafka's value)."""
UNDEFINED_EPOCH_OFFSET = -1

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


class CheckpointError(_PositionedError):
    """A checkpoint / metadata file Kafka itself would refuse to load.

    ``position`` is the byte offset of the offending line (0 for problems with the file as a
    whole), so ``head -c <position>`` shows everything before it.
    """


# --------------------------------------------------------------------------------------------
# Java-compatible text primitives

_EOL = re.compile(rb"\r\n|\r|\n")
# Java's regex ``\s`` is ASCII-only; Python's ``\s`` on str would also match e.g. U+00A0.
_JAVA_WS = re.compile(r"[ \t\n\x0b\f\r]+")
# Java's Integer.parseInt/Long.parseLong: optional sign, then decimal digits (Character.digit
# accepts every Unicode Nd digit, as does Python's ``\d`` and ``int``), nothing else -- no
# whitespace, no underscores.
_JAVA_INT = re.compile(r"[+-]?\d+")


def _natural_lines(data: bytes) -> Iterator[tuple[int, bytes]]:
    """Lines as Java's ``BufferedReader.readLine`` sees them, with their byte offsets.

    ``\\n``, ``\\r`` and ``\\r\\n`` all end a line; a final line without terminator still counts;
    an empty input has no lines.  Kafka writes ``\\n`` only, but reads any of them.
    """
    pos = 0
    for m in _EOL.finditer(data):
        yield pos, data[pos : m.start()]
        pos = m.end()
    if pos < len(data):
        yield pos, data[pos:]


def _java_split(pattern: re.Pattern[str], text: str) -> list[str]:
    """``String.split(regex)`` with Java's limit-0 rule: trailing empty strings are dropped."""
    parts = pattern.split(text)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def _java_int(text: str, lo: int, hi: int) -> int | None:
    """Java ``parseInt``/``parseLong`` (range ``lo..hi``); ``None`` where Java would throw."""
    if not _JAVA_INT.fullmatch(text):
        return None
    value = int(text)
    return value if lo <= value <= hi else None


def _check_int(name: str, value: object, lo: int, hi: int) -> int:
    """Validate a number about to be written, so we never write what Kafka cannot read back."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int, got {value!r}")
    if not lo <= value <= hi:
        raise ValueError(
            f"{name} {value} does not fit a Java {'int' if hi == _INT32_MAX else 'long'}"
        )
    return value


def _atomic_write(path: StrPath, data: bytes) -> None:
    """Replace ``path`` with ``data`` the way Kafka replaces checkpoints.

    Write ``<path>.tmp``, flush and fsync it, rename it over ``path`` (atomic on POSIX), then
    fsync the directory.  A crash at any moment leaves either the complete old file or the
    complete new one.  On failure the ``.tmp`` file is removed (Kafka leaves it; it is harmless
    there because the next write truncates it, but it is clutter an operator has to explain).
    """
    target = os.fspath(path)
    tmp = target + ".tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    files.fsync_dir(os.path.dirname(os.path.abspath(target)))


def _read_bytes(path: StrPath) -> tuple[bytes, str]:
    name = os.fspath(path)
    return files.read_bytes(name), name


# --------------------------------------------------------------------------------------------
# the generic checkpoint container (Kafka's CheckpointFile, spec §1.4)


def _decode_line(raw: bytes, pos: int, path: str | None) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        reason = f"line is not valid UTF-8 ({exc.reason})"
        raise CheckpointError(reason, path=path, position=pos) from None


def _show(line: str) -> str:
    return repr(line if len(line) <= 80 else line[:80] + "...")


def _parse_container(
    data: bytes,
    path: str | None,
    version: int,
    parse_entry: Callable[[str], T | None],
) -> list[tuple[T, int]]:
    """Parse ``<version>\\n<count>\\n<entry>\\n...``; entries paired with their byte offsets.

    Follows Kafka's reader step by step, including its two lenient spots: an empty file and a
    file holding only the version line both mean "no entries" (a crash between
    ``Files.createFile`` and the first write leaves the former; Kafka never writes the latter,
    but accepts it).  Checks happen in Kafka's order: version syntax, version value, count
    syntax, each entry, and finally the count.
    """
    lines = iter(_natural_lines(data))
    first = next(lines, None)
    if first is None:
        return []
    pos, raw = first
    text = _decode_line(raw, pos, path)
    found = _java_int(text, _INT32_MIN, _INT32_MAX)
    if found is None:
        raise CheckpointError(f"malformed version line {_show(text)}", path=path, position=pos)
    if found != version:
        raise CheckpointError(
            f"unrecognised checkpoint version {found}, expected {version}", path=path, position=pos
        )
    second = next(lines, None)
    if second is None:
        return []
    count_pos, raw = second
    text = _decode_line(raw, count_pos, path)
    expected = _java_int(text, _INT32_MIN, _INT32_MAX)
    if expected is None or expected < 0:
        # A negative count makes Kafka's ArrayList constructor throw: equally unreadable.
        raise CheckpointError(
            f"malformed entry-count line {_show(text)}", path=path, position=count_pos
        )
    entries: list[tuple[T, int]] = []
    for pos, raw in lines:
        text = _decode_line(raw, pos, path)
        entry = parse_entry(text)
        if entry is None:
            raise CheckpointError(f"malformed line {_show(text)}", path=path, position=pos)
        entries.append((entry, pos))
    if len(entries) != expected:
        # Reported at the line that declared the count: that is the claim the file breaks.
        raise CheckpointError(
            f"expected {expected} entries, found {len(entries)}", path=path, position=count_pos
        )
    return entries


def _render_container(version: int, lines: list[str]) -> bytes:
    """Kafka's writer: version, count, one entry per line, every line ended by ``\\n``."""
    out = [str(version), str(len(lines)), *lines]
    return ("\n".join(out) + "\n").encode("utf-8")


# --------------------------------------------------------------------------------------------
# offset checkpoints


def _parse_offset_entry(line: str) -> tuple[tuple[str, int], int] | None:
    parts = _java_split(_JAVA_WS, line)
    if len(parts) != 3:
        return None
    partition = _java_int(parts[1], _INT32_MIN, _INT32_MAX)
    offset = _java_int(parts[2], _INT64_MIN, _INT64_MAX)
    if partition is None or offset is None:
        return None
    return (parts[0], partition), offset


class OffsetCheckpoint:
    """The four per-log-directory offset checkpoints: ``<topic> <partition> <offset>`` lines.

    ``recovery-point-offset-checkpoint`` (first offset not known to be flushed),
    ``log-start-offset-checkpoint``, ``replication-offset-checkpoint`` (high watermarks) and
    ``cleaner-offset-checkpoint`` (first dirty offset) all share this format, version 0.
    """

    VERSION = 0

    @staticmethod
    def parse(data: bytes, *, path: str | None = None) -> dict[tuple[str, int], int]:
        """Entries keyed by ``(topic, partition)``, in file order.

        A partition listed twice keeps its last offset (and its first position), as Kafka's
        ``HashMap`` does; the count check counts lines, not distinct partitions, like Kafka.
        """
        result: dict[tuple[str, int], int] = {}
        for (tp, offset), _pos in _parse_container(
            data, path, OffsetCheckpoint.VERSION, _parse_offset_entry
        ):
            result[tp] = offset
        return result

    @staticmethod
    def read(path: StrPath) -> dict[tuple[str, int], int]:
        """Read a checkpoint file; a missing file raises ``FileNotFoundError``."""
        data, name = _read_bytes(path)
        return OffsetCheckpoint.parse(data, path=name)

    @staticmethod
    def encode(entries: Mapping[tuple[str, int], int]) -> bytes:
        """The exact bytes Kafka writes for ``entries`` (mapping order kept).

        An empty mapping gives ``b"0\\n0\\n"`` as in Kafka; a zero-byte checkpoint only ever
        exists because Kafka created the file and crashed (or stopped) before writing it.
        Topics must be non-empty and free of whitespace, or the file would not read back.
        """
        lines = []
        for key, offset in entries.items():
            topic, partition = key
            if not isinstance(topic, str) or not topic or _JAVA_WS.search(topic):
                raise ValueError(f"topic {topic!r} cannot be written to an offset checkpoint")
            _check_int("partition", partition, _INT32_MIN, _INT32_MAX)
            _check_int("offset", offset, _INT64_MIN, _INT64_MAX)
            lines.append(f"{topic} {partition} {offset}")
        return _render_container(OffsetCheckpoint.VERSION, lines)

    @staticmethod
    def write(path: StrPath, entries: Mapping[tuple[str, int], int]) -> None:
        """Atomically replace ``path`` with ``entries`` (see :func:`_atomic_write`)."""
        _atomic_write(path, OffsetCheckpoint.encode(entries))


# --------------------------------------------------------------------------------------------
# leader epoch checkpoint and cache


class EpochEntry(NamedTuple):
    """One ``leader-epoch-checkpoint`` line: leader ``epoch`` began at ``start_offset``."""

    epoch: int
    start_offset: int


def _parse_epoch_entry(line: str) -> EpochEntry | None:
    parts = _java_split(_JAVA_WS, line)
    if len(parts) != 2:
        return None
    epoch = _java_int(parts[0], _INT32_MIN, _INT32_MAX)
    start = _java_int(parts[1], _INT64_MIN, _INT64_MAX)
    if epoch is None or start is None:
        return None
    return EpochEntry(epoch, start)


class LeaderEpochCheckpoint:
    """``leader-epoch-checkpoint``: version 0, ``<epoch> <startOffset>`` lines.

    This class only moves entries between bytes and lists, unchanged (a file with out-of-order
    entries reads back as written).  Kafka's cleaning-up of such lists lives in
    :class:`LeaderEpochCache`.
    """

    VERSION = 0

    @staticmethod
    def parse(data: bytes, *, path: str | None = None) -> list[EpochEntry]:
        """The entries in file order; ``path`` only names the file in errors."""
        return [
            e
            for e, _ in _parse_container(
                data, path, LeaderEpochCheckpoint.VERSION, _parse_epoch_entry
            )
        ]

    @staticmethod
    def read(path: StrPath) -> list[EpochEntry]:
        """Read the file; a missing file raises ``FileNotFoundError``."""
        data, name = _read_bytes(path)
        return LeaderEpochCheckpoint.parse(data, path=name)

    @staticmethod
    def encode(entries: Iterable[tuple[int, int]]) -> bytes:
        """Kafka's bytes for ``(epoch, start_offset)`` pairs, in the order given."""
        lines = []
        for epoch, start in entries:
            _check_int("epoch", epoch, _INT32_MIN, _INT32_MAX)
            _check_int("start offset", start, _INT64_MIN, _INT64_MAX)
            lines.append(f"{epoch} {start}")
        return _render_container(LeaderEpochCheckpoint.VERSION, lines)

    @staticmethod
    def write(path: StrPath, entries: Iterable[tuple[int, int]]) -> None:
        """Atomically replace ``path`` (temporary file, fsync, rename, directory fsync)."""
        _atomic_write(path, LeaderEpochCheckpoint.encode(entries))


class LeaderEpochCache:
    """Kafka's leader-epoch cache rules (``LeaderEpochFileCache``, spec §7.11), in memory.

    Entries are kept strictly increasing in both epoch and start offset: :meth:`assign` drops
    whatever would break that before adding, and loading a file applies the same rule to each
    line in turn (as Kafka's constructor does), so a checkpoint with stale or conflicting lines
    is cleaned up on load exactly as Kafka would clean it.  Persisting is explicit
    (:meth:`write`): the log layer decides when, as Kafka writes synchronously after
    :meth:`assign` but lazily after truncations.
    """

    def __init__(self, entries: Iterable[tuple[int, int]] = ()) -> None:
        self._entries: list[EpochEntry] = []
        for epoch, start in entries:
            self.assign(epoch, start)

    # -- file I/O

    @classmethod
    def from_file(cls, path: StrPath) -> LeaderEpochCache:
        """Load ``leader-epoch-checkpoint``; a missing file is an empty cache.

        (Kafka creates the file when it is missing, so "absent" and "empty" mean the same.)
        A line with a negative epoch or offset -- which Kafka refuses with
        IllegalArgumentException while loading -- raises :class:`CheckpointError` at that line.
        """
        try:
            data, name = _read_bytes(path)
        except FileNotFoundError:
            return cls()
        cache = cls()
        for entry, pos in _parse_container(
            data, name, LeaderEpochCheckpoint.VERSION, _parse_epoch_entry
        ):
            if entry.epoch < 0 or entry.start_offset < 0:
                raise CheckpointError(
                    f"invalid leader epoch entry {tuple(entry)}: negative epoch or offset",
                    path=name,
                    position=pos,
                )
            cache.assign(entry.epoch, entry.start_offset)
        return cache

    def write(self, path: StrPath) -> None:
        """Atomically write the current entries (Kafka's bytes)."""
        LeaderEpochCheckpoint.write(path, self._entries)

    # -- views

    @property
    def entries(self) -> list[EpochEntry]:
        """A copy of the entries, oldest epoch first."""
        return list(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[EpochEntry]:
        return iter(list(self._entries))

    def __repr__(self) -> str:
        return f"LeaderEpochCache({[tuple(e) for e in self._entries]})"

    @property
    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    @property
    def latest_epoch(self) -> int | None:
        """The current leader epoch (the latest one with data), ``None`` when empty."""
        return self._entries[-1].epoch if self._entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    def epoch_entry(self, epoch: int) -> EpochEntry | None:
        """The entry of exactly ``epoch``, if cached."""
        i = bisect.bisect_left(self._entries, epoch, key=lambda e: e.epoch)
        if i < len(self._entries) and self._entries[i].epoch == epoch:
            return self._entries[i]
        return None

    # -- updates

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` began at ``start_offset``; returns whether anything changed.

        Nothing happens when ``epoch`` is already the latest and does not start earlier than
        cached (every batch of a leader's term calls this).  Otherwise every entry, from the
        newest down, with an epoch ``>= epoch`` or a start offset ``>= start_offset`` is
        dropped first -- they describe history a new leader has overwritten.
        """
        _check_int("epoch", epoch, _INT32_MIN, _INT32_MAX)
        _check_int("start offset", start_offset, _INT64_MIN, _INT64_MAX)
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        latest = self.latest_entry
        if latest is not None and latest.epoch == epoch and start_offset >= latest.start_offset:
            return False
        entries = self._entries
        while entries and (entries[-1].epoch >= epoch or entries[-1].start_offset >= start_offset):
            entries.pop()
        entries.append(EpochEntry(epoch, start_offset))
        return True

    def truncate_from_end(self, end_offset: int) -> list[EpochEntry]:
        """Forget epochs starting at or after ``end_offset`` (the log was truncated there).

        Returns the removed entries, oldest first.  A negative ``end_offset`` changes nothing.
        """
        removed: list[EpochEntry] = []
        if end_offset < 0:
            return removed
        entries = self._entries
        while entries and entries[-1].start_offset >= end_offset:
            removed.append(entries.pop())
        removed.reverse()
        return removed

    def truncate_from_start(self, start_offset: int) -> list[EpochEntry]:
        """Forget history before the new log start offset ``start_offset``.

        Every entry starting at or before ``start_offset`` is removed and the newest of them
        comes back starting at ``start_offset`` -- the epoch that the new first offset belongs
        to.  (So ``truncate_from_start(6)`` on ``[(0, 0), (1, 6)]`` leaves ``[(1, 6)]``.)
        Returns the removed entries as they were, oldest first.
        """
        entries = self._entries
        n = 0
        while n < len(entries) and entries[n].start_offset <= start_offset:
            n += 1
        if n == 0:
            return []
        removed = entries[:n]
        self._entries = [EpochEntry(removed[-1].epoch, start_offset), *entries[n:]]
        return removed

    def clear(self) -> None:
        """Forget everything (a v0/v1 batch appended to a v2 log, spec §7.11)."""
        self._entries = []

    # -- queries

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch the record at ``offset`` was written in: the newest entry starting at or
        before it; ``None`` if ``offset`` precedes every entry (or the cache is empty)."""
        i = bisect.bisect_right(self._entries, offset, key=lambda e: e.start_offset)
        return self._entries[i - 1].epoch if i else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's OffsetsForLeaderEpoch answer: ``(epoch, end offset)``.

        * ``UNDEFINED_EPOCH`` requested, or an epoch above every cached one:
          ``(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)``;
        * the latest epoch: ``(epoch, log_end_offset)``;
        * otherwise the largest cached epoch ``<= requested_epoch`` (or ``requested_epoch``
          itself when none is that small) and the start offset of the first cached epoch
          above it.
        """
        undefined = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        if requested_epoch == UNDEFINED_EPOCH:
            return undefined
        if self.latest_epoch == requested_epoch:
            return requested_epoch, log_end_offset
        i = bisect.bisect_right(self._entries, requested_epoch, key=lambda e: e.epoch)
        if i == len(self._entries):
            return undefined
        higher = self._entries[i]
        floor_epoch = self._entries[i - 1].epoch if i else requested_epoch
        return floor_epoch, higher.start_offset


# --------------------------------------------------------------------------------------------
# Kafka Uuid and partition.metadata

_UUID_TEXT = re.compile(r"[A-Za-z0-9_-]{22}(?:==)?")


def decode_uuid(text: str) -> bytes:
    """The 16 bytes of a Kafka Uuid string (URL-safe base64, padding optional).

    Accepts what Kafka's ``Uuid.fromString`` accepts (``Base64.getUrlDecoder``): 22 characters,
    or 24 ending in ``==``.  Raises ``ValueError`` otherwise.
    """
    if not _UUID_TEXT.fullmatch(text):
        raise ValueError(f"{text!r} is not a Kafka Uuid (22 URL-safe base64 characters)")
    try:
        raw = base64.urlsafe_b64decode(text[:22] + "==")
    except binascii.Error as exc:  # pragma: no cover - the regex admits only valid input
        raise ValueError(f"{text!r} is not a Kafka Uuid: {exc}") from None
    return raw


def encode_uuid(raw: bytes) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 of the 16 bytes, without padding."""
    if len(raw) != 16:
        raise ValueError(f"a Kafka Uuid has 16 bytes, not {len(raw)}")
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


_RESERVED_UUIDS = frozenset({ZERO_UUID, METADATA_TOPIC_ID})


def new_topic_id() -> str:
    """A fresh random topic id, drawn the way Kafka's ``Uuid.randomUuid`` draws them.

    A version-4 (random) UUID like Java's ``UUID.randomUUID`` -- real brokers' topic ids carry
    its version nibble -- never one of the reserved ids (zero, ``METADATA_TOPIC_ID``), and never
    one containing ``-``: Kafka at the spec commit rejects ids *starting* with ``-`` (they look
    like command-line flags), newer Kafka (KAFKA-20072) any ``-``; avoiding every ``-`` satisfies
    both.
    """
    while True:
        text = encode_uuid(uuid.uuid4().bytes)
        if text not in _RESERVED_UUIDS and "-" not in text:
            return text


class PartitionMetadataInfo(NamedTuple):
    """Content of ``partition.metadata``."""

    version: int
    topic_id: str


_COLON_WS = re.compile(r":[ \t\n\x0b\f\r]+")


class PartitionMetadata:
    """``partition.metadata``: ``version: 0\\ntopic_id: <Kafka Uuid>``, no trailing newline.

    Not a CheckpointFile: its own reader splits each of the first two lines at the first
    ``:`` followed by whitespace.  Like current Kafka it checks the key names (``version``,
    ``topic_id``); it accepts any version >= 0 (downgrade compatibility), ignores anything after
    the second line, and refuses the all-zero Uuid.
    """

    VERSION = 0

    @staticmethod
    def parse(data: bytes, *, path: str | None = None) -> PartitionMetadataInfo:
        """Version and canonical topic id; ``path`` only names the file in errors."""
        lines = list(_natural_lines(data))[:2]

        def field_value(index: int, key: str) -> tuple[str, int]:
            if index >= len(lines):
                pos = len(data)
                raise CheckpointError(f"missing {key!r} line", path=path, position=pos)
            pos, raw = lines[index]
            text = _decode_line(raw, pos, path)
            parts = _COLON_WS.split(text, maxsplit=1)
            if len(parts) != 2 or parts[0] != key:
                raise CheckpointError(
                    f"malformed line {_show(text)}, expected '{key}: <value>'",
                    path=path,
                    position=pos,
                )
            return parts[1], pos

        text, pos = field_value(0, "version")
        version = _java_int(text, _INT32_MIN, _INT32_MAX)
        if version is None:
            raise CheckpointError(f"malformed version {_show(text)}", path=path, position=pos)
        if version < PartitionMetadata.VERSION:
            raise CheckpointError(
                f"unrecognised partition metadata version {version}", path=path, position=pos
            )
        text, pos = field_value(1, "topic_id")
        try:
            raw_id = decode_uuid(text)
        except ValueError as exc:
            raise CheckpointError(str(exc), path=path, position=pos) from None
        if raw_id == bytes(16):
            raise CheckpointError("invalid topic id: the zero Uuid", path=path, position=pos)
        return PartitionMetadataInfo(version, encode_uuid(raw_id))

    @staticmethod
    def read(path: StrPath) -> PartitionMetadataInfo:
        """Read the file; a missing file raises ``FileNotFoundError``."""
        data, name = _read_bytes(path)
        return PartitionMetadata.parse(data, path=name)

    @staticmethod
    def encode(topic_id: str) -> bytes:
        """Kafka's bytes for ``topic_id`` (written in canonical unpadded form)."""
        raw = decode_uuid(topic_id)
        if raw == bytes(16):
            raise ValueError("the zero Uuid is not a valid topic id")
        return f"version: {PartitionMetadata.VERSION}\ntopic_id: {encode_uuid(raw)}".encode()

    @staticmethod
    def write(path: StrPath, topic_id: str) -> None:
        """Atomically replace ``path`` (temporary file, fsync, rename, directory fsync)."""
        _atomic_write(path, PartitionMetadata.encode(topic_id))


# --------------------------------------------------------------------------------------------
# .kafka_cleanshutdown


_UNREADABLE_SAID: set[tuple[str, int, int]] = set()

#: what a data directory's checkpoint that cannot be read costs (Kafka's LogManager warns the
#: same and goes on)
UNREADABLE_CHECKPOINT = {
    LOG_START_OFFSET_CHECKPOINT: "the log start offsets it holds are not honoured: each "
    "partition starts at its first segment's base offset, so records DeleteRecords or "
    "retention removed below it may be read again",
    RECOVERY_POINT_OFFSET_CHECKPOINT: "a writable open recovers every segment of every log "
    "(as Kafka resets its recovery points to 0)",
    REPLICATION_OFFSET_CHECKPOINT: "the high watermarks it holds are not known: each log's "
    "is taken from its log end",
}


def warn_unreadable_checkpoint(path: str, error: BaseException, *, once: bool = True) -> None:
    """A WARNING naming a data directory's checkpoint that cannot be read, the byte where
    (in ``error``), and what it costs; with ``once``, once per file as it is (its size and
    mtime: each read-only open of a partition reads the data directory's log starts)."""
    try:
        st = os.stat(path)
        key = (path, st.st_size, st.st_mtime_ns)
    except OSError:
        key = (path, -1, -1)
    if once and key in _UNREADABLE_SAID:
        return
    _UNREADABLE_SAID.add(key)
    name = os.path.basename(path)
    logging.getLogger("kafkalog.log").warning(
        "kafkalog: %s cannot be read (%s): %s; restore it, or remove it and let a writable "
        "open write it again",
        path,
        error,
        UNREADABLE_CHECKPOINT.get(name, "what it holds is not used"),
    )


def checkpointed_log_start(partition_dir: StrPath) -> int | None:
    """The log start offset the data directory around ``partition_dir`` checkpointed for it
    (``log-start-offset-checkpoint``, what DeleteRecords and retention moved it to), or None
    where there is none: a log opened on its own still starts where the broker said it does,
    not at its first segment's base. Unreadable checkpoints count as none, as in LogManager."""
    from kafkalog.log.layout import parse_partition_dir

    directory = os.fspath(partition_dir).rstrip("/")
    path = os.path.join(os.path.dirname(directory), LOG_START_OFFSET_CHECKPOINT)
    try:
        key = parse_partition_dir(directory)
        entries = dict(OffsetCheckpoint.read(path))
    except FileNotFoundError:
        return None
    except ValueError:
        return None  # no partition directory: no data directory around it
    except (OSError, KafkalogError) as e:
        warn_unreadable_checkpoint(path, e)
        return None
    return entries.get(key)


#: a standalone log's own log start offset, when it has no data directory to keep it in
LOG_START_FILE = ".kafkalog-log-start-offset"
#: files that make a partition directory's parent a data directory (a broker's, a LogDir's)
_DATA_DIRECTORY_FILES = (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    "meta.properties",
)


class OwnLogStart:
    """The log start offset of a :class:`~kafkalog.log.log.Log` opened on its own, kept where
    a broker keeps it: in the data directory's ``log-start-offset-checkpoint`` when the
    partition's parent is a data directory, else in ``.kafkalog-log-start-offset`` beside the
    segments (one decimal line). Without it, records DeleteRecords removed came back when the
    log was opened again (issue 32)."""

    @staticmethod
    def read(partition_dir: StrPath) -> int | None:
        """What was kept (the larger of the two places), or None."""
        found = [checkpointed_log_start(partition_dir)]
        try:
            path = os.path.join(os.fspath(partition_dir), LOG_START_FILE)
            with open(path, "rb") as f:
                text = f.read(64).decode("ascii").strip()
            found.append(int(text) if text.isdigit() else None)
        except (FileNotFoundError, UnicodeDecodeError, IsADirectoryError):
            pass
        known = [v for v in found if v is not None]
        return max(known) if known else None

    @staticmethod
    def write(partition_dir: StrPath, offset: int) -> None:
        """Keep ``offset`` durably (each write whole or not at all)."""
        from kafkalog.log.layout import parse_partition_dir

        directory = os.fspath(partition_dir).rstrip("/")
        parent = os.path.dirname(os.path.abspath(directory))
        is_data_dir = any(os.path.exists(os.path.join(parent, n)) for n in _DATA_DIRECTORY_FILES)
        if is_data_dir:
            try:
                key = parse_partition_dir(directory)
            except ValueError:
                key = None
            if key is not None:
                path = os.path.join(parent, LOG_START_OFFSET_CHECKPOINT)
                try:
                    entries = dict(OffsetCheckpoint.read(path))
                except (OSError, KafkalogError):
                    entries = {}
                entries[key] = offset
                OffsetCheckpoint.write(path, entries)
                return
        _atomic_write(os.path.join(directory, LOG_START_FILE), f"{offset}\n".encode())


class LogCleanShutdown:
    """A standalone :class:`~kafkalog.log.log.Log`'s clean-shutdown marker and recovery point:
    ``.kafkalog-clean-shutdown`` in its partition directory, holding the offset up to which
    the closed log was flushed (one decimal line).

    A broker keeps both for all its logs in its data directory (``.kafka_cleanshutdown``,
    ``recovery-point-offset-checkpoint``); a log opened on its own has no data directory to
    keep them in, so without this every writable open would recover (re-read and re-check)
    every segment. Written last by a clean close, removed once the next writable open has
    loaded the log: a crash in between leaves no marker, and the next open recovers."""

    @staticmethod
    def path(partition_dir: StrPath) -> str:
        return os.path.join(os.fspath(partition_dir), LOG_CLEAN_SHUTDOWN_FILE)

    @staticmethod
    def read(partition_dir: StrPath) -> int | None:
        """The recovery point the marker holds; None without a marker (or an unreadable one:
        then the log recovers, which is always safe)."""
        found = LogCleanShutdown.read_end(partition_dir)
        return None if found is None else found[0]

    @staticmethod
    def read_end(partition_dir: StrPath) -> tuple[int, int | None, int | None] | None:
        """(the recovery point, the last segment's base offset, its ``.log``'s size) the
        marker holds; the last two are None in a marker written before they were kept."""
        try:
            with open(LogCleanShutdown.path(partition_dir), "rb") as f:
                fields = f.read(96).decode("ascii").split()
        except (FileNotFoundError, UnicodeDecodeError, IsADirectoryError):
            return None
        if not fields or not all(x.isdigit() for x in fields):
            return None
        if len(fields) == 3:
            return int(fields[0]), int(fields[1]), int(fields[2])
        return (int(fields[0]), None, None) if len(fields) == 1 else None

    @staticmethod
    def write(
        partition_dir: StrPath, recovery_point: int, last_log: tuple[int, int] | None = None
    ) -> None:
        """The marker, with the last segment's (base offset, ``.log`` size) when given: a
        reader knows from them that no append came after the close (an append changes the
        size; an mtime may not tell, at a coarse clock's resolution)."""
        text = (
            f"{recovery_point}"
            if last_log is None
            else f"{recovery_point} {last_log[0]} {last_log[1]}"
        )
        _atomic_write(LogCleanShutdown.path(partition_dir), f"{text}\n".encode())

    @staticmethod
    def remove(partition_dir: StrPath) -> None:
        try:
            os.remove(LogCleanShutdown.path(partition_dir))
        except FileNotFoundError:
            return
        files.fsync_dir(os.fspath(partition_dir))


class CleanShutdownMarker:
    """The ``.kafka_cleanshutdown`` marker of a log directory.

    Its *existence* is what matters: at startup Kafka deletes it at once and, if it was there,
    skips segment recovery.  Since Kafka 3.7 it holds ``{"version":0,"brokerEpoch":N}``;
    older brokers left it empty.  All methods take the log directory, not the file.
    """

    VERSION = 0

    @staticmethod
    def path(log_dir: StrPath) -> str:
        """The marker's path inside ``log_dir``."""
        return os.path.join(os.fspath(log_dir), CLEAN_SHUTDOWN_FILE)

    @staticmethod
    def exists(log_dir: StrPath) -> bool:
        """Whether the marker is there: the only thing recovery looks at."""
        return files.exists(CleanShutdownMarker.path(log_dir))

    @staticmethod
    def parse_broker_epoch(data: bytes) -> int | None:
        """The broker epoch of a marker body, ``None`` whenever Kafka's reader gives up.

        Empty (pre-3.7) bodies, bad UTF-8, non-JSON, a non-object, a missing / null /
        non-integer ``brokerEpoch`` or a non-integer ``version`` all mean "no epoch", never an
        error: recovery does not depend on it.  Unknown fields and trailing bytes after the
        JSON object are ignored, as Jackson does.  (Jackson's coercions of ``"42"`` or ``42.0``
        to a number are not reproduced.)
        """
        try:
            text = data.decode("utf-8").lstrip(" \t\r\n")
            obj, _ = json.JSONDecoder().raw_decode(text)
        except (UnicodeDecodeError, ValueError):
            return None
        if not isinstance(obj, dict):
            return None
        version = obj.get("version", 0)
        if isinstance(version, bool) or not isinstance(version, int):
            return None
        epoch = obj.get("brokerEpoch")
        if isinstance(epoch, bool) or not isinstance(epoch, int):
            return None
        return epoch if _INT64_MIN <= epoch <= _INT64_MAX else None

    @staticmethod
    def read_broker_epoch(log_dir: StrPath) -> int | None:
        """The recorded broker epoch; ``None`` if the marker is absent, empty or unreadable."""
        try:
            data, _ = _read_bytes(CleanShutdownMarker.path(log_dir))
        except OSError:
            return None
        return CleanShutdownMarker.parse_broker_epoch(data)

    @staticmethod
    def encode(broker_epoch: int | None) -> bytes:
        """Jackson's bytes: ``{"version":0,"brokerEpoch":N}``, no newline; ``None`` -> empty."""
        if broker_epoch is None:
            return b""
        _check_int("broker epoch", broker_epoch, _INT64_MIN, _INT64_MAX)
        return f'{{"version":{CleanShutdownMarker.VERSION},"brokerEpoch":{broker_epoch}}}'.encode()

    @staticmethod
    def write(log_dir: StrPath, broker_epoch: int | None) -> None:
        """Create (or replace) the marker.

        Written through a temporary file and renamed, so the marker never exists half-written
        (Kafka writes it in place; readers cannot tell the difference).
        """
        _atomic_write(CleanShutdownMarker.path(log_dir), CleanShutdownMarker.encode(broker_epoch))

    @staticmethod
    def remove(log_dir: StrPath) -> bool:
        """Delete the marker if present; returns whether it existed.

        The directory is fsynced afterwards: a marker that came back after a crash would make
        the next startup skip recovery of logs that were never cleanly closed.
        """
        try:
            os.unlink(CleanShutdownMarker.path(log_dir))
        except FileNotFoundError:
            return False
        files.fsync_dir(os.fspath(log_dir))
        return True


# --------------------------------------------------------------------------------------------
# meta.properties (java.util.Properties text)

_PROP_WS = " \t\f"
_JAVA_TRIM = "".join(map(chr, range(33)))  # String.trim() strips every char <= U+0020
_UNICODE_ESCAPE = re.compile(r"[0-9a-fA-F]{4}")
_SIMPLE_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _logical_lines(data: bytes) -> Iterator[tuple[int, str]]:
    """``Properties.load``'s logical lines with their character offsets.

    Blank lines and comment lines (first non-blank character ``#`` or ``!``) are skipped;
    leading blanks are dropped; a line ending in an odd number of backslashes continues on the
    next natural line, whose leading blanks are dropped too (a ``#`` there is data, not a
    comment).
    """
    # Properties.load(InputStream), which Kafka uses, decodes ISO-8859-1: one byte is one
    # character, so character offsets are byte offsets.
    natural = [(pos, raw.decode("latin-1")) for pos, raw in _natural_lines(data)]
    i = 0
    while i < len(natural):
        pos, line = natural[i]
        i += 1
        logical = line.lstrip(_PROP_WS)
        if not logical or logical[0] in "#!":
            continue
        while (len(logical) - len(logical.rstrip("\\"))) % 2 == 1:
            logical = logical[:-1]
            if i >= len(natural):
                break
            logical += natural[i][1].lstrip(_PROP_WS)
            i += 1
        yield pos, logical


def _split_key_value(line: str) -> tuple[str, str]:
    """Split a logical line into raw (still escaped) key and value, as Java does.

    The key ends at the first unescaped ``=``, ``:`` or blank; then blanks and at most one
    ``=``/``:`` are skipped.  The value keeps trailing blanks (Java does not trim them).
    """
    n = len(line)
    key_end = value_start = n
    has_separator = False
    escaped = False
    for i, c in enumerate(line):
        if escaped:
            escaped = False
        elif c == "\\":
            escaped = True
        elif c in "=:" or c in _PROP_WS:
            key_end, value_start, has_separator = i, i + 1, c in "=:"
            break
    while value_start < n:
        c = line[value_start]
        if c in _PROP_WS:
            pass
        elif not has_separator and c in "=:":
            has_separator = True
        else:
            break
        value_start += 1
    return line[:key_end], line[value_start:]


def _unescape(text: str, path: str | None, pos: int) -> str:
    r"""Java's ``loadConvert``: ``\t \n \r \f``, ``\uXXXX``, and ``\x`` -> ``x`` otherwise."""
    if "\\" not in text:
        return text
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        i += 1
        if c != "\\":
            out.append(c)
            continue
        if i >= n:  # a lone trailing backslash; cannot survive _logical_lines, but be safe
            break
        c = text[i]
        i += 1
        if c == "u":
            digits = text[i : i + 4]
            if not _UNICODE_ESCAPE.fullmatch(digits):
                raise CheckpointError(r"malformed \uxxxx escape", path=path, position=pos)
            out.append(chr(int(digits, 16)))
            i += 4
        else:
            out.append(_SIMPLE_ESCAPES.get(c, c))
    joined = "".join(out)
    # \uD83D\uDE00 is one character in Java (a surrogate pair); join such pairs.
    return joined.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def _parse_properties(data: bytes, path: str | None) -> tuple[dict[str, str], dict[str, int]]:
    props: dict[str, str] = {}
    positions: dict[str, int] = {}
    for pos, line in _logical_lines(data):
        raw_key, raw_value = _split_key_value(line)
        key = _unescape(raw_key, path, pos)
        props[key] = _unescape(raw_value, path, pos)
        positions[key] = pos
    return props, positions


@dataclass(frozen=True)
class MetaProperties:
    """A log directory's ``meta.properties`` with Kafka's typed view of it.

    :meth:`read` gives the raw key/value strings; :meth:`load` also checks them the way
    Kafka's ``MetaProperties.Builder`` does (raising :class:`CheckpointError` at the offending
    key's line), after which the typed properties cannot fail.
    """

    properties: Mapping[str, str]
    path: str | None = None
    positions: Mapping[str, int] = field(default_factory=dict, repr=False, compare=False)

    KNOWN_VERSIONS = (0, 1, 2)

    @staticmethod
    def parse(data: bytes, *, path: str | None = None) -> dict[str, str]:
        """``java.util.Properties.load`` of ``data``."""
        return _parse_properties(data, path)[0]

    @staticmethod
    def read(path: StrPath) -> dict[str, str]:
        """The raw key/value strings of the file (no validation beyond escapes)."""
        data, name = _read_bytes(path)
        return MetaProperties.parse(data, path=name)

    @classmethod
    def load(cls, path: StrPath) -> MetaProperties:
        """Read and validate; every typed property is safe to use afterwards."""
        data, name = _read_bytes(path)
        props, positions = _parse_properties(data, name)
        meta = cls(props, name, positions)
        meta.validate()
        return meta

    def validate(self) -> None:
        """Touch every typed property so that a bad file fails here, not later."""
        _ = (self.version, self.cluster_id, self.node_id, self.directory_id)

    def _error(self, key: str, reason: str) -> CheckpointError:
        return CheckpointError(reason, path=self.path, position=self.positions.get(key))

    def _int(self, key: str) -> int:
        value = self.properties.get(key)
        if value is None:
            # nothing to point at but the version line that makes the key required
            raise self._error("version", f"{key} was not found")
        # Integer.parseInt without trim, as Kafka's loadRequiredIntProp
        number = _java_int(value, _INT32_MIN, _INT32_MAX)
        if number is None:
            raise self._error(key, f"unable to read {key}={value!r} as a base-10 int")
        return number

    @property
    def version(self) -> int:
        """0 (ZooKeeper era; the default when absent), 1 (KRaft), or 2 (newer Kafka trunk)."""
        raw = self.properties.get("version", "0")
        number = _java_int(raw.strip(_JAVA_TRIM), _INT32_MIN, _INT32_MAX)
        if number is None:
            raise self._error("version", f"invalid meta.properties version {raw!r}")
        if number not in self.KNOWN_VERSIONS:
            raise self._error("version", f"unknown meta.properties version {number}")
        return number

    @property
    def cluster_id(self) -> str | None:
        """Required by version 1; optional otherwise."""
        value = self.properties.get("cluster.id")
        if value is None and self.version == 1:
            raise self._error("version", "cluster.id was not found")
        return value

    @property
    def node_id(self) -> int | None:
        """``broker.id`` in version 0 (may be absent), ``node.id`` (required) from version 1."""
        if self.version == 0:
            return self._int("broker.id") if "broker.id" in self.properties else None
        return self._int("node.id")

    @property
    def broker_id(self) -> int | None:
        """Alias of :attr:`node_id`: Kafka maps ``broker.id`` (v0) and ``node.id`` to one id."""
        return self.node_id

    @property
    def directory_id(self) -> str | None:
        """The directory's Kafka Uuid (canonical text), if recorded."""
        value = self.properties.get("directory.id")
        if value is None:
            return None
        try:
            return encode_uuid(decode_uuid(value))
        except ValueError as exc:
            raise self._error("directory.id", f"unable to read directory.id: {exc}") from None

    # -- writing (Kafka's PropertiesUtils.writePropertiesFile: Properties.store, tmp + rename)

    @staticmethod
    def encode(properties: Mapping[str, str], *, now: float | None = None) -> bytes:
        """``Properties.store(out, "")``'s bytes: a ``#`` line (the empty comment), a
        ``#<Date.toString()>`` line, then ``key=value`` lines, every line ended by ``\\n``.

        Keys are written sorted, as ``Properties.store`` does since Java 18 (a broker on Java
        17 writes them in hash order; readers do not care). The date is written in UTC.
        Escaping is ``store``'s: ``\\ = : # !`` and controls escaped, blanks escaped in keys
        (in values only a leading one), characters outside printable ASCII as ``\\uXXXX``
        (``store(OutputStream)`` writes ISO-8859-1), so :meth:`parse` reads back exactly the
        same strings.
        """
        stamp = time.strftime(
            "%a %b %d %H:%M:%S UTC %Y", time.gmtime(time.time() if now is None else now)
        )
        lines = ["#", f"#{stamp}"]
        for key in sorted(properties):
            lines.append(f"{_store_escape(key, True)}={_store_escape(properties[key], False)}")
        return ("\n".join(lines) + "\n").encode("latin-1")

    @staticmethod
    def write(path: StrPath, properties: Mapping[str, str], *, now: float | None = None) -> None:
        """Atomically replace ``path`` (``meta.properties.tmp``, fsync, rename, directory
        fsync), as Kafka writes it."""
        _atomic_write(path, MetaProperties.encode(properties, now=now))


_STORE_SPECIAL = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}


def _store_escape(text: str, is_key: bool) -> str:
    """Java's ``Properties.saveConvert`` with ``escUnicode`` (``store(OutputStream)``)."""
    out: list[str] = []
    for i, c in enumerate(_utf16_units(text)):
        if c in _STORE_SPECIAL:
            out.append(_STORE_SPECIAL[c])
        elif c == " ":
            out.append("\\ " if i == 0 or is_key else " ")
        elif c in "=:#!":
            out.append("\\" + c)
        elif not " " <= c <= "~":
            out.append(f"\\u{ord(c):04X}")
        else:
            out.append(c)
    return "".join(out)


def _utf16_units(text: str) -> list[str]:
    """``text`` as Java sees a String: UTF-16 code units (a character past U+FFFF is a
    surrogate pair, each half escaped on its own)."""
    raw = text.encode("utf-16-le", "surrogatepass")
    return [chr(int.from_bytes(raw[i : i + 2], "little")) for i in range(0, len(raw), 2)]
