"""How fast the ``kafkalog`` command answers: help and light commands against the floor of any
Python command (``python3 -c pass``) and the 0.3 s target of issue 15, in one run.

Each command is started as a user starts it (a new process; the installed ``kafkalog`` console
script when it is on PATH, else ``python3 -m kafkalog``), N times; the median wall time is
printed next to the floor's, with their ratio.

    python3 bench/bench_cli.py [--repeat 15]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures"
PARTITION = FIXTURE / "kafka-4.0-snapshot-javacode" / "v2-none-0"
TARGET = 0.3


def timed(argv: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    script = shutil.which("kafkalog")
    command = [script] if script else [sys.executable, "-m", "kafkalog"]
    cases = {
        "kafkalog --help": [*command, "--help"],
        "kafkalog dump --help": [*command, "dump", "--help"],
        "kafkalog lookup --offset 50": [*command, "lookup", str(PARTITION), "--offset", "50"],
        "kafkalog cat --max 5": [*command, "cat", str(PARTITION), "--max", "5"],
        "kafkalog verify (one partition)": [*command, "verify", str(PARTITION)],
    }
    floor = timed([sys.executable, "-c", "pass"], args.repeat)
    print(f"{'command':<34}{'median s':>10}{'vs floor':>10}{'target':>9}")
    print(f"{'floor: python3 -c pass':<34}{floor:>10.3f}{1.0:>9.1f}x")
    for name, argv in cases.items():
        t = timed(argv, args.repeat)
        verdict = "met" if t <= TARGET else "over"
        print(f"{name:<34}{t:>10.3f}{t / floor:>9.1f}x{verdict:>9}")
    print(
        f"({'console script ' + script if script else 'python3 -m kafkalog'}; median of "
        f"{args.repeat}; target {TARGET} s)"
    )


if __name__ == "__main__":
    main()
