"""Progress bars: shown on a terminal's stderr for long work, absent from pipes and from the
lines a script reads."""

from __future__ import annotations

import fcntl
import os
import pty
import shutil
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from provenance import FIXTURES

PARTITION = FIXTURES / "kafka-4.0-snapshot-javacode" / "v2-none-0"


def run_with_terminal_stderr(
    *args: str, env: dict[str, str] | None = None, size: tuple[int, int] = (0, 0)
) -> tuple[str, str]:
    """Run ``kafkalog`` with stderr on a pseudo-terminal (rows, columns as ``size``; a bare pty
    reports 0x0, as some wrappers do) and stdout on a pipe, as ``kafkalog dump ... > out.txt``
    runs in a shell."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", size[0], size[1], 0, 0))
    environ = {k: v for k, v in os.environ.items() if k != "KAFKALOG_PROGRESS"}
    environ.update(env or {})
    with subprocess.Popen(
        [sys.executable, "-m", "kafkalog", *args],
        stdout=subprocess.PIPE,
        stderr=follower,
        env=environ,
        text=True,
    ) as proc:
        os.close(follower)
        terminal = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the follower side closed: the process is done writing
                break
            if not chunk:
                break
            terminal += chunk
        stdout = proc.stdout.read() if proc.stdout else ""
        assert proc.wait(timeout=300) == 0, terminal.decode(errors="replace")
    os.close(leader)
    return stdout, terminal.decode(errors="replace")


@pytest.mark.parametrize(
    ("command", "label"),
    [
        (["verify", str(PARTITION)], "verifying"),
        (
            ["dump", "--deep-iteration", "--files", str(PARTITION / "00000000000000000000.log")],
            "dumping",
        ),
    ],
)
def test_bar_on_a_terminal_and_not_in_the_output(command: list[str], label: str) -> None:
    stdout, terminal = run_with_terminal_stderr(*command)
    assert (label in terminal and "B/s" in terminal) or f"{label}: 100%" in terminal, terminal
    assert label not in stdout and "\r" not in stdout


def test_rebuild_shows_bytes_done(tmp_path: Path) -> None:
    target = tmp_path / "v2-none-0"
    shutil.copytree(PARTITION, target)
    (target / "00000000000000000000.index").unlink()
    stdout, terminal = run_with_terminal_stderr("rebuild-index", str(target), size=(24, 100))
    assert "rebuilding" in terminal and max(map(len, terminal.split("\r"))) <= 100
    assert "create 00000000000000000000.index" in stdout


def test_no_bar_when_turned_off_or_piped() -> None:
    _, terminal = run_with_terminal_stderr("verify", str(PARTITION), env={"KAFKALOG_PROGRESS": "0"})
    assert "verifying" not in terminal
    piped = subprocess.run(
        [sys.executable, "-m", "kafkalog", "verify", str(PARTITION)],
        capture_output=True,
        text=True,
        timeout=300,
        env={k: v for k, v in os.environ.items() if k != "KAFKALOG_PROGRESS"},
    )
    assert piped.returncode == 0 and piped.stderr == ""


def test_every_command_has_help_with_examples_that_parse() -> None:
    """Each subcommand's --help ends with examples, and each example parses with argparse (so
    the help never advertises an option that no longer exists)."""
    import shlex

    from kafkalog.cli.main import build_parser

    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    wanted = {
        "dump",
        "verify",
        "rebuild-index",
        "lookup",
        "cat",
        "ingest",
        "timeline",
        "job",
        "query",
    }
    assert wanted <= set(commands)
    for name, sub in commands.items():
        text = sub.format_help()
        assert "examples:" in text, name
        examples = text.split("examples:", 1)[1].replace("\\\n", " ").strip().splitlines()
        assert examples, name
        for line in examples:
            argv = shlex.split(line.split(">")[0])
            assert argv[:2] == ["kafkalog", name], line
            parser.parse_args(argv[1:])
