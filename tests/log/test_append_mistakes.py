"""A Python programmer's first appends, wrong in the usual ways, answered in their terms.

``append_records([Record.of("hi")])`` failed with "can't concat str to bytes" from inside the
encoder, ``append_records([b"hi"])`` with "'bytes' object has no attribute 'timestamp'" and
``append_records(record)`` with "object of type 'Record' has no len()"; ``Log("data/events")``
said only that the name is not ``topic-partition``. Nothing is written by a refused append.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kafkalog.log import Log
from kafkalog.records import Header, Record


@pytest.mark.parametrize(
    ("records", "said"),
    [
        (
            [Record.of("hello")],  # type: ignore[arg-type]
            "records[0].value is a str: bytes or None ('hello'.encode())",
        ),
        (
            [Record.of(b"v", key="k")],  # type: ignore[arg-type]
            "records[0].key is a str: bytes or None ('k'.encode())",
        ),
        (
            [Record.of(b"ok"), b"hello"],
            "records[1] is a bytes, not a Record: build it with "
            "Record.of(b'value', key=b'key', timestamp=ms)",
        ),
        (
            Record.of(b"hello"),
            "append_records takes a list of Records, not a Record: "
            "log.append_records([Record.of(b'value', key=b'key')])",
        ),
        (
            [Record.of(b"v", headers=[("h", "text")])],  # type: ignore[list-item]
            "records[0] header 'h' has a str",
        ),
    ],
)
@pytest.mark.parametrize("buffered", [False, True])
def test_a_wrong_append_says_what_to_give(
    tmp_path: Path, records: Any, said: str, buffered: bool
) -> None:
    with Log(tmp_path / "events-0") as log:
        log.append_records([Record.of(b"first")])
        with pytest.raises(TypeError) as caught:
            if buffered:
                with log.buffered():
                    log.append_records(records)
            else:
                log.append_records(records)
        assert str(caught.value) == said
        assert log.log_end_offset == 1
        assert [r.value for r in log.records()] == [b"first"]


def test_right_appends_of_bytes_likes_still_work(tmp_path: Path) -> None:
    with Log(tmp_path / "events-0") as log:
        log.append_records([Record.of(bytearray(b"a"), key=b"k", headers=[("h", b"x")])])
        log.append_records([Record(-1, 5, None, None, (Header("h", None),))])
        assert [r.value for r in log.records()] == [b"a", None]


def test_a_log_named_without_its_partition_says_how_to_name_it(tmp_path: Path) -> None:
    with pytest.raises(ValueError) as caught:
        Log(tmp_path / "events")
    assert str(caught.value).endswith(
        f": a partition's directory is named <topic>-<partition>, e.g. {tmp_path / 'events'}-0"
    )
    assert not (tmp_path / "events").exists()


def test_an_append_after_close_names_the_log_not_a_roll(tmp_path: Path) -> None:
    """It said "cannot roll .../00000000000000000000.log: it is closed": a roll the caller
    never asked for, of a file they never named."""
    from kafkalog.errors import ClosedError

    log = Log(tmp_path / "events-0")
    log.append_records([Record.of(b"first")])
    log.close()
    with pytest.raises(ClosedError) as caught:
        log.append_records([Record.of(b"late")])
    assert str(caught.value) == (
        f"cannot append to {tmp_path / 'events-0'}: it is closed (or its segment was deleted)"
    )
