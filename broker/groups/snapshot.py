"""A classic group's durable state: the fields of Kafka's GroupMetadataValue, which
`offsets_records` writes to and reads from `__consumer_offsets`."""

from __future__ import annotations

import msgspec


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
    group_id: str
    protocol_type: str | None
    generation_id: int
    protocol_name: str | None
    leader_id: str | None
    current_state_timestamp_ms: int | None
    members: tuple[MemberSnapshot, ...] = ()
