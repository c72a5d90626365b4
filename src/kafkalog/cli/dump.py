"""``kafkalog dump``: kafka-dump-log.sh's output (spec §9), line for line.

Handles ``.log`` segments, offset indexes (``.index``, verified against the sibling ``.log``),
time indexes (``.timeindex``, verified through the sibling ``.index`` and ``.log``), aborted
transaction indexes (``.txnindex``) and producer-state snapshots (``.snapshot``).

Scripts written against Kafka's tool parse these lines, so the wording, field order and quirks
(the stray ``}`` of legacy record lines, OptionalLong rendering, the space before the colon of
``Mismatches in :``) are kept exactly. As in Kafka, the problems found while verifying (index
mismatches, time index errors, non-consecutive offsets) are reported on stderr after every file
has been dumped.

Unlike Kafka's tool, they also set the exit status (1), and with ``--json`` each is an object on
stdout (``problem`` or ``warning``, after the last file), so a script cannot miss them. What
Kafka's own check reports on files a broker wrote correctly is a warning, not a problem: an
index entry keyed by the last offset of an append of several batches (its position is the
append's first batch), a time-index entry naming a record inside a batch rather than its last
offset, and offset gaps in a compacted topic (``--compacted``, implied for
``__consumer_offsets`` and ``__transaction_state``). Records that cannot be decoded are problems
too, as are a batch that fails its CRC check (``isvalid: false``) and bytes that are not a whole
batch at the end of a segment that later segments follow (at the end of the last one, a torn
tail, a warning); a file that cannot be walked at all is an error (exit status 2).

Every file is opened read-only: dumping never creates, resizes, truncates or writes anything
(Kafka's own tool creates a missing index file as a side effect; kafkalog reports it missing).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import IO, TYPE_CHECKING, Any

from kafkalog.cli import progress
from kafkalog.cli.args import int_between
from kafkalog.errors import CorruptIndexError, CorruptRecordError, KafkalogError
from kafkalog.log.segment import first_offset_held
from kafkalog.records import DEFAULT_LIMITS, LegacyEntry, LogReader, Record, RecordBatch
from kafkalog.records.model import parse_control_record
from kafkalog.records.reader import LogEntry, read_only_buffer

if TYPE_CHECKING:
    from kafkalog.cli.internal_decoders import Parser
    from kafkalog.index import AbortedTxn
    from kafkalog.index.base import MappedIndex
    from kafkalog.log.producer_snapshot import ProducerEntry

# The index and log layers (numba kernels) are imported where an index or a snapshot is dumped:
# dumping a .log, the common case, starts without them.

DECODERS = ("string", "hex", "json", "base64")
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024  # kafka-dump-log.sh's --max-message-size default
INT32_MAX = 2**31 - 1
NO_TIMESTAMP = -1

# Verification walks the .log as Kafka's FileRecords does: an entry that does not fit in the
# slice ends the walk (no batch found) instead of being refused for its declared size.
_SCAN_LIMITS = replace(DEFAULT_LIMITS, max_batch_bytes=2**32)
_BASE_OFFSET_RE = re.compile(r"[+-]?[0-9]+")


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "dump",
        help="print the batches and records of segment files, as kafka-dump-log.sh does",
        description="Print log segment files the way Kafka's kafka-dump-log.sh does. Exit "
        "status 1 when the verification of a .log (--deep-iteration), .index or .timeindex "
        "finds a problem (Kafka's tool exits 0), 2 when a file cannot be read.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        "  kafkalog dump --files data/orders-3/00000000000000000000.log\n"
        "  kafkalog dump --deep-iteration --print-data-log --value-decoder json \\\n"
        "      --files data/orders-3/00000000000000000000.log > dump.txt\n"
        "  kafkalog dump --verify-index-only --files data/orders-3/00000000000000000000.index\n"
        "  kafkalog dump --json --files data/orders-3/00000000000000000000.timeindex",
    )
    p.add_argument(
        "--files",
        nargs="+",
        help="files to dump (comma-separated lists accepted, as Kafka's tool takes); required",
    )
    # files named without --files, a newcomer's first try: told how to say it (see run)
    p.add_argument("unflagged", nargs="*", help=argparse.SUPPRESS)
    p.add_argument(
        "--print-data-log",
        action="store_true",
        help="print keys and payloads (implies --deep-iteration)",
    )
    p.add_argument("--deep-iteration", action="store_true", help="print every record")
    p.add_argument(
        "--max-bytes", type=int_between(0), default=None, help="read at most this many bytes"
    )
    p.add_argument("--key-decoder", choices=DECODERS, default=None)
    p.add_argument("--value-decoder", choices=DECODERS, default=None)
    p.add_argument("--skip-record-metadata", action="store_true")
    p.add_argument(
        "--verify-index-only",
        action="store_true",
        help="for .index/.timeindex files: verify against the .log without printing entries",
    )
    p.add_argument(
        "--index-sanity-check",
        action="store_true",
        help="for .index/.timeindex files: only run the broker's sanity check",
    )
    p.add_argument(
        "--max-message-size",
        type=int_between(0, INT32_MAX),
        default=DEFAULT_MAX_MESSAGE_SIZE,
        help="bytes of .log read at each .index entry to verify it "
        f"(default {DEFAULT_MAX_MESSAGE_SIZE})",
    )
    for name, what in (
        ("offsets", "__consumer_offsets"),
        ("transaction-log", "__transaction_state"),
        ("cluster-metadata", "__cluster_metadata (and KRaft snapshot .checkpoint files)"),
        ("remote-log-metadata", "__remote_log_metadata"),
        ("share-group-state", "__share_group_state"),
    ):
        p.add_argument(
            f"--{name}-decoder",
            dest="internal_decoder",
            action="store_const",
            const=name,
            default=None,
            help=f"decode the records of {what} (implies --print-data-log)",
        )
    p.add_argument(
        "--compacted",
        action="store_true",
        help="the topic is compacted: gaps in its offsets (records the cleaner removed) are "
        "warnings, not problems (implied for __consumer_offsets and __transaction_state)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="only JSON objects, one per line, each with a 'type' and the 'file' it is from "
        "(fields in the README)",
    )
    p.set_defaults(run=run)


def _decode(data: bytes, how: str) -> str:
    if how == "hex":
        return data.hex()
    if how == "base64":
        import base64

        return base64.b64encode(data).decode()
    text = data.decode("utf-8", "replace")
    if how == "json":
        try:
            return json.dumps(json.loads(text))
        except ValueError:
            return text
    return text


def _optional_long(value: int | None) -> str:
    return "OptionalLong.empty" if value is None else f"OptionalLong[{value}]"


def batch_line(entry: RecordBatch | LegacyEntry, position: int) -> str:
    ts_label = entry.timestamp_type.label
    valid = "true" if entry.is_valid() else "false"
    codec = entry.compression.label
    if isinstance(entry, RecordBatch):
        return (
            f"baseOffset: {entry.base_offset} lastOffset: {entry.last_offset} "
            f"count: {entry.records_count} baseSequence: {entry.base_sequence} "
            f"lastSequence: {entry.last_sequence} producerId: {entry.producer_id} "
            f"producerEpoch: {entry.producer_epoch} "
            f"partitionLeaderEpoch: {entry.partition_leader_epoch} "
            f"isTransactional: {str(entry.is_transactional).lower()} "
            f"isControl: {str(entry.is_control).lower()} "
            f"deleteHorizonMs: {_optional_long(entry.delete_horizon_ms)} "
            f"position: {position} {ts_label}: {entry.max_timestamp} "
            f"size: {entry.size_in_bytes} magic: {entry.magic} compresscodec: {codec} "
            f"crc: {entry.crc} isvalid: {valid}"
        )
    return (
        f"offset: {entry.last_offset} position: {position} {ts_label}: {entry.timestamp} "
        f"size: {entry.size_in_bytes} magic: {entry.magic} compresscodec: {codec} "
        f"crc: {entry.crc} isvalid: {valid}"
    )


def _prints_data(args: argparse.Namespace) -> bool:
    """Kafka's ``shouldPrintDataLog``: ``--print-data-log`` or either decoder option."""
    return bool(
        args.print_data_log
        or args.key_decoder
        or args.value_decoder
        or getattr(args, "internal_decoder", None)
    )


