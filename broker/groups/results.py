"""What the classic membership state machine hands back: answers to JoinGroup, SyncGroup and
LeaveGroup, the `Pending` token of a parked request, and the read-only views DescribeGroups
shows. Plain values, so handlers and the coordinator use them without the state machine."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

NO_GENERATION = -1


@dataclass(frozen=True, eq=False)
class Pending:
    """A parked JoinGroup or SyncGroup; the driver maps it to a future. Compared by identity."""

    request_id: int
    kind: str  # "join" | "sync"


class JoinMember(NamedTuple):
    """One entry of the JoinGroup response's member list (sent to the leader only)."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True)
class JoinResult:
    error_code: int
    member_id: str
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    members: tuple[JoinMember, ...] = ()


@dataclass(frozen=True)
class SyncResult:
    error_code: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True)
class LeaveResult:
    """``error_code`` is the response's top-level error; ``member_errors`` one per leaving member."""

    error_code: int
    member_errors: tuple[int, ...]


@dataclass(frozen=True)
class MemberView:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes | None  # None: not assigned in the current generation yet
    awaiting_join: bool
    awaiting_sync: bool
    heartbeat_deadline_ms: int | None


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupDescription:
    """What DescribeGroups returns for a classic group (Kafka ``GroupMetadata.summary``)."""

    state: str
    protocol_type: str
    protocol_name: str
    members: tuple[MemberDescription, ...]
