"""The WAL file manager on three real brokers under faults (DESIGN invariant 4).

Each seed draws a world: one AZ or three; the manager's timing (interval, grace, commit
deadline); a topic with seconds of retention and short segments, a topic that keeps
everything (read back at the end, byte for byte, from the objects), a topic deleted
half-way, and a topic of one replica per partition (objects only one broker's log
references); producers mixing them in shared WAL objects (so objects hold batches of
different retentions); DeleteRecords now and then; and a schedule of crashes of any broker
(the manager's included: the controller moves), network partitions, metadata outages and an
object store that fails, loses answers and refuses single keys of a batch delete. Half the
crashed brokers come back at once, while their old registration's lease is alive, and some
are killed again while they start: a restarting broker serves the RPC before its logs are
open and must not tell the manager it references nothing meanwhile (issue 26 F6).

The auditor watches every delete that reaches the store (the ground-truth memory store,
behind the faults): an object any replica's log references from its log start, on a live
broker or on the disk of a crashed one (its logs as they were when it died), of a topic that
still exists, must never be deleted. At the end the faults stop, the cluster settles, every
remaining topic's records are deleted with DeleteRecords but the kept topic's, and after the
deadline, two grace periods and a few cycles no object may be left that no replica
references: every unreferenced object older than the grace is eventually deleted.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from broker.log import EntryKind
from broker.log.coordinates import decode_ref

from ..audit import audit, settle
from ..cluster import SimCluster
from ..determinism import SimRandom
from ..metadata import MetadataFaults
from ..network import NetFaults
from ..objectstore import ObjectStoreFaults
from ..registry import scenario
from ..runner import Sim
from ..workload import Ledger, consume, produce

BROKERS = 3
TRAFFIC_S = 20.0
KEPT = "kept"  # no retention: audited record by record at the end
SHORT = "short"  # seconds of retention, DeleteRecords
DOOMED = "doomed"  # deleted half-way
SINGLE = "single"  # one replica per partition, no retention: each broker's own references


@dataclass
class ReferenceAuditor:
    """What the logs reference, and every delete checked against it."""

    cluster: SimCluster
    on_disk: dict[int, dict[str, set[str]]] = field(default_factory=dict)  # crashed broker -> topic id -> objects
    violations: list[str] = field(default_factory=list)
    deleted: int = 0

    def crash(self, node_id: int) -> None:
        """kill -9, after noting what the broker's logs hold (its disk keeps exactly that)."""
        broker = self.cluster.brokers[node_id]
        if broker.running and node_id not in self.cluster.down:
            self.on_disk[node_id] = self._logs_of(node_id)
        self.cluster.crash(node_id)

    def referenced(self) -> dict[str, str]:
        """object id -> where it is referenced, over live logs and crashed brokers' disks,
        for topics that still exist."""
        live_topics = {str(t.topic_id) for b in self.cluster.live() for t in b.broker.catalog.all() if not t.internal}
        found: dict[str, str] = {}
        for node_id in sorted(self.cluster.brokers):
            running = node_id not in self.cluster.down and self.cluster.brokers[node_id].running
            logs = self._logs_of(node_id) if running else self.on_disk.get(node_id, {})
            for topic_id, objects in logs.items():
                if topic_id in live_topics:
                    for object_id in objects:
                        found.setdefault(object_id, f"broker {node_id} topic {topic_id}")
        return found

    def _logs_of(self, node_id: int) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for partition in self.cluster.brokers[node_id].broker.replica_manager.partitions.values():
            if not partition.settings.diskless or not partition.topic_id:
                continue
            objects = out.setdefault(partition.topic_id, set())
            for entry in partition.log.iter_entries(partition.log.log_start_offset):
                if entry.kind is EntryKind.COORDINATES:
                    objects.add(decode_ref(entry.payload).object_id)
        return out

    def watch_deletes(self) -> None:
        memory = self.cluster.objects.memory
        real = memory.delete_many

        async def checked(keys):  # type: ignore[no-untyped-def]
            keys = list(keys)
            referenced = self.referenced()
            for key in keys:
                object_id = key.rsplit("/", 1)[-1]
                if object_id in referenced and key in memory._objects:
                    self.violations.append(f"deleted {key}, referenced by {referenced[object_id]}")
            gone = await real(keys)
            self.deleted += len(gone)
            return gone

        memory.delete_many = checked  # type: ignore[method-assign]


