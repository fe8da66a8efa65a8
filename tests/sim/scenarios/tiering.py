"""Tiering on three real brokers under faults (DESIGN invariant 5: an offload loses,
duplicates and reorders nothing).

Each seed draws a world: one AZ or three; the tiering cadence, local retention and segment
roll time; how the tiering jobs behave (they run the real assembler, in the broker's process
as Spark's local mode does: a job dies with its broker; some fail before doing anything,
some die half-way leaving files without a manifest, some take long; some run on a Spark
cluster instead, outlive their broker and stall, uploading after another leader gave their
segments up); and a schedule of
crashes of any broker (a leader in the middle of its job), network partitions, metadata
outages and a flaky object store; a broker is sometimes down long enough to come back below
its leaders' local log start. Producers write a diskless topic with
`remote.storage.enable=true` (idempotent and not, and a transactional one whose transactions
stay open up to 10 s after their last record); a consumer tails it from offset 0 through the
real Fetch path the whole time, so it reads tiered segments, coordinates and the tail, and a
read_committed reader tails it through its AZ's replica (txn_tiering.py).

At the end the faults stop and the cluster settles; a follower is away while a transaction
stays open across segment rolls and tiering cycles, and comes back (below the leader's local
log start whenever tiering went past it): while the transaction is open, every replica must
have the leader's last stable offset; it is away again while the transaction is aborted and
tiering passes its first offset, and must then know the abort as the leader does
(txn_tiering.start_over_inside_a_transaction). Then every transaction is decided, and every
replica must have the leader's last stable offset and aborted transactions; a read_committed
read of each partition through each replica must show the same transactions, each whole,
none aborted or undecided, every committed one, and the tailing reader must have got nothing
else, and nothing before its client asked to commit. Then more cycles tier what is left to
tier, and:
- a fresh consumer reads the partition from offset 0 to the high watermark: every
  acknowledged batch at its acknowledged offset, nothing twice, offsets dense (markers are
  control batches that take their offsets), through tiered segments;
- something was tiered, and every replica agrees on the readable tiered segments, which
  never overlap and are contiguous;
- once the Spark-cluster jobs ended and twice `tiering.job.timeout.ms` passed, two more
  cycles leave no file of an abandoned or deleted segment in the store (the litter sweep).
"""

from __future__ import annotations

import asyncio
import contextvars
import uuid
from typing import Any

from broker.log.markers import RemoteSegmentState
from broker.log.remote_segments import RemoteSegments
from broker.tiering.runner import JobOutcome
from tiering.assemble import assemble_range
from tiering.plan import decode_plan
from walfiles.keys import SegmentFile, format_tiered_segment_key

from ..audit import settle
from ..cluster import SimCluster
from ..determinism import SimRandom
from ..loop import CURRENT_NODE
from ..metadata import MetadataFaults
from ..network import NetFaults
from ..objectstore import ObjectStoreFaults
from ..registry import scenario
from ..runner import Sim
from ..txn_tiering import (
    LingeringTxnProducer,
    caught_up,
    Tail,
    read_through_every_replica,
    replicas_agree,
    start_over_inside_a_transaction,
    tail_committed,
)
from ..txn_workload import TxnLedger, TxnProducer
from ..workload import Key, Ledger, consume, produce, produce_idempotent
from .transactions import _stable

BROKERS = 3
JOB_TIMEOUT_S = 20.0
TRAFFIC_S = 25.0
FINAL_CYCLE_S = 2.0  # between the final cycles by hand
FINAL_CYCLES_MAX_S = 120.0  # the final cycles' bound when leaderships keep moving
FINAL_READ_S = 200.0  # the fresh readers' time to read every partition back, from when they start
DECIDED_S = 180.0  # after settling: every transaction decided (timeouts, marker retries)
TOPIC = "tiered"
KEYS = [(TOPIC, 0), (TOPIC, 1)]


