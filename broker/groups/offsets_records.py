"""What the group coordinator writes to `__consumer_offsets`: versioned msgspec keys and
values inside ordinary Kafka record batches (`coordinator.record_batches`), so the topic
stays a classic topic that any consumer can read and that replication will carry like any other.

Keys: `OffsetKey` (one committed offset) and `GroupKey` (a group's membership snapshot).
A null value is a tombstone (offset deleted / group deleted). The key's `kind` tag and
the structs' `version` fields let readers reject what they do not know.
"""

from __future__ import annotations

from typing import Union

import msgspec

FORMAT_VERSION = 1
OFFSETS_TOPIC = "__consumer_offsets"


class UnknownGroupRecordVersion(ValueError):
    """A record in __consumer_offsets written by a newer broker."""


class OffsetKey(msgspec.Struct, frozen=True, tag="offset", array_like=True):
    version: int
    group: str
    topic: str
    partition: int


class GroupKey(msgspec.Struct, frozen=True, tag="group", array_like=True):
    version: int
    group: str


class OffsetValue(msgspec.Struct, frozen=True, array_like=True):
    version: int
    offset: int
    leader_epoch: int
    metadata: str | None
    commit_timestamp_ms: int
    expire_timestamp_ms: int = -1  # only set by OffsetCommit v2-v4's retention_time_ms


Key = Union[OffsetKey, GroupKey]
_key_encoder = msgspec.msgpack.Encoder()
_key_decoder = msgspec.msgpack.Decoder(Key)
_offset_decoder = msgspec.msgpack.Decoder(OffsetValue)


def encode(obj: msgspec.Struct) -> bytes:
    return _key_encoder.encode(obj)


def decode_key(data: bytes) -> Key:
    key = _key_decoder.decode(data)
    if key.version != FORMAT_VERSION:
        raise UnknownGroupRecordVersion(f"{type(key).__name__} version {key.version} is not supported")
    return key


def decode_offset(data: bytes) -> OffsetValue:
    value = _offset_decoder.decode(data)
    if value.version != FORMAT_VERSION:
        raise UnknownGroupRecordVersion(f"OffsetValue version {value.version} is not supported")
    return value


def java_string_hash(text: str) -> int:
    """Java's String.hashCode over UTF-16 code units (Kafka picks coordinators with it)."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group_id: str, partitions: int) -> int:
    """Kafka's `Utils.abs(groupId.hashCode) % offsets.topic.num.partitions`."""
    return (java_string_hash(group_id) & 0x7FFFFFFF) % partitions
