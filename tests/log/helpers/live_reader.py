"""A reader process for tests/log/test_concurrency.py: reads a partition another process writes.

``live_reader.py <partition dir> <seed>``: prints ``READY``, then reads the log over and over
(alternating a long-lived read-only :class:`Log` that is ``refresh()``-ed and a freshly opened
one; from the log start or from a random offset already seen) and checks each read with
``logcheck.read_live``; the end it sees must never go back. When stdin reaches EOF (the writer
has closed the log) it does one last read and prints ``DONE {"reads": n, "end": offset, ...}``;
on a failed check it prints ``FAIL <details>`` and exits 1.
"""

from __future__ import annotations

import json
import random
import sys
import threading
import time
import traceback

from logcheck import read_live

from kafkalog.log import Log


def main() -> int:
    directory, seed = sys.argv[1], int(sys.argv[2])
    rng = random.Random(seed)
    stop = threading.Event()

    def wait_for_eof() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=wait_for_eof, daemon=True).start()
    print("READY", flush=True)
    live = Log(directory, writable=False)
    reads = fresh_reads = torn = 0
    last_end = 0
    try:
        while True:
            final = stop.is_set()
            fresh = rng.random() < 0.4
            if fresh:
                log = Log(directory, writable=False)
                fresh_reads += 1
            else:
                live.refresh()
                log = live
            try:
                if log.log_end_offset < last_end:
                    raise AssertionError(
                        f"log_end_offset went back from {last_end} to {log.log_end_offset} "
                        f"({'fresh' if fresh else 'refreshed'} log)"
                    )
                start = None
                if rng.random() < 0.3 and last_end > log.log_start_offset:
                    start = rng.randint(log.log_start_offset, last_end)
                view = read_live(log, start)
            finally:
                if fresh:
                    log.close()
            if view.end < last_end:
                raise AssertionError(f"read ended at {view.end}, an earlier one at {last_end}")
            last_end = view.end
            reads += 1
            torn += view.torn
            if final:
                break
            time.sleep(rng.uniform(0, 0.002))
    except Exception:
        print("FAIL " + traceback.format_exc().replace("\n", " | "), flush=True)
        return 1
    finally:
        live.close()
    print(
        "DONE " + json.dumps({"reads": reads, "fresh": fresh_reads, "torn": torn, "end": last_end}),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
