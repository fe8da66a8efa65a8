"""Leader elections and ISR fencing: what the controller decides for one partition, given the
live brokers. Pure functions of (state, live set), so every case is a unit test.

Kafka's rules (KRaft): a dead broker leaves the ISR; a dead leader is replaced by the first
live replica (in assignment order) that is in the ISR, with a leader-epoch bump; with no
such replica the partition goes offline (leader -1) and keeps its last ISR, so only those
replicas can lead again, unless unclean election is enabled, which picks any live replica
and may lose acknowledged records.
"""

from __future__ import annotations

from collections.abc import Collection

import msgspec

from ..metadata.records import NO_LEADER, PartitionStateRecord


def elect(state: PartitionStateRecord, live: Collection[int], unclean: bool) -> tuple[int, bool]:
    """(new leader, whether the election was unclean); NO_LEADER when nobody is eligible."""
    for replica in state.replicas:
        if replica in state.isr and replica in live:
            return replica, False
    if unclean:
        for replica in state.replicas:
            if replica in live:
                return replica, True
    return NO_LEADER, False


def reconcile(state: PartitionStateRecord, live: Collection[int], unclean: bool) -> PartitionStateRecord | None:
    """The state after fencing dead brokers, or None when nothing changes."""
    live_isr = [r for r in state.isr if r in live]
    if state.leader in live:
        if live_isr == state.isr:
            return None
        return changed(state, isr=live_isr)
    leader, was_unclean = elect(state, live, unclean)
    if leader == NO_LEADER:
        if state.leader == NO_LEADER:
            return None
        # keep the ISR: its members hold every acknowledged record and may lead when back
        return changed(state, leader=NO_LEADER, leader_epoch=state.leader_epoch + 1)
    return changed(state, leader=leader, leader_epoch=state.leader_epoch + 1, isr=[leader] if was_unclean else live_isr)


def preferred_leader(state: PartitionStateRecord, live: Collection[int]) -> PartitionStateRecord | None:
    """Move leadership back to the first replica when it is live and in sync."""
    preferred = state.replicas[0]
    if state.leader == preferred or preferred not in live or preferred not in state.isr:
        return None
    return changed(state, leader=preferred, leader_epoch=state.leader_epoch + 1)


def changed(state: PartitionStateRecord, **fields: object) -> PartitionStateRecord:
    """A copy with `fields` replaced and the partition epoch bumped."""
    return msgspec.structs.replace(state, partition_epoch=state.partition_epoch + 1, **fields)
