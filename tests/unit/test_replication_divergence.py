"""KIP-320 divergence: the leader's check of a fetch position, the follower's truncation, and a
simulation of elections, appends, replication and lost tails that checks logs converge."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from broker.protocol.errors import ApiError, ErrorCode
from broker.replication.divergence import check_fetch_position, truncation_offset
from broker.log.epochs import EpochEntry, LeaderEpochCache


def cache_of(*entries: tuple[int, int]) -> LeaderEpochCache:
    return LeaderEpochCache(None, [EpochEntry(*e) for e in entries])


# ---- leader side ---------------------------------------------------------------------------

LEADER = cache_of((0, 0), (2, 10))  # epoch 0: [0, 10), epoch 2: [10, 15)


@pytest.mark.parametrize(
    "fetch_offset, last_fetched_epoch, expected",
    [
        (7, -1, None),  # no epoch to check (empty follower)
        (15, 2, None),  # at the leader's end in its latest epoch
        (12, 2, None),
        (8, 0, None),  # within epoch 0 as the leader has it
        (10, 0, None),  # exactly at the end of epoch 0
        (12, 0, (0, 10)),  # epoch 0 ends at 10 on the leader
        (16, 2, (2, 15)),  # past the leader's log end in the latest epoch
        (5, 1, (0, 10)),  # epoch 1 unknown to the leader: diverges even below 10
    ],
)
def test_check_fetch_position(fetch_offset: int, last_fetched_epoch: int, expected) -> None:
    assert check_fetch_position(LEADER, 15, fetch_offset, last_fetched_epoch) == expected


def test_check_fetch_position_below_every_leader_epoch() -> None:
    """Old epochs left with old segments: Kafka answers (requested, first start offset)."""
    leader = cache_of((3, 100), (5, 200))
    assert check_fetch_position(leader, 250, 90, 1) is None  # the log-start check is the caller's
    assert check_fetch_position(leader, 250, 150, 1) == (1, 100)


@pytest.mark.parametrize("cache, epoch", [(LEADER, 3), (cache_of(), 0)])
def test_check_fetch_position_undefined_is_offset_out_of_range(cache: LeaderEpochCache, epoch: int) -> None:
    with pytest.raises(ApiError) as info:
        check_fetch_position(cache, 15, 15, epoch)
    assert info.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


# ---- follower side -------------------------------------------------------------------------


def test_undefined_offset_truncates_to_the_high_watermark() -> None:
    assert truncation_offset(cache_of((0, 0)), 20, -1, -1, high_watermark=12) == (12, True)
    assert truncation_offset(cache_of((0, 0)), 20, 3, -1, high_watermark=30) == (20, True)


def test_undefined_epoch_with_an_offset_truncates_to_the_leader_offset() -> None:
    assert truncation_offset(cache_of((0, 0)), 20, -1, 15, high_watermark=0) == (15, True)
    assert truncation_offset(cache_of((0, 0)), 20, -1, 25, high_watermark=0) == (20, True)


def test_follower_tracking_no_epochs_truncates_to_the_leader_offset() -> None:
    assert truncation_offset(cache_of(), 20, 2, 15, high_watermark=0) == (15, True)
    assert truncation_offset(cache_of(), 20, 2, 25, high_watermark=0) == (20, True)


def test_follower_not_knowing_the_epoch_truncates_to_its_next_epoch_and_asks_again() -> None:
    follower = cache_of((0, 0), (2, 10))
    assert truncation_offset(follower, 20, 1, 15, high_watermark=0) == (10, False)


def test_both_knowing_the_epoch_truncates_to_the_lower_end() -> None:
    follower = cache_of((0, 0), (1, 10))
    assert truncation_offset(follower, 20, 1, 15, high_watermark=0) == (15, True)
    assert truncation_offset(follower, 20, 1, 25, high_watermark=0) == (20, True)
    follower = cache_of((0, 0), (1, 10), (3, 18))
    assert truncation_offset(follower, 20, 1, 25, high_watermark=0) == (18, True)


def test_follower_epochs_all_above_the_leaders_answer() -> None:
    """endOffsetFor's "below every epoch" case: the follower's first epoch start bounds it."""
    assert truncation_offset(cache_of((3, 100)), 150, 1, 120, high_watermark=0) == (100, True)


def test_kip_279_two_rounds() -> None:
    """Leader A: [e0 x2, e1, e3]; follower B: [e0 x2, e2 x2] (led epoch 2, never saw e1)."""
    leader, follower = cache_of((0, 0), (1, 2), (3, 3)), cache_of((0, 0), (2, 2))
    diverging = check_fetch_position(leader, 4, 4, follower.latest_epoch)
    assert diverging == (1, 3)
    assert truncation_offset(follower, 4, *diverging, high_watermark=0) == (2, False)
    follower.truncate_from_end(2)
    assert check_fetch_position(leader, 4, 2, follower.latest_epoch) is None


# ---- simulation ----------------------------------------------------------------------------


@dataclass
class Replica:
    log: list[int] = field(default_factory=list)  # the epoch of the record at each offset
    cache: LeaderEpochCache = field(default_factory=LeaderEpochCache)

    def truncate(self, offset: int) -> None:
        del self.log[offset:]
        self.cache.truncate_from_end(offset)  # even when the log is unchanged (Kafka's truncateTo)

    def append(self, epoch: int) -> None:
        self.cache.assign(epoch, len(self.log))
        self.log.append(epoch)


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def describes(cache: LeaderEpochCache, log: list[int]) -> bool:
    """The entries are the log's epoch starts, plus at most an epoch this replica assigned
    (as leader) at the log end and never wrote to."""
    starts = [EpochEntry(e, o) for o, e in enumerate(log) if o == 0 or log[o - 1] != e]
    entries = cache.entries()
    return entries == starts or (
        entries[:-1] == starts and entries[-1].start_offset == len(log) and entries[-1].epoch > max(log, default=-1)
    )


def reconcile(follower: Replica, leader: Replica) -> list[bool]:
    """Fetch rounds until the leader stops reporting divergence; returns each truncation's
    `complete` flag."""
    rounds: list[bool] = []
    for _ in range(len(follower.cache.entries()) + 2):
        diverging = check_fetch_position(leader.cache, len(leader.log), len(follower.log), follower.cache.latest_epoch)
        if diverging is None:
            return rounds
        offset, complete = truncation_offset(follower.cache, len(follower.log), *diverging, high_watermark=0)
        rounds.append(complete)
        assert offset <= len(follower.log)
        follower.truncate(offset)
        if complete:  # a complete truncation leaves nothing for the next fetch to dispute
            assert check_fetch_position(leader.cache, len(leader.log), offset, follower.cache.latest_epoch) is None
    raise AssertionError("truncation did not converge (each incomplete round must drop a cache entry)")


terms = st.lists(
    st.tuples(
        st.integers(0, 2),  # the leader of this term (any replica: unclean elections included)
        st.integers(0, 4),  # records it appends
        st.lists(st.tuples(st.integers(0, 2), st.integers(0, 6)), max_size=3),  # (replica, records) fetches
        st.lists(st.tuples(st.integers(0, 2), st.integers(1, 4)), max_size=1),  # (replica, records) lost
    ),
    min_size=1,
    max_size=15,
)


@settings(max_examples=500, deadline=None)
@given(terms)
def test_replicas_converge_on_the_leaders_log(terms: list[tuple]) -> None:
    """Each term elects a leader with the next epoch (one leader per epoch, as the controller
    guarantees), which appends; followers then reconcile and copy part of its log, and may
    lose an unflushed tail. Every reconciliation must leave the follower with exactly the
    longest common prefix of its log and the leader's, and an epoch cache describing it."""
    replicas = [Replica() for _ in range(3)]
    for epoch, (leader, appends, fetches, losses) in enumerate(terms):
        source = replicas[leader]
        source.cache.assign(epoch, len(source.log))
        for _ in range(appends):
            source.append(epoch)
        for replica, records in fetches:
            if replica == leader:
                continue
            follower = replicas[replica]
            before = list(follower.log)
            rounds = reconcile(follower, source)
            event(f"truncations: {len(rounds)}, incomplete: {rounds.count(False)}")
            assert follower.log == source.log[: len(follower.log)]
            assert len(follower.log) == common_prefix(before, source.log)
            assert describes(follower.cache, follower.log)
            for offset in range(len(follower.log), min(len(source.log), len(follower.log) + records)):
                follower.append(source.log[offset])
            assert describes(follower.cache, follower.log)
        for replica, records in losses:
            if replica != leader:
                replicas[replica].truncate(max(0, len(replicas[replica].log) - records))
