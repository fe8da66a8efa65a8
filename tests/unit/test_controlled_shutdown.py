"""Controlled shutdown decides on the metadata store's state, not on a view that lags it.

One real broker in-process (node 0) beside a registered broker 1 that holds the controller
key and is played by the test: it writes the partition states a controller would. A broker's
view lags the store while its watch is slow or broken (it lists again half a second later):
here the view is stopped and started again by hand. Found by the `transactions` simulation
(seed 20213): a draining broker whose watch had just broken was made leader of two
partitions (their other replica was down) and closed its listener without knowing, while a
peer named it their leader; it had waited only for the revision its own view had reached.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from broker.broker import Broker
from broker.clock import SystemClock
from broker.cluster.messages import VIEW_REVISION_VERSION, ViewRevisionRequest, ViewRevisionResponse
from broker.metadata import LocalMetadataStore, records
from broker.partition_ids import TopicIdPartition
from broker.peer_service import PeerRequest, PeerResponse
from broker.rpc import RpcServer
from tests.inprocess import InProcessBroker

SETTINGS = {"offsets.topic.replication.factor": "1"}  # broker 0 follows nobody: broker 1 serves no fetch


def seed_store(data_dir: Path, rpc_port: int | None = None) -> None:
    """Before broker 0 starts: broker 1 registered and holding the controller key, so
    broker 0 never decides leadership itself."""

    async def write() -> None:
        store = LocalMetadataStore(data_dir / "metadata" / "store.json", SystemClock())
        peer = records.BrokerRecord(
            records.RECORD_VERSION,
            1,
            None,
            "127.0.0.1",
            1,
            None if rpc_port is None else "127.0.0.1",
            rpc_port or 0,
            False,
            "test",
            "broker-1",
        )
        await store.put(records.broker_key(1), records.encode(peer))
        controller = records.ControllerRecord(records.RECORD_VERSION, 1, "broker-1")
        await store.put(records.CONTROLLER_KEY, records.encode(controller))
        await store.close()

    asyncio.run(write())


async def offline_partition(broker: Broker) -> TopicIdPartition:
    """A partition whose only replica (and ISR member) is broker 0, without a leader: the
    state a controller leaves when that replica is gone, until it is back."""
    topic = await broker.catalog.create(broker.catalog.prepare("t", 1, {}), {0: [0]})
    pid = TopicIdPartition(str(topic.topic_id), 0)
    kv = await broker.store.get(records.partition_key(*pid))
    assert kv is not None
    state = records.decode(kv.value, records.PartitionStateRecord)
    offline = records.PartitionStateRecord(records.RECORD_VERSION, [0], records.NO_LEADER, 1, [0], 1)
    assert state.leader == 0
    await broker.store.put(records.partition_key(*pid), records.encode(offline), expected_revision=kv.revision)
    while broker.view.partitions[pid].record.leader != records.NO_LEADER:
        await asyncio.sleep(0.01)
    return pid


async def elect_broker_0(broker: Broker, pid: TopicIdPartition) -> int:
    """What the controller writes when broker 0 (draining or not) is the only live ISR member."""
    kv = await broker.store.get(records.partition_key(*pid))
    assert kv is not None
    elected = records.PartitionStateRecord(records.RECORD_VERSION, [0], 0, 2, [0], 2)
    return await broker.store.put(records.partition_key(*pid), records.encode(elected), expected_revision=kv.revision)


async def led_by_0_in_store(broker: Broker) -> int:
    kvs = await broker.store.list(records.PARTITION_PREFIX)
    return sum(records.decode(kv.value, records.PartitionStateRecord).leader == 0 for kv in kvs)


def test_a_shutdown_whose_view_lags_the_store_waits_for_it_and_counts_what_it_was_given(tmp_path: Path) -> None:
    """The store makes broker 0 leader of a partition while broker 0's watch is down: its
    controlled shutdown does not finish on its stale view, and once the view lists again it
    counts that partition as led here. Before the fix it returned at once, counting one
    partition fewer than the store named it leader of."""
    seed_store(tmp_path)

    async def main() -> None:
        async with InProcessBroker(tmp_path, SETTINGS) as harness:
            broker = harness.broker
            pid = await offline_partition(broker)
            await broker.view.stop()  # the watch broke: the view lists again later
            await elect_broker_0(broker, pid)
            shutdown = asyncio.get_running_loop().create_task(broker.controlled_shutdown())
            done, _ = await asyncio.wait({shutdown}, timeout=0.5)
            assert not done, f"finished on a view that lags the store: {shutdown.result()}"
            await broker.view.start()
            outcome = await asyncio.wait_for(shutdown, 10)
            assert outcome is not None and not outcome.timed_out, outcome
            assert broker.view.partitions[pid].record.leader == 0
            assert outcome.remain == await led_by_0_in_store(broker), outcome

    asyncio.run(main())


def test_a_view_that_does_not_catch_up_by_the_deadline_makes_the_shutdown_time_out(tmp_path: Path) -> None:
    """A view that never catches up (its watch stays down) ends the wait at
    controlled.shutdown.timeout.ms, and the outcome says it timed out: the broker cannot
    tell what it leads. Before the fix it returned at once and said it had not."""
    seed_store(tmp_path)

    async def main() -> None:
        async with InProcessBroker(tmp_path, {**SETTINGS, "controlled.shutdown.timeout.ms": "5000"}) as harness:
            broker = harness.broker
            pid = await offline_partition(broker)
            await broker.view.stop()
            await elect_broker_0(broker, pid)
            shutdown = asyncio.get_running_loop().create_task(broker.controlled_shutdown())
            done, _ = await asyncio.wait({shutdown}, timeout=0.3)
            assert not done, f"finished on a view that lags the store: {shutdown.result()}"
            harness.clock.advance(5000)
            outcome = await asyncio.wait_for(shutdown, 10)
            assert outcome is not None and outcome.timed_out, outcome
            await broker.view.start()  # for a clean stop

    asyncio.run(main())


def test_a_leadership_that_comes_while_the_peers_are_asked_is_waited_for_again(tmp_path: Path) -> None:
    """Broker 1, asked for its view's revision, first makes broker 0 leader of a partition
    (as a controller does when broker 0 is the only live ISR member left) and answers a
    revision from before that: the shutdown asks again, until broker 1 says it has applied
    the change, so it will not name broker 0 leader after broker 0's port closed without
    knowing of the change itself."""

    async def main() -> None:
        asked: list[int] = []
        state: dict[str, Any] = {}

        async def answer(request: Any) -> Any:
            assert isinstance(request, ViewRevisionRequest)
            broker: Broker = state["broker"]
            _, now = await broker.store.list_with_revision(records.CONTROLLER_KEY)
            if not asked:
                elected = await elect_broker_0(broker, state["pid"])
                asked.append(elected - 1)
            else:
                asked.append(now)
            return ViewRevisionResponse(VIEW_REVISION_VERSION, 1, asked[-1])

        server: RpcServer[Any, Any] = RpcServer(answer, PeerRequest, PeerResponse)
        await server.start("127.0.0.1", 0)
        try:
            await asyncio.to_thread(seed_store, tmp_path, server.port)
            async with InProcessBroker(tmp_path, SETTINGS) as harness:
                broker = harness.broker
                state["broker"] = broker
                state["pid"] = await offline_partition(broker)
                outcome = await asyncio.wait_for(broker.controlled_shutdown(), 10)
                assert outcome is not None and not outcome.timed_out and not outcome.peers_behind, outcome
                assert len(asked) >= 2, f"broker 1 was asked once, before the leadership it gave: {asked}"
                assert asked[-1] >= broker.view.leadership_changed_at(0)
                assert outcome.remain == await led_by_0_in_store(broker), outcome
        finally:
            await server.stop()

    asyncio.run(main())
