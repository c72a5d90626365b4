"""The log cleaner with other work on the same log at the same time (issue 24): appends from
another thread during cleanings, retention and truncation taking segments in the middle of a
round, and readers (``Log.records``, ``Log.read_arrow``, ``Log.fetch``, a ``TailReader``)
iterating while a swap happens.

The interleavings that matter are made deterministic through the cleaner's ``on_step`` seam
(told each step of a round's swap, in the cleaning thread, before the log's lock is taken for
the swap at ``cleaned-written`` and inside it after); the free-running test (appends against
cleanings) checks what must hold whatever the interleaving."""

from __future__ import annotations

import dataclasses
import os
import random
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kafkalog.cli.verify import Report, verify_partition
from kafkalog.log import Log, TopicConfig
from kafkalog.log.cleaner import CleaningAborted, clean_log, read_checkpoint
from kafkalog.log.tail import TailReader
from kafkalog.records import Record, RecordBatch, encode_batch
from kafkalog.records.batch import encode_control_batch
from kafkalog.records.model import ControlType
from kafkalog.records.types import Compression

KEYS = [b"k%02d" % i for i in range(24)]


def config(**kw: object) -> TopicConfig:
    base: dict[str, object] = {
        "cleanup_policy": "compact",
        "segment_bytes": 1024,
        # old segments stay readable a while after a swap or retention took them out, as on
        # a broker: a reader that holds one keeps reading it
        "file_delete_delay_ms": 60_000,
        "delete_retention_ms": 50,
    }
    base.update(kw)
    return TopicConfig(**base)  # type: ignore[arg-type]


class History:
    """Everything appended, in offset order, and the fate of each transaction: the brute
    force the log's reading is compared with (as tests/log/test_cleaner_property.py)."""

    def __init__(self) -> None:
        self.records: list[tuple[int, bytes | None, bytes | None, int]] = []
        self.aborted: set[tuple[int, int]] = set()  # (pid, offset)
        self.next_offset = 0
        self.seq = {1: 0, 2: 0, 3: 0}  # the producers' next sequence numbers
        self.open_txn: dict[int, list[int]] = {}  # pid -> offsets of its open transaction

    def took(self, first: int, last: int) -> None:
        """An append got offsets [first, last]: they follow the previous append's."""
        assert first == self.next_offset, (first, self.next_offset)
        self.next_offset = last + 1

    def latest(self, below: int) -> dict[bytes, bytes | None]:
        out: dict[bytes, bytes | None] = {}
        for offset, key, value, pid in self.records:
            if offset < below and key is not None and (pid, offset) not in self.aborted:
                out[key] = value
        return out

    def written(self) -> set[tuple[int, bytes | None, bytes | None]]:
        return {(o, k, v) for o, k, v, _ in self.records}


def write(
    log: Log,
    history: History,
    rng: random.Random,
    ops: int,
    every: Callable[[int], None] = lambda i: None,
) -> None:
    """``ops`` appends of every shape a compacted topic gets: plain batches of one or more
    records (tombstones among them, compressed or not), an idempotent producer's batches,
    transactions committed and aborted (each with its marker), and a roll now and then (the
    segment size rolls the rest)."""
    seq, open_txn = history.seq, history.open_txn
    for i in range(ops):
        every(i)
        kind = rng.random()
        if kind < 0.55:
            recs = [
                Record(-1, 1000 + i, rng.choice(KEYS), None if rng.random() < 0.15 else b"v%d" % i)
                for _ in range(rng.randint(1, 4))
            ]
            codec = rng.choice([Compression.NONE, Compression.GZIP, Compression.ZSTD])
            info = log.append(encode_batch(recs, compression=codec))
            history.took(info.first_offset, info.last_offset)
            for k, r in enumerate(recs):
                history.records.append((info.first_offset + k, r.key, r.value, -1))
        elif kind < 0.85:
            pid = rng.choice([1, 2, 3])  # 1 and 2 transactional, 3 idempotent
            key = rng.choice(KEYS)
            value = None if rng.random() < 0.15 else b"p%d-%d" % (pid, i)
            batch = encode_batch(
                [Record(-1, 1000 + i, key, value)],
                producer_id=pid,
                producer_epoch=0,
                base_sequence=seq[pid],
                is_transactional=pid != 3,
            )
            seq[pid] += 1
            info = log.append(batch)
            history.took(info.first_offset, info.last_offset)
            history.records.append((info.first_offset, key, value, pid))
            if pid != 3:
                open_txn.setdefault(pid, []).append(info.first_offset)
        elif kind < 0.97:
            pid = rng.choice([1, 2])
            if pid in open_txn:
                end_txn(log, history, open_txn, pid, commit=rng.random() < 0.6)
        else:
            log.roll()
    for pid in list(open_txn):  # nothing left open: the last stable offset is the log end
        end_txn(log, history, open_txn, pid, commit=True)


