"""Crash consistency with producer state: writers of idempotent and transactional producers
(``logcheck.ProducerWriter``: transactions spanning segment rolls, two in five aborted, retried
batches) are killed with SIGKILL at random moments, over and over, on one log.

After each kill the parent reopens the log (an unclean open: recovery from the last flushed
recovery point, as the writer's checkpoint says, or from offset 0) and checks, against an
oracle of its own that walks the batches from the log start:

* every flushed or acknowledged record is there, each the one written for its offset;
* each ``.txnindex`` holds exactly the aborted transactions whose ABORT marker is in that
  segment, with the first offset and last stable offset the oracle computes;
* a read_committed reader going by those indexes sees no record of an aborted transaction, and
  the log's last stable offset is the first offset of the oldest transaction still open;
* every ``.snapshot`` holds the producer state a replay from the log start gives at its offset.

Then it aborts the transactions the killed writer left open (as a transaction coordinator does
once they time out), closes the log cleanly, and the next writer continues. Some rounds chain two
kills, so a writer recovers a crashed log itself. ``KAFKALOG_CRASH_SEED`` and
``KAFKALOG_PRODUCER_CRASH_KILLS`` (default 120) override the plan.
"""

from __future__ import annotations

import hashlib
import os
import random
import time
from bisect import bisect_left, bisect_right
from pathlib import Path

from helpers.logcheck import T0, check_record
from test_crash import SEED, ForkServer, WriterProc, fork_server  # noqa: F401 - the fixture

from kafkalog.index import TransactionIndex
from kafkalog.index.txn_index import AbortedTxn
from kafkalog.log import Log, TopicConfig
from kafkalog.log.producer_snapshot import read_snapshot, snapshot_offsets
from kafkalog.log.producer_state import ProducerStateManager
from kafkalog.records import ControlType, RecordBatch, encode_control_batch

KILLS = int(os.environ.get("KAFKALOG_PRODUCER_CRASH_KILLS", "120"))
PARENT_CONFIG = TopicConfig(segment_bytes=4096, index_interval_bytes=128, retention_ms=-1)


class Verified:
    """What earlier rounds' oracle checks already proved, so a round checks only what changed.

    Each round walks the whole log again (it grows to ~8,000 offsets and ~100 snapshots over
    120 rounds), and re-deriving the same verdict from the same bytes was most of the test's
    time. A verdict is reused only when the bytes it was derived from are byte-identical: a
    batch's records were checked against its exact bytes (offsets included); a snapshot was
    compared with a replay of exactly the same log prefix (its digest) and has exactly the same
    file bytes. Anything a crash or a recovery rewrote differs and is checked afresh.
    """

    def __init__(self) -> None:
        self.batches: set[bytes] = set()
        self.snapshots: set[tuple[int, bytes, bytes]] = set()


def oracle_check(log: Log, stats: dict[str, int], verified: Verified | None = None) -> None:
    """Everything the module docstring lists, from one walk over the batches."""
    verified = verified or Verified()
    directory = Path(log.directory)
    bases = [s.base_offset for s in log.segments]
    open_txns: dict[int, int] = {}
    txn_batches: dict[int, list[RecordBatch]] = {}
    expected_index: dict[int, list[AbortedTxn]] = {}
    aborted_offsets: set[int] = set()
    #: each producer's transactional records' offsets, ascending (the walk's order)
    txn_offsets: dict[int, list[int]] = {}
    snapshots = [o for o in snapshot_offsets(directory) if o <= log.log_end_offset]
    state = ProducerStateManager(str(directory), writable=False)
    pending = list(snapshots)
    spans = 0
    prefix = hashlib.sha256()  # of the bytes of every batch the replay has applied so far

    def check_snapshot(offset: int) -> None:
        path = directory / f"{offset:020d}.snapshot"
        key = (offset, prefix.digest(), path.read_bytes())
        if key not in verified.snapshots:
            got = read_snapshot(path)
            assert got == state.entries(), f"snapshot {offset} differs from a replay"
            verified.snapshots.add(key)

    def segment_of(offset: int) -> int:
        return bases[bisect_right(bases, offset) - 1]  # the last base at or before offset

    for batch in log.batches():
        assert isinstance(batch, RecordBatch)
        while pending and pending[0] <= batch.base_offset:
            check_snapshot(pending.pop(0))
        state.update(batch, log.limits)
        raw = bytes(batch.buffer)
        prefix.update(raw)
        pid = batch.producer_id
        if batch.is_control:
            marker = batch.control_record(log.limits)
            first = open_txns.pop(pid, None)
            batches = txn_batches.pop(pid, [])
            if first is not None:
                spans += segment_of(first) != segment_of(batch.base_offset)
            if marker.type is ControlType.ABORT and first is not None:
                lso = min(open_txns.values(), default=batch.base_offset + 1)
                segment = segment_of(batch.base_offset)
                expected_index.setdefault(segment, []).append(
                    AbortedTxn(pid, first, batch.base_offset, lso)
                )
                for b in batches:
                    aborted_offsets.update(range(b.base_offset, b.last_offset + 1))
            continue
        if raw not in verified.batches:
            for rec in batch.records(log.limits):
                check_record(rec)
            verified.batches.add(raw)
        if batch.is_transactional:
            open_txns.setdefault(pid, batch.base_offset)
            txn_batches.setdefault(pid, []).append(batch)
            txn_offsets.setdefault(pid, []).extend(range(batch.base_offset, batch.last_offset + 1))
    for offset in pending:  # snapshots at the log end
        check_snapshot(offset)
    stats["snapshots checked"] += len(snapshots)
    stats["transactions spanning a roll"] = max(stats["transactions spanning a roll"], spans)
    found: dict[int, list[AbortedTxn]] = {}
    for seg in log.segments:
        path = seg.txn_index.path
        if os.path.exists(path):
            idx = TransactionIndex(path, seg.base_offset, writable=False)
            try:
                entries = idx.all_aborted_txns()
            finally:
                idx.close()
            if entries:
                found[seg.base_offset] = entries
    assert found == expected_index, "the .txnindex files differ from the oracle's"
    stats["aborted transactions"] = max(
        stats["aborted transactions"], sum(map(len, found.values()))
    )
    # a read_committed reader hides the records its aborted-transaction entries cover: the
    # producer's transactional offsets in [first_offset, last_offset)
    hidden = set()
    for entries in found.values():
        for t in entries:
            mine = txn_offsets.get(t.producer_id, [])
            hidden.update(
                mine[bisect_left(mine, t.first_offset) : bisect_left(mine, t.last_offset)]
            )
    assert hidden == aborted_offsets, "read_committed would see an aborted record"
    assert log.last_stable_offset() == min(open_txns.values(), default=log.log_end_offset)


