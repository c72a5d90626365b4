"""Partition logs shaped the way real Kafka writers leave them, and the brute-force truth about
them: what ``tests/test_read_path_differential.py`` holds every bounded reader to.

A broker's offset index (``.index``) names the byte position where an *append* starts: one entry
per append of ``index.interval.bytes`` or more, ``(largest offset of the append, first byte of
the append)``. An append is whatever one produce request or replica fetch carried: one v2 batch
from today's Java producer, but several batches from a follower's fetch or an older client, and
many v0/v1 messages (or compressed wrappers) from the old message-set writers. The batch holding
an indexed offset can therefore be any batch of its append, not the one at the entry's position;
a reader that assumes otherwise loses records silently. Each shape here is one broker-style data
directory (``log-start-offset-checkpoint``, recovery points, a clean-shutdown marker, so a
writable open later recovers nothing and keeps the indexes as written) holding one partition,
written through kafkalog's own log layer the way a broker writes, deterministic from a seed:

- v2 appends of one batch, or of many batches (several ``encode_batch`` outputs concatenated
  into one ``Log.append``), as a leader (offsets assigned) or a follower (offsets kept);
- ``index.interval.bytes`` of 1 (an entry per append but each segment's first), 300, 4096
  (Kafka's default) and 10**9 (no entry at all: every read scans from the segment start);
- every v2 codec (none, gzip, snappy, lz4, zstd), headers, null keys and values, empty values,
  timestamps slightly out of order inside a batch;
- idempotent and transactional producers: COMMIT and ABORT markers (in multi-batch appends too),
  transactions interleaved with each other and with plain data, one left open at the end (the
  last stable offset below the log end); an ABORT in the middle of a follower's append while
  another producer's transaction is open and ends later in the same append (that abort's
  ``.txnindex`` LSO is the other transaction's start, which tells a read_committed fetch to
  look on for the other abort);
- offsets missing between and inside batches, as the log cleaner leaves them (a follower's
  ``assign_offsets=False`` appends);
- segment rolls (small ``segment.bytes``), a log start moved by retention (whole segments
  deleted) or by DeleteRecords (inside a segment, inside an append);
- v0 and v1 message sets: uncompressed messages (an entry each, many per append), compressed
  wrappers (gzip, snappy, lz4; v0 inner offsets absolute, v1 relative), several wrappers in one
  append, and a v1 log continued with v2 batches (a message-format upgrade).

:func:`truth` decodes every live segment file from byte 0, with no index and no reader of the log
layer: the records at or after the log start (control records too), the aborted transactions
(replayed from the markers), the last stable offset, and the entries and index entries (the
boundaries where bounded reads go wrong).
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import os
import random
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafkalog.log import LogDir, TopicConfig
from kafkalog.log.layout import is_segment_log, offset_from_filename
from kafkalog.records import (
    Compression,
    ControlType,
    LogReader,
    Record,
    RecordBatch,
    TimestampType,
    encode_batch,
    encode_control_batch,
    encode_message_set,
)

T0 = 1_700_000_000_000
TOPIC = "shape"
V2_CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
LEGACY_CODECS = ("gzip", "snappy", "lz4")
HUGE_INTERVAL = 10**9  # no index entry is ever written: every segment is read from byte 0

# producer ids: idempotent ones and transactional ones never share an id
IDEMPOTENT_PIDS = (2000, 2001)
TXN_PIDS = (1000, 1001, 1002, 1003)


@dataclass
class Shape:
    """One partition written in one shape: ``data_dir/<topic>-0``."""

    name: str
    data_dir: Path
    description: str
    magic: int  # the newest message format written; 0: no record has a timestamp
    #: (first offset, last offset, entries) of every append, in order
    appends: list[tuple[int, int, int]] = field(default_factory=list)
    topic: str = TOPIC
    partition: int = 0

    @property
    def directory(self) -> Path:
        return self.data_dir / f"{self.topic}-{self.partition}"

    @property
    def has_timestamps(self) -> bool:
        return self.magic >= 1


@dataclass(frozen=True)
class V2:
    """How a v2 log is written (see the module docstring)."""

    records: int = 600
    batches_per_append: tuple[int, int] = (1, 1)
    records_per_batch: tuple[int, int] = (1, 12)
    codecs: tuple[str, ...] = ("none",)
    index_interval_bytes: int = 4096
    segment_bytes: int = 1 << 30
    producers: str = "plain"  # "plain", "idempotent" or "transactions"
    follower: bool = False  # appends keep their offsets (a replica fetch)
    gaps: bool = False  # offsets missing between and inside batches (needs follower)
    open_transaction: bool = False
    start: str | None = None  # None, "retention" or "delete-records"
    nested_aborts: bool = False  # aborts inside appends that end another open transaction
    #: markers of empty transactions (a partition added, nothing written to it: librdkafka
    #: purges unsent messages on abort), which Kafka lists in no ``.txnindex``
    empty_transactions: bool = False
    #: record timestamps: "producer", "scrambled" or "missing" (see _Clock)
    clock: str = "producer"
    timestamp_type: str = "CreateTime"  # or "LogAppendTime": the log stamps every batch
    #: truncated inside its last batch of several records at the end (as a follower truncates
    #: to its leader's end offset): the log end is the target, its last batch ends before it
    truncated: bool = False


@dataclass(frozen=True)
class Legacy:
    """How a v0 or v1 log is written (see the module docstring)."""

    magic: int
    records: int = 500
    codecs: tuple[str, ...] = LEGACY_CODECS
    index_interval_bytes: int = 4096
    segment_bytes: int = 1 << 30
    then_v2: int = 0  # v2 records appended after the legacy ones (a format upgrade)
    clock: str = "producer"  # record timestamps: "producer" or "scrambled" (see _Clock)


def _config(
    index_interval_bytes: int, segment_bytes: int, timestamp_type: str = "CreateTime"
) -> TopicConfig:
    return TopicConfig(
        index_interval_bytes=index_interval_bytes,
        segment_bytes=segment_bytes,
        retention_ms=-1,  # the T0 timestamps are years old: only the rules asked for delete
        message_timestamp_before_max_ms=2**63 - 1,
        message_timestamp_type=timestamp_type,
    )


#: how far a scrambled clock runs behind: the 51 minutes a user's data was out of order
SCRAMBLE_MS = 51 * 60 * 1000


class _Clock:
    """Record timestamps. ``producer``: mostly increasing, now and then a little out of order
    inside a batch, as producers' clocks leave them. ``scrambled``: seconds apart, and half of
    them up to 51 minutes behind, so that timestamps run far out of order inside batches and
    across them (a batch's base timestamp, its first record's, is often not its smallest).
    ``missing``: increasing, with runs of records that have none (-1)."""

    def __init__(self, rng: random.Random, start: int = T0, mode: str = "producer") -> None:
        self.rng = rng
        self.now = start
        self.mode = mode
        self.absent = mode == "missing"  # a "missing" log starts without timestamps

    def next(self) -> int:
        if self.mode == "missing":
            # runs of records without a timestamp (-1, as a client may send them and Kafka
            # keeps them): whole batches and segments begun by one, and single -1 records
            # among timestamped ones, inside a batch
            if self.rng.random() < 0.08:
                self.absent = not self.absent
            if self.absent or self.rng.random() < 0.15:
                return -1
            self.now += self.rng.randint(0, 7)
            return self.now
        if self.mode == "scrambled":
            self.now += self.rng.randint(1_000, 12_000)
            if self.rng.random() < 0.5:
                return self.now - self.rng.randint(0, SCRAMBLE_MS)
            return self.now
        self.now += self.rng.randint(0, 7)
        if self.rng.random() < 0.05:
            return max(T0, self.now - self.rng.randint(1, 40))
        return self.now


def _payload(rng: random.Random, i: int) -> tuple[bytes | None, bytes | None]:
    """(key, value): ASCII, so every reader's output (JSON too) compares directly; now and
    then a null key, a null value (a tombstone) or an empty value."""
    key = None if rng.random() < 0.1 else b"k%d" % rng.randint(0, 40)
    roll = rng.random()
    value: bytes | None = None if roll < 0.03 else b"" if roll < 0.08 else b"v%d-" % i
    if value:
        value += rng.randbytes(rng.randint(0, 40)).hex().encode()
    return key, value


class _V2Writer:
    """Appends v2 data to an open writable ``Log`` as ``spec`` says, remembering each append."""

    def __init__(
        self, log: Any, spec: V2, rng: random.Random, shape: Shape, pid_base: int = 0
    ) -> None:
        self.log = log
        self.spec = spec
        self.rng = rng
        self.shape = shape
        self.clock = _Clock(rng, max(T0, _max_timestamp(log)), spec.clock)
        self.next_offset = log.log_end_offset
        self.sequences: dict[int, int] = {}
        self.open: set[int] = set()
        self.txn_pids = tuple(p + pid_base for p in TXN_PIDS)
        self.idem_pids = tuple(p + pid_base for p in IDEMPOTENT_PIDS)
        self.written = 0
        self.serial = 0

    # -- one batch ----------------------------------------------------------------------------
    def _records(self, n: int, base: int) -> list[Record]:
        out = []
        offset = base
        for _ in range(n):
            key, value = self._payload()
            if self.spec.gaps and self.rng.random() < 0.2 and value:
                value = None  # a tombstone the cleaner kept
            headers: list[tuple[str, bytes | None]] = []
            if self.rng.random() < 0.15:
                headers = [("h", b"x%d" % self.serial), ("null-header", None)]
            out.append(
                Record.of(
                    value,
                    key,
                    self.clock.next(),
                    headers,
                    offset=offset if self.spec.follower else -1,
                )
            )
            offset += 1
            if self.spec.gaps and self.rng.random() < 0.25:
                offset += self.rng.randint(1, 4)  # records the cleaner removed
        return out

    def _payload(self) -> tuple[bytes | None, bytes | None]:
        self.serial += 1
        return _payload(self.rng, self.serial)

    def _data_batch(self, pid: int, transactional: bool) -> bytes:
        n = self.rng.randint(*self.spec.records_per_batch)
        if self.spec.gaps and self.rng.random() < 0.3:
            self.next_offset += self.rng.randint(1, 30)  # whole batches the cleaner removed
        base = self.next_offset
        records = self._records(n, base)
        last = records[-1].offset if self.spec.follower else base + n - 1
        seq = -1
        if pid >= 0:
            seq = self.sequences.get(pid, 0)
            self.sequences[pid] = seq + (last - base) + 1
        data = encode_batch(
            records,
            base_offset=base if self.spec.follower else 0,
            compression=self.rng.choice(self.spec.codecs),
            producer_id=pid,
            producer_epoch=0 if pid >= 0 else -1,
            base_sequence=seq,
            is_transactional=transactional,
        )
        self.next_offset = last + 1
        self.written += n
        return data

    def _marker(self, pid: int, abort: bool) -> bytes:
        data = encode_control_batch(
            ControlType.ABORT if abort else ControlType.COMMIT,
            offset=self.next_offset if self.spec.follower else 0,
            timestamp=self.clock.now,
            producer_id=pid,
            producer_epoch=0,
            coordinator_epoch=3,
        )
        self.next_offset += 1
        self.open.discard(pid)
        return data

    def _batch(self) -> bytes:
        roll = self.rng.random()
        if self.spec.producers == "transactions" and roll < 0.45:
            pid = self.rng.choice(self.txn_pids)
            if self.spec.empty_transactions and pid not in self.open and self.rng.random() < 0.3:
                return self._marker(pid, abort=self.rng.random() < 0.7)
            if pid in self.open and self.rng.random() < 0.3:
                return self._marker(pid, abort=self.rng.random() < 0.45)
            self.open.add(pid)
            return self._data_batch(pid, transactional=True)
        if self.spec.producers != "plain" and roll < 0.7:
            return self._data_batch(self.rng.choice(self.idem_pids), transactional=False)
        return self._data_batch(-1, transactional=False)

    def _nested_abort(self) -> list[bytes]:
        """One append (a follower's fetch) with an ABORT in the middle: producer ``q``'s
        transaction, begun earlier, is aborted while producer ``p``'s is open, and ``p``'s
        ends (mostly aborted too) later in the same append. Kafka records ``p``'s first offset
        as the LSO of ``q``'s abort; an LSO taken from the state at the end of the append
        (past both) ends a read_committed search for aborted transactions at ``q``'s entry,
        and ``p``'s aborted records are read as committed."""
        q = self.rng.choice(sorted(self.open))
        p = self.rng.choice([pid for pid in self.txn_pids if pid != q])
        batches = []
        if p not in self.open:
            self.open.add(p)
            batches.append(self._data_batch(p, transactional=True))
        batches.append(self._data_batch(-1, transactional=False))
        batches.append(self._marker(q, abort=True))
        batches.append(self._data_batch(p, transactional=True))
        batches.append(self._marker(p, abort=self.rng.random() < 0.8))
        return batches

    # -- appends ------------------------------------------------------------------------------
    def append(self, batches: list[bytes]) -> None:
        # an append holding a marker is the coordinator's (a client's control batch is refused);
        # the read shapes mix markers into multi-batch appends, as a follower's fetch carries them
        marker = any(b[22] & 0x20 for b in batches)
        info = self.log.append(
            b"".join(batches),
            assign_offsets=not self.spec.follower,
            origin="coordinator" if marker else "client",
        )
        self.shape.appends.append((info.first_offset, info.last_offset, len(batches)))
        self.next_offset = self.log.log_end_offset

    def write(self, records: int) -> None:
        goal = self.written + records
        while self.written < goal:
            if self.spec.nested_aborts and self.open and self.rng.random() < 0.2:
                self.append(self._nested_abort())
                continue
            k = self.rng.randint(*self.spec.batches_per_append)
            self.append([self._batch() for _ in range(k)])

    def finish(self) -> None:
        """End every open transaction (an ABORT now and then), or with ``open_transaction``
        leave one open, followed by plain data so the last stable offset is inside the log."""
        for pid in sorted(self.open):
            self.append([self._marker(pid, abort=self.rng.random() < 0.5)])
        if self.spec.open_transaction:
            pid = self.txn_pids[0]
            self.open.add(pid)
            self.append([self._data_batch(pid, transactional=True)])
            for _ in range(3):
                k = self.rng.randint(*self.spec.batches_per_append)
                self.append([self._data_batch(-1, transactional=False) for _ in range(k)])


def _max_timestamp(log: Any) -> int:
    return max([T0, *(int(seg.max_timestamp_so_far) for seg in log.segments)])


def write_v2(root: Path, name: str, spec: V2, seed: int) -> Shape:
    """A v2 partition written as ``spec`` says, under ``root/name``."""
    if spec.gaps and not spec.follower:
        raise ValueError("offset gaps need follower appends (the offsets are kept)")
    rng = random.Random(f"{name}/{seed}")
    shape = Shape(name, root / name, _describe(spec), magic=2)
    with LogDir(shape.data_dir, writable=True) as logdir:
        log = logdir.log(
            TOPIC,
            0,
            create=True,
            config=_config(spec.index_interval_bytes, spec.segment_bytes, spec.timestamp_type),
        )
        writer = _V2Writer(log, spec, rng, shape)
        writer.write(spec.records)
        writer.finish()
        _move_start(log, spec.start, shape, rng)
        if spec.truncated:
            truncate_inside_last_batch(log, rng)
    return shape


def truncate_inside_last_batch(log: Any, rng: random.Random) -> None:
    """``Log.truncate_to`` an offset inside the last batch of several records: Kafka cuts the
    segment at that batch's start and keeps the target as the log end, so the log ends past
    its last batch until the next append (or reopen)."""
    active = log.active_segment
    data = active.log.read(0, active.size)
    batches = [e for e in LogReader(data) if e.last_offset > e.base_offset]
    assert batches, "no batch of several records to truncate inside"
    last = batches[-1]
    target = rng.randint(last.base_offset + 1, last.last_offset)
    log.truncate_to(target)
    assert log.log_end_offset == target


def _move_start(log: Any, how: str | None, shape: Shape, rng: random.Random) -> None:
    if how is None:
        return
    if len(log.segments) < 4:
        raise ValueError(f"{shape.name}: moving the log start needs segments to delete")
    if how == "retention":
        total = sum(seg.size for seg in log.segments)
        log.config = dataclasses.replace(log.config, retention_bytes=int(total * 0.6))
        deleted = log.delete_old_segments()
        assert deleted > 0, "retention deleted nothing"
        return
    assert how == "delete-records"
    # inside a multi-entry append of the third segment, past its first entry: the new start
    # has records of its own append (and maybe of its batch) before it
    third, fourth = log.segments[2].base_offset, log.segments[3].base_offset
    inside = [a for a in shape.appends if third <= a[0] and a[1] < fourth and a[2] > 1]
    first, last, _ = rng.choice(inside)
    log.increment_log_start_offset(rng.randint(first + 1, last))
    log.delete_old_segments()


def extend_v2(shape: Shape, spec: V2, records: int, seed: int) -> None:
    """More appends to a shape written by :func:`write_v2` (its directory shut down cleanly,
    so nothing is recovered and the indexes stay as written), with producers of their own."""
    rng = random.Random(f"{shape.name}/more/{seed}")
    with LogDir(shape.data_dir, writable=True) as logdir:
        config = _config(spec.index_interval_bytes, spec.segment_bytes, spec.timestamp_type)
        log = logdir.log(TOPIC, 0, config=config)
        writer = _V2Writer(log, dataclasses.replace(spec, open_transaction=False), rng, shape, 50)
        writer.write(records)
        writer.finish()


class _LegacyWriter:
    """Appends v0/v1 message sets the way old brokers stored them: ``LogSegment.append`` with
    the append's largest offset and timestamp (one index entry per append), rolling by
    ``segment.bytes`` as the log does (``Log.append`` takes magic 2 only, as a broker takes
    only magic 2 from today's producers)."""

    def __init__(self, log: Any, spec: Legacy, rng: random.Random, shape: Shape) -> None:
        self.log = log
        self.spec = spec
        self.rng = rng
        self.shape = shape
        self.clock = _Clock(rng, max(T0, _max_timestamp(log)), spec.clock)
        self.written = 0
        self.serial = 0

    def _set(self, n: int, codec: str, base: int) -> tuple[bytes, int, int]:
        """One message set of ``n`` records from ``base``: its bytes, max timestamp and the
        offset of the entry holding it."""
        records = []
        for _ in range(n):
            self.serial += 1
            key, value = _payload(self.rng, self.serial)
            ts = self.clock.next() if self.spec.magic == 1 else -1
            records.append(Record.of(value, key, ts))
        data = encode_message_set(
            records,
            magic=self.spec.magic,
            base_offset=base,
            compression=Compression.parse(codec),
            timestamp_type=TimestampType.CREATE_TIME,
        )
        self.written += n
        if self.spec.magic == 0:
            return data, -1, -1
        best = max(range(n), key=lambda i: (records[i].timestamp, -i))
        holder = base + n - 1 if codec != "none" else base + best
        return data, records[best].timestamp, holder

    def append_one(self) -> None:
        kind = self.rng.choice(["messages", "wrapper", "wrappers", "mixed"])
        plan: list[tuple[int, str]]
        if kind == "messages":
            plan = [(self.rng.randint(1, 12), "none")]
        elif kind == "wrapper":
            plan = [(self.rng.randint(2, 15), self.rng.choice(self.spec.codecs))]
        elif kind == "wrappers":
            plan = [
                (self.rng.randint(1, 10), self.rng.choice(self.spec.codecs))
                for _ in range(self.rng.randint(2, 4))
            ]
        else:
            plan = [
                (self.rng.randint(1, 5), "none"),
                (self.rng.randint(2, 8), self.rng.choice(self.spec.codecs)),
                (self.rng.randint(1, 5), "none"),
            ]
        base = self.log.log_end_offset
        pieces, max_ts, ts_offset, entries = [], -1, -1, 0
        offset = base
        for n, codec in plan:
            data, ts, holder = self._set(n, codec, offset)
            pieces.append(data)
            entries += 1 if codec != "none" else n
            if ts > max_ts:
                max_ts, ts_offset = ts, holder
            offset += n
        data = b"".join(pieces)
        last = offset - 1
        active = self.log.active_segment
        if active.size and active.size + len(data) > self.spec.segment_bytes:
            active = self.log.roll()
        active.append(last, max_ts, ts_offset, data)
        self.log.log_end_offset = last + 1
        self.shape.appends.append((base, last, entries))

    def write(self, records: int) -> None:
        goal = self.written + records
        while self.written < goal:
            self.append_one()


def write_legacy(root: Path, name: str, spec: Legacy, seed: int) -> Shape:
    """A v0/v1 partition written as ``spec`` says (then v2, with ``then_v2``)."""
    rng = random.Random(f"{name}/{seed}")
    magic = 2 if spec.then_v2 else spec.magic
    shape = Shape(name, root / name, _describe(spec), magic=magic)
    with LogDir(shape.data_dir, writable=True) as logdir:
        log = logdir.log(
            TOPIC,
            0,
            create=True,
            config=_config(spec.index_interval_bytes, spec.segment_bytes),
        )
        _LegacyWriter(log, spec, rng, shape).write(spec.records)
        if spec.then_v2:
            more = V2(
                batches_per_append=(1, 5),
                codecs=V2_CODECS,
                index_interval_bytes=spec.index_interval_bytes,
                segment_bytes=spec.segment_bytes,
            )
            _V2Writer(log, more, rng, shape).write(spec.then_v2)
    return shape


def extend_legacy(shape: Shape, spec: Legacy, records: int, seed: int) -> None:
    """More legacy appends to a shape written by :func:`write_legacy` (clean shutdown)."""
    rng = random.Random(f"{shape.name}/more/{seed}")
    with LogDir(shape.data_dir, writable=True) as logdir:
        log = logdir.log(TOPIC, 0, config=_config(spec.index_interval_bytes, spec.segment_bytes))
        _LegacyWriter(log, spec, rng, shape).write(records)


def _describe(spec: V2 | Legacy) -> str:
    if isinstance(spec, Legacy):
        what = f"v{spec.magic} messages and {'/'.join(spec.codecs)} wrappers, "
        what += "many entries per append"
        if spec.then_v2:
            what += f", then {spec.then_v2} v2 records"
        interval, segment = spec.index_interval_bytes, spec.segment_bytes
    else:
        lo, hi = spec.batches_per_append
        what = f"v2 {'/'.join(spec.codecs)}, {lo}-{hi} batches per append"
        who = {"transactions": "transactional"}.get(spec.producers, spec.producers)
        what += f", {who} producers" + (" as a follower" if spec.follower else "")
        if spec.gaps:
            what += ", compaction gaps"
        if spec.nested_aborts:
            what += ", aborts inside appends that end another transaction"
        if spec.empty_transactions:
            what += ", empty transactions' markers"
        if spec.timestamp_type != "CreateTime":
            what += f", {spec.timestamp_type}"
        if spec.open_transaction:
            what += ", a transaction left open"
        if spec.start:
            what += f", log start moved by {spec.start}"
        if spec.truncated:
            what += ", truncated inside its last batch"
        interval, segment = spec.index_interval_bytes, spec.segment_bytes
    if spec.clock == "scrambled":
        what += f", timestamps scrambled (up to {SCRAMBLE_MS // 60_000} minutes behind)"
    elif spec.clock == "missing":
        what += ", runs of records without a timestamp (-1)"
    what += f"; index.interval.bytes={interval}"
    if segment < 1 << 30:
        what += f", segment.bytes={segment}"
    return what


#: every shape the differential test reads, by name
SHAPES: dict[str, V2 | Legacy] = {
    # one batch per append (the control group: the planner bug needs more than one)
    "v2-single-i4096": V2(records=500),
    "v2-single-i1-codecs-roll": V2(
        records=700, codecs=V2_CODECS, index_interval_bytes=1, segment_bytes=6000
    ),
    # many batches per append
    "v2-multi-i1": V2(
        records=700, batches_per_append=(2, 6), index_interval_bytes=1, truncated=True
    ),
    "v2-multi-i4096-codecs": V2(
        records=2000, batches_per_append=(1, 6), records_per_batch=(1, 30), codecs=V2_CODECS
    ),
    "v2-multi-ihuge-roll": V2(
        records=900,
        batches_per_append=(2, 5),
        codecs=("none", "lz4"),
        index_interval_bytes=HUGE_INTERVAL,
        segment_bytes=8000,
    ),
    "v2-multi-i1-idempotent-roll": V2(
        records=800,
        batches_per_append=(1, 5),
        codecs=("none", "zstd", "snappy"),
        producers="idempotent",
        index_interval_bytes=1,
        segment_bytes=7000,
    ),
    # transactions
    "v2-txn-multi-i1-roll": V2(
        records=900,
        batches_per_append=(1, 5),
        codecs=V2_CODECS,
        producers="transactions",
        index_interval_bytes=1,
        segment_bytes=9000,
        open_transaction=True,
    ),
    "v2-txn-empty-aborts-i1-roll": V2(
        records=700,
        producers="transactions",
        index_interval_bytes=1,
        segment_bytes=3000,
        empty_transactions=True,
    ),
    "v2-txn-single-i4096": V2(
        records=700, codecs=("none", "gzip"), producers="transactions", open_transaction=True
    ),
    "v2-txn-follower-multi-i300": V2(
        records=800,
        batches_per_append=(2, 6),
        codecs=("none", "lz4", "zstd"),
        producers="transactions",
        follower=True,
        index_interval_bytes=300,
    ),
    "v2-txn-nested-aborts-follower-i1-roll": V2(
        records=900,
        batches_per_append=(2, 5),
        codecs=("none", "zstd"),
        producers="transactions",
        follower=True,
        nested_aborts=True,
        index_interval_bytes=1,
        segment_bytes=7000,
    ),
    # compaction gaps, as a follower appends them
    "v2-gaps-follower-multi-i1-roll": V2(
        records=900,
        batches_per_append=(1, 6),
        codecs=("none", "gzip", "zstd"),
        producers="idempotent",
        follower=True,
        gaps=True,
        index_interval_bytes=1,
        segment_bytes=7000,
    ),
    "v2-gaps-follower-single-ihuge": V2(
        records=500, follower=True, gaps=True, index_interval_bytes=HUGE_INTERVAL
    ),
    # the log start moved
    "v2-retention-multi-i1-roll": V2(
        records=1000,
        batches_per_append=(1, 6),
        codecs=("none", "snappy"),
        index_interval_bytes=1,
        segment_bytes=6000,
        start="retention",
    ),
    "v2-deleterecords-txn-multi-i1-roll": V2(
        records=1000,
        batches_per_append=(2, 6),
        codecs=("none", "gzip"),
        producers="transactions",
        index_interval_bytes=1,
        segment_bytes=6000,
        start="delete-records",
    ),
    # legacy message sets
    "v0-i1-roll": Legacy(magic=0, records=700, index_interval_bytes=1, segment_bytes=6000),
    "v0-i4096": Legacy(magic=0, records=900),
    "v1-i1": Legacy(magic=1, records=600, index_interval_bytes=1),
    "v1-ihuge-roll": Legacy(
        magic=1, records=700, index_interval_bytes=HUGE_INTERVAL, segment_bytes=5000
    ),
    "v1-then-v2-i1": Legacy(magic=1, records=400, index_interval_bytes=1, then_v2=400),
    # timestamps far out of order, inside batches and across them; the log's own clock
    "v2-scrambled-multi-i1-codecs-roll": V2(
        records=1200,
        batches_per_append=(1, 4),
        records_per_batch=(1, 25),
        codecs=V2_CODECS,
        index_interval_bytes=1,
        segment_bytes=12000,
        clock="scrambled",
    ),
    # records without a timestamp (-1, kept as the client sent them): whole batches and
    # segments without one, and -1 records among timestamped ones inside batches
    "v2-missing-ts-multi-i1-codecs-roll": V2(
        records=900,
        batches_per_append=(1, 4),
        codecs=("none", "gzip", "lz4"),
        index_interval_bytes=1,
        segment_bytes=7000,
        clock="missing",
    ),
    "v1-scrambled-i4096-roll": Legacy(magic=1, records=600, segment_bytes=8000, clock="scrambled"),
    "v2-logappendtime-multi-i1-roll": V2(
        records=700,
        batches_per_append=(1, 4),
        codecs=("none", "zstd"),
        index_interval_bytes=1,
        segment_bytes=8000,
        timestamp_type="LogAppendTime",
    ),
}


def compacting(name: str) -> TopicConfig:
    """The config that compacts shape ``name`` as written (its segment and index sizes), every
    tombstone and marker horizon passed at once: the cleaner tests' topic."""
    spec = SHAPES[name]
    return TopicConfig(
        cleanup_policy="compact",
        delete_retention_ms=0,
        file_delete_delay_ms=0,
        segment_bytes=spec.segment_bytes,
        index_interval_bytes=spec.index_interval_bytes,
    )


def write_shape(root: Path, name: str, seed: int = 0) -> Shape:
    spec = SHAPES[name]
    if isinstance(spec, Legacy):
        return write_legacy(root, name, spec, seed)
    return write_v2(root, name, spec, seed)


def extend_shape(shape: Shape, records: int, seed: int = 0) -> None:
    spec = SHAPES[shape.name]
    if isinstance(spec, Legacy):
        if spec.then_v2:
            raise ValueError("extend a pure legacy shape")
        extend_legacy(shape, spec, records, seed)
    else:
        extend_v2(shape, spec, records, seed)


# -- the brute force ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Rec:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    control: bool
    producer_id: int
    transactional: bool


@dataclass
class Truth:
    """Everything about one partition decoded from its segment files, byte 0 on."""

    records: list[Rec]  # at or after the log start, control records too, in offset order
    aborted: frozenset[int]  # offsets of records of aborted transactions
    log_start: int
    log_end: int
    lso: int  # the first offset of the oldest open transaction, else the log end
    entries: list[tuple[int, int]]  # (first offset, last offset) of each entry (batch/message)
    segments: list[int]  # base offsets of the live segments
    index_offsets: list[int]  # offsets the .index files name
    #: the largest timestamp of the records still on disk below the log start (DeleteRecords
    #: leaves them there), -1 when none: a search by time that finds one of them is wrong
    hidden_max_timestamp: int = -1

    def timestamps(self, below: int | None = None) -> list[int]:
        """Timestamps a search by time may be asked for: those of records (before ``below``)
        later than every record hidden below the log start."""
        return [
            r.timestamp
            for r in self.records
            if r.timestamp > self.hidden_max_timestamp and (below is None or r.offset < below)
        ]

    def data(self, start: int, end: int, *, committed: bool = False) -> list[Rec]:
        """What a consumer gets for [start, end): no control records; with ``committed``
        nothing at or after the last stable offset and no aborted record."""
        if committed:
            end = min(end, self.lso)
        return [
            r
            for r in self.every(start, end)
            if not r.control and not (committed and r.offset in self.aborted)
        ]

    def every(self, start: int, end: int) -> list[Rec]:
        """Every record of [start, end), control records too."""
        lo = bisect.bisect_left(self._offsets, start)
        return self.records[lo : max(lo, bisect.bisect_left(self._offsets, end))]

    @functools.cached_property
    def _offsets(self) -> list[int]:
        return [r.offset for r in self.records]

    def boundaries(self) -> list[int]:
        """Offsets where bounded reads go wrong: entry and segment boundaries, index entries
        and their neighbours, the log start, end and last stable offset."""
        points = {self.log_start, self.log_end, self.lso}
        for first, last in self.entries:
            points.update((first, last, last + 1))
        points.update(self.segments)
        for o in self.index_offsets:
            points.update((o - 1, o, o + 1))
        return sorted(p for p in points if self.log_start <= p <= self.log_end)


def _log_start_checkpoint(data_dir: Path, topic: str, partition: int) -> int | None:
    path = data_dir / "log-start-offset-checkpoint"
    if not path.exists():
        return None
    lines = path.read_text().split("\n")
    for line in lines[2:]:
        parts = line.split()
        if len(parts) == 3 and parts[0] == topic and int(parts[1]) == partition:
            return int(parts[2])
    return None


def _index_offsets(path: Path, base: int) -> list[int]:
    raw = path.read_bytes() if path.exists() else b""
    out = []
    for i in range(len(raw) // 8):
        rel, pos = struct.unpack_from(">ii", raw, 8 * i)
        if i and rel == 0 and pos == 0:
            break  # preallocated zeros
        out.append(base + rel)
    return out


def truth(directory: Path, log_start_checkpoint: int | None = None) -> Truth:
    """Decode every live ``.log`` of a partition directory from byte 0: no index, no log layer.

    The log start is the later of the first segment's base and ``log_start_checkpoint`` (the
    data directory's ``log-start-offset-checkpoint``, read here when not given)."""
    directory = Path(directory)
    if log_start_checkpoint is None:
        name = directory.name
        topic, _, partition = name.rpartition("-")
        log_start_checkpoint = _log_start_checkpoint(directory.parent, topic, int(partition))
    bases = sorted(offset_from_filename(n) for n in os.listdir(directory) if is_segment_log(n))
    log_start = max([bases[0] if bases else 0, log_start_checkpoint or 0])
    records: list[Rec] = []
    entries: list[tuple[int, int]] = []
    index_offsets: list[int] = []
    open_txns: dict[int, tuple[int, list[int]]] = {}  # pid -> (first offset, record offsets)
    aborted: set[int] = set()
    log_end = bases[-1] if bases else log_start
    for base in bases:
        stem = directory / f"{base:020d}"
        data = (stem.with_suffix(".log")).read_bytes()
        index_offsets += _index_offsets(stem.with_suffix(".index"), base)
        reader = LogReader(data, path=str(stem) + ".log")
        for entry in reader:
            batch_records = entry.records()
            control = bool(entry.is_control)
            pid = entry.producer_id
            txn = bool(entry.is_transactional)
            first = entry.base_offset if isinstance(entry, RecordBatch) else batch_records[0].offset
            entries.append((first, entry.last_offset))
            log_end = max(log_end, entry.last_offset + 1)
            for r in batch_records:
                records.append(Rec(r.offset, r.timestamp, r.key, r.value, control, pid, txn))
            if control and batch_records:
                key = batch_records[0].key or b""
                kind = struct.unpack(">hh", key[:4])[1] if len(key) >= 4 else -1
                if kind in (0, 1):  # ABORT, COMMIT
                    _, offsets = open_txns.pop(pid, (0, []))
                    if kind == 0:
                        aborted.update(offsets)
            elif txn:
                open_txns.setdefault(pid, (entry.base_offset, []))[1].extend(
                    r.offset for r in batch_records
                )
        assert reader.incomplete_tail is None, f"{stem}.log ends in a cut-off entry"
    offsets = [r.offset for r in records]
    assert offsets == sorted(set(offsets)), f"{directory}: offsets not increasing"
    lso = min([log_end, *(first for first, _ in open_txns.values())])
    return Truth(
        records=[r for r in records if r.offset >= log_start],
        aborted=frozenset(aborted),
        log_start=log_start,
        log_end=log_end,
        lso=max(lso, log_start),
        entries=[(f, la) for f, la in entries if la >= log_start],
        segments=bases,
        index_offsets=index_offsets,
        hidden_max_timestamp=max([-1, *(r.timestamp for r in records if r.offset < log_start)]),
    )


# -- a log compacted by a Kafka older than 3.1 ----------------------------------------------------
def compacted_before_kafka_31(shape: Shape, root: Path, spec: V2 | None = None) -> Path:
    """``shape``'s partition as a Kafka older than 3.1 leaves it after two or more cleanings
    with ``delete.retention.ms`` not yet passed (no KIP-534 delete horizon), written under
    ``root``; returns its partition directory.

    That cleaner (``LogCleaner.cleanSegments`` with ``CleanedTransactionMetadata``) cleans every
    segment below the active one and the last stable offset. It removes an aborted transaction's
    batches when it meets them and writes the cleaned segment's ``.txnindex`` entry only for a
    transaction whose batches it met in that cleaning; it keeps the markers (COMMIT and ABORT)
    until ``delete.retention.ms`` after the segment was last changed, their bytes unchanged (no
    horizon stamped in the batch header: that came with 3.1). So from the second cleaning on,
    every ABORT marker in the cleaned range is an emptied transaction's, and no ``.txnindex``
    entry lists it; above the range the log is as written. Other batches are copied whole (a
    cleaner copies a batch whose records all stay byte for byte; the shapes' few repeated keys
    are kept, which changes nothing of the transactions). Written by follower appends, the
    indexes as a broker writes them, then the cleaned range's entries taken out of the
    ``.txnindex`` files; the ``cleaner-offset-checkpoint`` says how far it cleaned."""
    source = shape.directory
    bases = sorted(offset_from_filename(n) for n in os.listdir(source) if is_segment_log(n))
    lso = truth(source).lso
    end = min(bases[-1], lso)  # the first offset the cleaner may not clean
    batches = [
        e
        for base in bases
        for e in LogReader((source / f"{base:020d}.log").read_bytes())
        if isinstance(e, RecordBatch)
    ]
    pending: dict[int, list[int]] = {}  # producer -> indexes of its open transaction's batches
    dropped: set[int] = set()
    for i, b in enumerate(batches):
        if not b.is_transactional:
            continue
        if b.is_control:
            kind = b.control_record().type
            if kind is ControlType.ABORT and b.base_offset < end:
                dropped.update(pending.get(b.producer_id, []))
            pending.pop(b.producer_id, None)
        else:
            pending.setdefault(b.producer_id, []).append(i)
    spec = spec or SHAPES[shape.name]  # how ``shape`` was written (its segment sizes)
    out = root / shape.name / shape.directory.name
    with LogDir(out.parent, writable=True) as logdir:
        log = logdir.log(
            shape.topic,
            shape.partition,
            create=True,
            config=_config(spec.index_interval_bytes, spec.segment_bytes),
        )
        for i, b in enumerate(batches):
            if i not in dropped:
                log.append(
                    bytes(b.buffer[: b.size_in_bytes]),
                    assign_offsets=False,
                    origin="coordinator" if b.is_control else "client",
                )
    # the broker's record of the cleaning (what tells readers the offset gaps are compaction's)
    (out.parent / "cleaner-offset-checkpoint").write_text(
        f"0\n1\n{shape.topic} {shape.partition} {end}\n"
    )
    for path in sorted(out.glob("*.txnindex")):
        data = path.read_bytes()
        kept = b"".join(
            data[at : at + 34]
            for at in range(0, len(data) - len(data) % 34, 34)
            if struct.unpack_from(">q", data, at + 18)[0] >= end  # its marker's offset
        )
        path.write_bytes(kept)
    return out
