"""Consumer groups: the classic membership/rebalance state machine (`membership`)."""

from broker.groups.membership import (
    DEAD_GROUP_DESCRIPTION,
    GROUP_MAX_SIZE_REACHED,
    NO_GENERATION,
    SNAPSHOT_VERSION,
    UNKNOWN_MEMBER_ID,
    VALID_PREVIOUS_STATES,
    ClassicGroup,
    GroupConfig,
    GroupDescription,
    GroupSnapshot,
    GroupState,
    IllegalGroupTransition,
    JoinMember,
    JoinResult,
    LeaveResult,
    MemberDescription,
    MemberSnapshot,
    MemberView,
    Pending,
    SyncResult,
    UnknownGroupSnapshotVersionError,
    decode_snapshot,
    encode_snapshot,
)

__all__ = [
    "DEAD_GROUP_DESCRIPTION", "GROUP_MAX_SIZE_REACHED", "NO_GENERATION", "SNAPSHOT_VERSION",
    "UNKNOWN_MEMBER_ID", "VALID_PREVIOUS_STATES", "ClassicGroup", "GroupConfig",
    "GroupDescription", "GroupSnapshot", "GroupState", "IllegalGroupTransition", "JoinMember",
    "JoinResult", "LeaveResult", "MemberDescription", "MemberSnapshot", "MemberView", "Pending",
    "SyncResult", "UnknownGroupSnapshotVersionError", "decode_snapshot", "encode_snapshot",
]
