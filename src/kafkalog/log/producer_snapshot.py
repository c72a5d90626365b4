"""Producer-state snapshots, ``<offset>.snapshot`` (spec §1.5): what a broker knew about each
producer at that offset, including the first offset of its open transaction.

kafkalog reads them to find a partition's last stable offset without scanning the whole log.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

from kafkalog import files
from kafkalog.errors import CorruptRecordError
from kafkalog.log.layout import is_offset_prefix
from kafkalog.records.crc import crc32c

_HEAD = struct.Struct(">hIi")
_ENTRY = struct.Struct(">qhiqiqiq")
VERSION = 1


@dataclass(frozen=True)
class ProducerEntry:
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


def snapshot_offsets(directory: str | os.PathLike[str]) -> list[int]:
    """Offsets of the snapshot files in a partition directory, ascending."""
    out = []
    for name in files.listdir(os.fspath(directory)):
        stem, _, suffix = name.partition(".")
        if suffix == "snapshot" and is_offset_prefix(stem):
            out.append(int(stem))
    return sorted(out)
