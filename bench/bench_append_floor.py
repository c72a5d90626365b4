"""What a compiled append could reach: the floor of a validating append done in one C call per
batch, next to the plain write (the peer), the same floor in Python, and ``Log.append``, on the
same pre-encoded 16 KiB batches in one run (the setup of ``bench_log.py``'s append).

The C file (``append_floor.c``) is built here with the machine's C compiler into a temporary
directory; it is a measuring instrument, not part of kafkalog. Its CRC-32C is the ``crc32c``
package's own C function, so both floors check CRCs with the same code.

    python bench/bench_append_floor.py [--append-mb 500] [--repeat 3]
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import os
import shutil
import subprocess
import sysconfig
import tempfile
import time
from collections.abc import Callable
from types import ModuleType

import crc32c

from bench_log import append_floor, append_ours, append_peer, fresh_dir, pre_encode

HERE = os.path.dirname(os.path.abspath(__file__))


def build(workdir: str) -> ModuleType:
    """Compile append_floor.c against this interpreter and load it."""
    compiler = shutil.which(os.environ.get("CC", "gcc")) or shutil.which("cc")
    if compiler is None:
        raise SystemExit("no C compiler found (set CC): this benchmark builds a C extension")
    target = os.path.join(workdir, "append_floor" + sysconfig.get_config_var("EXT_SUFFIX"))
    subprocess.run(
        [
            compiler,
            "-O2",
            "-shared",
            "-fPIC",
            f"-I{sysconfig.get_paths()['include']}",
            os.path.join(HERE, "append_floor.c"),
            "-o",
            target,
        ],
        check=True,
    )
    spec = importlib.util.spec_from_file_location("append_floor", target)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    lib = ctypes.CDLL(crc32c._crc32c.__file__)
    name = "_crc32c_hw_adler" if crc32c.hardware_based else "_crc32c_sw_slicing_by_8"
    module.set_crc(ctypes.cast(getattr(lib, name), ctypes.c_void_p).value)
    return module


def c_floor(
    module: ModuleType, copy: bool
) -> Callable[[list[bytes], str, int], tuple[float, float]]:
    def run(batches: list[bytes], parent: str, per_call: int) -> tuple[float, float]:
        path = fresh_dir(parent, "c-floor.bin")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        append = module.append
        position = offset = 0
        t, c = time.perf_counter(), time.process_time()
        for batch in batches:
            position += append(fd, batch, position, offset, copy)
            offset += 135
        elapsed = time.perf_counter() - t, time.process_time() - c
        os.close(fd)
        assert os.path.getsize(path) == sum(len(b) for b in batches)
        os.remove(path)
        return elapsed

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--append-mb", type=float, default=500)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="kafkalog-bench-floor-")
    try:
        module = build(workdir)
        batches = pre_encode(int(args.append_mb * 1e6))
        runs = {
            "plain write() (peer)": append_peer,
            "C floor: copy, CRC, stamp, pwrite": c_floor(module, copy=True),
            "C floor, no copy (pwritev)": c_floor(module, copy=False),
            "Python floor: CRC, stamp, write": append_floor,
            "kafkalog Log.append": append_ours,
        }
        append_peer(batches, workdir, 1)  # untimed warm-up
        best = dict.fromkeys(runs, float("inf"))
        for _ in range(args.repeat):
            for label, fn in runs.items():
                best[label] = min(best[label], fn(batches, workdir, 1)[0])
        peer = best["plain write() (peer)"]
        print(f"{len(batches):,} batches of ~16 KiB, best of {args.repeat}")
        print(f"{'':<38}{'us/batch':>10}{'vs write':>10}")
        for label, secs in best.items():
            print(f"{label:<38}{secs / len(batches) * 1e6:>10.2f}{peer / secs:>9.2f}x")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
