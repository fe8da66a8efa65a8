"""Three real brokers under faults, driven by Kafka clients, then audited (audit.py).

Each seed draws a world: one AZ or three, how often the metadata store, the object store,
the network and the disks fail, and a schedule of crashes (kill -9 and restart), graceful
stops (SIGTERM: controlled shutdown, then restart, as in a rolling restart), network
partitions and outages. Producers pipeline requests that mix classic (acks=all, RF 3) and
diskless partitions (one of them idempotent as librdkafka is, with 5 batches of a partition in
flight and its epoch bumps), consumers tail every partition from offset 0 (a reset is a failure),
and a client commits group offsets past the compaction threshold of `__consumer_offsets`
while coordinators fail over. Then the faults stop, the cluster settles, and the auditor
checks every promise the clients were given.
"""

from __future__ import annotations

import asyncio
from collections import Counter

from ..audit import audit, settle
from ..cluster import SimCluster
from ..faults import BROKERS, create_topics, failing_disks, fault_schedule
from ..metadata import MetadataFaults
from ..network import NetFaults
from ..objectstore import ObjectStoreFaults
from ..registry import scenario
from ..runner import Sim
from ..pipelined_producer import produce_pipelined
from ..workload import Ledger, commit_offsets, consume, produce, produce_idempotent

TRAFFIC_S = 25.0


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
            tasks.append(  # librdkafka's pipelining and epoch bumps (pipelined_producer.py)
                loop.create_task(produce_pipelined(built, ledger, clients.fork("r"), "r", azs[0], keys, until_s))
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
