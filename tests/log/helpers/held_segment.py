"""A reader that holds a segment (and its indexes) while the log deletes or closes it: the child
process of tests/log/test_segment_lifetime.py, so that a SIGSEGV kills only this process.

``held_segment.py <scenario> <directory>`` builds a partition in ``directory`` whose first
segment has a 2,000,000-entry ``.index`` and ``.timeindex`` (written directly with numpy: 2,000
two-record batches, each spanning 1,000 offsets, every offset indexed), holds that segment, runs
the scenario and prints one JSON object: for each phase, each public read path and what it gave
(``"same"`` as before, ``"closed"`` for a :class:`ClosedError`, ``"kafkalog"`` for another
KafkalogError, else the exception's type and message, or ``"different"``).

Scenarios: ``delay`` (retention with a 1.5 s ``file.delete.delay.ms``: phase ``during`` right
after retention, phase ``after`` once the files are gone), ``now`` (delay 0: phase ``after``),
``close`` (``Log.close``: phase ``after``, the log's own reads included), ``close-during-delay``
(retention with a 60 s delay, then ``Log.close``: phase ``after``, then reopen: ``.deleted``
files removed), ``threads`` (reader threads on the held segment while the delayed deletion
closes it: phase ``threads`` counts answers that were right, ClosedErrors and anything else).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from kafkalog.errors import ClosedError, KafkalogError
from kafkalog.index import AbortedTxn, TransactionIndex
from kafkalog.log import Log, LogSegment, TopicConfig
from kafkalog.records import Record, encode_batch

ENTRIES = 2_000_000
SPAN = 1_000  # offsets per batch
BATCHES = ENTRIES // SPAN
T0 = 1_700_000_000_000
TXNS = [AbortedTxn(7, 10, 20, 21), AbortedTxn(8, 1_500, 1_999, 2_000)]


def build(directory: str) -> None:
    """Segment 0: BATCHES batches of two records (first and last offset of its span), every
    offset indexed in both indexes; segment ENTRIES: one batch (the active segment)."""
    os.makedirs(directory, exist_ok=True)
    positions = np.empty(BATCHES, np.int64)
    chunks = []
    pos = 0
    for b in range(BATCHES):
        base = b * SPAN
        data = encode_batch(
            [
                Record.of(b"first", offset=base, timestamp=T0 + base),
                Record.of(b"last", offset=base + SPAN - 1, timestamp=T0 + base + SPAN - 1),
            ],
            base_offset=base,
        )
        positions[b] = pos
        chunks.append(data)
        pos += len(data)
    stem = os.path.join(directory, f"{0:020d}")
    with open(stem + ".log", "wb") as f:
        f.write(b"".join(chunks))
    offsets = np.arange(ENTRIES, dtype=np.int64)
    index = np.empty((ENTRIES, 2), ">i4")
    index[:, 0] = offsets
    index[:, 1] = positions[offsets // SPAN]
    index.tofile(stem + ".index")
    times = np.zeros(ENTRIES, dtype=[("t", ">i8"), ("o", ">i4")])
    times["t"] = T0 + offsets
    times["o"] = offsets
    times.tofile(stem + ".timeindex")
    with TransactionIndex(stem + ".txnindex", 0) as txn:
        for t in TXNS:
            txn.append(t)
    with open(os.path.join(directory, f"{ENTRIES:020d}.log"), "wb") as f:
        f.write(encode_batch([Record.of(b"next", timestamp=T0 + ENTRIES)], base_offset=ENTRIES))


def segment_reads(seg: LogSegment) -> dict[str, Callable[[], Any]]:
    """Every public read path of a held segment and its indexes, as comparable values."""
    oi = seg.offset_index.get()
    ti = seg.time_index.get()
    tx = seg.txn_index
    rng = np.random.default_rng(11)
    many_offsets = rng.integers(0, ENTRIES, 5_000)
    many_times = T0 + rng.integers(0, ENTRIES, 5_000)
    few = many_offsets[:10]

    def pair(arrays: tuple[np.ndarray, np.ndarray]) -> list[list[int]]:
        return [arrays[0].tolist(), arrays[1].tolist()]

    return {
        "offset lookup": lambda: [tuple(oi.lookup(o)) for o in (0, 1_234_567, ENTRIES - 1)],
        "offset lookup_many (sorted pass)": lambda: pair(oi.lookup_many(many_offsets)),
        "offset lookup_many (few)": lambda: pair(oi.lookup_many(few)),
        "offset lookup_ceiling": lambda: tuple(oi.lookup_ceiling(999_999) or ()),
        "offset fetch_upper_bound": lambda: tuple(oi.fetch_upper_bound_offset(0, 5_000) or ()),
        "offset entry": lambda: tuple(oi.entry(ENTRIES - 1)),
        "offset to_numpy": lambda: [int(a.sum()) for a in oi.to_numpy()],
        "time lookup": lambda: [tuple(ti.lookup(T0 + o)) for o in (0, 777_777, ENTRIES)],
        "time lookup_many": lambda: pair(ti.lookup_many(many_times)),
        "time entry": lambda: tuple(ti.entry(ENTRIES - 1)),
        "time to_numpy": lambda: [int(a.sum()) for a in ti.to_numpy()],
        "txn collect": lambda: repr(tx.collect_aborted_txns(0, 3_000)),
        "txn all": lambda: repr(tx.all_aborted_txns()),
        "segment translate_offset": lambda: tuple(seg.translate_offset(1_500_500) or ()),
        "segment read": lambda: len(seg.read(1_500_500, 10_000).records),  # type: ignore[union-attr]
        "segment read_next_offset": seg.read_next_offset,
        "segment find_offset_by_timestamp": lambda: tuple(
            seg.find_offset_by_timestamp(T0 + 1_000_500) or ()
        ),
        "segment fetch_upper_bound_offset": lambda: seg.fetch_upper_bound_offset(0, 5_000),
        "segment batches": lambda: sum(1 for _ in seg.entries(0)),
        "segment records": lambda: sum(len(list(b.records(seg.limits))) for b in seg.entries(0)),
    }


def log_reads(log: Log) -> dict[str, Callable[[], Any]]:
    return {
        "Log.read": lambda: len(log.read(1_500_500, 10_000)),
        "Log.batches": lambda: sum(1 for _ in log.batches(1_999_000)),
        "Log.records": lambda: [r.offset for r in log.records(1_999_000)],
        "Log.read_arrow": lambda: log.read_arrow(1_999_000).num_rows,
        "Log.offsets_for_times": lambda: tuple(log.offsets_for_times(T0 + 1_000_500) or ()),
        "Log.last_stable_offset": log.last_stable_offset,
    }


def outcome(read: Callable[[], Any], expected: Any) -> str:
    try:
        got = read()
    except ClosedError:
        return "closed"
    except KafkalogError:
        return "kafkalog"
    except Exception as e:  # reported, and the test fails on it
        return f"{type(e).__name__}: {e}"
    return "same" if got == expected else f"different: {got!r} != {expected!r}"


def run(reads: dict[str, Callable[[], Any]], expected: dict[str, Any]) -> dict[str, str]:
    return {name: outcome(read, expected[name]) for name, read in reads.items()}


def wait_gone(paths: list[str], timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(os.path.exists(p) for p in paths):
            return True
        time.sleep(0.05)
    return False


def open_log(directory: str, delay_ms: int) -> Log:
    config = TopicConfig(file_delete_delay_ms=delay_ms, retention_ms=-1)
    return Log(directory, config, had_clean_shutdown=True, recovery_point=ENTRIES + 1)


def retain(log: Log) -> None:
    log.increment_log_start_offset(ENTRIES)
    assert log.delete_old_segments() == 1


def threads_scenario(log: Log, seg: LogSegment) -> dict[str, Any]:
    reads = segment_reads(seg)
    expected = {name: read() for name, read in reads.items()}
    stop = threading.Event()
    counts: dict[str, int] = {"same": 0, "closed": 0, "other": 0}
    others: list[str] = []
    lock = threading.Lock()

    def reader(names: list[str]) -> None:
        while not stop.is_set():
            for name in names:
                result = outcome(reads[name], expected[name])
                with lock:
                    key = result if result in ("same", "closed") else "other"
                    counts[key] += 1
                    if key == "other":
                        others.append(f"{name}: {result}")

    names = list(reads)
    workers = [threading.Thread(target=reader, args=(names[i::3],)) for i in range(3)]
    for w in workers:
        w.start()
    time.sleep(0.3)
    retain(log)  # delay 0.5 s: the scheduler thread closes the segment under the readers
    gone = wait_gone([seg.log.path])
    time.sleep(0.3)
    stop.set()
    for w in workers:
        w.join()
    return {"threads": counts, "others": others[:10], "gone": gone}


def main() -> None:
    scenario, directory = sys.argv[1], sys.argv[2]
    build(directory)
    delay = {"delay": 1_500, "now": 0, "close": 60_000, "close-during-delay": 60_000}.get(
        scenario, 500
    )
    log = open_log(directory, delay)
    seg = log.segments[0]
    assert seg.base_offset == 0 and seg.offset_index.get().entries == ENTRIES
    result: dict[str, Any] = {}
    if scenario == "threads":
        result = threads_scenario(log, seg)
        log.close()
        print(json.dumps(result))
        return
    seg_reads = segment_reads(seg)
    expected = {name: read() for name, read in seg_reads.items()}
    lreads = log_reads(log)
    log_expected = {name: read() for name, read in lreads.items()}
    result["before"] = run(seg_reads, expected)
    files = [seg.log.path, seg.offset_index.path, seg.time_index.path, seg.txn_index.path]
    if scenario == "close":
        log.close()
        result["after"] = run(seg_reads, expected)
        result["log after close"] = run(lreads, log_expected)
    else:
        retain(log)
        result["renamed"] = all(
            p.endswith(".deleted") and os.path.exists(p)
            for p in [seg.log.path, seg.offset_index.path, seg.time_index.path, seg.txn_index.path]
        )
        if scenario == "delay":
            result["during"] = run(seg_reads, expected)
            result["gone"] = wait_gone(
                [seg.log.path, seg.offset_index.path, seg.time_index.path, seg.txn_index.path]
            )
        elif scenario == "close-during-delay":
            log.close()
            result["left"] = sorted(n for n in os.listdir(directory) if n.endswith(".deleted"))
        result["after"] = run(seg_reads, expected)
        if scenario == "close-during-delay":
            reopened = open_log(directory, delay)
            result["left after reopen"] = sorted(
                n for n in os.listdir(directory) if n.endswith(".deleted")
            )
            reopened.close()
        else:
            log.close()
    result["original files"] = [os.path.exists(p) for p in files]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
