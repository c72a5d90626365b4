"""``kafkalog rebuild-index``: rebuild a partition's ``.index``, ``.timeindex`` and ``.txnindex``
from its ``.log`` files, with the entries Kafka's recovery writes. It never changes a ``.log``.

The logs are read first, read-only: when one is damaged before its end (a batch that fails its
CRC or cannot be parsed, a batch cut off in a segment that is not the last, offsets that do not
fit the index), nothing is written and the command exits 1 naming the file, the byte and what
is wrong. Kafka's recovery would cut that segment there and delete every segment after it;
moving damaged data aside is ``kafkalog repair DIR``'s job, not this command's.

A batch cut off at the end of the last segment (a crash during an append) is refused the same
way, unless ``--force``: then the indexes cover the whole batches before it and the cut-off
bytes stay in the ``.log`` as they are, with a warning. They are not a readable record, but
only a writer's recovery removes them (kafkalog's writable open, a broker's after an unclean
shutdown); a broker that appends after them without recovering makes the next batch unreadable.

Index files are only written when their bytes change, each through a temporary file and a
rename, under the partition's writer lock (a broker's directory is refused). ``--dry-run``
writes nothing at all and shows what would change.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
from dataclasses import dataclass, field, replace
from typing import IO, TYPE_CHECKING, Any

from kafkalog import files
from kafkalog.cli import progress
from kafkalog.errors import KafkalogError

if TYPE_CHECKING:
    from kafkalog.log.producer_state import ProducerStateManager
    from kafkalog.records.reader import LogEntry

_log = logging.getLogger("kafkalog.rebuild")

_REPAIR = (
    "rebuild-index never changes a .log: `kafkalog repair {dir}` is what moves "
    "damaged data aside; `kafkalog verify {dir}` lists every problem"
)


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "rebuild-index",
        help="rebuild .index/.timeindex/.txnindex from the .log files (never changes a .log)",
        description=__doc__,
        epilog="exit status: 0 rebuilt (or nothing to change), 1 a partition was refused "
        "because its .log is damaged (nothing of it changed), 2 an error (a broker or another "
        "writer holds the partition, a file cannot be read)\n\n"
        "examples:\n  kafkalog rebuild-index --dry-run data/orders-3\n"
        "  kafkalog rebuild-index --index-interval-bytes 4096 data/orders-3\n"
        "  kafkalog rebuild-index --force data/orders-3",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("paths", nargs="+", help="partition directories (or data directories)")
    p.add_argument("--dry-run", action="store_true", help="show what would change, change nothing")
    p.add_argument(
        "--force",
        action="store_true",
        help="when the last segment ends in a cut-off batch (a crash during an append), index "
        "the whole batches before it and leave the cut-off bytes in the .log (a warning names "
        "them); without it the partition is refused. Damage anywhere else is always refused.",
    )
    p.add_argument(
        "--index-interval-bytes",
        type=int,
        default=4096,
        help="the topic's index.interval.bytes (Kafka's default 4096)",
    )
    p.set_defaults(run=run)


class Refused(KafkalogError):
    """A partition whose ``.log`` files are damaged: its indexes are not rebuilt."""

    def __init__(self, path: str, position: int | None, what: str, *, torn: bool = False):
        self.path = path
        self.position = position
        self.what = what
        self.torn = torn
        where = path if position is None else f"{path} at byte {position}"
        super().__init__(f"{where}: {what}")


@dataclass
class _Segment:
    """One segment's rebuilt index files (name -> bytes; None: no file) and its .log's
    identity when it was read (the scan is redone under the lock if it changed since)."""

    log_path: str
    stamp: tuple[int, int, int]
    rebuilt: dict[str, bytes | None] = field(default_factory=dict)


def _stamp(path: str) -> tuple[int, int, int]:
    st = os.stat(path)
    return st.st_ino, st.st_size, st.st_mtime_ns


def _name(entry: LogEntry) -> str:
    from kafkalog.records import RecordBatch

    if isinstance(entry, RecordBatch):
        return f"batch {entry.base_offset}..{entry.last_offset}"
    return f"entry ending at offset {entry.last_offset}"


def _initial_state(directory: str, first_base: int) -> ProducerStateManager:
    """The producer state at the first segment's base: the newest readable snapshot at or
    below it (retention may have taken the segments before), else empty. The ``.txnindex``
    entries need it: an aborted transaction's first offset and LSO come from the open
    transactions of every producer, from before the segment too."""
    from kafkalog.log.layout import SNAPSHOT_SUFFIX, segment_file
    from kafkalog.log.producer_state import ProducerStateManager

    state = ProducerStateManager(directory, writable=False)
    for offset in reversed([o for o in state.snapshot_offsets() if o <= first_base]):
        try:
            state.load_snapshot(segment_file(directory, offset, SNAPSHOT_SUFFIX))
            return state
        except (KafkalogError, OSError):
            state.clear()
    return state


def scan(directory: str, interval: int, force: bool, work: str) -> list[_Segment]:
    """Rebuild every segment's index files into ``work`` from the ``.log`` files, as Kafka's
    ``LogSegment.recover`` writes them, without changing anything in ``directory``; raise
    :class:`Refused` at the first damage (a cut-off last batch too, unless ``force``)."""
    from kafkalog.index import DEFAULT_MAX_INDEX_SIZE, OffsetIndex, TimeIndex, TransactionIndex
    from kafkalog.index.time_index import TimestampOffset
    from kafkalog.log.layout import segment_logs
    from kafkalog.records import DEFAULT_LIMITS, LogReader, RecordBatch
    from kafkalog.records.reader import read_only_buffer

    # Kafka's recovery bounds a batch by nothing but the file: neither may a rebuild refuse one
    limits = replace(DEFAULT_LIMITS, max_batch_bytes=2**31)
    logs = segment_logs(directory)
    state = _initial_state(directory, logs[0][0]) if logs else None
    out = []
    for i, (base, log_path) in enumerate(logs):
        last_segment = i == len(logs) - 1
        stamp = _stamp(log_path)
        data = read_only_buffer(log_path)
        stem = os.path.basename(log_path)[: -len(".log")]
        room = max(DEFAULT_MAX_INDEX_SIZE, (len(data) // max(interval, 1) + 2) * 12)
        offset_index = OffsetIndex(os.path.join(work, stem + ".index"), base, room)
        time_index = TimeIndex(os.path.join(work, stem + ".timeindex"), base, room)
        txn_index = TransactionIndex(os.path.join(work, stem + ".txnindex"), base)
        try:
            valid = 0
            last_index_entry = 0
            max_ts = TimestampOffset(-1, -1)
            reader = LogReader(data, path=log_path, limits=limits)
            try:
                for batch in reader:
                    valid = batch.position
                    if not batch.is_valid():
                        raise Refused(
                            log_path,
                            batch.position,
                            f"{_name(batch)} fails its CRC (stored {batch.crc}, computed "
                            f"{batch.compute_crc()})",
                        )
                    if not offset_index.can_append_offset(batch.last_offset):
                        raise Refused(
                            log_path,
                            batch.position,
                            f"{_name(batch)} does not fit the segment's index (offsets "
                            f"{base}..{base + 2**31 - 1}, from the file name)",
                        )
                    if batch.max_timestamp > max_ts.timestamp:
                        max_ts = TimestampOffset(batch.max_timestamp, batch.last_offset)
                    if valid - last_index_entry > interval:
                        offset_index.append(batch.last_offset, valid)
                        time_index.maybe_append(max_ts.timestamp, max_ts.offset)
                        last_index_entry = valid
                    if isinstance(batch, RecordBatch) and state is not None:
                        aborted = state.update(batch, limits)
                        if aborted is not None:
                            txn_index.append(aborted)
            except Refused:
                raise
            except KafkalogError as e:  # unparseable, or offsets the index cannot take
                at = reader.end_position
                reason = getattr(e, "reason", None) or str(e)
                position = getattr(e, "position", None)
                detail = "" if position in (None, at) else f" (at byte {position})"
                raise Refused(log_path, at, f"{reason}{detail}") from e
            tail = reader.incomplete_tail
            if tail is not None:
                cut = (
                    f"the last batch is cut off ({tail.available} of "
                    f"{tail.declared_size or '?'} bytes present"
                )
                if not last_segment:
                    raise Refused(
                        log_path, tail.position, f"{cut}) in a segment that is not the last"
                    )
                if not force:
                    raise Refused(
                        log_path,
                        tail.position,
                        f"{cut}: a crash during an append); --force indexes the batches before "
                        "it and leaves these bytes as they are",
                        torn=True,
                    )
                _log.warning(
                    "%s at byte %d: %s); indexed the batches before it and left these %d "
                    "bytes in the .log: only a writer's recovery removes them (kafkalog's "
                    "writable open, a broker's after an unclean shutdown)",
                    log_path,
                    tail.position,
                    cut,
                    tail.available,
                )
            time_index.maybe_append(max_ts.timestamp, max_ts.offset, skip_full_check=True)
            offset_index.trim_to_valid_size()
            time_index.trim_to_valid_size()
        finally:
            offset_index.close()
            time_index.close()
            txn_index.close()
            del data
        segment = _Segment(log_path, stamp)
        for suffix in (".index", ".timeindex", ".txnindex"):
            built = os.path.join(work, stem + suffix)
            content = files.read_bytes(built) if os.path.exists(built) else None
            if content is None and suffix == ".txnindex" and _exists(directory, stem + suffix):
                content = b""  # Kafka's recovery resets it: an empty file, not none
            segment.rebuilt[stem + suffix] = content
            if os.path.exists(built):
                os.unlink(built)
        out.append(segment)
    return out


def _exists(directory: str, name: str) -> bool:
    return os.path.lexists(os.path.join(directory, name))


def _current(directory: str, name: str) -> bytes | None:
    path = os.path.join(directory, name)
    if not os.path.lexists(path):
        return None
    with open(path, "rb") as f:
        return f.read()


def _changes(directory: str, segments: list[_Segment]) -> list[tuple[str, bytes | None, bytes]]:
    """(name, current bytes, new bytes) of every index file that would change."""
    out = []
    for segment in segments:
        for name, new in segment.rebuilt.items():
            if new is None:
                continue  # no aborted transaction and no file: Kafka creates none either
            old = _current(directory, name)
            if old != new:
                out.append((name, old, new))
    return out


def _refuse_if_held(directory: str) -> None:
    """Refuse, before reading anything, a partition a broker or another writer holds."""
    from kafkalog.log.lock import DirectoryLock, LockedError, broker_holds

    if broker_holds(os.path.dirname(os.path.abspath(directory))):
        raise LockedError(
            directory, "refusing: a Kafka broker holds its data directory", broker=True
        )
    if DirectoryLock.is_held(directory):
        raise LockedError(directory, "refusing: another writer holds it")


def rebuild(directory: str, interval: int, dry_run: bool, out: IO[str], force: bool = False) -> int:
    """Rebuild one partition's indexes; the number of files changed (or that would change).

    Raises :class:`Refused` (nothing changed) when a ``.log`` is damaged."""
    from kafkalog.log.lock import DirectoryLock

    _refuse_if_held(directory)
    with tempfile.TemporaryDirectory(prefix="kafkalog-rebuild-") as work:
        segments = scan(directory, interval, force, work)
        changes = _changes(directory, segments)
        verb = "would " if dry_run else ""
        if dry_run or not changes:
            _print(directory, changes, verb, out)
            return len(changes)
        # Only now, with something to write, is the partition locked (a refused or unchanged
        # partition is left without even a lock file). A writer that appended between the
        # scan and the lock changed a .log: the scan is redone under the lock.
        with DirectoryLock(directory):
            if any(_stamp(s.log_path) != s.stamp for s in segments):
                segments = scan(directory, interval, force, work)
                changes = _changes(directory, segments)
            for name, old, new in changes:
                _replace(directory, name, new)
                _log.info(
                    "%s: rewrote %s (%s -> %d bytes)",
                    directory,
                    name,
                    "missing" if old is None else len(old),
                    len(new),
                )
            _fsync_dir(directory)
        _print(directory, changes, verb, out)
        return len(changes)


def _print(
    directory: str, changes: list[tuple[str, bytes | None, bytes]], verb: str, out: IO[str]
) -> None:
    for name, old, new in changes:
        if old is None:
            print(f"{verb}create {name} ({len(new)} bytes)", file=out)
        else:
            print(f"{verb}rewrite {name} ({len(old)} -> {len(new)} bytes)", file=out)
    done = "would change" if verb else "changed"
    print(f"{directory}: {len(changes)} file(s) {done}", file=out)


def _replace(directory: str, name: str, content: bytes) -> None:
    """Write ``name`` whole or not at all: a temporary file, fsynced, renamed over it."""
    path = os.path.join(directory, name)
    temporary = path + ".rebuild.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(content)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _OneLine(logging.Formatter):
    """``kafkalog: error: ...``, as every kafkalog error reads on stderr."""

    def format(self, record: logging.LogRecord) -> str:
        return f"kafkalog: {record.levelname.lower()}: {record.getMessage()}"


def run(args: argparse.Namespace, out: IO[str] | None = None) -> int:
    from kafkalog.cli.verify import partitions_under

    out = out or sys.stdout
    if not logging.getLogger().handlers and not _log.handlers:
        # refusals and warnings reach stderr as one line each, like every kafkalog error
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(_OneLine())
        _log.addHandler(handler)
        _log.setLevel(logging.WARNING)
    partitions = [d for path in args.paths for d in partitions_under(path)]
    refused = 0
    with progress.bar("rebuilding", sum(progress.log_bytes(d) for d in partitions)) as shown:
        for directory in partitions:
            try:
                rebuild(directory, args.index_interval_bytes, args.dry_run, out, args.force)
            except Refused as e:
                refused += 1
                _log.error(
                    "refusing to rebuild the indexes of %s: %s. %s",
                    directory,
                    e,
                    _REPAIR.format(dir=directory),
                )
                print(f"{directory}: refused, nothing changed", file=out)
            shown.update(progress.log_bytes(directory))
    return 1 if refused else 0
