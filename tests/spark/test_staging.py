"""The writer's commit reads each task's staging file batch by batch (a file may be larger than
the driver's memory) and refuses a damaged one by file and byte, appending nothing past it."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkalog.errors import KafkalogError
from kafkalog.log import Log
from kafkalog.records import Record, encode_batch
from kafkalog.spark.writer import _append_file


def _staging(path: Path, batches: int) -> bytes:
    data = b"".join(
        encode_batch([Record.of(b"v%d-%d" % (b, i), b"k", 1_700_000_000_000 + i) for i in range(5)])
        for b in range(batches)
    )
    path.write_bytes(data)
    return data


def test_staged_batches_appended_one_by_one(tmp_path: Path) -> None:
    _staging(tmp_path / "t-0.batches", 7)
    with Log(tmp_path / "t-0") as log:
        _append_file(log, str(tmp_path / "t-0.batches"))
        assert log.log_end_offset == 35
        values = [r.value for r in log.records()]
    assert values == [b"v%d-%d" % (b, i) for b in range(7) for i in range(5)]


@pytest.mark.parametrize("cut", ["torn", "huge length", "short length"])
def test_damaged_staging_file_named_with_its_byte(tmp_path: Path, cut: str) -> None:
    data = bytearray(_staging(tmp_path / "ok", 3))
    second = len(data) // 3
    if cut == "torn":
        data = data[: len(data) - 10]
        where = 2 * second
    elif cut == "huge length":
        data[second + 8 : second + 12] = (2**31 - 1).to_bytes(4, "big")
        where = second
    else:
        data[second + 8 : second + 12] = (10).to_bytes(4, "big")
        where = second
    staging = tmp_path / "t-0.batches"
    staging.write_bytes(bytes(data))
    with Log(tmp_path / "t-0") as log:
        with pytest.raises(
            KafkalogError, match=rf"t-0\.batches has no whole batch at byte {where}"
        ):
            _append_file(log, str(staging))
        assert log.log_end_offset == 5 * (where // second)  # the whole batches before it
