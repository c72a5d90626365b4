"""The data directory's ``cleaner-offset-checkpoint`` (the log cleaner's first dirty offset per
compacted partition), read and changed under one lock.

Apart from the cleaner itself (``log/cleaner/``, which compiles its kernels with numba): a
server creates the file at its start and a deleted partition's entry goes with it, and
neither should load the cleaner's kernels for that.
"""

from __future__ import annotations

import os
import threading

from kafkalog.errors import KafkalogError
from kafkalog.log.checkpoints import CLEANER_OFFSET_CHECKPOINT, OffsetCheckpoint

_checkpoint_lock = threading.Lock()  # read-modify-write of one data directory's file


def checkpoint_path(partition_dir: str) -> str:
    return os.path.join(os.path.dirname(os.path.abspath(partition_dir)), CLEANER_OFFSET_CHECKPOINT)


def read_checkpoint(data_dir: str) -> dict[tuple[str, int], int]:
    """The data directory's ``cleaner-offset-checkpoint`` (empty when missing or unreadable,
    as Kafka's manager treats it)."""
    try:
        return dict(OffsetCheckpoint.read(os.path.join(data_dir, CLEANER_OFFSET_CHECKPOINT)))
    except FileNotFoundError:
        return {}
    except KafkalogError:
        return {}


def create_checkpoint(data_dir: str) -> None:
    """Create the data directory's ``cleaner-offset-checkpoint`` (no entries) if it is
    missing, as a broker whose cleaner is enabled has one from its first start on."""
    path = os.path.join(data_dir, CLEANER_OFFSET_CHECKPOINT)
    with _checkpoint_lock:
        if not os.path.exists(path):
            OffsetCheckpoint.write(path, {})


def _live(data_dir: str, current: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    """The entries whose partition is still in the data directory: Kafka's manager keeps only
    the entries of the logs it has each time it writes the file (``updateCheckpoints``), so
    an entry does not outlive its partition (a directory removed by hand, a partition moved
    to another data directory) and is never taken, for a partition created again under the
    name, as how far that one was cleaned (its records below would never be compacted)."""
    return {
        key: offset
        for key, offset in current.items()
        if os.path.isdir(os.path.join(data_dir, f"{key[0]}-{key[1]}"))
    }


def forget_partition(data_dir: str, key: tuple[str, int]) -> None:
    """Drop a deleted partition's entry (Kafka's cleaner manager does, so that a topic
    created again under the name is not taken as cleaned up to the old one's offset)."""
    path = os.path.join(data_dir, CLEANER_OFFSET_CHECKPOINT)
    with _checkpoint_lock:
        current = read_checkpoint(data_dir)
        if key in current:
            del current[key]
            OffsetCheckpoint.write(path, _live(data_dir, current))


def _write_checkpoint(partition_dir: str, key: tuple[str, int], offset: int) -> None:
    path = checkpoint_path(partition_dir)
    with _checkpoint_lock:
        data_dir = os.path.dirname(path)
        current = _live(data_dir, read_checkpoint(data_dir))
        current[key] = offset
        OffsetCheckpoint.write(path, current)


def maybe_truncate_checkpoint(partition_dir: str, key: tuple[str, int], offset: int) -> None:
    """A truncation to ``offset``: the partition's cleaner checkpoint comes down to it when it
    was above (Kafka's ``LogCleanerManager.maybeTruncateCheckpoint``, called by every
    truncation). Records written again below the old checkpoint are dirty: left above, the
    next cleaning would take them as cleaned and keep every copy of their keys. Nothing is
    written when the data directory has no checkpoint file or no entry above ``offset``."""
    path = checkpoint_path(partition_dir)
    if not os.path.exists(path):
        return
    with _checkpoint_lock:
        data_dir = os.path.dirname(path)
        current = read_checkpoint(data_dir)
        if current.get(key, -1) > offset:
            current = _live(data_dir, current)
            current[key] = offset
            OffsetCheckpoint.write(path, current)