class SimJobs:
    """One broker process's tiering jobs: the real assembler over that broker's object store,
    with a job's fate drawn from the seed until the world is `calm`. Most run in the broker's
    process (a job dies with its broker, as Spark's local mode does); some run on a Spark
    cluster (`tiering.spark.submit`, cluster deploy mode): they outlive their broker's crash
    or stop, stall now and then (an executor lost, the task retried), and so upload ranges
    after another leader gave their segments up (the scenario waits for them in `detached`)."""

    def __init__(
        self, cluster: SimCluster, node_id: int, rng: SimRandom, calm: list[bool], detached: list[asyncio.Task[Any]]
    ) -> None:
        self._cluster, self._node_id, self._rng, self._calm = cluster, node_id, rng, calm
        self._detached = detached

    async def run(self, plan_key: str) -> JobOutcome:
        if self._calm[0] or not self._rng.chance(0.3):
            return await self._job(plan_key, stalls=False)
        context = contextvars.copy_context()
        context.run(CURRENT_NODE.set, None)  # no broker's task: a kill -9 of the broker leaves it running
        job = asyncio.get_running_loop().create_task(self._job(plan_key, stalls=True), context=context)
        self._detached.append(job)
        return await asyncio.shield(job)  # the broker stopping cancels its wait, not the job

    async def _job(self, plan_key: str, stalls: bool) -> JobOutcome:
        store = self._cluster.brokers[self._node_id].broker.objects
        calm = self._calm[0]
        await asyncio.sleep(self._rng.between((0.2, 4.0)))  # Spark starting
        if not calm and self._rng.chance(0.1):
            return JobOutcome(False, None, "sim: the job could not start")
        plan = decode_plan(await store.get(plan_key))
        failed = []
        for planned in plan.ranges:
            if not calm and self._rng.chance(0.08):  # dies half-way: a file written, no manifest
                key = format_tiered_segment_key(
                    "",
                    plan.cluster_id,
                    uuid.UUID(planned.topic_id),
                    planned.partition,
                    planned.base_offset,
                    uuid.UUID(planned.segment_id),
                    SegmentFile.LOG,
                )
                await store.put(key, b"half a segment")
                return JobOutcome(False, None, "sim: the job died half-way")
            if stalls and self._rng.chance(0.5):
                await asyncio.sleep(self._rng.between((2.0, 15.0)))  # a lost executor, the task retried
            try:
                await assemble_range(store, plan.cluster_id, plan.plan_id, planned)
            except Exception as exc:  # noqa: BLE001 - a store fault: that range only, as a Spark task
                failed.append(f"{planned.partition}@{planned.base_offset}: {exc!r}")
            await asyncio.sleep(self._rng.between((0.0, 1.0)))
        if failed:
            return JobOutcome(False, {"plan_id": plan.plan_id, "failed": failed}, f"sim: {failed[0]}")
        return JobOutcome(True, {"plan_id": plan.plan_id, "failed": []}, "")


async def create_topic(cluster: SimCluster, rng: SimRandom) -> None:
    first = cluster.live()[0].broker
    while len(first.view.brokers) < BROKERS:
        await asyncio.sleep(0.1)
    configs = {
        "diskless.enable": "true",
        "remote.storage.enable": "true",
        "min.insync.replicas": "2",
        "segment.ms": str(rng.choice([500, 1000, 2000])),
        "local.retention.ms": str(rng.choice([0, 1000, 3000])),
        "index.interval.bytes": str(rng.choice([0, 256, 4096])),
    }
    topic = first.catalog.prepare(TOPIC, 2, configs)
    await first.catalog.create(topic, first.assign_replicas(range(2), BROKERS))
    while not all(cluster.leader_broker(*key) for key in KEYS):
        await asyncio.sleep(0.1)


async def fault_schedule(cluster: SimCluster, rng: SimRandom, until_s: float) -> None:
    loop = asyncio.get_running_loop()
    while loop.time() < until_s:
        await asyncio.sleep(rng.between((1.0, 4.0)))
        roll = rng.random()
        if roll < 0.35 and not cluster.down:
            leader = cluster.leader_broker(*rng.choice(KEYS))  # a leader: its job dies with it
            victim = leader.node_id if leader is not None and rng.chance(0.7) else rng.randrange(BROKERS)
            cluster.crash(victim)
            # now and then long enough to come back below the leaders' local log start
            await asyncio.sleep(rng.between((0.5, 8.0) if rng.chance(0.75) else (8.0, 20.0)))
            cluster.start(victim)
        elif roll < 0.5:
            victim = rng.randrange(BROKERS)
            cluster.network.partition(victim, [n for n in range(BROKERS) if n != victim])
            await asyncio.sleep(rng.between((0.5, 6.0)))
            cluster.network.heal()
        elif roll < 0.6:
            cluster.metadata.unavailable_for(rng.between((0.5, 3.0)))


