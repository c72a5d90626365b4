"""One partition directory as Kafka keeps it (spec §7): ordered segments, offsets assigned on
append, reads across segments, time lookups, rolling, retention, truncation and recovery.

A :class:`Log` opened ``writable=False`` never writes, renames, trims or locks anything, so it
can be pointed at a running broker's directory; the active segment growing while it is read is
expected (a batch cut off at the end of the last segment is the end of what there is to read;
anywhere else it is damage, :mod:`kafkalog.log.damage`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kafkalog import files
from kafkalog.errors import (
    ClosedError,
    CorruptRecordError,
    DamagedLogError,
    InvalidRecordError,
    KafkalogError,
    ReadOnlyError,
)
from kafkalog.index.txn_index import AbortedTxn
from kafkalog.log.buffered import BufferedWriter
from kafkalog.log.checkpoints import LogCleanShutdown, OwnLogStart
from kafkalog.log.damage import LostSegment, SkippedBytes
from kafkalog.log.layout import (
    missing_path_hint,
    new_partition_dir_name,
    parse_partition_dir,
)
from kafkalog.log.loader import LogLoader, rebuild_producer_state
from kafkalog.log.local_log import FetchInfo, LocalLog, SegmentRange
from kafkalog.log.producer_state import (
    PRODUCER_ID_EXPIRATION_MS,
    ProducerAppendInfo,
    ProducerStateManager,
)
from kafkalog.log.segment import (
    FileRegion,
    LogSegment,
    RollParams,
    SegmentConfig,
    TimestampAndOffset,
)
from kafkalog.log.validator import AppendOrigin, Bounds, Validated, validate_batch
from kafkalog.records import LogReader, Record, RecordBatch, TimestampType, encode_batch
from kafkalog.records.batch import (
    ATTR_TIMESTAMP_TYPE,
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER_SIZE,
)
from kafkalog.records.crc import crc32c, crc32c_c
from kafkalog.records.model import records_mistake
from kafkalog.records.reader import LogEntry
from kafkalog.records.record_walk import NO_COLLECT as _NO_COLLECT
from kafkalog.records.record_walk import PLAIN_WALK as _PLAIN_WALK
from kafkalog.records.record_walk import walk as _walk_records
from kafkalog.records.small_batch import encode_small_batch
from kafkalog.records.types import DEFAULT_LIMITS, Compression, Limits, TimestampUnit

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4  # tiered storage's names: without it, the log is all local
LATEST_TIERED_TIMESTAMP = -5

_BASE_OFFSET = struct.Struct(">q")
_EPOCH = struct.Struct(">i")
_MAX_TS = struct.Struct(">q")
_ATTRS = struct.Struct(">h")
_CRC = struct.Struct(">I")
# the header fields an append needs, from byte 8: length, leader epoch, magic, CRC, attributes,
# last offset delta, base timestamp, max timestamp, producer id, producer epoch, base sequence,
# record count
_unpack_append_header = struct.Struct(">iibIhiqqqhii").unpack_from
_stamp_base_offset = _BASE_OFFSET.pack_into
_new_object = object.__new__
_NO_COMPRESSION = Compression.NONE
_CLIENT = AppendOrigin.CLIENT
# what the fast path of Log.append reads of the configuration: the largest single-batch append,
# the largest batch, segment.bytes, the roll age, flush.messages, flush.ms (None: never), keys
# required (a compacted topic), message.timestamp.before/after.max.ms (None: unbounded)
_FastParams = tuple[int, int, int, int, int, int | None, bool, int | None, int | None]
# attribute bits the fast path leaves to the general path: a codec, LogAppendTime, a
# transaction, a control batch
_SLOW_ATTRIBUTES = 0x3F


_M = TypeVar("_M", bound=Callable[..., Any])


#: how often a read-only open lists a live directory again when a file it listed is gone
_READ_ONLY_LOAD_ATTEMPTS = 5


def _writes_pending_first(method: _M) -> _M:
    """Every use of a log inside ``with log.buffered():`` first writes the appends kept so
    far, so it sees the log as the calls made before it left it: one rule, declared on each
    method it applies to (``append`` makes the same test inline, on the hot path)."""

    @functools.wraps(method)
    def wrapper(self: Log, *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            if self._writer is not None:
                self._writer.write_pending()
            return method(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


def _locked(method: _M) -> _M:
    """Under the log's lock (see :attr:`Log.lock`)."""

    @functools.wraps(method)
    def wrapper(self: Log, *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            return method(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


@dataclass(frozen=True)
class AppendInfo:
    """What an append stored: its offsets and the largest timestamp (with its offset)."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    batches: int
    size: int
    # True when the append was a retry of one of the producer's last five batches: nothing
    # was written, the offsets are the ones the first write got (not part of equality)
    duplicate: bool = field(default=False, compare=False)


class Log:
    """A partition log: ``<topic>-<partition>`` directory of segments."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        config: SegmentConfig | None = None,
        *,
        writable: bool = True,
        recovery_point: int = 0,
        log_start_offset: int | None = None,
        had_clean_shutdown: bool | None = None,
        clock: Callable[[], float] = time.time,
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        from kafkalog.log.config import TopicConfig

        #: held by every read and write of the log: a program whose appends and reads run on
        #: one thread may clean the log from another (``clean_log(log, lock=log.lock)``, as
        #: ``kafkalog serve`` does); the cleaner holds it to read the log's state and to swap
        self.lock = threading.RLock()
        self.directory = os.fspath(directory)
        if not writable and not files.isdir(self.directory):  # said before a name is judged
            hint = missing_path_hint(self.directory)
            raise FileNotFoundError(f"no partition directory {self.directory}{hint}")
        try:
            self.topic, self.partition = parse_partition_dir(self.directory)
        except ValueError as e:  # a Log of "events" meant "events-0"
            if os.path.isdir(self.directory) and not files.is_remote(self.directory):
                raise
            raise ValueError(
                f"{e}: a partition's directory is named <topic>-<partition>, "
                f"e.g. {os.path.normpath(self.directory)}-0"
            ) from None
        if config is None:
            # a frozen default, validated once per process (each TopicConfig() checks every
            # key: a fifth of a read-only open, paid per partition by every plan)
            config = _default_config() if not writable else TopicConfig()
        self.config: Any = config
        self.writable = writable
        self.clock = clock
        self.limits = limits
        # the segments, the offsets and every read of the files (Kafka's LocalLog)
        self._local = LocalLog(
            self.directory, self.config, writable=writable, clock=clock, limits=limits
        )
        self.leader_epochs: Any = None
        self._epochs_written: list[Any] | None = None  # what leader-epoch-checkpoint holds
        self._lock: Any = None
        self._fast_config: object = None
        self._fast_limits: object = None
        self._fast_params: _FastParams | None = None
        self._writer: BufferedWriter | None = None  # set inside ``with log.buffered():``
        self.last_flush_ms = int(clock() * 1000)
        if writable and files.is_remote(self.directory):
            raise files.RemoteLocationError(
                f"cannot open {self.directory} for writing: a remote store is read-only to "
                "kafkalog (appends need an exclusive lock and in-place writes)"
            )
        if writable:
            from kafkalog.log.lock import DirectoryLock, LockedError, broker_holds

            parent = os.path.dirname(os.path.abspath(self.directory))
            if not os.path.isdir(self.directory) and broker_holds(parent):
                raise LockedError(  # refuse before creating anything in a broker's directory
                    self.directory,
                    f"refusing to create it: a Kafka broker holds {parent}/.lock",
                    broker=True,
                )
            if not os.path.isdir(self.directory):
                # Kafka would never create it; a reader of the data directory would not list it
                new_partition_dir_name(self.topic, self.partition)
            os.makedirs(self.directory, exist_ok=True)
            self._lock = DirectoryLock(self.directory)
            self._lock.acquire()  # one writer per partition: a second one gets a clear error
        self.producer_state = ProducerStateManager(self.directory, writable=writable)
        # standalone (no data directory keeping them): the log's own marker and recovery point
        self._own_marker = had_clean_shutdown is None and writable
        clean = bool(had_clean_shutdown)
        if self._own_marker:
            marked = LogCleanShutdown.read(self.directory)
            clean = marked is not None
            recovery_point = max(recovery_point, marked or 0)
        # on its own: where the data directory's checkpoint or the log itself kept it
        self._own_log_start = log_start_offset is None
        if log_start_offset is None:
            log_start_offset = OwnLogStart.read(self.directory)
        try:
            for attempt in range(_READ_ONLY_LOAD_ATTEMPTS):
                try:
                    self.leader_epochs = LogLoader(self._local, self.producer_state).load(
                        recovery_point, log_start_offset, clean
                    )
                    break
                except FileNotFoundError:
                    # read-only beside a live writer: a file listed a moment ago was renamed
                    # since (a roll, retention, a cleaner's swap): list the directory again
                    if writable or attempt == _READ_ONLY_LOAD_ATTEMPTS - 1:
                        raise
                    self._local.close()
                    self._local = LocalLog(
                        self.directory, self.config, writable=False, clock=clock, limits=limits
                    )
                    self.producer_state = ProducerStateManager(self.directory, writable=False)
            if writable:
                # from here on a crash means recovery (also for a standalone open after one a
                # data directory managed, whose marker would be stale)
                LogCleanShutdown.remove(self.directory)
        except BaseException:
            # an open that fails (damage, a missing file) leaves no descriptor behind: a server
            # meets the same damaged partition at every request
            with contextlib.suppress(Exception):
                self._local.close()
            self._release_lock()
            raise

    def _release_lock(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    # -- offsets: the local log's, where every change to the segments keeps them -----------------
    @property
    def log_start_offset(self) -> int:
        return self._local.log_start_offset

    @log_start_offset.setter
    def log_start_offset(self, offset: int) -> None:
        self._local.log_start_offset = offset

    @property
    def log_end_offset(self) -> int:
        return self._local.log_end_offset

    @log_end_offset.setter
    def log_end_offset(self, offset: int) -> None:
        # Kafka's UnifiedLog.append ends every append with updateMapEndOffset(lastOffset + 1),
        # producer ids or not: the producer state describes the log up to its end, so a
        # snapshot taken now is written at the log end (truncations rebuild it after)
        self._local.log_end_offset = offset
        self.producer_state.map_end_offset = offset

    @property
    def recovery_point(self) -> int:
        return self._local.recovery_point

    @recovery_point.setter
    def recovery_point(self, offset: int) -> None:
        self._local.recovery_point = offset

    @property
    def topic_id(self) -> str | None:
        from kafkalog.log.checkpoints import PartitionMetadata

        try:
            return PartitionMetadata.read(
                os.path.join(self.directory, "partition.metadata")
            ).topic_id
        except FileNotFoundError:
            return None

    # -- segments -----------------------------------------------------------------------------
    @property
    def local(self) -> LocalLog:
        """The segment set and its reads (Kafka's ``LocalLog``), for the log layer's own
        maintenance (the cleaner swaps cleaned segments in through it)."""
        return self._local

    @property
    def segments(self) -> list[LogSegment]:
        return list(self._local.segments)

    @property
    def active_segment(self) -> LogSegment:
        active = self._local.segments.active
        assert active is not None  # a loaded log always has one
        return active

    def floor_segment(self, offset: int) -> LogSegment | None:
        return self._local.segments.floor(offset)

    @_writes_pending_first
    def size_in_bytes(self) -> int:
        return self._local.size_in_bytes()

    def refresh(self) -> None:
        """Pick up what a broker appended or rolled since this read-only log was opened."""
        if not self.writable:
            self._local.refresh()

    # -- appending -----------------------------------------------------------------------------
    def _require_writable(self, what: str) -> None:
        if not self.writable:
            raise ReadOnlyError(f"cannot {what} {self.directory}: the log was opened read-only")

    def append(
        self,
        records: bytes | bytearray | memoryview,
        *,
        assign_offsets: bool = True,
        leader_epoch: int | None = None,
        origin: AppendOrigin | str = AppendOrigin.CLIENT,
    ) -> AppendInfo:
        """Append v2 batches (as a producer sends them), assigning offsets from the log end.

        The bytes are taken as a client built them: a CreateTime record whose timestamp is
        -1 stays -1, as on a broker (:meth:`append_records` is the one that stamps records
        without a timestamp, as a producer does).

        Every batch's CRC is checked and its size limited by ``max.message.bytes``; with
        ``message.timestamp.type=LogAppendTime`` the batch is stamped now (re-CRC'd). With
        ``assign_offsets=False`` the batches keep their offsets, which must continue the log
        (a follower's append).

        Every other append is validated as a broker validates a producer's
        (:mod:`kafkalog.log.validator`, Kafka's ``LogValidator``): record count and
        ``lastOffsetDelta`` against the records, offset deltas ``0..n-1``, keys on a compacted
        topic, timestamps within ``message.timestamp.before/after.max.ms``, a known codec; a
        batch whose codec is not the topic's ``compression.type`` is re-compressed. A refused
        append raises :class:`~kafkalog.errors.InvalidRecordError` (with the records at fault in
        ``record_errors``) and writes nothing. ``origin="coordinator"`` (a transaction
        coordinator writing COMMIT/ABORT markers) may append control batches; a client may not.

        A producer's append to a CreateTime topic that needs no roll takes a fast path (one
        header unpack and one CRC per batch, the segment and both indexes updated in place): at
        ~8 us for the ``write`` of a 16 KiB batch, the general path's ~7 us of parsing and
        calls made appends half as fast as a plain ``write``. Its results, files and errors are
        the general path's (``tests/log/test_fast_append.py``), which takes everything else.

        Batches with a producer id (idempotent or transactional) go through the producer state
        (:mod:`kafkalog.log.producer_state`), as on a broker: a retry of one of the producer's
        last five batches returns the offsets it got the first time (``duplicate=True``) and
        writes nothing; an older epoch, a sequence out of order or a non-transactional batch
        inside an open transaction is refused (a coordinator's append is checked for its epoch
        only, as Kafka checks it) (a :class:`~kafkalog.errors.ProducerStateError`)
        and nothing is written; a COMMIT or ABORT marker ends the producer's transaction (an
        ABORT adds its ``.txnindex`` entry). With ``assign_offsets=False`` (a follower's
        append) the batches are applied as they are, as Kafka applies replicated ones.
        """
        with self.lock:  # inline, not the decorator: a call frame less on the hot path
            if not self.writable:
                self._require_writable("append to")
            if self._writer is not None:  # inline, not the decorator: the hot path
                self._writer.write_pending()
            data = bytearray(records)  # the one copy: offsets and epochs are stamped into it
            if (
                assign_offsets
                and leader_epoch is None
                and (origin is _CLIENT or origin == "client")
            ):
                # The fast path: a producer's append to a CreateTime topic, no roll due. Anything
                # else, including every error, falls through to the general path below.
                if self.config is not self._fast_config or self.limits is not self._fast_limits:
                    self._refresh_fast_params()
                params = self._fast_params
                size = len(data)
                if params is not None and size >= HEADER_SIZE:
                    max_single, _, segment_bytes, max_segment_ms, flush_messages, flush_ms = params[
                        :6
                    ]
                    (length, epoch, magic, crc, attrs, delta, base_ts, max_ts, pid, _, _, count) = (
                        _unpack_append_header(data, 8)
                    )
                    if length + 12 != size:
                        info = self._append_batches_fast(data, params)
                        if info is not None:
                            return info
                    elif (
                        size <= max_single
                        and magic == 2
                        and pid < 0  # idempotent and transactional batches: producer state
                        and not attrs & _SLOW_ATTRIBUTES
                        and count == delta + 1
                        and delta >= 0
                        and crc32c_c(memoryview(data)[ATTRIBUTES_OFFSET:]) == crc
                        # the validator's record walk (Kafka reads every record too): anything it
                        # finds, or a max timestamp to correct, is the general path's to report
                        and (
                            _PLAIN_WALK[0](data, HEADER_SIZE, size, count, base_ts, params[6])
                            == (0, max_ts)
                            if params[7] is None and params[8] is None
                            else self._records_pass(data, 0, size, count, base_ts, max_ts, params)
                        )
                    ):
                        local = self._local
                        base = local.log_end_offset
                        last = base + delta
                        _stamp_base_offset(data, 0, base)
                        ts_offset = last
                        if max_ts < 0:
                            max_ts = ts_offset = -1
                        # flush.ms = Long.MAX_VALUE (Kafka's default) never flushes: no clock read
                        now = int(self.clock() * 1000) if flush_ms is not None else 0
                        if local.segments.active.try_append(  # type: ignore[union-attr]
                            data,
                            last,
                            max_ts,
                            ts_offset,
                            segment_bytes,
                            max_segment_ms,
                            self.clock,
                        ):
                            if epoch >= 0 and self.leader_epochs is not None:
                                self.leader_epochs.assign(epoch, base)
                            local.log_end_offset = last + 1
                            self.producer_state.map_end_offset = last + 1  # the setter's rule
                            if last + 1 - local.recovery_point >= flush_messages or (
                                flush_ms is not None and now - self.last_flush_ms >= flush_ms
                            ):
                                self.flush()
                            # AppendInfo(...) at a third of the cost of the frozen dataclass's
                            # __init__ (one object.__setattr__ per field): the same object
                            info = _new_object(AppendInfo)
                            fields = info.__dict__
                            fields["first_offset"] = base
                            fields["last_offset"] = last
                            fields["max_timestamp"] = max_ts
                            fields["offset_of_max_timestamp"] = ts_offset
                            fields["batches"] = 1
                            fields["size"] = size
                            return info
            return self._append_general(data, assign_offsets, leader_epoch, AppendOrigin(origin))

    def _records_pass(
        self,
        data: bytearray,
        position: int,
        end: int,
        count: int,
        base_ts: int,
        max_ts: int,
        params: _FastParams,
    ) -> bool:
        """The fast path's record walk of the batch at ``position``: True when the validator
        would accept it as it is (sound records, keys where required, timestamps in bounds,
        the header's max timestamp the records')."""
        need_key, before, after = params[6], params[7], params[8]
        lo = hi = 0
        check = before is not None or after is not None
        if check:
            now = int(self.clock() * 1000)
            lo = -(2**63) if before is None else now - before
            hi = 2**63 - 1 if after is None else min(now + after, 2**63 - 1)
        code, _, _, bad, _, records_max = _walk_records(
            data,
            position + HEADER_SIZE,
            end,
            count,
            base_ts,
            0,
            False,
            need_key,
            check,
            lo,
            hi,
            _NO_COLLECT,
        )
        return code == 0 and bad == 0 and records_max == max_ts

    def fast_params(self) -> _FastParams | None:
        """The fast path's parameters for the current configuration (:meth:`append` makes
        the same test inline: a call there costs more than the test)."""
        if self.config is not self._fast_config or self.limits is not self._fast_limits:
            self._refresh_fast_params()
        return self._fast_params

    def _refresh_fast_params(self) -> None:
        """What the fast path of :meth:`append` needs of the configuration, read once per
        configuration object (both are frozen; assigning a new ``config`` or ``limits`` comes
        back here). None when the topic rules the fast path out (LogAppendTime stamps every
        batch) or the configuration is not a :class:`TopicConfig`."""
        from kafkalog.log.config import LONG_MAX, TopicConfig

        config, limits = self.config, self.limits
        self._fast_config, self._fast_limits = config, limits
        max_batch = min(config.max_message_bytes, limits.max_batch_bytes)
        self._fast_params = (
            (
                min(max_batch, config.segment_bytes),
                max_batch,
                config.segment_bytes,
                config.max_segment_ms,
                config.flush_messages,
                None if config.flush_ms == LONG_MAX else config.flush_ms,
                config.compact,
                _bound(config.effective_message_timestamp_before_max_ms),
                _bound(config.effective_message_timestamp_after_max_ms),
            )
            if isinstance(config, TopicConfig)
            and config.message_timestamp_type == "CreateTime"
            # an uncompressed batch is stored as it came (else: re-compressed, general path)
            and config.compression_type in ("producer", "uncompressed")
            else None
        )

    def _append_batches_fast(self, data: bytearray, params: _FastParams) -> AppendInfo | None:
        """The fast path for several batches in one append: one header unpack and one CRC per
        batch, then one segment append; None, with only offsets stamped (which the general path
        stamps again, the same), when anything needs the general path."""
        _, max_batch, segment_bytes, max_segment_ms, flush_messages, flush_ms = params[:6]
        size = len(data)
        if size > segment_bytes:
            return None
        view = memoryview(data)
        crc32c = crc32c_c
        unpack = _unpack_append_header
        stamp = _stamp_base_offset
        first = next_offset = self.log_end_offset
        max_ts = max_ts_offset = -1
        epochs: list[tuple[int, int]] = []
        position = batches = 0
        while position < size:
            if size - position < HEADER_SIZE:
                return None
            (length, epoch, magic, crc, attrs, delta, base_ts, batch_max, pid, _, _, count) = (
                unpack(data, position + 8)
            )
            end = position + 12 + length
            if (
                end > size
                or length < HEADER_SIZE - 12
                or length + 12 > max_batch
                or magic != 2
                or pid >= 0
                or attrs & _SLOW_ATTRIBUTES
                or count != delta + 1
                or delta < 0
                or crc32c(view[position + ATTRIBUTES_OFFSET : end]) != crc
                or not self._records_pass(data, position, end, count, base_ts, batch_max, params)
            ):
                return None
            stamp(data, position, next_offset)
            last = next_offset + delta
            if batch_max > max_ts:
                max_ts, max_ts_offset = batch_max, last
            if epoch >= 0:
                epochs.append((epoch, next_offset))
            next_offset = last + 1
            position = end
            batches += 1
        view.release()
        now = int(self.clock() * 1000) if flush_ms is not None else 0
        last_offset = next_offset - 1
        if not self.active_segment.try_append(
            data, last_offset, max_ts, max_ts_offset, segment_bytes, max_segment_ms, self.clock
        ):
            return None
        if self.leader_epochs is not None:
            for epoch, base in epochs:
                self.leader_epochs.assign(epoch, base)
        self.log_end_offset = next_offset
        if next_offset - self.recovery_point >= flush_messages or (
            flush_ms is not None and now - self.last_flush_ms >= flush_ms
        ):
            self.flush()
        return AppendInfo(first, last_offset, max_ts, max_ts_offset, batches, size)

    def _append_general(
        self,
        data: bytearray,
        assign_offsets: bool,
        leader_epoch: int | None,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> AppendInfo:
        """Every append the fast path does not take: parse, check, validate, stamp, roll,
        append."""
        batches = self._parse_append(data)
        if not batches:
            raise InvalidRecordError("nothing to append: no complete record batch")
        reader_tail_end = batches[-1].position + batches[-1].size_in_bytes
        if reader_tail_end != len(data):
            raise InvalidRecordError(
                f"the appended bytes end with {len(data) - reader_tail_end} bytes that are not a "
                "complete batch"
            )
        for batch in batches:  # UnifiedLog.analyzeAndValidateRecords: magic, size, CRC
            if not isinstance(batch, RecordBatch) or batch.magic != 2:
                # as a broker refuses a produce request holding anything but magic 2
                raise InvalidRecordError("kafkalog appends record batches of magic 2 only")
            if batch.size_in_bytes > self.config.max_message_bytes:
                raise InvalidRecordError(
                    f"a batch of {batch.size_in_bytes} bytes is larger than max.message.bytes "
                    f"({self.config.max_message_bytes})"
                )
            batch.ensure_valid()
        log_append = self.config.message_timestamp_type == "LogAppendTime"
        now = int(self.clock() * 1000)
        maxima: list[int] | None = None
        if assign_offsets and origin is not AppendOrigin.REPLICATION:
            data, batches, maxima = self._validate(data, batches, origin, now)
        next_offset = self.log_end_offset
        max_ts, max_ts_offset = -1, -1
        first_offset = next_offset if assign_offsets else batches[0].base_offset
        placed: list[tuple[RecordBatch, int, int]] = []
        for i, batch in enumerate(batches):
            p = batch.position
            if assign_offsets:
                _BASE_OFFSET.pack_into(data, p, next_offset)
                base = next_offset
            else:
                if batch.base_offset < next_offset:
                    raise InvalidRecordError(
                        f"batch at offset {batch.base_offset} is below the log end offset "
                        f"{next_offset}"
                    )
                base = batch.base_offset
            if leader_epoch is not None:
                _EPOCH.pack_into(data, p + 12, leader_epoch)
            batch_max = batch.max_timestamp if maxima is None else maxima[i]
            if log_append and not batch.is_control:
                attrs = (batch.attributes & ~0x08) | ATTR_TIMESTAMP_TYPE
                _ATTRS.pack_into(data, p + ATTRIBUTES_OFFSET, attrs)
                _MAX_TS.pack_into(data, p + 35, now)
                end = p + batch.size_in_bytes
                _CRC.pack_into(data, p + CRC_OFFSET, crc32c(memoryview(data)[p + 21 : end]))
                batch_max = now
            placed.append((batch, base, batch_max))
            last = base + batch.last_offset_delta
            if batch_max > max_ts:
                max_ts, max_ts_offset = batch_max, last
            next_offset = last + 1
        last_offset = next_offset - 1
        producers = None
        if any(batch.producer_id >= 0 for batch, _, _ in placed):
            # a retry and its sequence are a producer's: a coordinator writing its own batches
            # (TxnOffsetCommit records) is checked for neither, as Kafka checks only CLIENT
            # appends (UnifiedLog.analyzeAndValidateProducerState)
            by_client = origin is AppendOrigin.CLIENT
            if assign_offsets and by_client:
                duplicate = self._find_duplicate(placed, len(data))
                if duplicate is not None:
                    return duplicate
            producers = self.producer_state.prepare(client=assign_offsets, sequences=by_client)
            for batch, base, batch_max in placed:
                if batch.producer_id >= 0:
                    producers.append(batch, base, self.limits, timestamp=batch_max)
        if len(data) > self.config.segment_bytes:
            raise InvalidRecordError(
                f"an append of {len(data)} bytes is larger than segment.bytes "
                f"({self.config.segment_bytes})"
            )
        segment = self.active_segment
        if not segment.can_take(
            len(data), max_ts, last_offset, self.config.segment_bytes, self.config.max_segment_ms
        ):
            segment = self._maybe_roll(len(data), max_ts, last_offset, first_offset)
        segment.append(last_offset, max_ts, max_ts_offset, memoryview(data))
        self._after_append(placed, leader_epoch, producers)
        self.log_end_offset = next_offset
        if (
            self.log_end_offset - self.recovery_point >= self.config.flush_messages
            or now - self.last_flush_ms >= self.config.flush_ms
        ):
            self.flush()
        return AppendInfo(first_offset, last_offset, max_ts, max_ts_offset, len(batches), len(data))

    def _validate(
        self, data: bytearray, batches: list[Any], origin: AppendOrigin, now: int
    ) -> tuple[bytearray, list[Any], list[int]]:
        """Kafka's LogValidator over the batches of an append (:mod:`kafkalog.log.validator`):
        raises before anything is written; corrects a header whose max timestamp is not its
        records' (re-CRC'd) and re-compresses a batch into the topic's ``compression.type``,
        returning the append's bytes and batches (re-parsed when one was rebuilt) and each
        batch's max timestamp."""
        bounds = Bounds.of(self.config, now)
        where = f"topic partition {self.topic}-{self.partition}"
        checked: list[Validated] = [
            validate_batch(
                batch,
                i,
                config=self.config,
                origin=origin,
                bounds=bounds,
                limits=self.limits,
                where=where,
            )
            for i, batch in enumerate(batches)
        ]
        if any(v.recompress is not None for v in checked):
            pieces: list[bytes | memoryview] = []
            for batch, v in zip(batches, checked, strict=True):
                if v.recompress is None:
                    pieces.append(batch.buffer)
                else:
                    pieces.append(self._recompressed(batch, v.recompress, bounds))
            data = bytearray(b"".join(pieces))
            batches = self._parse_append(data)
            maxima = [b.max_timestamp for b in batches]
        else:
            maxima = [v.max_timestamp for v in checked]
        for batch, v in zip(batches, checked, strict=True):
            if v.recompress is None and v.rewrite_header:
                p = batch.position
                _ATTRS.pack_into(data, p + ATTRIBUTES_OFFSET, batch.attributes & ~0x08)
                _MAX_TS.pack_into(data, p + 35, v.max_timestamp)
                end = p + batch.size_in_bytes
                _CRC.pack_into(data, p + CRC_OFFSET, crc32c(memoryview(data)[p + 21 : end]))
        return data, batches, maxima

    def _recompressed(
        self, batch: RecordBatch, target: tuple[Compression, int | None], bounds: Bounds
    ) -> bytes:
        """The batch rebuilt with the topic's codec, as a broker rebuilds it (Kafka's
        ``buildRecordsAndAssignOffsets``): the same records, producer fields and flags."""
        records = [
            Record(i, r.timestamp, r.key, r.value, r.headers)
            for i, r in enumerate(batch.records(self.limits))
        ]
        codec, level = target
        return encode_batch(
            records,
            compression=codec,
            compression_level=level,
            partition_leader_epoch=batch.partition_leader_epoch,
            producer_id=batch.producer_id,
            producer_epoch=batch.producer_epoch,
            base_sequence=batch.base_sequence,
            is_transactional=batch.is_transactional,
            is_control=batch.is_control,
        )

    def _parse_append(self, data: bytearray) -> list[Any]:
        """The batches of an append; one batch (the usual producer request) without a walk."""
        if len(data) >= 61 and data[16] >= 2 and data[16] < 128:
            length = int.from_bytes(data[8:12], "big", signed=True)
            if length + 12 == len(data) and len(data) <= self.limits.max_batch_bytes:
                return [RecordBatch.parse(memoryview(data), 0, self.directory)]
        return list(LogReader(data, path=self.directory, limits=self.limits))

    def _find_duplicate(
        self, placed: list[tuple[RecordBatch, int, int]], size: int
    ) -> AppendInfo | None:
        """Kafka's duplicate check (UnifiedLog.analyzeAndValidateProducerState): a batch that
        repeats one of its producer's last five makes the whole append a retry, answered with
        the offsets and timestamp that batch got when it was written."""
        for batch, _, _ in placed:
            if batch.producer_id < 0:
                continue
            meta = self.producer_state.find_duplicate(batch)
            if meta is not None:
                ts = meta.timestamp
                return AppendInfo(
                    meta.first_offset,
                    meta.last_offset,
                    ts,
                    meta.last_offset if ts >= 0 else -1,
                    1,
                    size,
                    duplicate=True,
                )
        return None

    def _after_append(
        self,
        placed: list[tuple[RecordBatch, int, int]],
        leader_epoch: int | None,
        producers: ProducerAppendInfo | None,
    ) -> None:
        """Leader epochs and producer state of the batches just appended (parsed once, before
        their offsets were stamped: ``base`` is where each landed)."""
        for batch, base, _ in placed:
            epoch = batch.partition_leader_epoch if leader_epoch is None else leader_epoch
            if self.leader_epochs is not None and epoch >= 0:
                self.leader_epochs.assign(epoch, base)
        if producers is not None:
            for aborted in producers.commit():
                self.active_segment.update_txn_index(aborted)

    def append_records(
        self,
        records: Sequence[Record],
        *,
        compression: Compression | str = Compression.NONE,
        **batch_options: Any,
    ) -> AppendInfo:
        """Encode ``records`` as one batch and append it (offsets assigned by the log).

        A record without a timestamp (-1, ``Record.of(b"x")``) is stamped with the log's
        clock (:attr:`clock`, the one retention and rolls use) in ms, one "now" per call, as
        a Kafka producer stamps a record sent without a timestamp: time lookups, time
        retention and the ``.timeindex`` see it. A given timestamp is kept as it is; a
        ``LogAppendTime`` topic stamps the batch itself, as before (:meth:`default_timestamp`).
        :meth:`append` takes bytes as a client built them and keeps -1.

        Inside ``with log.buffered():`` the batch is kept in the process and written with the
        others when the block ends (see :meth:`buffered`)."""
        try:  # free until it raises: records_mistake says what was wrong with the input
            writer = self._writer
            if writer is not None:
                if compression is _NO_COMPRESSION and not batch_options:
                    # BufferedWriter.keep, inline: this is the whole cost of a buffered call
                    buf = writer.buffer
                    info: AppendInfo | None = buf.add(records, self._local.log_end_offset)
                    if info is not None:
                        if buf.bytes >= buf.max_bytes:
                            writer.write_pending()
                        return info
                writer.write_pending()
            if compression is _NO_COMPRESSION and not batch_options:
                # a record at a time: no field-by-field encode; the clock is read only when a
                # record has no timestamp (a given one costs nothing)
                data = encode_small_batch(records, 0, self.default_timestamp)
                if data is not None:
                    return self.append(data)
            if self.config.message_timestamp_type == "LogAppendTime":
                batch_options.setdefault("timestamp_type", TimestampType.CREATE_TIME)
            return self.append(
                encode_batch(
                    records,
                    compression=compression,
                    missing_timestamp=self.default_timestamp,
                    **batch_options,
                )
            )
        except (TypeError, AttributeError) as e:
            mistake = records_mistake(records)
            if mistake is None:
                raise
            raise TypeError(mistake) from e
        except (
            ClosedError
        ) as e:  # it named the active segment and a roll the caller never asked for
            if self.writable and self._lock is None:  # the log's own close released its lock
                raise ClosedError(self.directory, "append to") from e
            raise

    def default_timestamp(self) -> int:
        """The timestamp :meth:`append_records` writes for a record that has none (-1): now,
        by the log's :attr:`clock`, in ms (Kafka's producer stamps ``System.currentTimeMillis``
        on a record sent with a null timestamp); -1 on a ``LogAppendTime`` topic, whose
        batches the append stamps with the log's time anyway (the records' own timestamps
        are left as they were)."""
        if self.config.message_timestamp_type == "LogAppendTime":
            return -1
        return int(self.clock() * 1000)

    @contextlib.contextmanager
    def buffered(self, max_bytes: int = 1024 * 1024) -> Iterator[BufferedWriter]:
        """Keep :meth:`append_records` calls in the process and write them together, as
        SQLite keeps the rows of a transaction until COMMIT.

        Inside the block each call is checked and gets its offsets and its
        :class:`AppendInfo` at once; its records are written, one batch per call exactly as
        the calls would have written them one at a time, when the block ends (also when it
        ends with an exception), whenever the kept batches reach ``max_bytes``, and before
        anything else that uses the log (any other append, a read through this object, a
        roll, a flush, retention, truncation, close). Written, they are in the files as any
        append's are; a crash before that (SIGKILL, power loss) loses the kept ones, and an
        error while writing them (a full disk) is raised by the call that wrote them, with
        the ones not yet written dropped. ``log_end_offset``, ``segments`` and the files
        show the kept records once written; ``flush.messages`` and ``flush.ms`` are applied
        then, once for what was written together.

        One record per call, this stores records several times faster than calls that write
        each (no ``pwrite`` and no Python encoding per call: the kept records are encoded in
        one compiled pass). A block inside a block is part of the outer one. Not for a log
        shared between threads (use :class:`~kafkalog.log.group_commit.SharedLog` or the
        :class:`~kafkalog.log.batching_writer.BatchingWriter` there). The block gives the
        :class:`~kafkalog.log.buffered.BufferedWriter` that keeps the calls; its
        ``append_records`` is this log's.
        """
        self._require_writable("append to")
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be at least 1, not {max_bytes}")
        if self._writer is not None:
            yield self._writer
            return
        writer = self._writer = BufferedWriter(self, max_bytes, AppendInfo)
        try:
            yield writer
        finally:
            try:
                writer.write_pending()
            finally:
                self._writer = None

    def _maybe_roll(
        self, size: int, max_ts: int, last_offset: int, first_offset: int
    ) -> LogSegment:
        segment = self.active_segment
        params = RollParams(
            max_segment_ms=self.config.max_segment_ms,
            max_segment_bytes=self.config.segment_bytes,
            max_timestamp_in_messages=max_ts,
            max_offset_in_messages=last_offset,
            messages_size=size,
            now=int(self.clock() * 1000),
        )
        if segment.should_roll(params):
            return self.roll(first_offset)
        return segment

    @_writes_pending_first
    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Start a new active segment (spec §7.3)."""
        self._require_writable("roll")
        new_offset = max(expected_next_offset or 0, self.log_end_offset)
        active = self.active_segment
        if new_offset in self._local.segments:
            if active.base_offset == new_offset and active.size == 0:
                self._local.delete_segment(active)
            else:
                raise KafkalogError(
                    f"cannot roll {self.directory}: a segment with base offset {new_offset} "
                    "already exists"
                )
        elif new_offset < active.base_offset:
            raise KafkalogError(
                f"cannot roll {self.directory} to offset {new_offset}, below the active "
                f"segment's base offset {active.base_offset}"
            )
        else:
            active.on_become_inactive()
        segment = self._local.open_segment(new_offset, exists=False)
        self._local.segments.add(segment)
        # Kafka's UnifiedLog.roll: the producer state at the new base offset, so recovering
        # the new segment starts from this snapshot and scans this segment only
        self.producer_state.map_end_offset = new_offset
        self.producer_state.take_snapshot()
        self.flush(new_offset)
        return segment

    # -- reading: every read goes through the local log's read path --------------------------
    @_writes_pending_first
    def batches(
        self,
        start_offset: int | None = None,
        end_offset: int | None = None,
        *,
        check_crcs: bool = True,
        on_damage: Callable[[SkippedBytes], None] | None = None,
    ) -> Iterator[LogEntry]:
        """Batches holding offsets from ``start_offset`` (default: log start) to before
        ``end_offset``, across segments, found through the offset index; each batch's CRC is
        checked unless ``check_crcs`` is false (as a Kafka consumer's ``check.crcs``).
        Damage raises :class:`~kafkalog.errors.DamagedLogError`; given ``on_damage``, it is
        skipped to the next valid batch instead and each skip (file, bytes, offsets, why) is
        handed to it."""
        return self._local.batches(
            start_offset, end_offset, check_crcs=check_crcs, on_damage=on_damage
        )

    @_writes_pending_first
    def records(
        self,
        start_offset: int | None = None,
        end_offset: int | None = None,
        *,
        include_control: bool = False,
        check_crcs: bool = True,
        on_damage: Callable[[SkippedBytes], None] | None = None,
    ) -> Iterator[Record]:
        """Records with offsets in [start, end), control records skipped unless asked, every
        batch's CRC checked unless ``check_crcs`` is false; damage skipped and handed to
        ``on_damage`` when it is given (see :meth:`batches`)."""
        return self._local.records(
            start_offset,
            end_offset,
            include_control=include_control,
            check_crcs=check_crcs,
            on_damage=on_damage,
        )

    @_writes_pending_first
    def ranges(
        self,
        start_offset: int | None = None,
        end_offset: int | None = None,
        *,
        past_damage: bool = False,
    ) -> list[SegmentRange]:
        """The byte ranges of segment files holding the records with offsets in [start, end)
        (see :meth:`LocalLog.ranges`): what a reader that decodes the files itself, such as a
        Spark task, reads. A read to the end of a log opened read-only with damage in its last
        segment raises it, unless ``past_damage`` (the caller says it skipped
        :attr:`damage_at_end`)."""
        return self._local.ranges(start_offset, end_offset, past_damage=past_damage)

    @property
    def lost_segments(self) -> list[LostSegment]:
        """Segments lost from the log: an index file left without its ``.log`` after a
        segment that ends before it. A read across their offsets raises (or, with
        ``on_damage``, reports them); ``kafkalog repair`` moves the leftovers aside."""
        return list(self._local.lost)

    @property
    def damage_at_end(self) -> DamagedLogError | None:
        """Damage a read-only open found in the last segment (the log then ends after its last
        valid batch before it; a read to the end raises it), or None."""
        return self._local.damage_at_end

    @_writes_pending_first
    def aborted_transactions(self, start_offset: int, end_offset: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping offsets [start, end), from ``.txnindex``."""
        return self._local.aborted_transactions(start_offset, end_offset)

    @_writes_pending_first
    def first_offset_at_or_after(self, timestamp: int) -> int | None:
        """The first offset of a record with timestamp >= ``timestamp``, every record before it
        being older (see :meth:`LocalLog.first_offset_at_or_after`); None when none has one."""
        return self._local.first_offset_at_or_after(timestamp)

    @_writes_pending_first
    def read_arrow(
        self,
        start_offset: int | None = None,
        end_offset: int | None = None,
        *,
        include_headers: bool = False,
        timestamp_unit: TimestampUnit = "ms",
    ) -> Any:
        """Records with offsets in [start, end) as one ``pyarrow.Table`` with the columns of
        Spark's Kafka source (``key``, ``value``, ``topic``, ``partition``, ``offset``,
        ``timestamp``, ``timestampType``, ``headers`` if asked), control records skipped.

        For programs that analyse a log without Spark: the columnar decoder reads each
        segment from the position the offset index gives, with no Python object per record
        (:meth:`records` makes one each). Records of aborted transactions are included, as a
        ``read_uncommitted`` consumer sees them."""
        return self._local.read_arrow(
            start_offset,
            end_offset,
            topic=self.topic,
            partition=self.partition,
            include_headers=include_headers,
            timestamp_unit=timestamp_unit,
        )

    def read(self, start_offset: int, max_bytes: int, min_one_message: bool = True) -> bytes:
        """Raw batches from the one holding ``start_offset``, at most ``max_bytes`` (at least one
        batch with ``min_one_message``), as a Kafka fetch returns them."""
        data = self.read_region(start_offset, max_bytes, min_one_message)
        return b"" if data is None else data.read()

    def read_region(
        self, start_offset: int, max_bytes: int, min_one_message: bool = True
    ) -> FileRegion | None:
        """What :meth:`read` returns, as a range of one segment file not yet read (None when
        there is nothing): a server sends it to the socket with ``sendfile``."""
        return self.fetch(start_offset, max_bytes, min_one_message=min_one_message).region

    @_writes_pending_first
    def fetch(
        self,
        start_offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_message: bool = True,
        include_aborted: bool = False,
        verify_crcs: bool = False,
    ) -> FetchInfo:
        """Kafka's fetch read (:meth:`LocalLog.fetch`): whole batches from the one holding
        ``start_offset``, none at or past ``max_offset`` (a last stable offset), with the
        aborted transactions they overlap when asked. With ``verify_crcs`` (``kafkalog
        serve``: librdkafka checks no CRC by default) every whole batch returned has a
        matching CRC, checked once per byte of a writable log, else a
        :class:`~kafkalog.errors.DamagedLogError` names file and byte."""
        return self._local.fetch(
            start_offset,
            max_bytes,
            max_offset=max_offset,
            min_one_message=min_one_message,
            include_aborted=include_aborted,
            verify_crcs=verify_crcs,
        )

    @_writes_pending_first
    def offsets_for_times(self, timestamp: int) -> TimestampAndOffset | None:
        """Kafka's ListOffsets for one partition (spec §7.5): -2 earliest, -1 latest, -3 the
        record with the largest timestamp, else the first record at or after ``timestamp``.
        Tiered storage's -4 (earliest local) and -5 (latest tiered) answer as a broker without
        it does: the log start offset, and offset -1 with epoch -1."""
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return TimestampAndOffset(-1, self.log_start_offset, self._epoch_at_start())
        if timestamp == LATEST_TIERED_TIMESTAMP:
            return TimestampAndOffset(-1, -1, -1)
        if timestamp == LATEST_TIMESTAMP:
            latest = self.leader_epochs.latest_epoch if self.leader_epochs is not None else None
            return TimestampAndOffset(-1, self.log_end_offset, latest)
        if timestamp == MAX_TIMESTAMP:
            return self._max_timestamp_record()
        if timestamp < 0:
            raise ValueError(f"unsupported special timestamp {timestamp}")
        for seg in self.segments:
            if seg.largest_timestamp >= timestamp:
                found = seg.find_offset_by_timestamp(timestamp, self.log_start_offset)
                if found is not None:
                    return found
                # a largest timestamp its records do not reach (a .timeindex missing: the
                # .log's mtime, as Kafka takes it): the answer is in a later segment, if any
        return None

    @_writes_pending_first
    def last_stable_offset(self) -> int:
        """The first offset of the earliest open transaction (at least the log start), else
        the log end: a read_committed consumer sees nothing at or past it (Kafka's
        firstUnstableOffset, with the high watermark at the log end). A writable log keeps
        its producer state as it appends; a read-only one rebuilds it from the newest
        ``.snapshot`` at or below the log end and the batches after it, writing nothing."""
        if self.writable:
            state = self.producer_state
        else:
            state = ProducerStateManager(self.directory, writable=False)
            rebuild_producer_state(self._local, state, self.log_start_offset, self.log_end_offset)
        first = state.first_unstable_offset()
        if first is None:
            return self.log_end_offset
        # Kafka's maybeIncrementFirstUnstableOffset: a transaction begun below the log start
        # (DeleteRecords, retention) is unstable from the log start on, never below it
        return min(max(first, self.log_start_offset), self.log_end_offset)

    def _epoch_at_start(self) -> int | None:
        cache = self.leader_epochs
        if cache is None or not cache.entries:
            return None
        first = cache.entries[0]
        return first.epoch if first.start_offset <= self.log_start_offset else None

    def _max_timestamp_record(self) -> TimestampAndOffset | None:
        best: LogSegment | None = None
        for seg in self.segments:
            if best is None or seg.max_timestamp_so_far > best.max_timestamp_so_far:
                best = seg
        if best is None or best.max_timestamp_so_far < 0:
            return None
        target = best.max_timestamp_so_far
        for batch in best.entries(0):
            if batch.max_timestamp == target:
                for rec in batch.records(self.limits):
                    if rec.timestamp == target:
                        epoch = batch.partition_leader_epoch
                        return TimestampAndOffset(target, rec.offset, epoch if epoch >= 0 else None)
        return None

    @_locked
    def remove_expired_producers(
        self, now_ms: int | None = None, expiration_ms: int = PRODUCER_ID_EXPIRATION_MS
    ) -> list[int]:
        """Forget the producers idle ``expiration_ms`` or more (``producer.id.expiration.ms``)
        with no open transaction; returns their ids. Their state is needed only to detect a
        retried batch, and a broker drops it on this schedule (``kafkalog serve`` does)."""
        now_ms = int(self.clock() * 1000) if now_ms is None else now_ms
        return self.producer_state.remove_expired_producers(now_ms, expiration_ms)

    # -- retention and truncation -----------------------------------------------------------------
    @_writes_pending_first
    def reconfigure(self, config: Any) -> None:
        """Take a changed topic configuration (a server's AlterConfigs) from now on: the next
        append, roll and retention pass use it, as Kafka's ``updateConfig`` makes them. Segments
        already open keep the index sizes they were made with; the next roll takes the new
        ones."""
        with self.lock:
            self.config = config
            self._local.config = config

    @_writes_pending_first
    def delete_old_segments(self, now: int | None = None) -> int:
        """Kafka's retention pass (spec §7.6): below the log start offset, then by size, then by
        time; returns the number of segments deleted (renamed ``.deleted``, removed later).
        Under the log's lock, as every change of its segments: a cleaner swapping segments in
        from another thread never has one taken out under it."""
        self._require_writable("delete segments of")
        now = int(self.clock() * 1000) if now is None else now
        deleted = 0
        for _rule, make_predicate in self._retention_rules(now):
            predicate = make_predicate(self.segments)
            if predicate is not None:
                deleted += self._delete_where(predicate)
        return deleted

    @_writes_pending_first
    def retention_plan(self, now: int | None = None) -> list[tuple[LogSegment, str]]:
        """What :meth:`delete_old_segments` would delete now, oldest first, each with the rule
        that deletes it (``log-start-offset``, ``retention.bytes``, ``retention.ms``); deletes
        nothing, so a read-only log can answer. The same rules and walk as the real pass."""
        now = int(self.clock() * 1000) if now is None else now
        remaining = list(self.segments)
        plan: list[tuple[LogSegment, str]] = []
        for rule, make_predicate in self._retention_rules(now):
            predicate = make_predicate(remaining)
            if predicate is None:
                continue
            doomed = self._deletable(remaining, predicate)
            plan.extend((seg, rule) for seg in doomed)
            remaining = remaining[len(doomed) :]
            if not remaining:  # the real pass rolls a new, empty segment: nothing more goes
                break
        return plan

    RetentionPredicate = Callable[[LogSegment, "LogSegment | None"], bool]

    def _retention_rules(
        self, now: int
    ) -> list[tuple[str, Callable[[list[LogSegment]], RetentionPredicate | None]]]:
        """The passes of a retention run, in order; each builds its predicate from the
        segments left when it starts (the size rule counts what the earlier passes left)."""

        def below_start(segs: list[LogSegment]) -> Log.RetentionPredicate:
            return lambda seg, nxt: nxt is not None and nxt.base_offset <= self.log_start_offset

        def over_size(segs: list[LogSegment]) -> Log.RetentionPredicate | None:
            retention_bytes = self.config.retention_bytes
            if retention_bytes < 0:
                return None
            diff = sum(seg.size for seg in segs) - retention_bytes
            if diff < 0:
                return None
            budget = [diff]

            def over(seg: LogSegment, nxt: LogSegment | None) -> bool:
                if budget[0] - seg.size >= 0:
                    budget[0] -= seg.size
                    return True
                return False

            return over

        def too_old(segs: list[LogSegment]) -> Log.RetentionPredicate | None:
            retention_ms = self.config.retention_ms
            if retention_ms < 0:
                return None
            return lambda seg, nxt: now - seg.largest_timestamp > retention_ms

        rules: list[tuple[str, Callable[[list[LogSegment]], Log.RetentionPredicate | None]]]
        rules = [("log-start-offset", below_start)]
        if self.config.delete:
            rules += [("retention.bytes", over_size), ("retention.ms", too_old)]
        return rules

    def _deletable(self, segs: list[LogSegment], predicate: RetentionPredicate) -> list[LogSegment]:
        """Kafka's deletableSegments: oldest first while below the high watermark (the log end
        here) and the predicate holds, never an empty last segment."""
        doomed: list[LogSegment] = []
        for i, seg in enumerate(segs):
            nxt = segs[i + 1] if i + 1 < len(segs) else None
            upper = nxt.base_offset if nxt is not None else self.log_end_offset
            if self.log_end_offset < upper or not predicate(seg, nxt):
                break
            if nxt is None and seg.size == 0:
                break
            doomed.append(seg)
        return doomed

    def _delete_where(self, predicate: RetentionPredicate) -> int:
        segs = self.segments
        doomed = self._deletable(segs, predicate)
        if not doomed:
            return 0
        if len(doomed) == len(segs):
            self.roll()
            if self.active_segment is doomed[-1]:
                doomed.pop()
        for seg in doomed:
            self._local.delete_segment(seg)
        first = self._local.segments.first
        if first is not None:
            self.log_start_offset = max(self.log_start_offset, first.base_offset)
            if self.leader_epochs is not None:
                self.leader_epochs.truncate_from_start(self.log_start_offset)
        return len(doomed)

    @_writes_pending_first
    def increment_log_start_offset(self, offset: int) -> None:
        """DeleteRecords: move the log start forward (segments below go at the next retention)."""
        self._require_writable("move the start of")
        if offset > self.log_end_offset:
            raise ValueError(f"log start offset {offset} is beyond the log end offset")
        if offset > self.log_start_offset:
            if self._own_log_start:
                # kept before it is acknowledged, where a broker keeps it (a LogDir keeps
                # the logs it opens in its checkpoint itself)
                OwnLogStart.write(self.directory, offset)
            self.log_start_offset = offset
            if self.leader_epochs is not None:
                self.leader_epochs.truncate_from_start(offset)

    @_writes_pending_first
    def truncate_to(self, offset: int) -> None:
        """Remove every record at or after ``offset`` (spec §7.7)."""
        self._require_writable("truncate")
        if offset < 0:
            raise ValueError(f"cannot truncate to a negative offset {offset}")
        if offset >= self.log_end_offset:
            return
        self._local.truncations += 1
        if self._local.segments.bases[0] > offset:
            self.truncate_fully_and_start_at(offset)
            return
        _truncate_cleaner_checkpoint(self, offset)
        for seg in self._local.segments.higher(offset):
            self._local.delete_segment(seg)
        self.active_segment.truncate_to(offset)
        # Kafka's LocalLog.truncateTo: the log end offset is the target, also when the target
        # was inside a batch (the segment is cut at that batch's start; the next append
        # continues at the target)
        self.log_end_offset = offset
        self.recovery_point = min(self.recovery_point, offset)
        self.log_start_offset = min(self.log_start_offset, offset)
        if self.leader_epochs is not None:
            self.leader_epochs.truncate_from_end(offset)
        # the producer state as of the target: snapshots past it deleted (a snapshot left
        # behind would describe records that are gone), the newest one left reloaded
        rebuild_producer_state(self._local, self.producer_state, self.log_start_offset, offset)

    @_writes_pending_first
    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and start empty at ``offset`` (UnifiedLog.truncateFullyAndStartAt)."""
        self._require_writable("truncate")
        self._local.truncations += 1
        _truncate_cleaner_checkpoint(self, offset)
        for seg in list(self._local.segments):
            self._local.delete_segment(seg)
        self.producer_state.truncate_fully_and_start_at(offset)
        self._local.segments.add(self._local.open_segment(offset, exists=False))
        self.log_end_offset = self.log_start_offset = offset
        # Kafka's LocalLog.updateLogEndOffset: the recovery point only ever comes down to the
        # new log end, never up (what was below it was never flushed)
        self.recovery_point = min(self.recovery_point, offset)
        if self.leader_epochs is not None:
            # Kafka's clearAndFlush: no epoch is known for a log that starts over, and the
            # file is rewritten at once
            self.leader_epochs.clear()
            self.write_checkpoints()

    # -- compaction ---------------------------------------------------------------------------
    def compact(self, **kwargs: Any) -> Any:
        """Clean this log as Kafka's log cleaner does (``cleanup.policy=compact``): the
        latest record of each key stays, with tombstones until ``delete.retention.ms``
        after the cleaning that first saw them, aborted transactions' records and spent
        markers go. Returns a :class:`~kafkalog.log.cleaner.CleanResult`; the keyword
        arguments are :func:`kafkalog.log.cleaner.clean_log`'s.

        The log's lock is held only to read its state and for each swap (``lock`` defaults
        to :attr:`lock`), so other threads append and read while it cleans; retention or a
        truncation that takes segments of a group being cleaned aborts the cleaning
        (:class:`~kafkalog.log.cleaner.CleaningAborted`, nothing swapped in for that group,
        the cleaner checkpoint not moved: the next cleaning does it again)."""
        from kafkalog.log.cleaner import clean_log

        with self.lock:
            if self._writer is not None:
                self._writer.write_pending()
        kwargs.setdefault("lock", self.lock)
        return clean_log(self, **kwargs)

    # -- durability ---------------------------------------------------------------------------
    @_writes_pending_first
    def flush(self, offset: int | None = None) -> None:
        """fsync every segment holding offsets before ``offset`` (default: everything) and move
        the recovery point there."""
        if not self.writable:
            return
        upto = self.log_end_offset if offset is None else offset
        if upto <= self.recovery_point:
            return
        for k, (seg, _) in enumerate(self._local.segments.from_floor(self.recovery_point)):
            if k and seg.base_offset >= upto:
                break
            seg.flush()
        # Kafka's Utils.flushDirIfExists: a partition directory removed under a live log (a
        # deleted topic) is no error; its files are gone with it, there is nothing to sync
        try:
            fd = os.open(self.directory, os.O_RDONLY)
        except FileNotFoundError:
            fd = -1
        if fd >= 0:
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        self.recovery_point = upto
        self.last_flush_ms = int(self.clock() * 1000)
        if fd >= 0:
            self.write_checkpoints()

    @_writes_pending_first
    def write_checkpoints(self) -> None:
        """The partition's own files: ``leader-epoch-checkpoint``, written when its entries
        differ from what this log last wrote (every flush and every data directory
        checkpoint calls this; most find nothing changed)."""
        if not self.writable or self.leader_epochs is None:
            return
        entries = self.leader_epochs.entries
        if entries == self._epochs_written:
            return
        self.leader_epochs.write(os.path.join(self.directory, "leader-epoch-checkpoint"))
        self._epochs_written = entries

    @_writes_pending_first
    def close(self) -> None:
        """Flush, close every segment (final: later reads raise ClosedError) and drop the
        deletions still waiting for their delay (their ``.deleted`` files go at the next open,
        as after a broker's shutdown)."""
        if self.writable and self._lock is not None:
            # Kafka's UnifiedLog.close: a snapshot at the log end, so the next open (after this
            # clean shutdown) loads it and replays nothing
            self.producer_state.map_end_offset = self.log_end_offset
            self.producer_state.take_snapshot()
            self.flush()
            # Kafka's shutdown flushes the active segment too (``flush(true)``), which opens its
            # lazy indexes: a cleanly closed log has every segment's .index and .timeindex,
            # as Kafka's loader (``sanityCheck``) and ``kafkalog verify`` expect, also for the
            # empty segment a roll left (retention that deleted every record)
            active = self._local.segments.active
            if active is not None and not active.closed:
                active.offset_index.get()
                active.time_index.get()
            if self._own_marker and os.path.isdir(self.directory):
                # last, once everything is on disk: the next open needs no recovery
                last = (active.base_offset, active.size) if active is not None else None
                # the end the segments show: a truncation inside a batch keeps the target as
                # the log end (Kafka's truncateTo) while the last batch ends before it, and the
                # next open (or a reader judging the last batch) finds the batches' end
                end = self.recovery_point
                if active is not None:
                    end = min(end, active.read_next_offset())
                LogCleanShutdown.write(self.directory, end, last)
        self._local.close()
        self._release_lock()

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "rw" if self.writable else "r"
        return (
            f"Log({self.directory!r}, segments={len(self._local.segments)}, "
            f"offsets=[{getattr(self, 'log_start_offset', '?')}, "
            f"{getattr(self, 'log_end_offset', '?')}), mode={mode!r})"
        )


@functools.cache
def _default_config() -> Any:
    """One :class:`TopicConfig` of Kafka's defaults for read-only opens (it is frozen)."""
    from kafkalog.log.config import TopicConfig

    return TopicConfig()


def _bound(ms: int) -> int | None:
    """A timestamp bound of the fast path: None when unbounded (Long.MAX_VALUE)."""
    return None if ms == 2**63 - 1 else ms


def scan_records(log: Log) -> Iterator[Record]:
    """Every record of ``log`` by a plain scan of every segment (the brute-force reference)."""
    for seg in log.segments:
        for entry in seg.entries(0):
            try:
                yield from entry.records(log.limits)
            except CorruptRecordError:
                raise


def _truncate_cleaner_checkpoint(log: Log, offset: int) -> None:
    """Kafka's ``maybeTruncateCheckpoint`` on every truncation (see
    :func:`kafkalog.log.cleaner_checkpoint.maybe_truncate_checkpoint`)."""
    from kafkalog.log.cleaner_checkpoint import maybe_truncate_checkpoint

    maybe_truncate_checkpoint(log.directory, (log.topic, log.partition), offset)
