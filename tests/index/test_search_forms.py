"""The two forms of the index search (plain Python for a short-lived process, compiled once it
pays) give the same answers, and a command that only looks things up never loads numba."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalog.index import _kernels, _search
from kafkalog.index._search import SUB

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures"


def _offset_entries(keys: list[int], values: list[int]) -> np.ndarray:
    raw = b"".join(struct.pack(">ii", k, v) for k, v in zip(keys, values, strict=True))
    return np.frombuffer(raw, np.uint8)


def _time_entries(keys: list[int], values: list[int]) -> np.ndarray:
    raw = b"".join(struct.pack(">qi", k, v) for k, v in zip(keys, values, strict=True))
    return np.frombuffer(raw, np.uint8)


@settings(max_examples=300, deadline=None)
@given(
    keys=st.lists(st.integers(-(2**31), 2**31 - 1), max_size=2500, unique=True).map(sorted),
    targets=st.lists(st.integers(-(2**31), 2**31 - 1), min_size=1, max_size=10),
    claimed=st.integers(-3, 3),
)
def test_single_lookups_agree_with_the_kernels(
    keys: list[int], targets: list[int], claimed: int
) -> None:
    buf = _offset_entries(keys, list(range(len(keys))))
    entries = max(0, len(keys) + claimed)  # a count past the buffer must be bounded by both
    targets += keys[:3] + keys[-3:]
    python = [
        (
            _search.offset_floor_python(buf, entries, t),
            _search.search_python(buf, entries, 8, 0, 4, t, SUB, 1024),
        )
        for t in targets
    ]
    compiled = [
        (
            tuple(int(x) for x in _kernels.offset_floor(buf, entries, t)),
            int(_kernels.search(buf, entries, 8, 0, 4, t, SUB, 1024)),
        )
        for t in targets
    ]
    assert python == compiled


@settings(max_examples=200, deadline=None)
@given(
    keys=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=1500, unique=True).map(sorted),
    targets=st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=10),
)
def test_time_lookups_agree_with_the_kernels(keys: list[int], targets: list[int]) -> None:
    buf = _time_entries(keys, list(range(len(keys))))
    python = [_search.time_floor_python(buf, len(keys), t) for t in targets + keys[-2:]]
    compiled = [
        tuple(int(x) for x in _kernels.time_floor(buf, len(keys), t)) for t in targets + keys[-2:]
    ]
    assert python == compiled


def _valid_prefix_loop(keys: list[int], values: list[int]) -> int:
    """The rule, one entry at a time."""
    if not keys or values[0] < 0:
        return 0
    n = len(keys)
    for i in range(1, len(keys)):
        if keys[i] <= keys[i - 1] or values[i] < values[i - 1]:
            n = i
            break
    return 0 if n == 1 and keys[0] == 0 and values[0] == 0 else n


@settings(max_examples=400, deadline=None)
@given(
    pairs=st.lists(st.tuples(st.integers(-5, 50), st.integers(-2, 50)), max_size=40),
    zero_tail=st.integers(0, 5),
)
def test_valid_prefix_follows_the_rule(pairs: list[tuple[int, int]], zero_tail: int) -> None:
    keys = [k for k, _ in pairs] + [0] * zero_tail
    values = [v for _, v in pairs] + [0] * zero_tail
    want = _valid_prefix_loop(keys, values)
    assert _search.valid_prefix(_offset_entries(keys, values), len(keys), 8, 0, 4, 4, 4) == want
    assert _search.valid_prefix(_time_entries(keys, values), len(keys), 12, 0, 8, 8, 4) == want


def test_compiled_search_takes_over_after_enough_lookups() -> None:
    """In a fresh process: Python answers first, numba is loaded after COMPILED_AFTER lookups,
    and every answer is the same."""
    code = f"""
import json, struct, sys
import numpy as np
from kafkalog.index import _search
keys = list(range(0, 20000, 3))
buf = np.frombuffer(b"".join(struct.pack(">ii", k, k * 10) for k in keys), np.uint8)
answers, loaded = [], []
for t in range({_search.COMPILED_AFTER} + 10):
    answers.append(list(_search.offset_floor(buf, len(keys), t * 7)))
    loaded.append("numba" in sys.modules)
print(json.dumps([answers, loaded]))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    answers, loaded = json.loads(out.stdout)
    assert not any(loaded[: _search.COMPILED_AFTER]) and all(loaded[-5:])
    for t, (slot, key, value) in enumerate(answers):
        want = (t * 7) // 3
        assert [slot, key, value] == [want, want * 3, want * 30]


def test_a_lookup_command_loads_neither_numba_nor_pyarrow() -> None:
    partition = FIXTURE / "kafka-4.0-snapshot-javacode" / "v2-none-0"
    code = (
        "import sys, runpy\n"
        f"sys.argv = ['kafkalog', 'lookup', {str(partition)!r}, '--offset', '50']\n"
        "try:\n    runpy.run_module('kafkalog', run_name='__main__')\n"
        "except SystemExit as e:\n    assert not e.code, e.code\n"
        "print('LOADED', sorted(m for m in ('numba', 'pyarrow') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert '"offset": 50' in out.stdout
    assert out.stdout.strip().splitlines()[-1] == "LOADED []"
