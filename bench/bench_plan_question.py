"""The Python planner's answer to the JVM source's plan question, this tree against another
(issue 31), in the planner process's CPU time (a loaded machine moves wall times far more).

    python bench/bench_plan_question.py --data /tmp/bench24 [--before /work/main/src] [--pairs 4]

The ``clicks`` partitions of ``--data`` (``bench_spark.py``'s sample) are copied to a temporary
directory and left to settle; each pair runs one process per tree, alternating which goes first,
each asking ``--questions`` times, as ``KafkaLogScan`` asks (``op: plan``): a fresh plan
(``memo: false``, what ``spark.kafkalog.jvm.planCache=false`` sends), then, after 10 records
appended to ``clicks-0``, a live log's plan (``memo: true``: ``clicks-0`` planned again, the
others kept). Medians per process of ``time.process_time`` around each answer.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def child(live: str, questions: int) -> None:
    from kafkalog.log import Log, TopicConfig
    from kafkalog.records import Record
    from kafkalog.spark import jvm_bridge

    planner = jvm_bridge.Planner()

    def ask(memo: bool) -> float:
        req = {"op": "plan", "options": {"path": live, "subscribe": "clicks"}}
        req.update({"filters": [], "memo": memo, "settleMs": 2000})
        t = time.process_time()
        answer = planner.answer(req)
        spent = time.process_time() - t
        assert "error" not in answer, answer
        return spent

    for _ in range(3):
        ask(False), ask(True)
    fresh, written = [], []
    config = TopicConfig(segment_bytes=16 * 1024 * 1024, index_interval_bytes=4096)
    with Log(os.path.join(live, "clicks-0"), config) as log:
        for _ in range(questions):
            fresh.append(ask(False))
            stamp = int(time.time() * 1000)
            log.append_records([Record.of(b"x" * 100, b"k", stamp) for _ in range(10)])
            written.append(ask(True))
    print(f"RESULT {statistics.median(fresh) * 1000:.2f} {statistics.median(written) * 1000:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--before", help="another kafkalog src tree, run in the same pairs")
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--questions", type=int, default=25)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.questions)
        return
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    trees = {"this": here}
    if args.before:
        trees["before"] = os.path.abspath(args.before)
    work = tempfile.mkdtemp(prefix="kafkalog-bench-plan-")
    try:
        live = os.path.join(work, "data")
        os.makedirs(live)
        for name in sorted(os.listdir(args.data)):
            path = os.path.join(args.data, name)
            if name.startswith("clicks-"):
                shutil.copytree(path, os.path.join(live, name))
            elif name.endswith("-checkpoint"):  # the log start offsets a log reads at open
                shutil.copy2(path, os.path.join(live, name))
        time.sleep(2.5)  # the copies' ctimes settle (plan_memo, segment_facts: 2 s)
        load = os.getloadavg()[0]
        for r in range(args.pairs):
            for tree in list(trees) if r % 2 == 0 else list(reversed(trees)):
                env = {**os.environ, "PYTHONPATH": trees[tree]}
                cmd = [sys.executable, __file__, "--data", args.data, "--child", live]
                cmd += ["--questions", str(args.questions)]
                out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
                line = next(x for x in out.stdout.splitlines() if x.startswith("RESULT "))
                fresh, written = line.split()[1:]
                print(f"{tree:<8} fresh plan {fresh:>7} ms CPU, a live log's plan {written:>7} ms")
        print(f"load average {load:.1f} -> {os.getloadavg()[0]:.1f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
