"""``index.interval.bytes``: its one definition (``index_interval.entry_due``), the compiled run
walk that uses it against the same walk in plain Python, and the log layer keeping its hands off
the indexes' private state."""

from __future__ import annotations

import ast
import random
from pathlib import Path

import numpy as np
import pytest

from kafkalog.log import _run_kernel, index_interval
from kafkalog.log.index_interval import entry_due

LOG_SRC = Path(__file__).resolve().parents[2] / "src" / "kafkalog" / "log"


def test_an_entry_once_more_than_the_interval_went_in() -> None:
    # Kafka's LogSegment.append: bytesSinceLastIndexEntry > indexIntervalBytes
    assert entry_due(4096, 100, 4096) == (False, 4196)
    assert entry_due(4097, 100, 4096) == (True, 100)
    # interval 0: every append but a segment's first gets entries
    assert entry_due(0, 70, 0) == (False, 70)
    assert entry_due(70, 70, 0) == (True, 70)


def walk(kernel: object, seed: int) -> tuple[list[int], ...]:
    """One random run through ``kernel`` (plan_run, compiled or not): its state and entries."""
    rng = random.Random(seed)
    n = rng.choice([1, 5, 300])
    sizes = np.array([rng.choice([70, 170, 900, 5000]) for _ in range(n)], np.int64)
    last_offsets = 1000 + np.cumsum(np.array([rng.choice([1, 3]) for _ in range(n)], np.int64))
    ts = 5_000 + np.cumsum(np.array([rng.choice([-40, 0, 1, 9]) for _ in range(n)], np.int64))
    o_entries = rng.choice([0, 4])
    t_entries = rng.choice([0, o_entries])
    room = n + 2 if rng.random() < 0.7 else rng.choice([1, 3, 10])
    out = [np.zeros(room + 1, np.int64) for _ in range(4)]
    state = np.zeros(index_interval.STATE_FIELDS, np.int64)
    kernel(  # type: ignore[operator]
        sizes, last_offsets, ts, 0, n, rng.choice([1000, 10**6]),
        100, rng.choice([10**6, 10**9]), 5_000, rng.choice([500, 10**9]), 990,
        rng.choice([0, 4000]), rng.choice([0, 100, 4096]),
        4_990, 995, o_entries, room, 995 if o_entries else 990,
        t_entries, room, 4_990 if t_entries else -1, 995 if t_entries else 990,
        *out, state,
    )  # fmt: skip
    no, nt = int(state[index_interval.OFFSET_ENTRIES]), int(state[index_interval.TIME_ENTRIES])
    return (
        state.tolist(),
        out[0][:no].tolist(),
        out[1][:no].tolist(),
        out[2][:nt].tolist(),
        out[3][:nt].tolist(),
    )


@pytest.mark.parametrize("seed", range(30))
def test_the_compiled_walk_is_the_python_walk(seed: int) -> None:
    """The numba kernel and the plain Python function it is compiled from (the same source,
    with the same entry_due) take the same batches and make the same entries."""
    compiled = walk(_run_kernel.plan_run, seed)
    assert compiled == walk(index_interval.plan_run, seed)


def test_the_log_layer_uses_no_private_index_state() -> None:
    """Index entries go through the index classes' methods: no ``x._name`` on an index object
    (anything named ``*index*``, ``oindex``, ``tindex``) anywhere in ``kafkalog.log``."""
    found = []
    for path in sorted(LOG_SRC.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
                continue
            if node.attr.startswith("__"):
                continue
            owner = node.value
            name = (
                owner.id
                if isinstance(owner, ast.Name)
                else owner.attr
                if isinstance(owner, ast.Attribute)
                else ""
            )
            if "index" in name.lower():
                found.append(f"{path.name}:{node.lineno}: {name}.{node.attr}")
    assert not found, found
