"""The exceptions kafkalog raises.

Every problem found in bytes read from disk surfaces as a :class:`KafkalogError` subclass that
names the file (when known), the byte position and the reason, so an operator can find the bad
spot with a hex editor and nothing deeper than kafkalog's own API ever leaks a ``struct.error``
or ``IndexError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple


class KafkalogError(Exception):
    """Base class of every error kafkalog raises on purpose."""


class RecordError(NamedTuple):
    """One record an append refused (Kafka's ``ProduceResponse.RecordError``, KIP-467): the
    batch's index in the append, the record's index in the batch, and why."""

    batch_index: int
    record_index: int
    message: str


class InvalidRecordError(KafkalogError, ValueError):
    """Input given to an encoder or an append (not bytes read from disk) that cannot be written
    as Kafka records; nothing of the append was written.

    ``record_errors`` names the records at fault when the problem is in records rather than in
    a batch header (Kafka's per-record errors, which ``kafkalog serve`` answers in the
    ProduceResponse's ``record_errors``)."""

    def __init__(self, message: str, *, record_errors: Sequence[RecordError] = ()) -> None:
        self.record_errors: tuple[RecordError, ...] = tuple(record_errors)
        super().__init__(message)

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_invalid, (type(self), str(self), self.record_errors))


def _rebuild_invalid(
    cls: type[InvalidRecordError], message: str, record_errors: tuple[RecordError, ...]
) -> InvalidRecordError:
    return cls(message, record_errors=record_errors)


class InvalidTimestampError(InvalidRecordError):
    """An append holding a record timestamp further from now than the topic's
    ``message.timestamp.before.max.ms`` / ``after.max.ms`` allow, or a producer's batch claiming
    LogAppendTime (Kafka's InvalidTimestampException, INVALID_TIMESTAMP)."""


class _PositionedError(KafkalogError):
    """An error at a byte position of a file or buffer."""

    def __init__(self, reason: str, *, path: str | None = None, position: int | None = None):
        self.reason = reason
        self.path = path
        self.position = position
        super().__init__(self._format())

    def _format(self) -> str:
        where = self.path if self.path is not None else "<buffer>"
        if self.position is not None:
            where = f"{where} at byte {self.position}"
        return f"{where}: {self.reason}"

    def located(self, path: str | None, base_position: int = 0) -> _PositionedError:
        """Return a copy whose position is shifted by ``base_position`` and that names ``path``.

        Decoders work on slices; the caller that knows where the slice came from relocates the
        error so the message points at the byte in the real file.
        """
        position = None if self.position is None else self.position + base_position
        new = type(self).__new__(type(self))
        _PositionedError.__init__(
            new, self.reason, path=path if path is not None else self.path, position=position
        )
        return new

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (type(self), self.reason, self.path, self.position))


def _rebuild(
    cls: type[_PositionedError], reason: str, path: str | None, position: int | None
) -> _PositionedError:
    return cls(reason, path=path, position=position)


class CorruptRecordError(_PositionedError):
    """Bytes that cannot be a valid Kafka log entry: bad CRC, impossible length, bad varint..."""


class CompressionError(CorruptRecordError):
    """A compressed payload that does not decompress, or would decompress beyond the bounds."""


class DecompressionLimitError(CompressionError):
    """A compressed payload that would decompress beyond the bound it was given: stopped there,
    never inflated further (a decompression bomb, or a batch larger than a broker takes)."""


class BatchTooLargeError(CorruptRecordError):
    """A length field larger than the configured maximum batch size."""


class DamagedLogError(CorruptRecordError):
    """Bytes of a partition log that are not whole, valid batches, where a crash cannot have
    left them: before the last batch of the last segment, or followed by valid batches.

    kafkalog has no replica to refill a log from, so it never cuts or skips such bytes on its
    own (Kafka's recovery would truncate there and delete every later segment): reading or
    opening the log stops with this error, which names the file, the byte where the damage
    starts and what was expected there; ``kafkalog repair`` moves the damage aside."""

    @classmethod
    def found(cls, what: str, *, path: str, position: int, partition: str) -> DamagedLogError:
        """The error every reader raises for damage: what is wrong, where, and the command
        that moves it aside."""
        return cls(
            f"damaged log: {what}; run `kafkalog repair {partition}` to move the damaged bytes "
            "into a quarantine folder (nothing is deleted)",
            path=path,
            position=position,
        )


def unreadable_file(
    path: str, why: str | None, *, first: str = "", then: str = ""
) -> DamagedLogError:
    """A file of a log that cannot be read at all (a directory by its name, no permission),
    named at its first byte with what to do: an OSError naming no byte would reach every reader
    as a crash. ``first`` and ``then`` are what the caller adds before and after the remedy
    (what repair does; what rebuilds the file once it is moved out)."""
    return DamagedLogError(
        f"cannot read it ({why}): {first}make it a readable file again, or move it out of the "
        f"partition directory{then}",
        path=path,
        position=0,
    )


class IncompleteTailError(_PositionedError):
    """The last entry of a file is cut off (a crash mid-write, or a live segment being written).

    Distinct from corruption: Kafka itself stops reading silently there, and a live broker's
    active segment routinely ends this way while an append is in flight.
    """


class CorruptIndexError(_PositionedError):
    """An index file that fails Kafka's sanity check (or cannot be an index at all)."""


class IndexOffsetOverflowError(KafkalogError):
    """An offset that does not fit the index's 32-bit relative offsets (Kafka's
    IndexOffsetOverflowException): the segment must be rolled first."""


class InvalidOffsetError(KafkalogError):
    """An append that would break the index's ordering (Kafka's InvalidOffsetException)."""


class IndexFullError(KafkalogError):
    """An append to an index with no free slot (Kafka: "Attempt to append to a full index")."""


class ReadOnlyError(KafkalogError, PermissionError):
    """A write attempted through an object opened read-only (a live broker's files, a backup)."""


class InvalidTopicError(KafkalogError, ValueError):
    """A topic name Kafka would refuse; as a directory name it could also point outside the
    data directory (``..``, ``/``), so nothing is created under it."""


class ClosedError(KafkalogError, ValueError):
    """Use of an index, a segment or a log after its final close (a segment's delayed deletion
    closes it too). Raised instead of reading memory that may no longer be mapped or a file
    descriptor whose number may belong to another file by now; names the file."""

    def __init__(self, path: str, action: str = "read") -> None:
        self.path = path
        self.action = action
        super().__init__(f"cannot {action} {path}: it is closed (or its segment was deleted)")

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.path, self.action))


class ProducerStateError(KafkalogError):
    """An append that the partition's producer state refuses, as a broker would (Kafka's
    ProducerStateManager): nothing of the append was written."""

    def __init__(self, reason: str, *, producer_id: int, offset: int | None = None) -> None:
        self.producer_id = producer_id
        self.offset = offset
        super().__init__(reason)


class OutOfOrderSequenceError(ProducerStateError):
    """An idempotent batch whose first sequence does not follow the producer's last one
    (Kafka's OutOfOrderSequenceException)."""


class InvalidProducerEpochError(ProducerStateError):
    """A batch or transaction marker from an older, fenced producer epoch (Kafka's
    InvalidProducerEpochException)."""


class InvalidTxnStateError(ProducerStateError):
    """A non-transactional batch from a producer whose transaction is open (Kafka's
    InvalidTxnStateException)."""


class TransactionCoordinatorFencedError(ProducerStateError):
    """A transaction marker from an older coordinator epoch than the producer's last one
    (Kafka's TransactionCoordinatorFencedException)."""