def end_txn(
    log: Log, history: History, open_txn: dict[int, list[int]], pid: int, *, commit: bool
) -> None:
    marker = encode_control_batch(
        ControlType.COMMIT if commit else ControlType.ABORT,
        offset=0,
        timestamp=1000,
        producer_id=pid,
        producer_epoch=0,
    )
    info = log.append(marker, origin="coordinator")
    history.took(info.first_offset, info.last_offset)
    offsets = open_txn.pop(pid)
    if not commit:
        history.aborted.update((pid, o) for o in offsets)


def read_committed(log: Log, below: int) -> tuple[dict[bytes, bytes | None], list[tuple]]:
    """The latest value of each key a read_committed consumer sees below ``below``, and every
    record it reads (offset, key, value)."""
    aborted = log.aborted_transactions(0, log.log_end_offset)
    out: dict[bytes, bytes | None] = {}
    seen = []
    for batch in log.batches(0, below):
        assert isinstance(batch, RecordBatch)
        if batch.is_control:
            continue
        for r in batch.records():
            if r.offset >= below:
                continue
            seen.append((r.offset, r.key, r.value))
            if batch.is_transactional and any(
                t.producer_id == batch.producer_id and t.first_offset <= r.offset <= t.last_offset
                for t in aborted
            ):
                continue
            assert r.key is not None
            out[r.key] = r.value
    return out, seen


def assert_latest(got: dict[bytes, bytes | None], want: dict[bytes, bytes | None]) -> None:
    """Per key the latest value; a tombstone the cleaner removed reads as the key's absence."""
    for key in KEYS:
        if want.get(key) is None:
            assert got.get(key) is None, (key, got.get(key), want.get(key))
        else:
            assert got.get(key) == want[key], (key, got.get(key), want[key])


def verify(directory: Path) -> None:
    report = Report()
    verify_partition(str(directory), report)
    assert report.problems == [], report.problems
    assert report.segments > 0


def records_of(log: Log, start: int | None = None) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for r in log.records(start)]


