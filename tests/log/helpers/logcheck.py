"""Shared by the crash and concurrency tests and by their child processes: the deterministic
records the writers append, and the checks a reader or a recovering parent runs on a log.

Every record's value says which offset it must sit at (and how long its filler is), its key and
timestamp follow from the offset too, so any record can be checked on its own:
``value = b"%012d:%08d:" % (offset, pad) + filler``, ``key = b"k<offset>"``,
``timestamp = T0 + offset``. Each append is one batch, so every offset-index entry must point at
the start of a batch whose last offset is the entry's offset, and every time-index entry is
``(T0 + O, O)`` with ``O`` the last offset of a batch of the segment.

Transactions: a writer sometimes appends a transactional batch under a producer id used for
nothing else, followed (on the next append) by an ABORT or COMMIT marker. A kill in between
leaves a transaction that is never ended; the unique producer id keeps it from mixing with later
ones.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field

from kafkalog.index import OffsetIndex, TimeIndex, TransactionIndex
from kafkalog.log import Log
from kafkalog.records import (
    ControlType,
    Record,
    RecordBatch,
    encode_batch,
    encode_control_batch,
)
from kafkalog.records.reader import IncompleteTail

T0 = 1_700_000_000_000
TOPIC = "crash"
_HEAD = 22  # b"%012d:%08d:"
PRODUCER_BASE = 1_000_000_000  # transactional producer id = PRODUCER_BASE + first offset


class LogCheckError(AssertionError):
    """An invariant of the log does not hold (a test failure, with the details)."""


def _fail(msg: str) -> None:
    raise LogCheckError(msg)


def value_for(offset: int, pad: int) -> bytes:
    return b"%012d:%08d:" % (offset, pad) + bytes((offset % 251,)) * pad


def key_for(offset: int) -> bytes:
    return b"k%d" % offset


def data_batch(first_offset: int, count: int, pad: int, producer_id: int = -1) -> bytes:
    """One batch of ``count`` records meant for offsets ``first_offset...`` (a producer's
    batch: base offset 0, the log assigns the offsets)."""
    recs = [
        Record.of(value_for(o, pad), key_for(o), T0 + o)
        for o in range(first_offset, first_offset + count)
    ]
    if producer_id < 0:
        return encode_batch(recs)
    return encode_batch(
        recs, producer_id=producer_id, producer_epoch=0, base_sequence=0, is_transactional=True
    )


def origin_of(data: bytes) -> str:
    """Who appends ``data``: a transaction marker is the coordinator's, anything else a client's."""
    return "coordinator" if data[22] & 0x20 else "client"


def marker_batch(offset: int, producer_id: int, abort: bool) -> bytes:
    return encode_control_batch(
        ControlType.ABORT if abort else ControlType.COMMIT,
        offset=0,
        timestamp=T0 + offset,
        producer_id=producer_id,
        producer_epoch=0,
    )


def check_record(rec: Record) -> None:
    value = rec.value
    if value is None or len(value) < _HEAD:
        _fail(f"record at offset {rec.offset} has a malformed value {value!r:.60}")
    try:
        offset, pad = int(value[:12]), int(value[13:21])
    except ValueError:
        _fail(f"record at offset {rec.offset} has a malformed value {value[:_HEAD]!r}")
    if offset != rec.offset:
        _fail(f"record at offset {rec.offset} holds the value written for offset {offset}")
    if len(value) != _HEAD + pad or value[_HEAD:] != bytes((offset % 251,)) * pad:
        _fail(f"record at offset {rec.offset}: value filler damaged (pad {pad})")
    if rec.key != key_for(offset) or rec.timestamp != T0 + offset:
        _fail(f"record at offset {rec.offset}: key {rec.key!r} / timestamp {rec.timestamp} wrong")


# -- writing ------------------------------------------------------------------------------------
PROFILES = ("small", "mixed", "large", "index-full")
SEGMENT_INDEX_BYTES = 2048  # 256 offset / 170 time entries; the same for every opener


def profile_config(profile: str, rng: random.Random) -> dict[str, int]:
    """TopicConfig fields for a writer profile, chosen so that it rolls often: on size, or
    ("index-full") because an index filled up first."""
    if profile == "small":
        return {"segment_bytes": 16 * 1024, "index_interval_bytes": rng.choice([0, 128, 1024])}
    if profile == "mixed":
        return {"segment_bytes": 256 * 1024, "index_interval_bytes": rng.choice([256, 4096])}
    if profile == "large":
        return {"segment_bytes": 512 * 1024, "index_interval_bytes": rng.choice([0, 4096])}
    if profile == "index-full":
        return {"segment_bytes": 1024 * 1024, "index_interval_bytes": 0}
    raise ValueError(profile)


class Writer:
    """Appends deterministic batches to a writable log, one batch per append."""

    def __init__(self, log: Log, rng: random.Random, profile: str, txn_rate: float) -> None:
        self.log = log
        self.rng = rng
        self.profile = profile
        self.txn_rate = txn_rate
        self.open_txn: int | None = None  # producer id of the transaction awaiting its marker

    def next_batch(self) -> bytes:
        rng = self.rng
        nxt = self.log.log_end_offset
        if self.open_txn is not None:
            pid, self.open_txn = self.open_txn, None
            return marker_batch(nxt, pid, abort=rng.random() < 0.7)
        large = self.profile == "large" or (self.profile == "mixed" and rng.random() < 0.15)
        if large:  # 64-200 KB: the write takes long enough for kills and readers to land in it
            count = rng.randint(1, 6)
            pad = rng.randint(64 * 1024, 200 * 1024) // count
        else:
            count = rng.randint(1, 20)
            pad = rng.randint(0, 200)
        pid = -1
        if rng.random() < self.txn_rate:
            pid = PRODUCER_BASE + nxt
            self.open_txn = pid
        return data_batch(nxt, count, pad, pid)

    def step(self) -> int:
        """Append one batch; returns its size in bytes."""
        data = self.next_batch()
        first = self.log.log_end_offset
        info = self.log.append(data, origin=origin_of(data))
        if info.first_offset != first:
            _fail(f"append got offset {info.first_offset}, the log end was {first}")
        return info.size


def chunked_append(pieces: int, min_piece: int, pause: float):  # type: ignore[no-untyped-def]
    """A ``SegmentFile.append`` that writes each append in up to ``pieces`` pieces (of at least
    ``min_piece`` bytes) with a pause between them: a slow disk, or the kernel copying a large
    write page by page, made visible. A kill or a concurrent reader then lands inside a write far
    more often than with one ``pwrite``; what it can observe is what a real torn write leaves."""
    import time

    def append(self, data) -> None:  # type: ignore[no-untyped-def]
        view = memoryview(data)
        step = max(min_piece, -(-len(view) // pieces))
        written = 0
        while written < len(view):
            written += os.pwrite(self.fd, view[written : written + step], self.size + written)
            if pause:
                time.sleep(pause)
        self.size += written

    return append


def durable_write(path: str, text: str) -> None:
    """Replace ``path`` by ``text`` so that a crash leaves the old or the new content: write a
    temporary file, fsync it, rename it over ``path``, fsync the directory."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


