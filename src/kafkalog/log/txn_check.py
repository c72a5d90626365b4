"""Whether a partition's ``.txnindex`` files say what its batches say: the check
``kafkalog verify`` makes of them.

A ``.txnindex`` entry is what a ``read_committed`` reader (a Fetch, a Spark read) drops records
by: an entry naming the wrong producer, a first offset too low or a missing entry returns
aborted records or drops committed ones, in silence, since every batch's CRC still checks. So
each entry is held against the log:

* the batch at an entry's last offset, when the segment holds one, must be its producer's
  ABORT marker (compaction may have removed the marker: then no batch is there, and nothing is
  said);
* an ABORT marker of a transaction whose batches the walk saw must have its entry (else its
  records read as committed);
* an entry's first offset may not be past the first batch of its transaction the walk saw
  (its records would read as committed), nor at or below the producer's batch before the
  transaction (that producer's records there would be dropped); its last stable offset may
  not be past what the batches give (a Fetch would stop collecting aborted transactions too
  soon).

A replay only removes what it cannot see: compaction removes batches (an aborted
transaction's first ones, the markers, whole transactions), and a log whose first segment
has no producer snapshot at its base starts with no transactions open. So an entry whose
first offset is below the first batch seen, or whose last stable offset is below the replay's,
is no problem; and Kafka's cleaner keeps an entry only for a transaction whose batches it saw
in the same cleaning (``CleanedTransactionMetadata``), so a marker with no batch of its
transaction left needs no entry.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kafkalog.errors import KafkalogError
from kafkalog.index.txn_index import AbortedTxn
from kafkalog.log.producer_state import ProducerStateManager
from kafkalog.records.batch import RecordBatch
from kafkalog.records.types import DEFAULT_LIMITS


@dataclass
class _Segment:
    #: offset of each control batch -> (producer id, its control type's name)
    markers: dict[int, tuple[int, str]] = field(default_factory=dict)
    #: (first offset, last offset) of every other batch seen
    spans: list[tuple[int, int]] = field(default_factory=list)
    #: the entries a replay gives, by (producer id, marker offset)
    expected: dict[tuple[int, int], AbortedTxn] = field(default_factory=dict)


class TxnIndexCheck:
    """Feed it every valid batch of a partition in log order (:meth:`see`), call
    :meth:`segment` as each segment starts, and :meth:`problems` with a segment's
    ``.txnindex`` entries."""

    def __init__(self, directory: str, first_base: int) -> None:
        from kafkalog.log.layout import SNAPSHOT_SUFFIX, segment_file

        self.state = ProducerStateManager(directory, writable=False)
        if first_base in self.state.snapshot_offsets():
            try:
                self.state.load_snapshot(segment_file(directory, first_base, SNAPSHOT_SUFFIX))
            except (KafkalogError, OSError):
                self.state.clear()  # an unreadable snapshot is reported with its file
        #: producer id -> the last offset of its last batch seen
        self._last_of: dict[int, int] = {}
        #: producer id -> the last offset of its batch before its open transaction
        self._before_txn: dict[int, int] = {}
        #: (producer id, marker offset) -> the last offset of the producer's batch before
        #: the transaction the marker ended
        self._before_aborted: dict[tuple[int, int], int] = {}
        self._segment = _Segment()

    def segment(self) -> None:
        """A new segment starts: what follows is its batches."""
        self._segment = _Segment()

    def see(self, batch: object) -> None:
        """One batch of the segment, whole and valid, its offsets in line."""
        if not isinstance(batch, RecordBatch):
            return
        seg = self._segment
        pid = batch.producer_id
        if batch.is_control:
            seg.markers[batch.base_offset] = (pid, _control_type(batch))
        else:
            seg.spans.append((batch.base_offset, batch.last_offset))
            if batch.is_transactional and pid not in self.state.ongoing_transactions():
                self._before_txn[pid] = self._last_of.get(pid, -1)
        aborted = self.state.update(batch, DEFAULT_LIMITS)
        if pid >= 0:
            self._last_of[pid] = batch.last_offset
        if aborted is not None:
            key = (aborted.producer_id, aborted.last_offset)
            seg.expected[key] = aborted
            self._before_aborted[key] = self._before_txn.get(pid, -1)

    def problems(self, entries: list[tuple[int, AbortedTxn]]) -> list[tuple[int, str]]:
        """(byte, what is wrong) for the segment's ``.txnindex`` entries (byte position,
        entry); a missing entry is named at the file's end."""
        seg = self._segment
        out: list[tuple[int, str]] = []
        found: set[tuple[int, int]] = set()
        for position, txn in entries:
            key = (txn.producer_id, txn.last_offset)
            found.add(key)
            wrong = self._wrong(seg, key, txn)
            if wrong is not None:
                out.append(
                    (
                        position,
                        f"entry of producer {txn.producer_id} (offsets {txn.first_offset}.."
                        f"{txn.last_offset}, last stable offset {txn.last_stable_offset}): "
                        f"{wrong}",
                    )
                )
        end = len(entries) * AbortedTxn.SIZE
        for (pid, last), want in sorted(seg.expected.items(), key=lambda kv: kv[0][1]):
            if (pid, last) not in found:
                out.append(
                    (
                        end,
                        f"no entry for the transaction of producer {pid} aborted at offset "
                        f"{last} (its batches from offset {want.first_offset}): a "
                        "read_committed read returns its records as committed",
                    )
                )
        return out

    def _wrong(self, seg: _Segment, key: tuple[int, int], txn: AbortedTxn) -> str | None:
        if txn.first_offset > txn.last_offset:
            return "its first offset is past its last"
        if txn.last_stable_offset > txn.last_offset + 1:
            return "its last stable offset is past its marker's next offset"
        marker = seg.markers.get(txn.last_offset)
        if marker is None:
            if any(a <= txn.last_offset <= b for a, b in seg.spans):
                return f"offset {txn.last_offset} is a batch of records, not an ABORT marker"
            return None  # no batch there: compaction removed the marker
        pid, kind = marker
        if pid != txn.producer_id or kind != "ABORT":
            return f"offset {txn.last_offset} is the {kind} marker of producer {pid}"
        want = seg.expected.get(key)
        if want is None:
            return None  # none of the transaction's batches left (compaction), or seen
        if txn.first_offset > want.first_offset:
            return (
                f"the transaction's batches start at offset {want.first_offset}: its records "
                f"before offset {txn.first_offset} read as committed"
            )
        before = self._before_aborted.get(key, -1)
        if txn.first_offset <= before:
            return (
                f"the producer's batch at offset {before} is before its transaction (from "
                f"offset {want.first_offset}): a read_committed read drops it"
            )
        if txn.last_stable_offset > want.last_stable_offset:
            return (
                f"the last stable offset at its marker is at most {want.last_stable_offset} "
                "(a transaction was still open): a fetch stops looking for aborted "
                "transactions too soon"
            )
        return None


def _control_type(batch: RecordBatch) -> str:
    """A control batch's type (``ABORT``, ``COMMIT``, ...; ``unreadable``)."""
    try:
        return batch.control_record(DEFAULT_LIMITS).type.name
    except KafkalogError:
        return "unreadable"
