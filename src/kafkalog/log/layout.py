"""Names of things in a Kafka data directory (spec §1.2-§1.3): segment files, partition dirs."""

from __future__ import annotations

import difflib
import os
import re

from kafkalog import files
from kafkalog.errors import InvalidTopicError, KafkalogError

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
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")
MAX_TOPIC_LENGTH = 249  # Kafka's Topic.MAX_NAME_LENGTH


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
    """A segment's ``.log`` as Kafka names it: a 20-digit base offset. A stray ``123.log`` is
    no segment (its index files would be looked for as ``00000000000000000123.*``); the log
    leaves it alone and ``kafkalog verify`` reports it."""
    base = os.path.basename(name)
    prefix, _, rest = base.partition(".")
    return rest == "log" and len(prefix) == 20 and is_offset_prefix(prefix)


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


def validate_topic(topic: str) -> None:
    """Refuse a name Kafka's ``Topic.validate`` refuses, before it becomes a directory: the
    same rules keep a name like ``../x`` or ``a/b`` from writing outside the data directory."""
    if not isinstance(topic, str) or not topic:
        raise InvalidTopicError(f"topic name {topic!r} is illegal: it can't be empty")
    if topic in (".", ".."):
        raise InvalidTopicError(f"topic name {topic!r} is illegal: '.' and '..' are not allowed")
    if len(topic) > MAX_TOPIC_LENGTH:
        raise InvalidTopicError(
            f"topic name {topic[:40]!r}... is illegal: {len(topic)} characters, "
            f"at most {MAX_TOPIC_LENGTH}"
        )
    if not _LEGAL_TOPIC.fullmatch(topic):
        raise InvalidTopicError(
            f"topic name {topic!r} is illegal: only ASCII letters, digits, '.', '_' and '-' "
            "are allowed"
        )


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def new_partition_dir_name(topic: str, partition: int) -> str:
    """The directory name of a partition about to be created, once Kafka would accept it."""
    validate_topic(topic)
    if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
        raise InvalidTopicError(f"partition {partition!r} of topic {topic!r} is not >= 0")
    return partition_dir_name(topic, partition)


#: directories of a data directory that are never partitions
_SKIPPED_DIRS = {"remote-log-index-cache"}


def partitions_in(path: str) -> list[tuple[str, int]]:
    """(topic, partition) of every partition directory of the data directory ``path``."""
    out = []
    for name, is_dir in sorted(files.scandir(path)):
        if name in _SKIPPED_DIRS or not is_dir:
            continue
        if name.endswith(("-delete", "-future", "-stray")):
            continue
        try:
            out.append(parse_partition_dir(name))
        except ValueError:
            continue
    return out


def missing_path_hint(path: str | os.PathLike[str]) -> str:
    """What a path that is not there was probably meant to be, as ``"; ..."`` or nothing: a
    topic's name where its partition directories (``topic-N``) are, or a name spelt like one
    beside it. Why: the commonest first mistake is ``verify data/orders`` for
    ``data/orders-0``, and "no directory" alone does not say what to type instead. Lists the
    parent directory only (local paths; nothing is opened or changed)."""
    path = os.fspath(path)
    if files.is_remote(path):
        return ""
    parent, base = os.path.split(os.path.normpath(os.path.abspath(path)))
    try:
        names = sorted(os.listdir(parent))
        mine = sorted(p for topic, p in partitions_in(parent) if topic == base)
    except OSError:
        return ""
    shown = os.path.dirname(os.path.normpath(os.fspath(path))) or "."
    if mine:
        listed = ", ".join(os.path.join(shown, partition_dir_name(base, p)) for p in mine[:3])
        more = f" and {len(mine) - 3} more" if len(mine) > 3 else ""
        return (
            f"; {base} is a topic: its partitions are the directories {listed}{more}, "
            f"in the data directory {shown}"
        )
    close = difflib.get_close_matches(base, names, n=1, cutoff=0.8)
    return f"; did you mean {os.path.join(shown, close[0])}?" if close else ""


def partition_directories(path: str | os.PathLike[str]) -> dict[tuple[str, int], str]:
    """Every partition a tool was pointed at: ``path`` itself when it is a partition directory
    holding segments, else the partition directories of the data directory ``path`` (a local
    path or a URI ``kafkalog.files`` resolves). Lists names only; nothing is opened (here, not
    in ``logdir``, so that a caller checking a path, as Spark's ``load()`` does, imports no
    more than names: see ``kafkalog.log.__init__``)."""
    path = os.fspath(path)
    if not files.is_remote(path):
        path = os.path.abspath(path)
    if not files.isdir(path):
        raise FileNotFoundError(f"no directory {path}{missing_path_hint(path)}")
    try:
        here = parse_partition_dir(os.path.basename(path))
        if any(is_segment_log(n) for n in files.listdir(path)):
            return {here: path}
    except ValueError:
        pass
    found = {tp: os.path.join(path, partition_dir_name(*tp)) for tp in partitions_in(path)}
    refuse_wrong_level(path, found)
    return found


class WrongLevelError(KafkalogError, ValueError):
    """A path one level above a data directory whose name reads as a partition's."""


#: files only a data directory holds (Kafka's, and kafkalog's own writers')
DATA_DIR_FILES = frozenset(
    {
        "meta.properties",
        "recovery-point-offset-checkpoint",
        "log-start-offset-checkpoint",
        "replication-offset-checkpoint",
        "cleaner-offset-checkpoint",
        ".kafka_cleanshutdown",
    }
)

#: at most this many of a data directory's partitions are looked into for the check below
_WRONG_LEVEL_LOOKS = 8


def refuse_wrong_level(path: str, found: dict[tuple[str, int], str]) -> None:
    """Refuse ``path`` when it is the parent of a data directory named like a partition.

    Why: Strimzi keeps each disk's data directory at ``/var/lib/kafka/data-0/kafka-log0`` and
    many hosts at ``/data/kafka-logs-1``; pointed at their parent, the data directory's own
    name (``data-0``) reads as topic ``data``, partition 0, which holds no segments, and every
    reader answered 0 records with no error. A directory named like a partition that holds no
    segment files but holds a data directory or a partition directory is that mistake. Only
    a ``path`` without any data-directory file is looked into, and only its first few
    partitions, so a real data directory of thousands of partitions costs no listing more."""
    if not found or files.is_remote(path):
        return
    try:
        if any(n in DATA_DIR_FILES for n in files.listdir(path)):
            return
    except OSError:
        return
    for tp, directory in sorted(found.items())[:_WRONG_LEVEL_LOOKS]:
        try:
            names = files.listdir(directory)
            if any(is_segment_log(n) for n in names):
                return  # a real partition: the data directory is at the right level
            for name in sorted(names):
                inner = os.path.join(directory, name)
                if not os.path.isdir(inner):
                    continue
                try:
                    parse_partition_dir(name)
                    # a partition inside: ``directory`` itself is the data directory
                    data_dir = (
                        directory if any(is_segment_log(n) for n in os.listdir(inner)) else ""
                    )
                except ValueError:
                    data_dir = inner if partitions_in(inner) else ""
                if data_dir:
                    raise WrongLevelError(
                        f"{directory} is named like a partition (topic {tp[0]}, partition "
                        f"{tp[1]}) but holds no segment files; it holds {inner}, so {path} is "
                        f"above a data directory: point at {data_dir}"
                    )
        except OSError:
            continue