async def create_topics(cluster: SimCluster, rng: SimRandom) -> None:
    first = cluster.live()[0].broker
    while len(first.view.brokers) < BROKERS:
        await asyncio.sleep(0.1)
    short = {
        "diskless.enable": "true",
        "retention.ms": str(rng.choice([2000, 5000, 10000])),
        "segment.ms": str(rng.choice([500, 1000, 3000])),
        "min.insync.replicas": "2",
    }
    for name, configs in (
        (KEPT, {"diskless.enable": "true", "min.insync.replicas": "2"}),
        (SHORT, short),
        (DOOMED, {"diskless.enable": "true", "segment.ms": "1000"}),
    ):
        topic = first.catalog.prepare(name, 2, configs)
        await first.catalog.create(topic, first.assign_replicas(range(2), BROKERS))
    single = first.catalog.prepare(SINGLE, BROKERS, {"diskless.enable": "true"})
    await first.catalog.create(single, first.assign_replicas(range(BROKERS), 1))
    keys = [(name, p) for name in (KEPT, SHORT, DOOMED) for p in range(2)]
    while not all(cluster.leader_broker(*key) for key in keys):
        await asyncio.sleep(0.1)


async def delete_records(cluster: SimCluster, rng: SimRandom) -> None:
    """DeleteRecords on a partition of SHORT, up to a random committed offset."""
    index = rng.randrange(2)
    leader = cluster.leader_broker(SHORT, index)
    if leader is None:
        return
    log = leader.replica_manager.partitions[(SHORT, index)].log  # type: ignore[index]
    if log.high_watermark > log.log_start_offset:
        offset = log.log_start_offset + rng.randrange(log.high_watermark - log.log_start_offset + 1)
        log.delete_records_before(offset)
        cluster.sim.trace.record("scenario", "DeleteRecords %s-%d below %d", SHORT, index, offset)


async def delete_topic(cluster: SimCluster, name: str) -> None:
    """As an admin client does: retried until the topic is gone (the store may fail, or
    apply the delete and lose the answer)."""
    while True:
        live = cluster.live()
        if live and live[0].broker.catalog.get(name) is None:
            cluster.sim.trace.record("scenario", "topic %s deleted", name)
            return
        if live:
            try:
                await live[0].broker.catalog.delete(name)
            except Exception as exc:  # noqa: BLE001 - MetadataError, or gone meanwhile: look again
                cluster.sim.trace.record("scenario", "delete of topic %s: %r", name, exc)
        await asyncio.sleep(0.5)


async def restart(cluster: SimCluster, auditor: ReferenceAuditor, node_id: int, rng: SimRandom) -> None:
    """kill -9 and a new process on the same disk: half the time at once, within the old
    registration's lease (broker.session.timeout.ms), which the new process waits out while
    it serves the RPC with its logs not open yet; now and then killed again while starting."""
    auditor.crash(node_id)
    quick = rng.chance(0.5)
    await asyncio.sleep(rng.between((0.2, 2.0) if quick else (0.5, 10.0)))
    cluster.start(node_id)
    if quick and rng.chance(0.3):
        await asyncio.sleep(rng.between((0.1, 3.0)))
        auditor.crash(node_id)
        await asyncio.sleep(rng.between((0.1, 1.0)))
        cluster.start(node_id)


async def fault_schedule(cluster: SimCluster, auditor: ReferenceAuditor, rng: SimRandom, until_s: float) -> None:
    loop = asyncio.get_running_loop()
    doomed_at = loop.time() + until_s / 2
    while loop.time() < until_s:
        await asyncio.sleep(rng.between((1.0, 3.0)))
        if doomed_at is not None and loop.time() >= doomed_at and cluster.live():
            doomed_at = None
            await delete_topic(cluster, DOOMED)
        roll = rng.random()
        victim = rng.randrange(BROKERS)
        if roll < 0.2:
            controller = next((b.node_id for b in cluster.live() if b.broker.controller.active), None)
            if controller is not None and not cluster.down:  # the manager's broker
                await restart(cluster, auditor, controller, rng)
        elif roll < 0.4 and not cluster.down:
            await restart(cluster, auditor, victim, rng)
        elif roll < 0.55:
            cluster.network.partition(victim, [n for n in range(BROKERS) if n != victim])
            await asyncio.sleep(rng.between((0.5, 8.0)))
            cluster.network.heal()
        elif roll < 0.65:
            cluster.metadata.unavailable_for(rng.between((0.5, 4.0)))
        elif roll < 0.9:
            await delete_records(cluster, rng)


