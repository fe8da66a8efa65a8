"""The `__transaction_state` records Shoal wrote before it used Kafka's schemas (its format
version 1: msgpack arrays, docs/formats.md), read so that an upgrade loses no transaction's
state. Nothing writes them any more; compaction re-appends one Kafka record per id and the old
ones go with the log start. Told apart from Kafka's records by their first byte, as the
group coordinator's (`groups.legacy_records.is_legacy`)."""

from __future__ import annotations

from typing import TypeVar

import msgspec

from ..coordinator.record_schemas import CorruptRecord, UnknownRecordVersion
from ..groups.legacy_records import is_legacy
from .metadata import TransactionMetadata, TxnState

__all__ = ["decode_key", "decode_value", "is_legacy"]

LEGACY_VERSION = 1
T = TypeVar("T")


class _Key(msgspec.Struct, frozen=True, array_like=True):
    version: int
    transactional_id: str


class _Partitions(msgspec.Struct, frozen=True, array_like=True):
    topic: str
    partitions: list[int]


class _Value(msgspec.Struct, frozen=True, array_like=True):
    version: int
    producer_id: int
    previous_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    transaction_timeout_ms: int
    state: str  # TxnState's value
    partitions: list[_Partitions]
    transaction_start_timestamp_ms: int
    transaction_last_update_timestamp_ms: int


_key_decoder = msgspec.msgpack.Decoder(_Key)
_value_decoder = msgspec.msgpack.Decoder(_Value)


def decode_key(data: bytes) -> str:
    key = _decode(_key_decoder, data, "key")
    _check(key.version, "key")
    return key.transactional_id


def decode_value(transactional_id: str, data: bytes) -> TransactionMetadata:
    value = _decode(_value_decoder, data, "value")
    _check(value.version, "value")
    try:
        state = TxnState(value.state)
    except ValueError as exc:
        raise CorruptRecord(f"legacy __transaction_state value: unknown state {value.state!r}") from exc
    return TransactionMetadata(
        transactional_id,
        producer_id=value.producer_id,
        previous_producer_id=value.previous_producer_id,
        producer_epoch=value.producer_epoch,
        last_producer_epoch=value.last_producer_epoch,
        timeout_ms=value.transaction_timeout_ms,
        state=state,
        partitions=frozenset((tp.topic, p) for tp in value.partitions for p in tp.partitions),
        txn_start_ms=value.transaction_start_timestamp_ms,
        last_update_ms=value.transaction_last_update_timestamp_ms,
    )


def _decode(decoder: msgspec.msgpack.Decoder[T], data: bytes, what: str) -> T:
    try:
        return decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise CorruptRecord(f"legacy __transaction_state {what}: {exc}") from exc


def _check(version: int, what: str) -> None:
    if version != LEGACY_VERSION:
        raise UnknownRecordVersion(f"legacy __transaction_state {what} version {version} is not supported")
