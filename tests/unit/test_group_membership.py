"""Classic group membership: Kafka's JoinGroup/SyncGroup/Heartbeat/LeaveGroup semantics."""

from __future__ import annotations

import uuid

import pytest

from broker.groups import (
    GROUP_MAX_SIZE_REACHED,
    ClassicGroup,
    GroupConfig,
    GroupSnapshot,
    GroupState,
    IllegalGroupTransition,
    JoinResult,
    Pending,
    SyncResult,
)
from broker.groups.offsets_records import decode_group, group_value
from broker.protocol.errors import ErrorCode
from tests.unit.group_membership_support import (
    REBALANCE_MS,
    SESSION_MS,
    advance,
    completions,
    heartbeat,
    join,
    make_group,
    sync,
)

E = ErrorCode


def random_id() -> str:
    """Member ids for reloaded groups, random as the broker's (Environment.new_uuid)."""
    return str(uuid.uuid4())


def form_group(n: int = 3, *, instances=None, skip=False):
    """n members join an Empty group and complete generation 1; returns (group, clock, results)."""
    group, clock = make_group()
    tokens = []
    for i in range(n):
        iid = instances[i] if instances else None
        res = join(group, clock, client=f"c{i}", tag=f"m{i}", instance=iid, skip=skip)
        assert isinstance(res, Pending)
        tokens.append(res)
    assert group.state is GroupState.PREPARING_REBALANCE
    done = advance(group, clock, 10_000)
    results = [done[t] for t in tokens]
    assert all(isinstance(r, JoinResult) and r.error_code == E.NONE for r in results)
    return group, clock, results


def complete_sync(group, clock, results, assignment_of=lambda mid: f"assign:{mid}".encode()):
    """Followers sync first (parked), then the leader; returns member_id -> SyncResult."""
    leader = results[0].leader
    gen = results[0].generation_id
    parked = {}
    for r in results:
        if r.member_id != leader:
            p = sync(group, clock, r.member_id, gen)
            assert isinstance(p, Pending)
            parked[p] = r.member_id
    member_ids = [r.member_id for r in results]
    leader_res = sync(group, clock, leader, gen, assignments={mid: assignment_of(mid) for mid in member_ids})
    assert isinstance(leader_res, SyncResult)
    out = {leader: leader_res}
    for p, res in completions(group).items():
        out[parked[p]] = res
    return out


# ---- the happy path ----------------------------------------------------------------------------


def test_three_members_join_one_generation_leader_gets_all_metadata():
    group, clock, results = form_group(3)
    assert group.state is GroupState.COMPLETING_REBALANCE
    assert {r.generation_id for r in results} == {1}
    leader = results[0].leader
    assert leader == results[0].member_id  # the first member to join leads
    assert {r.leader for r in results} == {leader}
    by_id = {r.member_id: r for r in results}
    assert [m.member_id for m in by_id[leader].members] == [r.member_id for r in results]
    assert {m.metadata for m in by_id[leader].members} == {b"range:m0", b"range:m1", b"range:m2"}
    for r in results:
        if r.member_id != leader:
            assert r.members == ()
        assert r.protocol_type == "consumer" and r.protocol_name == "range"
    assert all(r.member_id.startswith(f"c{i}-") for i, r in enumerate(results))

    synced = complete_sync(group, clock, results)
    assert group.state is GroupState.STABLE
    for mid, res in synced.items():
        assert res.error_code == E.NONE
        assert res.assignment == f"assign:{mid}".encode()
        assert res.protocol_name == "range"
    # a late SyncGroup in Stable gets the current assignment
    again = sync(group, clock, results[1].member_id, 1)
    assert again.assignment == f"assign:{results[1].member_id}".encode()
    group.check_invariants()


def test_initial_delay_is_extended_for_new_members_up_to_rebalance_timeout():
    group, clock = make_group()
    p1 = join(group, clock, client="a")
    advance(group, clock, 2_000)
    p2 = join(group, clock, client="b")
    assert advance(group, clock, 1_000) == {}  # 3000: a new member arrived, delay extended
    done = advance(group, clock, 3_000)  # 6000
    assert set(done) == {p1, p2}


