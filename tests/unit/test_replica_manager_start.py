"""Issue 28, item 2 (in part): opening the hosted partitions at start hands the event loop
back every loop_slices.SLICE_S, so a broker with thousands of them keeps its lease (it exited with
LeaseExpired when the opens outlasted its 6 s lease) and serves its metadata watch meanwhile."""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker.broker import Broker
from broker.clock import ManualClock
from broker.config import load_config
from tests.unit.test_group_coordinator import START_MS, start_core, stop_core

PARTITIONS = 40


class SlowOpens(ManualClock):
    """A clock on which every reading is 20 ms after the last: partitions that take time to open."""

    def monotonic(self) -> float:
        self._monotonic_ms += 20
        return super().monotonic()


async def broker_with_a_topic(data_dir: Path, clock: ManualClock) -> None:
    broker = await start_core(data_dir, clock)
    topic = broker.catalog.prepare("many", PARTITIONS, {"diskless.enable": "false"})
    await broker.catalog.create(topic, broker.assign_replicas(range(PARTITIONS), 1))
    await broker.controller.step()
    while sum(1 for key in broker.replica_manager.partitions if key[0] == "many") < PARTITIONS:
        await clock.sleep(0.01)
    await stop_core(broker)


async def restarted(data_dir: Path, clock: ManualClock) -> Broker:
    config = load_config(overrides={"data.dir": str(data_dir), "metrics.listen": None}, environ={})
    broker = Broker(config, clock)
    broker.cluster_id = "test"
    await broker.view.start()
    await broker.membership.start()
    broker.replica_manager._clock = SlowOpens(START_MS)
    return broker


def test_opening_hosted_partitions_hands_the_loop_back(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = ManualClock(START_MS)
        await broker_with_a_topic(tmp_path, clock)
        broker = await restarted(tmp_path, clock)
        seen: list[int] = []

        async def other_work() -> None:  # a lease keep-alive, the metadata watch
            while True:
                seen.append(len(broker.replica_manager.partitions))
                await clock.sleep(0)

        other = asyncio.get_running_loop().create_task(other_work())
        await clock.sleep(0)
        await broker.replica_manager.start()
        other.cancel()
        total = len(broker.replica_manager.partitions)
        assert total >= PARTITIONS and broker.replica_manager.loaded
        assert any(0 < count < total for count in seen), f"nothing ran while partitions opened: {seen}"
        await stop_core(broker)

    asyncio.run(scenario())


def test_a_broker_stopped_while_opening_opens_no_more(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = ManualClock(START_MS)
        await broker_with_a_topic(tmp_path, clock)
        broker = await restarted(tmp_path, clock)
        starting = asyncio.get_running_loop().create_task(broker.replica_manager.start())
        while not broker.replica_manager.partitions:
            await clock.sleep(0)
        await broker.replica_manager.stop()
        await starting
        assert not broker.replica_manager.partitions and not broker.replica_manager.loaded
        await stop_core(broker)

    asyncio.run(scenario())
