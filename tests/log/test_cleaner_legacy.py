"""Cleaning v0/v1 message sets as old brokers and producers wrote them (tests/read_shapes.py:
single messages, compressed wrappers, several per append, then v2 after an upgrade): a first
cleaning leaves exactly the latest record of each key (a tombstone too: the legacy horizon is
0 while nothing is clean yet), no keyless record, every offset where it was; a wrapper that
loses some records is rebuilt with the same magic and codec from its first kept offset; and
kafka-python, an independent decoder, reads the cleaned files to the same records."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkalog.log import Log
from kafkalog.log.layout import segment_logs
from kafkalog.records.legacy import LegacyEntry
from kafkalog.records.types import Compression
from read_shapes import SHAPES, Legacy, compacting, write_shape

LEGACY = [name for name, spec in SHAPES.items() if isinstance(spec, Legacy)]
NOW = 4102444800000


def _records(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for r in log.records()]


@pytest.mark.parametrize("name", LEGACY)
def test_first_cleaning_of_legacy_shapes_keeps_the_latest_of_each_key(
    name: str, tmp_path: Path
) -> None:
    from kafka.record import MemoryRecords

    shape = write_shape(tmp_path, name)
    config = compacting(name)
    with Log(shape.directory, config) as log:
        log.roll()
        before = _records(log)
        end = log.log_end_offset
        entries_before = {
            e.base_offset: e for s in log.segments for e in s.entries(0)
        }  # by first offset
        magic_of = {}
        for e in entries_before.values():
            for r in e.records(log.limits):
                magic_of[r.offset] = (e.magic, e.compression)
        result = log.compact(now=NOW)
        assert result.end_offset == end and log.log_end_offset == end
        latest: dict[bytes, int] = {}
        for offset, key, _ in before:
            if key is not None:
                latest[key] = offset
        want = [r for r in before if r[1] is not None and latest[r[1]] == r[0]]
        after = _records(log)
        assert after == want
        assert result.stats.keyless_removed == sum(1 for r in before if r[1] is None)
        for seg in log.segments:
            for e in seg.entries(0):
                if isinstance(e, LegacyEntry):
                    # kept or rebuilt, an entry keeps the magic and codec of its records
                    offsets = [r.offset for r in e.records(log.limits)]
                    assert {magic_of[o] for o in offsets} == {(e.magic, e.compression)}
                    if e.compression is not Compression.NONE:
                        # Kafka's builder: v1 inner offsets relative to the first kept
                        # record's, v0 ones absolute
                        first = int.from_bytes(e.decompressed_value(log.limits)[:8], "big")
                        assert first == (0 if e.magic == 1 else offsets[0])
        decoded = []
        for _, path in segment_logs(shape.directory):
            data = Path(path).read_bytes()
            recs = MemoryRecords(data)
            while recs.has_next():
                batch = recs.next_batch()
                assert batch.validate_crc()
                decoded.extend((r.offset, r.key, r.value) for r in batch)
        assert decoded == after