def test_leader_sync_fills_missing_members_with_empty_assignment_and_stores():
    group, clock, results = form_group(2)
    leader, other = results[0].member_id, results[1].member_id
    res = sync(group, clock, leader, 1, assignments={leader: b"L", "stranger": b"?"})
    assert res.assignment == b"L"
    assert group.member(other).assignment == b""
    snap = group.take_store_request()
    assert snap is not None and snap.generation_id == 1
    assert {m.member_id: m.assignment for m in snap.members} == {leader: b"L", other: b""}
    assert group.take_store_request() is None


def test_late_joiner_triggers_rebalance():
    group, clock, results = form_group(2)
    complete_sync(group, clock, results)
    newcomer = join(group, clock, client="late", tag="late")
    assert isinstance(newcomer, Pending)
    assert group.state is GroupState.PREPARING_REBALANCE
    ids = [r.member_id for r in results]
    assert heartbeat(group, clock, ids[0], 1) == E.REBALANCE_IN_PROGRESS
    assert isinstance(join(group, clock, member_id=ids[0], tag="m0"), Pending)
    last = join(group, clock, member_id=ids[1], tag="m1")
    # everyone rejoined: the rebalance completes at once, the last joiner is answered directly
    assert isinstance(last, JoinResult) and last.generation_id == 2
    others = completions(group)
    assert {r.generation_id for r in others.values()} == {2}
    assert others[newcomer].leader == ids[0]
    assert group.state is GroupState.COMPLETING_REBALANCE and group.size == 3


def test_killed_member_is_removed_after_session_timeout_and_survivors_get_new_generation():
    group, clock, results = form_group(3)
    complete_sync(group, clock, results)
    alive = [r.member_id for r in results[:2]]
    dead = results[2].member_id
    for _ in range(2):
        advance(group, clock, 4_000)
        assert all(heartbeat(group, clock, m, 1) == E.NONE for m in alive)
    advance(group, clock, 4_000)  # 12s since the last sign of life of the dead member
    assert group.member(dead) is None
    assert group.state is GroupState.PREPARING_REBALANCE
    assert heartbeat(group, clock, alive[1], 1) == E.REBALANCE_IN_PROGRESS
    p = join(group, clock, member_id=alive[0], tag="m0")
    r = join(group, clock, member_id=alive[1], tag="m1")
    assert isinstance(p, Pending) and r.generation_id == 2
    leader_res = completions(group)[p]
    assert leader_res.generation_id == 2 and len(leader_res.members) == 2


def test_member_that_does_not_rejoin_within_rebalance_timeout_is_removed():
    group, clock, results = form_group(2)
    complete_sync(group, clock, results)
    a, b = (r.member_id for r in results)
    p = join(group, clock, member_id=a, tag="m0-new")  # metadata change: rebalance
    assert isinstance(p, Pending)
    # b keeps heartbeating (REBALANCE_IN_PROGRESS) but never rejoins
    for _ in range(7):
        advance(group, clock, 4_000)
        heartbeat(group, clock, b, 1)
    done = advance(group, clock, 4_000)  # past the 30 s rebalance timeout
    assert done[p].generation_id == 2 and done[p].members[0].member_id == a
    assert group.member(b) is None
    assert heartbeat(group, clock, b, 1) == E.UNKNOWN_MEMBER_ID


def test_clean_leave_triggers_immediate_rebalance():
    group, clock, results = form_group(3)
    complete_sync(group, clock, results)
    ids = [r.member_id for r in results]
    res = group.leave(clock.now_ms(), [(ids[2], None)])
    assert res.error_code == E.NONE and res.member_errors == (E.NONE,)
    assert group.state is GroupState.PREPARING_REBALANCE and group.size == 2
    assert isinstance(join(group, clock, member_id=ids[0], tag="m0"), Pending)
    assert join(group, clock, member_id=ids[1], tag="m1").generation_id == 2


