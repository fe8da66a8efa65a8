"""Transactions on three real brokers under faults, by clients that run Kafka's whole
transactional protocol (txn_workload.py), then audited.

Each seed draws a world as `cluster` does (one AZ or three; flaky metadata store, object
store and network) and 1-2 transactional producers, each with its own transactional id and
transaction timeout (some short enough to expire under faults, which aborts and fences).
They write classic and diskless partitions (RF 3, min ISR 2) in transactions of 1-3
partitions, sometimes commit group offsets in them (AddOffsetsToTxn + TxnOffsetCommit), end
them with a random COMMIT or ABORT, sometimes die before ending one, and retry what Kafka's
producer retries, while the shared fault schedule (faults.py) crashes, stops, partitions and
cuts off brokers, and a coordinator is killed now and then while an EndTxn is in flight. In
most seeds the first producer is paused at some point of its protocol while a successor
instance of its transactional id starts, and then resumes as a zombie that carries on (a
KIP-360 epoch bump with its old producer id and epoch among what it may do next;
txn_workload.Takeover).

Then the faults stop, the cluster settles, and the auditor checks:
1. a read_committed reader (Fetch isolation_level 1 through the client path, with Kafka's
   consumer filtering by the answers' aborted transactions) of every partition sees each
   record of a committed transaction once, nothing of an aborted one, and each
   transaction's records across partitions all or none; one whose EndTxn(commit) was
   answered NONE entirely, one whose EndTxn(abort) was answered NONE, or that never asked to
   commit, not at all;
2. every partition's last stable offset is its high watermark (nothing hangs), on the
   leader, and no replica holds an open transaction (also on `__consumer_offsets`);
3. every transactional id's coordinator state is Empty, CompleteCommit or CompleteAbort;
4. OffsetFetch(require_stable) of each group answers, for each partition, the offset of the
   last committed transaction that committed one there, and nothing where none did;
5. a fenced instance never commits again: nothing a zombie sent after its successor's
   InitProducerId was answered is visible, and no InitProducerId or EndTxn(commit) it sent
   then is answered NONE (the client sees those as they happen);
and, as `cluster`'s auditor, that offsets are dense and every replica holds the leader's log.
"""

from __future__ import annotations

import asyncio
from collections import Counter

from broker.groups.offsets_records import OFFSETS_TOPIC
from broker.protocol.errors import ApiError
from broker.transactions.metadata import TxnState
from broker.transactions.records import TRANSACTION_TOPIC

from ..audit import read_log, settle
from ..cluster import SimCluster
from ..faults import BROKERS, create_topics, failing_disks, fault_schedule
from ..metadata import MetadataFaults
from ..network import NetFaults
from ..objectstore import ObjectStoreFaults
from ..registry import scenario
from ..runner import Sim
from ..txn_workload import (
    PAUSE_POINTS,
    CoordinatorKiller,
    Takeover,
    TxnLedger,
    TxnProducer,
    fetch_stable_offsets,
    read_committed,
)
from ..workload import Key

TRAFFIC_S = 20.0
TAKEOVER_P = 0.75  # seeds in which a successor instance takes the first producer's transactional id
SETTLED_STATES = {TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}
COMPLETION_S = 180.0  # after settling: timeouts (<= 20 s + the 2 s scan) and marker retries
SETTINGS = {
    "transaction.state.log.num.partitions": "3",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "2000",
}