# -- checking a log at rest (after recovery) ----------------------------------------------------
@dataclass
class LogFacts:
    first_offset: int  # first offset physically present (<= log start offset)
    end_offset: int  # next offset after the last batch
    segments: int = 0
    batches: int = 0
    records: int = 0
    bytes: int = 0
    index_entries: int = 0
    time_entries: int = 0
    aborted: int = 0
    control_offsets: set[int] = field(default_factory=set)


def check_log_at_rest(log: Log, *, deep_from: int = 0) -> LogFacts:
    """Every invariant a log must satisfy once it is opened (and recovered), file by file.

    * every ``.log`` is a whole number of CRC-valid batches (no cut-off tail), the first at the
      segment's base offset, offsets contiguous within and across segments;
    * every data record is the one written for its offset (records of batches ending before
      ``deep_from`` are only CRC-checked, to keep repeated checks of a long log cheap);
    * each ``.index`` and ``.timeindex``, opened read-only, passes ``sanity_check()``, and each of
      their entries names a batch of the segment as described in the module docstring; a
      writable log's own view of an index has exactly the entries that are on disk; a segment
      that is no longer active ends its time index with its largest timestamp;
    * each ``.txnindex`` passes ``sanity_check()`` and lists exactly the aborted transactions
      whose ABORT marker is in the segment;
    * the log's end offset is the end of the last batch.
    """
    segments = log.segments
    if not segments:
        _fail(f"{log.directory}: no segment at all")
    facts = LogFacts(first_offset=segments[0].base_offset, end_offset=segments[0].base_offset)
    expected = segments[0].base_offset
    ongoing: dict[int, int] = {}
    for n, seg in enumerate(segments):
        where = f"{seg.log.path}"
        if seg.base_offset != expected:
            _fail(f"{where}: base offset {seg.base_offset}, expected {expected} (gap or overlap)")
        tail: list[IncompleteTail | None] = []
        pos = 0
        starts: dict[int, RecordBatch] = {}
        last_offsets: set[int] = set()
        aborted_here: list[tuple[int, int | None, int]] = []
        for batch in seg.entries(0, verify_crc=True, tail=tail):
            if not isinstance(batch, RecordBatch):
                _fail(f"{where}: unexpected legacy entry at {batch.position}")
            if batch.position != pos:
                _fail(f"{where}: batch at {batch.position}, expected at {pos}")
            if batch.base_offset != expected:
                _fail(
                    f"{where}: batch at position {pos} starts at offset {batch.base_offset}, "
                    f"expected {expected}"
                )
            if batch.max_timestamp != T0 + batch.last_offset:
                _fail(f"{where}: batch {batch.base_offset} max timestamp {batch.max_timestamp}")
            if batch.is_control:
                (ctl,) = batch.records(log.limits)
                marker = batch.control_record(log.limits)
                if ctl.offset != expected or marker.type not in (
                    ControlType.ABORT,
                    ControlType.COMMIT,
                ):
                    _fail(f"{where}: bad control batch at offset {expected}")
                first = ongoing.pop(batch.producer_id, None)  # None: data batch not kept
                if marker.type is ControlType.ABORT:
                    aborted_here.append((batch.producer_id, first, batch.last_offset))
                facts.control_offsets.add(batch.base_offset)
            else:
                if batch.is_transactional:
                    if batch.producer_id != PRODUCER_BASE + batch.base_offset:
                        _fail(f"{where}: transactional batch {batch.base_offset} wrong producer")
                    ongoing.setdefault(batch.producer_id, batch.base_offset)
                if batch.last_offset >= deep_from:
                    recs = batch.records(log.limits)
                    if len(recs) != batch.last_offset_delta + 1:
                        _fail(f"{where}: batch {batch.base_offset} has {len(recs)} records")
                    for i, rec in enumerate(recs):
                        if rec.offset != expected + i:
                            _fail(f"{where}: record offset {rec.offset}, expected {expected + i}")
                        check_record(rec)
                facts.records += batch.last_offset_delta + 1
            starts[batch.position] = batch
            last_offsets.add(batch.last_offset)
            expected = batch.last_offset + 1
            pos += batch.size_in_bytes
            facts.batches += 1
        if tail and tail[0] is not None:
            _fail(f"{where}: incomplete batch visible after recovery: {tail[0]}")
        if pos != seg.size:
            _fail(f"{where}: batches end at {pos}, the segment has {seg.size} bytes")
        if n + 1 < len(segments) and pos == 0:
            _fail(f"{where}: empty segment before the active one")
        facts.bytes += pos
        active = n + 1 == len(segments)
        _check_indexes(log, seg, starts, last_offsets, active, facts)
        _check_txn_index(seg, aborted_here, facts)
    facts.segments = len(segments)
    facts.end_offset = expected
    if log.log_end_offset != expected:
        _fail(f"{log.directory}: log end offset {log.log_end_offset}, batches end at {expected}")
    return facts


