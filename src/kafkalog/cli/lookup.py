"""``kafkalog lookup`` and ``kafkalog cat``: find a record by offset or time through the
indexes, and print records as JSON Lines from there (read-only)."""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import json
import os
import sys
from typing import IO, Any

from kafkalog import files
from kafkalog.cli.args import int_between, time_arg


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "lookup",
        help="find the segment, position and first record at an offset or a time",
        description=__doc__,
        epilog="examples:\n  kafkalog lookup data/orders-3 --offset 1200\n"
        "  kafkalog lookup data/orders-3 --timestamp 2026-01-01T12:00:00Z",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _where(p)
    p.add_argument(
        "--json",
        action="store_true",
        help="one JSON object: the index entries used, segment, batch and record",
    )
    p.set_defaults(run=run_lookup)
    c = sub.add_parser(
        "cat",
        help="records as JSON Lines from an offset or a time",
        description=__doc__,
        epilog="examples:\n  kafkalog cat data/orders-3 --timestamp 2026-01-01T12:00:00Z --max 10\n"
        "  kafkalog cat 's3://backups/kafka/orders-3?region=eu-west-1' --offset 0 --max 5",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _where(c, required=False)
    c.add_argument("--max", type=int_between(0), default=None, help="stop after this many records")
    c.add_argument(
        "--skip-damaged",
        action="store_true",
        help="read on past damaged bytes to the next valid batch instead of stopping with an "
        "error; each skip (file, bytes, offsets, why) is said on stderr, and the exit status "
        "is 1 when anything was skipped",
    )
    c.set_defaults(run=run_cat)


def _where(p: argparse.ArgumentParser, required: bool = True) -> None:
    p.add_argument(
        "path",
        help="a partition directory (topic-partition): a path, or a URI pyarrow.fs resolves "
        "(s3://, gs://, abfs://, hdfs://; settings such as region in its query string)",
    )
    group = p.add_mutually_exclusive_group(required=required)
    group.add_argument("--offset", type=int)
    group.add_argument("--timestamp", type=time_arg, help="epoch milliseconds or ISO 8601")


def _start(log: Any, args: argparse.Namespace) -> tuple[int | None, str]:
    if args.offset is not None:
        return args.offset, f"offset {args.offset}"
    if args.timestamp is not None:
        found = log.offsets_for_times(args.timestamp)
        iso = _iso(args.timestamp)
        label = f"timestamp {args.timestamp}" + (f" ({iso})" if iso is not None else "")
        return (None if found is None else found.offset), label
    return log.log_start_offset, "the log start"


def _iso(ms: int) -> str | None:
    """``ms`` as ISO 8601 UTC, or None when it is outside the calendar ``datetime`` knows
    (years 1-9999): a corrupt record or index may hold any 64-bit timestamp, and printing it
    must not fail."""
    try:
        when = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    except (ValueError, OverflowError, OSError):
        return None
    return when.isoformat(timespec="milliseconds")


def text_or_base64(data: bytes | None) -> str | None:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(data).decode()


def partition_path(path: str) -> str:
    """``path`` resolved, once it is known to be a partition directory and not a data
    directory.

    The name alone does not tell: a data directory may be called ``kafka-2020``, which parses
    as topic ``kafka``, partition 2020, and opened as a partition it read as an empty log
    ("offset 3 is outside [0, 0)", or nothing at all from ``cat``). A directory holding no
    segment ``.log`` but partition directories is a data directory; one holding neither is
    an empty partition (or missing: the log layer names it)."""
    from kafkalog.log.layout import (
        is_segment_log,
        parse_partition_dir,
        partitions_in,
        refuse_wrong_level,
    )

    resolved = files.resolve(path)
    if not files.isdir(resolved):
        return resolved
    listing = files.scandir(resolved)
    if any(is_segment_log(name) for name, is_dir in listing if not is_dir):
        return resolved
    partitions = []
    for name, is_dir in sorted(listing):
        if not is_dir or name.endswith(("-delete", "-future", "-stray")):
            continue
        try:
            parse_partition_dir(name)
        except ValueError:
            continue
        partitions.append(name)
    if partitions:
        refuse_wrong_level(
            resolved, {parse_partition_dir(p): os.path.join(resolved, p) for p in partitions}
        )
        shown = ", ".join(partitions[:3]) + (", ..." if len(partitions) > 3 else "")
        example = next((p for p in partitions if not p.startswith("__")), partitions[0])
        raise ValueError(
            f"{path} is a data directory holding {len(partitions)} partition(s) ({shown}), "
            f"not a partition: name one, e.g. {os.path.join(path, example)}"
        )
    for name, is_dir in sorted(listing):
        # a partition's name over a data directory (Strimzi's data-0/kafka-log0): not an
        # empty partition, the wrong level
        inner = os.path.join(resolved, name)
        if is_dir and not files.is_remote(resolved) and partitions_in(inner):
            raise ValueError(
                f"{path} holds no segment files but holds the data directory {inner}: "
                f"name one of its partitions, e.g. {os.path.join(inner, example_partition(inner))}"
            )
    return resolved


def example_partition(data_dir: str) -> str:
    """A partition directory of ``data_dir`` to show in a hint, a user topic's first."""
    from kafkalog.log.layout import partitions_in

    names = [f"{t}-{p}" for t, p in partitions_in(data_dir)]
    return next((n for n in names if not n.startswith("__")), names[0])


def run_lookup(args: argparse.Namespace, out: IO[str] | None = None) -> int:
    from kafkalog.log import Log

    out = out or sys.stdout
    log = Log(partition_path(args.path), writable=False)
    try:
        found = lookup(log, args)
    finally:
        log.close()
    if args.json:
        print(json.dumps(found), file=out)
    else:
        for line in _text(found, args.path):
            print(line, file=out)
    return 0 if found["record"] is not None else 1


def lookup(log: Any, args: argparse.Namespace) -> dict[str, Any]:
    """What ``lookup`` found, as ``--json`` prints it: the index entries it went through, the
    segment and batch, and the record (None, with ``reason``, when there is none)."""
    offset, label = _start(log, args)
    found: dict[str, Any] = {
        "type": "lookup",
        "query": {"offset": args.offset, "timestamp": args.timestamp},
        "offset": offset,
        "timeIndex": None,
        "offsetIndex": None,
        "segment": None,
        "batch": None,
        "record": None,
        "reason": None,
    }
    if offset is None:
        found["reason"] = f"no record at or after {label}"
        return found
    seg = log.floor_segment(offset)
    if log.damage_at_end is not None and offset >= log.log_end_offset:
        # the log's end is before damage (a read-only open went on past it): the offset
        # may be one the damaged bytes held, so the damage is the answer, not "outside"
        raise log.damage_at_end
    if seg is None or offset >= log.log_end_offset:
        found["reason"] = (
            f"offset {offset} is outside [{log.log_start_offset}, {log.log_end_offset})"
        )
        return found
    if args.timestamp is not None:
        tentry = seg.time_index_entry(args.timestamp)
        if tentry is not None:
            found["timeIndex"] = {"file": seg.time_index.path, "entry": list(tentry)}
    oentry = seg.offset_index_entry(offset)
    if oentry is not None:
        found["offsetIndex"] = {"file": seg.offset_index.path, "entry": list(oentry)}
    found["segment"] = {"file": seg.log.path, "baseOffset": seg.base_offset}
    batch = seg.translate_offset(offset)
    if batch is not None:
        found["batch"] = {
            "position": batch.position,
            "size": batch.size,
            "lastOffset": batch.offset,
        }
    record = next(iter(log.records(offset)), None)
    if record is None:
        found["reason"] = "no record"
    else:
        found["record"] = _json(record, log)
    return found


def _text(found: dict[str, Any], path: str) -> list[str]:
    if found["segment"] is None:
        where = f" in {path}" if found["offset"] is None else ""
        return [found["reason"] + where]
    lines = []
    if found["timeIndex"] is not None:
        t = found["timeIndex"]
        lines.append(f"time index {t['file']}: entry {tuple(t['entry'])}")
    if found["offsetIndex"] is not None:
        o = found["offsetIndex"]
        lines.append(f"offset index {o['file']}: entry {tuple(o['entry'])}")
    seg = found["segment"]
    lines.append(f"segment {seg['file']} (base offset {seg['baseOffset']})")
    if found["batch"] is not None:
        b = found["batch"]
        lines.append(
            f"batch at position {b['position']}, {b['size']} bytes, last offset {b['lastOffset']}"
        )
    lines.append("no record" if found["record"] is None else json.dumps(found["record"]))
    return lines


def _json(record: Any, log: Any) -> dict[str, Any]:
    return {
        "topic": log.topic,
        "partition": log.partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
        "time": _iso(record.timestamp) if record.timestamp >= 0 else None,
        "key": text_or_base64(record.key),
        "value": text_or_base64(record.value),
        "headers": [[h.key, text_or_base64(h.value)] for h in record.headers],
    }


def run_cat(args: argparse.Namespace, out: IO[str] | None = None) -> int:
    """Print the records; damage stops the read with an error, or with ``--skip-damaged`` is
    skipped and said (on stderr, one line per skip and a total), never in silence."""
    from kafkalog.log import Log
    from kafkalog.log.damage import SkippedBytes

    out = out or sys.stdout
    skipped: list[SkippedBytes] = []

    def said(skip: SkippedBytes) -> None:
        skipped.append(skip)
        print(f"kafkalog cat: {skip.describe()}", file=sys.stderr, flush=True)

    log = Log(partition_path(args.path), writable=False)
    try:
        offset, label = _start(log, args)
        if offset is None:  # said, or a mistyped time prints nothing and exits 0 unexplained
            print(f"kafkalog cat: no record at or after {label} in {args.path}", file=sys.stderr)
            return 0
        records = log.records(offset, on_damage=said if args.skip_damaged else None)
        printed = 0
        for record in records:
            if args.max is not None and printed >= args.max:
                break
            print(json.dumps(_json(record, log)), file=out)
            printed += 1
        if printed == 0 and offset >= log.log_end_offset and args.max != 0:
            print(
                f"kafkalog cat: nothing from {label}: {args.path} holds offsets "
                f"[{log.log_start_offset}, {log.log_end_offset})",
                file=sys.stderr,
            )
    finally:
        log.close()
    if not skipped:
        return 0
    print(
        f"kafkalog cat: skipped {len(skipped)} damaged range(s), "
        f"{sum(s.size for s in skipped)} bytes in all; `kafkalog repair {args.path}` moves them "
        "into a quarantine folder",
        file=sys.stderr,
    )
    return 1