@scenario("transactions", max_virtual_s=1500.0, max_steps=3_000_000, test_seeds=40)
async def transactions(sim: Sim) -> dict[str, int]:
    """3 brokers, transactional producers (commit, abort, offsets, fencing) under crashes, partitions, outages."""
    rng = sim.fork("scenario")
    azs = ["az1"] if rng.chance(0.5) else ["az1", "az2", "az3"]
    built = SimCluster.build(
        sim,
        azs=azs,
        settings={**SETTINGS, "offsets.topic.compaction.min.records": str(5 + rng.randrange(20))},
        metadata_faults=MetadataFaults.none(),
        object_faults=ObjectStoreFaults.none(),
        net_faults=NetFaults.none(),
    )
    with built.running():
        for node_id in range(BROKERS):
            built.start(node_id)
        await built.wait_started()
        keys = await create_topics(built)
        ledger = TxnLedger()
        gate = asyncio.Lock()
        killer = CoordinatorKiller(built, rng.fork("killer"), gate, rng.choice([0.0, 0.15, 0.4]))
        clients = rng.fork("clients")
        producers = [
            TxnProducer(
                built,
                ledger,
                clients.fork(f"t{i}"),
                f"t{i}",
                azs[i % len(azs)],
                keys,
                f"txn-{i}",
                clients.choice([3_000, 10_000, 20_000]),
                killer,
            )
            for i in range(rng.randint(1, 2))
        ]
        await asyncio.gather(*(p.init(bump=False) for p in producers))  # __transaction_state is created
        weather = rng.fork("weather")  # from here on, things fail
        built.metadata.faults = MetadataFaults(
            unavailable_p=weather.choice([0.0, 0.02]),
            ambiguous_p=weather.choice([0.0, 0.05, 0.2]),
            watch_break_p=weather.choice([0.0, 0.01]),
            watch_lag_p=weather.choice([0.0, 0.2]),
        )
        built.objects.faulty.faults = weather.choice([ObjectStoreFaults(), ObjectStoreFaults.flaky()])
        built.network.faults = weather.choice([NetFaults(), NetFaults.flaky()])
        loop = asyncio.get_running_loop()
        until_s = loop.time() + TRAFFIC_S
        zombie = rng.fork("takeover")
        if zombie.chance(TAKEOVER_P):
            producers[0].takeover = Takeover(
                at_s=loop.time() + zombie.between((0.5, TRAFFIC_S / 2)),
                where=zombie.choice(PAUSE_POINTS),
                resume_s=zombie.between((0.0, 2.0)),
                successor_start_s=zombie.between((0.0, 3.0)),
            )
        stops: Counter[str] = Counter()
        with failing_disks(rng.fork("disks"), weather.choice([0.0, 0.0, 0.003])):
            tasks = [loop.create_task(p.run(until_s)) for p in producers]
            tasks.append(loop.create_task(fault_schedule(built, rng.fork("faults"), until_s, stops, gate)))
            await asyncio.gather(*tasks)
            await killer.finished()
            await settle(built, [*keys, *_internal_keys(built, TRANSACTION_TOPIC)])
        counts = await audit(built, ledger, keys, rng.fork("audit"), azs)
        return {**counts, **stops, "coordinator_kills": killer.kills}


def _internal_keys(cluster: SimCluster, name: str) -> list[Key]:
    topic = cluster.live()[0].broker.catalog.get(name)
    return [] if topic is None else [(name, i) for i in range(topic.partitions)]