def _check_indexes(
    log: Log,
    seg: object,
    starts: dict[int, RecordBatch],
    last_offsets: set[int],
    active: bool,
    facts: LogFacts,
) -> None:
    from kafkalog.log.segment import LogSegment

    assert isinstance(seg, LogSegment)
    base = seg.base_offset
    path = seg.offset_index.path
    if os.path.exists(path):
        with OffsetIndex(path, base, writable=False) as oi:
            oi.sanity_check()
            prev = -1
            for off, position in oi:
                batch = starts.get(position)
                if batch is None or batch.last_offset != off or off <= prev:
                    _fail(
                        f"{path}: entry ({off}, {position}) does not name a batch ending at "
                        f"{off} (found {batch and (batch.base_offset, batch.last_offset)})"
                    )
                prev = off
            on_disk = oi.entries
            facts.index_entries += on_disk
        if log.writable:
            mine = seg.offset_index.get().entries
            if mine != on_disk:
                _fail(
                    f"{path}: the writable log sees {mine} entries, the file holds {on_disk} "
                    "valid ones (an untrimmed zero tail taken for entries?)"
                )
    elif log.writable and seg.offset_index.is_loaded:
        _fail(f"{path}: loaded by the log but missing on disk")
    tpath = seg.time_index.path
    if os.path.exists(tpath):
        with TimeIndex(tpath, base, writable=False) as ti:
            ti.sanity_check()
            entries = list(ti)
            for ts, off in entries:
                if off not in last_offsets or ts != T0 + off:
                    _fail(f"{tpath}: entry ({ts}, {off}) does not name a batch of the segment")
            on_disk = ti.entries
            facts.time_entries += on_disk
        if not active and last_offsets:
            last = max(last_offsets)
            if not entries or entries[-1] != (T0 + last, last):
                _fail(
                    f"{tpath}: a rolled segment's time index must end with its largest "
                    f"timestamp ({T0 + last}, {last}); it ends with "
                    f"{entries[-1] if entries else None}"
                )
        if log.writable:
            mine = seg.time_index.get().entries
            if mine != on_disk:
                _fail(f"{tpath}: the writable log sees {mine} entries, the file {on_disk}")
    elif not active and last_offsets:
        _fail(f"{tpath}: a rolled segment with data has no time index")


