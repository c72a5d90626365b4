"""Layer 5: Kafka's wire protocol in front of the log, so unchanged Kafka clients produce to and
consume from a kafkalog data directory.

:class:`KafkaServer` (asyncio) and :class:`ServerThread` (a background thread, for tests and
non-asyncio programs) serve one data directory as a single-node broker: produce, fetch (long
poll), offsets by time, consumer groups with offsets committed to ``__consumer_offsets``, and
topic administration. Protocol bodies are ``kio``'s, generated from Kafka's schemas.
"""

from kafkalog.server.config import ListenerRefusedError, ServerConfig, parse_listen
from kafkalog.server.offset_store import (
    CommittedOffset,
    ConsumerOffsetsTopic,
    GroupMetadataRecord,
    KafkaOffsetCodec,
    OffsetCommitRecord,
    OffsetRecordCodec,
    OffsetStore,
)
from kafkalog.server.server import KafkaServer, ServerThread, serve

__all__ = [
    "CommittedOffset",
    "ConsumerOffsetsTopic",
    "GroupMetadataRecord",
    "KafkaOffsetCodec",
    "KafkaServer",
    "ListenerRefusedError",
    "OffsetCommitRecord",
    "OffsetRecordCodec",
    "OffsetStore",
    "ServerConfig",
    "ServerThread",
    "parse_listen",
    "serve",
]
