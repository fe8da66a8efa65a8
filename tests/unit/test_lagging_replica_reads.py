"""Reads served by a broker whose replica lags, or that hosts none: only the leader may say
OFFSET_OUT_OF_RANGE (a client that takes the representative for the leader would reset its
offsets). Real partitions, WAL writer and reader over the in-memory store; the RPC between
the brokers is a direct call to the real read service."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import msgspec

from broker.clock import SystemClock
from broker.cluster.view import PartitionState
from broker.wal.cache import ObjectCache
from broker.handlers import fetch
from broker.metadata.records import BrokerRecord, PartitionStateRecord
from broker.objectstore import MemoryObjectStore
from broker.tiering.reader import TieredReader
from broker.partition import Partition
from broker.protocol.errors import ErrorCode
from broker.reads.replica_policy import forward_target
from broker.routing.messages import ReplicaReadResponse
from broker.reads.read_service import ReplicaReadService
from broker.topics import Topic
from broker.waiters import FetchWaiters
from tests.unit.test_fetch_handler import fetch_request
from tests.unit.test_partition import batch
from tests.unit.test_wal_writer import TOPIC_ID, Rig

LEADER, FOLLOWER, READER = 0, 1, 2  # brokers, all in az1
STATE = PartitionStateRecord(1, [LEADER, FOLLOWER], LEADER, 0, [LEADER, FOLLOWER])


def no_tiers() -> TieredReader:
    """A tiered reader over an empty store: these partitions have no tiered segments."""
    return TieredReader(MemoryObjectStore(clock=SystemClock()), lambda: "c", ObjectCache(0))


class Peers:
    """An RPC pool whose calls go straight to the named broker's read service (through
    msgspec, as the wire would), counting who was asked."""

    def __init__(self) -> None:
        self.services: dict[int, ReplicaReadService] = {}
        self.asked: list[int] = []

    def get(self, node_id: int, host: str, port: int) -> SimpleNamespace:
        async def call(request, timeout_s: float):  # type: ignore[no-untyped-def]
            self.asked.append(node_id)
            response = await self.services[node_id].handle(request)
            return msgspec.msgpack.decode(msgspec.msgpack.encode(response), type=ReplicaReadResponse)

        return SimpleNamespace(call=call, address=f"broker{node_id}")


def broker_view(node_id: int, rig: Rig, hosted: dict, peers: Peers) -> SimpleNamespace:
    """What the fetch handler and the forwarding rule ask of a broker."""
    topic = Topic("t", TOPIC_ID, 1, {}, rig.settings)
    return SimpleNamespace(
        config=SimpleNamespace(node_id=node_id, az="az1"),
        catalog=SimpleNamespace(get=lambda name: topic if name == "t" else None, by_id=lambda topic_id: topic),
        view=SimpleNamespace(
            partitions={(str(TOPIC_ID), 0): PartitionState(STATE, 5)},
            brokers={
                n: BrokerRecord(1, n, "az1", "h", 9092, "h", 9093, False, "0", "x") for n in (LEADER, FOLLOWER, READER)
            },
        ),
        replica_manager=SimpleNamespace(partitions=hosted, get=lambda name, index: hosted[(name, index)]),
        rpc_pool=peers,
        wal_reader=rig.reader,
        waiters=FetchWaiters(),
        metrics=rig.metrics,
        stopping=False,
        router=SimpleNamespace(racks=SimpleNamespace(remember=lambda peer, rack: None)),
    )


async def cluster(tmp_path: Path) -> tuple[Rig, Partition, Peers]:
    """Leader with 5 committed batches (offsets 0-9); a follower that copied only the first 2."""
    rig = Rig(tmp_path, MemoryObjectStore(clock=SystemClock()), partitions=1, wal_linger_ms=1)
    leader = rig.partitions[0]
    leader.topic_id = str(TOPIC_ID)
    for seq in range(0, 10, 2):
        [result] = await asyncio.gather(*rig.writer.submit([rig.append(0, batch(seq, producer_id=50))]))
        assert result.error_code == 0
    follower = Partition.open(
        "t", 0, tmp_path / "follower", rig.settings, rig.clock, 86_400_000, on_append=lambda p: None
    )
    follower.make_follower(STATE, 5)
    follower.append_replicated([(int(e.kind), bytes(e.data)) for e in leader.log.read(0, 1 << 20, 4)], 4)
    peers = Peers()
    hosted_by = {LEADER: {("t", 0): leader}, FOLLOWER: {("t", 0): follower}}
    for node, hosted in hosted_by.items():
        replicas = SimpleNamespace(get=lambda name, index, hosted=hosted: hosted[(name, index)])
        peers.services[node] = ReplicaReadService(
            SimpleNamespace(by_id=lambda topic_id: SimpleNamespace(name="t")), replicas, FetchWaiters(), no_tiers()
        )  # type: ignore[arg-type]
    return rig, follower, peers


async def fetch_at(broker: SimpleNamespace, offset: int):  # type: ignore[no-untyped-def]
    response = await fetch.handle(broker, SimpleNamespace(api_version=12, peer="p"), fetch_request(("t", 0, offset)))
    return response.responses[0].partitions[0]


def test_a_lagging_follower_asks_the_leader_instead_of_answering_out_of_range(tmp_path: Path) -> None:
    """Regression (issue 11, defect 3): a representative whose replica lagged (it had just
    restarted) answered OFFSET_OUT_OF_RANGE for an offset valid on the leader."""

    async def scenario() -> None:
        rig, follower, peers = await cluster(tmp_path)
        broker = broker_view(FOLLOWER, rig, {("t", 0): follower}, peers)
        answer = await fetch_at(broker, 6)  # past the follower's log end (4), below the leader's (10)
        assert answer.error_code == 0 and answer.high_watermark == 10
        assert [o for o in range(6, 10, 2)] == _offsets(answer.records) and peers.asked == [LEADER]
        beyond = await fetch_at(broker, 20)  # past the leader's end too: the leader says so
        assert beyond.error_code == ErrorCode.OFFSET_OUT_OF_RANGE

    asyncio.run(scenario())


def test_a_lagging_source_replica_sends_a_broker_without_storage_to_the_leader(tmp_path: Path) -> None:
    """Regression (issue 11, defect 3): the replica a stateless broker reads from answered
    OFFSET_OUT_OF_RANGE for an offset past its own log end."""

    async def scenario() -> None:
        rig, follower, peers = await cluster(tmp_path)
        broker = broker_view(READER, rig, {}, peers)
        broker.view.partitions[(str(TOPIC_ID), 0)] = PartitionState(
            PartitionStateRecord(1, [LEADER, FOLLOWER], LEADER, 0, [FOLLOWER, LEADER]), 5
        )
        broker.view.brokers[LEADER] = msgspec.structs.replace(broker.view.brokers[LEADER], az="az2")
        answer = await fetch_at(broker, 6)  # the in-AZ follower is asked first, then the leader
        assert answer.error_code == 0 and _offsets(answer.records) == [6, 8]
        assert peers.asked == [FOLLOWER, LEADER]

    asyncio.run(scenario())


def test_list_offsets_and_epochs_of_a_followed_partition_go_to_the_leader(tmp_path: Path) -> None:
    """Regression (issue 11, defect 3): ListOffsets and OffsetForLeaderEpoch were answered
    from a lagging replica's log end and epoch history."""

    async def scenario() -> None:
        rig, follower, peers = await cluster(tmp_path)
        header = SimpleNamespace(forwarded=False)
        topic = Topic("t", TOPIC_ID, 1, {}, rig.settings)
        assert forward_target(broker_view(FOLLOWER, rig, {("t", 0): follower}, peers), header, topic, 0) == LEADER
        assert forward_target(broker_view(READER, rig, {}, peers), header, topic, 0) == LEADER
        assert forward_target(broker_view(LEADER, rig, {("t", 0): rig.partitions[0]}, peers), header, topic, 0) is None

    asyncio.run(scenario())