def _check_txn_index(
    seg: object, aborted: list[tuple[int, int | None, int]], facts: LogFacts
) -> None:
    """``aborted``: (producer id, first offset, marker offset) of each ABORT marker of the
    segment, the first offset None when the transaction's data batch is no longer in the log
    (retention): the index then holds the real first offset (written when the marker was
    appended) or the marker's own offset (rebuilt by a recovery that never saw the data)."""
    from kafkalog.log.segment import LogSegment

    assert isinstance(seg, LogSegment)
    path = seg.txn_index.path
    found: list[tuple[int, int, int]] = []
    if os.path.exists(path):
        txn = TransactionIndex(path, seg.base_offset, writable=False)
        try:
            txn.sanity_check()
            if txn.trailing_bytes:
                _fail(f"{path}: {txn.trailing_bytes} trailing bytes (a torn entry)")
            for t in txn.all_aborted_txns():
                if not t.first_offset <= t.last_offset or t.last_stable_offset > t.last_offset + 1:
                    _fail(f"{path}: inconsistent entry {t}")
                found.append((t.producer_id, t.first_offset, t.last_offset))
        finally:
            txn.close()
    ok = len(found) == len(aborted) and all(
        f == (pid, first, last)
        if first is not None
        else f in ((pid, pid - PRODUCER_BASE, last), (pid, last, last))
        for f, (pid, first, last) in zip(found, aborted, strict=False)
    )
    if not ok:
        _fail(f"{path}: aborted transactions {found}, the segment's markers say {aborted}")
    facts.aborted += len(found)


def check_reads(log: Log, facts: LogFacts, rng: random.Random, samples: int = 8) -> None:
    """Offset lookups through the indexes: reading from a random offset starts exactly there
    (or at the next data record when the offset is a transaction marker)."""
    lo, hi = log.log_start_offset, log.log_end_offset
    if hi <= lo:
        return
    for target in [lo, hi - 1] + [rng.randrange(lo, hi) for _ in range(samples)]:
        want = target
        while want in facts.control_offsets:
            want += 1
        got = next(log.records(target), None)
        if want >= hi:
            if got is not None:
                _fail(f"records({target}) returned offset {got.offset}, expected nothing")
            continue
        if got is None or got.offset != want:
            _fail(f"records({target}) starts at {got and got.offset}, expected {want}")
        check_record(got)


# -- checking a live log (a read-only reader while a writer appends) -----------------------------
@dataclass
class ReaderView:
    """What one read of a live log saw."""

    start: int
    end: int  # one past the last offset read (== start when nothing)
    batches: int
    records: int
    torn: bool  # the active segment ended with a batch still being written