def _parser(args: argparse.Namespace) -> Parser | None:
    name = getattr(args, "internal_decoder", None)
    if name is None:
        return None
    from kafkalog.cli.internal_decoders import PARSERS

    return PARSERS[name]


def control_text(rec: Record) -> str:
    """The control part of a record line, read from the record's own key as Kafka does (a
    KRaft snapshot batch holds a header, a version and a voters record in one batch)."""
    marker = parse_control_record(rec.key, rec.value)
    if marker.is_transaction_marker:
        return f" endTxnMarker: {marker.type.name} coordinatorEpoch: {marker.coordinator_epoch}"
    from kafkalog.records.internal_topics import CONTROL_SCHEMAS, decode_control

    label = CONTROL_SCHEMAS.get(marker.type_id, ("", ""))[0]
    if marker.type_id >= 3 and label and rec.value is not None:
        message = decode_control(marker.type_id, rec.value)
        return f" {label} {message.to_json()}"
    return f" controlType: {marker.type.name}({marker.type_id})"


def record_line(
    entry: RecordBatch | LegacyEntry,
    rec: Record,
    args: argparse.Namespace,
    inner: LegacyEntry | None,
) -> str:
    """One ``|`` line of ``--deep-iteration``, as DumpLogSegments.dumpLog prints it.

    ``inner`` is the legacy message the record came from (the entry itself, or the inner message
    of a compressed wrapper): Kafka prints that message's own ``isValid`` and ``crc``.
    """
    parts: list[str] = []
    prefix = "|"
    if not args.skip_record_metadata:
        ts_label = entry.timestamp_type.label
        parts.append(
            f"{prefix} offset: {rec.offset} {ts_label}: {rec.timestamp} "
            f"keySize: {-1 if rec.key is None else len(rec.key)} "
            f"valueSize: {-1 if rec.value is None else len(rec.value)}"
        )
        if isinstance(entry, RecordBatch):
            parts.append(
                f" sequence: {rec.sequence} headerKeys: [{','.join(h.key for h in rec.headers)}]"
            )
            if entry.is_control:
                parts.append(control_text(rec))
        else:
            valid = "true" if inner is None or inner.is_valid() else "false"
            crc = None if inner is None else inner.crc
            parts.append(f" isValid: {valid} crc: {crc}}}")
    printing = _prints_data(args) and not (isinstance(entry, RecordBatch) and entry.is_control)
    if printing:
        key_text, payload_text = _key_and_payload(rec, args)
        # Kafka prints its "| " indent only in front of the key (or of the metadata): with
        # --skip-record-metadata and a null key the line starts with " payload:".
        if key_text is not None:
            lead = f"{prefix} " if args.skip_record_metadata else " "
            parts.append(f"{lead}key: {key_text}")
        if payload_text is not None:
            parts.append(f" payload: {payload_text}")
    return "".join(parts)


