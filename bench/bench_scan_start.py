"""What a fetch pays for checking the batch at its index entry (``LogSegment.scan_start``).

An ``.index`` is outside every CRC: an entry pointing at a later batch would skip offsets in
silence, so a fetch reads the entry's batch header before starting there. Same run, the same
random offsets: ``Log.read(offset, max_bytes)`` with the check, and with ``scan_start``
replaced by the plain index position (what a reader that trusts the index does), as a ratio.

    python bench/bench_scan_start.py [--mib 400] [--reads 20000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

from bench_log import pre_encode
from kafkalog.log.config import LONG_MAX, TopicConfig
from kafkalog.log.log import Log
from kafkalog.log.segment import LogSegment

ROOT = "/tmp/kafkalog-bench-logs"


def plain(self: LogSegment, offset: int) -> int:
    """The index entry's position, unchecked."""
    entry = self.offset_index_entry(offset)
    return entry.position if entry is not None else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=400)
    parser.add_argument("--reads", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    path = os.path.join(ROOT, f"scan-start-{args.mib}-0")
    if not os.path.isdir(path):
        config = TopicConfig(flush_messages=LONG_MAX, flush_ms=LONG_MAX, segment_bytes=64 << 20)
        with Log(path, config) as log:
            for batch in pre_encode(args.mib << 20):
                log.append(batch)
    log = Log(path, writable=False)
    rng = random.Random(1)
    offsets = [rng.randrange(log.log_end_offset) for _ in range(args.reads)]
    checked = LogSegment.scan_start

    def run(max_bytes: int) -> float:
        t = time.perf_counter()
        for o in offsets:
            log.read(o, max_bytes)
        return (time.perf_counter() - t) / len(offsets) * 1e6

    print(f"load average (1 min) {os.getloadavg()[0]:.1f}")
    for max_bytes in (16 << 10, 1 << 20):
        ours: list[float] = []
        peer: list[float] = []
        for _ in range(args.rounds):  # interleaved
            LogSegment.scan_start = checked  # type: ignore[method-assign]
            ours.append(run(max_bytes))
            LogSegment.scan_start = plain  # type: ignore[method-assign]
            peer.append(run(max_bytes))
        LogSegment.scan_start = checked  # type: ignore[method-assign]
        a, b = statistics.median(ours), statistics.median(peer)
        print(
            f"max_bytes={max_bytes}: checked {a:.1f} us/read, unchecked {b:.1f} us/read, "
            f"ratio {a / b:.3f}"
        )
    log.close()


if __name__ == "__main__":
    main()