def in_thread(fn: Callable[..., object], *args: object) -> None:
    """Run ``fn`` in another thread and wait for it; its exception is raised here."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn(*args)
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if errors:
        raise errors[0]


def steps_calling(at: str, action: Callable[[], None]) -> Callable[[str], None]:
    """An ``on_step`` that runs ``action`` once, when the round reaches step ``at``."""
    done = [False]

    def on_step(step: str) -> None:
        if step == at and not done[0]:
            done[0] = True
            action()

    return on_step


# -- 1. appends from another thread while cleanings run -------------------------------------------


def test_appends_readers_and_cleanings_at_once_lose_nothing(tmp_path: Path) -> None:
    """A writer thread appends every shape (rolls, transactions, tombstones) while a cleaner
    thread cleans the log round after round with the log's lock, and a reader thread reads it
    through ``Log.records`` and ``Log.read_arrow``: every append gets the offsets after the
    previous one's, no reader sees an error, a duplicate or a record never written, and at the
    end the log gives per key exactly the brute force's latest value, verifies, and reloads
    to the same records."""
    directory = tmp_path / "data" / "t-0"
    log = Log(directory, config())
    history = History()
    stop = threading.Event()
    errors: list[BaseException] = []
    rounds = [0, 0]  # cleanings that ran, and those that removed records
    reads: list[list[tuple[int, bytes | None, bytes | None]]] = []

    def guarded(fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                fn()
            except BaseException as e:  # handed to the main thread's assertion
                errors.append(e)
                stop.set()

        return run

    # paced: a thread taking the log's lock in a tight loop starves the others (Python's
    # locks are not fair), so every 40 appends the writer lets the cleaner and the reader go
    # and waits until the cleaning is under way (its first progress report, made outside the
    # lock), then appends while the cleaning maps, filters and swaps
    may_clean, may_read = threading.Semaphore(0), threading.Semaphore(0)
    started = threading.Event()

    def appended(i: int) -> None:
        if i % 40 == 0:
            may_clean.release()
            may_read.release()
            started.wait(timeout=10)
            started.clear()

    def writer() -> None:
        rng = random.Random(24)
        for _ in range(4):
            write(log, history, rng, 200, appended)
        may_clean.release()
        may_read.release()

    def cleaner() -> None:
        while not stop.is_set():
            may_clean.acquire(timeout=1)
            result = clean_log(log, lock=log.lock, progress=lambda *_: started.set())
            started.set()  # (also when there was nothing to clean)
            rounds[0] += 1
            if result.stats.records_kept < result.stats.records_read:
                rounds[1] += 1

    def reader() -> None:
        while not stop.is_set():
            may_read.acquire(timeout=1)
            got = records_of(log)
            offsets = [o for o, _, _ in got]
            assert offsets == sorted(set(offsets)), "a read out of order or twice"
            reads.append(got)
            table = log.read_arrow()
            arrow_offsets = table.column("offset").to_pylist()
            assert arrow_offsets == sorted(set(arrow_offsets))
            reads.append(
                list(
                    zip(
                        arrow_offsets,
                        table.column("key").to_pylist(),
                        table.column("value").to_pylist(),
                        strict=True,
                    )
                )
            )

    threads = [threading.Thread(target=guarded(f)) for f in (writer, cleaner, reader)]
    for t in threads:
        t.start()
    threads[0].join()
    stop.set()
    for t in threads[1:]:
        t.join()
    assert not errors, errors
    assert rounds[1] >= 3, rounds  # the cleanings did remove records while appends went on

    assert log.log_end_offset == history.next_offset
    written = history.written()
    for got in reads:  # every record a reader saw is one that was written, at its offset
        assert set(got) <= written
    clean_log(log, lock=log.lock)  # and a last cleaning with nothing racing it
    lso = log.last_stable_offset()
    assert lso == log.log_end_offset
    got, seen = read_committed(log, lso)
    assert set(seen) <= written
    assert_latest(got, history.latest(lso))
    # the records from the cleaner checkpoint on (the active segment) were never cleaned:
    # every one written is there
    checkpoint = read_checkpoint(str(tmp_path / "data"))[("t", 0)]
    assert checkpoint == log.active_segment.base_offset
    assert [r for r in seen if r[0] >= checkpoint] == sorted(
        r for r in written if r[0] >= checkpoint
    )
    before = records_of(log)
    log.close()
    verify(directory)
    with Log(directory, config()) as again:
        assert records_of(again) == before
        assert again.log_end_offset == history.next_offset


# -- 2. retention and truncation in the middle of a round -----------------------------------------


def fill(log: Log, history: History, segments: int) -> None:
    """Keyed records over ``segments`` rolled segments (every key rewritten in each)."""
    i = 0
    while len(log.segments) < segments:
        info = log.append_records([Record(-1, 1000, KEYS[i % 8], b"v%d" % i)])
        history.took(info.first_offset, info.last_offset)
        history.records.append((info.first_offset, KEYS[i % 8], b"v%d" % i, -1))
        i += 1


def files_of(directory: Path, suffix: str) -> set[str]:
    return {n for n in os.listdir(directory) if n.endswith(suffix)}


@pytest.mark.parametrize("at", ["cleaned-written", "clean"])
def test_retention_taking_a_segment_mid_round_aborts_the_cleaning(tmp_path: Path, at: str) -> None:
    """DeleteRecords and a retention pass (``cleanup.policy=compact,delete``) in another thread
    take the first segments while a round cleans them (after its ``.cleaned`` segment is
    written, or after its first segment was read): the round is aborted (CleaningAborted), its
    ``.cleaned`` files removed, the deleted segments stay deleted (in the log, on disk and
    after a reload), every record from the new log start is still there, and the next
    cleaning succeeds."""
    directory = tmp_path / "data" / "t-0"
    cfg = config(cleanup_policy="compact,delete", segment_bytes=400, retention_ms=-1)
    log = Log(directory, cfg)
    history = History()
    fill(log, history, 8)
    bases = [s.base_offset for s in log.segments]
    new_start = bases[2] + 1  # inside the third segment: the first two go
    before = records_of(log, new_start)
    retained = threading.Event()

    def retention() -> None:
        log.increment_log_start_offset(new_start)
        assert log.delete_old_segments() == 2
        retained.set()

    def in_another_thread() -> None:
        in_thread(retention)

    hooks: dict[str, object] = {}
    if at == "clean":
        hooks["progress"] = lambda phase, done, total: (
            in_another_thread() if phase == "clean" and not retained.is_set() else None
        )
    else:
        hooks["on_step"] = steps_calling(at, in_another_thread)
    with pytest.raises(CleaningAborted, match="during its cleaning"):
        clean_log(log, lock=log.lock, **hooks)  # type: ignore[arg-type]
    assert retained.is_set()
    assert [s.base_offset for s in log.segments] == bases[2:]
    assert log.log_start_offset == new_start
    assert not files_of(directory, ".cleaned") and not files_of(directory, ".swap")
    gone = {f"{b:020d}.log" for b in bases[:2]}
    assert not gone & files_of(directory, ".log")
    assert records_of(log) == before  # nothing else lost, nothing cleaned yet
    assert ("t", 0) not in read_checkpoint(str(tmp_path / "data"))

    result = clean_log(log, lock=log.lock)  # the next round succeeds
    assert result.rounds == 1 and result.stats.records_kept < result.stats.records_read
    want = {k: v for o, k, v, _ in history.records if o >= new_start}
    got = {k: v for _, k, v in records_of(log)}
    assert got == want
    after = records_of(log)
    log.close()
    verify(directory)
    with Log(directory, cfg) as again:
        # the log start retention moved is kept across the close (issue 32 §9: the data
        # directory's log-start-offset-checkpoint, or a file beside a log on its own)
        assert again.log_start_offset == new_start
        assert records_of(again, new_start) == after
        assert not gone & files_of(directory, ".log")


def test_retention_waits_for_a_swap_in_progress(tmp_path: Path) -> None:
    """A retention pass started from another thread while a swap is under way (``kafkalog
    serve`` runs retention on its event loop and the cleaner in a worker) waits for the
    log's lock: it never takes out a segment the swap is replacing, which would leave the
    cleaned segment's files on disk to come back at the next load."""
    directory = tmp_path / "data" / "t-0"
    cfg = config(cleanup_policy="compact,delete", segment_bytes=400, retention_ms=-1)
    log = Log(directory, cfg)
    history = History()
    fill(log, history, 6)
    bases = [s.base_offset for s in log.segments]
    new_start = bases[1] + 1
    blocked: list[bool] = []
    thread = threading.Thread(target=log.delete_old_segments)

    def during_swap() -> None:
        log.increment_log_start_offset(new_start)  # same thread: the lock is re-entrant
        thread.start()
        thread.join(timeout=0.3)
        blocked.append(thread.is_alive())

    clean_log(log, lock=log.lock, on_step=steps_calling("swap-renamed", during_swap))
    thread.join()
    assert blocked == [True]
    after = records_of(log)
    assert after[0][0] >= new_start
    log.close()
    verify(directory)
    with Log(directory, cfg) as again:
        assert records_of(again) == after
        assert [s.base_offset for s in again.segments] == [s.base_offset for s in log.segments]


