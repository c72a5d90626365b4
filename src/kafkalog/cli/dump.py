"""``kafkalog dump``: kafka-dump-log.sh's output for ``.log`` files (spec §9), line for line.

Scripts written against Kafka's tool parse these lines, so the wording, field order and quirks
(the stray ``}`` of legacy record lines, OptionalLong rendering) are kept exactly.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import IO, Any

from kafkalog.errors import CorruptRecordError
from kafkalog.records import LegacyEntry, LogReader, Record, RecordBatch
from kafkalog.records.reader import read_only_buffer

DECODERS = ("string", "hex", "json", "base64")


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "dump",
        help="print the batches and records of segment files, as kafka-dump-log.sh does",
        description="Print log segment files the way Kafka's kafka-dump-log.sh does.",
    )
    p.add_argument(
        "--files",
        required=True,
        nargs="+",
        help="files to dump (comma-separated lists accepted, as Kafka's tool takes)",
    )
    p.add_argument(
        "--print-data-log",
        action="store_true",
        help="print keys and payloads (implies --deep-iteration)",
    )
    p.add_argument("--deep-iteration", action="store_true", help="print every record")
    p.add_argument("--max-bytes", type=int, default=None, help="read at most this many bytes")
    p.add_argument("--key-decoder", choices=DECODERS, default=None)
    p.add_argument("--value-decoder", choices=DECODERS, default=None)
    p.add_argument("--skip-record-metadata", action="store_true")
    p.add_argument("--json", action="store_true", help="one JSON object per batch/record line")
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


def record_line(
    entry: RecordBatch | LegacyEntry, rec: Record, args: argparse.Namespace, inner_crc: int | None
) -> str:
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
                marker = entry.control_record()
                if marker.is_transaction_marker:
                    parts.append(
                        f" endTxnMarker: {marker.type.name} "
                        f"coordinatorEpoch: {marker.coordinator_epoch}"
                    )
                else:
                    parts.append(f" controlType: {marker.type.name}({marker.type_id})")
        else:
            parts.append(f" isValid: true crc: {inner_crc}}}")
    printing = args.print_data_log and not (isinstance(entry, RecordBatch) and entry.is_control)
    if printing:
        key_dec = args.key_decoder or "string"
        val_dec = args.value_decoder or "string"
        if args.skip_record_metadata:
            parts.append(prefix)
            if rec.key is not None:
                parts.append(f" key: {_decode(rec.key, key_dec)}")
        elif rec.key is not None:
            parts.append(f" key: {_decode(rec.key, key_dec)}")
        if rec.value is not None:
            parts.append(f" payload: {_decode(rec.value, val_dec)}")
    return "".join(parts)


def dump_log(path: str, args: argparse.Namespace, out: IO[str], err: IO[str]) -> None:
    name = os.path.basename(path)
    buffer = read_only_buffer(path)
    end = len(buffer) if args.max_bytes is None else min(len(buffer), args.max_bytes)
    print(f"Log starting offset: {int(name.split('.')[0]) if name[:1].isdigit() else 0}", file=out)
    deep = args.deep_iteration or args.print_data_log or args.key_decoder or args.value_decoder
    reader = LogReader(buffer, path=path, end=end)
    previous: int | None = None
    gaps: list[tuple[int, int]] = []
    for entry in reader:
        if args.json:
            print(json.dumps(_batch_json(entry)), file=out)
        else:
            print(batch_line(entry, entry.position), file=out)
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
            continue
        for inner_entry, rec in pairs:
            if previous is not None and rec.offset != previous + 1:
                gaps.append((previous, rec.offset))
            previous = rec.offset
            crc = inner_entry.crc if isinstance(inner_entry, LegacyEntry) else None
            if args.json:
                print(json.dumps(_record_json(rec, args)), file=out)
            else:
                print(record_line(entry, rec, args, crc), file=out)
    remaining = end - reader.end_position
    if remaining > 0 and args.max_bytes is None:
        print(f"Found {remaining} invalid bytes at the end of {name}", file=out)
    if gaps:
        print(f"Non-consecutive offsets in {os.path.abspath(path)}", file=err)
        for a, b in reversed(gaps):
            print(f"  {a} is followed by {b}", file=err)


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


def _record_json(rec: Record, args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"offset": rec.offset, "timestamp": rec.timestamp}
    if args.print_data_log:
        out["key"] = None if rec.key is None else _decode(rec.key, args.key_decoder or "string")
        out["value"] = (
            None if rec.value is None else _decode(rec.value, args.value_decoder or "string")
        )
        out["headers"] = [
            [h.key, None if h.value is None else _decode(h.value, "string")] for h in rec.headers
        ]
    return out


def run(args: argparse.Namespace, out: IO[str] | None = None, err: IO[str] | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    files = [f for item in args.files for f in item.split(",") if f]
    for path in files:
        print(f"Dumping {path}", file=out)
        if path.endswith(".log") or not os.path.splitext(path)[1]:
            dump_log(path, args, out, err)
        else:
            print(f"Ignoring unknown file {path}", file=err)
    return 0
