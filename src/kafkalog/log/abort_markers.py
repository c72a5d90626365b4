"""ABORT markers that a read's aborted transactions do not list: what every ``read_committed``
reader checks as it reads, because a ``.txnindex`` deleted or cut short would otherwise make it
return an aborted transaction's records as committed, in silence (Kafka's broker has the same
blind spot: it creates the file lazily, so a missing one is normal for a segment without aborts).

Kafka writes a ``.txnindex`` entry for every ABORT marker of a transaction that wrote to the
partition (none for an empty one: ProducerAppendInfo.appendEndTxnMarker), and its cleaner
drops the entry only with the transaction's last batch, stamping a delete horizon on the marker
it keeps (KIP-534; kafkalog's cleaner does the same). So an ABORT marker of producer P at
offset M with no listed entry of P ending at M is damage, unless the marker carries a delete
horizon or the reader saw (or a fetch's look back finds) P's previous marker and no record of P
since (an empty transaction). :class:`AbortWatch` follows one reader's range in log order and
says, at such a marker, which records were wrong: from the transaction's first record the
reader saw when it saw where the transaction began (``whole``: they can be dropped exactly),
else perhaps records before its range too (handed out by another read: only an error or a
warning is left).
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kafkalog import files
from kafkalog.errors import DamagedLogError, KafkalogError
from kafkalog.index.txn_index import AbortedTxn
from kafkalog.records.batch import RecordBatch
from kafkalog.records.types import DEFAULT_LIMITS

_logger = logging.getLogger("kafkalog.log")

#: a batch header's base offset, length, epoch, magic, CRC and attributes; its producer id
_HEAD = struct.Struct(">qiibIh")
_PID = struct.Struct(">q")

#: the most bytes a control batch takes (one record of a 4-byte key and a 6-byte value)
_MAX_MARKER_BYTES = 4096


@dataclass(frozen=True)
class Marker:
    """A control batch as a read_committed reader meets it."""

    producer_id: int
    offset: int
    position: int  # its byte in the ``.log``
    kind: str  # ABORT, COMMIT, ... ("unreadable")
    horizon: bool  # the cleaner stamped a delete horizon: an emptied transaction's marker


def marker_at(read: Callable[[int, int], bytes], position: int, path: str) -> Marker:
    """The control batch at ``position`` of a ``.log`` (``read(position, n)``), already
    validated by the reader's decode; only its type is read here."""
    head = read(position, 12)
    size = 12 + int.from_bytes(head[8:12], "big", signed=True) if len(head) == 12 else 0
    if not 61 <= size <= _MAX_MARKER_BYTES:
        raise DamagedLogError.found(
            f"a control batch of {size} bytes",
            path=path,
            position=position,
            partition=os.path.dirname(path),
        )
    batch = RecordBatch.parse(memoryview(read(position, size)), 0, path=path)
    try:
        kind = batch.control_record(DEFAULT_LIMITS).type.name
    except KafkalogError:
        kind = "unreadable"
    return Marker(batch.producer_id, batch.base_offset, position, kind, batch.has_delete_horizon)


@dataclass(frozen=True)
class Unlisted:
    """An ABORT marker no listed aborted transaction ends at."""

    marker: Marker
    #: the first offset of the transaction's records the reader saw (None: it saw none)
    first: int | None
    #: whether the reader saw where the transaction began and handed none of it out yet: its
    #: records from ``first`` to the marker are exactly the ones to drop
    whole: bool


class AbortWatch:
    """One reader's range, in log order: :meth:`data` for each transactional record batch (or
    row) that is no control batch, :meth:`marker` for each control batch, :meth:`handed_out`
    whenever what was read so far is handed out."""

    def __init__(self, listed: Iterable[tuple[int, int, int]]) -> None:
        #: (producer id, last offset) of every listed aborted transaction
        self._listed = {(pid, last) for pid, _, last in listed}
        self._open: dict[int, int] = {}  # producer -> its open transaction's first offset seen
        self._began: set[int] = set()  # producers whose previous marker the range holds
        self._handed: set[int] = set()  # producers whose open transaction went out in part

    def listed(self, producer_id: int, offset: int) -> bool:
        return (producer_id, offset) in self._listed

    def data(self, producer_id: int, first_offset: int) -> None:
        self._open.setdefault(producer_id, first_offset)

    def handed_out(self) -> None:
        self._handed.update(self._open)

    def marker(
        self, producer_id: int, offset: int, kind: str | None, details: Callable[[], Marker]
    ) -> Unlisted | None:
        """A control batch of ``producer_id`` at ``offset``: its type (``kind``) when the reader
        knows it; ``details`` reads the batch, called only when what it holds decides."""
        pid = producer_id
        first = self._open.pop(pid, None)
        handed = pid in self._handed
        self._handed.discard(pid)
        began = pid in self._began
        self._began.add(pid)
        if (pid, offset) in self._listed or (kind is not None and kind != "ABORT"):
            return None
        if first is None and began:
            return None  # an empty transaction (of whatever end): no record to drop
        marker = details()
        if marker.kind != "ABORT" or (first is None and marker.horizon):
            return None  # a COMMIT; an emptied transaction's marker the cleaner kept
        return Unlisted(marker, first, began and not handed and first is not None)


