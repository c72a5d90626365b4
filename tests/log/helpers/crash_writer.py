"""The writer that tests/log/test_crash.py kills with SIGKILL.

``crash_writer.py write '<json>'``
    One writer in this process: open the data directory writable with :class:`LogDir` (which
    takes the partition's writer lock and recovers the log from the root recovery-point
    checkpoint after an unclean shutdown), then append deterministic batches until killed.

``crash_writer.py serve``
    A fork server, so that a test can kill a hundred writers without paying a hundred Python
    start-ups (~0.5 s each): import kafkalog and warm its numba kernels once, then for each JSON
    line on stdin fork a writer child, print ``P <pid>``, wait for it and print
    ``X <pid> <wait status>``. The server itself never opens the test's log. An empty line or
    EOF ends it.

What a writer prints on stdout, one line per ``os.write`` (atomic on a pipe), always with its pid:

* ``R <pid> <log start> <log end> <recovery point>`` once the log is open (recovered);
* ``A <pid> <log end>`` after each append returned (in the page cache: survives a SIGKILL);
* ``F <pid> <recovery point>`` after each flush, once that offset has been made durable in the
  side file ``params["flushed_file"]`` (temporary file, fsync, rename, directory fsync) and the
  root checkpoints were rewritten (``LogDir.checkpoint``), so the parent knows what MUST survive;
* ``D <pid>`` when the append budget is spent (it then sleeps until killed).

Parameters (JSON): ``root``, ``topic``, ``partition``, ``flushed_file``, ``seed``, ``profile``
(see ``logcheck.PROFILES``), ``flush_messages``, ``txn_rate``, ``budget`` (bytes to append
before idling), ``slow_write`` (write each batch in up to 16 pieces with short pauses, see
``logcheck.chunked_append``) and ``segment_index_bytes``.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import tempfile
import time
import traceback
from typing import Any

from logcheck import (
    SEGMENT_INDEX_BYTES,
    ProducerWriter,
    Writer,
    chunked_append,
    data_batch,
    durable_write,
    profile_config,
)

from kafkalog.log import Log, LogDir, TopicConfig


def emit(line: str) -> None:
    os.write(1, (line + "\n").encode())


def run_writer(params: dict[str, Any]) -> None:
    rng = random.Random(params["seed"])
    pid = os.getpid()
    if params.get("slow_write"):
        from kafkalog.log import segment

        segment.SegmentFile.append = chunked_append(16, 256, 0.0003)  # type: ignore[method-assign]
    config = TopicConfig(
        flush_messages=params["flush_messages"],
        segment_index_bytes=params.get("segment_index_bytes", SEGMENT_INDEX_BYTES),
        retention_ms=-1,
        **profile_config(params["profile"], rng),
    )
    logdir = LogDir(params["root"], writable=True)
    log = logdir.log(params["topic"], params["partition"], create=True, config=config)
    emit(f"R {pid} {log.log_start_offset} {log.log_end_offset} {log.recovery_point}")
    writer = Writer(log, rng, params["profile"], params.get("txn_rate", 0.0))
    budget = params["budget"]
    flushed_file = params["flushed_file"]
    while budget > 0:
        before = log.recovery_point
        budget -= writer.step()
        emit(f"A {pid} {log.log_end_offset}")
        if log.recovery_point > before:
            logdir.checkpoint()
            durable_write(flushed_file, str(log.recovery_point))
            emit(f"F {pid} {log.recovery_point}")
    emit(f"D {pid}")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # the test kills it long before; it never closes the log
        time.sleep(0.5)
    os._exit(3)  # an orphan (the test died): go away without cleaning up, like a crash


def run_producer_writer(params: dict[str, Any]) -> None:
    """``"mode": "producers"``: a standalone :class:`Log` (recovered from the recovery point in
    ``params["flushed_file"]``) appended to by :class:`ProducerWriter` until killed."""
    rng = random.Random(params["seed"])
    pid = os.getpid()
    config = TopicConfig(
        segment_bytes=params["segment_bytes"],
        flush_messages=params["flush_messages"],
        index_interval_bytes=128,
        retention_ms=-1,
    )
    flushed_file = params["flushed_file"]
    try:
        with open(flushed_file) as f:
            recovery_point = int(f.read())
    except FileNotFoundError:
        recovery_point = 0
    log = Log(params["partition_dir"], config, recovery_point=recovery_point)
    emit(f"R {pid} {log.log_start_offset} {log.log_end_offset} {log.recovery_point}")
    writer = ProducerWriter(log, rng, params["first_id"])
    for _ in range(params["appends"]):
        before = log.recovery_point
        writer.step()
        emit(f"A {pid} {log.log_end_offset}")
        if log.recovery_point > before:
            durable_write(flushed_file, str(log.recovery_point))
            emit(f"F {pid} {log.recovery_point}")
    emit(f"D {pid}")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        time.sleep(0.5)
    os._exit(3)


def warm() -> None:
    """Compile or load every numba kernel a writer uses, before the first fork."""
    tmp = tempfile.mkdtemp(prefix="kafkalog-warm-")
    try:
        part = os.path.join(tmp, "warm-0")
        config = TopicConfig(segment_bytes=4096, index_interval_bytes=0)
        log = Log(part, config)
        for i in range(0, 60, 3):
            log.append(data_batch(i, 3, 50))
        log.flush()
        list(log.records(17))
        log.offsets_for_times(0)
        reader = Log(part, writable=False)
        list(reader.records(31))
        reader.close()
        log.close()
        log = Log(part, config, recovery_point=0)  # full recovery
        log.truncate_to(20)
        log.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def serve() -> None:
    warm()
    emit("S ready")
    while True:
        line = sys.stdin.readline()
        if not line.strip():
            return
        params = json.loads(line)
        child = os.fork()
        if child == 0:  # pragma: no cover - the writer child
            code = 0
            try:
                if params.get("mode") == "producers":
                    run_producer_writer(params)
                else:
                    run_writer(params)
            except BaseException:
                traceback.print_exc()
                sys.stderr.flush()
                code = 70
            os._exit(code)
        emit(f"P {child}")
        _, status = os.waitpid(child, 0)
        emit(f"X {child} {status}")


def main() -> None:
    if sys.argv[1] == "serve":
        serve()
    elif sys.argv[1] == "write":
        try:
            run_writer(json.loads(sys.argv[2]))
        except BaseException:
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(70)
    else:
        raise SystemExit(f"usage: {sys.argv[0]} serve | write '<json>'")


if __name__ == "__main__":
    main()
