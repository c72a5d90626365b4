"""The ``__transaction_state`` records the transaction coordinator writes are Kafka's
``TransactionLogKey`` v0 / ``TransactionLogValue`` v0: checked byte for byte against the layout
Kafka's TransactionLog documents (spelled out here with ``struct``, independently of the
schema-driven codec the server writes with), and read back."""

from __future__ import annotations

import struct

from kafkalog.server.transactions import (
    ONGOING,
    TxnMetadata,
    decode_txn,
    encode_txn_key,
    encode_txn_value,
)


def _string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def test_key_and_value_are_kafkas_version_0_layout() -> None:
    meta = TxnMetadata("payments-tx", 4001, 7, 60_000, ONGOING, {("b", 2), ("a", 0), ("a", 1)})
    meta.started_ms = 1_700_000_000_000
    key = encode_txn_key("payments-tx")
    value = encode_txn_value(meta, now=1_700_000_000_500)
    assert key == struct.pack(">h", 0) + _string("payments-tx")
    expected = (
        struct.pack(">hqhib", 0, 4001, 7, 60_000, ONGOING)
        + struct.pack(">i", 2)
        + _string("a") + struct.pack(">iii", 2, 0, 1)
        + _string("b") + struct.pack(">ii", 1, 2)
        + struct.pack(">qq", 1_700_000_000_500, 1_700_000_000_000)
    )  # fmt: skip
    assert value == expected
    txn_id, back = decode_txn(key, value) or ("", None)
    assert txn_id == "payments-tx" and back is not None
    assert (back.producer_id, back.producer_epoch, back.timeout_ms, back.state) == (
        4001, 7, 60_000, ONGOING,
    )  # fmt: skip
    assert back.partitions == meta.partitions and back.started_ms == 1_700_000_000_000
    assert decode_txn(key, None) == ("payments-tx", None)  # a tombstone
