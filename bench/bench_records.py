"""Records per second: kafkalog's columnar codec against aiokafka (C extension) and kafka-python.

Same bytes in the same run: one log buffer of 1,000-record batches (10-byte keys, 100-byte
values) is encoded once, uncompressed and with zstd, and every decoder reads exactly those
bytes. Two value sets: JSON event payloads (typical Kafka data, compresses ~4x) and
high-entropy text (zstd's worst case, where libzstd itself dominates every decoder's time; the
"decompress only" line is that bound). Decoding verifies CRCs everywhere (ours always does,
the peers are asked to). Encoding starts from the same rows: Arrow columns for ours, Python
lists for the peers (their API).

    python bench/bench_records.py [--batches 200] [--repeat 5] [--values json] [--codecs zstd]
        [--decode-only]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from kafkalog.records import decode_arrow, encode_arrow

RECORDS_PER_BATCH = 1000


def best_of(repeat: int, fn: Callable[[], int]) -> float:
    """Best wall time of ``repeat`` runs (after one warm-up), as records per second."""
    n = fn()
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return n / best


EVENTS = [b"page_view", b"add_to_cart", b"checkout", b"search", b"login"]


def json_values(n: int, rng: np.random.Generator) -> list[bytes]:
    """Typical event payloads: JSON with varying ids, exactly 100 bytes each."""
    users = rng.integers(0, 10_000_000, n)
    items = rng.integers(0, 100_000, n)
    events = rng.integers(0, len(EVENTS), n)
    sessions = rng.integers(0, 2**32, n)
    out = []
    for i in range(n):
        v = b'{"user":%d,"event":"%s","item":%d,"session":"%08x","ts":%d}' % (
            users[i],
            EVENTS[events[i]],
            items[i],
            sessions[i],
            1_700_000_000_000 + i,
        )
        out.append(v.ljust(100, b" ")[:100])
    return out


def text_values(n: int, rng: np.random.Generator) -> list[bytes]:
    """High-entropy text (random characters from a 44-symbol alphabet): zstd's worst case."""
    alphabet = np.frombuffer(b'abcdefghijklmnopqrstuvwxyz0123456789 ,.:{}"', np.uint8)
    values = alphabet[rng.integers(0, len(alphabet), size=(n, 100))]
    return [v.tobytes() for v in values]


def make_rows(n: int, kind: str = "json") -> pa.Table:
    rng = np.random.default_rng(42)
    values = json_values(n, rng) if kind == "json" else text_values(n, rng)
    keys = [b"key-%06d" % (i % 1_000_000) for i in range(n)]
    ts = 1_700_000_000_000 + np.arange(n, dtype=np.int64)
    return pa.table(
        {
            "key": pa.array(keys, pa.binary()),
            "value": pa.array(values, pa.binary()),
            "timestamp": pa.array(ts, pa.timestamp("ms", tz="UTC")),
        }
    )


def peer_decode(module: str, data: bytes) -> Callable[[], int]:
    if module == "aiokafka":
        from aiokafka.record.memory_records import MemoryRecords
    else:
        from kafka.record.memory_records import MemoryRecords  # type: ignore[no-redef]

    def run() -> int:
        records = MemoryRecords(data)
        n = 0
        while True:
            batch = records.next_batch()
            if batch is None:
                return n
            if not batch.validate_crc():
                raise AssertionError("peer found a bad CRC")
            for rec in batch:
                rec.key  # noqa: B018 - touch the fields as a consumer would
                rec.value  # noqa: B018
                n += 1

    return run


def peer_encode(module: str, rows: dict[str, list], codec_id: int) -> Callable[[], int]:
    if module == "aiokafka":
        from aiokafka.record.default_records import DefaultRecordBatchBuilder
    else:
        from kafka.record.default_records import (  # type: ignore[no-redef]
            DefaultRecordBatchBuilder,
        )
    keys, values, stamps = rows["key"], rows["value"], rows["timestamp"]
    n = len(keys)

    def run() -> int:
        for start in range(0, n, RECORDS_PER_BATCH):
            builder = DefaultRecordBatchBuilder(
                magic=2,
                compression_type=codec_id,
                is_transactional=False,
                producer_id=-1,
                producer_epoch=-1,
                base_sequence=-1,
                batch_size=1 << 30,
            )
            for i in range(start, min(n, start + RECORDS_PER_BATCH)):
                builder.append(
                    i - start, timestamp=stamps[i], key=keys[i], value=values[i], headers=[]
                )
            builder.build()
        return n

    return run


def zstd_bound(encoded: object, data: bytes) -> Callable[[], int]:
    """Decompressing every payload and nothing else: what any libzstd-based decoder pays."""
    import cramjam

    pos = encoded.positions  # type: ignore[attr-defined]
    sizes = encoded.sizes  # type: ignore[attr-defined]
    payloads = [data[int(p) + 61 : int(p) + int(s)] for p, s in zip(pos, sizes, strict=True)]
    n = int(encoded.record_counts.sum())  # type: ignore[attr-defined]

    def run() -> int:
        for payload in payloads:
            cramjam.zstd.decompress(payload)
        return n

    return run


