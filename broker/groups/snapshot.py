"""A classic group's durable state (the fields of Kafka's GroupMetadataValue) and its codec:
versioned msgpack, so a broker refuses a snapshot written by a newer format instead of
misreading it."""

from __future__ import annotations

import msgspec

SNAPSHOT_VERSION = 1
SUPPORTED_SNAPSHOT_VERSIONS = frozenset({1})


class MemberSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes  # the member's metadata for the group's protocol
    assignment: bytes


class GroupSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    version: int = SNAPSHOT_VERSION
    group_id: str
    protocol_type: str | None
    generation_id: int
    protocol_name: str | None
    leader_id: str | None
    current_state_timestamp_ms: int | None
    members: tuple[MemberSnapshot, ...] = ()


class _VersionOnly(msgspec.Struct):
    version: int


class UnknownGroupSnapshotVersionError(ValueError):
    """The snapshot was written by a format version this broker does not know."""


def encode_snapshot(snapshot: GroupSnapshot) -> bytes:
    return msgspec.msgpack.encode(snapshot)


def decode_snapshot(data: bytes) -> GroupSnapshot:
    """Decode a snapshot; unknown versions are rejected before the body is interpreted."""
    version = msgspec.msgpack.decode(data, type=_VersionOnly).version
    if version not in SUPPORTED_SNAPSHOT_VERSIONS:
        raise UnknownGroupSnapshotVersionError(
            f"group snapshot version {version} is not supported (known: {sorted(SUPPORTED_SNAPSHOT_VERSIONS)})"
        )
    return msgspec.msgpack.decode(data, type=GroupSnapshot)
