"""The results of the records layer's compiled loops (``_kernels``: header scan, decode) and of
the record walk (:mod:`kafkalog.records.record_walk`): one set of codes, one message each.

A module of plain integers, so the walk's Python form and every caller read them without
loading numba; the compiled loops capture them as constants.
"""

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
ERR_ENTRY_SIZE = 10
ERR_ENTRY_TOO_LARGE = 11
ERR_BATCH_LENGTH = 12
ERR_OVERFLOW = 13
ERR_MAGIC = 14
ERR_INFLATE = 15  # libzstd refused a payload decoded in the kernel (the caller re-decodes)
ERR_RECORD_COUNT = 16  # more records declared than the inflated bytes can hold (likewise)
# the walk's own (Kafka's LogValidator checks these; the columnar reader does not)
ERR_OFFSET_DELTA = 17
ERR_TOO_FEW_BYTES = 18
# Kafka ignores a record's attributes byte (unused, 0 from every producer); kafka-python reads
# it as a varint, so a byte of 0x80 or more shifts every later field and its consumers fail on
# the batch: kafkalog refuses any non-zero value, stricter than Kafka.
ERR_RECORD_ATTRIBUTES = 19

# per-record problems of the walk (it goes on): written to its ``collect``
REC_NO_KEY = 1
REC_TIMESTAMP = 2

#: What each structural code means, for the error messages (ERR_MAGIC, ERR_INFLATE and
#: ERR_RECORD_COUNT are handled by the columnar reader itself).
MESSAGES = {
    ERR_VARINT: "malformed varint",
    ERR_RECORD_LENGTH: "record length runs past the batch or is below the 6-byte minimum",
    ERR_KEY_LENGTH: "invalid key length",
    ERR_VALUE_LENGTH: "invalid value length",
    ERR_HEADER_COUNT: "invalid header count",
    ERR_HEADER_KEY: "invalid header key length",
    ERR_HEADER_VALUE: "invalid header value length",
    ERR_RECORD_TRAILING: "record fields do not fill its declared length",
    ERR_BATCH_TRAILING: "incorrect declared batch size: bytes left after the last record",
    ERR_ENTRY_SIZE: "record size smaller than the minimum record overhead (14)",
    ERR_ENTRY_TOO_LARGE: "entry size exceeds the maximum batch size",
    ERR_BATCH_LENGTH: "record batch length smaller than the 49-byte minimum",
    ERR_OVERFLOW: "record offset delta overflows 64 bits",
    ERR_OFFSET_DELTA: "offset delta out of order",
    ERR_TOO_FEW_BYTES: "incorrect declared batch size: premature end of the records",
    ERR_RECORD_ATTRIBUTES: "record attributes are unused and must be 0",
}