def test_batched_leave_reports_per_member_errors():
    group, clock, results = form_group(2, instances=["i0", "i1"])
    complete_sync(group, clock, results)
    a = results[0].member_id
    res = group.leave(clock.now_ms(), [(a, "i0"), ("nobody", None), ("", "i1"), ("", "ghost"), (a, "i0")])
    assert res.member_errors == (E.NONE, E.UNKNOWN_MEMBER_ID, E.NONE, E.UNKNOWN_MEMBER_ID, E.UNKNOWN_MEMBER_ID)
    assert group.state is GroupState.EMPTY and group.size == 0
    assert group.static_member_id("i1") is None


def test_leave_with_fenced_instance_id():
    group, clock, results = form_group(1, instances=["i0"])
    assert group.leave(clock.now_ms(), [("old-id", "i0")]).member_errors == (E.FENCED_INSTANCE_ID,)


def test_all_members_leave_then_new_member_gets_partitions_after_initial_delay_only():
    group, clock, results = form_group(2)
    complete_sync(group, clock, results)
    ids = [r.member_id for r in results]
    group.leave(clock.now_ms(), [(ids[0], None), (ids[1], None)])
    assert group.state is GroupState.EMPTY
    assert group.generation_id == 2  # Kafka bumps the generation when the group empties
    assert group.leader_id is None and group.protocol_name is None
    assert group.take_store_request().members == ()
    assert group.next_deadline_ms() is None

    p = join(group, clock, client="fresh", tag="fresh")
    assert isinstance(p, Pending)
    assert group.next_deadline_ms() == clock.now_ms() + 3_000
    assert advance(group, clock, 2_999) == {}
    done = advance(group, clock, 1)
    res = done[p]
    assert res.generation_id == 3 and res.leader == res.member_id
    assert [m.member_id for m in res.members] == [res.member_id]
    s = sync(group, clock, res.member_id, 3, assignments={res.member_id: b"all"})
    assert s.error_code == E.NONE and s.assignment == b"all"
    assert group.state is GroupState.STABLE
    assert heartbeat(group, clock, res.member_id, 3) == E.NONE


def test_last_member_expiring_empties_group_and_new_member_joins_promptly():
    group, clock, results = form_group(1)
    complete_sync(group, clock, results)
    advance(group, clock, SESSION_MS + 1)
    assert group.state is GroupState.EMPTY and group.generation_id == 2
    p = join(group, clock, client="next")
    done = advance(group, clock, 3_000)
    assert done[p].error_code == E.NONE and done[p].leader == done[p].member_id


# ---- static membership ---------------------------------------------------------------------------


def test_static_member_restart_keeps_place_without_rebalance_and_fences_old_id():
    group, clock, results = form_group(2, instances=["i0", "i1"])
    synced = complete_sync(group, clock, results)
    leader, follower = results[0].member_id, results[1].member_id
    res = join(group, clock, instance="i1", tag="m1")  # restart: unknown member id, same instance
    assert isinstance(res, JoinResult) and res.error_code == E.NONE
    assert res.member_id != follower and res.member_id.startswith("i1-")
    assert res.generation_id == 1 and res.leader == leader and res.members == ()
    assert group.state is GroupState.STABLE and group.generation_id == 1
    assert group.static_member_id("i1") == res.member_id
    # the old id is fenced; without an instance id it is simply unknown
    assert heartbeat(group, clock, follower, 1, instance="i1") == E.FENCED_INSTANCE_ID
    assert heartbeat(group, clock, follower, 1) == E.UNKNOWN_MEMBER_ID
    assert sync(group, clock, follower, 1, instance="i1").error_code == E.FENCED_INSTANCE_ID
    assert join(group, clock, member_id=follower, instance="i1").error_code == E.FENCED_INSTANCE_ID
    # the new id syncs and gets the old assignment
    s = sync(group, clock, res.member_id, 1, instance="i1")
    assert s.assignment == synced[follower].assignment
    stored = group.take_store_request()  # the new member id replaces the old one durably
    assert stored is not None and stored.generation_id == 1
    assert {(m.member_id, m.group_instance_id) for m in stored.members} == {(leader, "i0"), (res.member_id, "i1")}
    assert {m.member_id: m.assignment for m in stored.members}[res.member_id] == synced[follower].assignment