def test_truncation_mid_round_aborts_the_cleaning(tmp_path: Path) -> None:
    """A truncation during a round (what a follower's divergence or an embedded program
    does), here past the group being cleaned: the round is aborted before its swap, since
    what the group drops was superseded by records the truncation may have cut (k04's only
    value below the target would go); the records below the target all stay, and a cleaning
    after gives the latest of each."""
    directory = tmp_path / "data" / "t-0"
    log = Log(directory, config(segment_bytes=400))
    history = History()
    fill(log, history, 6)
    bases = [s.base_offset for s in log.segments]
    target = bases[2] + 2

    def truncate() -> None:
        in_thread(log.truncate_to, target)

    with pytest.raises(CleaningAborted):
        clean_log(log, lock=log.lock, on_step=steps_calling("cleaned-written", truncate))
    assert log.log_end_offset == target
    expected = [(o, k, v) for o, k, v, _ in history.records if o < target]
    assert records_of(log) == expected
    assert not files_of(directory, ".cleaned")
    log.close()
    with Log(directory, config(segment_bytes=400)) as again:
        assert records_of(again) == expected
        again.compact()
        assert {k: v for _, k, v in records_of(again)} == {k: v for _, k, v in expected}


# -- 3. readers while a swap happens --------------------------------------------------------------


