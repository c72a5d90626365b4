"""An offset-index entry pointing past its ``.log``'s end (damage, or a live writer's append
not yet in the size a reader saw) must not make a read from an offset it keys skip to the
next segment: every read from every offset starts at the first record at or after it, as a
brute force over the files says. Each kind of ``INDEX_DAMAGES`` (tests/damage_kinds.py), on
real writers' shapes (tests/read_shapes.py) and Kafka's own files; the readers: ``Log.records``,
``Log.read`` (serve's Fetch), ``TailReader``, ``find_offset_by_timestamp`` through
``kafkalog cat --offset``."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest

from damage_kinds import INDEX_DAMAGES, kafka_txn_log_and_shapes
from kafkalog.log import Log
from kafkalog.log.tail import TailReader
from kafkalog.records import LogReader
from read_shapes import truth

SOURCES = ["v2-multi-i1", "v2-txn-multi-i1-roll", "v1-i1", "v0-i1-roll"]


def _sources(tmp_path: Path) -> list[Path]:
    return kafka_txn_log_and_shapes(tmp_path, SOURCES)


def _first_read(log: Log, offset: int) -> int | None:
    for record in log.records(offset):
        return record.offset
    return None


def _first_fetched(log: Log, offset: int) -> int | None:
    """As a consumer polls: fetch after fetch (one segment's bytes each) to a data record."""
    position = offset
    while data := log.read(position, 1 << 16):
        for entry in LogReader(data):
            for record in entry.records():
                if record.offset >= offset and not getattr(entry, "is_control", False):
                    return record.offset
            position = max(position, entry.last_offset + 1)
    return None


def _first_tailed(d: Path, offset: int) -> int | None:
    reader = TailReader(str(d), start_offset=offset)
    try:
        records = reader.poll(timeout=0)
        return records[0].offset if records else None
    finally:
        reader.close()


@pytest.mark.parametrize("damage", list(INDEX_DAMAGES))
def test_reads_from_every_offset_never_skip(damage: str, tmp_path: Path) -> None:
    applied = 0
    for source in _sources(tmp_path / "src"):
        d = tmp_path / "damaged" / source.parent.name / source.name
        shutil.copytree(source, d)
        done = INDEX_DAMAGES[damage](d)
        if done is None:
            continue
        index, bad = done
        applied += 1
        offsets = sorted(r.offset for r in truth(d).records if not r.control)
        # every offset a lookup lands on the damaged entry for (to the next entry, or the
        # segment's end), and a few before it
        base = int(index.name[:20])
        data = index.read_bytes()
        keyed = [
            (base + struct.unpack_from(">i", data, k)[0], struct.unpack_from(">i", data, k + 4)[0])
            for k in range(0, len(data) - 7, 8)
            if any(data[k : k + 8])
        ]
        following = [b for b in sorted(int(p.name[:20]) for p in d.glob("*.log")) if b > base]
        end = keyed[bad + 1][0] + 1 if bad + 1 < len(keyed) else None
        end = end or (following[0] if following else offsets[-1] + 1)
        with Log(d, writable=False) as log:
            for o in range(max(base, keyed[bad][0] - 3), end):
                want = next((x for x in offsets if x >= o), None)
                where = f"{damage} / {source.parent.name} / from {o}"
                assert _first_read(log, o) == want, where
                assert _first_fetched(log, o) == want, where
                assert _first_tailed(d, o) == want, where
    assert applied >= 3, f"{damage}: applied to {applied} log(s) only"