def our_libzstd_bound(encoded: object, data: bytes) -> Callable[[], int]:
    """The libzstd calls of our decode alone: python-zstandard's bundled libzstd (what the
    kernel calls), every payload into one reused buffer, nothing else."""
    from zstandard._cffi import ffi, lib

    pos = encoded.positions  # type: ignore[attr-defined]
    sizes = encoded.sizes  # type: ignore[attr-defined]
    payloads = [data[int(p) + 61 : int(p) + int(s)] for p, s in zip(pos, sizes, strict=True)]
    n = int(encoded.record_counts.sum())  # type: ignore[attr-defined]
    dctx = ffi.gc(lib.ZSTD_createDCtx(), lib.ZSTD_freeDCtx)
    out = np.empty(1 << 22, np.uint8)
    dst = ffi.cast("void *", out.ctypes.data)

    def run() -> int:
        for payload in payloads:
            got = lib.ZSTD_decompressDCtx(
                dctx, dst, len(out), ffi.from_buffer(payload), len(payload)
            )
            if lib.ZSTD_isError(got):
                raise AssertionError("libzstd refused a payload")
        return n

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--kafka-python-batches",
        type=int,
        default=20,
        help="kafka-python is pure Python; it reads a prefix of the same bytes",
    )
    for option, choices, what in (
        ("--values", ("json", "text"), "value sets"),
        ("--codecs", ("none", "zstd"), "codecs"),
    ):
        parser.add_argument(
            option, nargs="+", choices=choices, default=list(choices), help=f"{what} to run"
        )
    parser.add_argument(
        "--decode-only", action="store_true", help="skip the encode rows (and kafka-python)"
    )
    args = parser.parse_args()
    n = args.batches * RECORDS_PER_BATCH
    print(
        f"{n:,} records in 1,000-record batches, 10-byte keys, 100-byte values; "
        "figures are records per second, best of runs"
    )
    for kind in args.values:
        table = make_rows(n, kind)
        py_rows = {
            "key": table.column("key").to_pylist(),
            "value": table.column("value").to_pylist(),
            "timestamp": table.column("timestamp").cast(pa.int64()).to_pylist(),
        }
        small = args.kafka_python_batches * RECORDS_PER_BATCH
        small_rows = {k: v[:small] for k, v in py_rows.items()}
        label = "JSON event values" if kind == "json" else "high-entropy text values"
        print(f"\n{label}")
        print(
            f"{'operation':<30}{'kafkalog':>14}{'aiokafka':>14}{'kafka-python':>14}"
            f"{'vs aiokafka':>13}{'vs kafka-py':>13}"
        )
        for codec, codec_id in (("none", 0), ("zstd", 4)):
            if codec not in args.codecs:
                continue
            encoded = encode_arrow(
                table, compression=codec, max_records_per_batch=RECORDS_PER_BATCH
            )
            data = bytes(encoded.data)
            cut = args.kafka_python_batches  # batch starts; all of it when there are fewer
            prefix = data[: int(encoded.positions[cut])] if cut < len(encoded.positions) else data
            ours = best_of(args.repeat, lambda d=data: decode_arrow(d, verify_crc=True).num_rows)
            aio = best_of(args.repeat, peer_decode("aiokafka", data))
            kpy = (
                float("nan")
                if args.decode_only
                else best_of(1, peer_decode("kafka-python", prefix))
            )
            kpy_rate, kpy_ratio = (
                (f"{'-':>14}", f"{'-':>13}")
                if args.decode_only
                else (f"{kpy / 1e6:>12.2f}M/s", f"{ours / kpy:>12.1f}x")
            )
            print(
                f"{'decode ' + codec + ' (CRC checked)':<30}{ours / 1e6:>12.2f}M/s"
                f"{aio / 1e6:>12.2f}M/s{kpy_rate}{ours / aio:>12.2f}x{kpy_ratio}"
            )
            if codec == "zstd":
                threaded = best_of(
                    args.repeat,
                    lambda d=data: decode_arrow(d, verify_crc=True, decompress_threads=2).num_rows,
                )
                print(
                    f"{'  ours, 2 threads':<30}{threaded / 1e6:>12.2f}M/s{'':>28}"
                    f"{threaded / aio:>12.2f}x   (the peers use one thread)"
                )
                bound = best_of(args.repeat, zstd_bound(encoded, data))
                ours_bound = best_of(args.repeat, our_libzstd_bound(encoded, data))
                ratio = len(table.column("value").to_pylist()) * 110 / len(data)
                print(
                    f"{'  zstd decompress only (bound)':<30}{bound / 1e6:>12.2f}M/s"
                    f"{'':>28}   compression ratio {ratio:.1f}"
                )
                print(
                    f"{'  our libzstd calls only':<30}{ours_bound / 1e6:>12.2f}M/s"
                    f"{'':>28}   {ours / ours_bound:.0%} of our decode time; "
                    f"cramjam's: {aio / bound:.0%} of aiokafka's"
                )
            if args.decode_only:
                continue
            ours_e = best_of(
                args.repeat,
                lambda c=codec, t=table: encode_arrow(
                    t, compression=c, max_records_per_batch=RECORDS_PER_BATCH
                ).record_counts.sum(),
            )
            aio_e = best_of(args.repeat, peer_encode("aiokafka", py_rows, codec_id))
            kpy_e = best_of(1, peer_encode("kafka-python", small_rows, codec_id))
            print(
                f"{'encode ' + codec:<30}{ours_e / 1e6:>12.2f}M/s{aio_e / 1e6:>12.2f}M/s"
                f"{kpy_e / 1e6:>12.2f}M/s{ours_e / aio_e:>12.2f}x{ours_e / kpy_e:>12.1f}x"
            )


if __name__ == "__main__":
    main()