def _key_and_payload(rec: Record, args: argparse.Namespace) -> tuple[str | None, str | None]:
    """The key and payload texts: an internal topic's decoder, else the key/value decoders."""
    parser = _parser(args)
    if parser is not None:
        return parser(rec)
    key_dec = args.key_decoder or "string"
    val_dec = args.value_decoder or "string"
    return (
        None if rec.key is None else _decode(rec.key, key_dec),
        None if rec.value is None else _decode(rec.value, val_dec),
    )


def dump_log(
    path: str,
    args: argparse.Namespace,
    out: IO[str],
    err: IO[str],
    report: DumpReport | None = None,
    done: Callable[[int], object] = lambda n: None,
) -> None:
    """Dump a ``.log`` segment. Non-consecutive offsets go to ``report`` (printed by the caller
    after every file, as Kafka does), or straight to ``err`` when no report is given; ``done``
    hears the bytes walked, batch by batch."""
    name = os.path.basename(path)
    buffer = read_only_buffer(path)
    end = len(buffer) if args.max_bytes is None else min(len(buffer), args.max_bytes)
    start = _log_start(path)
    if args.json:
        emit(out, "file", path, start)
    elif "logStartOffset" in start:
        print(f"Log starting offset: {start['logStartOffset']}", file=out)
    elif start.get("bootstrap"):
        print("KRaft bootstrap snapshot", file=out)
    else:
        print(
            f"Snapshot end offset: {start['snapshotEndOffset']}, epoch: {start['snapshotEpoch']}",
            file=out,
        )
    deep = args.deep_iteration or _prints_data(args)
    reader = LogReader(buffer, path=path, end=end)
    previous: int | None = None
    gaps: list[tuple[int, int]] = []
    walked = 0
    for entry in reader:
        done(reader.end_position - walked)
        walked = reader.end_position
        if args.json:
            emit(out, "batch", path, _batch_json(entry))
        else:
            print(batch_line(entry, entry.position), file=out)
        if report is not None and not entry.is_valid():
            # Kafka's tool prints ``isvalid: false`` and exits 0; a script must not miss it
            report.add(
                "problem",
                path,
                "invalidBatch",
                f"{path} at byte {entry.position}: the batch of offsets {entry.base_offset}.."
                f"{entry.last_offset} fails its CRC check (isvalid: false)",
                position=entry.position,
            )
        if not deep:
            continue
        pairs: list[tuple[LegacyEntry | None, Record]]
        try:
            if isinstance(entry, LegacyEntry) and entry.compression.value != 0:
                inner = entry.inner_entries()
                pairs = [(i, i.records()[0]) for i in inner]
            elif isinstance(entry, LegacyEntry):
                pairs = [(entry, r) for r in entry.records()]
            else:
                pairs = [(None, r) for r in entry.records()]
        except CorruptRecordError as e:
            print(f"kafkalog: {e}", file=err)
            if report is not None:
                report.add(
                    "problem",
                    path,
                    "corruptRecords",
                    f"{e}",
                    position=e.position,
                    batchPosition=entry.position,
                )
            continue
        for inner_entry, rec in pairs:
            if previous is not None and rec.offset != previous + 1:
                gaps.append((previous, rec.offset))
            previous = rec.offset
            if args.json:
                emit(out, "record", path, _record_json(entry, rec, args))
            else:
                print(record_line(entry, rec, args, inner_entry), file=out)
    remaining = end - reader.end_position
    # Kafka tests maxBytes == Integer.MAX_VALUE (its default), not whether the option was given
    if remaining > 0 and (args.max_bytes is None or args.max_bytes == INT32_MAX):
        if args.json:
            emit(out, "invalidBytes", path, {"bytes": remaining})
        else:
            print(f"Found {remaining} invalid bytes at the end of {name}", file=out)
    if remaining > 0 and report is not None and args.max_bytes is None:
        later = _later_segment(path)
        report.add(
            "problem" if later else "warning",
            path,
            "invalidBytes",
            f"{path} at byte {reader.end_position}: {remaining} bytes that are not a whole batch"
            + (
                f", in a segment followed by {later}"
                if later
                else " (the log's last segment: a torn tail or an append in flight)"
            ),
            position=reader.end_position,
        )
    if gaps:
        if report is not None:
            key = java_absolute_path(path)
            report.non_consecutive.setdefault(key, []).extend(gaps)
            compacted = getattr(args, "compacted", False) or _compacted_topic(path)
            for a, b in gaps:
                backwards = b <= a
                kind = "problem" if backwards or not compacted else "warning"
                why = "offsets go backwards" if backwards else "records missing between them"
                if compacted and not backwards:
                    why += " (the topic is compacted: the cleaner removes records)"
                report.add(
                    kind,
                    key,
                    "nonConsecutiveOffsets",
                    f"{a} is followed by {b}: {why}",
                    offset=a,
                    nextOffset=b,
                )
            return
        print(f"Non-consecutive offsets in {java_absolute_path(path)}", file=err)
        for a, b in reversed(gaps):
            print(f"  {a} is followed by {b}", file=err)