async def final_cycles(cluster: SimCluster, detached: list[asyncio.Task[Any]]) -> None:
    """The offload loops stop and the Spark-cluster jobs end; then, once what they uploaded
    after their segments were given up is older than any job may run (twice
    tiering.job.timeout.ms: the litter sweep's grace), cycles by hand resolve dead jobs'
    segments and sweep the litter. A leadership that moves meanwhile (the controller's
    preferred-leader rebalance runs every 300 s) leaves its new leader waiting
    tiering.job.timeout.ms before it may give up its predecessor's jobs, so the cycles go
    on until leaderships have been still that long (`tiering` seed 850031)."""
    for sim_broker in cluster.live():
        await sim_broker.broker.offload.stop()
    await asyncio.gather(*detached, return_exceptions=True)
    leaders = leaderships(cluster)
    await asyncio.sleep(2 * JOB_TIMEOUT_S + 1.0)
    loop = asyncio.get_running_loop()
    started = loop.time()
    moved_at = started if leaderships(cluster) != leaders else None  # at some point in the sleep
    cycles = 0
    while cycles < 3 or (
        moved_at is not None
        and loop.time() - moved_at < JOB_TIMEOUT_S + 2 * FINAL_CYCLE_S
        and loop.time() - started < FINAL_CYCLES_MAX_S
    ):
        leaders = leaderships(cluster)
        for sim_broker in cluster.live():
            await sim_broker.broker.offload.run_once()
        await asyncio.sleep(FINAL_CYCLE_S)  # markers replicate: the next cycle sees them applied
        cycles += 1
        if leaderships(cluster) != leaders:
            moved_at = loop.time()


def leaderships(cluster: SimCluster) -> dict[Any, tuple[int, int]]:
    """Each partition's leader and leader epoch, as the first live broker's view has them."""
    view = cluster.live()[0].broker.view
    return {pid: (state.record.leader, state.record.leader_epoch) for pid, state in view.partitions.items()}


def finished(remote: RemoteSegments) -> list[tuple[str, int, int]]:
    """The COPY_FINISHED segments a replica knows, whatever its log start offset."""
    return [
        (s.segment_id, s.base_offset, s.end_offset)
        for s in remote.segments
        if s.state == RemoteSegmentState.COPY_SEGMENT_FINISHED
    ]


def check_tiered(cluster: SimCluster, store_keys: list[str], keys: list[Key]) -> list[str]:
    """The tiered segments of `keys` after the final cycles: contiguous, the same on every
    replica, none unresolved, no file in the store that belongs to no known segment."""
    problems = []
    for key in keys:
        leader = cluster.leader_broker(*key)
        assert leader is not None
        partition = leader.replica_manager.partitions[key]
        readable = [(s.segment_id, s.base_offset, s.end_offset) for s in partition.remote_segments.readable]
        for (_a, _b, end), (_c, base, _d) in zip(readable, readable[1:]):
            if base != end + 1:
                problems.append(f"{key}: tiered segments not contiguous: {readable}")
        for node_id in partition.replicas:  # (their log starts may differ: what they serve may, too)
            theirs = cluster.brokers[node_id].broker.replica_manager.partitions[key].remote_segments
            if finished(theirs) != finished(partition.remote_segments):
                problems.append(
                    f"{key}: broker {node_id} knows other tiered segments than the leader: "
                    f"{[(s.base_offset, s.end_offset, s.state.name) for s in theirs.segments]} against "
                    f"{[(s.base_offset, s.end_offset, s.state.name) for s in partition.remote_segments.segments]}"
                )
        known = {s.segment_id for s in partition.remote_segments.segments}
        prefix = f"/{partition.topic_id}/{key[1]:010d}/"
        for stored in store_keys:
            if prefix in stored and not any(segment_id in stored for segment_id in known):
                problems.append(f"{key}: {stored} belongs to no known segment (litter of a dead job)")
        unresolved = [
            s.segment_id
            for s in partition.remote_segments.segments
            if s.state != RemoteSegmentState.COPY_SEGMENT_FINISHED
        ]
        if unresolved:
            problems.append(f"{key}: segments left unresolved: {unresolved}")
    return problems


