"""Leader-side replica bookkeeping: fetch state, high watermark, ISR shrink/expand candidates."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.leader_state import UNKNOWN_OFFSET, LeaderState

LAG_MS = 30_000
T0 = 1_000_000


def leader(isr=(1, 2, 3), replicas=(1, 2, 3), hw: int = 0, epoch_start: int = 0, now_ms: int = T0) -> LeaderState:
    return LeaderState(
        leader_id=1,
        replicas=replicas,
        isr=isr,
        leader_epoch=4,
        leader_epoch_start_offset=epoch_start,
        high_watermark=hw,
        now_ms=now_ms,
    )


# ---- construction --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "replicas, isr",
    [((2, 3), (2, 3)), ((1, 2, 2), (1,)), ((1, 2), (2,)), ((1, 2), (1, 4))],
)
def test_rejects_inconsistent_membership(replicas, isr) -> None:
    with pytest.raises(ValueError):
        leader(isr=isr, replicas=replicas)


def test_new_leader_knows_no_follower_position() -> None:
    state = leader()
    assert state.follower_log_end_offset(2) == UNKNOWN_OFFSET == -1
    assert state.high_watermark(100) == 0  # ISR followers hold the HW until they fetch


def test_sole_isr_member_leader_advances_hw_to_its_leo() -> None:
    assert leader(isr=(1,)).high_watermark(100) == 100


def test_fetches_from_unknown_replicas_and_the_leader_are_ignored() -> None:
    state = leader()
    assert state.on_follower_fetch(9, 50, 100, T0) is False
    assert state.on_follower_fetch(1, 50, 100, T0) is False
    assert state.on_follower_fetch(2, 50, 100, T0) is True
    with pytest.raises(KeyError):
        state.follower_log_end_offset(9)


# ---- high watermark ------------------------------------------------------------------------


def test_hw_is_min_leo_of_isr_and_never_moves_back() -> None:
    state = leader()
    state.on_follower_fetch(2, 60, 100, T0)
    state.on_follower_fetch(3, 80, 100, T0)
    assert state.high_watermark(100) == 60
    state.on_follower_fetch(2, 40, 100, T0)  # a follower truncated
    assert state.high_watermark(100) == 60
    state.set_isr((1, 3))
    assert state.high_watermark(100) == 80


def test_hw_never_exceeds_the_leader_leo() -> None:
    state = leader(isr=(1, 2))
    state.on_follower_fetch(2, 120, 100, T0)
    assert state.high_watermark(100) == 100


def test_non_isr_followers_do_not_hold_the_hw() -> None:
    state = leader(isr=(1, 2))
    state.on_follower_fetch(2, 90, 100, T0)
    assert state.high_watermark(100) == 90


def test_adding_a_lagging_follower_does_not_lower_the_hw() -> None:
    state = leader(isr=(1, 2))
    state.on_follower_fetch(2, 90, 100, T0)
    state.on_follower_fetch(3, 10, 100, T0)
    assert state.high_watermark(100) == 90
    state.set_isr((1, 2, 3))
    assert state.high_watermark(100) == 90


def test_pending_expansion_makes_hw_wait_for_the_joiner() -> None:
    state = leader(isr=(1, 2))
    state.on_follower_fetch(2, 100, 100, T0)
    state.on_follower_fetch(3, 70, 100, T0)
    state.begin_isr_change((1, 2, 3))
    assert state.pending_isr == {1, 2, 3} and state.maximal_isr == {1, 2, 3}
    assert state.high_watermark(100) == 70
    state.set_isr((1, 2, 3))
    assert state.pending_isr is None and state.isr == {1, 2, 3}


def test_pending_shrink_keeps_waiting_for_the_leaver_until_committed() -> None:
    state = leader()
    state.on_follower_fetch(2, 100, 100, T0)
    state.on_follower_fetch(3, 50, 100, T0)
    state.begin_isr_change((1, 2))
    assert state.high_watermark(100) == 50
    state.set_isr((1, 2))
    assert state.high_watermark(100) == 100


def test_aborted_change_restores_the_committed_isr() -> None:
    state = leader(isr=(1, 2))
    state.on_follower_fetch(2, 100, 100, T0)
    state.on_follower_fetch(3, 50, 100, T0)
    state.begin_isr_change((1, 2, 3))
    assert state.high_watermark(100) == 50
    state.abort_isr_change()
    assert state.pending_isr is None and state.high_watermark(100) == 100


def test_one_isr_change_at_a_time_and_validated() -> None:
    state = leader()
    with pytest.raises(ValueError):
        state.begin_isr_change((2, 3))  # without the leader
    state.begin_isr_change((1, 2))
    with pytest.raises(ValueError):
        state.begin_isr_change((1,))


# ---- fetch state and shrink (Replica.updateFetchState, getOutOfSyncReplicas) ---------------


def test_isr_follower_counts_as_caught_up_at_election() -> None:
    state = leader()
    assert state.shrink_candidates(T0 + LAG_MS, LAG_MS, 100) == set()
    assert state.shrink_candidates(T0 + LAG_MS + 1, LAG_MS, 100) == {2, 3}


def test_fetch_at_leader_leo_is_caught_up_now() -> None:
    state = leader(isr=(1, 2))
    state.on_follower_fetch(2, 100, 100, T0 + 50_000)
    assert state.shrink_candidates(T0 + 80_000, LAG_MS, 150) == set()
    assert state.shrink_candidates(T0 + 80_001, LAG_MS, 150) == {2}


def test_fetch_reaching_the_previous_leader_leo_is_caught_up_as_of_the_previous_fetch() -> None:
    state = leader(isr=(1, 2))
    state.on_follower_fetch(2, 50, 100, T0 + 40_000)  # behind
    state.on_follower_fetch(2, 100, 130, T0 + 45_000)  # has what the leader had at 40_000
    assert state.shrink_candidates(T0 + 70_000, LAG_MS, 130) == set()
    assert state.shrink_candidates(T0 + 70_001, LAG_MS, 130) == {2}


def test_fetch_behind_the_previous_leader_leo_does_not_count() -> None:
    state = leader(isr=(1, 2))
    state.on_follower_fetch(2, 50, 100, T0 + 40_000)
    state.on_follower_fetch(2, 90, 130, T0 + 45_000)
    assert state.shrink_candidates(T0 + LAG_MS + 1, LAG_MS, 130) == {2}


def test_previous_leader_leo_is_the_largest_seen() -> None:
    state = leader(isr=(1, 2))
    state.on_follower_fetch(2, 10, 100, T0 + 40_000)
    state.on_follower_fetch(2, 20, 90, T0 + 41_000)  # leader LEO seemed lower (reordered view)
    state.on_follower_fetch(2, 95, 120, T0 + 42_000)  # reaches 90, not 100
    assert state.shrink_candidates(T0 + LAG_MS + 1, LAG_MS, 120) == {2}


def test_follower_at_the_leader_leo_is_never_out_of_sync() -> None:
    state = leader(isr=(1, 2))
    state.on_follower_fetch(2, 100, 100, T0)
    assert state.shrink_candidates(T0 + 10 * LAG_MS, LAG_MS, 100) == set()
    assert state.shrink_candidates(T0 + 10 * LAG_MS, LAG_MS, 101) == {2}


def test_non_isr_follower_starts_never_caught_up() -> None:
    state = leader(isr=(1, 2), now_ms=0)
    state.set_isr((1, 2, 3))
    assert state.shrink_candidates(LAG_MS + 1, LAG_MS, 100) == {2, 3}


def test_no_shrink_or_expand_while_a_change_is_pending() -> None:
    state = leader(isr=(1, 2))
    state.on_follower_fetch(3, 100, 100, T0)
    state.begin_isr_change((1, 2, 3))
    assert state.shrink_candidates(T0 + 10 * LAG_MS, LAG_MS, 200) == set()
    assert state.expand_candidates(200) == set()


# ---- expand (Partition.isFollowerInSync) ---------------------------------------------------


def test_expand_needs_leo_at_hw_and_at_the_leader_epoch_start() -> None:
    state = leader(isr=(1,), hw=0, epoch_start=80)
    assert state.high_watermark(100) == 100
    state.on_follower_fetch(2, 99, 100, T0)
    state.on_follower_fetch(3, 100, 100, T0)
    assert state.expand_candidates(100) == {3}


def test_expand_waits_for_the_follower_to_reach_the_leaders_log_start() -> None:
    """A DeleteRecords answered while the follower was not live did not wait for it: it joins
    the ISR (and may be elected) only once it reports the leader's log start."""
    state = leader(isr=(1,), hw=0)
    state.on_follower_fetch(2, 100, 100, T0)
    state.on_follower_log_start(2, 5)
    assert state.expand_candidates(100, leader_log_start_offset=20) == set()
    state.on_follower_log_start(2, 20)
    assert state.expand_candidates(100, leader_log_start_offset=20) == {2}
    state.on_follower_fetch(3, 100, 100, T0)  # reports no log start (an older follower): not held
    assert state.expand_candidates(100, leader_log_start_offset=20) == {2, 3}