@scenario("wal_gc", max_virtual_s=900.0, max_steps=3_000_000, test_seeds=32)
async def wal_gc(sim: Sim) -> dict[str, int]:
    """3 brokers deleting WAL objects under crashes (the manager's too), retention, DeleteRecords, topic deletion."""
    rng = sim.fork("scenario")
    azs = ["az1"] if rng.chance(0.5) else ["az1", "az2", "az3"]
    interval_ms, grace_ms = rng.choice([500, 1000, 3000]), rng.choice([1000, 2000, 5000])
    deadline_ms = rng.choice([3000, 5000, 10000])
    max_deletes = rng.choice([5, 100, 20000])
    built = SimCluster.build(
        sim,
        azs=azs,
        settings={
            "wal.file.manager.interval.ms": str(interval_ms),
            "wal.file.manager.grace.ms": str(grace_ms),
            "wal.commit.deadline.ms": str(deadline_ms),
            "wal.file.manager.max.deletes.per.cycle": str(max_deletes),
            "log.retention.check.interval.ms": "500",
            "wal.linger.ms": str(rng.choice([5, 50, 250])),
        },
        metadata_faults=MetadataFaults.none(),
        object_faults=ObjectStoreFaults.none(),
        net_faults=NetFaults.none(),
    )
    auditor = ReferenceAuditor(built)
    auditor.watch_deletes()
    with built.running():
        for node_id in range(BROKERS):
            built.start(node_id)
        await built.wait_started()
        await create_topics(built, rng)
        weather = rng.fork("weather")
        built.metadata.faults = MetadataFaults(
            unavailable_p=weather.choice([0.0, 0.02]), ambiguous_p=weather.choice([0.0, 0.05])
        )
        built.objects.faulty.faults = weather.choice(
            [ObjectStoreFaults(), ObjectStoreFaults.flaky(), ObjectStoreFaults(partial_delete_p=0.3, fail_p=0.05)]
        )
        built.network.faults = weather.choice([NetFaults(), NetFaults.flaky()])
        ledger, other = Ledger(), Ledger()
        loop = asyncio.get_running_loop()
        until_s = loop.time() + TRAFFIC_S
        kept = [(KEPT, 0), (KEPT, 1)]
        churn = [(SHORT, 0), (SHORT, 1), (DOOMED, 0), (DOOMED, 1), *((SINGLE, p) for p in range(BROKERS))]
        clients = rng.fork("clients")
        tasks = [
            loop.create_task(produce(built, ledger, clients.fork("k"), "k", azs[0], kept, until_s)),
            loop.create_task(produce(built, other, clients.fork("s"), "s", azs[-1], churn, until_s)),
            loop.create_task(
                consume(built, ledger, clients.fork("c"), "c", azs[0], kept[0], lambda: loop.time() > until_s)
            ),
            loop.create_task(fault_schedule(built, auditor, rng.fork("faults"), until_s)),
        ]
        await asyncio.gather(*tasks)
        await settle(built, kept + [(SHORT, 0), (SHORT, 1)])
        counts = await audit(built, ledger, kept)  # the kept topic, read back from the objects
        for index in range(2):  # everything of SHORT goes: only KEPT may hold objects
            leader = built.leader_broker(SHORT, index)
            assert leader is not None
            log = leader.replica_manager.partitions[(SHORT, index)].log  # type: ignore[index]
            log.delete_records_before(log.high_watermark)
        # Every unreferenced object goes within the deadline, two grace periods and a few cycles,
        # plus one cycle (saturated: 1 s apart) per max.deletes.per.cycle objects.
        prefix = built.live()[0].broker._wal_prefix()
        stored = sum(1 for key in built.objects.memory._objects if key.startswith(prefix))
        budget_s = (deadline_ms + 3 * grace_ms + 4 * interval_ms) / 1000 + 15 + stored / max_deletes * 1.5
        deadline = loop.time() + budget_s
        while True:
            referenced = auditor.referenced()
            left = [
                key
                for key in built.objects.memory._objects
                if key.startswith(prefix) and key[len(prefix) :] not in referenced
            ]
            if not left or loop.time() > deadline:
                break
            await asyncio.sleep(1.0)
        problems = list(auditor.violations)
        if left:
            managers = [b.broker.wal_files for b in built.live() if b.broker.controller.active]
            known = {key: [m._sets.get(key[len(prefix) :]) for m in managers] for key in left[:3]}
            problems.append(
                f"{len(left)} unreferenced object(s) not deleted within {budget_s:.0f} virtual s, e.g. "
                f"{known}; manager(s): {[m.status() for m in managers]}"
            )
        if problems:
            raise AssertionError("\n  ".join(problems[:10]))
        sim.trace.record("audit", "ok: %d objects deleted, %d left (all referenced)", auditor.deleted, len(referenced))
        return {**counts, "deleted_objects": auditor.deleted}
