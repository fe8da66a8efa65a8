"""Consumer groups: the classic membership/rebalance state machine (`membership`) with its
settings (`membership_config`), answers (`results`) and durable snapshot (`snapshot`)."""

from broker.groups.membership import (
    DEAD_GROUP_DESCRIPTION,
    GROUP_MAX_SIZE_REACHED,
    UNKNOWN_MEMBER_ID,
    VALID_PREVIOUS_STATES,
    ClassicGroup,
    GroupState,
    IllegalGroupTransition,
)
from broker.groups.membership_config import GroupConfig
from broker.groups.results import (
    NO_GENERATION,
    GroupDescription,
    JoinMember,
    JoinResult,
    LeaveResult,
    MemberDescription,
    MemberView,
    Pending,
    SyncResult,
)
from broker.groups.snapshot import GroupSnapshot, MemberSnapshot

__all__ = [
    "DEAD_GROUP_DESCRIPTION",
    "GROUP_MAX_SIZE_REACHED",
    "NO_GENERATION",
    "UNKNOWN_MEMBER_ID",
    "VALID_PREVIOUS_STATES",
    "ClassicGroup",
    "GroupConfig",
    "GroupDescription",
    "GroupSnapshot",
    "GroupState",
    "IllegalGroupTransition",
    "JoinMember",
    "JoinResult",
    "LeaveResult",
    "MemberDescription",
    "MemberSnapshot",
    "MemberView",
    "Pending",
    "SyncResult",
]
