"""Leader-epoch fencing (KIP-320), the check every read of a partition makes: a client or
follower that names the leader epoch it believes current is answered only in that epoch.
An older epoch is FENCED_LEADER_EPOCH (the asker missed a leader change: refresh metadata),
a newer one UNKNOWN_LEADER_EPOCH (this broker has not seen the change yet: retry). A
negative epoch means the asker does not know one, and is not checked, as in Kafka's
Partition.checkCurrentLeaderEpoch.
"""

from __future__ import annotations

from ..protocol.errors import ApiError, ErrorCode


def check_leader_epoch(current_leader_epoch: int, leader_epoch: int) -> None:
    """Raise the fencing error if `current_leader_epoch` (the asker's) is not `leader_epoch`."""
    if current_leader_epoch < 0 or current_leader_epoch == leader_epoch:
        return
    if current_leader_epoch < leader_epoch:
        raise ApiError(ErrorCode.FENCED_LEADER_EPOCH, f"epoch {current_leader_epoch} < leader epoch {leader_epoch}")
    raise ApiError(ErrorCode.UNKNOWN_LEADER_EPOCH, f"epoch {current_leader_epoch} > leader epoch {leader_epoch}")