def _later_segment(path: str) -> str | None:
    """The name of a segment after ``path`` in its directory, if there is one: bytes that are
    not whole batches are then damage, not the end of the log."""
    from kafkalog.log.layout import is_segment_log

    name = os.path.basename(path)
    if not is_segment_log(name):
        return None
    try:
        names = os.listdir(os.path.dirname(os.path.abspath(path)))
    except OSError:
        return None
    later = sorted(n for n in names if is_segment_log(n) and n > name)
    return later[0] if later else None


#: Internal topics Kafka always compacts (cleanup.policy=compact, not configurable).
_COMPACTED_TOPICS = ("__consumer_offsets", "__transaction_state")


def _compacted_topic(path: str) -> bool:
    """Whether ``path`` is a segment of a topic Kafka always compacts (by its directory)."""
    from kafkalog.log.layout import parse_partition_dir

    try:
        topic, _ = parse_partition_dir(os.path.dirname(os.path.abspath(path)))
    except ValueError:
        return False
    return topic in _COMPACTED_TOPICS


_SNAPSHOT_NAME_RE = re.compile(r"([0-9]{20})-([0-9]{10})\.checkpoint")


def _log_start(path: str) -> dict[str, Any]:
    """What Kafka prints before the batches: the base offset of a segment, or the end offset
    and epoch of a KRaft snapshot (``<20-digit offset>-<10-digit epoch>.checkpoint``)."""
    name = os.path.basename(path)
    if name.endswith(".checkpoint"):
        if name == "bootstrap.checkpoint":
            return {"bootstrap": True}
        m = _SNAPSHOT_NAME_RE.fullmatch(name)
        if m is None:
            raise KafkalogError(
                f"{path}: not a KRaft snapshot name (<20-digit end offset>-<10-digit "
                "epoch>.checkpoint)"
            )
        return {"snapshotEndOffset": int(m.group(1)), "snapshotEpoch": int(m.group(2))}
    stem = name.split(".")[0]
    # a name that is not <offset>.log (a renamed copy, a non-UTF-8 name) starts at 0
    return {"logStartOffset": int(stem) if _BASE_OFFSET_RE.fullmatch(stem) else 0}


def _batch_json(entry: RecordBatch | LegacyEntry) -> dict[str, Any]:
    base: dict[str, Any] = {
        "position": entry.position,
        "magic": entry.magic,
        "lastOffset": entry.last_offset,
        "size": entry.size_in_bytes,
        "compression": entry.compression.label,
        "timestampType": entry.timestamp_type.label,
        "maxTimestamp": entry.max_timestamp,
        "crc": entry.crc,
        "isValid": entry.is_valid(),
    }
    if isinstance(entry, RecordBatch):
        base.update(
            baseOffset=entry.base_offset,
            count=entry.records_count,
            baseSequence=entry.base_sequence,
            producerId=entry.producer_id,
            producerEpoch=entry.producer_epoch,
            partitionLeaderEpoch=entry.partition_leader_epoch,
            isTransactional=entry.is_transactional,
            isControl=entry.is_control,
        )
    return base


def _json_line(kind: str, path: str, fields: dict[str, Any]) -> str:
    """One line of ``--json``: its ``type``, the ``file`` it comes from, then its fields."""
    return json.dumps({"type": kind, "file": java_path(path), **fields}, ensure_ascii=False)


def emit(out: IO[str], kind: str, path: str, fields: dict[str, Any]) -> None:
    print(_json_line(kind, path, fields), file=out)


def _json_value(text: str | None) -> Any:
    """A decoder's text as JSON: the object itself when it is one (the internal topics'
    decoders print JSON), else the text."""
    if text is not None and text.startswith("{"):
        try:
            return json.loads(text)
        except ValueError:
            pass
    return text


def _record_json(
    entry: RecordBatch | LegacyEntry, rec: Record, args: argparse.Namespace
) -> dict[str, Any]:
    out: dict[str, Any] = {"offset": rec.offset, "timestamp": rec.timestamp}
    out["keySize"] = -1 if rec.key is None else len(rec.key)
    out["valueSize"] = -1 if rec.value is None else len(rec.value)
    if isinstance(entry, RecordBatch):
        out["sequence"] = rec.sequence
        out["headerKeys"] = [h.key for h in rec.headers]
        if entry.is_control:
            out["control"] = control_text(rec).strip()
    if _prints_data(args) and not (isinstance(entry, RecordBatch) and entry.is_control):
        key_text, payload_text = _key_and_payload(rec, args)
        out["key"] = _json_value(key_text) if _parser(args) else key_text
        out["value"] = _json_value(payload_text) if _parser(args) else payload_text
        out["headers"] = [
            [h.key, None if h.value is None else _decode(h.value, "string")] for h in rec.headers
        ]
    return out


