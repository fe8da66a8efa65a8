"""Three real brokers under faults, driven by Kafka clients, then audited (audit.py).

Each seed draws a world: one AZ or three, how often the metadata store, the object store,
the network and the disks fail, and a schedule of crashes (kill -9 and restart), graceful
stops (SIGTERM: controlled shutdown, then restart, as in a rolling restart), network
partitions and outages. Producers pipeline requests that mix classic (acks=all, RF 3) and
diskless partitions, consumers tail every partition from offset 0 (a reset is a failure),
and a client commits group offsets past the compaction threshold of `__consumer_offsets`
while coordinators fail over. Then the faults stop, the cluster settles, and the auditor
checks every promise the clients were given.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from broker.log.partition_log import PartitionLog

from ..audit import audit, settle
from ..cluster import SimCluster
from ..determinism import SimRandom
from ..metadata import MetadataFaults
from ..network import NetFaults
from ..objectstore import ObjectStoreFaults
from ..registry import scenario
from ..runner import Sim
from ..workload import Key, Ledger, commit_offsets, consume, produce, produce_idempotent

BROKERS = 3
TOPICS = {"disk": ("true", 2), "classic": ("false", 2)}  # name -> (diskless.enable, partitions)
TRAFFIC_S = 25.0


@contextmanager
def failing_disks(rng: SimRandom, probability: float) -> Iterator[None]:
    """Partition-log appends raise OSError (EIO) now and then: a disk that fails writes."""
    real = PartitionLog.append

    def append(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        if rng.chance(probability):
            raise OSError(5, "Input/output error (simulated)")
        return real(self, *args, **kwargs)

    PartitionLog.append = append  # type: ignore[method-assign]
    try:
        yield
    finally:
        PartitionLog.append = real  # type: ignore[method-assign]


async def create_topics(cluster: SimCluster) -> list[Key]:
    first = cluster.live()[0].broker
    while len(first.view.brokers) < BROKERS:  # every broker registered
        await asyncio.sleep(0.1)
    for name, (diskless, partitions) in TOPICS.items():
        topic = first.catalog.prepare(name, partitions, {"diskless.enable": diskless, "min.insync.replicas": "2"})
        await first.catalog.create(topic, first.assign_replicas(range(partitions), BROKERS))
    keys = [(name, p) for name, (_d, partitions) in TOPICS.items() for p in range(partitions)]
    while not all(cluster.leader_broker(*key) for key in keys):
        await asyncio.sleep(0.1)
    return keys


async def fault_schedule(
    cluster: SimCluster, rng: SimRandom, until_s: float, stops: Counter[str] | None = None
) -> None:
    """Crashes and restarts, graceful stops and restarts, partitions, store outages: one at
    a time, at random moments. `stops` counts the graceful stops and what they moved."""
    stops = Counter() if stops is None else stops
    loop = asyncio.get_running_loop()
    while loop.time() < until_s:
        await asyncio.sleep(rng.between((1.0, 4.0)))
        roll = rng.random()
        victim = rng.randrange(BROKERS)
        if roll < 0.35 and not cluster.down:
            cluster.crash(victim)
            await asyncio.sleep(rng.between((0.5, 8.0)))
            cluster.start(victim)
            if rng.chance(0.5):  # back, registered, serving clients, but cut off from the other brokers: it lags
                cluster.network.partition(victim, [n for n in range(BROKERS) if n != victim])
                await asyncio.sleep(rng.between((2.0, 12.0)))
                cluster.network.heal()
        elif roll < 0.55:
            others = [n for n in range(BROKERS) if n != victim]
            cluster.network.partition(victim, others)
            await asyncio.sleep(rng.between((0.5, 8.0)))
            cluster.network.heal()
        elif roll < 0.7:
            cluster.metadata.unavailable_for(rng.between((0.5, 4.0)))
        elif roll < 0.8:
            cluster.objects.faulty.stall()
            await asyncio.sleep(rng.between((0.5, 4.0)))
            cluster.objects.faulty.resume()
        elif not cluster.down and cluster.brokers[victim].running:  # a rolling restart's step
            outcome = await cluster.stop(victim)
            stops["graceful_stops"] += 1
            if outcome is not None:
                stops["leaderships_moved"] += outcome.moved
                stops["shutdowns_timed_out"] += outcome.timed_out
            await asyncio.sleep(rng.between((0.5, 4.0)))
            cluster.start(victim)


@scenario("cluster", max_virtual_s=1200.0, max_steps=3_000_000, test_seeds=24)
async def cluster(sim: Sim) -> dict[str, int]:
    """3 brokers, classic and diskless topics, groups; crashes, partitions, store and disk faults."""
    rng = sim.fork("scenario")
    azs = ["az1"] if rng.chance(0.5) else ["az1", "az2", "az3"]
    built = SimCluster.build(
        sim,
        azs=azs,
        settings={
            "offsets.topic.compaction.min.records": str(5 + rng.randrange(20)),
            "wal.quiet.min.bytes": str(rng.choice([0, 4096, 1 << 20])),
        },
        metadata_faults=MetadataFaults.none(),
        object_faults=ObjectStoreFaults.none(),
        net_faults=NetFaults.none(),
    )
    with built.running():
        for node_id in range(BROKERS):
            built.start(node_id)
        await built.wait_started()
        keys = await create_topics(built)
        weather = rng.fork("weather")  # from here on, things fail
        built.metadata.faults = MetadataFaults(
            unavailable_p=weather.choice([0.0, 0.02]),
            ambiguous_p=weather.choice([0.0, 0.05, 0.2]),
            watch_break_p=weather.choice([0.0, 0.01]),
            watch_lag_p=weather.choice([0.0, 0.2]),
        )
        built.objects.faulty.faults = weather.choice([ObjectStoreFaults(), ObjectStoreFaults.flaky()])
        built.network.faults = weather.choice([NetFaults(), NetFaults.flaky()])
        ledger = Ledger()
        loop = asyncio.get_running_loop()
        until_s = loop.time() + TRAFFIC_S
        with failing_disks(rng.fork("disks"), weather.choice([0.0, 0.003, 0.01])):
            clients = rng.fork("clients")
            tasks = [
                loop.create_task(
                    produce(built, ledger, clients.fork(f"p{i}"), f"p{i}", azs[i % len(azs)], keys, until_s)
                )
                for i in range(2)
            ]
            tasks.append(
                loop.create_task(produce_idempotent(built, ledger, clients.fork("i"), "i", azs[-1], keys, until_s))
            )
            tasks += [
                loop.create_task(
                    consume(
                        built,
                        ledger,
                        clients.fork(f"c{k}"),
                        f"c{k[0]}{k[1]}",
                        azs[i % len(azs)],
                        k,
                        lambda: loop.time() > until_s,
                    )
                )
                for i, k in enumerate(keys)
            ]
            tasks.append(
                loop.create_task(
                    commit_offsets(built, ledger, clients.fork("g"), "g", azs[-1], "orders", keys, until_s)
                )
            )
            stops: Counter[str] = Counter()
            tasks.append(loop.create_task(fault_schedule(built, rng.fork("faults"), until_s, stops)))
            await asyncio.gather(*tasks)
            await settle(built, keys)
        return {**await audit(built, ledger, keys), **stops}