def test_static_leader_restart_before_v9_returns_old_leader_id():
    group, clock, results = form_group(2, instances=["i0", "i1"])
    complete_sync(group, clock, results)
    old_leader = results[0].member_id
    res = join(group, clock, instance="i0", tag="m0")
    assert res.leader == old_leader and res.member_id != old_leader and not res.skip_assignment
    assert group.leader_id == res.member_id  # but the group knows who leads now


def test_static_leader_restart_v9_skips_assignment():
    group, clock, results = form_group(2, instances=["i0", "i1"], skip=True)
    complete_sync(group, clock, results)
    res = join(group, clock, instance="i0", tag="m0", skip=True)
    assert res.skip_assignment and res.leader == res.member_id
    assert len(res.members) == 2 and group.state is GroupState.STABLE


def test_static_rejoin_with_protocol_change_triggers_rebalance():
    group, clock, results = form_group(2, instances=["i0", "i1"])
    complete_sync(group, clock, results)
    res = join(group, clock, instance="i1", names=("roundrobin", "range"), tag="m1")
    # roundrobin is not supported by i0, range is still the only common protocol: no rebalance
    assert isinstance(res, JoinResult) and group.state is GroupState.STABLE


def test_static_rejoin_in_completing_rebalance_restarts_and_fences_parked_sync():
    group, clock, results = form_group(2, instances=["i0", "i1"])
    follower = results[1].member_id
    parked = sync(group, clock, follower, 1, instance="i1")
    assert isinstance(parked, Pending)
    p = join(group, clock, instance="i1", tag="m1")
    assert isinstance(p, Pending)
    assert group.state is GroupState.PREPARING_REBALANCE
    assert completions(group)[parked].error_code == E.FENCED_INSTANCE_ID


def test_absent_static_member_is_kept_through_rebalance_until_session_expiry():
    group, clock, results = form_group(2, instances=["i0", "i1"])
    complete_sync(group, clock, results)
    a, b = results[0].member_id, results[1].member_id
    p = join(group, clock, member_id=a, instance="i0", tag="changed")
    assert isinstance(p, Pending)
    assert heartbeat(group, clock, b, 1, instance="i1") == E.REBALANCE_IN_PROGRESS
    done = advance(group, clock, 5_000)  # b's session (10 s) is still alive...
    assert done == {}
    # b never rejoins: its session expires before the rebalance timeout -> removed, join completes
    done = advance(group, clock, 6_000)
    assert group.member(b) is None
    assert done[p].generation_id == 2 and [m.member_id for m in done[p].members] == [a]


# ---- fencing and validation ------------------------------------------------------------------


def test_stale_generation_gets_illegal_generation():
    group, clock, results = form_group(2)
    complete_sync(group, clock, results)
    a = results[0].member_id
    assert heartbeat(group, clock, a, 0) == E.ILLEGAL_GENERATION
    assert sync(group, clock, a, 7).error_code == E.ILLEGAL_GENERATION


def test_unknown_member_id():
    group, clock, results = form_group(1)
    assert heartbeat(group, clock, "nobody", 1) == E.UNKNOWN_MEMBER_ID
    assert sync(group, clock, "nobody", 1).error_code == E.UNKNOWN_MEMBER_ID
    assert join(group, clock, member_id="nobody").error_code == E.UNKNOWN_MEMBER_ID
    empty, clock2 = make_group()
    assert heartbeat(empty, clock2, "nobody", 0) == E.UNKNOWN_MEMBER_ID


def test_heartbeat_during_rebalance_gets_rebalance_in_progress():
    group, clock, results = form_group(2)
    complete_sync(group, clock, results)
    join(group, clock, client="late")
    assert heartbeat(group, clock, results[1].member_id, 1) == E.REBALANCE_IN_PROGRESS
    assert sync(group, clock, results[1].member_id, 1).error_code == E.REBALANCE_IN_PROGRESS


