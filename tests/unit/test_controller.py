"""The controller's election on a real in-process broker (tests/inprocess.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec

from broker.metadata import records
from broker.metadata.records import NO_LEADER
from broker.partition_ids import TopicIdPartition
from tests.inprocess import InProcessBroker


def test_a_controller_whose_campaign_answer_was_lost_takes_the_key_up(tmp_path: Path) -> None:
    """Regression (found by the wal_gc simulation, seed 16): the controller key was written
    but the answer lost, so the process was not active while the key named it; nobody else
    campaigns while the key lives (as long as its lease), so the cluster had no controller,
    and no WAL file manager, for good."""

    async def test(harness: InProcessBroker) -> None:
        controller = harness.broker.controller
        assert controller.active
        controller.active = False  # the state an ambiguous campaign leaves
        await controller.step()
        assert controller.active, "the key names this incarnation under its lease: it is the controller"

    async def scenario() -> None:
        async with InProcessBroker(tmp_path) as harness:
            await test(harness)

    asyncio.run(scenario())


def test_a_topics_unclean_leader_election_enable_is_the_controllers_rule_for_it(tmp_path: Path) -> None:
    """Regression (issue 26, item 11): unclean.leader.election.enable was refused as a topic
    config; the controller now follows it per topic (else the broker's key). Both topics'
    only in-sync replica (broker 7) is gone and broker 0 holds an out-of-sync replica: only
    the topic that allows it gets broker 0 as its leader."""

    async def scenario() -> None:
        async with InProcessBroker(tmp_path) as harness:
            client = harness.client()
            assert await client.create_topic("unclean", 1, {"unclean.leader.election.enable": "true"}) == 0
            assert await client.create_topic("clean", 1) == 0
            broker = harness.broker
            for name in ("unclean", "clean"):
                topic = broker.catalog.get(name)
                assert topic is not None
                key = records.partition_key(str(topic.topic_id), 0)
                current = await broker.store.get(key)
                assert current is not None
                record = records.decode(current.value, records.PartitionStateRecord)
                lost = msgspec.structs.replace(
                    record, replicas=[0, 7], isr=[7], leader=7, leader_epoch=record.leader_epoch + 1
                )
                await broker.store.put(key, records.encode(lost), expected_revision=current.revision)
            for _ in range(100):
                await broker.controller.reconcile()
                states = {
                    name: broker.view.partitions[TopicIdPartition.of(broker.catalog.get(name).topic_id, 0)].record
                    for name in ("unclean", "clean")
                }
                if states["unclean"].leader == 0 and states["clean"].leader == NO_LEADER:
                    break
                await asyncio.sleep(0.05)
            assert (states["unclean"].leader, states["unclean"].isr) == (0, [0])
            assert states["clean"].leader == NO_LEADER

    asyncio.run(scenario())


class CountingStore:
    """The broker's real store, counting the controller's writes; `before_first_txn` runs
    just before the first transaction reaches the store (a concurrent writer's turn)."""

    def __init__(self, inner: Any, before_first_txn: Callable[[], Awaitable[None]] | None = None) -> None:
        self.inner = inner
        self.txns = 0
        self.puts = 0
        self._before_first_txn = before_first_txn

    async def txn(self, *args: Any, **kwargs: Any) -> int:
        if self._before_first_txn is not None:
            hook, self._before_first_txn = self._before_first_txn, None
            await hook()
        self.txns += 1
        return int(await self.inner.txn(*args, **kwargs))

    async def put(self, *args: Any, **kwargs: Any) -> int:
        self.puts += 1
        return int(await self.inner.put(*args, **kwargs))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


PARTITIONS = 300
DEAD = 7  # never registered: a broker that died


async def led_by_a_dead_broker(harness: InProcessBroker) -> list[TopicIdPartition]:
    """A topic whose every partition the dead broker led, with this broker in the ISR; the
    controller's loop is stopped so the test decides when it reconciles."""
    broker = harness.broker
    await broker.controller.stop()
    assert await harness.client().create_topic("orphaned", PARTITIONS) == 0
    topic = broker.catalog.get("orphaned")
    assert topic is not None
    pids = [TopicIdPartition.of(topic.topic_id, i) for i in range(PARTITIONS)]
    for start in range(0, PARTITIONS, 100):
        current = {pid: await broker.store.get(records.partition_key(*pid)) for pid in pids[start : start + 100]}
        puts = {}
        for pid, kv in current.items():
            assert kv is not None
            record = records.decode(kv.value, records.PartitionStateRecord)
            orphaned = msgspec.structs.replace(
                record, replicas=[DEAD, 0], isr=[DEAD, 0], leader=DEAD, leader_epoch=record.leader_epoch + 1
            )
            puts[kv.key] = records.encode(orphaned)
        await broker.store.txn({kv.key: kv.revision for kv in current.values() if kv is not None}, puts=puts)
    for _ in range(200):
        if all(broker.view.partitions[pid].record.leader == DEAD for pid in pids):
            return pids
        await asyncio.sleep(0.01)
    raise AssertionError("the view never applied the dead broker's leaderships")


def test_a_dead_brokers_leaderships_move_in_a_few_transactions(tmp_path: Path) -> None:
    """Regression (issue 28, item 3): the controller wrote each election as its own
    compare-and-set, one store round trip per partition in sequence, so the last of 1,016
    partitions a killed broker led had a leader again 83 s later on etcd. Now one pass's
    decisions go out in transactions of up to 128 writes."""

    async def scenario() -> None:
        async with InProcessBroker(tmp_path) as harness:
            pids = await led_by_a_dead_broker(harness)
            controller = harness.broker.controller
            counting = CountingStore(controller._store)
            controller._store = counting
            await controller.reconcile()
            states = [harness.broker.view.partitions[pid].record for pid in pids]
            assert {(s.leader, tuple(s.isr)) for s in states} == {(0, (0,))}
            assert (counting.txns, counting.puts) == (3, 0)  # 128 + 128 + 44

    asyncio.run(scenario())


def test_the_controller_writes_every_transaction_before_taking_its_own_new_roles(tmp_path: Path) -> None:
    """Regression (issue 28): the controller applied each transaction's writes to its own
    view, and so took up its own broker's new leaderships (milliseconds each), before it
    sent the next transaction: the last of 3,350 leaderships moved after a kill was written
    4 s after the first. The view's watch is stopped here, so every change it applies comes
    from the controller."""

    async def scenario() -> None:
        async with InProcessBroker(tmp_path) as harness:
            pids = set(await led_by_a_dead_broker(harness))
            broker = harness.broker
            await broker.view.stop()
            controller = broker.controller
            counting = CountingStore(controller._store)
            controller._store = counting
            applied_after: list[int] = []  # transactions written when each change reached the view
            broker.view.on_partition_changed(
                lambda pid, _state: applied_after.append(counting.txns) if pid in pids else None
            )
            await controller.reconcile()
            assert len(applied_after) == PARTITIONS
            assert set(applied_after) == {3}, f"changes applied after {sorted(set(applied_after))} transactions"

    asyncio.run(scenario())


def test_a_conflict_in_a_batch_costs_only_the_conflicting_partition(tmp_path: Path) -> None:
    """A leader changed one partition's state after the controller read it: the batch's
    transaction fails as a whole, the other partitions are still written, and the changed
    one is read again and decided on the next pass, never overwritten."""

    async def scenario() -> None:
        async with InProcessBroker(tmp_path) as harness:
            pids = await led_by_a_dead_broker(harness)
            broker = harness.broker
            contested = pids[37]
            key = records.partition_key(*contested)

            async def concurrent_change() -> None:
                kv = await broker.store.get(key)
                assert kv is not None
                record = records.decode(kv.value, records.PartitionStateRecord)
                changed = msgspec.structs.replace(record, partition_epoch=record.partition_epoch + 5)
                await broker.store.put(key, records.encode(changed), expected_revision=kv.revision)

            controller = broker.controller
            counting = CountingStore(controller._store, before_first_txn=concurrent_change)
            controller._store = counting
            await controller.reconcile()
            states = {pid: broker.view.partitions[pid].record for pid in pids}
            assert all(states[pid].leader == 0 for pid in pids if pid != contested)
            assert states[contested].leader == DEAD, "written over a change the controller had not seen"
            assert counting.txns + counting.puts <= 3 + 2 * 7 + 1  # one failed transaction per halving
            await controller.reconcile()
            final = broker.view.partitions[contested].record
            assert (final.leader, final.isr) == (0, [0])
            assert final.partition_epoch == states[contested].partition_epoch + 1

    asyncio.run(scenario())


def test_an_idle_tick_looks_at_no_partition_and_a_changed_one_is_decided(tmp_path: Path, monkeypatch: Any) -> None:
    """Regression (issue 28, item 4): every heartbeat tick (2 s) the controller ran every
    partition through the election rules, 140 ms of the event loop per tick at 20,000
    partitions for a cluster where nothing changed. Now a tick looks only at partitions whose
    state changed since the last pass; a broker, topic or controller change still wakes a
    pass over all of them."""
    from broker.cluster import controller as controller_module, elections

    looked_at: list[TopicIdPartition] = []
    rule = elections.reconcile

    def counting(state: Any, *args: Any, **kwargs: Any) -> Any:
        looked_at.append(state)
        return rule(state, *args, **kwargs)

    monkeypatch.setattr(elections, "reconcile", counting)

    async def scenario() -> None:
        async with InProcessBroker(tmp_path) as harness:
            broker = harness.broker
            controller = broker.controller
            await controller.stop()  # the test runs the passes
            assert await harness.client().create_topic("t", 40) == 0
            await controller.reconcile()  # a topic changed: a full pass
            assert len(looked_at) >= 40
            looked_at.clear()
            await controller.reconcile()  # a tick on an idle cluster
            assert looked_at == []
            topic = broker.catalog.get("t")
            assert topic is not None
            pid = TopicIdPartition.of(topic.topic_id, 5)
            kv = await broker.store.get(records.partition_key(*pid))
            assert kv is not None
            record = records.decode(kv.value, records.PartitionStateRecord)
            with_dead = msgspec.structs.replace(record, replicas=[0, DEAD], isr=[0, DEAD])
            await broker.store.put(kv.key, records.encode(with_dead), expected_revision=kv.revision)
            for _ in range(200):
                if broker.view.partitions[pid].record.isr == [0, DEAD]:
                    break
                await asyncio.sleep(0.01)
            await controller.reconcile()  # the changed partition: its dead replica is fenced
            assert looked_at == [with_dead]
            assert broker.view.partitions[pid].record.isr == [0]
            looked_at.clear()
            controller.wake()  # what a broker, topic or controller change does
            await controller.reconcile()
            assert len(looked_at) >= 40
            looked_at.clear()
            monkeypatch.setattr(controller_module, "FULL_PASS_S", 0.0)  # the safety net's time
            await controller.reconcile()
            assert len(looked_at) >= 40

    asyncio.run(scenario())
