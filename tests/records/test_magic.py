"""A magic byte other than 0, 1 or 2 is corruption for every reader (issue 23).

Kafka's file reader takes any magic above 1 for a v2 batch, and the v2 CRC does not cover the
magic byte (it starts at the attributes), so a flipped magic byte left a batch that every
kafkalog reader decoded as valid: ``verify`` passed it and ``dump`` said ``isvalid: true``.
No Kafka release writes such a batch; the object walk and the columnar kernels now refuse it
alike, naming the file and the byte.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkalog.errors import CorruptRecordError
from kafkalog.records import LogReader, Record, decode_range, encode_batch, encode_message_set
from kafkalog.records.reader import MAGIC_OFFSET

PATH = "orders-0/00000000000000000000.log"
T0 = 1_700_000_000_000


def _v2(base: int) -> bytes:
    return encode_batch(
        [Record.of(b"v%d" % i, key=b"k", timestamp=T0 + i) for i in range(3)], base_offset=base
    )


def _with_magic(data: bytes, at: int, magic: int) -> bytes:
    out = bytearray(data)
    out[at + MAGIC_OFFSET] = magic
    return bytes(out)


@pytest.mark.parametrize("magic", [3, 7, 127, 128, 255])
def test_an_unknown_magic_is_refused_by_the_object_and_columnar_readers(magic: int) -> None:
    first = _v2(0)
    data = first + _with_magic(_v2(3), 0, magic) + _v2(6)
    at = len(first) + MAGIC_OFFSET  # the magic byte of the second entry
    with pytest.raises(CorruptRecordError) as walked:
        list(LogReader(data, path=PATH))
    with pytest.raises(CorruptRecordError) as columnar:
        decode_range(data, path=PATH)
    for err in (walked.value, columnar.value):
        assert err.path == PATH and err.position == at, err
        assert "invalid magic byte" in err.reason
    # both readers say the same thing
    assert str(walked.value) == str(columnar.value)
    if magic < 128:
        assert f"invalid magic byte {magic}:" in str(walked.value)
        assert "0, 1 and 2" in str(walked.value)
    else:
        assert f"invalid magic byte {magic - 256} " in str(walked.value)


def test_the_entries_before_the_bad_one_are_read(tmp_path: Path) -> None:
    """The refusal comes at the bad entry: what precedes it is read as before, and a reader
    walking a file in chunks (``base_position``) names the byte in file terms."""
    first = _v2(0)
    data = first + _with_magic(_v2(3), 0, 9)
    seen = []
    reader = LogReader(data, path=PATH)
    with pytest.raises(CorruptRecordError):
        for entry in reader:
            seen.append(entry.last_offset)
    assert seen == [2]
    assert reader.end_position == len(first)  # where the refused entry starts
    chunk = LogReader(data[len(first) :], path=PATH, base_position=len(first))
    with pytest.raises(CorruptRecordError) as located:
        list(chunk)
    assert located.value.position == len(first) + MAGIC_OFFSET

    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(data)
    with pytest.raises(CorruptRecordError, match=str(seg)):
        list(LogReader.open(seg))


def test_known_magics_still_read() -> None:
    """Magic 0 and 1 message sets and magic 2 batches in one buffer: nothing refused."""
    records = [Record.of(b"x", key=b"k", timestamp=T0)]
    data = (
        encode_message_set(records, magic=0, base_offset=0)
        + encode_message_set(records, magic=1, base_offset=1)
        + _v2(2)
    )
    assert [e.magic for e in LogReader(data, path=PATH)] == [0, 1, 2]
    assert decode_range(data, path=PATH).batch.column("offset").to_pylist() == [0, 1, 2, 3, 4]


def test_a_magic_in_the_cut_off_tail_is_a_tail_not_corruption() -> None:
    """A cut-off last entry is never read past its length field, its magic included: it stays
    an incomplete tail (a crash mid-append), as Kafka's reader treats it."""
    good = _v2(0)
    torn = _with_magic(_v2(3), 0, 7)[:40]
    reader = LogReader(good + torn, path=PATH)
    assert [e.last_offset for e in reader] == [2]
    assert reader.incomplete_tail is not None and reader.incomplete_tail.position == len(good)
    assert decode_range(good + torn, path=PATH).incomplete_tail == reader.incomplete_tail