# -- paths, as java.io.File renders them -------------------------------------------------------
def java_path(path: str) -> str:
    """``java.io.File#toString`` on Unix: repeated ``/`` collapsed, a trailing ``/`` dropped."""
    if os.sep != "/":
        return path
    p = re.sub("/{2,}", "/", path)
    return p[:-1] if len(p) > 1 and p.endswith("/") else p


def java_absolute_path(path: str) -> str:
    """``File#getAbsolutePath``: the path joined to the working directory, not normalised
    further (``./`` and ``../`` stay, unlike :func:`os.path.abspath`)."""
    p = java_path(path)
    if os.path.isabs(p):
        return p
    cwd = os.getcwd()
    return cwd if not p else os.path.join(cwd, p)


def _base_offset(path: str) -> int:
    """The segment base offset from the file name, as Kafka's ``name.split("\\\\.")(0).toLong``."""
    name = os.path.basename(java_path(path))
    stem = name.split(".")[0]
    if not _BASE_OFFSET_RE.fullmatch(stem) or not -(2**63) <= int(stem) < 2**63:
        raise ValueError(
            f"cannot read a segment base offset from the file name {name!r} of {path} "
            "(expected <offset>.<suffix>, e.g. 00000000000000000000.index)"
        )
    return int(stem)


def _sibling(path: str, suffix: str) -> str:
    """The file of the same segment with another suffix, next to ``path``."""
    p = java_absolute_path(path)
    return os.path.join(os.path.dirname(p), os.path.basename(p).split(".")[0] + suffix)


# -- what is reported on stderr after every file was dumped ---------------------------------
@dataclass
class DumpReport:
    """Problems found while dumping, keyed by the absolute path of the file they were found in,
    printed after the last file in Kafka's order and wording."""

    index_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_out_of_order: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_not_found: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    non_consecutive: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    #: every finding as ``--json`` prints it after the last file: ``type`` is ``problem``
    #: (exit status 1) or ``warning`` (what Kafka's check reports on correctly written files)
    findings: list[dict[str, Any]] = field(default_factory=list)

    def add(self, kind: str, path: str, what: str, message: str, **fields: Any) -> None:
        self.findings.append(
            {"type": kind, "file": path, "problem": what, **fields, "message": message}
        )

    @property
    def problems(self) -> int:
        return sum(1 for f in self.findings if f["type"] == "problem")

    def print_json(self, out: IO[str]) -> None:
        for finding in self.findings:
            print(json.dumps(finding, ensure_ascii=False), file=out)

    def print(self, err: IO[str]) -> None:
        # Kafka prepends index mismatches and non-consecutive pairs to a list (newest first)
        # and appends the time index errors (oldest first).
        for name, pairs in self.index_mismatches.items():
            print(f"Mismatches in :{name}", file=err)
            for index_offset, log_offset in reversed(pairs):
                print(f"  Index offset: {index_offset}, log offset: {log_offset}", file=err)
        for name, pairs in self.time_mismatches.items():
            print(f"Found timestamp mismatch in :{name}", file=err)
            for index_ts, log_ts in pairs:
                print(f"  Index timestamp: {index_ts}, log timestamp: {log_ts}", file=err)
        for name, pairs in self.time_out_of_order.items():
            print(f"Found out of order timestamp in :{name}", file=err)
            for index_ts, previous in pairs:
                print(
                    f"  Index timestamp: {index_ts}, Previously indexed timestamp: {previous}",
                    file=err,
                )
        for pairs in self.time_not_found.values():
            print("The following indexed offsets are not found in the log.", file=err)
            for index_offset, log_offset in pairs:
                print(f"Indexed offset: {index_offset}, found log offset: {log_offset}", file=err)
        for name, pairs in self.non_consecutive.items():
            print(f"Non-consecutive offsets in {name}", file=err)
            for a, b in reversed(pairs):
                print(f"  {a} is followed by {b}", file=err)


# -- .index --------------------------------------------------------------------------------
def _check_slice_start(
    index_path: str, what: str, at: int | None, position: int, log: str, log_size: int
) -> None:
    """Kafka's ``FileRecords.slice`` refuses a start past the end of the file."""
    if position > log_size:
        raise CorruptIndexError(
            f"{what} points at position {position}, past the end of {log} ({log_size} bytes)",
            path=index_path,
            position=at,
        )


def _first_batch(
    log: memoryview, log_path: str, position: int, size: int, index_path: str, n: int
) -> LogEntry:
    """The first batch of ``FileRecords.slice(position, size)`` (Kafka's index verification)."""
    from kafkalog.index import OffsetIndex

    what = f"entry {n}"
    _check_slice_start(index_path, what, n * OffsetIndex.ENTRY_SIZE, position, log_path, len(log))
    end = min(len(log), position + size)
    for entry in LogReader(log, path=log_path, start=position, end=end, limits=_SCAN_LIMITS):
        return entry
    raise KafkalogError(
        f"{index_path}: no complete batch at position {position} of {log_path} within "
        f"{size} bytes (entry {n}; a larger --max-message-size may help)"
    )