def read_live(log: Log, start: int | None = None) -> ReaderView:
    """Read ``log`` (read-only, just refreshed) from ``start`` (default: the log start) and
    check what it yields: whole CRC-valid batches only, offsets contiguous and increasing,
    every record the one written for its offset, and an end that agrees with the log end
    offset the log itself reports. A batch the writer is still writing is simply not there."""
    begin = log.log_start_offset if start is None else start
    expected: int | None = None
    batches = records = 0
    for batch in log.batches(begin):
        if not isinstance(batch, RecordBatch):
            _fail(f"{log.directory}: unexpected legacy entry")
        batch.ensure_valid()
        if expected is None:
            if not batch.base_offset <= begin <= batch.last_offset:
                _fail(f"read from {begin} started with batch {batch.base_offset}")
            expected = batch.base_offset
        if batch.base_offset != expected:
            _fail(f"{log.directory}: batch at {batch.base_offset}, expected {expected}")
        if batch.max_timestamp != T0 + batch.last_offset:
            _fail(f"{log.directory}: batch {batch.base_offset} timestamp {batch.max_timestamp}")
        if not batch.is_control:
            recs = batch.records(log.limits)
            if len(recs) != batch.last_offset_delta + 1:
                _fail(f"{log.directory}: batch {batch.base_offset} has {len(recs)} records")
            for i, rec in enumerate(recs):
                if rec.offset != expected + i:
                    _fail(f"{log.directory}: record {rec.offset}, expected {expected + i}")
                check_record(rec)
            records += len(recs)
        expected = batch.last_offset + 1
        batches += 1
    end = begin if expected is None else expected
    if end != log.log_end_offset and not (expected is None and begin >= log.log_end_offset):
        _fail(
            f"{log.directory}: the reader's batches end at offset {end} but the log it read "
            f"reports log_end_offset={log.log_end_offset} (segments "
            f"{[(s.base_offset, s.size) for s in log.segments]})"
        )
    torn = False
    if log.segments:
        tail: list[IncompleteTail | None] = []
        for _ in log.segments[-1].entries(0, tail=tail):
            pass
        torn = bool(tail)
    return ReaderView(begin, end, batches, records, torn)


# -- idempotent and transactional producers (tests/log/test_crash_producers.py) -----------------
class ProducerWriter:
    """Appends the batches of two idempotent and three transactional producers, interleaved:
    sequences continue per producer, a transaction holds one to six batches (spanning segment
    rolls when segments are small) and ends in COMMIT or, two times in five, ABORT. Now and then
    an idempotent batch is sent twice, as a producer retries; the retry must come back with
    the first write's offsets and add nothing.

    Producer ids are ``first_id .. first_id + 4``; each writer takes fresh ones (a killed
    writer's open transactions are the parent's to abort, as a coordinator would)."""

    def __init__(self, log: Log, rng: random.Random, first_id: int) -> None:
        self.log = log
        self.rng = rng
        self.ids = list(range(first_id, first_id + 5))
        self.seq = dict.fromkeys(self.ids, 0)
        self.in_txn: dict[int, int] = {}  # transactional producer -> batches left before its end

    def step(self) -> int:
        rng, log = self.rng, self.log
        pid = rng.choice(self.ids)
        if pid - self.ids[0] < 2:  # idempotent
            data = self._batch(pid, transactional=False)
            info = log.append(data)
            if rng.random() < 0.15:
                again = log.append(data)
                if not again.duplicate or again != info:
                    _fail(f"retry of producer {pid}: {again}, the first write got {info}")
            return info.size
        left = self.in_txn.get(pid)
        if left == 0:
            del self.in_txn[pid]
            abort = rng.random() < 0.4
            kind = ControlType.ABORT if abort else ControlType.COMMIT
            nxt = log.log_end_offset
            ctl = encode_control_batch(
                kind, offset=0, timestamp=T0 + nxt, producer_id=pid, producer_epoch=0
            )
            return log.append(ctl, origin="coordinator").size
        self.in_txn[pid] = rng.randint(0, 5) if left is None else left - 1
        return log.append(self._batch(pid, transactional=True)).size

    def _batch(self, pid: int, *, transactional: bool) -> bytes:
        nxt = self.log.log_end_offset
        count = self.rng.randint(1, 8)
        recs = [
            Record.of(value_for(o, self.rng.randint(0, 120)), key_for(o), T0 + o)
            for o in range(nxt, nxt + count)
        ]
        seq = self.seq[pid]
        self.seq[pid] = seq + count
        return encode_batch(
            recs,
            producer_id=pid,
            producer_epoch=0,
            base_sequence=seq,
            is_transactional=transactional,
        )
