"""``Log.read_arrow``: a log's records as one Arrow table without Spark, equal to the record
API on every fixture partition Kafka wrote, and on ranges of a log of many segments."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from kafkalog.log import Log, TopicConfig
from kafkalog.records import Record
from provenance import fixture_partitions

PARTITIONS = fixture_partitions()


def _expected(log: Log, start: int | None = None, end: int | None = None) -> list[tuple]:
    return [
        (r.offset, r.key, r.value, r.timestamp, [(h.key, h.value) for h in r.headers])
        for r in log.records(start, end)
    ]


def _got(table: pa.Table) -> list[tuple]:
    headers = (
        table.column("headers").to_pylist()
        if "headers" in table.column_names
        else [[]] * table.num_rows
    )
    return list(
        zip(
            table.column("offset").to_pylist(),
            table.column("key").to_pylist(),
            table.column("value").to_pylist(),
            table.column("timestamp").cast(pa.int64()).to_pylist(),
            [[(h["key"], h["value"]) for h in hs or []] for hs in headers],
            strict=True,
        )
    )


@pytest.mark.parametrize(
    "directory", PARTITIONS, ids=[f"{p.parent.name}/{p.name}" for p in PARTITIONS]
)
def test_every_fixture_partition_as_the_record_api_reads_it(directory: Path) -> None:
    with Log(directory, writable=False) as log:
        table = log.read_arrow(include_headers=True)
        assert table.column("topic").unique().to_pylist() in ([log.topic], [])
        assert _got(table) == _expected(log)


def test_ranges_across_segments(tmp_path: Path) -> None:
    with Log(tmp_path / "t-3", TopicConfig(segment_bytes=1500, index_interval_bytes=100)) as log:
        for b in range(60):
            log.append_records(
                [Record.of(b"v%d" % (b * 4 + i), b"k", 1_700_000_000_000 + b) for i in range(4)]
            )
        assert len(log.segments) >= 5
        ranges = [(None, None), (0, 1), (37, 38), (37, 201), (100, None), (239, 500), (5, 5)]
        for start, end in ranges:
            assert _got(log.read_arrow(start, end)) == _expected(log, start, end)
        table = log.read_arrow(10, 20, timestamp_unit="us")
        assert table.schema.field("timestamp").type == pa.timestamp("us", tz="UTC")
        assert table.column("partition").unique().to_pylist() == [3]
