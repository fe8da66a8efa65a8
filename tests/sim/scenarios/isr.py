"""ISR changes whose metadata-store answer is lost, then a failover onto the replica they
concerned: the leader must not acknowledge records that replica lacks while the store may
already list it as in sync (Kafka's "maximal ISR").

Each seed runs one round on one partition (classic or diskless, RF 3, replicas [0, 1, 2]
so broker 1 is elected first after broker 0): broker 1 is cut off until it leaves the ISR;
it comes back, and while it rejoins every metadata write is applied but its answer lost (and
watches break rather than tell); as soon as the store lists it in the ISR it is cut off again
and the store goes away for a few seconds (nobody reads the outcome), producers go on, and
the leader is killed. Whoever leads next, every acknowledged record must still be there.
"""

from __future__ import annotations

import asyncio

from broker.metadata import records

from ..audit import audit, settle
from ..cluster import SimCluster
from ..determinism import SimRandom
from ..metadata import MetadataFaults
from ..network import NetFaults
from ..objectstore import ObjectStoreFaults
from ..registry import scenario
from ..runner import Sim
from ..workload import Key, Ledger, consume, produce

LEADER, REJOINING, OTHER = 0, 1, 2


async def stored_isr(cluster: SimCluster, topic_id: str) -> list[int]:
    kv = await cluster.metadata.inner.get(records.partition_key(topic_id, 0))
    assert kv is not None
    return records.decode(kv.value, records.PartitionStateRecord).isr


async def one_round(cluster: SimCluster, rng: SimRandom, topic_id: str) -> None:
    loop = asyncio.get_running_loop()
    await asyncio.sleep(rng.between((0.5, 3.0)))
    cluster.network.partition(REJOINING, [LEADER, OTHER])
    deadline = loop.time() + 30
    while REJOINING in await stored_isr(cluster, topic_id) and loop.time() < deadline:
        await asyncio.sleep(0.1)  # shrunk out after replica.lag.time.max.ms
    await asyncio.sleep(rng.between((0.2, 2.0)))
    # applied, answer lost; slow answers, and watches that break instead of telling
    cluster.metadata.faults = MetadataFaults(delay_s=(0.05, 0.1), ambiguous_p=1.0, watch_break_p=1.0)
    cluster.network.heal()
    deadline = loop.time() + 10
    while REJOINING not in await stored_isr(cluster, topic_id) and loop.time() < deadline:
        await asyncio.sleep(0.005)
    cluster.network.partition(REJOINING, [LEADER, OTHER])  # listed in sync, cut off again
    cluster.metadata.faults = MetadataFaults.none()
    outage_s = rng.between((2.0, 6.0))
    cluster.metadata.unavailable_for(outage_s)  # nobody learns the outcome from the store for a while
    cluster.sim.trace.record(
        "scenario", "broker %d cut off again; store ISR %s", REJOINING, await stored_isr(cluster, topic_id)
    )
    await asyncio.sleep(rng.between((0.5, outage_s)))  # producers go on
    cluster.crash(LEADER)
    await asyncio.sleep(rng.between((2.0, 8.0)))
    cluster.network.heal()
    cluster.start(LEADER)


@scenario("isr", max_virtual_s=1200.0, max_steps=3_000_000, test_seeds=16)
async def isr(sim: Sim) -> dict[str, int]:
    """ISR expansions with lost answers, then the rejoined replica cut off and the leader killed."""
    rng = sim.fork("scenario")
    cluster = SimCluster.build(
        sim,
        azs=["az1"],
        settings={"replica.lag.time.max.ms": "3000"},
        metadata_faults=MetadataFaults.none(),
        object_faults=ObjectStoreFaults.none(),
        net_faults=NetFaults.none(),
    )
    with cluster.running():
        for node_id in range(3):
            cluster.start(node_id)
        await cluster.wait_started()
        first = cluster.brokers[LEADER].broker
        while len(first.view.brokers) < 3:
            await asyncio.sleep(0.1)
        diskless = "true" if rng.chance(0.5) else "false"
        topic = first.catalog.prepare("t", 1, {"diskless.enable": diskless, "min.insync.replicas": "2"})
        await first.catalog.create(topic, {0: [LEADER, REJOINING, OTHER]})
        keys: list[Key] = [("t", 0)]
        while cluster.leader_broker("t", 0) is None:
            await asyncio.sleep(0.1)
        ledger = Ledger()
        loop = asyncio.get_running_loop()
        until_s = loop.time() + 30.0
        clients = rng.fork("clients")
        await asyncio.gather(
            produce(cluster, ledger, clients.fork("p"), "p", "az1", keys, until_s),
            consume(cluster, ledger, clients.fork("c"), "c", "az1", keys[0], lambda: loop.time() > until_s),
            one_round(cluster, rng.fork("round"), str(topic.topic_id)),
        )
        await settle(cluster, keys)
        return await audit(cluster, ledger, keys)
