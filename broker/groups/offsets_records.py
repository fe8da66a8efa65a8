"""What the group coordinator writes to `__consumer_offsets`: Kafka's own records (the versions
Kafka 4.x writes), inside ordinary record batches (`coordinator.record_batches`), so Kafka's
tools read them: `kafka-console-consumer --formatter` with Kafka's offsets and group-metadata
formatters, lag monitors, offset mirrors.

| record | key (type, fields) | value written (version) |
|---|---|---|
| committed offset | 1 OffsetCommitKey: group, topic, partition | OffsetCommitValue 3 (1 when an old client set a retention time) |
| classic group | 2 GroupMetadataKey: group | GroupMetadataValue 3: protocol, generation, leader, members with subscription and assignment |

A null value is a tombstone (offset or group deleted). Reading takes every version Kafka ever
wrote of both (type 0 for offsets, values 0-4) and skips record types this coordinator does
not keep (Kafka's consumer and share groups), as Kafka's loader does. Records Shoal wrote
before it used Kafka's schemas (msgpack) are still read (`legacy_records`) and disappear at
the next compaction, which re-appends the live state in Kafka's records.

The schemas are transcribed from Apache Kafka's definitions,
group-coordinator/src/main/resources/common/message/{OffsetCommitKey,OffsetCommitValue,
GroupMetadataKey,GroupMetadataValue}.json; the versions written follow Kafka's
`GroupCoordinatorRecordHelpers` (OffsetCommitValue 1 with an expiry time, else 3;
GroupMetadataValue 3: the highest before the flexible 4, which Kafka does not write).
"""

from __future__ import annotations

from typing import Union

import msgspec

from ..coordinator.record_batches import Record
from ..coordinator.record_schemas import RecordSchema, field, message, read_version
from . import legacy_records
from .offsets import OffsetChange, OffsetValue
from .snapshot import GroupSnapshot, MemberSnapshot

OFFSETS_TOPIC = "__consumer_offsets"

OFFSET_COMMIT_TYPES = (0, 1)  # the key's record type; Kafka writes 1, 0 is from before 0.10
OFFSET_COMMIT_TYPE = 1
GROUP_METADATA_TYPE = 2
OFFSET_VALUE_VERSION = 3
OFFSET_VALUE_VERSION_WITH_EXPIRY = 1  # the only version with expireTimestamp (and none of leaderEpoch)
GROUP_VALUE_VERSION = 3

OFFSET_COMMIT_KEY = RecordSchema(
    message(
        "OffsetCommitKey",
        "0-1",
        "none",
        [field("group", "string", "0-1"), field("topic", "string", "0-1"), field("partition", "int32", "0-1")],
    )
)
OFFSET_COMMIT_VALUE = RecordSchema(
    message(
        "OffsetCommitValue",
        "0-4",
        "4+",
        [
            field("offset", "int64", "0+"),
            field("leaderEpoch", "int32", "3+", default=-1),
            field("metadata", "string", "0+"),
            field("commitTimestamp", "int64", "0+"),
            field("expireTimestamp", "int64", "1", default=-1),
        ],
    )
)
GROUP_METADATA_KEY = RecordSchema(message("GroupMetadataKey", "2", "none", [field("group", "string", "2")]))
GROUP_METADATA_VALUE = RecordSchema(
    message(
        "GroupMetadataValue",
        "0-4",
        "4+",
        [
            field("protocolType", "string", "0+"),
            field("generation", "int32", "0+"),
            field("protocol", "string", "0+", nullable="0+"),
            field("leader", "string", "0+", nullable="0+"),
            field("currentStateTimestamp", "int64", "2+", default=-1),
            field(
                "members",
                "[]MemberMetadata",
                "0+",
                fields=[
                    field("memberId", "string", "0+"),
                    field("groupInstanceId", "string", "3+", default="null", nullable="3+"),
                    field("clientId", "string", "0+"),
                    field("clientHost", "string", "0+"),
                    field("rebalanceTimeout", "int32", "1+", default=-1),
                    field("sessionTimeout", "int32", "0+"),
                    field("subscription", "bytes", "0+"),
                    field("assignment", "bytes", "0+"),
                ],
            ),
        ],
    )
)
_Member = GROUP_METADATA_VALUE.struct("MemberMetadata")


class OffsetKey(msgspec.Struct, frozen=True):
    group: str
    topic: str
    partition: int