async def audit(cluster: SimCluster, ledger: TxnLedger, keys: list[Key], rng, azs: list[str]) -> dict[str, int]:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + COMPLETION_S
    problems = list(ledger.violations)
    problems += await _coordinator_states(cluster, ledger, deadline)
    offsets_keys = _internal_keys(cluster, OFFSETS_TOPIC)
    problems += await _stable(cluster, [*keys, *offsets_keys], deadline)
    if problems:  # nothing to read back while transactions hang
        raise AssertionError(f"{len(problems)} violation(s):\n  " + "\n  ".join(problems[:20]))
    raw = {key: await read_log(cluster, key) for key in keys}  # dense offsets, replicas hold the leader's log
    reads = {}
    for i, key in enumerate(keys):
        leader = cluster.leader_broker(*key)
        assert leader is not None, f"{key}: no leader"
        end = leader.replica_manager.partitions[key].log.high_watermark
        reads[key] = await read_committed(cluster, rng, azs[i % len(azs)], key, end, deadline)
    txn_of = {value: txn for txn in ledger.txns for value in txn.records}
    seen: dict[str, list[tuple[Key, int]]] = {}
    for key, read in reads.items():
        logged = set(raw[key].values())
        for offset, value in read.records:
            seen.setdefault(value, []).append((key, offset))
            if value not in logged:
                problems.append(f"{key[0]}-{key[1]}: read_committed returned {value} at {offset}, not in the log")
        for value in logged:
            if value not in txn_of:
                problems.append(f"{key[0]}-{key[1]}: the log holds {value}, which no producer sent")
    for value, where in seen.items():
        if value not in txn_of:
            problems.append(f"read_committed returned {value}, which no producer sent, at {where}")
        elif len(where) > 1:
            problems.append(f"read_committed returned {value} {len(where)} times: {where}")
    committed: list[int] = []
    outcomes: Counter[str] = Counter()
    for txn in ledger.txns:
        visible = {value for value in txn.records if value in seen}
        outcomes[f"txn_{txn.outcome}"] += 1
        what = f"transaction {txn.name} (producer {txn.producer_id} epoch {txn.epoch}, asked {txn.intent}, {txn.outcome}; {txn.story})"
        if visible and visible != set(txn.records):
            problems.append(f"{what}: only {sorted(visible)} of {sorted(txn.records)} are visible (not atomic)")
        if visible and set(txn.records) != txn.acked:
            problems.append(f"{what}: visible, but {sorted(set(txn.records) - txn.acked)} were never acknowledged")
        if txn.outcome == "committed" and visible != set(txn.records):
            problems.append(f"{what}: committed, but {sorted(set(txn.records) - visible)} are not visible")
        if (txn.outcome == "aborted" or txn.intent != "commit") and visible:
            problems.append(f"{what}: never committed, but {sorted(visible)} are visible")
        if visible & txn.late or (visible and txn.late_end):
            late = sorted(visible & txn.late) if visible & txn.late else "its EndTxn(commit)"
            problems.append(f"{what}: a fenced instance committed: {late} sent after its successor took over")
        if visible:
            committed.append(id(txn))
            outcomes["visible"] += 1
    visible_txns = set(committed)
    for group in sorted(ledger.groups):
        expected: dict[Key, int] = {}
        for txn in ledger.txns:
            if txn.group == group and id(txn) in visible_txns:
                for key, offset in txn.offsets.items():
                    expected[key] = max(expected.get(key, -1), offset)
        fetched = await fetch_stable_offsets(cluster, rng, group, deadline)
        if fetched != expected:
            problems.append(f"group {group}: committed offsets {fetched}, committed transactions say {expected}")
    if problems:
        raise AssertionError(f"{len(problems)} violation(s):\n  " + "\n  ".join(problems[:20]))
    return {
        **dict(outcomes),
        **dict(ledger.counts),
        "transactions": len(ledger.txns),
        "records_read": sum(len(r.records) for r in reads.values()),
    }


async def _coordinator_states(cluster: SimCluster, ledger: TxnLedger, deadline: float) -> list[str]:
    """Wait until every transactional id's coordinator holds it in a settled state."""
    loop = asyncio.get_running_loop()
    states: dict[str, str] = {}
    while True:
        states = {tid: _state(cluster, tid) for tid in sorted(ledger.transactional_ids)}
        if all(state in {s.value for s in SETTLED_STATES} for state in states.values()):
            return []
        if loop.time() >= deadline:
            return [f"transactional id {tid} is {state} at the end" for tid, state in states.items()]
        await asyncio.sleep(0.5)


def _state(cluster: SimCluster, transactional_id: str) -> str:
    for candidate in cluster.live():
        coordinator = candidate.broker.transactions
        if coordinator.coordinator_of(transactional_id) != candidate.node_id:
            continue
        try:
            txn = coordinator.describe(transactional_id)
        except ApiError as exc:
            return f"unreadable ({exc.code})"
        return "unknown to its coordinator" if txn is None else txn.state.value
    return "without a live coordinator"


async def _stable(cluster: SimCluster, keys: list[Key], deadline: float) -> list[str]:
    """Wait until every partition's leader has its last stable offset at its high watermark
    and no replica holds an open transaction."""
    loop = asyncio.get_running_loop()
    while True:
        problems = []
        for key in keys:
            leader = cluster.leader_broker(*key)
            if leader is None:
                problems.append(f"{key[0]}-{key[1]}: no leader")
                continue
            partition = leader.replica_manager.partitions[key]
            if partition.last_stable_offset != partition.log.high_watermark:
                problems.append(
                    f"{key[0]}-{key[1]}: last stable offset {partition.last_stable_offset}, high watermark "
                    f"{partition.log.high_watermark} on leader {leader.node_id}"
                )
            for node_id in partition.replicas:
                replica = cluster.brokers[node_id].broker.replica_manager.partitions.get(key)
                if replica is not None and replica.producers.ongoing_transactions():
                    problems.append(
                        f"{key[0]}-{key[1]}: broker {node_id} holds open transactions "
                        f"{dict(replica.producers.ongoing_transactions())}"
                    )
        if not problems or loop.time() >= deadline:
            return problems
        await asyncio.sleep(0.5)