def cleanable(tmp_path: Path, group_bytes: int = 400) -> tuple[Path, Log, History]:
    """A log of 6 segments of 400 bytes, cleaned in groups of ``group_bytes`` (400: each
    segment its own group; 4000: all in one)."""
    directory = tmp_path / "data" / "t-0"
    log = Log(directory, config(segment_bytes=400))
    history = History()
    fill(log, history, 6)
    log.reconfigure(dataclasses.replace(log.config, segment_bytes=group_bytes))
    return directory, log, history


@pytest.mark.parametrize("group_bytes", [400, 4000])
def test_a_read_started_before_a_swap_reads_the_old_segments(
    tmp_path: Path, group_bytes: int
) -> None:
    """``Log.records`` and ``Log.batches`` begun before a cleaning, and read on a little at
    each step of its first swap from another thread, give exactly the records of the log as
    it was when the read began: the segments they hold stay readable after the swap."""
    _, log, _ = cleanable(tmp_path, group_bytes)
    old = records_of(log)
    readers = [log.records(), log.records(old[5][0]), (r for b in log.batches() for r in b)]
    got: list[list[tuple[int, bytes | None, bytes | None]]] = [[], [], []]

    def advance() -> None:
        for reader, out in zip(readers, got, strict=True):
            for r in reader:
                out.append((r.offset, r.key, r.value))
                break  # one record a step: the readers are still in segments the round changes

    swapped = [False]

    def on_step(step: str) -> None:
        if not swapped[0]:
            in_thread(advance)  # iterating takes no lock: it runs mid-swap
        swapped[0] = swapped[0] or step == "swapped"

    advance()
    clean_log(log, lock=log.lock, on_step=on_step)
    assert len(records_of(log)) < len(old)  # the cleaning removed records meanwhile
    advance()
    for reader, out in zip(readers, got, strict=True):
        out.extend((r.offset, r.key, r.value) for r in reader)
    assert got == [old, old[5:], old]


