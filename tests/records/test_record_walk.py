"""The validator's record walk: one function (``walk_body.walk_records``), whose compiled and
interpreted calls agree on every input, and a walk that finds nothing wrong means the full
decoders (kafkalog's and kafka-python's) read the declared records."""

from __future__ import annotations

import random

import numpy as np
from kafka.record.default_records import DefaultRecordBatch

from kafkalog.records import Record, RecordBatch, encode_batch
from kafkalog.records._walk_kernel import walk_v2_plain, walk_v2_records
from kafkalog.records.record_codes import OK
from kafkalog.records.record_walk import NO_COLLECT, walk_plain
from kafkalog.records.walk_body import walk_records

T0 = 1_700_000_000_000


def _batches(rng: random.Random, n: int) -> list[bytearray]:
    out = []
    for _ in range(n):
        recs = [
            Record.of(
                rng.randbytes(rng.choice([0, 1, 5, 70, 300])),
                key=None if rng.random() < 0.2 else rng.randbytes(rng.randint(0, 9)),
                timestamp=rng.choice([-1, T0, T0 + rng.randint(-(10**6), 10**6)]),
                headers=[(f"h{i}", rng.choice([None, b"v"])) for i in range(rng.randint(0, 2))],
            )
            for _ in range(rng.randint(1, 40))
        ]
        data = bytearray(encode_batch(recs))
        for _ in range(rng.choice([0, 1, 2, 4])):
            data[rng.randrange(61, len(data))] = rng.randrange(256)
        out.append(data)
    return out


def test_the_kernel_is_the_walk_compiled() -> None:
    assert walk_v2_records.py_func is walk_records


def test_compiled_and_python_walks_agree() -> None:
    rng = random.Random(7)
    for data in _batches(rng, 600):
        header = RecordBatch.parse(bytes(data))
        count = header.records_count + rng.choice([0, 0, 0, -1, 1])
        need_key = rng.random() < 0.5
        check = rng.random() < 0.5
        lo, hi = T0 - rng.randint(0, 10**6), T0 + rng.randint(0, 10**6)
        fixed = rng.random() < 0.1
        args = (
            data,
            61,
            len(data),
            count,
            header.base_timestamp,
            T0,
            fixed,
            need_key,
            check,
            lo,
            hi,
        )
        c1, c2 = np.zeros(max(count, 0), np.int8), np.zeros(max(count, 0), np.int8)
        assert walk_v2_records(*args, c1) == walk_records(*args, c2)
        assert c1.tolist() == c2.tolist()
        plain = walk_v2_plain(data, 61, len(data), count, header.base_timestamp, need_key)
        assert plain == walk_plain(data, 61, len(data), count, header.base_timestamp, need_key)


def test_a_clean_walk_means_the_records_decode() -> None:
    rng = random.Random(8)
    clean = 0
    for data in _batches(rng, 400):
        header = RecordBatch.parse(bytes(data))
        code, _, _, _, _, max_ts = walk_records(
            data,
            61,
            len(data),
            header.records_count,
            header.base_timestamp,
            0,
            False,
            False,
            False,
            0,
            0,
            NO_COLLECT,
        )
        if code != OK:
            continue
        clean += 1
        records = header.records()
        assert [r.offset for r in records] == list(range(header.records_count))
        assert max_ts == max(r.timestamp for r in records)
        if any("\ufffd" in h.key for r in records for h in r.headers):
            continue  # kafka-python decodes header keys as strict UTF-8; Java (and we) do not
        theirs = list(DefaultRecordBatch(bytes(data)))
        assert [(r.key, r.value) for r in theirs] == [(r.key, r.value) for r in records]
    assert clean > 100
