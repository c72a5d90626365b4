"""Kafka error codes for what the log layer raises, in one place."""

from __future__ import annotations

from kafkalog import errors

NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
MESSAGE_TOO_LARGE = 10
RECORD_LIST_TOO_LARGE = 18
NOT_ENOUGH_REPLICAS = 19
INVALID_REQUIRED_ACKS = 21
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
INVALID_TOPIC_EXCEPTION = 17
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
UNSUPPORTED_VERSION = 35
INVALID_REQUEST = 42
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
TRANSACTION_COORDINATOR_FENCED = 52
INVALID_CONFIG = 40
INVALID_REPLICATION_FACTOR = 38
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
KAFKA_STORAGE_ERROR = 56
MEMBER_ID_REQUIRED = 79
FENCED_INSTANCE_ID = 82
INVALID_RECORD = 87
MISMATCHED_ENDPOINT_TYPE = 114
INVALID_TIMESTAMP = 32
UNSUPPORTED_COMPRESSION_TYPE = 76
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
SECURITY_DISABLED = 54
SASL_AUTHENTICATION_FAILED = 58
RESOURCE_NOT_FOUND = 91
DUPLICATE_RESOURCE = 92
UNACCEPTABLE_CREDENTIAL = 93
UNKNOWN_SERVER_ERROR = -1

# The producer-state errors of the log's idempotence/transaction checks, by class name, so this
# table works before and after the log layer defines them (most specific first).
_PRODUCER_STATE = (
    ("OutOfOrderSequenceError", OUT_OF_ORDER_SEQUENCE_NUMBER),
    ("DuplicateSequenceError", DUPLICATE_SEQUENCE_NUMBER),
    ("InvalidProducerEpochError", INVALID_PRODUCER_EPOCH),
    ("InvalidTxnStateError", INVALID_TXN_STATE),
    ("TransactionCoordinatorFencedError", TRANSACTION_COORDINATOR_FENCED),
    ("ProducerStateError", INVALID_PRODUCER_EPOCH),
)


def append_error_code(exc: BaseException) -> int:
    """The error a broker answers a produce with when ``Log.append`` raised ``exc``."""
    for name, code in _PRODUCER_STATE:
        cls = getattr(errors, name, None)
        if isinstance(cls, type) and isinstance(exc, cls):
            return code
    if isinstance(exc, errors.CorruptRecordError):
        return CORRUPT_MESSAGE
    if isinstance(exc, errors.InvalidTimestampError):
        return INVALID_TIMESTAMP
    if isinstance(exc, errors.InvalidRecordError):
        text = str(exc)
        if "segment.bytes" in text:  # Kafka's RecordBatchTooLargeException
            return RECORD_LIST_TOO_LARGE
        if "max.message.bytes" in text:
            return MESSAGE_TOO_LARGE
        return INVALID_RECORD
    return UNKNOWN_SERVER_ERROR