def test_heartbeat_in_completing_rebalance_is_fine():
    group, clock, results = form_group(2)
    assert heartbeat(group, clock, results[1].member_id, 1) == E.NONE


def test_inconsistent_protocol_type_or_protocols():
    group, clock, results = form_group(1)
    assert join(group, clock, protocol_type="connect").error_code == E.INCONSISTENT_GROUP_PROTOCOL
    assert join(group, clock, names=("sticky",)).error_code == E.INCONSISTENT_GROUP_PROTOCOL
    ok = join(group, clock, names=("sticky", "range"))
    assert isinstance(ok, Pending)
    empty, clock2 = make_group()
    assert join(empty, clock2, protos=[]).error_code == E.INCONSISTENT_GROUP_PROTOCOL
    assert join(empty, clock2, protocol_type="").error_code == E.INCONSISTENT_GROUP_PROTOCOL
    # SyncGroup v5+ checks protocol type and name when given
    a = results[0].member_id
    assert sync(group, clock, a, 1, protocol_type="connect").error_code == E.INCONSISTENT_GROUP_PROTOCOL


def test_sync_protocol_name_mismatch():
    group, clock, results = form_group(1)
    a = results[0].member_id
    assert sync(group, clock, a, 1, protocol_name="rr").error_code == E.INCONSISTENT_GROUP_PROTOCOL
    assert (
        sync(group, clock, a, 1, protocol_type="consumer", protocol_name="range", assignments={a: b"x"}).assignment
        == b"x"
    )


@pytest.mark.parametrize("session_ms,ok", [(5_999, False), (6_000, True), (1_800_000, True), (1_800_001, False)])
def test_session_timeout_bounds(session_ms, ok):
    group, clock = make_group()
    res = join(group, clock, session_ms=session_ms)
    if ok:
        assert isinstance(res, Pending)
    else:
        assert res.error_code == E.INVALID_SESSION_TIMEOUT and group.size == 0


def test_group_max_size_while_preparing_and_stable():
    group, clock = make_group(max_size=2)
    p1, p2 = join(group, clock, client="a"), join(group, clock, client="b")
    full = join(group, clock, client="c")
    assert full.error_code == GROUP_MAX_SIZE_REACHED == 81 and full.member_id == ""
    done = advance(group, clock, 10_000)
    ids = [done[p1].member_id, done[p2].member_id]
    assert join(group, clock, client="d").error_code == GROUP_MAX_SIZE_REACHED
    # existing members are always accepted
    assert isinstance(join(group, clock, member_id=ids[0], tag="other"), Pending)


def test_protocol_selection_by_vote():
    group, clock = make_group()
    p = [
        join(group, clock, client="a", names=("range", "roundrobin")),
        join(group, clock, client="b", names=("roundrobin", "range")),
        join(group, clock, client="c", names=("roundrobin", "sticky", "range")),
    ]
    done = advance(group, clock, 10_000)
    assert {done[t].protocol_name for t in p} == {"roundrobin"}
    leader = next(done[t] for t in p if done[t].members)
    assert {m.metadata for m in leader.members} == {b"roundrobin:x"}


# ---- MEMBER_ID_REQUIRED (KIP-394) -----------------------------------------------------------


def test_member_id_required_two_step_join():
    group, clock = make_group()
    first = join(group, clock, client="k", require_known=True)
    assert first.error_code == E.MEMBER_ID_REQUIRED and first.member_id.startswith("k-")
    assert group.state is GroupState.EMPTY and group.pending_member_ids == {first.member_id}
    p = join(group, clock, member_id=first.member_id, require_known=True)
    assert isinstance(p, Pending) and group.pending_member_ids == frozenset()
    done = advance(group, clock, 3_000)
    assert done[p].member_id == first.member_id and done[p].generation_id == 1


