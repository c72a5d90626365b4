"""The log cleaner's throughput and memory (issue 24 §6).

Throughput: MB/s of input (the segments a cleaning reads) for ``Log.compact`` against the floor
any cleaner pays, a plain decode + re-encode of the same segments, in the same run:

- ``decode+encode (objects)``: every batch's records decoded (``RecordBatch.records``) and
  encoded again (``encode_batch``, same codec), kafkalog's object path;
- ``decode+encode (columnar)``: the same bytes through the compiled Arrow kernels
  (``decode_arrow`` + ``encode_arrow``), kafkalog's fastest decode and encode.

A cleaning reads the dirty section twice (the offset map, then the rewrite) and keeps what
Kafka keeps: here each key is written ``--updates`` times, so most batches lose most records.

Memory: the peak of Python and numpy allocations (``tracemalloc``) while cleaning logs of one
size and of four times that size, with the same ``--memory-buffer`` and more keys than it holds
(each key written twice): the map stays within the buffer (several rounds), and the rest is
the cleaning's own buffers, allocated once (a 1 MiB read chunk, one append's output, a
chunk's headers, one batch's record scratch), whatever the log's size.

    python3 bench/bench_cleaner.py [--mb 32] [--codec none|zstd] [--updates 10]
        [--dedupe-buffer N] [--memory-buffer N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
import tracemalloc

from kafkalog.log import Log, TopicConfig
from kafkalog.log.cleaner import CleanerOptions
from kafkalog.records import Record, RecordBatch, encode_batch
from kafkalog.records.types import Compression

CONFIG = TopicConfig(
    cleanup_policy="compact", segment_bytes=64 * 1024 * 1024, file_delete_delay_ms=0
)


def build(directory: str, mb: float, keys: int, codec: Compression, per_batch: int = 100) -> int:
    """A log of about ``mb`` MB: batches of ``per_batch`` records, keys drawn round-robin
    over ``keys`` keys (so each is written many times), 100-byte values."""
    log = Log(directory, CONFIG)
    target = int(mb * 1024 * 1024)
    offset = 0
    value = b"v" * 90
    while log.size_in_bytes() < target:
        recs = [
            Record(
                -1, 1_000 + offset + i, b"key-%08d" % ((offset + i) % keys), value + b"%010d" % i
            )
            for i in range(per_batch)
        ]
        log.append(encode_batch(recs, compression=codec))
        offset += per_batch
    log.roll()
    size = sum(s.size for s in log.segments)
    log.close()
    return size


def plain_objects(directory: str) -> tuple[float, int]:
    """Decode every batch's records and encode them again (same codec): the object path."""
    log = Log(directory, CONFIG, writable=False)
    start = time.perf_counter()
    n = 0
    for seg in log.segments:
        for batch in seg.entries(0, verify_crc=True):
            assert isinstance(batch, RecordBatch)
            recs = batch.records()
            encode_batch(recs, base_offset=batch.base_offset, compression=batch.compression)
            n += batch.size_in_bytes
    took = time.perf_counter() - start
    log.close()
    return took, n


def plain_columnar(directory: str) -> tuple[float, int]:
    """The same bytes through the compiled Arrow decode and encode kernels."""
    import numpy as np

    from kafkalog.records.columnar import decode_arrow
    from kafkalog.records.columnar_encode import encode_arrow

    log = Log(directory, CONFIG, writable=False)
    paths = [s.log.path for s in log.segments if s.size]
    log.close()
    start = time.perf_counter()
    n = 0
    for path in paths:
        with open(path, "rb") as f:
            data = f.read()
        table = decode_arrow(data)
        counts = np.full(-(-table.num_rows // 100), 100, np.int64)
        counts[-1] = table.num_rows - 100 * (len(counts) - 1)
        encode_arrow(table, batch_record_counts=counts)
        n += len(data)
    return time.perf_counter() - start, n


def clean(directory: str, dedupe: int) -> tuple[float, int, int]:
    log = Log(directory, CONFIG)
    size = log.size_in_bytes()
    start = time.perf_counter()
    result = log.compact(now=10**12, options=CleanerOptions(dedupe_buffer_size=dedupe))
    took = time.perf_counter() - start
    log.close()
    return took, size, result.rounds


def peak_memory(directory: str, dedupe: int) -> tuple[int, int]:
    log = Log(directory, CONFIG)
    tracemalloc.start()
    tracemalloc.reset_peak()
    result = log.compact(now=10**12, options=CleanerOptions(dedupe_buffer_size=dedupe))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    log.close()
    return peak, result.rounds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mb", type=float, default=32)
    ap.add_argument("--codec", default="none")
    ap.add_argument("--updates", type=int, default=10, help="writes per key")
    ap.add_argument("--dedupe-buffer", type=int, default=128 * 1024 * 1024)
    ap.add_argument("--memory-buffer", type=int, default=1024 * 1024)
    args = ap.parse_args()
    codec = Compression.parse(args.codec)
    root = tempfile.mkdtemp()
    try:
        src = os.path.join(root, "src", "t-0")
        records_est = int(args.mb * 1024 * 1024 / 120)
        size = build(src, args.mb, max(1, records_est // args.updates), codec)
        # warm the compiled kernels on a small log first (numba caches, but loads them once)
        warm = os.path.join(root, "warm", "t-0")
        build(warm, 0.2, 100, codec)
        clean(warm, args.dedupe_buffer)
        plain_columnar(warm)
        best: dict[str, float] = {}
        rounds = 0
        for _ in range(3):
            work = os.path.join(root, "work", "t-0")
            shutil.rmtree(os.path.dirname(work), ignore_errors=True)
            shutil.copytree(os.path.dirname(src), os.path.dirname(work))
            took, _, rounds = clean(work, args.dedupe_buffer)
            best["clean"] = min(best.get("clean", 1e9), took)
            t, _ = plain_objects(src)
            best["objects"] = min(best.get("objects", 1e9), t)
            t, _ = plain_columnar(src)
            best["columnar"] = min(best.get("columnar", 1e9), t)
        mb = size / 1e6
        print(
            f"{mb:.1f} MB of {args.codec} batches (100 records, 100-byte values), "
            f"each key written {args.updates} times; best of 3, MB/s of input"
        )
        print(f"{'Log.compact':28s} {mb / best['clean']:8.1f} MB/s  ({rounds} round)")
        for name, key in (
            ("decode+encode (objects)", "objects"),
            ("decode+encode (columnar)", "columnar"),
        ):
            rate = mb / best[key]
            print(f"{name:28s} {rate:8.1f} MB/s  cleaner/this = {best[key] / best['clean']:.2f}x")
        # memory: one size and four times it, the same dedupe buffer
        print(f"\npeak traced memory while cleaning, dedupe buffer {args.memory_buffer} bytes:")
        for factor in (1, 4):
            d = os.path.join(root, f"mem{factor}", "t-0")
            mem_mb = args.mb * factor / 4
            # each key written twice: more keys than the buffer holds, in either log
            sz = build(d, mem_mb, max(1, int(mem_mb * 1024 * 1024 / 120) // 2), codec)
            peak, rounds = peak_memory(d, args.memory_buffer)
            print(
                f"  log of {sz / 1e6:7.1f} MB ({rounds} rounds): peak {peak / 1e6:6.1f} MB "
                f"({peak / args.memory_buffer:.2f}x the dedupe buffer)"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
