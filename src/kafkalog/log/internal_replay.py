"""Replaying an internal topic partition (``__consumer_offsets``) as its coordinator loads it:
which records are in effect, and in what order.

A record of a non-transactional batch takes effect where it stands. A record of a transactional
batch (a ``TxnOffsetCommit``, as a Kafka broker and ``kafkalog serve`` write it) waits for its
producer's marker in the same partition: a COMMIT applies it there unless a later record of its
key is already in effect, an ABORT drops it, and without a marker it never applies.
``kafkalog groups`` replays through :func:`in_effect`; ``kafkalog serve``'s offset store reads
:func:`entries_of` by the same rules and keeps what still waits for a marker as pending, so a
directory gives both the same committed offsets (``tests/server/test_serve_txn_offsets.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from kafkalog.records import RecordBatch
from kafkalog.records.model import parse_control_record

COMMIT_MARKER = 1


@dataclass(frozen=True)
class InternalEntry:
    """One record of an internal topic partition with what a replay needs of its batch."""

    log_offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    producer_id: int
    transactional: bool
    control: int | None  # 0 ABORT, 1 COMMIT for transaction markers; None for data


def entries_of(batches: Iterable[Any], log_start_offset: int = 0) -> Iterator[InternalEntry]:
    """Every data record and transaction marker of one partition's batches, in offset order
    (records below ``log_start_offset`` skipped; legacy message sets are non-transactional)."""
    for batch in batches:
        is_v2 = isinstance(batch, RecordBatch)
        producer_id = batch.producer_id if is_v2 else -1
        transactional = bool(is_v2 and batch.is_transactional)
        control = bool(is_v2 and batch.is_control)
        for rec in batch.records():
            if rec.offset < log_start_offset:
                continue
            marker: int | None = None
            if control:
                parsed = parse_control_record(rec.key, rec.value)
                if not parsed.is_transaction_marker:
                    continue
                marker = parsed.type_id
            yield InternalEntry(
                rec.offset, rec.timestamp, rec.key, rec.value, producer_id, transactional, marker
            )


def in_effect(entries: Iterable[InternalEntry]) -> Iterator[InternalEntry]:
    """The data records of one partition in the order they take effect (see the module doc).
    A committed transaction's record does not replace a later record of the same key already in
    effect (a plain commit written between it and its marker), as Kafka's coordinator compares
    their positions (``olderThan``)."""
    pending: dict[int, list[InternalEntry]] = {}
    applied: dict[bytes, int] = {}  # key -> log offset of the record of it in effect
    for e in entries:
        if e.control is not None:
            held = pending.pop(e.producer_id, [])
            if e.control == COMMIT_MARKER:
                for h in held:
                    if h.key is not None and applied.get(h.key, -1) > h.log_offset:
                        continue
                    if h.key is not None:
                        applied[h.key] = h.log_offset
                    yield h
        elif e.transactional:
            pending.setdefault(e.producer_id, []).append(e)
        else:
            if e.key is not None:
                if e.value is None:
                    applied.pop(e.key, None)  # a tombstone: nothing of the key in effect
                else:
                    applied[e.key] = e.log_offset
            yield e
