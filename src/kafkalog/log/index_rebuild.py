"""Index files rebuilt from a partition's ``.log`` files without changing anything: what
``kafkalog rebuild-index`` writes, the entries Kafka's ``LogSegment.recover`` makes.

Unlike recovery, this never cuts a ``.log``: damage before the end of the log (a batch that
fails its CRC or cannot be parsed, a batch cut off in a segment that is not the last, offsets
that do not fit the index) is :class:`Refused`, naming the file and the byte; a batch cut off at
the end of the last segment is refused too unless ``force``. The ``index.interval.bytes`` rule is
:func:`~kafkalog.log.index_interval.entry_due`, the one every append path uses.
"""

from __future__ import annotations

import functools
import logging
import os
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from kafkalog import files
from kafkalog.errors import KafkalogError

if TYPE_CHECKING:
    from kafkalog.log.producer_state import ProducerStateManager
    from kafkalog.records.reader import LogEntry

logger = logging.getLogger("kafkalog.rebuild")


class Refused(KafkalogError):
    """A partition whose ``.log`` files are damaged: its indexes are not rebuilt."""

    def __init__(self, path: str, position: int | None, what: str, *, torn: bool = False):
        self.path = path
        self.position = position
        self.what = what
        self.torn = torn
        where = path if position is None else f"{path} at byte {position}"
        super().__init__(f"{where}: {what}")


@dataclass
class RebuiltSegment:
    """One segment's rebuilt index files (name -> bytes; None: no file) and its .log's
    identity when it was read (the scan is redone under the lock if it changed since)."""

    log_path: str
    stamp: tuple[int, int, int]
    rebuilt: dict[str, bytes | None] = field(default_factory=dict)


def file_stamp(path: str) -> tuple[int, int, int]:
    st = os.stat(path)
    return st.st_ino, st.st_size, st.st_mtime_ns


def _batch_name(entry: LogEntry) -> str:
    from kafkalog.records import RecordBatch

    if isinstance(entry, RecordBatch):
        return f"batch {entry.base_offset}..{entry.last_offset}"
    return f"entry ending at offset {entry.last_offset}"


def _out_of_line(entry: LogEntry, after: int) -> str:
    return (
        f"{_batch_name(entry)} is out of line with the offsets around it (the batches before "
        f"it end at offset {after}): its base offset, outside the batch CRC, is damaged"
    )


def _initial_state(directory: str, first_base: int) -> ProducerStateManager:
    """The producer state at the first segment's base: the newest readable snapshot at or
    below it (retention may have taken the segments before), else empty. The ``.txnindex``
    entries need it: an aborted transaction's first offset and LSO come from the open
    transactions of every producer, from before the segment too."""
    from kafkalog.log.layout import SNAPSHOT_SUFFIX, segment_file
    from kafkalog.log.producer_state import ProducerStateManager

    state = ProducerStateManager(directory, writable=False)
    for offset in reversed([o for o in state.snapshot_offsets() if o <= first_base]):
        try:
            state.load_snapshot(segment_file(directory, offset, SNAPSHOT_SUFFIX))
            return state
        except (KafkalogError, OSError):
            state.clear()
    return state


def _entries_between(data: Any, limits: Any, start: int, end: int) -> list[Any]:
    from kafkalog.records import LogReader

    return list(LogReader(data[start:end], limits=limits, base_position=start))


