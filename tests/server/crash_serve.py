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
- ``marker`` — a transaction marker written (recovery's markers at start count too).

``none`` runs serve without a kill point. The wrappers go around kafkalog's own functions by
their public names; nothing else of serve changes.
"""

from __future__ import annotations

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


def small_internal_topics() -> None:
    """Three partitions each for ``__consumer_offsets`` and ``__transaction_state`` (the CLI
    keeps Kafka's 50), so a restart opens a few logs, not a hundred."""
    import functools

    import kafkalog.server as server

    server.ServerConfig = functools.partial(  # type: ignore[misc]
        server.ServerConfig, offsets_topic_num_partitions=3, transaction_state_num_partitions=3
    )


def main() -> int:
    point, record, sep, *serve = sys.argv[1:]
    assert sep == "--", sys.argv
    small_internal_topics()
    if point != "none":
        install(point, record)
    from kafkalog.cli.main import main as kafkalog

    return kafkalog(serve)


if __name__ == "__main__":
    sys.exit(main())
