"""The planner's kept partition plans (kafkalog.spark.plan_memo): a plan made with the memo equals
the plan made without it after every change to a log (an append, a roll, retention, a
truncation, compaction, a byte written in place with its mtime put back, a checkpoint of the data
directory rewritten); only changed or unsettled partitions are planned again; a partition whose
planning warned is planned (and warns) every time."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import log_changes
from kafkalog.log import Log, TopicConfig
from kafkalog.records import Record
from kafkalog.spark import plan as plan_module
from kafkalog.spark.options import parse_read_options
from kafkalog.spark.plan import plan_read
from kafkalog.spark.plan_memo import PartitionMemo

T0 = 1_767_225_600_000
SETTLE_MS = 100


def _config(**extra: Any) -> TopicConfig:
    return TopicConfig(segment_bytes=3000, index_interval_bytes=256, **extra)


def _append(d: Path, n: int, start: int, **extra: Any) -> None:
    with Log(d, _config(**extra)) as log:
        for i in range(start, start + n):
            log.append_records(
                [Record.of(b"v%d" % i + b"-" * 90, b"k%d" % (i % 5), T0 + i) for _ in range(3)]
            )


def _settle() -> None:
    time.sleep(SETTLE_MS / 1000 + 0.05)


def _flip_in_place(d: Path) -> None:
    seg = sorted(d.glob("*.log"))[-1]
    body = bytearray(seg.read_bytes())
    body[-1] ^= 0x01
    st = seg.stat()
    seg.write_bytes(bytes(body))
    os.utime(seg, ns=(st.st_atime_ns, st.st_mtime_ns))


def _checkpoint(d: Path) -> None:
    (d.parent / "log-start-offset-checkpoint").write_text("0\n1\nt 0 3\n")


CHANGES: dict[str, Callable[[Path], None]] = {
    "append": lambda d: _append(d, 2, 900),
    "roll": lambda d: log_changes.roll(d, _config(), T0),
    "retention": lambda d: log_changes.retention(d, _config(retention_ms=-1)),
    "truncation": lambda d: log_changes.truncate(d, _config(), 20),
    "compaction": lambda d: log_changes.compact(d, _config(cleanup_policy=("compact",))),
    "byte in place": _flip_in_place,
    "data directory checkpoint": _checkpoint,
}


def _plans(memo: PartitionMemo, data: Path, settle_ms: int = SETTLE_MS) -> tuple[Any, Any]:
    opts = parse_read_options({"path": str(data)}, streaming=False)
    return plan_read(opts, None, memo, settle_ms), plan_read(opts)


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_kept_plan_equals_a_new_one_after_every_change(tmp_path: Path, change: str) -> None:
    data = tmp_path / "data"
    extra: dict[str, Any] = {"cleanup_policy": ("compact",)} if change == "compaction" else {}
    for p in range(3):
        _append(data / f"t-{p}", 30 + 10 * p, 0, **extra)
    _settle()
    memo = PartitionMemo()
    kept, fresh = _plans(memo, data)
    assert kept == fresh
    planned: list[str] = []
    real = plan_module._plan_partition

    def counted(topic: str, partition: int, directory: str, *args: Any) -> Any:
        planned.append(os.path.basename(directory))
        return real(topic, partition, directory, *args)

    plan_module._plan_partition = counted  # type: ignore[assignment]
    try:
        kept, fresh = _plans(memo, data)
        assert kept == fresh
        assert planned == ["t-0", "t-1", "t-2"]  # the fresh plan's; the kept one planned none
        CHANGES[change](data / "t-1")
        planned.clear()
        kept, fresh = _plans(memo, data)
        assert kept == fresh
        if change in ("data directory checkpoint", "compaction"):
            # every partition reads its data directory's checkpoints at open (the cleaner's
            # among them)
            assert planned == ["t-0", "t-1", "t-2"] * 2
        else:
            assert planned == ["t-1", "t-0", "t-1", "t-2"]
        planned.clear()
        kept, fresh = _plans(memo, data)  # unsettled: planned again
        assert kept == fresh and "t-1" in planned[: len(planned) - 3]
        _settle()
        _plans(memo, data)
        planned.clear()
        kept, fresh = _plans(memo, data)
        assert kept == fresh and planned == ["t-0", "t-1", "t-2"]  # kept again
    finally:
        plan_module._plan_partition = real  # type: ignore[assignment]


def test_unsettled_partitions_are_never_kept(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _append(data / "t-0", 20, 0)
    memo = PartitionMemo()
    kept, fresh = _plans(memo, data, settle_ms=86_400_000)
    assert kept == fresh
    assert not memo._kept


def test_a_partition_that_warns_is_planned_and_warns_every_time(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "data"
    _append(data / "t-0", 20, 0)
    _append(data / "t-1", 20, 0)
    _settle()
    memo = PartitionMemo()
    opts = parse_read_options(
        {
            "path": str(data),
            "startingOffsets": '{"t": {"0": 0, "1": 0}}',
            "endingOffsets": '{"t": {"0": 1000, "1": -1}}',
            "failOnDataLoss": "false",
        },
        streaming=False,
    )
    for _ in range(3):
        with caplog.at_level(logging.WARNING, logger="kafkalog"):
            caplog.clear()
            assert plan_read(opts, None, memo, SETTLE_MS) == plan_read(opts)
        assert sum("t-0" in r.getMessage() for r in caplog.records) == 2
    assert [k[0] for k in memo._kept] == [str(data / "t-1")]
