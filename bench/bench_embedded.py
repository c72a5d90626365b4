"""kafkalog as an embedded log, one record at a time, against SQLite in the same run.

Every row stores the same rows: a millisecond timestamp and a 100-byte value (random hex), no
key. SQLite keeps them in ``t(id INTEGER PRIMARY KEY, ts INTEGER, k BLOB, v BLOB)`` in WAL mode.

1. Single-record appends, no fsync: SQLite ``synchronous=OFF``, all inserts in one transaction
   (the issue's peer); ours ``Log.append_records([Record.of(...)])`` per record inside
   ``log.buffered()`` (records kept in the process until the block ends, as the transaction's
   rows are until COMMIT), the same block timed once in a fresh process (the compiled kernels
   loading), ``BatchingWriter.send()`` per record (batch.size 16384, linger.ms 5) then
   ``flush()``, and ``append_records`` outside a block (a ``pwrite`` each: a record survives
   a process crash as soon as the call returns), also through the old general encoder
   (``encode_batch``: what the call cost before). 1b pairs that last path with SQLite doing
   the same, a commit per row (a tenth of the records).
2. Durability: ours with an fsync after every append (one thread, ``durable=True``), group
   commit with 8 threads each appending ``durable=True``, the batching writer with
   ``durable=True`` (8 threads sending), and no fsync (8 threads through ``SharedLog``);
   SQLite one transaction per row (autocommit) with ``synchronous=FULL`` (an fsync per
   commit), ``NORMAL`` (WAL: fsync at checkpoints only) and ``OFF``.
3. End-to-end latency at 10,000 records/s: a process sends (the batching writer with
   linger.ms 0, and with the default 5) each record's send time as its value; another process
   tails the log (``TailReader``) and records now minus that. SQLite's peer: autocommitted
   inserts (``synchronous=NORMAL``), another process polling ``SELECT ... WHERE id > ?`` with the
   same backoff.

    python bench/bench_embedded.py [--records 200000] [--durable-records 3000] [--repeat 3]
        [--latency-seconds 3] [--skip appends|durability|latency] [--missing-timestamps]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable

from kafkalog.log import Log
from kafkalog.log.batching_writer import BatchingWriter
from kafkalog.log.group_commit import SharedLog
from kafkalog.log.tail import TailReader
from kafkalog.records import Record, encode_batch

TS = 1_700_000_000_000
MISSING_TIMESTAMPS = False
"""``--missing-timestamps``: the ``append_records`` rows append ``Record.of(v)`` without a
timestamp (the log stamps it with its clock) instead of ``Record.of(v, timestamp=TS)``, and the
``Log.append(encode_batch(...))`` row appends bytes whose record has none (-1, which
``Log.append`` keeps, as a broker does)."""
VALUE_BYTES = 100


def values(n: int) -> list[bytes]:
    return [os.urandom(VALUE_BYTES // 2).hex().encode() for _ in range(n)]


def fresh_dir() -> str:
    return tempfile.mkdtemp(prefix="kafkalog-bench-embedded-")


def sqlite_db(directory: str, synchronous: str) -> sqlite3.Connection:
    db = sqlite3.connect(os.path.join(directory, "t.db"), isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA synchronous={synchronous}")
    db.execute("CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, ts INTEGER, k BLOB, v BLOB)")
    return db


# -- 1. single-record appends ---------------------------------------------------------------------
def sqlite_one_transaction(vals: list[bytes]) -> float:
    d = fresh_dir()
    try:
        db = sqlite_db(d, "OFF")
        start = time.perf_counter()
        db.execute("BEGIN")
        for v in vals:
            db.execute("INSERT INTO t(ts, k, v) VALUES (?, ?, ?)", (TS, None, v))
        db.execute("COMMIT")
        elapsed = time.perf_counter() - start
        db.close()
        return elapsed
    finally:
        shutil.rmtree(d)


def log_append_records(vals: list[bytes], buffered: bool = False) -> float:
    d = fresh_dir()
    try:
        log = Log(os.path.join(d, "events-0"))
        append = log.append_records
        of = Record.of
        start = time.perf_counter()
        with log.buffered() if buffered else contextlib.nullcontext():
            if MISSING_TIMESTAMPS:
                for v in vals:
                    append([of(v)])
            else:
                for v in vals:
                    append([of(v, timestamp=TS)])
        elapsed = time.perf_counter() - start
        assert log.log_end_offset == len(vals)
        log.close()
        return elapsed
    finally:
        shutil.rmtree(d)


def log_buffered(vals: list[bytes]) -> float:
    return log_append_records(vals, buffered=True)


def first_block_in_a_fresh_process(vals: list[bytes]) -> float:
    """log_buffered once in a new interpreter: what a program's first block pays on top (the
    compiled kernels loading), which the best-of rows above do not show."""
    out = subprocess.run(
        [sys.executable, __file__, "--child-buffered", str(len(vals))]
        + (["--missing-timestamps"] if MISSING_TIMESTAMPS else []),
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout.split()[-1])


def log_append_general_encoder(vals: list[bytes]) -> float:
    d = fresh_dir()
    try:
        log = Log(os.path.join(d, "events-0"))
        start = time.perf_counter()
        if MISSING_TIMESTAMPS:  # bytes as a client built them: -1 kept, not stamped
            for v in vals:
                log.append(encode_batch([Record.of(v)]))
        else:
            for v in vals:
                log.append(encode_batch([Record.of(v, timestamp=TS)]))
        elapsed = time.perf_counter() - start
        log.close()
        return elapsed
    finally:
        shutil.rmtree(d)


def writer_send(vals: list[bytes]) -> float:
    d = fresh_dir()
    try:
        log = Log(os.path.join(d, "events-0"))
        writer = BatchingWriter(log)
        send = writer.send
        start = time.perf_counter()
        for v in vals:
            send(v, timestamp=TS)
        writer.flush()
        elapsed = time.perf_counter() - start
        writer.close()
        assert log.log_end_offset == len(vals)
        log.close()
        return elapsed
    finally:
        shutil.rmtree(d)


# -- 2. durability --------------------------------------------------------------------------------
def sqlite_autocommit(synchronous: str) -> Callable[[list[bytes]], float]:
    def run(vals: list[bytes]) -> float:
        d = fresh_dir()
        try:
            db = sqlite_db(d, synchronous)
            start = time.perf_counter()
            for v in vals:
                db.execute("INSERT INTO t(ts, k, v) VALUES (?, ?, ?)", (TS, None, v))
            elapsed = time.perf_counter() - start
            db.close()
            return elapsed
        finally:
            shutil.rmtree(d)

    return run


def shared_threads(threads: int, durable: bool) -> Callable[[list[bytes]], float]:
    def run(vals: list[bytes]) -> float:
        d = fresh_dir()
        try:
            shared = SharedLog(Log(os.path.join(d, "events-0")))
            chunks = [vals[t::threads] for t in range(threads)]

            def work(chunk: list[bytes]) -> None:
                for v in chunk:
                    shared.append_records([Record.of(v, timestamp=TS)], durable=durable)

            workers = [threading.Thread(target=work, args=(c,)) for c in chunks]
            start = time.perf_counter()
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            elapsed = time.perf_counter() - start
            FSYNCS[(threads, durable)] = shared.fsyncs
            shared.close()
            return elapsed
        finally:
            shutil.rmtree(d)

    return run


def writer_threads_durable(threads: int) -> Callable[[list[bytes]], float]:
    def run(vals: list[bytes]) -> float:
        d = fresh_dir()
        try:
            log = Log(os.path.join(d, "events-0"))
            writer = BatchingWriter(log, durable=True, linger_ms=0)
            chunks = [vals[t::threads] for t in range(threads)]

            def work(chunk: list[bytes]) -> None:
                for v in chunk:  # each waits for its record to be durable, as the others
                    writer.send(v, timestamp=TS).result()

            workers = [threading.Thread(target=work, args=(c,)) for c in chunks]
            start = time.perf_counter()
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            elapsed = time.perf_counter() - start
            writer.close()
            log.close()
            return elapsed
        finally:
            shutil.rmtree(d)

    return run


FSYNCS: dict[tuple[int, bool], int] = {}


def best(fn: Callable[[list[bytes]], float], vals: list[bytes], repeat: int) -> float:
    return min(fn(vals) for _ in range(repeat))


def table(title: str, rows: list[tuple[str, float]], n: int, peer: str) -> None:
    print(title)
    print(f"{'':58}{'records/s':>12}{'us/record':>11}  vs peer")
    peer_rate = n / dict(rows)[peer]
    for name, elapsed in rows:
        rate = n / elapsed
        print(f"{name:58}{rate:>12,.0f}{elapsed / n * 1e6:>11.2f}  {rate / peer_rate:>6.2f}x")
    print()


# -- 3. latency -----------------------------------------------------------------------------------
def child_tail(directory: str, count: int) -> None:
    reader = TailReader(directory, start_offset=0, max_wait_ms=1.0)
    print("READY", flush=True)
    delays: list[int] = []
    while len(delays) < count:
        records = reader.poll(timeout=30.0)
        if not records:
            break
        now = time.time_ns()
        delays.extend(now - int(r.value or b"0") for r in records)
    print(json.dumps(delays), flush=True)


def child_sqlite_tail(path: str, count: int) -> None:
    db = sqlite3.connect(path, isolation_level=None)
    print("READY", flush=True)
    delays: list[int] = []
    last = 0
    wait = 0.0002
    deadline = time.monotonic() + 30
    while len(delays) < count and time.monotonic() < deadline:
        try:
            rows = db.execute("SELECT id, v FROM t WHERE id > ? ORDER BY id", (last,)).fetchall()
        except sqlite3.OperationalError:  # the table is not there yet
            rows = []
        if not rows:
            time.sleep(wait)
            wait = min(wait * 2, 0.001)
            continue
        wait = 0.0002
        deadline = time.monotonic() + 30
        now = time.time_ns()
        delays.extend(now - int(v) for _, v in rows)
        last = rows[-1][0]
    print(json.dumps(delays), flush=True)


def paced(send: Callable[[bytes], object], rate: int, seconds: float) -> int:
    """Send ``rate`` records a second for ``seconds``, each value its send time in ns."""
    total = int(rate * seconds)
    start = time.perf_counter()
    sent = 0
    while sent < total:
        due = min(total, int((time.perf_counter() - start) * rate) + 1)
        while sent < due:
            send(b"%d" % time.time_ns())
            sent += 1
        time.sleep(0.0002)
    return total


def start_child(args: list[str]) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), *args], stdout=subprocess.PIPE
    )
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != b"READY":
        proc.kill()
        raise RuntimeError("tailing child did not start")
    return proc


def collect(proc: subprocess.Popen[bytes]) -> list[int]:
    out, _ = proc.communicate(timeout=120)
    return list(json.loads(out))


def latency_kafkalog(rate: int, seconds: float, linger_ms: float) -> list[int]:
    d = fresh_dir()
    directory = os.path.join(d, "events-0")
    try:
        log = Log(directory)
        total = int(rate * seconds)
        proc = start_child(["--child-tail", directory, str(total)])
        try:
            writer = BatchingWriter(log, linger_ms=linger_ms)
            paced(lambda v: writer.send(v), rate, seconds)
            writer.close()
            return collect(proc)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()
    finally:
        shutil.rmtree(d)


def latency_sqlite(rate: int, seconds: float) -> list[int]:
    d = fresh_dir()
    try:
        db = sqlite_db(d, "NORMAL")
        total = int(rate * seconds)
        proc = start_child(["--child-sqlite-tail", os.path.join(d, "t.db"), str(total)])
        try:

            def insert(v: bytes) -> None:
                db.execute("INSERT INTO t(ts, k, v) VALUES (?, ?, ?)", (TS, None, v))

            paced(insert, rate, seconds)
            return collect(proc)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            db.close()
    finally:
        shutil.rmtree(d)


def latency_row(name: str, delays: list[int], expected: int) -> None:
    ms = sorted(d / 1e6 for d in delays)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    print(
        f"{name:58}{statistics.median(ms):>10.2f}{p99:>10.2f}{ms[-1]:>10.2f}"
        f"{len(ms):>10,}/{expected:,}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--durable-records", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--latency-seconds", type=float, default=3.0)
    parser.add_argument("--rate", type=int, default=10_000)
    parser.add_argument("--skip", action="append", default=[])
    parser.add_argument("--child-tail", nargs=2)
    parser.add_argument("--child-sqlite-tail", nargs=2)
    parser.add_argument("--child-buffered", type=int)
    parser.add_argument("--missing-timestamps", action="store_true")
    args = parser.parse_args()
    global MISSING_TIMESTAMPS
    MISSING_TIMESTAMPS = args.missing_timestamps
    if args.child_buffered:
        print(log_buffered(values(args.child_buffered)))
        return
    if args.child_tail:
        child_tail(args.child_tail[0], int(args.child_tail[1]))
        return
    if args.child_sqlite_tail:
        child_sqlite_tail(args.child_sqlite_tail[0], int(args.child_sqlite_tail[1]))
        return
    print(
        f"sqlite {sqlite3.sqlite_version}, python {sys.version.split()[0]}, "
        f"{os.cpu_count()} cpus, files under {tempfile.gettempdir()}; best of {args.repeat}"
    )
    print()
    if "appends" not in args.skip:
        vals = values(args.records)
        rows = [
            ("SQLite WAL synchronous=OFF, one transaction (peer)", sqlite_one_transaction),
            ("Log.append_records([Record.of(v)]) in log.buffered()", log_buffered),
            ("  the same, first block of a fresh process", first_block_in_a_fresh_process),
            ("BatchingWriter.send(v) per record, then flush()", writer_send),
            ("Log.append_records([Record.of(v)]), each call written", log_append_records),
            ("  before: Log.append(encode_batch([Record.of(v)]))", log_append_general_encoder),
        ]
        timed = [
            (name, fn(vals) if "fresh" in name else best(fn, vals, args.repeat))
            for name, fn in rows
        ]
        table(
            f"1. single-record appends, no fsync: {args.records:,} records of {VALUE_BYTES} bytes",
            timed,
            args.records,
            timed[0][0],
        )
        few = vals[: max(1, args.records // 10)]
        rows = [
            ("SQLite WAL synchronous=OFF, a commit per row (peer)", sqlite_autocommit("OFF")),
            ("Log.append_records([Record.of(v)]), each call written", log_append_records),
        ]
        timed = [(name, best(fn, few, args.repeat)) for name, fn in rows]
        table(
            f"1b. each record in the file when the call returns, no fsync: {len(few):,} records",
            timed,
            len(few),
            timed[0][0],
        )
    if "durability" not in args.skip:
        vals = values(args.durable_records)
        rows = [
            ("SQLite WAL synchronous=FULL, a commit per row (peer)", sqlite_autocommit("FULL")),
            ("SQLite WAL synchronous=NORMAL, a commit per row", sqlite_autocommit("NORMAL")),
            ("SQLite WAL synchronous=OFF, a commit per row", sqlite_autocommit("OFF")),
            ("kafkalog fsync every append (1 thread, durable=True)", shared_threads(1, True)),
            ("kafkalog group commit, 8 threads durable=True", shared_threads(8, True)),
            ("kafkalog BatchingWriter durable=True, 8 threads", writer_threads_durable(8)),
            ("kafkalog no fsync, 8 threads", shared_threads(8, False)),
        ]
        timed = [(name, best(fn, vals, args.repeat)) for name, fn in rows]
        table(
            f"2. durability: {args.durable_records:,} records of {VALUE_BYTES} bytes",
            timed,
            args.durable_records,
            timed[0][0],
        )
        group = FSYNCS.get((8, True), 0)
        if group:
            print(f"group commit: {args.durable_records / group:.1f} appends per fsync\n")
    if "latency" not in args.skip:
        expected = int(args.rate * args.latency_seconds)
        print(
            f"3. end-to-end latency, send() to a tailing reader in another process, "
            f"{args.rate:,} records/s for {args.latency_seconds:g} s"
        )
        print(f"{'':58}{'median ms':>10}{'p99 ms':>10}{'max ms':>10}{'records':>10}")
        latency_row(
            "SQLite NORMAL autocommit -> polling reader (peer)",
            latency_sqlite(args.rate, args.latency_seconds),
            expected,
        )
        for linger in (0.0, 5.0):
            latency_row(
                f"BatchingWriter linger.ms={linger:g} -> TailReader",
                latency_kafkalog(args.rate, args.latency_seconds, linger),
                expected,
            )


if __name__ == "__main__":
    main()
