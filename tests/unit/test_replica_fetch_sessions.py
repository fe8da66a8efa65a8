"""Replica fetch sessions (replication/fetch_sessions.py, issue 28 item 4), over real
partition logs and the real leader service and fetcher, without sockets: an idle round costs
nothing per partition, what changed is still answered at once, the session's epochs guard
against lost answers, the ISR lag rule still sees a steady follower as caught up (and a dead
one as not), and both sides still talk to a peer from before sessions."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from types import SimpleNamespace

from broker.clock import ManualClock, SystemClock
from broker.config import load_config
from broker.metadata.records import PartitionStateRecord
from broker.metrics import BrokerMetrics
from broker.partition import Partition
from broker.partition_ids import TopicPartition
from broker.protocol.errors import ErrorCode
from broker.replication.fetch_sessions import NEW_SESSION, NO_SESSION_ID, SESSIONLESS, FollowerSession
from broker.replication.fetcher import ReplicaFetcher
from broker.replication.leader_service import ReplicaFetchService
from broker.replication.messages import (
    REPLICATION_VERSION,
    FetchedPartition,
    FetchPartition,
    ReplicaFetchRequest,
    ReplicaFetchResponse,
)
from broker.waiters import FetchWaiters
from tests.unit.test_partition import CLOCK_START, batch, open_partition

TOPIC_ID = uuid.UUID(int=7)
LAG_MAX_MS = 30_000
EPOCH = 3


class Leader:
    """Broker 0 leading partitions t-0..t-(n-1) with followers 1 and 2, behind the
    real leader service; counts the partitions the service looks at."""

    def __init__(self, tmp_path: Path, count: int, max_sessions: int = 1000, isr: tuple[int, ...] = (0, 1, 2)) -> None:
        self.clock = ManualClock(CLOCK_START)
        self.waiters = FetchWaiters()
        self.partitions: dict[TopicPartition, Partition] = {}
        for index in range(count):
            partition = open_partition(tmp_path / f"t-{index}", self.clock)
            partition.index, partition.key = index, TopicPartition("t", index)
            partition._on_append = lambda p: self.waiters.notify(p.key)
            partition.make_leader(0, PartitionStateRecord(1, [0, 1, 2], 0, EPOCH, list(isr)), 2)
            self.partitions[partition.key] = partition
        self.name = "t"
        self.service = ReplicaFetchService(self, self, self.waiters, self, self.clock, max_sessions=max_sessions)  # type: ignore[arg-type]
        self.looked = 0
        self.expand_offers: list[tuple[int, int]] = []
        fetch = self.service._fetch

        def counting(*args):  # type: ignore[no-untyped-def]
            self.looked += 1
            return fetch(*args)

        self.service._fetch = counting  # type: ignore[method-assign]

    # the catalog, replica manager and ISR updater the service asks
    def by_id(self, topic_id: uuid.UUID):  # type: ignore[no-untyped-def]
        return self if topic_id == TOPIC_ID else None

    def leader(self, name: str, index: int) -> Partition:
        partition = self.partitions[TopicPartition(name, index)]
        partition.check_leader()
        return partition

    def maybe_expand(self, partition: Partition, replica_id: int) -> None:
        self.expand_offers.append((partition.index, replica_id))

    def append(self, index: int) -> None:
        partition = self.partitions[TopicPartition("t", index)]
        partition.append_records(batch(partition.log.log_end_offset), acks=1)

    async def fetch(
        self,
        wanted: list[FetchPartition],
        session_id: int,
        epoch: int,
        forgotten: list[tuple[str, int]] | None = None,
        replica: int = 1,
        max_wait_ms: int = 0,
    ) -> ReplicaFetchResponse:
        request = ReplicaFetchRequest(
            REPLICATION_VERSION, replica, max_wait_ms, 1 << 20, wanted, session_id, epoch, forgotten or []
        )
        return await asyncio.wait_for(self.service.handle(request), 10.0)


def at(index: int, offset: int, last_epoch: int = -1) -> FetchPartition:
    return FetchPartition(str(TOPIC_ID), index, offset, last_epoch, EPOCH, 0)


def answered(response: ReplicaFetchResponse) -> dict[int, FetchedPartition]:
    return {r.partition: r for r in response.partitions}


def test_an_idle_round_looks_at_no_partition_and_a_change_is_answered_alone(tmp_path: Path) -> None:
    async def scenario() -> None:
        leader = Leader(tmp_path, 50, isr=(0, 1))
        full = await leader.fetch([at(i, 0) for i in range(50)], NO_SESSION_ID, NEW_SESSION)
        assert full.session_id != NO_SESSION_ID and len(full.partitions) == 50
        assert leader.looked == 50
        leader.looked = 0
        idle = await leader.fetch([], full.session_id, 1)
        assert (idle.error_code, idle.partitions, leader.looked) == (0, [], 0), "steady partitions cost nothing"
        held = asyncio.ensure_future(leader.fetch([], full.session_id, 2, max_wait_ms=60_000))
        await asyncio.sleep(0.05)
        assert not held.done(), "nothing new: the request is held"
        leader.append(17)
        woken = await held
        assert list(answered(woken)) == [17] and len(woken.partitions[0].entries) == 1
        assert leader.looked == 1, "only the partition appended to was looked at"
        leader.looked = 0
        moved = await leader.fetch([at(17, 2, EPOCH)], full.session_id, 3)
        # the follower's fetch moved the high watermark of t-17: it learns it at once
        assert answered(moved)[17].high_watermark == 2 and leader.looked <= 2

    asyncio.run(scenario())


def test_epochs_guard_the_session_and_the_bound_answers_in_full(tmp_path: Path) -> None:
    async def scenario() -> None:
        leader = Leader(tmp_path, 3, max_sessions=1)
        full = await leader.fetch([at(i, 0) for i in range(3)], NO_SESSION_ID, NEW_SESSION)
        stale = await leader.fetch([], full.session_id, 5)
        assert stale.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
        gone = await leader.fetch([], full.session_id, 1)
        assert gone.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND, "a wrong epoch closed the session"
        unknown = await leader.fetch([], 12345, 1, replica=2)
        assert unknown.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        again = await leader.fetch([at(i, 0) for i in range(3)], NO_SESSION_ID, NEW_SESSION)
        assert again.session_id != NO_SESSION_ID and len(leader.service.sessions) == 1
        # max.incremental.fetch.session.cache.slots=1: follower 2 gets a full answer, no session
        other = await leader.fetch([at(i, 0) for i in range(3)], NO_SESSION_ID, NEW_SESSION, replica=2)
        assert (other.session_id, other.error_code, len(other.partitions)) == (NO_SESSION_ID, 0, 3)
        # forgetting partitions drops what the leader keeps for them
        await leader.fetch([], again.session_id, 1, forgotten=[(str(TOPIC_ID), 0), (str(TOPIC_ID), 1)])
        session = leader.service.sessions.by_replica[1]
        assert list(session.wants) == [(str(TOPIC_ID), 2)]
        assert leader.service.sessions.watching(TopicPartition("t", 0)) == []

    asyncio.run(scenario())


def test_a_steady_follower_stays_in_sync_and_a_silent_one_does_not(tmp_path: Path) -> None:
    """The ISR lag rule (LeaderState.shrink_candidates) reads when each follower last caught
    up; in a session a steady follower does not name its partition again, so its session's
    requests must vouch for it: follower 1 keeps asking, follower 2 stopped long ago."""

    async def scenario() -> None:
        leader = Leader(tmp_path, 2)
        sessions = {}
        for replica in (1, 2):
            full = await leader.fetch([at(i, 0) for i in range(2)], NO_SESSION_ID, NEW_SESSION, replica=replica)
            sessions[replica] = full.session_id
        for replica in (1, 2):  # each full fetch touched the partitions for the other session
            await leader.fetch([], sessions[replica], 1, replica=replica)
        leader.clock.advance(LAG_MAX_MS * 2)
        leader.looked = 0
        await leader.fetch([], sessions[1], 2, replica=1)  # follower 1 is alive; 2 went silent
        assert leader.looked == 0
        leader.append(0)  # t-0 moves on; neither follower has its new batch yet
        state = leader.partitions[TopicPartition("t", 0)].leader_state
        assert state is not None
        now = leader.clock.now_ms() + 1
        assert state.shrink_candidates(now, LAG_MAX_MS, 2) == frozenset({2})

    asyncio.run(scenario())


def test_a_steady_follower_that_left_the_isr_is_offered_to_it_again(tmp_path: Path) -> None:
    """Regression (simulation, cluster seed 4): an ISR shrink keeps the leader epoch, so a
    steady follower names nothing new and was never looked at again: it stayed out of the
    ISR for good. A state change now touches the partition in every session."""

    async def scenario() -> None:
        leader = Leader(tmp_path, 2)
        full = await leader.fetch([at(i, 0) for i in range(2)], NO_SESSION_ID, NEW_SESSION)
        await leader.fetch([], full.session_id, 1)
        partition = leader.partitions[TopicPartition("t", 1)]
        partition.make_leader(0, PartitionStateRecord(1, [0, 1, 2], 0, EPOCH, [0, 2]), 3)  # 1 left the ISR
        leader.service.on_role_changed(partition)
        leader.expand_offers.clear()
        await leader.fetch([], full.session_id, 2)
        assert leader.expand_offers == [(1, 1)]

    asyncio.run(scenario())


class OldLeader:
    """A leader from before sessions: answers every partition named, with session id 0."""

    address = "leader:9093"

    def __init__(self) -> None:
        self.requests: list[ReplicaFetchRequest] = []

    def get(self, node_id: int, host: str, port: int) -> "OldLeader":
        return self

    async def call(self, request: ReplicaFetchRequest, timeout_s: float) -> ReplicaFetchResponse:
        self.requests.append(request)
        await asyncio.sleep(0.02)
        return ReplicaFetchResponse(
            REPLICATION_VERSION, [FetchedPartition(p.topic_id, p.partition, 0, 0, 0) for p in request.partitions]
        )


def test_a_follower_keeps_asking_in_full_a_leader_without_sessions(tmp_path: Path) -> None:
    async def scenario() -> None:
        config = load_config(overrides={"node.id": "1", "metrics.listen": None}, environ={})
        view = SimpleNamespace(brokers={0: SimpleNamespace(rpc_host="leader", rpc_port=9093)})
        cross_az = SimpleNamespace(replicated=lambda address, nbytes: None)
        old = OldLeader()
        fetcher = ReplicaFetcher(config, view, old, BrokerMetrics(), cross_az, SystemClock())  # type: ignore[arg-type]
        clock = ManualClock(CLOCK_START)
        for index in range(3):
            partition = open_partition(tmp_path / f"t-{index}", clock)
            partition.index, partition.key, partition.topic_id = index, TopicPartition("t", index), str(TOPIC_ID)
            partition.make_follower(PartitionStateRecord(1, [0, 1], 0, 1, [0, 1]), 2)
            fetcher.on_role_changed(partition)
        await asyncio.sleep(0.3)
        await fetcher.stop()
        assert len(old.requests) >= 3
        assert all(len(r.partitions) == 3 and r.session_epoch == NEW_SESSION for r in old.requests)

    asyncio.run(scenario())


class RefusingOnceLeader:
    """A leader with sessions that refuses the first look at every partition (as one whose
    catalog does not know the topic yet), then answers nothing new."""

    address = "leader:9093"

    def __init__(self) -> None:
        self.requests: list[ReplicaFetchRequest] = []

    def get(self, node_id: int, host: str, port: int) -> "RefusingOnceLeader":
        return self

    async def call(self, request: ReplicaFetchRequest, timeout_s: float) -> ReplicaFetchResponse:
        self.requests.append(request)
        await asyncio.sleep(0.01)
        first = len(self.requests) == 1
        results = [
            FetchedPartition(p.topic_id, p.partition, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if first else 0, 0, 0)
            for p in request.partitions
        ]
        return ReplicaFetchResponse(REPLICATION_VERSION, results, session_id=5)


def test_a_partition_backing_off_is_named_again_when_its_backoff_ends(tmp_path: Path) -> None:
    """Regression (simulation, `tiered_delete_records` seed 987001): a follower's only
    partition on a leader was refused and backed off; no request went out meanwhile to
    forget it, so when the backoff ended the follower thought the leader held its position
    and named nothing, and the leader, having answered it, never looked at it again: the
    follower stayed out of the ISR for good."""

    async def scenario() -> None:
        config = load_config(
            overrides={
                "node.id": "1",
                "metrics.listen": None,
                "replica.fetch.backoff.ms": "50",
                "replica.fetch.wait.max.ms": "10",
            },
            environ={},
        )
        view = SimpleNamespace(brokers={0: SimpleNamespace(rpc_host="leader", rpc_port=9093)})
        cross_az = SimpleNamespace(replicated=lambda address, nbytes: None)
        leader = RefusingOnceLeader()
        fetcher = ReplicaFetcher(config, view, leader, BrokerMetrics(), cross_az, SystemClock())  # type: ignore[arg-type]
        partition = open_partition(tmp_path / "t-0", ManualClock(CLOCK_START))
        partition.topic_id = str(TOPIC_ID)
        partition.make_follower(PartitionStateRecord(1, [0, 1], 0, 1, [0, 1]), 2)
        fetcher.on_role_changed(partition)
        await asyncio.sleep(0.3)
        await fetcher.stop()
        named = [len(r.partitions) for r in leader.requests]
        assert named[0] == 1 and any(named[1:]), f"partitions named per request: {named}"

    asyncio.run(scenario())


def test_a_partition_backing_off_while_behind_does_not_make_its_leader_spin(tmp_path: Path) -> None:
    """Regression (simulation, `tiered_delete_records` seed 990015: 3,000,000 loop steps at
    one virtual instant): a follower behind its leader failed to apply the entries sent and
    backed off, but its session still held the partition, so the leader sent the same
    entries at once in every answer until the backoff ended. The follower now forgets a
    partition it backs off from."""

    async def scenario() -> None:
        leader = Leader(tmp_path / "leader", 2)
        for _ in range(3):
            leader.append(0)
        calls = 0

        class Pool:
            address = "leader:9093"

            def get(self, node_id: int, host: str, port: int) -> "Pool":
                return self

            async def call(self, request: ReplicaFetchRequest, timeout_s: float) -> ReplicaFetchResponse:
                nonlocal calls
                calls += 1
                return await leader.service.handle(request)

        config = load_config(
            overrides={
                "node.id": "1",
                "metrics.listen": None,
                "replica.fetch.backoff.ms": "1000",
                "replica.fetch.wait.max.ms": "20",
            },
            environ={},
        )
        view = SimpleNamespace(brokers={0: SimpleNamespace(rpc_host="leader", rpc_port=9093)})
        cross_az = SimpleNamespace(replicated=lambda address, nbytes: None)
        fetcher = ReplicaFetcher(config, view, Pool(), BrokerMetrics(), cross_az, SystemClock())  # type: ignore[arg-type]
        apply = fetcher._apply
        fetcher._apply = lambda partition, result: partition.index != 0 and apply(partition, result)  # type: ignore[method-assign]
        for index in range(2):  # t-0 cannot apply what it gets; t-1, steady, keeps the requests going
            follower = open_partition(tmp_path / f"follower-{index}", ManualClock(CLOCK_START))
            follower.index, follower.key, follower.topic_id = index, TopicPartition("t", index), str(TOPIC_ID)
            follower.make_follower(PartitionStateRecord(1, [0, 1, 2], 0, EPOCH, [0, 1, 2]), 2)
            fetcher.on_role_changed(follower)
        await asyncio.sleep(0.5)
        await fetcher.stop()
        assert calls <= 0.5 / 0.02 + 3, f"{calls} replica fetches in half a second"

    asyncio.run(scenario())


def test_the_follower_names_only_what_changed_and_forgets_what_it_left() -> None:
    def wanted(index: int, offset: int) -> FetchPartition:
        return FetchPartition("tid", index, offset, -1, 1, 0)

    session = FollowerSession()
    current = {("tid", i): wanted(i, 0) for i in range(3)}
    assert session.request(current) == (NO_SESSION_ID, NEW_SESSION, list(current.values()), [])
    session.answered(current, 77, 0)
    moved = {**current, ("tid", 1): wanted(1, 5)}
    del moved[("tid", 2)]
    assert session.request(moved) == (77, 1, [wanted(1, 5)], [("tid", 2)])
    session.answered(moved, 77, 0)
    assert session.request(moved) == (77, 2, [], [])
    session.unapplied_answer("tid", 1)  # backing off: forgotten until it is wanted again
    assert session.request({("tid", 0): wanted(0, 0)}) == (77, 2, [], [("tid", 1)])
    assert session.request(moved) == (77, 2, [wanted(1, 5)], [])
    session.answered(moved, 0, ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
    assert session.request(moved) == (NO_SESSION_ID, NEW_SESSION, list(moved.values()), [])
    assert session.refused == 1
    assert SESSIONLESS == ReplicaFetchRequest(REPLICATION_VERSION, 1, 0, 0, []).session_epoch, "old followers"
