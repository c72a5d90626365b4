"""Names of things in a Kafka data directory (spec §1.2-§1.3): segment files, partition dirs."""

from __future__ import annotations

import os
import re

from kafkalog import files

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)

_SPECIAL_DIR = re.compile(r"^(\S+)-(\S+)\.(\S+)-(delete|future|stray)$")


def filename_prefix(offset: int) -> str:
    """The 20-digit, zero-padded decimal prefix of every file of the segment at ``offset``."""
    return f"{offset:020d}"


def segment_file(directory: str | os.PathLike[str], offset: int, suffix: str) -> str:
    return os.path.join(os.fspath(directory), filename_prefix(offset) + suffix)


def offset_from_filename(name: str) -> int:
    """The offset a segment file name starts with (the part before the first dot)."""
    return int(os.path.basename(name).split(".", 1)[0])


def is_offset_prefix(stem: str) -> bool:
    """Whether a file name's part before the first dot is a segment offset: ASCII digits only
    (``str.isdigit`` also takes ``"²"`` and other digits ``int`` refuses)."""
    return stem.isascii() and stem.isdigit()


def is_segment_log(name: str) -> bool:
    base = os.path.basename(name)
    prefix, _, rest = base.partition(".")
    return rest == "log" and is_offset_prefix(prefix)


def segment_logs(directory: str | os.PathLike[str]) -> list[tuple[int, str]]:
    """(base offset, path) of every segment ``.log`` in a partition directory, oldest first."""
    return sorted(
        (offset_from_filename(n), os.path.join(directory, n))
        for n in files.listdir(os.fspath(directory))
        if is_segment_log(n)
    )


def parse_partition_dir(name: str) -> tuple[str, int]:
    """``topic-partition`` (also the ``.<uuid>-delete/-future/-stray`` forms) to (topic, partition).

    Raises ValueError for names that are not partition directories, as Kafka's parser does.
    """
    base = os.path.basename(os.path.normpath(name))
    if not base or "-" not in base:
        raise ValueError(f"{name!r} is not a partition directory name (topic-partition)")
    m = _SPECIAL_DIR.match(base)
    if m:
        base = base[: base.rindex(".")]
    elif base.endswith(("-delete", "-future", "-stray")):
        raise ValueError(f"{name!r} is not a valid partition directory name")
    topic, _, part = base.rpartition("-")
    if not topic or not part.lstrip("-").isdigit():
        raise ValueError(f"{name!r} is not a partition directory name (topic-partition)")
    return topic, int(part)


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"
