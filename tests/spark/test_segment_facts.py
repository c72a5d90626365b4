"""Sealed segments' verified ends kept across plans (kafkalog.log.segment_facts): a plan made with
them equals a fresh plan after every change to a log (tests/log_changes.py's and a byte written in
place), checks no settled, unchanged sealed segment again, and still finds a sealed segment's
last batch damaged in place (its mtime put back) after its end was kept."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from test_plan_memo import CHANGES, SETTLE_MS, _append, _settle

from kafkalog.errors import DamagedLogError
from kafkalog.log import Log
from kafkalog.log.segment import LogSegment
from kafkalog.log.segment_facts import SegmentFacts
from kafkalog.spark import plan as plan_module
from kafkalog.spark.options import parse_read_options


def _plan(d: Path, facts: SegmentFacts | None) -> Any:
    opts = parse_read_options({"path": str(d)}, streaming=False)
    return plan_module._plan_partition("t", 0, str(d), opts, None, facts)


def _facts() -> SegmentFacts:
    return SegmentFacts(settle_ms=SETTLE_MS)


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_plan_with_kept_ends_equals_a_fresh_one_after_every_change(
    tmp_path: Path, change: str
) -> None:
    d = tmp_path / "data" / "t-0"
    extra: dict[str, Any] = {"cleanup_policy": ("compact",)} if change == "compaction" else {}
    _append(d, 60, 0, **extra)
    _settle()
    facts = _facts()
    assert _plan(d, facts) == _plan(d, None)
    assert _plan(d, facts) == _plan(d, None)
    CHANGES[change](d)
    assert _plan(d, facts) == _plan(d, None)  # unsettled now: checked again
    _settle()
    assert _plan(d, facts) == _plan(d, None)
    assert _plan(d, facts) == _plan(d, None)


def test_settled_sealed_segments_are_not_checked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = tmp_path / "data" / "t-0"
    _append(d, 60, 0)
    _settle()
    with Log(d, writable=False) as log:
        sealed = len(log.segments) - 1
    assert sealed >= 3
    walked: list[str] = []
    real = LogSegment.read_next_offset

    def counted(self: LogSegment) -> int:
        walked.append(os.path.basename(self.log.path))
        return real(self)

    monkeypatch.setattr(LogSegment, "read_next_offset", counted)
    facts = _facts()
    first = _plan(d, facts)
    assert len(walked) == sealed + 1  # every sealed segment's end, and the active's at open
    walked.clear()
    assert _plan(d, facts) == first
    assert len(walked) == 1  # the active segment only: always read anew
    _append(d, 1, 900)  # a live log: only its written segment is read anew
    walked.clear()
    _plan(d, facts)
    assert len(walked) == 1
    assert _plan(d, facts) == _plan(d, None)


def test_damage_in_place_after_a_kept_end_is_found(tmp_path: Path) -> None:
    d = tmp_path / "data" / "t-0"
    _append(d, 60, 0)
    _settle()
    facts = _facts()
    _plan(d, facts)
    with Log(d, writable=False) as log:
        seg = log.segments[0]
        last = list(seg.entries())[-1]
        path, position, base = seg.log.path, last.position, last.base_offset
    st = os.stat(path)
    with open(path, "r+b") as f:  # its base offset (outside the CRC) past the next segment's
        f.seek(position)
        f.write((base + 10_000).to_bytes(8, "big"))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # the mtime put back: the ctime moved
    for facts_or_none in (facts, None):
        with pytest.raises(DamagedLogError) as e:
            _plan(d, facts_or_none)
        assert os.path.basename(path) in str(e.value) and f"byte {position}" in str(e.value)
