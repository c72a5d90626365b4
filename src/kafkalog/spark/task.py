"""One Spark task: a byte range of a segment into Arrow record batches with Spark's schema.

The file is read by position in chunks, locally or through ``pyarrow.fs`` (never mapped: a live
broker may truncate its active segment) and decoded by the columnar path; rows outside the
split's offset range, and with
``read_committed`` the records of aborted transactions, are dropped with vectorised masks.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa

from kafkalog import files
from kafkalog.errors import KafkalogError
from kafkalog.log.abort_markers import (
    AbortWatch,
    TransactionLookback,
    UnlistedAbortError,
    marker_at,
    txnindex_state,
    unlisted_message,
)
from kafkalog.log.arrow_read import (
    CHUNK_BYTES,
    decode_file,
    keep_rows,
    offsets_within,
)
from kafkalog.log.damage import SkippedBytes
from kafkalog.log.layout import DELETED_SUFFIX
from kafkalog.records.header_prune import RowBounds
from kafkalog.spark.columns import Columns
from kafkalog.spark.plan import AbortedRange, DataLossError, Split, TimestampBounds, warn_lost
from kafkalog.spark.stats import ReadStats

_logger = logging.getLogger("kafkalog.spark")


def spark_schema_arrow(include_headers: bool) -> pa.Schema:
    from kafkalog.records import arrow_schema

    return arrow_schema(include_headers=include_headers, timestamp_unit="us", topic_partition=True)


def read_split(
    split: Split,
    *,
    include_headers: bool,
    aborted: Sequence[AbortedRange] | None = None,
    chunk_bytes: int = CHUNK_BYTES,
    fail_on_data_loss: bool = True,
    columns: Columns | None = None,
    stats: ReadStats | None = None,
    timestamps: TimestampBounds = (None, None),
) -> Iterator[pa.RecordBatch]:
    """Records of ``split`` with offsets in [start_offset, end_offset), in Spark's columns, or
    in ``columns`` (a schema the user gave): only those are decoded, plus the offsets the
    split's range is cut by. With ``stats``, the segment bytes read are counted there.
    ``timestamps`` ([lo, hi) ms, from :func:`~kafkalog.spark.plan.task_timestamps`): batches
    whose headers prove no record falls inside are not decoded (other rows outside may still
    be returned: Spark filters them). ``aborted`` (read_committed; None: read_uncommitted) are
    the planned aborted transactions whose records are dropped; the ABORT markers of the range
    are checked against them (:class:`_Committed`)."""
    decoded_columns = None if columns is None else columns.sources | {"offset"}
    metadata = list(_COMMITTED_COLUMNS) if aborted is not None else []
    handle = _open_segment(split, fail_on_data_loss)  # a local file or a pyarrow.fs URI
    if handle is None:
        return
    if stats is not None:
        handle = stats.counting(handle)
    committed = None if aborted is None else _Committed(split, aborted, handle, fail_on_data_loss)
    try:
        size = handle.size()
        if split.end_position > size and size < split.planned_size and fail_on_data_loss:
            # cut since planning (a follower truncating to its new leader): what was planned
            # past the cut is gone
            raise DataLossError(
                f"{split.topic}-{split.partition}: segment {files.redacted(split.segment)} was "
                f"cut from {split.planned_size} to {size} bytes after the query was planned, "
                "taking planned records with it; set failOnDataLoss=false to read what is left"
            )
        if split.end_position > size and size < split.planned_size:
            _logger.warning(
                "kafkalog: %s-%d: segment %s was cut from %d to %d bytes after the query was "
                "planned; the records of offsets up to %d planned past the cut are not in the "
                "result (failOnDataLoss=false)",
                split.topic,
                split.partition,
                files.redacted(split.segment),
                split.planned_size,
                size,
                split.end_offset - 1,
            )
        end = size if split.end_position < 0 else min(split.end_position, size)
        for decoded in decode_file(
            handle,
            split.start_position,
            end,
            path=split.segment,
            last_offset=split.end_offset - 1,
            chunk_bytes=chunk_bytes,
            include_headers=include_headers,
            metadata=metadata,
            control_records="skip" if committed is None else "include",
            timestamp_unit="us",
            topic=split.topic,
            partition=split.partition,
            columns=decoded_columns,
            within=RowBounds(split.start_offset, split.end_offset, *timestamps),
            last_segment=split.last_segment,
            first_offset=split.base_offset,
            # failOnDataLoss=false: damaged bytes are skipped and said, never an error or silent
            on_damage=None if fail_on_data_loss else _report_skip,
        ):
            batch = (
                keep_rows(decoded, offsets_within(decoded, split.start_offset, split.end_offset))
                if committed is None
                else committed.keep(decoded)
            )
            if batch.num_rows:
                yield batch if columns is None else _select(batch, columns)
                if committed is not None:
                    committed.watch.handed_out()
    finally:
        handle.close()


def _report_skip(skipped: SkippedBytes) -> None:
    _logger.warning(
        "kafkalog: %s; their records are not in the result (failOnDataLoss=false; "
        "`kafkalog repair` moves them into a quarantine folder)",
        dataclasses.replace(skipped, path=files.redacted(skipped.path)).describe(),
    )


def _open_segment(split: Split, fail_on_data_loss: bool) -> files.ReadHandle | None:
    """The segment file the split was planned on, also once the broker replaced it: retention
    and the log cleaner rename the old file ``.deleted`` and remove it a minute later
    (``file.delete.delay.ms``), so the planned bytes are usually still there. Gone altogether,
    its offsets are lost (an error, or nothing with ``failOnDataLoss=false``, as Spark's Kafka
    source does for offsets aged out); swapped for a rewritten file, its byte positions no
    longer hold the planned records: an error saying so."""
    swapped = False
    for path in (split.segment, split.segment + DELETED_SUFFIX):
        try:
            handle = files.open_read(path)
        except FileNotFoundError:
            continue
        if split.identity is None or handle.identity() in (None, split.identity):
            return handle
        handle.close()  # another file of the same name: the cleaner's rewrite
        swapped = True
    where = f"{split.topic}-{split.partition}: segment {files.redacted(split.segment)}"
    if swapped:
        raise KafkalogError(
            f"{where} was rewritten (Kafka's log cleaner swapped in a compacted copy) after the "
            "query was planned, and the planned file is gone; run the query again"
        )
    if fail_on_data_loss:
        raise DataLossError(
            f"{where} was deleted after the query was planned, with offsets "
            f"{split.start_offset} to {split.end_offset - 1}; set failOnDataLoss=false to skip "
            "what is gone"
        )
    warn_lost(
        split.topic,
        split.partition,
        split.start_offset,
        split.end_offset,
        f"segment {files.redacted(split.segment)} was deleted after the query was planned",
    )
    return None


#: the columns a read_committed read decodes besides the user's: which batch each row is of
_COMMITTED_COLUMNS = ("producerId", "isTransactional", "isControl", "batchPosition")


class _Committed:
    """A read_committed split's filter: drops the rows of the planned aborted transactions, and
    meets each control batch (decoded as a row) in order, so that an ABORT marker the planned
    transactions do not list (a ``.txnindex`` deleted or cut short) is never passed in silence
    (:mod:`kafkalog.log.abort_markers`). When the split saw where that transaction began and
    handed none of it out, its records are dropped exactly, with a WARNING naming the file and
    byte; else the read fails naming them (with ``failOnDataLoss=false``: a WARNING, and the
    records of the transaction not yet handed out are dropped)."""

    def __init__(
        self,
        split: Split,
        aborted: Sequence[AbortedRange],
        handle: files.ReadHandle,
        fail_on_data_loss: bool,
    ) -> None:
        self.split = split
        self.ranges = list(aborted)
        self.watch = AbortWatch(aborted, TransactionLookback(split.segment))
        self.handle = handle
        self.fail = fail_on_data_loss

    def keep(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        split = self.split
        mask = offsets_within(batch, split.start_offset, split.end_offset)
        offsets = batch.column("offset").to_numpy()
        pids = batch.column("producerId").to_numpy()
        txn = batch.column("isTransactional").to_numpy(zero_copy_only=False)
        control = batch.column("isControl").to_numpy(zero_copy_only=False)
        data = txn & ~control & mask
        keys = batch.column("key") if "key" in batch.schema.names else None
        done = 0  # the rows before it were seen
        for k in np.flatnonzero(control & txn).tolist():  # markers are transactional
            self._data(pids[done:k], offsets[done:k], data[done:k])
            done = k
            self._marker(
                int(pids[k]),
                int(offsets[k]),
                int(batch.column("batchPosition")[k].as_py()),
                keys[k].as_py() if keys is not None else None,
            )
        self._data(pids[done:], offsets[done:], data[done:])
        for pid, first, last in self.ranges:
            mask &= ~((pids == pid) & txn & (offsets >= first) & (offsets <= last))
        mask &= ~control
        batch = batch.drop_columns(list(_COMMITTED_COLUMNS))
        return keep_rows(batch, mask)

    def _data(self, pids: np.ndarray, offsets: np.ndarray, data: np.ndarray) -> None:
        """The transactional records among these rows, each producer's first."""
        if data.any():
            found, first = np.unique(pids[data], return_index=True)
            seen = offsets[data]
            for pid, at in zip(found.tolist(), first.tolist(), strict=True):
                self.watch.data(pid, int(seen[at]))

    def _marker(self, pid: int, offset: int, position: int, key: bytes | None) -> None:
        split = self.split
        if offset < split.start_offset or offset >= split.end_offset:
            return  # another split's (its task meets it)
        kind = None
        if key is not None and len(key) >= 4:  # (version, type): type 0 ABORT, 1 COMMIT
            kind = {0: "ABORT", 1: "COMMIT"}.get(int.from_bytes(key[2:4], "big"))
        found = self.watch.marker(
            pid,
            offset,
            kind,
            lambda: marker_at(lambda p, n: self.handle.pread(n, p), position, split.segment),
        )
        if found is None:
            return
        marker = found.marker
        first = marker.offset if found.first is None else found.first
        self.ranges.append((marker.producer_id, first, marker.offset))
        state = txnindex_state(split.segment)
        path = files.redacted(split.segment)
        where = f"{split.topic}-{split.partition}: {path} at byte {marker.position}"

        def warn(outcome: str) -> None:
            message = unlisted_message(found, path, state, outcome)
            _logger.warning("kafkalog: %s: %s", where, message)

        if found.whole:
            warn("this read saw the whole transaction and dropped its records")
            return
        if self.fail:
            raise UnlistedAbortError.of(
                found,
                path,
                state,
                "a read_committed read may have returned its records before the marker as "
                "committed (set failOnDataLoss=false to read on, with a warning)",
            )
        warn(
            "records of the transaction this read handed out before the marker (or "
            "another task's, before this split) are in the result as committed; the "
            "rest are dropped (failOnDataLoss=false)"
        )


def _select(batch: pa.RecordBatch, columns: Columns) -> pa.RecordBatch:
    """The user's columns, in their order and under their names (Spark checks both)."""
    if batch.schema.names == columns.names:
        return batch
    arrays = [batch.column(source) for _, source in columns.fields]
    return pa.RecordBatch.from_arrays(arrays, names=columns.names)
