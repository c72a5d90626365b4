"""``kafkalog repair``: move a damaged log's bad bytes into a quarantine folder and keep every
batch that can still be read, never deleting anything (:mod:`kafkalog.log.repair`).

A log that a read or an open refuses as damaged (a flipped byte, a hole, garbage) is repaired
here: each damaged segment's original files are copied into the quarantine folder, with a
``REPAIR.json`` saying what was found; the segment keeps its valid batches before the damage and
those after it whose offsets continue the log; the indexes are rebuilt. ``--dry-run`` prints
the same plan and changes nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import IO, Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "repair",
        help="quarantine a damaged log's bad bytes and keep every readable batch (no deletes)",
        description=__doc__,
        epilog="examples:\n  kafkalog repair --dry-run data/orders-3\n"
        "  kafkalog repair --json data/orders-3",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("paths", nargs="+", help="partition directories (or data directories)")
    p.add_argument("--dry-run", action="store_true", help="say what would be done, change nothing")
    p.add_argument("--json", action="store_true", help="one JSON object per partition")
    p.add_argument(
        "--quarantine",
        metavar="DIR",
        help="where the damaged segments' original files go (default: "
        "<partition>.quarantine-<UTC time> beside the partition; move it out of a Kafka data "
        "directory before a broker starts there)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace, out: IO[str] | None = None) -> int:
    from kafkalog.cli.verify import partitions_under
    from kafkalog.log.repair import RepairReport, repair

    out = out or sys.stdout
    partitions = [d for path in args.paths for d in partitions_under(path)]
    for directory in partitions:
        report: RepairReport = repair(directory, dry_run=args.dry_run, quarantine=args.quarantine)
        if args.json:
            print(json.dumps(report.to_json()), file=out)
            continue
        _print(report, out)
    return 0


def _print(report: Any, out: IO[str]) -> None:
    if not report.damaged:
        print(f"{report.directory}: no damage found, nothing to do", file=out)
        return
    verb = "would move" if report.dry_run else "moved"
    for gone in report.lost:
        print(f"{report.directory}: {gone.what}", file=out)
        names = ", ".join(os.path.basename(p) for p in gone.leftovers)
        print(f"  {verb} the leftover index files to the quarantine: {names}", file=out)
    for swap in report.swaps:
        print(f"{swap['damage']}", file=out)
        print(f"  {verb} it to the quarantine (its segments stay as they are)", file=out)
    for seg in report.segments:
        print(f"{seg.segment}: damage at byte {seg.damage_position}: {seg.damage}", file=out)
        print(
            f"  kept {seg.kept_bytes} bytes before it"
            + ("" if seg.kept_last_offset is None else f" (offsets up to {seg.kept_last_offset})"),
            file=out,
        )
        for s in seg.salvaged:
            print(
                f"  salvaged {s.records} records, offsets {s.first_offset}..{s.last_offset} "
                f"(bytes {s.position}..{s.position + s.size})",
                file=out,
            )
        print(
            f"  {verb} the original files to the quarantine ({seg.quarantined_bytes} bytes "
            "there only)",
            file=out,
        )
    if report.dry_run:
        print(f"{report.directory}: dry run, nothing changed", file=out)
    else:
        print(
            f"{report.directory}: repaired, log end offset {report.log_end_offset}; originals "
            f"in {report.quarantine}{_move_out_hint(report.quarantine)}",
            file=out,
        )


def _move_out_hint(quarantine: str) -> str:
    """Said when the quarantine folder landed among a data directory's partitions (the
    default, beside the partition): the help text's warning, where the operator reads it."""
    from kafkalog.log.layout import partitions_in

    parent = os.path.dirname(os.path.normpath(quarantine))
    try:
        among = bool(partitions_in(parent))
    except OSError:
        return ""
    return (
        " (move it out of the data directory before a Kafka broker starts there: a broker "
        "takes every directory there for a partition)"
        if among
        else ""
    )
