"""``Log.append``'s fast path against its general path over the read shapes' writers
(``tests/read_shapes.py``): every v2 shape written twice from the same seed, once as
``Log.append`` runs and once with every append sent down the general path, must leave the same
bytes in every file, the same ``AppendInfo`` for every append and the same log and segment
state after every one.

The shapes are what real writers produce (several batches per append, codecs, LogAppendTime
topics, transactions, a follower's appends, rolls), and ``v2-missing-ts-multi-i1-codecs-roll``
has records without a timestamp (-1, kept as the client sent them): whole segments begun by
such a batch, which the fast path once refused on every append (its roll age then comes from
the wall clock, not the records). A spy counts the appends that reached the general path, so
the comparison cannot pass with the fast path never taken where it should be.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from kafkalog.log import Log
from read_shapes import SHAPES, V2, write_shape

V2_SHAPES = [name for name, spec in SHAPES.items() if isinstance(spec, V2)]


def _state(log: Log) -> list[object]:
    out: list[object] = [
        log.log_end_offset,
        log.recovery_point,
        log.log_start_offset,
        list(log.leader_epochs.entries) if log.leader_epochs is not None else None,
    ]
    for seg in log.segments:
        tindex = seg.time_index.get()
        out.append(
            (
                seg.base_offset,
                seg.size,
                seg.bytes_since_last_index_entry,
                seg.max_timestamp_so_far,
                seg.shallow_offset_of_max_timestamp_so_far,
                seg.rolling_based_timestamp,
                seg.offset_index.get().entries,
                tindex.entries,
                tuple(tindex.last_entry),
            )
        )
    return out


#: the logs' clock, one instant for both writes (LogAppendTime stamps it, rolls read it)
NOW = time.time()


def _write(
    root: Path, name: str, monkeypatch: pytest.MonkeyPatch, general_only: bool
) -> tuple[list[object], dict[str, bytes], int, int]:
    """The shape ``name`` written under ``root``: what every append returned and left in
    memory, every file's bytes, and how many appends there were and took the general path."""
    trace: list[object] = []
    counts = [0, 0]
    append, general = Log.append, Log._append_general
    refresh, init = Log._refresh_fast_params, Log.__init__

    def fixed_clock(self: Log, *args: Any, **kwargs: Any) -> None:
        kwargs["clock"] = lambda: NOW
        init(self, *args, **kwargs)

    def traced_append(self: Log, *args: Any, **kwargs: Any) -> Any:
        counts[0] += 1
        try:
            info = append(self, *args, **kwargs)
        except Exception as e:  # the same error on both paths, then the same state
            trace.append(f"{type(e).__name__}: {e}".replace(str(root), ""))
        else:
            trace.append(info)
        trace.append(_state(self))
        return info

    def counted_general(self: Log, *args: Any) -> Any:
        counts[1] += 1
        return general(self, *args)

    def no_fast_path(self: Log) -> None:
        refresh(self)
        self._fast_params = None

    with monkeypatch.context() as m:
        m.setattr(Log, "append", traced_append)
        m.setattr(Log, "_append_general", counted_general)
        m.setattr(Log, "__init__", fixed_clock)
        if general_only:
            m.setattr(Log, "_refresh_fast_params", no_fast_path)
        shape = write_shape(root, name)
    files = {}
    for directory, _, names in os.walk(shape.data_dir):
        for file in names:
            if file in ("partition.metadata", ".lock", "meta.properties"):
                continue  # a random topic or directory id
            path = os.path.join(directory, file)
            with open(path, "rb") as f:
                files[os.path.relpath(path, root)] = f.read()
    return trace, files, counts[0], counts[1]


@pytest.mark.parametrize("name", V2_SHAPES)
def test_fast_path_writes_each_shape_as_the_general_path(
    tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = _write(tmp_path / "fast", name, monkeypatch, general_only=False)
    general = _write(tmp_path / "general", name, monkeypatch, general_only=True)
    assert fast[2] == general[2] == general[3] >= 10
    assert fast[0] == general[0]  # every AppendInfo (or error) and the state after it
    assert fast[1].keys() == general[1].keys()
    for file in fast[1]:
        assert fast[1][file] == general[1][file], file
    spec = SHAPES[name]
    assert isinstance(spec, V2)
    plain = (
        spec.producers == "plain"
        and not spec.follower
        and spec.timestamp_type == "CreateTime"
        and "gzip" not in spec.codecs
        and "lz4" not in spec.codecs
        and "zstd" not in spec.codecs
        and "snappy" not in spec.codecs
    )
    if plain:
        assert fast[3] < fast[2] / 3, f"the fast path took {fast[2] - fast[3]} of {fast[2]}"


def test_batches_without_timestamps_take_the_fast_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The missing-timestamp shape, uncompressed: most appends (segments begun by a -1 batch
    included) go through the fast path, with the general path's bytes."""
    from read_shapes import V2

    monkeypatch.setitem(
        SHAPES,
        "missing-plain",
        V2(
            records=900,
            batches_per_append=(1, 3),
            index_interval_bytes=1,
            segment_bytes=5000,
            clock="missing",
        ),
    )
    fast = _write(tmp_path / "fast", "missing-plain", monkeypatch, general_only=False)
    general = _write(tmp_path / "general", "missing-plain", monkeypatch, general_only=True)
    assert fast[0] == general[0]
    assert fast[1] == general[1]
    segments_begun_without = sum(
        1
        for entry in fast[0][1::2]
        if any(s[5] == -1 for s in entry[4:])  # type: ignore[index]
    )
    assert segments_begun_without > 0, "no segment began with a -1 batch"
    # only the rolls (a segment's first append) and nothing else take the general path
    assert fast[3] <= len([f for f in fast[1] if f.endswith(".log")]) + 1
