"""The `__consumer_offsets` records Shoal wrote before it used Kafka's schemas (its format
version 1: msgpack arrays and maps, docs/formats.md), read so that an upgrade loses no
committed offset and no group. Nothing writes them any more; compaction re-appends the
live state in Kafka's records and the old ones go with the log start.

Telling them apart needs no marker: a msgpack array or map starts with a byte of 0x80 or
more, Kafka's records with the high byte of a small int16 (0x00).
"""

from __future__ import annotations

from typing import TypeVar, Union

import msgspec

from ..coordinator.record_schemas import CorruptRecord, UnknownRecordVersion
from .offsets import OffsetValue
from .snapshot import GroupSnapshot, MemberSnapshot

LEGACY_VERSION = 1
T = TypeVar("T")


def is_legacy(data: bytes | memoryview) -> bool:
    """Whether a key or value is one of Shoal's msgpack records rather than Kafka's."""
    return len(data) > 0 and data[0] >= 0x80


class _OffsetKey(msgspec.Struct, frozen=True, tag="offset", array_like=True):
    version: int
    group: str
    topic: str
    partition: int


class _GroupKey(msgspec.Struct, frozen=True, tag="group", array_like=True):
    version: int
    group: str


class _OffsetValue(msgspec.Struct, frozen=True, array_like=True):
    version: int
    offset: int
    leader_epoch: int
    metadata: str | None
    commit_timestamp_ms: int
    expire_timestamp_ms: int = -1


class _Member(msgspec.Struct, frozen=True, kw_only=True):
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


class _Group(msgspec.Struct, frozen=True, kw_only=True):
    version: int = LEGACY_VERSION
    group_id: str
    protocol_type: str | None
    generation_id: int
    protocol_name: str | None
    leader_id: str | None
    current_state_timestamp_ms: int | None
    members: tuple[_Member, ...] = ()


_key_decoder = msgspec.msgpack.Decoder(Union[_OffsetKey, _GroupKey])
_offset_decoder = msgspec.msgpack.Decoder(_OffsetValue)
_group_decoder = msgspec.msgpack.Decoder(_Group)


def decode_key(data: bytes) -> tuple[str, str, int] | str:
    """(group, topic, partition) of an offset's key, the group id of a group's."""
    key = _decode(_key_decoder, data, "key")
    _check(key.version, "key")
    if isinstance(key, _OffsetKey):
        return key.group, key.topic, key.partition
    return key.group


def decode_offset(data: bytes) -> OffsetValue:
    value = _decode(_offset_decoder, data, "offset value")
    _check(value.version, "offset value")
    return OffsetValue(
        value.offset, value.leader_epoch, value.metadata or "", value.commit_timestamp_ms, value.expire_timestamp_ms
    )


def decode_group(data: bytes) -> GroupSnapshot:
    group = _decode(_group_decoder, data, "group snapshot")
    _check(group.version, "group snapshot")
    return GroupSnapshot(
        group_id=group.group_id,
        protocol_type=group.protocol_type,
        generation_id=group.generation_id,
        protocol_name=group.protocol_name,
        leader_id=group.leader_id,
        current_state_timestamp_ms=group.current_state_timestamp_ms,
        members=tuple(MemberSnapshot(**msgspec.structs.asdict(m)) for m in group.members),
    )


def _decode(decoder: msgspec.msgpack.Decoder[T], data: bytes, what: str) -> T:
    try:
        return decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise CorruptRecord(f"legacy __consumer_offsets {what}: {exc}") from exc


def _check(version: int, what: str) -> None:
    if version != LEGACY_VERSION:
        raise UnknownRecordVersion(f"legacy __consumer_offsets {what} version {version} is not supported")
