"""Offset index lookups on a full 10 MiB index: kafkalog against Python's ``bisect``.

One run builds a full default-size offset index (1,310,720 entries), then times
single lookups (ours: ``OffsetIndex.lookup``; peer: ``bisect_right`` over a list of the same
offsets, then reading the position from a parallel list) and batched lookups with the
vectorised ``lookup_many``. Targets are uniform over the index, and separately the newest
1% (a consumer at the head).

    python bench/bench_index.py [--lookups 200000]
"""

from __future__ import annotations

import argparse
import bisect
import os
import tempfile
import time

import numpy as np

from kafkalog.index import OffsetIndex


def per_second(n: int, fn: object) -> float:
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        fn()  # type: ignore[operator]
        best = min(best, time.perf_counter() - t)
    return n / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lookups", type=int, default=200_000)
    args = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="kafkalog-bench-")
    path = os.path.join(directory, "00000000000000000000.index")
    ix = OffsetIndex(path, 0)
    n = ix.max_entries
    rng = np.random.default_rng(7)
    offsets = np.cumsum(rng.integers(1, 40, n)).astype(np.int64)
    positions = np.arange(1, n + 1, dtype=np.int64) * 1600
    t = time.perf_counter()
    for o, p in zip(offsets.tolist(), positions.tolist(), strict=True):
        ix.append(o, p)
    built = time.perf_counter() - t
    assert ix.is_full()
    offset_list, position_list = offsets.tolist(), positions.tolist()
    print(f"full index: {n:,} entries, {ix.length:,} bytes (built in {built:.1f} s)")
    print(f"{'lookup':<34}{'kafkalog':>16}{'bisect (list)':>16}{'ratio':>9}")
    for label, lo in (("uniform targets", 0), ("newest 1% (head)", int(offsets[-1] * 0.99))):
        targets = rng.integers(lo, int(offsets[-1]) + 10, args.lookups)
        target_list = targets.tolist()

        def ours(ts: list[int] = target_list) -> None:
            lookup = ix.lookup
            for x in ts:
                lookup(x)

        def peer(ts: list[int] = target_list) -> None:
            for x in ts:
                i = bisect.bisect_right(offset_list, x) - 1
                (offset_list[i], position_list[i]) if i >= 0 else (0, 0)

        a, b = per_second(len(targets), ours), per_second(len(targets), peer)
        print(
            f"{'single, ' + label:<34}{a / 1e6:>13.2f}M/s{b / 1e6:>13.2f}M/s{a / b:>8.2f}x"
            f"   ({1e6 / a:.2f} us per lookup)"
        )
        batched = per_second(len(targets), lambda ts=targets: ix.lookup_many(ts))
        print(
            f"{'batched (lookup_many), ' + label:<34}{batched / 1e6:>13.2f}M/s{b / 1e6:>13.2f}M/s"
            f"{batched / b:>8.1f}x"
        )
        # all three agree
        got = ix.lookup_many(targets[:1000])
        assert got[0].tolist() == [ix.lookup(int(x)).offset for x in targets[:1000]]
    ix.close()


if __name__ == "__main__":
    main()