def test_pending_member_blocks_early_completion_until_it_expires():
    group, clock, results = form_group(1)
    complete_sync(group, clock, results)
    a = results[0].member_id
    newcomer = join(group, clock, client="k", require_known=True)
    assert newcomer.error_code == E.MEMBER_ID_REQUIRED
    p = join(group, clock, member_id=a, tag="changed")  # a rebalance with a pending member
    assert isinstance(p, Pending)
    done = advance(group, clock, SESSION_MS)  # the pending member never came back
    assert done[p].generation_id == 2
    assert join(group, clock, member_id=newcomer.member_id).error_code == E.UNKNOWN_MEMBER_ID


def test_pending_member_leave():
    group, clock, results = form_group(1)
    newcomer = join(group, clock, client="k", require_known=True)
    assert group.leave(clock.now_ms(), [(newcomer.member_id, None)]).member_errors == (E.NONE,)
    assert group.pending_member_ids == frozenset()


# ---- parked requests are always answered -----------------------------------------------------


def test_parked_sync_gets_rebalance_in_progress_when_new_rebalance_starts():
    group, clock, results = form_group(2)
    parked = sync(group, clock, results[1].member_id, 1)
    assert isinstance(parked, Pending)
    join(group, clock, client="late")
    assert completions(group)[parked].error_code == E.REBALANCE_IN_PROGRESS
    assert group.state is GroupState.PREPARING_REBALANCE


def test_member_that_never_syncs_is_removed_after_rebalance_timeout():
    group, clock, results = form_group(2)
    leader, follower = results[0].member_id, results[1].member_id
    parked = sync(group, clock, follower, 1)
    done = {}
    for _ in range(8):  # the leader keeps heartbeating but never sends SyncGroup
        done.update(advance(group, clock, 4_000))
        heartbeat(group, clock, follower, 1)
        heartbeat(group, clock, leader, 1)
    assert done[parked].error_code == E.REBALANCE_IN_PROGRESS
    assert group.member(leader) is None and group.state is GroupState.PREPARING_REBALANCE


