"""Log.append validates a client's batches as Kafka's LogValidator does (issue 25 point 1).

The four batches of the issue (valid CRC, header not matching the records) were accepted and
made the log unreadable; each is refused here, on the fast path and the general path (a
producer id, a LogAppendTime topic), with nothing written. Then each of Kafka's other checks,
the header corrections (max timestamp) and re-compression into ``compression.type``.
"""

from __future__ import annotations

import os
import random
import struct
from pathlib import Path
from typing import Any

import pytest
from kafka.record.default_records import DefaultRecordBatch

from kafkalog.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordError,
)
from kafkalog.log import Log, TopicConfig
from kafkalog.records import ControlType, Record, RecordBatch, encode_batch, encode_control_batch
from kafkalog.records.crc import crc32c
from kafkalog.records.types import Compression, TimestampType

NOW_MS = 1_700_000_000_000


def recrc(data: bytes | bytearray) -> bytes:
    """The batch with its CRC recomputed: only the validator can refuse it."""
    out = bytearray(data)
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[21:]))
    return bytes(out)


def with_field(data: bytes, offset: int, fmt: str, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, value)
    return recrc(out)


def good(n: int = 1, **options: Any) -> bytes:
    return encode_batch(
        [Record.of(b"value %d" % i, key=b"k%d" % i, timestamp=NOW_MS + i) for i in range(n)],
        **options,
    )


LAST_OFFSET_DELTA = (23, ">i")
RECORDS_COUNT = (57, ">i")
MAX_TIMESTAMP = (35, ">q")
ATTRIBUTES = (21, ">h")


def issue_batches(**options: Any) -> dict[str, bytes]:
    """The batches issue 25 found accepted: valid CRCs, headers that lie about the records."""
    one = good(1, **options)
    return {
        "lastOffsetDelta=-1": with_field(one, *LAST_OFFSET_DELTA, -1),
        "lastOffsetDelta=999 on one record": with_field(one, *LAST_OFFSET_DELTA, 999),
        "recordsCount=0": with_field(one, *RECORDS_COUNT, 0),
        # delta 4 too, so only the records can tell
        "recordsCount=5 with one record": with_field(
            with_field(one, *RECORDS_COUNT, 5), *LAST_OFFSET_DELTA, 4
        ),
    }


def open_log(tmp_path: Path, name: str = "t-0", **config: Any) -> Log:
    return Log(tmp_path / name, TopicConfig(**config), clock=lambda: NOW_MS / 1000)


def files_of(log: Log) -> dict[str, int]:
    return {f: os.path.getsize(os.path.join(log.directory, f)) for f in os.listdir(log.directory)}


def assert_refused(log: Log, data: bytes, error: type[Exception] = InvalidRecordError) -> Any:
    before_end, before_files = log.log_end_offset, files_of(log)
    with pytest.raises(error) as caught:
        log.append(data)
    assert log.log_end_offset == before_end
    assert files_of(log) == before_files  # nothing written
    return caught.value


@pytest.mark.parametrize(
    "options",
    [
        {},  # the fast path
        {"producer_id": 5, "producer_epoch": 0, "base_sequence": 0},  # the general path
        {"compression": "gzip"},  # decompressed to be walked
    ],
    ids=["fast", "idempotent", "gzip"],
)
@pytest.mark.parametrize("case", list(issue_batches()))
def test_the_issue_batches_are_refused_and_nothing_is_written(
    tmp_path: Path, case: str, options: dict[str, Any]
) -> None:
    log = open_log(tmp_path)
    log.append(good(3))
    assert_refused(log, issue_batches(**options)[case])
    # the log goes on, readable by kafkalog and by kafka-python
    info = log.append(good(2))
    assert (info.first_offset, log.log_end_offset) == (3, 5)
    assert [r.offset for r in log.records(0)] == [0, 1, 2, 3, 4]
    log.close()
    _decode_with_kafka_python(tmp_path / "t-0")


