"""What meeting the ABORT markers costs a read_committed reader (kafkalog.log.abort_markers):
serve's read path (``Log.fetch(include_aborted=True)`` of 1 MiB, the fetched headers walked)
against the same fetch with the walk taken out, and the Spark source's Python task with
read_committed (control batches decoded as rows) against read_uncommitted, interleaved in one
process. The log is the worst case for the walk: transactions of small batches (one record each)
and their markers.

With ``--pre31`` the log is first compacted as a Kafka older than 3.1 leaves it
(tests/read_shapes.py ``compacted_before_kafka_31``: every ABORT marker below the active segment
an emptied transaction's that no ``.txnindex`` entry lists), so the walk also looks back from
such markers (``TransactionLookback``); 1 MB segments.

    python bench/bench_committed_check.py [--batches 100000] [--rounds 5] [--pre31]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pre31", action="store_true")
    args = parser.parse_args()
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    import kafkalog.log.local_log as local_log
    from kafkalog.log import Log
    from kafkalog.records import LogReader
    from kafkalog.spark.options import parse_read_options
    from kafkalog.spark.plan import plan_read
    from kafkalog.spark.task import read_split
    from read_shapes import V2, compacted_before_kafka_31, write_v2

    root = Path(tempfile.mkdtemp())
    spec = V2(
        records=args.batches,
        records_per_batch=(1, 1),
        producers="transactions",
        segment_bytes=(1 << 20) if args.pre31 else 1 << 30,
    )
    shape = write_v2(root, "bench-txn", spec, 0)
    d = shape.directory
    if args.pre31:
        d = compacted_before_kafka_31(shape, root / "pre31", spec)
    checked = local_log.fetched_unlisted

    # the offsets each 1 MiB fetch starts at, found once (outside the timing)
    starts: list[int] = []
    with Log(d, writable=False) as log:
        offset, lso = log.log_start_offset, log.last_stable_offset()
        while offset < lso:
            info = log.fetch(offset, 1 << 20, max_offset=lso, include_aborted=True)
            if info.region is None:
                break
            starts.append(offset)
            offset = [e for e in LogReader(info.region.read())][-1].last_offset + 1

    def fetch_all(walk: bool) -> float:
        local_log.fetched_unlisted = checked if walk else (lambda *a, **k: [])  # type: ignore[assignment]
        t = time.perf_counter()
        with Log(d, writable=False) as log:
            lso = log.last_stable_offset()
            for offset in starts:
                log.fetch(offset, 1 << 20, max_offset=lso, include_aborted=True)
        local_log.fetched_unlisted = checked
        return time.perf_counter() - t

    def spark(committed: bool) -> float:
        options = {"path": str(d.parent), "subscribe": d.name.rsplit("-", 1)[0]}
        if committed:
            options["isolationLevel"] = "read_committed"
        t = time.perf_counter()
        splits, aborted = plan_read(parse_read_options(options))
        for s in splits:
            for _ in read_split(s, include_headers=False, aborted=aborted.get(s.directory)):
                pass
        return time.perf_counter() - t

    times: dict[str, list[float]] = {k: [] for k in ("walk", "nowalk", "rc", "ru")}
    for _ in range(args.rounds):
        times["walk"].append(fetch_all(True))
        times["nowalk"].append(fetch_all(False))
        times["rc"].append(spark(True))
        times["ru"].append(spark(False))
    med = {k: statistics.median(v) for k, v in times.items()}
    size = sum(p.stat().st_size for p in d.glob("*.log"))
    print(f"log: {size / 1e6:.1f} MB in {d}")
    print(
        f"serve read path, read_committed 1 MiB fetches: with the marker walk {med['walk']:.3f} s, "
        f"without {med['nowalk']:.3f} s, ratio {med['walk'] / med['nowalk']:.2f}"
    )
    print(
        f"Spark Python task: read_committed {med['rc']:.3f} s, read_uncommitted {med['ru']:.3f} s, "
        f"ratio {med['rc'] / med['ru']:.2f}"
    )


if __name__ == "__main__":
    main()
