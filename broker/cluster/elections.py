"""Leader elections and ISR fencing: what the controller decides for one partition, given the
live brokers. Pure functions of (state, live set), so every case is a unit test.

Kafka's rules (KRaft): a dead broker leaves the ISR; a dead leader is replaced by the first
live replica (in assignment order) that is in the ISR, with a leader-epoch bump; with no
such replica the partition goes offline (leader -1) and keeps its last ISR, so only those
replicas can lead again, unless unclean election is enabled, which picks any live replica
and may lose acknowledged records.

A draining broker (in controlled shutdown: live, still serving and replicating) stays in the
ISR but is no leader candidate while another live ISR member is: a partition it leads moves
to the first non-draining live ISR replica, as if it had left, and one whose only live ISR
member it is stays with it (nothing else can take it without losing records).
"""

from __future__ import annotations

from collections.abc import Collection

import msgspec

from ..metadata.records import NO_LEADER, PartitionStateRecord


def elect(
    state: PartitionStateRecord, live: Collection[int], unclean: bool, draining: Collection[int] = ()
) -> tuple[int, bool]:
    """(new leader, whether the election was unclean); NO_LEADER when nobody is eligible.
    Draining brokers are chosen only when no other live ISR member is there."""
    for replica in state.replicas:
        if replica in state.isr and replica in live and replica not in draining:
            return replica, False
    for replica in state.replicas:
        if replica in state.isr and replica in live:
            return replica, False
    if unclean:
        for replica in state.replicas:
            if replica in live:
                return replica, True
    return NO_LEADER, False


def reconcile(
    state: PartitionStateRecord, live: Collection[int], unclean: bool, draining: Collection[int] = ()
) -> PartitionStateRecord | None:
    """The state after fencing dead brokers and moving leadership off draining ones, or None
    when nothing changes."""
    live_isr = [r for r in state.isr if r in live]
    if state.leader in live and state.leader in draining:
        successor = movable_to(state, live, draining)
        if successor is not None:
            return changed(state, leader=successor, leader_epoch=state.leader_epoch + 1, isr=live_isr)
    if state.leader in live:
        if live_isr == state.isr:
            return None
        return changed(state, isr=live_isr)
    leader, was_unclean = elect(state, live, unclean, draining)
    if leader == NO_LEADER:
        if state.leader == NO_LEADER:
            return None
        # keep the ISR: its members hold every acknowledged record and may lead when back
        return changed(state, leader=NO_LEADER, leader_epoch=state.leader_epoch + 1)
    return changed(state, leader=leader, leader_epoch=state.leader_epoch + 1, isr=[leader] if was_unclean else live_isr)


def movable_to(state: PartitionStateRecord, live: Collection[int], draining: Collection[int]) -> int | None:
    """The replica that would take over from the leader if it were draining: the first live,
    in-sync, non-draining replica other than the leader; None when there is none."""
    for replica in state.replicas:
        if replica != state.leader and replica in state.isr and replica in live and replica not in draining:
            return replica
    return None


def preferred_leader(
    state: PartitionStateRecord, live: Collection[int], draining: Collection[int] = ()
) -> PartitionStateRecord | None:
    """Move leadership back to the first replica when it is live, in sync and not draining."""
    preferred = state.replicas[0]
    if state.leader == preferred or preferred not in live or preferred not in state.isr or preferred in draining:
        return None
    return changed(state, leader=preferred, leader_epoch=state.leader_epoch + 1)


def changed(state: PartitionStateRecord, **fields: object) -> PartitionStateRecord:
    """A copy with `fields` replaced and the partition epoch bumped."""
    return msgspec.structs.replace(state, partition_epoch=state.partition_epoch + 1, **fields)
