"""Producer-state snapshots, ``<offset>.snapshot`` (spec §1.5): what a broker knew about each
producer at that offset, including the first offset of its open transaction.

The file format only; :mod:`kafkalog.log.producer_state` keeps the state and decides when a
snapshot is written, loaded or deleted. Kafka stores one entry per producer with the metadata
of its last batch only (the last five are rebuilt by replaying the log after the snapshot).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from kafkalog import files
from kafkalog.errors import CorruptRecordError, DamagedLogError
from kafkalog.log.layout import SNAPSHOT_SUFFIX, is_offset_prefix, segment_file
from kafkalog.records.crc import crc32c

_HEAD = struct.Struct(">hIi")
_ENTRY = struct.Struct(">qhiqiqiq")
VERSION = 1


@dataclass(frozen=True)
class ProducerEntry:
    """One producer as a snapshot stores it (Kafka's ProducerSnapshot.json, version 1)."""

    producer_id: int
    epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int  # -1: no open transaction


def read_snapshot(path: str | os.PathLike[str]) -> list[ProducerEntry]:
    """Entries of a snapshot file, CRC-checked; a bad file raises CorruptRecordError."""
    name = os.fspath(path)
    data = files.read_bytes(name)
    if len(data) < _HEAD.size:
        raise CorruptRecordError("producer snapshot shorter than its header", path=name, position=0)
    version, crc, count = _HEAD.unpack_from(data, 0)
    if version != VERSION:
        raise CorruptRecordError(
            f"unknown producer snapshot version {version}", path=name, position=0
        )
    if crc32c(memoryview(data)[6:]) != crc:
        raise CorruptRecordError("producer snapshot CRC mismatch", path=name, position=2)
    if count < 0 or len(data) != _HEAD.size + count * _ENTRY.size:
        raise CorruptRecordError(
            f"producer snapshot declares {count} entries but holds {len(data) - _HEAD.size} bytes",
            path=name,
            position=6,
        )
    return [
        ProducerEntry(*_ENTRY.unpack_from(data, _HEAD.size + i * _ENTRY.size)) for i in range(count)
    ]


def encode_snapshot(entries: Iterable[ProducerEntry]) -> bytes:
    """The bytes of a snapshot holding ``entries`` (in the order given)."""
    rows = list(entries)
    body = bytearray(_ENTRY.size * len(rows) + 4)
    struct.pack_into(">i", body, 0, len(rows))
    for i, e in enumerate(rows):
        _ENTRY.pack_into(
            body,
            4 + i * _ENTRY.size,
            e.producer_id,
            e.epoch,
            e.last_sequence,
            e.last_offset,
            e.offset_delta,
            e.timestamp,
            e.coordinator_epoch,
            e.current_txn_first_offset,
        )
    return struct.pack(">hI", VERSION, crc32c(body)) + bytes(body)


def write_snapshot(
    directory: str, offset: int, entries: Iterable[ProducerEntry], *, sync: bool = False
) -> str:
    """Write ``<offset>.snapshot`` in ``directory`` through a temporary file and a rename, so
    a crash leaves the old file or the new one, never a torn one; fsync'd with ``sync``."""
    path = segment_file(directory, offset, SNAPSHOT_SUFFIX)
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, encode_snapshot(entries))
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return path


def delete_snapshot(directory: str, offset: int) -> None:
    """Remove ``<offset>.snapshot`` if it is there."""
    path = segment_file(directory, offset, SNAPSHOT_SUFFIX)
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
    except (IsADirectoryError, PermissionError) as e:  # (a directory by its name)
        raise DamagedLogError(
            f"cannot remove it ({e.strerror}), as a writable open removes a snapshot it cannot "
            "use: move it out of the partition directory",
            path=path,
            position=0,
        ) from e


def snapshot_offsets(directory: str | os.PathLike[str]) -> list[int]:
    """Offsets of the snapshot files in a partition directory, ascending."""
    out = []
    for name in files.listdir(os.fspath(directory)):
        stem, _, suffix = name.partition(".")
        if suffix == "snapshot" and is_offset_prefix(stem):
            out.append(int(stem))
    return sorted(out)
