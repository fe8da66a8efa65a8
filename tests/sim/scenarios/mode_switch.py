"""Online mode switches under faults: three real brokers, one topic flipped between classic
and diskless again and again (by whichever broker the operator's AlterConfigs reaches) while
producers (plain and idempotent) and consumers run, brokers crash and restart, the network
splits and the stores fail. The WAL file manager runs with a short grace, so an object a
switched partition still references would be deleted within the run. Then the faults stop,
the cluster settles, every partition reaches the topic's final mode, and the auditor checks
every promise the clients were given (and reads every batch back, from the WAL where the
log holds coordinates).
"""

from __future__ import annotations

import asyncio

from broker.metadata import MetadataError
from broker.modes.status import recorded_mode
from broker.partition_ids import TopicIdPartition
from broker.protocol.errors import ApiError

from ..audit import audit, settle
from ..cluster import SimCluster
from ..determinism import SimRandom
from ..metadata import MetadataFaults
from ..network import NetFaults
from ..objectstore import ObjectStoreFaults
from ..registry import scenario
from ..runner import Sim
from ..workload import Key, Ledger, consume, produce, produce_idempotent
from ..faults import BROKERS, fault_schedule

TOPIC, PARTITIONS = "flip", 3
TRAFFIC_S = 25.0
SWITCHED_S = 120.0  # after the faults: every partition in the final mode within this (virtual) time


async def create_topic(cluster: SimCluster, diskless: bool) -> list[Key]:
    first = cluster.live()[0].broker
    while len(first.view.brokers) < BROKERS:
        await asyncio.sleep(0.1)
    configs = {"diskless.enable": str(diskless).lower(), "min.insync.replicas": "2"}
    topic = first.catalog.prepare(TOPIC, PARTITIONS, configs)
    await first.catalog.create(topic, first.assign_replicas(range(PARTITIONS), BROKERS))
    keys = [(TOPIC, p) for p in range(PARTITIONS)]
    while not all(cluster.leader_broker(*key) for key in keys):
        await asyncio.sleep(0.1)
    return keys


async def flip(cluster: SimCluster, diskless: bool) -> bool:
    """`diskless.enable` set through one live broker, as IncrementalAlterConfigs does it."""
    live = cluster.live()
    if not live:
        return False
    catalog = live[0].broker.catalog
    topic = catalog.get(TOPIC)
    if topic is None:
        return False
    try:
        await catalog.set_configs(TOPIC, {**topic.configs, "diskless.enable": str(diskless).lower()})
    except (MetadataError, ApiError):
        return False
    return True


async def flip_schedule(cluster: SimCluster, rng: SimRandom, diskless: bool, until_s: float) -> None:
    """Flip every few seconds, sometimes again before the last switch finished (a write with
    an unknown outcome may or may not have flipped it: the store has the last word)."""
    loop = asyncio.get_running_loop()
    while loop.time() < until_s:
        await asyncio.sleep(rng.between((0.5, 5.0)))
        if await flip(cluster, not diskless):
            diskless = not diskless


async def final_mode(cluster: SimCluster, within_s: float) -> bool:
    """`diskless.enable` as every live broker's catalog has it, once they agree: a broker
    whose metadata watch broke while the store was unreachable lists it again after a
    backoff, and the partitions may settle before it has (seed 985116 asserted at once)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while len(modes := {node.broker.catalog.get(TOPIC).settings.diskless for node in cluster.live()}) != 1:
        assert loop.time() < deadline, f"the brokers disagree about {TOPIC}'s diskless.enable"
        await asyncio.sleep(0.5)
    return modes.pop()


def unswitched(cluster: SimCluster, keys: list[Key], diskless: bool) -> list[str]:
    """The partitions whose leader does not append in `diskless` mode or has not recorded it."""
    waiting = []
    for key in keys:
        broker = cluster.leader_broker(*key)
        if broker is None:
            waiting.append(f"{key}: no leader")
            continue
        partition = broker.replica_manager.partitions[key]
        state = broker.view.partitions.get(TopicIdPartition(partition.topic_id, partition.index))
        topic = broker.catalog.get(TOPIC)
        recorded = None if state is None or topic is None else recorded_mode(state.record, topic)
        if partition.diskless != diskless or recorded is None or recorded[0] != diskless:
            waiting.append(
                f"{key}: log in {'diskless' if partition.diskless else 'classic'} since "
                f"{partition.modes.boundary()}, recorded {recorded}, high watermark {partition.log.high_watermark}"
            )
    return waiting


@scenario("mode_switch", max_virtual_s=1200.0, max_steps=3_000_000, test_seeds=8)
async def mode_switch(sim: Sim) -> dict[str, int]:
    """3 brokers, one topic switched between classic and diskless under crashes and faults."""
    rng = sim.fork("scenario")
    azs = ["az1"] if rng.chance(0.5) else ["az1", "az2", "az3"]
    built = SimCluster.build(
        sim,
        azs=azs,
        settings={
            "wal.file.manager.interval.ms": "1000",
            "wal.file.manager.grace.ms": "1000",
            "wal.commit.deadline.ms": "3000",
        },
        metadata_faults=MetadataFaults.none(),
        object_faults=ObjectStoreFaults.none(),
        net_faults=NetFaults.none(),
    )
    with built.running():
        for node_id in range(BROKERS):
            built.start(node_id)
        await built.wait_started()
        keys = await create_topic(built, diskless=rng.chance(0.5))
        weather = rng.fork("weather")
        built.metadata.faults = MetadataFaults(
            unavailable_p=weather.choice([0.0, 0.02]), ambiguous_p=weather.choice([0.0, 0.05])
        )
        built.objects.faulty.faults = weather.choice([ObjectStoreFaults(), ObjectStoreFaults.flaky()])
        built.network.faults = weather.choice([NetFaults(), NetFaults.flaky()])
        ledger = Ledger()
        loop = asyncio.get_running_loop()
        until_s = loop.time() + TRAFFIC_S
        clients = rng.fork("clients")
        tasks = [
            loop.create_task(produce(built, ledger, clients.fork("p"), "p", azs[0], keys, until_s)),
            loop.create_task(produce_idempotent(built, ledger, clients.fork("i"), "i", azs[-1], keys, until_s)),
        ]
        tasks += [
            loop.create_task(
                consume(
                    built,
                    ledger,
                    clients.fork(f"c{k[1]}"),
                    f"c{k[1]}",
                    azs[i % len(azs)],
                    k,
                    lambda: loop.time() > until_s,
                )
            )
            for i, k in enumerate(keys)
        ]
        tasks.append(loop.create_task(fault_schedule(built, rng.fork("faults"), until_s)))
        flips = loop.create_task(
            flip_schedule(
                built, rng.fork("flips"), built.live()[0].broker.catalog.get(TOPIC).settings.diskless, until_s
            )
        )
        await asyncio.gather(*tasks, flips)
        await settle(built, keys)
        final = await final_mode(built, SWITCHED_S)
        deadline = loop.time() + SWITCHED_S
        while waiting := unswitched(built, keys, final):
            if loop.time() > deadline:
                raise AssertionError(f"{TOPIC} did not reach {'diskless' if final else 'classic'}: {waiting}")
            await asyncio.sleep(0.5)
        counts = await audit(built, ledger, keys)
        markers = [len(built.leader_broker(*key).replica_manager.partitions[key].modes.changes) for key in keys]
        return {**counts, "mode_markers": sum(markers)}