class GroupKey(msgspec.Struct, frozen=True):
    group: str


Key = Union[OffsetKey, GroupKey]


def offset_key(group: str, topic: str, partition: int) -> bytes:
    return OFFSET_COMMIT_KEY.encode(OFFSET_COMMIT_TYPE, group=group, topic=topic, partition=partition)


def group_key(group: str) -> bytes:
    return GROUP_METADATA_KEY.encode(GROUP_METADATA_TYPE, group=group)


def offset_value(value: OffsetValue) -> bytes:
    if value.expire_timestamp_ms >= 0:
        return OFFSET_COMMIT_VALUE.encode(
            OFFSET_VALUE_VERSION_WITH_EXPIRY,
            offset=value.offset,
            metadata=value.metadata,
            commit_timestamp=value.commit_timestamp_ms,
            expire_timestamp=value.expire_timestamp_ms,
        )
    return OFFSET_COMMIT_VALUE.encode(
        OFFSET_VALUE_VERSION,
        offset=value.offset,
        leader_epoch=value.leader_epoch,
        metadata=value.metadata,
        commit_timestamp=value.commit_timestamp_ms,
    )


def group_value(snapshot: GroupSnapshot) -> bytes:
    """Kafka's GroupMetadataValue of a group (its id is in the key)."""
    return GROUP_METADATA_VALUE.encode(
        GROUP_VALUE_VERSION,
        protocol_type=snapshot.protocol_type or "",
        generation=snapshot.generation_id,
        protocol=snapshot.protocol_name,
        leader=snapshot.leader_id,
        current_state_timestamp=-1
        if snapshot.current_state_timestamp_ms is None
        else snapshot.current_state_timestamp_ms,
        members=[
            _Member(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout=m.rebalance_timeout_ms,
                session_timeout=m.session_timeout_ms,
                subscription=m.subscription,
                assignment=m.assignment,
            )
            for m in snapshot.members
        ],
    )


def offset_records(changes: list[OffsetChange]) -> list[Record]:
    """The records of offset changes (a None value: the offset's tombstone)."""
    return [
        (offset_key(group, topic, partition), None if value is None else offset_value(value))
        for group, topic, partition, value in changes
    ]


def decode_key(data: bytes) -> Key | None:
    """The key of a record; None for a record type this coordinator does not keep."""
    if legacy_records.is_legacy(data):
        legacy = legacy_records.decode_key(data)
        return GroupKey(legacy) if isinstance(legacy, str) else OffsetKey(*legacy)
    record_type = read_version(data, "__consumer_offsets key")
    if record_type in OFFSET_COMMIT_TYPES:
        _, key = OFFSET_COMMIT_KEY.decode(data)
        return OffsetKey(key.group, key.topic, key.partition)
    if record_type == GROUP_METADATA_TYPE:
        _, key = GROUP_METADATA_KEY.decode(data)
        return GroupKey(key.group)
    return None


def decode_offset(data: bytes) -> OffsetValue:
    if legacy_records.is_legacy(data):
        return legacy_records.decode_offset(data)
    _, value = OFFSET_COMMIT_VALUE.decode(data)
    return OffsetValue(value.offset, value.leader_epoch, value.metadata, value.commit_timestamp, value.expire_timestamp)


def decode_group(group_id: str, data: bytes) -> GroupSnapshot:
    """A group's snapshot from its GroupMetadataValue, read as Kafka's ClassicGroup.fromRecord
    does: an empty protocol type and a -1 timestamp mean none, a rebalance timeout of -1
    (versions before 1) is the session timeout."""
    if legacy_records.is_legacy(data):
        return legacy_records.decode_group(data)
    _, value = GROUP_METADATA_VALUE.decode(data)
    return GroupSnapshot(
        group_id=group_id,
        protocol_type=value.protocol_type or None,
        generation_id=value.generation,
        protocol_name=value.protocol,
        leader_id=value.leader,
        current_state_timestamp_ms=None if value.current_state_timestamp == -1 else value.current_state_timestamp,
        members=tuple(
            MemberSnapshot(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout_ms=m.session_timeout if m.rebalance_timeout == -1 else m.rebalance_timeout,
                session_timeout_ms=m.session_timeout,
                subscription=bytes(m.subscription),
                assignment=bytes(m.assignment),
            )
            for m in value.members
        ),
    )


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
