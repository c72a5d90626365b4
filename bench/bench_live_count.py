"""``count(*)`` over a log being written to, against Parquet's count of the same rows (issue 31).

    python bench/bench_live_count.py --data /tmp/bench24 [--rounds 15]

The ``clicks`` partitions of ``--data`` (``bench_spark.py``'s sample; its Parquet copy
``<data>.parquet`` is the peer) are copied to a temporary directory, left to settle, counted once
(the summaries learn every batch), then each round appends one batch of 100 records to the
active segment of ``clicks-0`` and times, interleaved: the JVM source's ``count(*)`` (the answer
kept from the last round is stale: the planner is asked, re-plans only ``clicks-0``, and the
count reads only the headers of that partition's written segment; every sealed segment is
taken from its stamped summary), the same count with ``spark.kafkalog.jvm.planCache=false``
(nothing reused but the summaries: every partition planned, as a new process does), and
Parquet's ``count(*)``. Medians; ratios are Parquet's time over ours from the same rounds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from kafkalog.cli.spark_session import local_session
    from kafkalog.log import Log, TopicConfig
    from kafkalog.records import Record

    work = tempfile.mkdtemp(prefix="kafkalog-bench-live-")
    try:
        live = os.path.join(work, "data")
        for name in sorted(os.listdir(args.data)):
            if name.startswith("clicks-"):
                shutil.copytree(os.path.join(args.data, name), os.path.join(live, name))
        time.sleep(2.5)  # the copies' ctimes settle (BatchSummaries, plan_memo: 2 s)
        spark = local_session("bench-live", **{"spark.ui.enabled": "false"})
        spark.conf.set("spark.kafkalog.batchSummaries.dir", os.path.join(work, "summaries"))
        parquet = args.data.rstrip("/") + ".parquet"

        def count() -> int:
            return int(spark.read.format("kafkalog").option("path", live).load().count())

        def not_kept() -> int:
            spark.conf.set("spark.kafkalog.jvm.planCache", "false")
            try:
                return count()
            finally:
                spark.conf.unset("spark.kafkalog.jvm.planCache")

        queries = {
            "live count": count,
            "live count, planCache=false": not_kept,
            "parquet count": lambda: int(spark.read.parquet(parquet).count()),
        }
        rows = count()
        assert rows == queries["parquet count"](), "the copy and the Parquet rows differ"
        for q in queries.values():
            q()
        config = TopicConfig(segment_bytes=16 * 1024 * 1024, index_interval_bytes=4096)
        times: dict[str, list[float]] = {q: [] for q in queries}
        load = os.getloadavg()[0]
        with Log(os.path.join(live, "clicks-0"), config) as log:
            for _ in range(args.rounds):
                stamp = int(time.time() * 1000)
                log.append_records([Record.of(b"x" * 100, b"k%d" % i, stamp) for i in range(100)])
                rows += 100
                for name, query in queries.items():
                    t = time.perf_counter()
                    answer = query()
                    times[name].append(time.perf_counter() - t)
                    assert name == "parquet count" or answer == rows, (name, answer, rows)
        med = {q: statistics.median(v) for q, v in times.items()}
        print(
            f"{args.rounds} rounds, one 100-record batch appended to clicks-0 before each, "
            f"medians; load average {load:.1f} -> {os.getloadavg()[0]:.1f}"
        )
        for q in queries:
            print(f"{q:<32}{med[q] * 1000:8.1f} ms  {med['parquet count'] / med[q]:5.2f}x Parquet")
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
