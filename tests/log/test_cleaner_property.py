"""Property: after any sequence of appends, tombstones, transactions (committed, aborted,
left open), rolls and cleanings, a read_committed reading of the log below its last stable
offset gives, per key, exactly the latest value a brute force over the uncleaned history
gives (a removed tombstone reads as the key's absence, never as an older value), offsets and
the log end never move, and every record left is one that was written."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkalog.log import Log, TopicConfig
from kafkalog.records import Record, RecordBatch, encode_batch
from kafkalog.records.batch import encode_control_batch
from kafkalog.records.model import ControlType
from kafkalog.records.types import Compression

KEYS = [b"a", b"b", b"c", b"d", b"e", b"f"]

op = st.one_of(
    st.tuples(
        st.just("put"),
        st.lists(st.tuples(st.sampled_from(KEYS), st.booleans()), min_size=1, max_size=4),
        st.sampled_from([Compression.NONE, Compression.GZIP, Compression.ZSTD]),
    ),
    st.tuples(st.just("txn"), st.sampled_from([1, 2]), st.sampled_from(KEYS), st.booleans()),
    st.tuples(st.just("end"), st.sampled_from([1, 2]), st.booleans()),
    st.tuples(st.just("idem"), st.just(3), st.sampled_from(KEYS), st.booleans()),
    st.just(("roll",)),
    st.tuples(st.just("clean"), st.integers(0, 3000)),
    st.tuples(
        st.just("nokey"),
    ),
)


class Model:
    """The uncleaned history: every record written, and the fate of each transaction."""

    def __init__(self) -> None:
        self.records: list[tuple[int, bytes | None, bytes | None, int, bool]] = []
        self.open: dict[int, list[int]] = {}
        self.aborted: set[tuple[int, int]] = set()  # (pid, offset)
        self.seq = {1: 0, 2: 0, 3: 0}

    def latest(self, below: int) -> dict[bytes, bytes | None]:
        out: dict[bytes, bytes | None] = {}
        for offset, key, value, pid, _ in self.records:
            if offset >= below or (pid, offset) in self.aborted or key is None:
                continue
            out[key] = value
        return out


def read_committed(log: Log, below: int) -> tuple[dict[bytes, bytes | None], set[tuple]]:
    aborted = log.aborted_transactions(0, log.log_end_offset)
    out: dict[bytes, bytes | None] = {}
    seen = set()
    for batch in log.batches(0, below):
        assert isinstance(batch, RecordBatch)
        if batch.is_control:
            continue
        for r in batch.records():
            if r.offset >= below:
                continue
            if batch.is_transactional and any(
                t.producer_id == batch.producer_id and t.first_offset <= r.offset <= t.last_offset
                for t in aborted
            ):
                continue
            seen.add((r.offset, r.key, r.value))
            out[r.key] = r.value  # type: ignore[index]
    return out, seen


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=st.lists(op, min_size=1, max_size=40))
def test_cleaning_keeps_the_latest_committed_value_of_every_key(
    ops: list[tuple], tmp_path_factory: object
) -> None:
    import tempfile

    root = Path(tempfile.mkdtemp())
    cfg = TopicConfig(
        cleanup_policy="compact",
        segment_bytes=400,
        file_delete_delay_ms=0,
        delete_retention_ms=1000,
    )
    log = Log(root / "t-0", cfg)
    model = Model()
    now = 1000
    written: set[tuple[int, bytes | None, bytes | None]] = set()
    try:
        for o in ops:
            kind = o[0]
            if kind == "put":
                recs = [Record(-1, now, k, None if tomb else b"v%d" % now) for k, tomb in o[1]]
                # keys of one batch distinct values: offsets tell them apart
                info = log.append(encode_batch(recs, compression=o[2]))
                for i, r in enumerate(recs):
                    model.records.append((info.first_offset + i, r.key, r.value, -1, False))
            elif kind in ("txn", "idem"):
                pid, key, tomb = o[1], o[2], o[3]
                value = None if tomb else b"t%d" % now
                batch = encode_batch(
                    [Record(-1, now, key, value)],
                    producer_id=pid,
                    producer_epoch=0,
                    base_sequence=model.seq[pid],
                    is_transactional=kind == "txn",
                )
                if kind == "txn" and pid not in model.open:
                    model.open[pid] = []
                model.seq[pid] += 1
                info = log.append(batch)
                model.records.append((info.first_offset, key, value, pid, kind == "txn"))
                if kind == "txn":
                    model.open[pid].append(info.first_offset)
            elif kind == "end":
                pid, commit = o[1], o[2]
                if pid not in model.open:
                    continue
                marker = encode_control_batch(
                    ControlType.COMMIT if commit else ControlType.ABORT,
                    offset=0,
                    timestamp=now,
                    producer_id=pid,
                    producer_epoch=0,
                )
                log.append(marker, origin="coordinator")
                offsets = model.open.pop(pid)
                if not commit:
                    model.aborted.update((pid, off) for off in offsets)
            elif kind == "nokey":
                # a keyless record: only a follower's append (or a policy changed later) brings
                # one into a compacted topic; a client's is refused
                keyless = encode_batch(
                    [Record(-1, now, None, b"x")], base_offset=log.log_end_offset
                )
                info = log.append(keyless, assign_offsets=False)
                model.records.append((info.first_offset, None, b"x", -1, False))
            elif kind == "roll":
                log.roll()
            elif kind == "clean":
                now += o[1]
                end = log.log_end_offset
                log.compact(now=now)
                assert log.log_end_offset == end
            now += 1
        for offset, key, value, _, _ in model.records:
            written.add((offset, key, value))
        lso = log.last_stable_offset()
        got, seen = read_committed(log, lso)
        want = model.latest(lso)
        assert seen <= written
        for key in KEYS:
            if want.get(key) is None:
                assert got.get(key) is None, (key, got, want)
            else:
                assert got.get(key) == want[key], (key, got, want)
        log.close()
        with Log(root / "t-0", cfg) as again:  # and the files load to the same reading
            assert read_committed(again, lso) == (got, seen)
    finally:
        import shutil

        shutil.rmtree(root, ignore_errors=True)