@scenario("tiering", max_virtual_s=900.0, max_steps=3_000_000, test_seeds=12)
async def tiering(sim: Sim) -> dict[str, int]:
    """3 brokers tiering a diskless topic under crashes (leaders mid-job), failing jobs, faults."""
    rng = sim.fork("scenario")
    azs = ["az1"] if rng.chance(0.5) else ["az1", "az2", "az3"]
    interval_ms = rng.choice([500, 1000, 2000])
    built = SimCluster.build(
        sim,
        azs=azs,
        settings={
            "tiering.interval.ms": str(interval_ms),
            "tiering.job.timeout.ms": str(int(JOB_TIMEOUT_S * 1000)),  # plans, litter swept after 40 s
            "log.retention.check.interval.ms": "500",
            "wal.linger.ms": str(rng.choice([5, 50, 250])),
            "wal.file.manager.interval.ms": "1000",
            "wal.file.manager.grace.ms": "2000",
            "wal.commit.deadline.ms": "5000",
            "transaction.state.log.num.partitions": "3",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "2000",
        },
        metadata_faults=MetadataFaults.none(),
        object_faults=ObjectStoreFaults.none(),
        net_faults=NetFaults.none(),
    )
    calm = [False]
    jobs = rng.fork("jobs")
    detached: list[asyncio.Task[Any]] = []
    built.tiering_jobs = lambda node_id, incarnation: SimJobs(
        built, node_id, jobs.fork(f"{node_id}-{incarnation}"), calm, detached
    )
    with built.running():
        for node_id in range(BROKERS):
            built.start(node_id)
        await built.wait_started()
        await create_topic(built, rng)
        txn_ledger, tail = TxnLedger(), Tail()
        clients = rng.fork("clients")
        transactional = LingeringTxnProducer(
            built, txn_ledger, clients.fork("t"), "t", azs[0], KEYS, "txn-t", clients.choice([10_000, 30_000]), None
        )
        await transactional.init(bump=False)  # __transaction_state is created before the faults
        weather = rng.fork("weather")
        built.metadata.faults = MetadataFaults(unavailable_p=weather.choice([0.0, 0.02]), ambiguous_p=0.0)
        built.objects.faulty.faults = weather.choice([ObjectStoreFaults(), ObjectStoreFaults.flaky()])
        built.network.faults = weather.choice([NetFaults(), NetFaults.flaky()])
        ledger = Ledger()
        loop = asyncio.get_running_loop()
        until_s = loop.time() + TRAFFIC_S
        tasks = [
            loop.create_task(produce(built, ledger, clients.fork("p"), "p", azs[0], KEYS, until_s)),
            loop.create_task(produce_idempotent(built, ledger, clients.fork("i"), "i", azs[-1], KEYS, until_s)),
            loop.create_task(
                consume(built, ledger, clients.fork("c"), "c", azs[0], KEYS[0], lambda: loop.time() > until_s)
            ),
            loop.create_task(transactional.run(until_s)),
            loop.create_task(
                tail_committed(built, txn_ledger, clients.fork("tail"), azs[-1], KEYS[1], tail, until_s + 10.0)
            ),
            loop.create_task(fault_schedule(built, rng.fork("faults"), until_s)),
        ]
        await asyncio.gather(*tasks)
        await settle(built, KEYS)
        calm[0] = True
        await asyncio.sleep(max(10.0, 8 * interval_ms / 1000))  # tier what is ready
        problems = await _decided(built, loop.time() + DECIDED_S)
        held = TxnProducer(built, txn_ledger, clients.fork("held"), "h", azs[0], [KEYS[0]], "txn-h", 300_000, None)
        await held.init(bump=False)
        leader = built.leader_broker(*KEYS[0])
        assert leader is not None
        settings = leader.replica_manager.partitions[KEYS[0]].settings
        hold_s = (settings.log.segment_ms + max(settings.local_retention_ms, 0) + 2 * interval_ms) / 1000 + 10.0
        held_problems, counts = await start_over_inside_a_transaction(
            built, held, ledger, clients.fork("held-plain"), KEYS[0], hold_s
        )
        problems += held_problems + await _decided(built, loop.time() + DECIDED_S)
        await caught_up(built, KEYS)
        problems += replicas_agree(built, KEYS)
        read_problems, committed_read = await read_through_every_replica(
            built, txn_ledger, tail, clients.fork("committed"), KEYS, loop.time() + DECIDED_S
        )
        problems += read_problems + txn_ledger.violations
        await final_cycles(built, detached)
        final = Ledger()
        final_deadline = loop.time() + FINAL_READ_S
        for key in KEYS:  # a fresh reader from offset 0: tiered segments, then coordinates
            wanted = {s.acked_offset for s in ledger.sent.values() if s.key == key and s.acked_offset is not None}
            position = await consume(
                built,
                final,
                clients.fork(f"final-{key[1]}"),
                f"final-{key[1]}",
                azs[-1],
                key,
                lambda key=key, wanted=wanted: (
                    wanted <= final.consumed.get(key, {}).keys() or loop.time() > final_deadline
                ),
            )
            sim.trace.record("audit", "%s read back to offset %d", key, position)
            missing = sorted(wanted - final.consumed.get(key, {}).keys())
            if missing:
                partition = built.leader_broker(*key).replica_manager.partitions[key]  # type: ignore[union-attr]
                raise AssertionError(
                    f"{key}: the final reader stopped at {position}, missing acknowledged offsets {missing[:5]}; "
                    f"log start {partition.log_start_offset}, local start {partition.log.log_start_offset}, "
                    f"high watermark {partition.log.high_watermark}, tiered "
                    f"{[(s.base_offset, s.end_offset, s.state.name) for s in partition.remote_segments.segments]}"
                )
        problems += list(ledger.violations) + list(final.violations)
        acked = 0
        for sent in ledger.sent.values():
            if sent.acked_offset is None:
                continue
            acked += 1
            got = final.consumed.get(sent.key, {}).get(sent.acked_offset)
            if got != sent.batch:
                problems.append(
                    f"acknowledged {sent.batch} at {sent.key[0]}-{sent.key[1]}@{sent.acked_offset}: read {got}"
                )
        read = [batch for key in KEYS for batch in final.consumed.get(key, {}).values()]
        for sent in ledger.sent.values():  # a retry of a non-idempotent batch may land twice
            ambiguous = sum(1 for a in sent.attempts if a.outcome in ("ambiguous", "pending"))
            if read.count(sent.batch) > (1 if sent.idempotent else 1 + ambiguous):
                problems.append(f"{sent.batch} read {read.count(sent.batch)} times")
        store_keys = [k for k in built.objects.memory._objects if "/tiered/" in k or k.startswith("tiered/")]
        problems += check_tiered(built, store_keys, KEYS)
        tiered = sum(
            len(built.leader_broker(*key).replica_manager.partitions[key].remote_segments.readable)  # type: ignore[union-attr]
            for key in KEYS
        )
        if tiered == 0:
            problems.append("nothing was tiered: the scenario proved nothing")
        if problems:
            raise AssertionError("\n  ".join(problems[:10]))
        sim.trace.record("audit", "ok: %d acknowledged batches read back, %d tiered segments", acked, tiered)
        return {
            "acked": acked,
            "tiered_segments": tiered,
            "transactions": len(txn_ledger.txns),
            "committed_records_read": committed_read,
            "tailed_committed": len(tail.reads),
            **counts,
        }


async def _decided(cluster: SimCluster, deadline_s: float) -> list[str]:
    """Settle, then wait until no transaction is open anywhere (`transactions`' own wait)."""
    await settle(cluster, KEYS)
    return await _stable(cluster, KEYS, deadline_s)