def txnindex_state(log_path: str) -> str:
    """What the ``.txnindex`` beside ``log_path`` (local or remote) is: missing, or how many
    entries it holds (none of them the marker's)."""
    path = log_path[: -len(".log")] + ".txnindex" if log_path.endswith(".log") else log_path
    try:
        size = files.getsize(path)
    except OSError:
        return f"{files.redacted(path)} is missing"
    whole, rest = divmod(size, 34)
    cut = f" and {rest} bytes of a cut-off one" if rest else ""
    return f"{files.redacted(path)} holds {whole} entries{cut}, none for it"


def unlisted_message(found: Unlisted, log_path: str, state: str, outcome: str) -> str:
    """The words of the damage at an unlisted ABORT marker (the error's, or the warning's):
    which marker, what the ``.txnindex`` lacks, ``outcome``, and the command that writes the
    ``.txnindex`` again."""
    m = found.marker
    since = "" if found.first is None else f" (its records from offset {found.first} on)"
    return (
        f"the ABORT marker of producer {m.producer_id} at offset {m.offset}{since} has no "
        f".txnindex entry ({state}): {outcome}; run `kafkalog rebuild-index "
        f"{os.path.dirname(log_path) or '.'}` to write the .txnindex again from the .log"
    )


class UnlistedAbortError(DamagedLogError):
    """An ABORT marker a read_committed read met that no ``.txnindex`` entry lists, after
    records of its transaction may have been handed out as committed."""

    @classmethod
    def of(cls, found: Unlisted, log_path: str, state: str, outcome: str) -> UnlistedAbortError:
        return cls(
            f"damaged log: {unlisted_message(found, log_path, state, outcome)}",
            path=log_path,
            position=found.marker.position,
        )


def fetched_unlisted(
    data: bytes | memoryview,
    position: int,
    start: int,
    listed: list[AbortedTxn],
    path: str,
    empty_before: Callable[[int, int], bool] | None = None,
) -> list[AbortedTxn]:
    """A read_committed fetch's check of the whole batches ``data`` (from byte ``position`` of
    ``path``, the fetch from offset ``start``) against the aborted transactions it answers
    (``listed``): headers only, the control batches' type read. An unlisted ABORT marker whose
    whole transaction the bytes hold is answered as the entry it lacks (returned, and said
    with a WARNING); any other is an :class:`UnlistedAbortError` (its records may have gone to
    the consumer in an earlier fetch: only refusing is left).

    ``empty_before(producer_id, offset)``: whether the producer's last batch before ``offset``
    in the log is a control batch. Kafka writes no ``.txnindex`` entry for an empty
    transaction's ABORT (ProducerAppendInfo.appendEndTxnMarker emits a completed transaction
    only when it has a first offset), and a fetch that starts at such a marker sees none of
    the producer's batches before it: a consumer tailing the log fetches from exactly there
    whenever a transaction aborted with nothing written to the partition (librdkafka purges
    unsent messages on abort), and was refused for ever."""
    watch = AbortWatch((t.producer_id, t.first_offset, t.last_offset) for t in listed)
    view = memoryview(data)
    extra: list[AbortedTxn] = []
    at = 0
    while at + 61 <= len(view):
        base, length, _, magic, _, attrs = _HEAD.unpack_from(view, at)
        if magic == 2 and attrs & 0x30 == 0x30 and base >= start:  # a transaction's marker
            pid = _PID.unpack_from(view, at + 43)[0]

            def details(at: int = at) -> Marker:
                return marker_at(
                    lambda p, n: bytes(view[p - position : p - position + n]), position + at, path
                )

            found = watch.marker(pid, base, None, details)
            if found is not None and found.whole and found.first is not None:
                extra.append(AbortedTxn(pid, found.first, base, base))
                _logger.warning(
                    "kafkalog: %s at byte %d: %s",
                    path,
                    found.marker.position,
                    unlisted_message(
                        found,
                        path,
                        txnindex_state(path),
                        "the fetch holds the whole transaction and answers it as aborted",
                    ),
                )
            elif found is not None and not (
                found.first is None and empty_before is not None and empty_before(pid, base)
            ):
                raise UnlistedAbortError.of(
                    found,
                    path,
                    txnindex_state(path),
                    f"a read_committed fetch from offset {start} would hand its records out "
                    "as committed, so it is refused (any of them an earlier fetch returned, "
                    "a transaction spanning fetches, went out as committed)",
                )
        elif magic == 2 and attrs & 0x30 == 0x10 and base >= start:
            watch.data(_PID.unpack_from(view, at + 43)[0], base)
        at += max(12 + length, 61)
    return extra