def _ends_an_append(log: memoryview, log_path: str, first: LogEntry, offset: int) -> bool:
    """Whether an index entry keyed ``offset`` at ``first``'s position is what a broker writes
    for an append of several batches: the entry names the append's last offset and its first
    batch's position, so batches read on from there end exactly at ``offset``."""
    if offset < first_offset_held(first):
        return False
    reader = LogReader(log, path=log_path, start=first.position, limits=_SCAN_LIMITS)
    try:
        for batch in reader:
            if batch.last_offset >= offset:
                return batch.last_offset == offset
    except KafkalogError:
        return False
    return False


def _starts_a_legacy_append(first: LogEntry, offset: int) -> bool:
    """Whether an index entry keyed ``offset`` at ``first``'s position is what a broker before
    Kafka 0.10.1 writes: it keyed the entry by the *first* offset of the append (a 0.9 broker's
    v0 message sets), so for a compressed wrapper, whose own offset is its last, the entry names
    the wrapper's first inner offset. Only legacy (v0/v1) entries: v2 came with 0.11."""
    return not isinstance(first, RecordBatch) and first_offset_held(first) == offset


def _warn_unread_slots(index: MappedIndex, err: IO[str]) -> None:
    """Say so when the bytes after the valid entries are not all zero fill.

    kafkalog's read-only open keeps the entries up to the first one that breaks the index order
    (the zero-filled tail of a preallocated file, or a corrupt or stale entry); Kafka's tool
    would go on printing the latter, so they are not passed over in silence.
    """
    start = index.entries * index.ENTRY_SIZE
    end = index.max_entries * index.ENTRY_SIZE
    with open(index.path, "rb") as f:
        f.seek(start)
        remaining = end - start
        while remaining > 0:
            chunk = f.read(min(remaining, 1 << 20))
            if not chunk:
                return
            if chunk.count(0) != len(chunk):
                break
            remaining -= len(chunk)
        else:
            return
    where = f"after entry {index.entries - 1}" if index.entries else "from the first slot on"
    print(
        f"kafkalog: warning: {index.path}: {where}, the file holds entries out of index order "
        "(corrupt or stale); they were not dumped",
        file=err,
    )


def _require_file(path: str) -> None:
    """Fail on a missing index file (Kafka's tool would create it, empty)."""
    os.stat(path)


def dump_index(
    path: str, args: argparse.Namespace, out: IO[str], err: IO[str], report: DumpReport
) -> None:
    from kafkalog.index import OffsetIndex

    base = _base_offset(path)
    _require_file(path)
    log_path = _sibling(path, ".log")
    log = read_only_buffer(log_path)  # Kafka opens the .log first: a missing one is an error
    index = OffsetIndex(path, base, writable=False)
    try:
        if index.entries == 0:
            if args.json:
                emit(out, "empty", path, {})
            else:
                print(f"{java_path(path)} is empty.", file=out)
            _warn_unread_slots(index, err)
            return
        if getattr(args, "index_sanity_check", False):
            index.sanity_check()
            if args.json:
                emit(out, "sanityCheck", path, {"passed": True})
            else:
                print(f"{java_path(path)} passed sanity check.", file=out)
            return
        verify_only = getattr(args, "verify_index_only", False)
        size = getattr(args, "max_message_size", DEFAULT_MAX_MESSAGE_SIZE)
        key = java_absolute_path(path)
        for n in range(index.entries):
            entry = index.entry(n)
            if n > 0 and entry.offset == base:  # the zero-filled tail of a preallocated file
                return
            first_batch = _first_batch(log, log_path, entry.position, size, path, n)
            last = first_batch.last_offset
            if last != entry.offset:
                report.index_mismatches.setdefault(key, []).append((entry.offset, last))
                append = _ends_an_append(log, log_path, first_batch, entry.offset)
                legacy = not append and _starts_a_legacy_append(first_batch, entry.offset)
                report.add(
                    "warning" if append or legacy else "problem",
                    key,
                    "indexMismatch",
                    f"entry {n} maps offset {entry.offset} to position {entry.position}, where "
                    f"the batch ends at offset {last}"
                    + (
                        " (an append of several batches: Kafka keys the entry by its last offset)"
                        if append
                        else " (a broker before Kafka 0.10.1 keys the entry by the append's first"
                        " offset)"
                        if legacy
                        else ""
                    ),
                    indexOffset=entry.offset,
                    logOffset=last,
                    position=n * OffsetIndex.ENTRY_SIZE,
                )
            if verify_only:
                continue
            if args.json:
                emit(out, "indexEntry", path, {"offset": entry.offset, "position": entry.position})
            else:
                print(f"offset: {entry.offset} position: {entry.position}", file=out)
        _warn_unread_slots(index, err)
    finally:
        index.close()


