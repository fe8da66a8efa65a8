"""What the 3-broker scenarios share: their topics, failing disks, and the schedule of faults
(crashes and restarts, graceful stops, network partitions, store outages) that runs while
their clients do.

`fault_schedule` takes an optional `gate`, a lock held for the length of each fault: a
scenario that injects its own faults at chosen moments (the `transactions` scenario kills a
transaction coordinator while an EndTxn is in flight) takes the same lock, so that one fault
at a time hits the cluster and every crashed broker is restarted by whoever crashed it. An
uncontended lock is taken without yielding, so a schedule without competitors runs exactly
as it did without a gate.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from broker.log.partition_log import PartitionLog

from .cluster import SimCluster
from .determinism import SimRandom
from .workload import Key

BROKERS = 3
TOPICS = {"disk": ("true", 2), "classic": ("false", 2)}  # name -> (diskless.enable, partitions)


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


async def create_topics(
    cluster: SimCluster, topics: dict[str, tuple[str, int]] | None = None, brokers: int = BROKERS
) -> list[Key]:
    """Create `topics` (name -> (diskless.enable, partitions); TOPICS by default) with
    replication factor `brokers` and min ISR 2 once every broker registered; their partitions
    once each has a leader."""
    topics = TOPICS if topics is None else topics
    first = cluster.live()[0].broker
    while len(first.view.brokers) < brokers:  # every broker registered
        await asyncio.sleep(0.1)
    for name, (diskless, partitions) in topics.items():
        topic = first.catalog.prepare(name, partitions, {"diskless.enable": diskless, "min.insync.replicas": "2"})
        await first.catalog.create(topic, first.assign_replicas(range(partitions), brokers))
    keys = [(name, p) for name, (_d, partitions) in topics.items() for p in range(partitions)]
    while not all(cluster.leader_broker(*key) for key in keys):
        await asyncio.sleep(0.1)
    return keys


async def fault_schedule(
    cluster: SimCluster,
    rng: SimRandom,
    until_s: float,
    stops: Counter[str] | None = None,
    gate: asyncio.Lock | None = None,
) -> None:
    """Crashes and restarts, graceful stops and restarts, partitions, store outages: one at
    a time, at random moments. `stops` counts the graceful stops and what they moved; `gate`
    is held during each fault (see the module docstring)."""
    stops = Counter() if stops is None else stops
    brokers = len(cluster.brokers)
    loop = asyncio.get_running_loop()
    while loop.time() < until_s:
        await asyncio.sleep(rng.between((1.0, 4.0)))
        roll = rng.random()
        victim = rng.randrange(brokers)
        if gate is None:
            await _one_fault(cluster, rng, roll, victim, brokers, stops)
        else:
            async with gate:
                await _one_fault(cluster, rng, roll, victim, brokers, stops)


async def _one_fault(
    cluster: SimCluster, rng: SimRandom, roll: float, victim: int, brokers: int, stops: Counter[str]
) -> None:
    if roll < 0.35 and not cluster.down:
        cluster.crash(victim)
        await asyncio.sleep(rng.between((0.5, 8.0)))
        cluster.start(victim)
        if rng.chance(0.5):  # back, registered, serving clients, but cut off from the other brokers: it lags
            cluster.network.partition(victim, [n for n in range(brokers) if n != victim])
            await asyncio.sleep(rng.between((2.0, 12.0)))
            cluster.network.heal()
    elif roll < 0.55:
        others = [n for n in range(brokers) if n != victim]
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
