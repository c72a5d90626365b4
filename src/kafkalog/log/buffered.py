"""Appends kept in the process until written together: :meth:`Log.buffered`'s state.

A program appending one record per call pays, per call, a system call (``pwrite``, ~1.7 us)
and the encoding of a one-record batch in Python; SQLite inserting rows in one transaction pays
neither until COMMIT. Inside ``with log.buffered():`` an ``append_records`` call is checked, gets
its offsets and its :class:`~kafkalog.log.log.AppendInfo` at once, and its records are kept here
as columns (the :class:`~kafkalog.records.Record` objects are not kept: holding thousands of
them made the garbage collector cost more than the append). When the block ends, or every
``max_bytes``, all the calls are encoded in one compiled pass, one batch per call, byte for byte
what the calls would have written one at a time, and written by
:meth:`~kafkalog.log.segment.LogSegment.append_run`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from kafkalog.errors import KafkalogError
from kafkalog.log.segment import LogSegment
from kafkalog.records.model import Header, Record
from kafkalog.records.small_batch import encode_rows, encoded_size, record_timestamps

_INT64_MAX = 2**63 - 1
_new_object = object.__new__
# kept appends written in plain Python below this many calls, unless numba is loaded already
_COMPILED_DRAIN_FROM = 256


class AppendBuffer:
    """The calls appended since the last write, as columns, and the offsets they were given."""

    __slots__ = (
        "bytes",
        "calls",
        "clock",
        "first_offset",
        "headers",
        "info_type",
        "keys",
        "max_batch",
        "max_bytes",
        "multi",
        "next_offset",
        "timestamps",
        "values",
    )

    def __init__(
        self,
        next_offset: int,
        max_bytes: int,
        max_batch: int,
        info_type: type,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.first_offset = next_offset  # the offset the first kept record was given
        # what stamps a record appended without a timestamp (the log's clock, in seconds,
        # read when the call is made: the call's "now", not the block's end); None keeps -1.
        # The clock itself, not Log.default_timestamp: a frame less per stamped call
        self.clock = clock
        self.next_offset = next_offset
        self.max_bytes = max_bytes
        self.max_batch = max_batch
        self.info_type = info_type  # AppendInfo (the log layer's; passed in to avoid a cycle)
        self._clear()

    def _clear(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.timestamps: list[int] = []
        self.headers: dict[int, tuple[Header, ...]] = {}  # by record, those that have any
        self.multi: dict[int, int] = {}  # records per call, for calls of more than one
        self.calls = 0
        self.bytes = 0

    def add(self, records: Sequence[Record], log_end_offset: int) -> Any:
        """Keep one call's records as one batch; its AppendInfo, or None when the call needs
        the log's own path (which also raises its errors): explicit offsets, timestamps out of
        range, keys or values that are not ``bytes``, a batch larger than the topic accepts.
        ``log_end_offset`` is where the first kept call's offsets start (the log may have
        moved since the last write: truncated, or appended to by other means)."""
        if len(records) != 1:
            return self._add_general(records, log_end_offset)
        rec = records[0]
        key = rec.key
        value = rec.value
        ts = rec.timestamp
        if rec.offset >= 0 or not 0 <= ts <= _INT64_MAX or rec.headers:
            if rec.offset >= 0 or ts != -1 or rec.headers:
                return self._add_general(records, log_end_offset)
            if self.clock is not None:  # no timestamp: stamped now, once per call
                ts = int(self.clock() * 1000)
        # the batch's size: 61 bytes of header, then the record and its length; the record is
        # attributes, both deltas (0 here) and the header count (4 bytes), the key and value
        if key is None:
            body = 5
        elif type(key) is bytes:
            n = len(key)
            body = (5 if n < 64 else 6) + n
        else:
            return None
        if value is None:
            body += 1
        elif type(value) is bytes:
            n = len(value)
            body += (1 if n < 64 else 2) + n
        else:
            return None
        if body >= 8192:  # a varint of three bytes or more somewhere: counted exactly there
            return self._add_general(records, log_end_offset)
        size = 62 + body if body < 64 else 63 + body
        if size > self.max_batch:
            return None
        if self.calls:
            offset = self.next_offset
        else:
            offset = self.first_offset = log_end_offset
        self.next_offset = offset + 1
        self.keys.append(key)
        self.values.append(value)
        self.timestamps.append(ts)
        self.calls += 1
        self.bytes += size
        # AppendInfo(...) without the frozen dataclass's __init__, as Log.append's fast path
        info: Any = _new_object(self.info_type)
        fields = info.__dict__
        fields["first_offset"] = offset
        fields["last_offset"] = offset
        fields["max_timestamp"] = ts
        fields["offset_of_max_timestamp"] = offset if ts >= 0 else -1
        fields["batches"] = 1
        fields["size"] = size
        return info

    def _add_general(self, records: Sequence[Record], log_end_offset: int) -> Any:
        """Any other call: several records, headers, long fields."""
        if not records:
            return None
        stamps = record_timestamps(records, None if self.clock is None else self._now_ms)
        if stamps is None:  # an explicit offset or a timestamp out of range
            return None
        max_ts = -1
        for rec, ts in zip(records, stamps, strict=True):
            if not (rec.key is None or type(rec.key) is bytes) or not (
                rec.value is None or type(rec.value) is bytes
            ):
                return None
            for h in rec.headers:
                if type(h.key) is not str or not (h.value is None or type(h.value) is bytes):
                    return None
            if ts > max_ts:
                max_ts = ts
        size = encoded_size(records, stamps)
        if size > self.max_batch:
            return None
        if not self.calls:
            self.next_offset = self.first_offset = log_end_offset
        first = self.next_offset
        last = first + len(records) - 1
        self.next_offset = last + 1
        if len(records) > 1:
            self.multi[self.calls] = len(records)
        row = len(self.values)
        for i, rec in enumerate(records):
            self.keys.append(rec.key)
            self.values.append(rec.value)
            self.timestamps.append(stamps[i])
            if rec.headers:
                self.headers[row + i] = rec.headers
        self.calls += 1
        self.bytes += size
        return self.info_type(first, last, max_ts, last if max_ts >= 0 else -1, 1, size)

    def _now_ms(self) -> int:
        assert self.clock is not None
        return int(self.clock() * 1000)

    def take(self) -> tuple[int, Any]:
        """The kept calls encoded as a :class:`~kafkalog.log.segment.BatchRun` with the offset
        of its first record; the buffer is left empty, ready for the next calls."""
        import numpy as np
        import pyarrow as pa

        from kafkalog.log.segment import BatchRun
        from kafkalog.records.columnar import HEADERS_TYPE
        from kafkalog.records.columnar_encode import encode_arrow

        first = self.first_offset
        columns = {
            "key": pa.array(self.keys, pa.binary()),
            "value": pa.array(self.values, pa.binary()),
            "timestamp": pa.array(self.timestamps, pa.int64()),
        }
        if self.headers:
            headers = self.headers
            columns["headers"] = pa.array(
                [[(h.key, h.value) for h in headers.get(i, ())] for i in range(len(self.values))],
                HEADERS_TYPE,
            )
        counts = np.ones(self.calls, np.int64)
        for call, n in self.multi.items():
            counts[call] = n
        self.first_offset = self.next_offset
        self._clear()
        enc = encode_arrow(pa.table(columns), base_offset=first, batch_record_counts=counts)
        return first, BatchRun(
            enc.data,
            enc.positions,
            enc.sizes,
            enc.last_offsets,
            enc.max_timestamps,
            self.max_batch,
        )

    def take_batches(self) -> tuple[int, list[bytes]]:
        """The kept calls encoded in plain Python, one batch each (offsets left for the log to
        assign): for a few calls in a process that has not loaded the compiled kernels, whose
        loading (~0.5 s) would cost more than the Python encoding saves."""
        first = self.first_offset
        keys, values, timestamps, headers = self.keys, self.values, self.timestamps, self.headers
        batches = []
        row = 0
        for call in range(self.calls):
            n = self.multi.get(call, 1)
            rows = [
                (keys[i], values[i], timestamps[i], headers.get(i, ())) for i in range(row, row + n)
            ]
            batches.append(encode_rows(rows))
            row += n
        self.first_offset = self.next_offset
        self._clear()
        return first, batches


def _numba_loaded() -> bool:
    return "numba" in sys.modules


class BufferingLog(Protocol):
    """What a :class:`BufferedWriter` needs of the log it writes to
    (:class:`~kafkalog.log.log.Log`; named here so that this module does not import it)."""

    log_end_offset: int
    recovery_point: int
    last_flush_ms: int
    directory: str
    clock: Callable[[], float]

    @property
    def active_segment(self) -> LogSegment: ...

    def append(self, records: bytes | bytearray | memoryview) -> Any: ...

    def append_records(self, records: Sequence[Record], **options: Any) -> Any: ...

    def flush(self) -> None: ...

    def fast_params(
        self,
    ) -> tuple[int, int, int, int, int, int | None, bool, int | None, int | None] | None: ...


class BufferedWriter:
    """What ``with log.buffered() as writer:`` gives: the appends kept in the process until
    written together, and the one place that writes them (:meth:`write_pending`).

    The log hands every ``append_records`` call inside the block to :meth:`keep`, and asks
    :meth:`write_pending` before anything else that uses it (another append, a read, a roll,
    a flush, retention, truncation, close), so the files always show every call made before.
    """

    __slots__ = ("buffer", "log")

    def __init__(self, log: BufferingLog, max_bytes: int, info_type: type) -> None:
        self.log = log
        params = log.fast_params()
        # a topic that requires keys or bounds timestamps keeps nothing (max_batch 0): each
        # call is validated by ``Log.append`` when it is made, not when the block ends
        plain = params is not None and not params[6] and params[7] is None and params[8] is None
        max_batch = params[0] if plain and params is not None else 0
        # a kept call is on a CreateTime topic (max_batch > 0 only then), where a record
        # without a timestamp gets Log.default_timestamp(): the log's clock in ms
        self.buffer = AppendBuffer(
            log.log_end_offset, max_bytes, max_batch, info_type, log.clock if max_batch else None
        )

    def append_records(self, records: Sequence[Record], **options: Any) -> Any:
        """The log's ``append_records`` (kept here while the block is open)."""
        return self.log.append_records(records, **options)

    @property
    def pending(self) -> int:
        """How many calls are kept, not yet written."""
        return int(self.buffer.calls)

    def keep(self, records: Sequence[Record]) -> Any:
        """Keep one call's records: its AppendInfo, or None when they cannot be kept (the
        log then writes what is kept and appends them itself)."""
        buf = self.buffer
        info = buf.add(records, self.log.log_end_offset)
        if info is not None and buf.bytes >= buf.max_bytes:
            self.write_pending()
        return info

    def write_pending(self) -> None:
        """Write the kept calls: the longest runs the active segment takes in one write each,
        and any batch that needs a roll (or anything else unusual) through the log's
        ``append``, so the files are what the calls would have written one at a time."""
        buf = self.buffer
        if not buf.calls:
            return
        log = self.log
        if buf.calls < _COMPILED_DRAIN_FROM and not _numba_loaded():
            first, batches = buf.take_batches()
            self._check_start(first)
            for batch in batches:
                log.append(batch)
            return
        first, run = buf.take()
        self._check_start(first)
        params = log.fast_params()
        count = len(run.sizes)
        i = 0
        while i < count:
            taken = 0
            if params is not None:
                taken = log.active_segment.append_run(run, i, params[2], params[3])
            if taken:
                i += taken
                log.log_end_offset = int(run.last_offsets[i - 1]) + 1
            else:
                position = int(run.positions[i])
                log.append(run.data[position : position + int(run.sizes[i])])
                i += 1
        if params is not None and (
            log.log_end_offset - log.recovery_point >= params[4]
            or (params[5] is not None and log.clock() * 1000 - log.last_flush_ms >= params[5])
        ):
            log.flush()

    def _check_start(self, first: int) -> None:
        end = self.log.log_end_offset
        if first != end:  # every other change to the log writes the kept calls first
            raise KafkalogError(
                f"{self.log.directory}: buffered appends were given offsets from {first}, but "
                f"the log ends at {end}"
            )
