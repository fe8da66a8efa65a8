"""The controller's election on a real in-process broker (tests/inprocess.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

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