def _offsets(records: bytes) -> list[int]:
    from kafka.record.default_records import DefaultRecordBatch

    offsets, position = [], 0
    while position < len(records):
        size = int.from_bytes(records[position + 8 : position + 12], "big") + 12
        offsets.append(DefaultRecordBatch(records[position : position + size]).base_offset)
        position += size
    return offsets


def test_a_fetch_mixing_hosted_and_remote_partitions_long_polls_both(tmp_path: Path) -> None:
    """Issue 12 (fetch wake-up): a Fetch for a hosted partition and one this broker reads from
    another replica waits on both at once: the remote replica is asked once, long-polling
    (not polled every 100 ms), and a commit there wakes the fetch at once; a local append
    wakes it too."""

    async def scenario() -> None:
        rig = Rig(tmp_path, MemoryObjectStore(clock=SystemClock()), partitions=2, wal_linger_ms=1)
        for index in range(2):
            rig.partitions[index].topic_id = str(TOPIC_ID)
            [result] = await asyncio.gather(*rig.writer.submit([rig.append(index, batch(0, producer_id=60 + index))]))
            assert result.error_code == 0
        local, remote = rig.partitions[0], rig.partitions[1]
        peers, leader_waiters = Peers(), FetchWaiters()
        remote_replicas = SimpleNamespace(get=lambda name, index: remote)
        peers.services[LEADER] = ReplicaReadService(
            SimpleNamespace(by_id=lambda topic_id: SimpleNamespace(name="t")),
            remote_replicas,
            leader_waiters,
            no_tiers(),
        )  # type: ignore[arg-type]
        broker = broker_view(READER, rig, {("t", 0): local}, peers)
        broker.catalog = SimpleNamespace(
            get=lambda name: Topic("t", TOPIC_ID, 2, {}, rig.settings),
            by_id=lambda topic_id: Topic("t", TOPIC_ID, 2, {}, rig.settings),
        )
        broker.view.partitions[(str(TOPIC_ID), 1)] = PartitionState(STATE, 5)

        def tail(local_offset: int, remote_offset: int):  # type: ignore[no-untyped-def]
            request = fetch_request(("t", 0, local_offset), ("t", 1, remote_offset))
            request.max_wait_ms = 30_000
            return asyncio.ensure_future(fetch.handle(broker, SimpleNamespace(api_version=12, peer="p"), request))

        fetching = tail(2, 2)
        await asyncio.sleep(0.5)  # long enough for several polls of the remote replica, had it polled
        assert not fetching.done() and peers.asked == [LEADER, LEADER], "one quick read, then one long poll"
        [result] = await asyncio.gather(*rig.writer.submit([rig.append(1, batch(2, producer_id=61))]))
        leader_waiters.notify(remote.key)
        answer = {p.partition_index: p for p in (await asyncio.wait_for(fetching, 5)).responses[0].partitions}
        assert result.error_code == 0 and _offsets(answer[1].records) == [2] and answer[0].records in (None, b"")

        fetching = tail(2, 4)
        await asyncio.sleep(0.1)
        [result] = await asyncio.gather(*rig.writer.submit([rig.append(0, batch(2, producer_id=60))]))
        broker.waiters.notify(local.key)
        answer = {p.partition_index: p for p in (await asyncio.wait_for(fetching, 5)).responses[0].partitions}
        assert _offsets(answer[0].records) == [2]
        await asyncio.sleep(0)  # the cancelled long poll cleans up after itself
        assert not leader_waiters._waiting, "the long poll at the remote replica was withdrawn"

    asyncio.run(scenario())
