"""What serve's CRC check of fetched batches costs in the log's read path: a sweep of a log by
fetches of ``--fetch-kb`` (as a consumer makes them) with ``Log.fetch(verify_crcs=True)`` the
first time (every batch checked) and again (a second group: nothing checked, nothing read),
next to the same sweep without the check (the read path before it), in one run, as ratios.

    python bench/bench_fetch_crc.py [--mb 64] [--value-bytes 100] [--batch-records 100] [--repeat 5]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from kafkalog.log import Log, TopicConfig
from kafkalog.records import LogReader, Record


def fetch_starts(log: Log, fetch_bytes: int) -> list[int]:
    """The offsets a consumer's fetches start at: after the last whole batch of the one before
    (found once, outside the timed sweeps)."""
    offset, starts = log.log_start_offset, []
    while offset < log.log_end_offset:
        info = log.fetch(offset, fetch_bytes)
        if info.region is None:
            break
        starts.append(offset)
        entries = list(LogReader(info.region.read()))
        offset = entries[-1].last_offset + 1
    return starts


def sweep(log: Log, starts: list[int], fetch_bytes: int, verify: bool) -> tuple[float, int]:
    """Seconds for the fetches from ``starts``, and the bytes they return."""
    total = 0
    begin = time.perf_counter()
    for offset in starts:
        region = log.fetch(offset, fetch_bytes, verify_crcs=verify).region
        total += 0 if region is None else region.length
    return time.perf_counter() - begin, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=64)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--batch-records", type=int, default=100)
    parser.add_argument("--fetch-kb", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-fetch-crc-") as tmp:
        log = Log(Path(tmp) / "t-0", TopicConfig(segment_bytes=16 * 1024 * 1024))
        value = b"v" * args.value_bytes
        while log.size_in_bytes() < args.mb * 1024 * 1024:
            log.append_records([Record.of(value) for _ in range(args.batch_records)])
        fetch_bytes = args.fetch_kb * 1024
        starts = fetch_starts(log, fetch_bytes)
        # best of --repeat each, interleaved (a shared machine's load comes and goes); the
        # verified ranges are forgotten before each first read
        plains, firsts, agains, size = [], [], [], 0
        for _ in range(args.repeat):
            t, size = sweep(log, starts, fetch_bytes, verify=False)
            plains.append(t)
            for seg in log.segments:
                if seg.log.verified is not None:
                    seg.log.verified.clear()
            firsts.append(sweep(log, starts, fetch_bytes, verify=True)[0])
            agains.append(sweep(log, starts, fetch_bytes, verify=True)[0])
        log.close()
    base, first, again = min(plains), min(firsts), min(agains)
    print(
        f"{size / 1e6:.1f} MB in batches of {args.batch_records} x {args.value_bytes} B, "
        f"fetches of {args.fetch_kb} KiB, best of {args.repeat}"
    )
    print(f"{'sweep':34} {'s':>8} {'MB/s':>9} {'vs unchecked':>13}")
    for name, t in (
        ("unchecked (the path before)", base),
        ("checked, first read", first),
        ("checked, read again", again),
    ):
        print(f"{name:34} {t:8.3f} {size / t / 1e6:9.1f} {t / base:12.2f}x")


if __name__ == "__main__":
    main()
