"""Kafka-style replication.

The state machines re-exported here are pure (no sockets, no asyncio, time passed in):
`epochs` is the persisted leader-epoch cache, `leader_state` the leader's view of its
followers (ISR, high watermark), `divergence` the leader- and follower-side halves of
KIP-320 log truncation. The modules that call them own the I/O and the clock.
"""

from broker.replication.divergence import check_fetch_position, truncation_offset
from broker.replication.epochs import (
    CHECKPOINT_FILE,
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochCheckpointError,
    EpochEntry,
    LeaderEpochCache,
)
from broker.replication.leader_state import UNKNOWN_OFFSET, LeaderState

__all__ = [
    "CHECKPOINT_FILE", "EpochCheckpointError", "EpochEntry", "LeaderEpochCache", "LeaderState",
    "UNDEFINED_EPOCH", "UNDEFINED_EPOCH_OFFSET", "UNKNOWN_OFFSET", "check_fetch_position",
    "truncation_offset",
]