@pytest.mark.parametrize("group_bytes", [400, 4000])
def test_a_read_started_during_a_swap_sees_old_or_new(tmp_path: Path, group_bytes: int) -> None:
    """Readers started in other threads at each step of a round's swaps (``Log.records``,
    ``Log.read_arrow``; one segment per group, or several) give the log as it was before or
    after a group's swap, never a mix within a swap, a duplicate or an error."""
    _, log, _ = cleanable(tmp_path, group_bytes)
    old = records_of(log)
    seen: list[list[tuple[int, bytes | None, bytes | None]]] = []
    errors: list[BaseException] = []

    def read_all() -> None:
        try:
            seen.append(records_of(log))
            table = log.read_arrow()
            seen.append(
                list(
                    zip(
                        table.column("offset").to_pylist(),
                        table.column("key").to_pylist(),
                        table.column("value").to_pylist(),
                        strict=True,
                    )
                )
            )
        except BaseException as e:
            errors.append(e)

    threads: list[threading.Thread] = []
    states = [old]  # the log after each group's swap (the swapping thread holds the lock)

    def on_step(step: str) -> None:
        if step == "swapped":
            states.append(records_of(log))
        threads.append(threading.Thread(target=read_all))
        threads[-1].start()  # not joined here: inside the swap they wait for the lock

    clean_log(log, lock=log.lock, on_step=on_step)
    for t in threads:
        t.join()
    assert not errors, errors
    assert states[-1] == records_of(log) != old
    assert len(seen) >= 8
    for got in seen:
        assert got in states, got


def test_a_consumer_offset_compaction_removed_continues_at_the_next_survivor(
    tmp_path: Path,
) -> None:
    """Every offset of the log, removed by the cleaning or not, read from after it: the first
    record is the next surviving one (``Log.records``, ``Log.read_arrow`` and a fetch)."""
    _, log, _ = cleanable(tmp_path)
    log.compact()
    left = records_of(log)
    survivors = [o for o, _, _ in left]
    for offset in range(log.log_start_offset, log.log_end_offset):
        nxt = next(o for o in survivors if o >= offset)
        assert records_of(log, offset)[0][0] == nxt
        assert log.read_arrow(offset).column("offset")[0].as_py() == nxt
        fetched = log.fetch(offset, 1).region
        assert fetched is not None
        assert any(
            r.offset == nxt
            for b in batches_in(fetched.read())
            for r in b.records()
            if r.offset >= offset
        )


def batches_in(data: bytes) -> Iterator[RecordBatch]:
    from kafkalog.records import LogReader

    for entry in LogReader(data):
        assert isinstance(entry, RecordBatch)
        yield entry


@pytest.mark.parametrize("group_bytes", [400, 4000])
@pytest.mark.parametrize("at", ["before", "swap-renamed", "old-deleted", "swapped"])
def test_a_tail_reader_across_a_swap_reads_every_survivor_once(
    tmp_path: Path, at: str, group_bytes: int
) -> None:
    """A ``TailReader`` that has read part of the first segment when the cleaning replaces the
    first segments with one (polled at each step of the swap, and on after it): it reads on
    from its position, each offset once and in order, every record the log holds after the
    cleaning past that position included, and counts nothing as skipped."""
    directory, log, _ = cleanable(tmp_path, group_bytes)
    old = records_of(log)
    with TailReader(directory) as tail:
        got = [(r.offset, r.key, r.value) for r in tail.poll(max_records=3)]
        assert got == old[:3]

        def poll() -> None:
            # long enough for the reader to list the directory again (it does every 0.1 s
            # while the log does not grow): the swap's state is what it sees, whatever it is
            more = tail.poll(timeout=0.25, max_records=3)
            got.extend((r.offset, r.key, r.value) for r in more)
            if len(more) < 3:
                got.extend((r.offset, r.key, r.value) for r in tail.poll(timeout=0.25))

        if at == "before":
            poll()
            poll()
        steps = {"old-deleted": f"old-deleted:{log.segments[1].base_offset}"}
        clean_log(log, lock=log.lock, on_step=steps_calling(steps.get(at, at), poll))
        last = records_of(log)[-1][0]  # (in the active segment: never cleaned)
        while got[-1][0] < last:
            more = tail.poll(timeout=5)
            assert more, got
            got.extend((r.offset, r.key, r.value) for r in more)
        assert tail.skipped == 0
    offsets = [o for o, _, _ in got]
    assert offsets == sorted(set(offsets))
    new = records_of(log)
    assert new != old
    # what it read: the old log up to where it was when the swap came, then the new one
    k = 0
    while k < len(got) and k < len(old) and got[k] == old[k]:
        k += 1
    assert k >= 3
    assert got[k:] == [r for r in new if r[0] > got[k - 1][0]]
