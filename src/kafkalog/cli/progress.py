"""Progress bars for long commands, kept off everything a script reads.

A bar goes to stderr, and only when stderr is a terminal; commands whose stdout is the result
(``dump``) show it only when stdout is redirected, so the bar never interleaves with the lines a
user is reading. ``KAFKALOG_PROGRESS=0`` turns bars off, ``=1`` forces them (for tests and for
wrappers that capture stderr through a pipe but still want them).
"""

from __future__ import annotations

import os
import sys
from typing import Any


def enabled(*, stdout_is_result: bool = False) -> bool:
    forced = os.environ.get("KAFKALOG_PROGRESS", "")
    if forced in ("0", "1"):
        return forced == "1"
    if not sys.stderr.isatty():
        return False
    return not (stdout_is_result and sys.stdout.isatty())


def bar(
    desc: str, total: int | None = None, unit: str = "B", *, stdout_is_result: bool = False
) -> Any:
    """A tqdm bar; ``unit="B"`` counts bytes in KiB/MiB/GiB, anything else counts items."""
    from tqdm import tqdm

    scale: dict[str, Any] = {"unit_scale": True}
    if unit == "B":
        scale["unit_divisor"] = 1024
    try:  # a terminal that reports no width (some pty wrappers) would get an invisible bar
        sized = os.get_terminal_size(sys.stderr.fileno()).columns > 0
    except (OSError, ValueError):
        sized = False
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        file=sys.stderr,
        disable=not enabled(stdout_is_result=stdout_is_result),
        leave=False,
        dynamic_ncols=sized,
        ncols=None if sized else 80,
        nrows=None if sized else 24,
        **scale,
    )


def log_bytes(directory: str) -> int:
    """The size of a partition's segment logs: the work a whole-partition pass will do."""
    from kafkalog import files
    from kafkalog.log.layout import segment_logs

    return sum(files.getsize(path) for _, path in segment_logs(directory))
