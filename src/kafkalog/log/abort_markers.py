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

A Kafka older than 3.1 stamps no delete horizon: its cleaner (``CleanedTransactionMetadata``)
writes a cleaned segment's ``.txnindex`` entry only for an aborted transaction whose batches it
met in that cleaning, removes those batches, and keeps the marker until ``delete.retention.ms``
after the segment's last change. From the second cleaning on, such a log holds ABORT markers of
emptied transactions (an empty transaction's from the first) that no entry lists and no horizon
marks, healthy. So a reader that saw none of the transaction (an empty one's, an emptied one's, or
one whose read begins at the marker: a consumer keeping up with the log) looks back
(:class:`TransactionLookback`) from the marker to the producer's previous control batch (or the
log's first segment): no transactional batch of P in between means nothing of it can be read as
committed, and the marker is passed; any such batch is a lost entry, refused as before.
"""

from __future__ import annotations

import functools
import logging
import os
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kafkalog import files
from kafkalog.errors import DamagedLogError, KafkalogError
from kafkalog.index.txn_index import AbortedTxn
from kafkalog.log.layout import is_segment_log, offset_from_filename
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

    def __init__(
        self,
        listed: Iterable[tuple[int, int, int]],
        emptied: Callable[[Marker], bool] | None = None,
    ) -> None:
        #: (producer id, last offset) of every listed aborted transaction
        self._listed = {(pid, last) for pid, _, last in listed}
        #: whether an unlisted ABORT marker's transaction has no batch left before it (a Kafka
        #: older than 3.1 cleaned it away: :class:`TransactionLookback`); None: never asked
        self._emptied = emptied
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
        if first is None and self._emptied is not None and self._emptied(marker):
            return None  # emptied by a cleaner older than Kafka 3.1: nothing to drop
        return Unlisted(marker, first, began and not handed and first is not None)


#: how many bytes the look-back reads at a time (it needs batch headers only)
_LOOKBACK_CHUNK = 1 << 20


class TransactionLookback:
    """Whether a producer's transaction ending at an ABORT marker has any transactional batch
    left in the log before the marker: the batch headers of the marker's segment up to it, then
    of the segments before it, newest first, back to the producer's previous control batch or
    the first segment (a transaction's batches follow its producer's previous marker).

    Only an unlisted marker whose reader saw no batch of its transaction asks; one read asks for
    each such marker (a log cleaned by a Kafka older than 3.1 has one per emptied transaction),
    so each segment's headers are walked once per producer asked about. Read-only; a segment
    that cannot be read, or bytes that are no batches, answer "not emptied": the marker is
    then refused as before, never passed on a guess."""

    def __init__(self, log_path: str) -> None:
        self.path = log_path
        # (segment path, producer) -> offsets of its control batches and of its transactional
        # data batches (last offsets), in log order
        self._seen: dict[tuple[str, int], tuple[list[int], list[int]] | None] = {}
        self._segments: list[str] | None = None

    def __call__(self, marker: Marker) -> bool:
        try:
            return self._emptied(marker)
        except (OSError, KafkalogError, ValueError):
            return False

    def _emptied(self, marker: Marker) -> bool:
        segments = self._segments_up_to_marker()
        if not segments:
            return False
        bound: int | None = marker.offset
        for path in reversed(segments):
            found = self._producer_in(path, marker.producer_id)
            if found is None:
                return False
            controls, data = found
            if bound is not None:
                controls = [o for o in controls if o < bound]
                data = [o for o in data if o < bound]
            if controls:
                return not any(o > controls[-1] for o in data)
            if data:
                return False
            bound = None  # older segments: wholly before the marker
        return True

    def _segments_up_to_marker(self) -> list[str]:
        """The ``.log`` files of the directory from the first to the marker's, in order."""
        if self._segments is None:
            directory, _, name = self.path.rpartition("/")
            if not directory or not is_segment_log(name):
                self._segments = []
            else:
                base = offset_from_filename(name)
                logs = sorted(
                    (offset_from_filename(n), n)
                    for n in files.listdir(directory)
                    if is_segment_log(n) and offset_from_filename(n) <= base
                )
                self._segments = [f"{directory}/{n}" for _, n in logs]
        return self._segments

    def _producer_in(self, path: str, producer_id: int) -> tuple[list[int], list[int]] | None:
        key = (path, producer_id)
        if key not in self._seen:
            # a segment below the active one never changes (a cleaning writes another file):
            # the same file and size give the same answer to every read after this one
            self._seen[key] = _producer_batches(
                path, producer_id, files.identity(path), files.getsize(path), files.mtime_ms(path)
            )
        return self._seen[key]


@functools.lru_cache(maxsize=256)
def _producer_batches(
    path: str, producer_id: int, identity: tuple[int, int] | None, size: int, mtime_ms: int
) -> tuple[list[int], list[int]] | None:
    """(control batch offsets, transactional data batch last offsets) of ``producer_id`` in the
    first ``size`` bytes of the ``.log`` at ``path`` (``identity`` and ``mtime_ms``: which file
    and which version of it, for the cache: a truncated and rewritten active segment is another),
    from its batch headers; None when those bytes are no whole batches. Cached across reads:
    a Fetch meets one such marker after another, each in a fetch of its own."""
    controls: list[int] = []
    data: list[int] = []
    handle = files.open_read(path)
    try:
        size = min(size, handle.size())
        position = 0
        chunk = b""
        chunk_at = 0
        while position + 12 <= size:
            if position + 61 > chunk_at + len(chunk):
                chunk_at = position
                chunk = handle.pread(min(_LOOKBACK_CHUNK, size - position), position)
            at = position - chunk_at
            if len(chunk) - at < 17:
                return None
            base, length, _, magic = struct.unpack_from(">qiib", chunk, at)
            end = position + 12 + length
            if length < 14 or end > size:
                return None  # a torn tail or no batch: undecided
            if magic == 2:
                if len(chunk) - at < 61:
                    return None
                attrs = struct.unpack_from(">h", chunk, at + 21)[0]
                last = base + struct.unpack_from(">i", chunk, at + 23)[0]
                if _PID.unpack_from(chunk, at + 43)[0] == producer_id and attrs & 0x10:
                    (controls if attrs & 0x20 else data).append(last)
            position = end
    finally:
        handle.close()
    return controls, data


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
) -> list[AbortedTxn]:
    """A read_committed fetch's check of the whole batches ``data`` (from byte ``position`` of
    ``path``, the fetch from offset ``start``) against the aborted transactions it answers
    (``listed``): headers only, the control batches' type read. An unlisted ABORT marker whose
    whole transaction the bytes hold is answered as the entry it lacks (returned, and said
    with a WARNING); any other is an :class:`UnlistedAbortError` (its records may have gone to
    the consumer in an earlier fetch: only refusing is left)."""
    watch = AbortWatch(
        ((t.producer_id, t.first_offset, t.last_offset) for t in listed),
        TransactionLookback(path),
    )
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
            elif found is not None:
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