def rebuilt_indexes(directory: str, interval: int, force: bool, work: str) -> list[RebuiltSegment]:
    """Rebuild every segment's index files into ``work`` from the ``.log`` files, as Kafka's
    ``LogSegment.recover`` writes them, without changing anything in ``directory``; raise
    :class:`Refused` at the first damage (a cut-off last batch too, unless ``force``)."""
    from kafkalog.index import DEFAULT_MAX_INDEX_SIZE, OffsetIndex, TimeIndex, TransactionIndex
    from kafkalog.log.batch_indexer import BatchIndexer
    from kafkalog.log.damage import OffsetOrder
    from kafkalog.log.last_batch import judge_files
    from kafkalog.log.layout import segment_logs
    from kafkalog.records import DEFAULT_LIMITS, LogReader
    from kafkalog.records.reader import read_only_buffer

    # Kafka's recovery bounds a batch by nothing but the file: neither may a rebuild refuse one
    limits = replace(DEFAULT_LIMITS, max_batch_bytes=2**31)
    logs = segment_logs(directory)
    state = _initial_state(directory, logs[0][0]) if logs else None
    out = []
    for i, (base, log_path) in enumerate(logs):
        last_segment = i == len(logs) - 1
        stamp = file_stamp(log_path)
        data = read_only_buffer(log_path)
        stem = os.path.basename(log_path)[: -len(".log")]
        room = max(DEFAULT_MAX_INDEX_SIZE, (len(data) // max(interval, 1) + 2) * 12)
        offset_index = OffsetIndex(os.path.join(work, stem + ".index"), base, room)
        time_index = TimeIndex(os.path.join(work, stem + ".timeindex"), base, room)
        txn_index = TransactionIndex(os.path.join(work, stem + ".txnindex"), base)
        try:
            indexer = BatchIndexer(
                interval,
                offset_index=offset_index,
                time_index=time_index,
                txn_index=txn_index,
                txn_state=state,
                limits=limits,
            )
            reader = LogReader(data, path=log_path, limits=limits)
            # offsets only grow, below the next segment's base: a base offset is outside the
            # CRC, and a flipped one would be indexed as offsets never written
            order = OffsetOrder(base - 1, base)
            try:
                for batch in reader:
                    _, bad, after = order.push(batch)
                    if bad is not None:
                        raise Refused(log_path, bad.position, _out_of_line(bad, after))
                    if not batch.is_valid():
                        raise Refused(
                            log_path,
                            batch.position,
                            f"{_batch_name(batch)} fails its CRC (stored {batch.crc}, computed "
                            f"{batch.compute_crc()})",
                        )
                    if not offset_index.can_append_offset(batch.last_offset):
                        raise Refused(
                            log_path,
                            batch.position,
                            f"{_batch_name(batch)} does not fit the segment's index (offsets "
                            f"{base}..{base + 2**31 - 1}, from the file name)",
                        )
                    indexer.add(batch, batch.position)
                held = order.held
                _, bad, after = order.finish(None if last_segment else logs[i + 1][0])
                if bad is not None:
                    raise Refused(
                        log_path,
                        bad.position,
                        _out_of_line(bad, after) + f", at or past the next segment's base "
                        f"offset {logs[i + 1][0]}",
                    )
                if (
                    last_segment
                    and held is not None
                    and reader.incomplete_tail is None
                    and held.position + held.size_in_bytes == len(data)
                ):
                    # the log's last batch: judged by its segment's own evidence (last_batch)
                    wrong = judge_files(
                        directory,
                        base,
                        held,
                        functools.partial(_entries_between, data, limits),
                    )
                    if wrong is not None:
                        raise Refused(log_path, held.position, wrong)
            except Refused:
                raise
            except KafkalogError as e:  # unparseable, or offsets the index cannot take
                at = reader.end_position
                reason = getattr(e, "reason", None) or str(e)
                position = getattr(e, "position", None)
                detail = "" if position in (None, at) else f" (at byte {position})"
                raise Refused(log_path, at, f"{reason}{detail}") from e
            tail = reader.incomplete_tail
            if tail is not None:
                cut = (
                    f"the last batch is cut off ({tail.available} of "
                    f"{tail.declared_size or '?'} bytes present"
                )
                if not last_segment:
                    raise Refused(
                        log_path, tail.position, f"{cut}) in a segment that is not the last"
                    )
                if not force:
                    raise Refused(
                        log_path,
                        tail.position,
                        f"{cut}: a crash during an append); --force indexes the batches before "
                        "it and leaves these bytes as they are",
                        torn=True,
                    )
                logger.warning(
                    "%s at byte %d: %s); indexed the batches before it and left these %d "
                    "bytes in the .log: only a writer's recovery removes them (kafkalog's "
                    "writable open, a broker's after an unclean shutdown)",
                    log_path,
                    tail.position,
                    cut,
                    tail.available,
                )
            indexer.finish()
            offset_index.trim_to_valid_size()
            time_index.trim_to_valid_size()
        finally:
            offset_index.close()
            time_index.close()
            txn_index.close()
            del data
        segment = RebuiltSegment(log_path, stamp)
        for suffix in (".index", ".timeindex", ".txnindex"):
            built = os.path.join(work, stem + suffix)
            content = files.read_bytes(built) if os.path.exists(built) else None
            if content is None and suffix == ".txnindex" and _exists(directory, stem + suffix):
                content = b""  # Kafka's recovery resets it: an empty file, not none
            segment.rebuilt[stem + suffix] = content
            if os.path.exists(built):
                os.unlink(built)
        out.append(segment)
    return out


def _exists(directory: str, name: str) -> bool:
    return os.path.lexists(os.path.join(directory, name))