def test_expand_blocked_by_leader_epoch_start_even_at_hw() -> None:
    state = leader(isr=(1, 2), hw=0, epoch_start=80)
    state.on_follower_fetch(2, 60, 100, T0)
    state.on_follower_fetch(3, 70, 100, T0)
    assert state.high_watermark(100) == 60
    assert state.expand_candidates(100) == set()
    state.on_follower_fetch(3, 80, 100, T0)
    assert state.expand_candidates(100) == {3}


def test_isr_members_and_unfetched_followers_are_not_expand_candidates() -> None:
    state = leader(isr=(1, 2))
    assert state.expand_candidates(0) == set()  # 3 has not fetched: LEO -1
    state.on_follower_fetch(2, 0, 0, T0)
    state.on_follower_fetch(3, 0, 0, T0)
    assert state.expand_candidates(0) == {3}


# ---- property: random fetches, appends, ISR changes and a manual clock ---------------------


@dataclass
class Model:
    """Follower positions and caught-up times restated from the fetch history."""

    now_ms: int
    fetches: dict[int, list[tuple[int, int, int]]] = field(default_factory=dict)  # (time, offset, leader leo)

    def leo(self, replica: int) -> int:
        history = self.fetches.get(replica)
        return history[-1][1] if history else -1

    def last_caught_up_ms(self, replica: int, start_ms: int, initial_isr: set[int]) -> int:
        best = start_ms if replica in initial_isr else 0
        history = self.fetches.get(replica, [])
        for i, (t, offset, leader_leo) in enumerate(history):
            if offset >= leader_leo:
                best = max(best, t)
            elif offset >= max((h[2] for h in history[:i]), default=-1):
                best = max(best, history[i - 1][0] if i else 0)
        return best


ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 20)),
        st.tuples(
            st.just("fetch"), st.sampled_from([2, 3, 4]), st.sampled_from(["leo", "leo-1"]) | st.integers(0, 10**6)
        ),
        st.tuples(st.just("tick"), st.sampled_from([1, LAG_MS - 1, LAG_MS, LAG_MS + 1]) | st.integers(0, 40_000)),
        st.tuples(st.just("begin"), st.sets(st.sampled_from([2, 3, 4]))),
        st.tuples(st.just("commit")),
        st.tuples(st.just("abort")),
        st.tuples(st.just("set_isr"), st.sets(st.sampled_from([2, 3, 4]))),
    ),
    max_size=60,
)


