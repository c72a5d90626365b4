"""``kafkalog rebuild-index``: rebuild a partition's indexes from its log, as Kafka's recovery
does (and cut a corrupt tail). ``--dry-run`` works on a copy and shows what would change."""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
from typing import IO, Any

from kafkalog.cli import progress


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "rebuild-index",
        help="rebuild .index/.timeindex/.txnindex from the log (Kafka's recovery)",
        description=__doc__,
        epilog="examples:\n  kafkalog rebuild-index --dry-run data/orders-3\n"
        "  kafkalog rebuild-index --index-interval-bytes 4096 data/orders-3",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("paths", nargs="+", help="partition directories (or data directories)")
    p.add_argument("--dry-run", action="store_true", help="show what would change, change nothing")
    p.add_argument(
        "--index-interval-bytes",
        type=int,
        default=4096,
        help="the topic's index.interval.bytes (Kafka's default 4096)",
    )
    p.set_defaults(run=run)


_WATCHED = (".log", ".index", ".timeindex", ".txnindex")


def _state(directory: str) -> dict[str, int]:
    return {
        n: os.path.getsize(os.path.join(directory, n))
        for n in os.listdir(directory)
        if n.endswith(_WATCHED)
    }


def rebuild(directory: str, interval: int, dry_run: bool, out: IO[str]) -> int:
    from kafkalog.log import TopicConfig
    from kafkalog.log.lock import DirectoryLock, broker_holds

    if broker_holds(os.path.dirname(os.path.abspath(directory))):
        raise PermissionError(f"refusing {directory}: a Kafka broker holds its data directory")
    if DirectoryLock.is_held(directory):
        raise PermissionError(f"refusing {directory}: another writer holds it")
    config = TopicConfig(index_interval_bytes=interval)
    if not dry_run:
        return _rebuild(directory, directory, config, dry_run, out)
    # the copy goes away however the rebuild ends: a corrupt log must not leave one per try
    with tempfile.TemporaryDirectory(prefix="kafkalog-rebuild-") as work:
        target = os.path.join(work, os.path.basename(os.path.normpath(directory)))
        shutil.copytree(directory, target, ignore=shutil.ignore_patterns(".kafkalog.lock"))
        return _rebuild(directory, target, config, dry_run, out)


def _rebuild(directory: str, target: str, config: Any, dry_run: bool, out: IO[str]) -> int:
    """Recover ``target`` (``directory`` itself, or its copy) and print what changed."""
    from kafkalog.log import Log

    before = {n: _fingerprint(os.path.join(target, n)) for n in _state(target)}
    log = Log(target, config, recovery_point=0, had_clean_shutdown=False)
    log.close()
    after = _state(target)
    changes = 0
    for name in sorted(set(before) | set(after)):
        old = before.get(name)
        path = os.path.join(target, name)
        new = _fingerprint(path) if os.path.exists(path) else None
        if old == new:
            continue
        changes += 1
        verb = "would " if dry_run else ""
        if old is None:
            print(f"{verb}create {name} ({new[0] if new else 0} bytes)", file=out)
        elif new is None:
            print(f"{verb}remove {name}", file=out)
        elif name.endswith(".log"):
            print(f"{verb}truncate {name} from {old[0]} to {new[0]} bytes", file=out)
        else:
            print(f"{verb}rewrite {name} ({old[0]} -> {new[0]} bytes)", file=out)
    print(f"{directory}: {changes} file(s) {'would change' if dry_run else 'changed'}", file=out)
    return changes


def _fingerprint(path: str) -> tuple[int, bytes]:
    """Size and digest, streamed: a partition's logs can be far larger than memory."""
    digest = hashlib.blake2b(digest_size=16)
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.digest()


def run(args: argparse.Namespace, out: IO[str] | None = None) -> int:
    from kafkalog.cli.verify import partitions_under

    out = out or sys.stdout
    partitions = [d for path in args.paths for d in partitions_under(path)]
    sizes = [progress.log_bytes(d) for d in partitions]  # before: a rebuild may cut a log
    with progress.bar("rebuilding", sum(sizes)) as shown:
        for directory, size in zip(partitions, sizes, strict=True):
            rebuild(directory, args.index_interval_bytes, args.dry_run, out)
            shown.update(size)
    return 0