def abort_dangling(log: Log) -> int:
    """Abort the transactions a killed writer left open, as the coordinator would."""
    state = log.producer_state
    n = 0
    for pid in sorted(state.ongoing_transactions()):
        entry = state.last_entry(pid)
        assert entry is not None
        log.append(
            encode_control_batch(
                ControlType.ABORT,
                offset=0,
                timestamp=T0 + log.log_end_offset,
                producer_id=pid,
                producer_epoch=entry.producer_epoch,
            ),
            origin="coordinator",
        )
        n += 1
    assert state.first_unstable_offset() is None
    return n


def test_sigkill_during_idempotent_and_transactional_appends(
    tmp_path: Path,
    fork_server: ForkServer,  # noqa: F811 - the fixture imported above
) -> None:
    partition = tmp_path / "producers-0"
    flushed_file = tmp_path / "flushed"
    must_have = 0
    stats: dict[str, int] = dict.fromkeys(
        ["kills", "recoveries checked", "chained kills", "full recoveries", "snapshots checked"],
        0,
    )
    stats["aborted transactions"] = stats["dangling aborted"] = 0
    stats["transactions spanning a roll"] = 0
    began = time.monotonic()
    verified = Verified()
    for n in range(KILLS):
        rng = random.Random(f"{SEED}:producers:{n}")
        params = {
            "mode": "producers",
            "partition_dir": str(partition),
            "flushed_file": str(flushed_file),
            "seed": rng.getrandbits(32),
            "first_id": 10_000 + 10 * n,
            "appends": rng.randint(10, 60),
            "segment_bytes": rng.choice([2048, 4096, 16384]),
            "flush_messages": rng.choice([1, 3, 10, 1000]),
        }
        proc: WriterProc = fork_server.start(params)
        try:
            ready = proc.wait_ready()
            assert ready.end >= must_have, f"the writer opened a log ending at {ready.end}"
            time.sleep(rng.uniform(0.002, 0.05))
            proc.kill()
            proc.wait_dead()
        except BaseException:
            proc.ensure_dead()
            raise
        if not proc.killed_by_sigkill():
            proc.fail(f"did not die of SIGKILL (status {proc.status})")
        stats["kills"] += 1
        flushed = int(flushed_file.read_text()) if flushed_file.exists() else 0
        must_have = max(must_have, proc.acked, flushed)
        if rng.random() < 0.2 and n + 1 < KILLS:
            stats["chained kills"] += 1
            continue
        full = rng.random() < 0.2
        stats["full recoveries"] += full
        log = Log(partition, PARENT_CONFIG, recovery_point=0 if full else flushed)
        try:
            assert log.log_end_offset >= must_have, "flushed or acknowledged records were lost"
            oracle_check(log, stats, verified)
            stats["dangling aborted"] += abort_dangling(log)
        finally:
            log.close()
        flushed_file.write_text(str(log.log_end_offset))  # the clean close flushed it all
        must_have = log.log_end_offset
        stats["recoveries checked"] += 1
    with Log(partition, PARENT_CONFIG, recovery_point=0) as log:
        oracle_check(log, stats)
    print(f"\nproducer crash test: {time.monotonic() - began:.1f} s, log end {must_have}, {stats}")
    assert stats["kills"] == KILLS
    assert stats["aborted transactions"] > 0 and stats["dangling aborted"] > 0
    assert stats["transactions spanning a roll"] > 0
