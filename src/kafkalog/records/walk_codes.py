"""The results of the record walk (:mod:`kafkalog.records.record_walk`), shared by its Python
and compiled forms (a module of their own, so the compiled one needs nothing of the other)."""

from __future__ import annotations

OK = 0
ERR_VARINT = 1
ERR_RECORD_LENGTH = 2
ERR_KEY_LENGTH = 3
ERR_VALUE_LENGTH = 4
ERR_HEADER_COUNT = 5
ERR_HEADER_KEY = 6
ERR_HEADER_VALUE = 7
ERR_RECORD_TRAILING = 8
ERR_BATCH_TRAILING = 9
ERR_OFFSET_DELTA = 10
ERR_TOO_FEW_BYTES = 11
# Kafka ignores a record's attributes byte (unused, 0 from every producer); kafka-python reads
# it as a varint, so a byte of 0x80 or more shifts every later field and its consumers fail on
# the batch: kafkalog refuses any non-zero value, stricter than Kafka.
ERR_RECORD_ATTRIBUTES = 12
# per-record problems (the walk goes on): written to ``collect``
REC_NO_KEY = 1
REC_TIMESTAMP = 2