@settings(max_examples=400, deadline=None)
@given(st.sets(st.sampled_from([2, 3, 4])), st.integers(0, 50), ops)
def test_hw_and_shrink_invariants(initial_followers: set[int], leo0: int, ops: list[tuple]) -> None:
    initial_isr = {1} | initial_followers
    state = LeaderState(
        leader_id=1,
        replicas=(1, 2, 3, 4),
        isr=initial_isr,
        leader_epoch=7,
        leader_epoch_start_offset=leo0,
        high_watermark=0,
        now_ms=T0,
    )
    model = Model(now_ms=T0)
    leader_leo, hw = leo0, state.high_watermark(leo0)
    for op in ops:
        if op[0] == "append":
            leader_leo += op[1]
        elif op[0] == "fetch":
            offset = {"leo": leader_leo, "leo-1": max(0, leader_leo - 1)}.get(op[2], op[2]) % (leader_leo + 1)
            state.on_follower_fetch(op[1], offset, leader_leo, model.now_ms)
            model.fetches.setdefault(op[1], []).append((model.now_ms, offset, leader_leo))
        elif op[0] == "tick":
            model.now_ms += op[1]
        elif op[0] == "begin" and state.pending_isr is None:
            state.begin_isr_change({1} | op[1])
        elif op[0] == "commit" and state.pending_isr is not None:
            state.set_isr(state.pending_isr)
        elif op[0] == "abort":
            state.abort_isr_change()
        elif op[0] == "set_isr":
            state.set_isr({1} | op[1])

        previous, hw = hw, state.high_watermark(leader_leo)
        waited_for = min([leader_leo] + [model.leo(r) for r in state.maximal_isr - {1}])
        assert previous <= hw <= leader_leo
        assert hw == previous or hw <= waited_for  # it only advances to what every member has
        assert hw >= waited_for  # and it does advance that far

        for r in (2, 3, 4):
            assert state.follower_log_end_offset(r) == model.leo(r)
        expected_shrink = (
            set()
            if state.pending_isr is not None
            else {
                r
                for r in state.isr - {1}
                if model.leo(r) != leader_leo and model.now_ms - model.last_caught_up_ms(r, T0, initial_isr) > LAG_MS
            }
        )
        assert state.shrink_candidates(model.now_ms, LAG_MS, leader_leo) == expected_shrink
        expected_expand = (
            set()
            if state.pending_isr is not None
            else {r for r in {2, 3, 4} - state.isr if model.leo(r) >= max(hw, leo0)}
        )
        assert state.expand_candidates(leader_leo) == expected_expand


# ---- the low watermark (DeleteRecords) -----------------------------------------------------


def test_low_watermark_is_the_smallest_log_start_over_the_leader_and_live_followers() -> None:
    state = leader()
    everyone = lambda replica: True  # noqa: E731
    assert state.low_watermark(10, everyone) == UNKNOWN_OFFSET, "a follower that never reported holds it back"
    assert state.on_follower_log_start(2, 10) and state.on_follower_log_start(3, 7)
    assert not state.on_follower_log_start(3, 7), "no change"
    assert not state.on_follower_log_start(9, 10), "not a follower"
    assert state.low_watermark(10, everyone) == 7
    assert state.low_watermark(10, lambda replica: replica != 3) == 10, "a dead broker holds nothing back"
    assert state.low_watermark(5, everyone) == 5
