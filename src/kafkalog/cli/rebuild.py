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
from typing import IO, Any

from kafkalog import files
from kafkalog.cli import progress
from kafkalog.log.index_rebuild import (
    RebuiltSegment,
    Refused,
    file_stamp,
    rebuilt_indexes,
)

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


def _current(directory: str, name: str) -> bytes | None:
    path = os.path.join(directory, name)
    if not os.path.lexists(path):
        return None
    with open(path, "rb") as f:
        return f.read()


def _changes(
    directory: str, segments: list[RebuiltSegment], kept: list[str] | None = None
) -> list[tuple[str, bytes | None, bytes]]:
    """(name, current bytes, new bytes) of every index file that would change. An offset or
    time index that differs from the rebuilt one but is healthy (``kafkalog verify`` finds
    nothing wrong in it: its writer indexed at another ``index.interval.bytes``, or per
    append of several batches) is left alone and named in ``kept``."""
    out = []
    last = segments[-1].log_path if segments else None
    for segment in segments:
        for name, new in segment.rebuilt.items():
            if new is None:
                continue  # no aborted transaction and no file: Kafka creates none either
            old = _current(directory, name)
            if old == new:
                continue
            if old is not None and _healthy(directory, name, segment.log_path == last):
                if kept is not None:
                    kept.append(name)
                continue
            out.append((name, old, new))
    return out


def _healthy(directory: str, name: str, active: bool) -> bool:
    """Whether the offset or time index ``name`` passes every check ``kafkalog verify`` makes
    of it against its ``.log``."""
    from kafkalog.cli.verify import (
        Report,
        _verify_offset_index,
        _verify_segment,
        _verify_time_index,
    )
    from kafkalog.log.layout import offset_from_filename

    stem, _, suffix = name.partition(".")
    checks = {"index": _verify_offset_index, "timeindex": _verify_time_index}
    if suffix not in checks:
        return False
    base = offset_from_filename(stem + ".log")
    log_path = os.path.join(directory, stem + ".log")
    scan = _verify_segment(base, log_path, active, -1, Report())
    report = Report()
    checks[suffix](os.path.join(directory, name), base, scan, report, active)
    return not report.problems


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
        segments = rebuilt_indexes(directory, interval, force, work)
        kept: list[str] = []
        changes = _changes(directory, segments, kept)
        verb = "would " if dry_run else ""
        for name in kept:
            print(
                f"keep {name}: healthy, though its entries differ from a rebuild at "
                f"--index-interval-bytes {interval} (its writer indexed at another "
                "index.interval.bytes, or once per append of several batches); "
                "kafkalog verify finds nothing wrong in it",
                file=out,
            )
        if dry_run or not changes:
            _print(directory, changes, verb, out)
            return len(changes)
        # Only now, with something to write, is the partition locked (a refused or unchanged
        # partition is left without even a lock file). A writer that appended between the
        # scan and the lock changed a .log: the scan is redone under the lock.
        with DirectoryLock(directory):
            if any(file_stamp(s.log_path) != s.stamp for s in segments):
                segments = rebuilt_indexes(directory, interval, force, work)
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
            files.fsync_dir(directory)
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
