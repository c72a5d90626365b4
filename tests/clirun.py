"""Running ``kafkalog`` as a user does, and proving it left a tree alone: shared by the CLI
tests."""

from __future__ import annotations

import contextlib
import hashlib
import io
import subprocess
import sys
from pathlib import Path


def kafkalog(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kafkalog", *args], capture_output=True, text=True, timeout=timeout
    )


def kafkalog_here(*args: str) -> subprocess.CompletedProcess[str]:
    """``kafkalog ARGS`` through the same ``main`` the command runs, in this process: its exit
    status and what it printed, as :func:`kafkalog` returns them. A real process costs an
    interpreter start and kafkalog's imports (numba's among them), a second or more per call,
    and most CLI tests run the command several times; where the process itself is the point
    (the entry point, a signal, a lock held by another process) tests use :func:`kafkalog`."""
    from kafkalog.cli.main import main

    if args[:1] == ("rebuild-index",):
        # its refusals and warnings reach stderr through a log handler the command installs
        # only where nothing configured logging: in pytest (which has) they would not show
        return kafkalog(*args)
    out, err = io.BytesIO(), io.BytesIO()
    # text streams over bytes, as a process's are (``.buffer`` there too), UTF-8 as in CI
    stdout = io.TextIOWrapper(out, encoding="utf-8", write_through=True)
    stderr = io.TextIOWrapper(err, encoding="utf-8", write_through=True)
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            code = main(list(args))
        except SystemExit as e:  # argparse's usage errors and --help
            code = e.code if isinstance(e.code, int) else int(e.code is not None)
        stdout.flush()
        stderr.flush()

    def text(data: io.BytesIO) -> str:  # decoded as ``subprocess.run(text=True)`` does
        return data.getvalue().decode().replace("\r\n", "\n").replace("\r", "\n")

    return subprocess.CompletedProcess(["kafkalog", *args], code, text(out), text(err))


def tree_snapshot(root: Path) -> dict[str, tuple[int, str]]:
    """Every file under ``root`` with its mtime and content digest."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            out[str(path)] = (
                path.stat().st_mtime_ns,
                hashlib.sha256(path.read_bytes()).hexdigest(),
            )
    return out
