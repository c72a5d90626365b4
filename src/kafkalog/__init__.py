"""kafkalog: Apache Kafka's on-disk log storage, byte for byte, in Python."""

from kafkalog.errors import (
    BatchTooLargeError,
    ClosedError,
    CompressionError,
    CorruptRecordError,
    IncompleteTailError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTimestampError,
    InvalidTxnStateError,
    KafkalogError,
    OutOfOrderSequenceError,
    ProducerStateError,
    RecordError,
    TransactionCoordinatorFencedError,
)

__version__ = "0.1.0"

__all__ = [
    "BatchTooLargeError",
    "ClosedError",
    "CompressionError",
    "CorruptRecordError",
    "IncompleteTailError",
    "InvalidProducerEpochError",
    "InvalidRecordError",
    "InvalidTimestampError",
    "InvalidTxnStateError",
    "KafkalogError",
    "OutOfOrderSequenceError",
    "ProducerStateError",
    "RecordError",
    "TransactionCoordinatorFencedError",
    "__version__",
]