def test_the_issue_batches_are_refused_inside_a_multi_batch_append(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for bad in issue_batches().values():
        assert_refused(log, good(2) + bad + good(1))
    assert log.log_end_offset == 0


def test_messages_name_the_problem_as_kafka_does(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    msgs = {case: str(assert_refused(log, data)) for case, data in issue_batches().items()}
    assert "Batch has an invalid offset range" in msgs["lastOffsetDelta=-1"]
    assert (
        "Inconsistent batch offset range [0, 999] and count of records 1"
        in (msgs["lastOffsetDelta=999 on one record"])
    )
    assert "Invalid reported count for record batch: 0" in msgs["recordsCount=0"]
    assert "incorrect declared batch size" in msgs["recordsCount=5 with one record"]
    assert all("topic partition t-0" in m for m in msgs.values())


def test_record_structure_offset_deltas_and_trailing_bytes(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    three = good(3)
    records = RecordBatch.parse(three)
    # record 1's offset delta (the byte after its length, attributes and 1-byte ts delta)
    area = bytearray(three)
    first_len = area[61] >> 1  # a one-byte varint length (zig-zag)
    second = 61 + 1 + first_len
    assert area[second + 2] == 2  # ts delta 1 -> zig-zag 2
    area[second + 3] = 2 * 5  # offset delta 5 instead of 1
    err = assert_refused(log, recrc(area))
    assert err.record_errors == (RecordError(0, 1, err.record_errors[0].message),)
    assert "offset delta out of order" in err.record_errors[0].message
    # a batch that declares fewer records than it holds: bytes left after the last one
    two_of_three = with_field(with_field(three, *RECORDS_COUNT, 2), *LAST_OFFSET_DELTA, 1)
    assert "bytes left after the last record" in str(assert_refused(log, two_of_three))
    assert records.records_count == 3 and log.log_end_offset == 0


def test_compacted_topics_refuse_records_without_a_key(tmp_path: Path) -> None:
    log = open_log(tmp_path, cleanup_policy=("compact",))
    keyless = encode_batch(
        [
            Record.of(b"a", key=b"k", timestamp=NOW_MS),
            Record.of(b"b", timestamp=NOW_MS),
            Record.of(b"c", key=b"k2", timestamp=NOW_MS),
            Record.of(b"d", timestamp=NOW_MS),
        ]
    )
    err = assert_refused(log, keyless)
    assert [(e.batch_index, e.record_index) for e in err.record_errors] == [(0, 1), (0, 3)]
    assert all(
        "Compacted topic cannot accept message without key" in e.message for e in err.record_errors
    )
    assert not isinstance(err, InvalidTimestampError)
    log.append(good(4))  # keyed: accepted, on the fast path
    many = encode_batch([Record.of(b"v", timestamp=NOW_MS) for _ in range(40)])  # compiled walk
    assert len(assert_refused(log, many).record_errors) == 40
    with pytest.raises(InvalidRecordError):  # the embedded API's one-record calls too
        log.append_records([Record.of(b"x", timestamp=NOW_MS)])
    with pytest.raises(InvalidRecordError), log.buffered():
        log.append_records([Record.of(b"x", timestamp=NOW_MS)])
    assert log.log_end_offset == 4
    log.close()
    delete = open_log(tmp_path, "d-0")  # a delete topic takes keyless records
    delete.append(keyless)
    delete.close()


@pytest.mark.parametrize(
    "config",
    [
        {"message_timestamp_before_max_ms": 1000, "message_timestamp_after_max_ms": 500},
        {"message_timestamp_difference_max_ms": 1000},  # the older key, both ways
    ],
    ids=["before-after", "difference"],
)
def test_timestamps_outside_the_topic_bounds_are_refused(
    tmp_path: Path, config: dict[str, Any]
) -> None:
    log = open_log(tmp_path, **config)
    after = config.get("message_timestamp_after_max_ms", 1000)
    ok = [NOW_MS - 1000, NOW_MS, NOW_MS + after, -1]
    log.append(encode_batch([Record.of(b"v", timestamp=t) for t in ok]))
    for ts in (NOW_MS - 1001, NOW_MS + after + 1):
        batch = encode_batch([Record.of(b"a", timestamp=NOW_MS), Record.of(b"b", timestamp=ts)])
        err = assert_refused(log, batch, InvalidTimestampError)
        assert [e.record_index for e in err.record_errors] == [1]
        assert f"Timestamp {ts} of message" in err.record_errors[0].message
    log.close()


def test_log_append_time_topics_do_not_check_record_timestamps(tmp_path: Path) -> None:
    log = open_log(
        tmp_path, message_timestamp_type="LogAppendTime", message_timestamp_before_max_ms=10
    )
    info = log.append(encode_batch([Record.of(b"old", timestamp=5)]))
    assert info.max_timestamp == NOW_MS
    assert [r.timestamp for r in log.records(0)] == [NOW_MS]
    # a producer claiming LogAppendTime is refused (Kafka's INVALID_TIMESTAMP)
    claimed = good(1, timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=NOW_MS)
    assert len(assert_refused(log, claimed, InvalidTimestampError).record_errors) == 1
    log.close()


def test_a_producer_claiming_log_append_time_on_a_create_time_topic(tmp_path: Path) -> None:
    """Kafka takes the claimed time as every record's and stores the batch as CreateTime;
    without a time (-1) it refuses."""
    log = open_log(tmp_path)
    claimed = good(2, timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=NOW_MS - 7)
    info = log.append(claimed)
    assert info.max_timestamp == NOW_MS - 7
    (batch,) = log.batches(0)
    assert batch.timestamp_type.name == "CREATE_TIME" and batch.max_timestamp == NOW_MS - 7
    assert_refused(log, with_field(claimed, *MAX_TIMESTAMP, -1), InvalidTimestampError)
    log.close()


def test_the_max_timestamp_is_the_records(tmp_path: Path) -> None:
    """Kafka's setMaxTimestamp: a header that lies about the largest timestamp is corrected
    (so the time index is not misled) and the CRC recomputed."""
    log = open_log(tmp_path)
    lying = with_field(good(3), *MAX_TIMESTAMP, NOW_MS + 10**9)
    info = log.append(lying)
    assert info.max_timestamp == NOW_MS + 2
    (batch,) = log.batches(0)
    assert batch.max_timestamp == NOW_MS + 2 and batch.is_valid()
    assert log.offsets_for_times(NOW_MS + 10**8) is None
    log.close()


def test_control_batches_only_from_the_coordinator(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(good(2, producer_id=3, producer_epoch=0, base_sequence=0, is_transactional=True))
    commit = encode_control_batch(
        ControlType.COMMIT, offset=0, timestamp=NOW_MS, producer_id=3, producer_epoch=0
    )
    err = assert_refused(log, commit)
    assert "Clients are not allowed to write control records" in str(err)
    log.append(commit, origin="coordinator")
    assert log.last_stable_offset() == log.log_end_offset == 3
    log.close()


def test_attributes_and_producer_fields(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    one = good(1)
    for codec in (5, 6, 7):
        assert "unknown compression codec id" in str(
            assert_refused(log, with_field(one, *ATTRIBUTES, codec))
        )
    no_sequence = good(1, producer_id=4, producer_epoch=0)  # base sequence -1
    assert "Invalid sequence number -1" in str(assert_refused(log, no_sequence))
    v1 = bytes.fromhex("0000000000000000") + bytes.fromhex("00000016") + bytes(22)
    with pytest.raises((InvalidRecordError, CorruptRecordError)):
        log.append(v1)  # magic 0/1: not what a client of this log sends
    assert log.log_end_offset == 0
    log.close()


@pytest.mark.parametrize(
    ("topic", "producer", "stored"),
    [
        ("gzip", "none", Compression.GZIP),
        ("uncompressed", "lz4", Compression.NONE),
        ("zstd", "gzip", Compression.ZSTD),
        ("producer", "snappy", Compression.SNAPPY),
        ("lz4", "lz4", Compression.LZ4),
    ],
)
def test_batches_are_stored_with_the_topics_compression_type(
    tmp_path: Path, topic: str, producer: str, stored: Compression
) -> None:
    log = open_log(tmp_path, compression_type=topic)
    sent = good(5, compression=producer, producer_id=2, producer_epoch=0, base_sequence=0)
    info = log.append(sent)
    assert (info.first_offset, info.last_offset) == (0, 4)
    (batch,) = log.batches(0)
    assert batch.compression is stored
    assert (batch.producer_id, batch.base_sequence, batch.last_offset_delta) == (2, 0, 4)
    original = RecordBatch.parse(sent).records()
    assert [(r.key, r.value, r.timestamp) for r in batch.records()] == [
        (r.key, r.value, r.timestamp) for r in original
    ]
    assert log.append(sent).duplicate  # the retry is recognised after the rebuild
    log.close()
    _decode_with_kafka_python(tmp_path / "t-0")


def test_a_follower_append_is_not_validated(tmp_path: Path) -> None:
    """Replicated batches (assign_offsets=False) are the leader's, as Kafka's appendAsFollower
    does not run the LogValidator: a keyless batch goes into a compacted log as it is."""
    log = open_log(tmp_path, cleanup_policy=("compact",))
    data = encode_batch([Record.of(b"v", timestamp=NOW_MS)], base_offset=0)
    log.append(data, assign_offsets=False)
    assert log.log_end_offset == 1
    log.close()


def _decode_with_kafka_python(directory: Path) -> list[Any]:
    """Every batch of every segment decoded by kafka-python (an independent decoder)."""
    out = []
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".log"):
            continue
        data = (directory / name).read_bytes()
        pos = 0
        while pos < len(data):
            length = struct.unpack_from(">i", data, pos + 8)[0]
            raw = data[pos : pos + 12 + length]
            batch = DefaultRecordBatch(raw)
            assert batch.validate_crc()
            recs = list(batch)
            assert len(recs) == struct.unpack_from(">i", raw, 57)[0]
            out.extend(recs)
            pos += 12 + length
    return out


def test_random_mutations_are_accepted_only_when_readable(tmp_path: Path) -> None:
    """Differential: a mutated batch (CRC recomputed) the log accepts decodes completely with
    kafkalog's reader and kafka-python, with offsets that follow on."""
    rng = random.Random(25)
    log = open_log(tmp_path, cleanup_policy=("compact",))
    accepted = 0
    for _ in range(400):
        n = rng.randint(1, 30)
        data = bytearray(
            encode_batch(
                [
                    Record.of(
                        rng.randbytes(rng.randint(0, 20)),
                        key=None if rng.random() < 0.005 else rng.choice([b"", b"k", b"key"]),
                        timestamp=NOW_MS + rng.randint(-5, 5),
                        headers=[("h", b"x")] if rng.random() < 0.3 else (),
                    )
                    for _ in range(n)
                ],
                compression=rng.choice(["none", "none", "gzip"]),
            )
        )
        for _ in range(rng.choice([0, 0, 1, 1, 2])):  # a third left whole: accepted
            i = rng.randrange(21, len(data))
            data[i] ^= 1 << rng.randrange(8)
        end = log.log_end_offset
        try:
            info = log.append(recrc(data))
        except (InvalidRecordError, CorruptRecordError):
            assert log.log_end_offset == end
            continue
        accepted += 1
        assert info.first_offset == end
        got = [r.offset for r in log.records(end)]
        assert got == list(range(end, log.log_end_offset))
    assert accepted > 100  # the whole ones at least
    log.close()
    assert (
        len(_decode_with_kafka_python(tmp_path / "t-0"))
        == Log(tmp_path / "t-0", writable=False).log_end_offset
    )
