"""``kafkalog verify`` beside a live writer (a broker, ``kafkalog serve``): the writer appends
between verify's read of a ``.log`` and its read of the indexes, and the indexes then hold
entries for batches the read never saw. They were PROBLEMs ("offset 54199 is not in the
log; next: kafkalog rebuild-index"), found by a newcomer running verify on a serve's
directory while clients produced; now one warning per index says what was not checked and
why. The same entries without a growing ``.log`` are still problems.
"""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest

from kafkalog.cli import verify
from kafkalog.cli.main import main
from kafkalog.log import Log, TopicConfig
from kafkalog.records import Record

CONFIG = TopicConfig(index_interval_bytes=64)  # an index entry every batch or so


def _write(log: Log, start: int, n: int) -> None:
    for i in range(start, start + n):
        log.append_records([Record.of(b"order %d" % i, timestamp=1_700_000_000_000 + i)])


def _verify(path: Path) -> tuple[int, str]:
    out = io.StringIO()
    with redirect_stdout(out):
        status = main(["verify", str(path)])
    return status, out.getvalue()


def test_appends_during_verify_are_a_warning_not_a_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    part = tmp_path / "orders-0"
    with Log(part, CONFIG) as writer:
        _write(writer, 0, 50)
        original = verify._verify_offset_index

        def writer_appends_first(*args: Any) -> None:
            _write(writer, 50, 30)  # the writer goes on between the .log's read and the index's
            writer.flush()
            original(*args)

        monkeypatch.setattr(verify, "_verify_offset_index", writer_appends_first)
        status, said = _verify(part)
    assert status == 0, said
    assert "PROBLEM" not in said
    warnings = [line for line in said.splitlines() if "not checked" in line]
    assert len(warnings) == 2, said  # the .index and the .timeindex, once each
    for suffix, line in zip((".index", ".timeindex"), warnings, strict=True):
        assert line.startswith(f"warning {part / ('00000000000000000000' + suffix)}: ")
        assert "of the .log not checked: it grew by " in line
        assert "while verify read it (a live writer); verify again once it stops" in line
    monkeypatch.undo()
    status, said = _verify(part)  # the writer stopped: every entry checked, and all hold
    assert status == 0 and "not checked" not in said and "80 record(s): OK" in said, said


def test_entries_past_a_log_that_does_not_grow_are_still_problems(tmp_path: Path) -> None:
    part = tmp_path / "orders-0"
    with Log(part, CONFIG) as writer:
        _write(writer, 0, 50)
    segment = part / "00000000000000000000.log"
    with open(segment, "r+b") as f:  # cut to half, as a lost write would leave it
        f.truncate(segment.stat().st_size // 2)
    status, said = _verify(part)
    assert status == 1
    assert "points past the end of the .log" in said and "not checked" not in said