# -- .timeindex ----------------------------------------------------------------------------
def dump_time_index(
    path: str, args: argparse.Namespace, out: IO[str], err: IO[str], report: DumpReport
) -> None:
    from kafkalog.index import OffsetIndex, TimeIndex

    base = _base_offset(path)
    _require_file(path)
    log_path = _sibling(path, ".log")
    log = read_only_buffer(log_path)
    index_path = _sibling(path, ".index")
    # Kafka creates a missing .index (empty); an empty index looks everything up at position 0
    offsets = OffsetIndex(index_path, base, writable=False) if os.path.exists(index_path) else None
    time_index = TimeIndex(path, base, writable=False)
    try:
        if getattr(args, "index_sanity_check", False):
            time_index.sanity_check()
            if args.json:
                emit(out, "sanityCheck", path, {"passed": True})
            else:
                print(f"{java_path(path)} passed sanity check.", file=out)
            return
        verify_only = getattr(args, "verify_index_only", False)
        key = java_absolute_path(path)
        previous = NO_TIMESTAMP
        for n in range(time_index.entries):
            entry = time_index.entry(n)
            if n > 0 and entry.offset == base:  # the zero-filled tail of a preallocated file
                return
            position = 0 if offsets is None else offsets.lookup(entry.offset).position
            what = f"the entry found for offset {entry.offset} (time index entry {n})"
            _check_slice_start(index_path, what, None, position, log_path, len(log))
            reader = LogReader(log, path=log_path, start=position, limits=_SCAN_LIMITS)
            batch = next((b for b in reader if b.last_offset >= entry.offset), None)
            at = n * TimeIndex.ENTRY_SIZE
            if batch is None:
                report.time_not_found.setdefault(key, []).append((entry.offset, -1))
                report.add(
                    "problem",
                    key,
                    "indexedOffsetNotFound",
                    f"entry {n}: offset {entry.offset} is not in the log",
                    indexOffset=entry.offset,
                    logOffset=-1,
                    position=at,
                )
            elif batch.last_offset != entry.offset:
                pair = (entry.offset, batch.last_offset)
                report.time_not_found.setdefault(key, []).append(pair)
                inside = first_offset_held(batch) <= entry.offset
                report.add(
                    "warning" if inside else "problem",
                    key,
                    "indexedOffsetNotFound",
                    f"entry {n}: offset {entry.offset} is "
                    + (
                        f"inside the batch ending at {batch.last_offset} (brokers before "
                        "Kafka 3.x named the record, not the batch's last offset)"
                        if inside
                        else f"not in the log (the next batch ends at {batch.last_offset})"
                    ),
                    indexOffset=entry.offset,
                    logOffset=batch.last_offset,
                    position=at,
                )
            else:
                max_ts = max([NO_TIMESTAMP, *(r.timestamp for r in batch.records())])
                if max_ts != entry.timestamp:
                    pair = (entry.timestamp, max_ts)
                    report.time_mismatches.setdefault(key, []).append(pair)
                    report.add(
                        "problem",
                        key,
                        "timestampMismatch",
                        f"entry {n}: timestamp {entry.timestamp}, but the batch ending at "
                        f"offset {entry.offset} has {max_ts}",
                        indexTimestamp=entry.timestamp,
                        logTimestamp=max_ts,
                        position=at,
                    )
                if previous >= entry.timestamp:
                    pair = (entry.timestamp, previous)
                    report.time_out_of_order.setdefault(key, []).append(pair)
                    report.add(
                        "problem",
                        key,
                        "timestampOutOfOrder",
                        f"entry {n}: timestamp {entry.timestamp} after {previous}",
                        indexTimestamp=entry.timestamp,
                        previousTimestamp=previous,
                        position=at,
                    )
            if not verify_only:
                if args.json:
                    line = _json_line(
                        "timeIndexEntry",
                        path,
                        {"timestamp": entry.timestamp, "offset": entry.offset},
                    )
                else:
                    line = f"timestamp: {entry.timestamp} offset: {entry.offset}"
                print(line, file=out)
            previous = entry.timestamp
        _warn_unread_slots(time_index, err)
    finally:
        time_index.close()
        if offsets is not None:
            offsets.close()


# -- .txnindex -----------------------------------------------------------------------------
def _txn_json(txn: AbortedTxn) -> dict[str, Any]:
    return {
        "version": txn.version,
        "producerId": txn.producer_id,
        "firstOffset": txn.first_offset,
        "lastOffset": txn.last_offset,
        "lastStableOffset": txn.last_stable_offset,
    }


def dump_txn_index(path: str, args: argparse.Namespace, out: IO[str]) -> None:
    """One line per aborted transaction; a missing file has none (Kafka creates it lazily)."""
    from kafkalog.index import TransactionIndex

    index = TransactionIndex(path, _base_offset(path), writable=False)
    for txn in index.all_aborted_txns():
        if args.json:
            emit(out, "abortedTxn", path, _txn_json(txn))
        else:
            print(
                f"version: {txn.version} producerId: {txn.producer_id} "
                f"firstOffset: {txn.first_offset} lastOffset: {txn.last_offset} "
                f"lastStableOffset: {txn.last_stable_offset}",
                file=out,
            )


# -- .snapshot -----------------------------------------------------------------------------
def _int32(n: int) -> int:
    return (n + 2**31) % 2**32 - 2**31


