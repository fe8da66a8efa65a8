"""Rack-aware replica placement and the controller's election rules (pure functions)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.cluster.elections import elect, preferred_leader, reconcile
from broker.cluster.placement import assign_replicas, rack_alternated
from broker.metadata.records import NO_LEADER, PartitionStateRecord
from broker.protocol.errors import ApiError, ErrorCode

SIX = [(1, "a"), (2, "b"), (3, "c"), (4, "a"), (5, "b"), (6, "c")]


def state(replicas: list[int], leader: int, isr: list[int], epoch: int = 5) -> PartitionStateRecord:
    return PartitionStateRecord(1, replicas, leader, epoch, isr, 7)


def test_brokers_alternate_azs() -> None:
    assert rack_alternated(SIX) == [(1, "a"), (2, "b"), (3, "c"), (4, "a"), (5, "b"), (6, "c")]
    assert rack_alternated([(3, "b"), (1, "a"), (2, "a")]) == [(1, "a"), (3, "b"), (2, "a")]


def test_every_partition_gets_one_replica_per_az_and_leaders_spread() -> None:
    assignment = assign_replicas(range(60), 3, SIX)
    azs = dict(SIX)
    for replicas in assignment.values():
        assert len(set(replicas)) == 3 and {azs[r] for r in replicas} == {"a", "b", "c"}
    leaders = Counter(replicas[0] for replicas in assignment.values())
    assert set(leaders.values()) == {10}


def test_more_replicas_than_azs_spread_over_brokers() -> None:
    assignment = assign_replicas(range(4), 3, [(1, "a"), (2, "a"), (3, "b"), (4, "b")])
    for replicas in assignment.values():
        assert len(set(replicas)) == 3
        assert {{1: "a", 2: "a", 3: "b", 4: "b"}[r] for r in replicas} == {"a", "b"}, "both AZs used"


@pytest.mark.parametrize("factor, message", [(0, "larger than 0"), (4, "larger than available brokers: 3")])
def test_impossible_replication_factors(factor: int, message: str) -> None:
    with pytest.raises(ApiError) as err:
        assign_replicas(range(1), factor, SIX[:3])
    assert err.value.code == ErrorCode.INVALID_REPLICATION_FACTOR and message in err.value.message


@given(
    brokers=st.lists(
        st.tuples(st.integers(0, 50), st.sampled_from(["a", "b", "c", None])),
        min_size=1,
        max_size=12,
        unique_by=lambda b: b[0],
    ),
    partitions=st.integers(1, 40),
    start=st.integers(0, 100),
    data=st.data(),
)
def test_assignment_properties(brokers, partitions, start, data) -> None:  # type: ignore[no-untyped-def]
    """Every partition gets `factor` distinct brokers spanning min(factor, AZs) AZs, and
    leadership is as even as it can be: counted over every broker (those leading nothing
    included), any two brokers lead a number of partitions differing by at most one."""
    factor = data.draw(st.integers(1, len(brokers)))
    assignment = assign_replicas(range(partitions), factor, brokers, start=start)
    assert sorted(assignment) == list(range(partitions))
    azs = dict(brokers)
    distinct_azs = len(set(azs.values()))
    for replicas in assignment.values():
        assert len(replicas) == factor and len(set(replicas)) == factor and set(replicas) <= set(azs)
        assert len({azs[r] for r in replicas}) == min(factor, distinct_azs)
    leaders = Counter(replicas[0] for replicas in assignment.values())
    led = [leaders.get(node_id, 0) for node_id, _az in brokers]
    assert max(led) - min(led) <= 1, f"partitions led per broker: {dict(zip(azs, led))}"


def test_dead_leader_is_replaced_by_the_first_live_isr_member_with_an_epoch_bump() -> None:
    new = reconcile(state([1, 2, 3], leader=1, isr=[1, 2, 3]), live={2, 3}, unclean=False)
    assert new == PartitionStateRecord(1, [1, 2, 3], 2, 6, [2, 3], 8)


def test_dead_follower_leaves_the_isr_without_an_epoch_bump() -> None:
    new = reconcile(state([1, 2, 3], leader=1, isr=[1, 2, 3]), live={1, 2}, unclean=False)
    assert new is not None and (new.leader, new.leader_epoch, new.isr) == (1, 5, [1, 2])
    assert reconcile(new, live={1, 2}, unclean=False) is None, "stable once applied"


def test_no_live_isr_member_goes_offline_keeping_the_isr_then_returns() -> None:
    offline = reconcile(state([1, 2, 3], leader=1, isr=[1]), live={2, 3}, unclean=False)
    assert offline is not None and (offline.leader, offline.leader_epoch, offline.isr) == (NO_LEADER, 6, [1])
    assert reconcile(offline, live={2, 3}, unclean=False) is None
    back = reconcile(offline, live={1, 2, 3}, unclean=False)
    assert back is not None and (back.leader, back.leader_epoch, back.isr) == (1, 7, [1])


def test_unclean_election_picks_a_live_replica_and_resets_the_isr() -> None:
    new = reconcile(state([1, 2, 3], leader=1, isr=[1]), live={3}, unclean=True)
    assert new is not None and (new.leader, new.isr) == (3, [3])
    assert elect(state([1, 2, 3], leader=1, isr=[1]), live={3}, unclean=False) == (NO_LEADER, False)


def test_preferred_leader_returns_only_when_alive_and_in_sync() -> None:
    current = state([1, 2, 3], leader=2, isr=[2, 3])
    assert preferred_leader(current, live={1, 2, 3}) is None, "1 is not in sync"
    back = preferred_leader(state([1, 2, 3], leader=2, isr=[1, 2, 3]), live={1, 2, 3})
    assert back is not None and (back.leader, back.leader_epoch) == (1, 6)
    assert preferred_leader(state([1, 2, 3], leader=1, isr=[1, 2, 3]), live={1, 2, 3}) is None


@given(
    replicas=st.permutations([1, 2, 3, 4]),
    isr_mask=st.lists(st.booleans(), min_size=4, max_size=4),
    live=st.sets(st.sampled_from([1, 2, 3, 4])),
    leader_alive=st.booleans(),
)
def test_reconcile_never_elects_outside_a_clean_isr(replicas, isr_mask, live, leader_alive) -> None:  # type: ignore[no-untyped-def]
    leader = replicas[0]
    isr = [leader] + [r for r, keep in zip(replicas[1:], isr_mask) if keep]
    live = set(live) | {leader} if leader_alive else set(live) - {leader}
    before = state(list(replicas), leader, isr)
    after = reconcile(before, live, unclean=False) or before
    if after.leader != NO_LEADER:
        assert after.leader in before.isr and after.leader in live and after.leader in after.isr
        assert set(after.isr) <= set(before.isr) and set(after.isr) <= live
    assert after.leader_epoch >= before.leader_epoch
    assert (after.leader != before.leader) == (after.leader_epoch == before.leader_epoch + 1)


def test_a_draining_leader_hands_over_to_the_first_live_in_sync_replica_and_stays_in_the_isr() -> None:
    """Controlled shutdown: the draining broker is live but ineligible; its partition moves
    as if it had left (first non-draining live ISR member, epoch bump), and it keeps its ISR
    place, since it still replicates until it stops."""
    new = reconcile(state([1, 2, 3], leader=1, isr=[1, 2, 3]), live={1, 2, 3}, unclean=False, draining={1})
    assert new == PartitionStateRecord(1, [1, 2, 3], 2, 6, [1, 2, 3], 8)
    assert reconcile(new, live={1, 2, 3}, unclean=False, draining={1}) is None, "stable once applied"
    skip_out_of_sync = reconcile(state([1, 2, 3], leader=1, isr=[1, 3]), live={1, 2, 3}, unclean=False, draining={1})
    assert skip_out_of_sync is not None and skip_out_of_sync.leader == 3
    skip_draining = reconcile(state([1, 2, 3], leader=1, isr=[1, 2, 3]), {1, 2, 3}, False, draining={1, 2})
    assert skip_draining is not None and skip_draining.leader == 3


def test_a_draining_leader_with_no_other_live_in_sync_replica_keeps_its_partition() -> None:
    assert reconcile(state([1, 2, 3], leader=1, isr=[1]), live={1, 2, 3}, unclean=False, draining={1}) is None
    fenced = reconcile(state([1, 2, 3], leader=1, isr=[1, 2]), live={1, 3}, unclean=False, draining={1})
    assert fenced == PartitionStateRecord(1, [1, 2, 3], 1, 5, [1], 8), "a dead follower still leaves the ISR"
    assert reconcile(state([1], leader=1, isr=[1]), live={1}, unclean=True, draining={1}) is None, "never unclean"
    both = reconcile(state([1, 2, 3], leader=1, isr=[1, 2]), live={1, 2, 3}, unclean=False, draining={1, 2})
    assert both is None, "every other in-sync replica drains too"


def test_a_dead_leader_prefers_a_non_draining_successor_but_takes_a_draining_one_over_going_offline() -> None:
    dead = state([1, 2, 3], leader=1, isr=[1, 2, 3])
    new = reconcile(dead, live={2, 3}, unclean=False, draining={2})
    assert new is not None and (new.leader, new.isr) == (3, [2, 3])
    last_resort = reconcile(state([1, 2, 3], leader=1, isr=[1, 2]), live={2, 3}, unclean=False, draining={2})
    assert last_resort is not None and last_resort.leader == 2
    assert elect(dead, live={2, 3}, unclean=False, draining={2, 3}) == (2, False)


def test_leadership_never_returns_to_a_draining_preferred_replica() -> None:
    current = state([1, 2, 3], leader=2, isr=[1, 2, 3])
    assert preferred_leader(current, live={1, 2, 3}, draining={1}) is None
    assert preferred_leader(current, live={1, 2, 3}, draining={3}) is not None


@given(
    replicas=st.permutations([1, 2, 3, 4]),
    isr_mask=st.lists(st.booleans(), min_size=4, max_size=4),
    live=st.sets(st.sampled_from([1, 2, 3, 4])),
    draining=st.sets(st.sampled_from([1, 2, 3, 4])),
)
def test_reconcile_moves_off_draining_leaders_only_within_the_isr(replicas, isr_mask, live, draining) -> None:  # type: ignore[no-untyped-def]
    leader = replicas[0]
    isr = [leader] + [r for r, keep in zip(replicas[1:], isr_mask) if keep]
    live = set(live) | {leader}
    before = state(list(replicas), leader, isr)
    after = reconcile(before, live, unclean=False, draining=draining) or before
    assert after.leader in before.isr and after.leader in live
    eligible = [r for r in before.isr if r in live and r not in draining]
    if leader in draining and eligible:
        assert after.leader in eligible and after.leader_epoch == before.leader_epoch + 1
    if leader not in draining:
        assert after.leader == leader, "a live leader that is not draining keeps its partition"
    assert set(after.isr) == set(before.isr) & live, "draining brokers keep their ISR place"
