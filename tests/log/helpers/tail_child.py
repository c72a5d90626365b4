"""A tailing reader in its own process (``test_embedded_tail.py``, ``bench_embedded.py``).

``tail_child.py DIRECTORY COUNT [latency]``: prints READY once its reader is open, follows the
log from offset 0 until COUNT records arrived (or 60 s passed without one), then prints one JSON
line: the offsets in the order seen, a digest of every (offset, key, value, headers) in that
order, and how many offsets retention took from under it. With ``latency`` every record's value
is its send time (``time.time_ns()`` as decimal bytes) and the line carries the delays instead.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time

from kafkalog.log.tail import TailReader


def main() -> None:
    directory, count = sys.argv[1], int(sys.argv[2])
    latency = len(sys.argv) > 3 and sys.argv[3] == "latency"
    reader = TailReader(directory, start_offset=0, max_wait_ms=1.0 if latency else 5.0)
    print("READY", flush=True)
    offsets: list[int] = []
    delays: list[int] = []
    digest = hashlib.sha256()
    while len(offsets) < count:
        records = reader.poll(timeout=60.0)
        if not records:
            break
        now = time.time_ns()
        for r in records:
            offsets.append(r.offset)
            if latency:
                delays.append(now - int(r.value or b"0"))
            digest.update(repr((r.offset, r.key, r.value, r.headers)).encode())
    reader.close()
    out = {"offsets": offsets, "digest": digest.hexdigest(), "skipped": reader.skipped}
    if latency:
        out = {"delays_ns": delays, "count": len(offsets)}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