def first_sequence(last_sequence: int, offset_delta: int) -> int:
    """Kafka's ``DefaultRecordBatch.decrementSequence`` (wraps below 0 to Integer.MAX_VALUE)."""
    if last_sequence < offset_delta:
        return _int32(INT32_MAX - _int32(offset_delta - last_sequence) + 1)
    return _int32(last_sequence - offset_delta)


def _snapshot_json(e: ProducerEntry) -> dict[str, Any]:
    out: dict[str, Any] = {
        "producerId": e.producer_id,
        "producerEpoch": e.epoch,
        "coordinatorEpoch": e.coordinator_epoch,
        "currentTxnFirstOffset": (
            e.current_txn_first_offset if e.current_txn_first_offset >= 0 else None
        ),
        "lastTimestamp": e.timestamp,
    }
    if e.last_offset >= 0:
        out.update(
            firstSequence=first_sequence(e.last_sequence, e.offset_delta),
            lastSequence=e.last_sequence,
            lastOffset=e.last_offset,
            offsetDelta=e.offset_delta,
            timestamp=e.timestamp,
        )
    return out


def snapshot_line(e: ProducerEntry) -> str:
    """Kafka's line for one producer: the batch part only when the entry has batch metadata
    (a last offset >= 0), and a trailing space after ``lastTimestamp`` in every case."""
    txn_first = _optional_long(
        e.current_txn_first_offset if e.current_txn_first_offset >= 0 else None
    )
    line = (
        f"producerId: {e.producer_id} producerEpoch: {e.epoch} "
        f"coordinatorEpoch: {e.coordinator_epoch} currentTxnFirstOffset: {txn_first} "
        f"lastTimestamp: {e.timestamp} "
    )
    if e.last_offset >= 0:
        line += (
            f"firstSequence: {first_sequence(e.last_sequence, e.offset_delta)} "
            f"lastSequence: {e.last_sequence} lastOffset: {e.last_offset} "
            f"offsetDelta: {e.offset_delta} timestamp: {e.timestamp}"
        )
    return line


def dump_snapshot(path: str, args: argparse.Namespace, out: IO[str], err: IO[str]) -> None:
    from kafkalog.log.producer_snapshot import read_snapshot

    try:
        entries = read_snapshot(path)
    except CorruptRecordError as error:  # Kafka prints a corrupt snapshot's message, goes on
        print(error, file=err)
        return
    for entry in entries:
        if args.json:
            emit(out, "producer", path, _snapshot_json(entry))
        else:
            print(snapshot_line(entry), file=out)


# -- the command -------------------------------------------------------------------------------
def run(args: argparse.Namespace, out: IO[str] | None = None, err: IO[str] | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    unflagged = getattr(args, "unflagged", [])  # demo builds its own Namespace
    if not args.files or unflagged:
        named = " ".join(unflagged) or "DIR/00000000000000000000.log"
        raise ValueError(
            f"name the files after --files, as kafka-dump-log.sh takes them: "
            f"kafkalog dump --files {' '.join([*(args.files or []), named])}"
        )
    files = [f for item in args.files for f in item.split(",") if f]
    report = DumpReport()
    with progress.bar("dumping", sum(map(_size, files)), stdout_is_result=True) as shown:
        for path in files:
            try:
                _dump_file(path, args, out, err, report, shown.update)
            except KafkalogError as e:
                if args.json:  # the error ends the run (exit 2): say so in the JSON too
                    report.add(
                        "problem",
                        getattr(e, "path", None) or path,
                        "unreadable",
                        str(e),
                        position=getattr(e, "position", None),
                    )
                    report.print_json(out)
                raise
    out.flush()
    report.print(err)
    if args.json:
        report.print_json(out)
    return 1 if report.problems else 0


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0  # reported with its name when the dump reaches it


def _dump_file(
    path: str,
    args: argparse.Namespace,
    out: IO[str],
    err: IO[str],
    report: DumpReport,
    done: Callable[[int], object],
) -> None:
    if os.path.isdir(path):  # a partition directory: say which files to give instead
        raise IsADirectoryError(
            f"{path} is a directory: dump takes segment files, as kafka-dump-log.sh does "
            f"(kafkalog dump --files {os.path.join(path, '*.log')}); a whole partition or data "
            f"directory is checked by kafkalog verify {path}"
        )
    name = os.path.basename(java_path(path))
    suffix = name[name.rfind(".") :] if "." in name else ""
    if not args.json:
        print(f"Dumping {java_path(path)}", file=out)
    elif suffix not in (".log", ".checkpoint", ""):
        emit(out, "file", path, {})
    if suffix in (".log", ".checkpoint") or not suffix:
        walked = 0

        def step(n: int) -> None:
            nonlocal walked
            walked += n
            done(n)

        dump_log(path, args, out, err, report, step)
        done(_size(path) - walked)  # an invalid tail or --max-bytes stop
        return
    if suffix == ".index":
        dump_index(path, args, out, err, report)
    elif suffix == ".timeindex":
        dump_time_index(path, args, out, err, report)
    elif suffix == ".snapshot":
        dump_snapshot(path, args, out, err)
    elif suffix == ".txnindex":
        dump_txn_index(path, args, out)
    else:
        print(f"Ignoring unknown file {java_path(path)}", file=err)
    done(_size(path))
