"""``kafkalog serve`` that SIGKILLs itself at one named point of a transaction's path, for the
crash-point tests: ``python crash_serve.py POINT RECORD -- <kafkalog serve arguments>``.

A point is ``EVENT#N``: the process kills itself (SIGKILL: nothing flushed, no handler runs) the
N-th time EVENT happens after it started, having first appended the point's name to the file
RECORD (so the test knows the death was this one). Events:

- ``before:API`` / ``after:API`` — a request of that API (InitProducerId, AddPartitionsToTxn,
  Produce with a transactional id, AddOffsetsToTxn, TxnOffsetCommit, EndTxn) about to be
  handled / handled, its answer not sent;
- ``state:STATE`` — a ``__transaction_state`` record of that state (PREPARE_COMMIT, ...)
  written;
- ``marker`` — a transaction marker written (recovery's markers at start count too);
- ``roll`` — a log rolled a new active segment (its snapshot taken, flushed), ``before:roll``
  about to roll;
- ``before:swap`` / ``after:swap`` — the cleaner about to swap cleaned segments in for dirty
  ones (``LocalLog.replace_segments``: the ``.cleaned`` files written), / swapped.

``none`` runs serve without a kill point. The wrappers go around kafkalog's own functions by
their public names; nothing else of serve changes.

``python crash_serve.py --fork-server`` imports serve once and forks each serve run from that
warm process (tests/server/crashing_serve.py restarts serve after every kill, and a fresh
interpreter spent 1.3-3 s importing before it listened): it reads one JSON request a line on
stdin (``{"argv": [POINT, RECORD, "--", ...], "log": PATH, "config": {FIELD: VALUE}}``, the
config optional), answers ``S <pid>`` once the
child is forked, and ``X <pid> <returncode>`` (negative: the signal) when a child ends. It is
single-threaded, so a fork never copies a lock another thread holds.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

APIS = {
    "InitProducerId": 22,
    "AddPartitionsToTxn": 24,
    "Produce": 0,
    "AddOffsetsToTxn": 25,
    "TxnOffsetCommit": 28,
    "EndTxn": 26,
}
STATES = [
    "EMPTY",
    "ONGOING",
    "PREPARE_COMMIT",
    "PREPARE_ABORT",
    "COMPLETE_COMMIT",
    "COMPLETE_ABORT",
]


def install(point: str, record: str) -> None:
    from kafkalog.server import broker, transactions

    event, _, nth = point.partition("#")
    wanted = int(nth)
    seen: Counter[str] = Counter()

    def happened(name: str) -> None:
        if name != event:
            return
        seen[name] += 1
        if seen[name] == wanted:
            with open(record, "a") as f:
                f.write(point + "\n")
            os.kill(os.getpid(), signal.SIGKILL)

    for api, key in APIS.items():
        handler = broker.HANDLERS[key]

        def wrapped(b: Any, body: Any, version: int, api: str = api, h: Any = handler) -> Any:
            # only a transactional producer's Produce counts (not the loop's input set-up)
            counts = api != "Produce" or getattr(body, "transactional_id", None) is not None

            async def run() -> Any:
                if counts:
                    happened(f"before:{api}")
                result = await h(b, body, version)
                if counts:
                    happened(f"after:{api}")
                return result

            return run()

        broker.HANDLERS[key] = wrapped

    persist: Callable[..., None] = transactions.TransactionCoordinator._persist

    def persisted(self: Any, meta: Any) -> None:
        persist(self, meta)
        happened(f"state:{STATES[meta.state]}")

    transactions.TransactionCoordinator._persist = persisted  # type: ignore[method-assign]

    append_marker: Callable[..., None] = broker.Broker._append_marker

    def marker(self: Any, topic: str, partition: int, data: bytes) -> None:
        append_marker(self, topic, partition, data)
        happened("marker")

    broker.Broker._append_marker = marker  # type: ignore[method-assign]

    from kafkalog.log import local_log, log

    roll: Callable[..., Any] = log.Log.roll

    def rolled(self: Any, *args: Any, **kwargs: Any) -> Any:
        happened("before:roll")
        segment = roll(self, *args, **kwargs)
        happened("roll")
        return segment

    log.Log.roll = rolled  # type: ignore[method-assign]

    replace: Callable[..., Any] = local_log.LocalLog.replace_segments

    def swapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        happened("before:swap")
        result = replace(self, *args, **kwargs)
        happened("after:swap")
        return result

    local_log.LocalLog.replace_segments = swapped  # type: ignore[method-assign]


def small_internal_topics(**overrides: Any) -> None:
    """Three partitions each for ``__consumer_offsets`` and ``__transaction_state`` (the CLI
    keeps Kafka's 50), so a restart opens a few logs, not a hundred; ``overrides``: other
    ``ServerConfig`` fields the CLI has no option for (``log_cleaner_backoff_ms``, say)."""
    import functools

    import kafkalog.server as server

    server.ServerConfig = functools.partial(  # type: ignore[misc]
        server.ServerConfig,
        **{"offsets_topic_num_partitions": 3, "transaction_state_num_partitions": 3, **overrides},
    )


def main(argv: list[str] | None = None, overrides: dict[str, Any] | None = None) -> int:
    point, record, sep, *serve = sys.argv[1:] if argv is None else argv
    assert sep == "--", sys.argv
    small_internal_topics(**(overrides or {}))
    if point != "none":
        install(point, record)
    from kafkalog.cli.main import main as kafkalog

    return kafkalog(serve)


def _child(request: dict[str, Any]) -> None:
    """In the forked child: stdout and stderr to the run's log, run serve, exit with its code
    (never returning into the fork server's loop)."""
    code = 1
    try:
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.close(devnull)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        code = main(request["argv"], request.get("config"))
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def fork_server() -> int:
    import json
    import select

    import kafkalog.cli.main  # imported once, before any fork
    import kafkalog.server  # noqa: F401
    from kafkalog.server import broker, transactions  # noqa: F401

    children: set[int] = set()
    out = sys.stdout
    pending = b""
    open_input = True
    while open_input or children:
        ready, _, _ = select.select([0] if open_input else [], [], [], 0.01)
        if ready:
            chunk = os.read(0, 65536)
            open_input = bool(chunk)
            pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            pid = os.fork()
            if pid == 0:
                _child(json.loads(line))  # never returns
            children.add(pid)
            out.write(f"S {pid}\n")
            out.flush()
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            children.discard(pid)
            out.write(f"X {pid} {os.waitstatus_to_exitcode(status)}\n")
            out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(fork_server() if sys.argv[1:] == ["--fork-server"] else main())
