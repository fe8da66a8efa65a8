"""What the transaction coordinator writes to `__transaction_state`: one record per
transactional id (key: the id; value: its `TransactionMetadata`, a null value deletes it),
inside ordinary Kafka record batches (`coordinator.record_batches`), versioned msgpack like the
group coordinator's records. The fields are those of Kafka's TransactionLogKey/TransactionLogValue
(docs/formats.md)."""

from __future__ import annotations

import msgspec

from ..groups.offsets_records import partition_for
from .metadata import TransactionMetadata, TxnState

FORMAT_VERSION = 1
TRANSACTION_TOPIC = "__transaction_state"

__all__ = [
    "FORMAT_VERSION",
    "TRANSACTION_TOPIC",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
    "partition_for",
]


class UnknownTxnRecordVersion(ValueError):
    """A record in __transaction_state written by a newer broker."""


class TxnKey(msgspec.Struct, frozen=True, array_like=True):
    version: int
    transactional_id: str


class TxnPartitions(msgspec.Struct, frozen=True, array_like=True):
    topic: str
    partitions: list[int]


class TxnValue(msgspec.Struct, frozen=True, array_like=True):
    version: int
    producer_id: int
    previous_producer_id: int  # Kafka's: the id before a rotation (epoch exhaustion), else -1
    producer_epoch: int
    last_producer_epoch: int
    transaction_timeout_ms: int
    state: str  # TxnState's value
    partitions: list[TxnPartitions]
    transaction_start_timestamp_ms: int
    transaction_last_update_timestamp_ms: int


_encoder = msgspec.msgpack.Encoder()
_key_decoder = msgspec.msgpack.Decoder(TxnKey)
_value_decoder = msgspec.msgpack.Decoder(TxnValue)


def encode_key(transactional_id: str) -> bytes:
    return _encoder.encode(TxnKey(FORMAT_VERSION, transactional_id))


def decode_key(data: bytes) -> str:
    key = _key_decoder.decode(data)
    if key.version != FORMAT_VERSION:
        raise UnknownTxnRecordVersion(f"transaction log key version {key.version} is not supported")
    return key.transactional_id


def encode_value(txn: TransactionMetadata) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(txn.partitions):
        by_topic.setdefault(topic, []).append(partition)
    return _encoder.encode(
        TxnValue(
            FORMAT_VERSION,
            txn.producer_id,
            txn.previous_producer_id,
            txn.producer_epoch,
            txn.last_producer_epoch,
            txn.timeout_ms,
            txn.state.value,
            [TxnPartitions(t, ps) for t, ps in by_topic.items()],
            txn.txn_start_ms,
            txn.last_update_ms,
        )
    )


def decode_value(transactional_id: str, data: bytes) -> TransactionMetadata:
    value = _value_decoder.decode(data)
    if value.version != FORMAT_VERSION:
        raise UnknownTxnRecordVersion(f"transaction log value version {value.version} is not supported")
    return TransactionMetadata(
        transactional_id,
        producer_id=value.producer_id,
        previous_producer_id=value.previous_producer_id,
        producer_epoch=value.producer_epoch,
        last_producer_epoch=value.last_producer_epoch,
        timeout_ms=value.transaction_timeout_ms,
        state=TxnState(value.state),
        partitions=frozenset((tp.topic, p) for tp in value.partitions for p in tp.partitions),
        txn_start_ms=value.transaction_start_timestamp_ms,
        last_update_ms=value.transaction_last_update_timestamp_ms,
    )
