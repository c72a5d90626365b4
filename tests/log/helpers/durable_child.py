"""A process appending with group commit until it is killed (``test_group_commit.py``).

``durable_child.py DIRECTORY THREADS``: opens the log, and THREADS threads append one record at
a time with ``durable=True`` through one :class:`SharedLog`; each append that returned (an
fsync covers it) is reported on stdout as ``offset value`` before the thread appends again. The
test kills the process with SIGKILL at some point and checks every reported record is there.
"""

from __future__ import annotations

import sys
import threading

from kafkalog.log import Log, TopicConfig
from kafkalog.log.group_commit import SharedLog
from kafkalog.records import Record


def main() -> None:
    directory, threads = sys.argv[1], int(sys.argv[2])
    shared = SharedLog(Log(directory, TopicConfig(segment_bytes=64 * 1024)))
    out = threading.Lock()
    print("READY", flush=True)

    def run(thread: int) -> None:
        i = 0
        while True:
            value = b"t%d-%d-" % (thread, i) + b"x" * (i % 97)
            info = shared.append_records([Record.of(value, key=b"%d" % thread)], durable=True)
            with out:
                sys.stdout.write(f"{info.first_offset} {value.decode()}\n")
                sys.stdout.flush()
            i += 1

    for t in range(threads):
        threading.Thread(target=run, args=(t,), daemon=True).start()
    threading.Event().wait()


if __name__ == "__main__":
    main()