def test_new_member_parked_join_times_out_with_unknown_member_id():
    group, clock, results = form_group(
        1,
    )
    a = results[0].member_id
    complete_sync(group, clock, results)
    p = join(group, clock, client="slow", rebalance_ms=600_000)
    assert isinstance(p, Pending)
    got = {}
    for _ in range(300_000 // 5_000):
        got.update(advance(group, clock, 5_000))
        heartbeat(group, clock, a, 1)
    assert got[p].error_code == E.UNKNOWN_MEMBER_ID and got[p].member_id == ""


def test_duplicate_join_answers_the_superseded_request():
    group, clock = make_group()
    first = join(group, clock, client="a", require_known=True)
    p1 = join(group, clock, member_id=first.member_id)
    p2 = join(group, clock, member_id=first.member_id)
    assert completions(group)[p1].error_code == E.REBALANCE_IN_PROGRESS
    assert advance(group, clock, 3_000)[p2].error_code == E.NONE


def test_unload_answers_everything_with_not_coordinator():
    group, clock = make_group()
    p = join(group, clock)
    group.unload(clock.now_ms())
    assert completions(group)[p].error_code == E.NOT_COORDINATOR
    assert group.state is GroupState.DEAD and group.next_deadline_ms() is None
    assert heartbeat(group, clock, "x", 0) == E.COORDINATOR_NOT_AVAILABLE
    assert join(group, clock).error_code == E.COORDINATOR_NOT_AVAILABLE
    assert group.leave(clock.now_ms(), [("x", None)]).error_code == E.COORDINATOR_NOT_AVAILABLE
    assert group.describe().state == "Dead"


# ---- describe, offsets, snapshot, transitions ------------------------------------------------


def test_describe_shows_metadata_only_when_stable():
    group, clock, results = form_group(2)
    d = group.describe()
    assert d.state == "CompletingRebalance" and d.protocol_name == ""
    assert all(m.metadata == b"" for m in d.members)
    complete_sync(group, clock, results)
    d = group.describe()
    assert (d.state, d.protocol_type, d.protocol_name) == ("Stable", "consumer", "range")
    assert {m.metadata for m in d.members} == {b"range:m0", b"range:m1"}
    assert all(m.assignment.startswith(b"assign:") and m.client_host == "/10.0.0.1" for m in d.members)
    assert make_group()[0].describe().state == "Empty"


def test_validate_offset_commit():
    group, clock = make_group()
    assert group.validate_offset_commit(0, member_id="", group_instance_id=None, generation_id=-1) == E.NONE
    group, clock, results = form_group(1)
    a = results[0].member_id
    v = lambda **kw: group.validate_offset_commit(clock.now_ms(), **kw)  # noqa: E731
    assert v(member_id=a, group_instance_id=None, generation_id=1) == E.REBALANCE_IN_PROGRESS
    complete_sync(group, clock, results)
    assert v(member_id=a, group_instance_id=None, generation_id=1) == E.NONE
    assert v(member_id=a, group_instance_id=None, generation_id=0) == E.ILLEGAL_GENERATION
    assert v(member_id="", group_instance_id=None, generation_id=-1) == E.UNKNOWN_MEMBER_ID
    assert v(member_id="zz", group_instance_id=None, generation_id=1) == E.UNKNOWN_MEMBER_ID


def test_snapshot_round_trip_and_reload():
    group, clock, results = form_group(3, instances=[None, "i1", None])
    synced = complete_sync(group, clock, results)
    snap = group.to_snapshot()
    back = decode_group(group.group_id, group_value(snap))  # through its __consumer_offsets record
    assert back == snap and isinstance(back, GroupSnapshot)
    assert back.generation_id == 1 and back.protocol_name == "range"
    assert back.leader_id == results[0].member_id

    clock.advance(60_000)  # coordinator failover: far past every old session deadline
    loaded = ClassicGroup.from_snapshot(back, GroupConfig(), clock.now_ms(), new_uuid=random_id)
    assert loaded.state is GroupState.STABLE and loaded.generation_id == 1
    assert loaded.leader_id == group.leader_id
    assert loaded.static_member_id("i1") == results[1].member_id
    for r in results:
        assert heartbeat(loaded, clock, r.member_id, 1) == E.NONE
        s = sync(loaded, clock, r.member_id, 1)
        assert s.assignment == synced[r.member_id].assignment
    assert loaded.describe() == group.describe()
    # a member that does not heartbeat after the reload expires on its fresh deadline
    for _ in range(3):
        advance(loaded, clock, 4_000)
        heartbeat(loaded, clock, results[0].member_id, 1)
        heartbeat(loaded, clock, results[1].member_id, 1)
    assert loaded.member(results[2].member_id) is None
    loaded.check_invariants()


def test_snapshot_of_empty_group_and_over_capacity_reload():
    group, clock = make_group()
    empty = ClassicGroup.from_snapshot(group.to_snapshot(), None, 0, new_uuid=random_id)
    assert empty.state is GroupState.EMPTY
    g3, clock3, results = form_group(3)
    complete_sync(g3, clock3, results)
    small = ClassicGroup.from_snapshot(g3.to_snapshot(), GroupConfig(max_size=2), clock3.now_ms(), new_uuid=random_id)
    assert small.state is GroupState.PREPARING_REBALANCE


def test_illegal_transition_is_rejected():
    group, _ = make_group()
    with pytest.raises(IllegalGroupTransition):
        group._transition(GroupState.STABLE, 0)


def test_config_validation():
    with pytest.raises(ValueError):
        GroupConfig(min_session_timeout_ms=10, max_session_timeout_ms=5)
    with pytest.raises(ValueError):
        GroupConfig(max_size=0)


def test_rebalance_timeout_is_used_for_join_deadline():
    group, clock, results = form_group(2)
    complete_sync(group, clock, results)
    join(group, clock, member_id=results[0].member_id, tag="new")
    assert group.next_deadline_ms() <= clock.now_ms() + REBALANCE_MS
