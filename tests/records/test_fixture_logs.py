"""Every fixture file holding record data decodes to what PROVENANCE.md lists, CRCs verified.

Both decoders are held to the same facts: the object API (LogReader + records()) and the
columnar path (decode_range), which must also agree with each other record for record.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from kafkalog.errors import CorruptRecordError
from kafkalog.records import (
    LegacyEntry,
    LogReader,
    Record,
    RecordBatch,
    decode_range,
)
from kafkalog.records.reader import read_only_buffer
from provenance import FileFacts, field_matches, logs

LOGS = [f for f in logs() if f.kind == "log"]

# Files whose tail PROVENANCE.md does not mention: a Fetch response cut 9 bytes into an entry
# header (fewer than Kafka's 18-byte minimum, so Kafka's reader stops there too).
_OUT_OF_RANGE = "fetch-v2_response_index_out_of_range--test-topic-index-out-of-range-1.bin"
UNLISTED_TAILS = {f"kafkajs-fetch-captures/{_OUT_OF_RANGE}": (129, 9)}
# sarama's "empty" compressed wrappers hold no inner message, which Kafka rejects
# ("Found invalid compressed record set with no inner records"); their CRCs are fine.
EMPTY_WRAPPERS = {
    "sarama-client-vectors/message_test--emptyGzipMessage.msgset.bin",
    "sarama-client-vectors/message_test--emptyLZ4Message.msgset.bin",
}


def _entries(facts: FileFacts) -> tuple[list[Any], LogReader]:
    reader = LogReader.open(facts.path, verify_crc=True)
    entries = list(reader)
    return entries, reader


def _codec_key(entry: RecordBatch | LegacyEntry) -> str:
    return f"v{entry.magic}/{entry.compression.label}"


@pytest.mark.parametrize("facts", LOGS, ids=lambda f: f.rel)
def test_log_matches_provenance(facts: FileFacts) -> None:
    entries, reader = _entries(facts)  # verify_crc: any CRC failure raises here
    assert facts.checksum_failures in (None, 0)
    if facts.batches is not None:
        assert len(entries) == facts.batches
    # codec / flag counts (Part I lists them per kind; Part II only LogAppendTime/control)
    counts: Counter[str] = Counter()
    for e in entries:
        counts[_codec_key(e)] += 1
        if e.is_control:
            counts["control"] += 1
        if e.is_transactional:
            counts["transactional"] += 1
        if e.magic >= 1 and e.timestamp_type.name == "LOG_APPEND_TIME":
            counts["LogAppendTime"] += 1
    for key, expected in facts.codec_counts.items():
        assert counts[key] == expected, key
    if facts.part == 1:
        listed = {k for k in facts.codec_counts if k.startswith("v")}
        assert listed == {k for k in counts if k.startswith("v")}
    if facts.magics is not None:
        assert sorted({e.magic for e in entries}) == list(facts.magics)
    if facts.codecs is not None:
        assert sorted({e.compression.label for e in entries}) == sorted(facts.codecs)

    records: list[Record] = []
    if facts.rel in EMPTY_WRAPPERS:
        with pytest.raises(CorruptRecordError, match="no inner"):
            entries[0].records()
        return
    for e in entries:
        if e.magic >= 2 or e.compression.label != "zstd":
            records.extend(e.records())
    v2 = [e for e in entries if e.magic >= 2]
    if facts.records is not None:
        if facts.records_v2_only:
            assert sum(len(e.records()) for e in v2) == facts.records
        else:
            assert len(records) == facts.records
    if facts.first_offset is not None and entries:
        first = entries[0]
        assert (first.base_offset if first.magic >= 2 else first.offset) == facts.first_offset
    if facts.last_offset is not None and entries:
        assert entries[-1].last_offset == facts.last_offset
    if facts.min_timestamp is not None:
        stamps = []
        for e in entries:
            if e.magic >= 2:
                stamps += [e.base_timestamp, e.max_timestamp]
            elif e.magic == 1:
                stamps.append(e.timestamp)
        assert (min(stamps), max(stamps)) == (facts.min_timestamp, facts.max_timestamp)
    if facts.producer_ids is not None:
        pids = sorted({e.producer_id for e in v2})
        if facts.part == 1:
            pids = [p for p in pids if p != -1]
        if facts.producer_ids_truncated:
            assert pids[: len(facts.producer_ids)] == list(facts.producer_ids)
        else:
            assert pids == list(facts.producer_ids)
    if facts.leader_epochs is not None:
        epochs = sorted({e.partition_leader_epoch for e in v2})
        assert epochs == list(facts.leader_epochs)
    if facts.trailing_partial is not None:
        tail = reader.incomplete_tail
        assert tail is not None
        trailing, declared = facts.trailing_partial
        assert tail.available == trailing
        assert tail.declared_size is not None and tail.declared_size - 12 == declared
    elif facts.rel in UNLISTED_TAILS:
        tail = reader.incomplete_tail
        assert tail is not None
        assert (tail.position, tail.available) == UNLISTED_TAILS[facts.rel]
    else:
        assert reader.incomplete_tail is None, reader.incomplete_tail
    if facts.first_record is not None:
        first_rec = records[0]
        assert field_matches(facts.first_record.key, first_rec.key)
        assert field_matches(facts.first_record.value, first_rec.value)
        assert len(first_rec.headers) == len(facts.first_record.headers)
        for (hk, hv), header in zip(facts.first_record.headers, first_rec.headers, strict=True):
            assert header.key.startswith(hk.rstrip(".")) or hk.startswith(header.key[:20])
            assert field_matches(hv, header.value)


@pytest.mark.parametrize("facts", LOGS, ids=lambda f: f.rel)
def test_columnar_agrees_with_object_api(facts: FileFacts) -> None:
    """decode_range must yield the same records as the object API, control records included."""
    entries, reader = _entries(facts)
    if facts.rel in EMPTY_WRAPPERS or any(
        e.magic < 2 and e.compression.label == "zstd" for e in entries
    ):
        with pytest.raises(CorruptRecordError) as info:
            decode_range(read_only_buffer(facts.path), path=str(facts.path))
        assert str(facts.path) in str(info.value)
        return
    expected = [
        (r.offset, r.timestamp, r.key, r.value, [(h.key, h.value) for h in r.headers] or None)
        for e in entries
        for r in e.records()
    ]
    result = decode_range(
        read_only_buffer(facts.path),
        path=str(facts.path),
        include_headers=True,
        control_records="include",
        metadata=["isControl", "producerId", "leaderEpoch"],
    )
    rows = result.batch.to_pydict()
    got = list(
        zip(
            rows["offset"],
            result.batch.column("timestamp").cast("int64").to_pylist(),
            rows["key"],
            rows["value"],
            [None if h is None else [(x["key"], x["value"]) for x in h] for h in rows["headers"]],
            strict=True,
        )
    )
    assert got == expected
    assert result.entries == len(entries)
    assert (result.incomplete_tail is None) == (reader.incomplete_tail is None)
    # per-record batch metadata agrees with the batch headers
    meta = [
        (e.is_control, e.producer_id, e.partition_leader_epoch)
        for e in entries
        for _ in e.records()
    ]
    assert (
        list(zip(rows["isControl"], rows["producerId"], rows["leaderEpoch"], strict=True)) == meta
    )
