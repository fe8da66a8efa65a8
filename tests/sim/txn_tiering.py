"""Transactions on a tiered topic, for the `tiering` scenario (review 3, F2): a transactional
producer whose transactions stay open for a while (a Flink-style sink), a read_committed
reader tailing the partition through whichever replica serves its AZ, a transaction held
open across a follower's start-over at the leader's log start, and the checks that every
replica agrees with the leader about transactions.

What went wrong before the fix: tiering planned up to the high watermark, so an open
transaction's first batches were tiered and dropped locally; a replica that came back below
the leader's local log start started over there knowing nothing of it: its last stable offset
passed the open transaction (read_committed readers it served got undecided records), and the
ABORT left no aborted-transaction entry there (they got the aborted ones, and so did everyone
once it led). Tiering only below the last stable offset keeps an open transaction's start
local, but a transaction decided since can still begin below the log start a replica starts
over at and end above it: that replica needs the leader's producer state there.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from .audit import settle
from .cluster import SimCluster
from .determinism import SimRandom
from .kafka import ConnectionLost
from .txn_workload import (
    FETCH_V,
    Abortable,
    Clients,
    Fenced,
    Txn,
    TxnLedger,
    TxnProducer,
    _committed_records,
    read_committed,
)
from .workload import REFRESH_ERRORS, Key, Ledger, fetch_request, produce

LINGER_S = [0.0, 0.0, 0.5, 2.0, 5.0, 10.0]  # a transaction kept open after its last record


class LingeringTxnProducer(TxnProducer):
    """A transactional producer that keeps each transaction open a drawn while after its last
    record, before EndTxn: often longer than a segment roll, local retention and a tiering
    cycle together."""

    async def end(self, txn: Txn, commit: bool) -> bool:
        await asyncio.sleep(self.rng.choice(LINGER_S))
        return await super().end(txn, commit)


@dataclass
class TailedRead:
    """A transactional record the tailing reader got."""

    value: str
    key: Key
    node_id: int
    intent: str | None  # what the transaction's client had asked when the value was read


@dataclass
class Tail:
    """What the tailing read_committed reader got, for the auditor."""

    reads: list[TailedRead] = field(default_factory=list)


async def tail_committed(
    cluster: SimCluster, ledger: TxnLedger, rng: SimRandom, az: str, key: Key, tail: Tail, until_s: float
) -> None:
    """Read `key` with isolation_level READ_COMMITTED from offset 0 until `until_s`, through
    the broker the client's metadata names for its AZ (a follower, often), noting what each
    transactional record's client had asked for when it was read."""
    clients = Clients(cluster, rng, f"tail,shoal_az={az}", az)
    loop = asyncio.get_running_loop()
    position = 0
    stale = True
    try:
        while loop.time() < until_s:
            if stale or key not in clients.metadata.leaders:
                stale = not await clients.metadata.refresh() or key not in clients.metadata.leaders
                if stale:
                    await asyncio.sleep(0.25)
                    continue
            node_id = clients.metadata.leaders[key]
            request = fetch_request(key, position, az, isolation_level=1, max_wait_ms=200)
            try:
                response = await clients.connections.get(node_id).request(request, FETCH_V)
            except ConnectionLost:
                stale = True
                await asyncio.sleep(0.1)
                continue
            part = response.responses[0].partitions[0]
            if part.error_code:
                stale = stale or part.error_code in REFRESH_ERRORS
                await asyncio.sleep(0.1)
                continue
            position, records = _committed_records(part.records, part.aborted_transactions or [], position)
            for _offset, value in records:
                txn = next((t for t in ledger.txns if value in t.records), None)
                if txn is not None:
                    tail.reads.append(TailedRead(value, key, node_id, txn.intent))
            if not records:
                await asyncio.sleep(0.05)
    finally:
        clients.connections.close_all()


async def start_over_inside_a_transaction(
    cluster: SimCluster,
    producer: TxnProducer,
    ledger: Ledger,
    rng: SimRandom,
    key: Key,
    hold_s: float,
) -> tuple[list[str], Counter[str]]:
    """A transaction on `key` open while a follower is away, twice (random transactions
    commit and abort in the traffic before; this one is aborted, which needs an index entry):

    1. The follower is killed; the transaction opens and stays open while a few plain
       batches go on, segments roll and tiering runs, until the leader's local log starts
       above the transaction's first offset (tiering up to the high watermark allows that; up
       to the last stable offset it never happens) or for `hold_s` (longer than a segment
       roll, local retention and two tiering cycles). The follower comes back, below the
       leader's local log start if that moved past it; once it holds the leader's log, every
       replica must have the leader's last stable offset: the transaction's first offset.
    2. The follower is killed again; after a segment roll the transaction writes once more
       and is aborted, and tiering may now pass its first offset: once the
       leader's local log starts above where the follower stopped, tiering stops and the
       follower comes back, starting over between the transaction's first offset and its
       marker. Every replica must then know the transaction's abort as the leader does.
    """
    counts: Counter[str] = Counter()
    loop = asyncio.get_running_loop()
    leader = cluster.leader_broker(*key)
    assert leader is not None
    partition = leader.replica_manager.partitions[key]
    az = cluster.brokers[leader.config.node_id].az
    victim = rng.choice([n for n in partition.replicas if n != leader.config.node_id])
    number = producer.numbers
    producer.numbers += 1
    txn = Txn(f"{producer.name}/{number}", number, producer.tid, producer.producer_id, producer.epoch, producer.group)
    producer.ledger.txns.append(txn)
    problems: list[str] = []
    rounds = 0

    async def plain_batches_until(done: Callable[[], bool], seconds: float) -> None:
        nonlocal rounds
        deadline = loop.time() + seconds
        while loop.time() < deadline and not done():
            rounds += 1
            until = loop.time() + 1.0
            await produce(cluster, ledger, rng.fork(f"plain-{rounds}"), f"held{rounds}", az, [key], until, (0.1, 0.3))

    def away() -> int:
        """Kill the follower; where its log ends."""
        left_at = cluster.brokers[victim].broker.replica_manager.partitions[key].log.log_end_offset
        cluster.crash(victim)
        return left_at

    def back(left_at: int, what: str) -> None:
        counts[what] += cluster.brokers[victim].broker.replica_manager.partitions[key].log.log_start_offset > left_at

    try:
        left_at = away()
        await producer.add_partitions(txn, [key])
        await producer.produce(txn, key, 1)  # acknowledged once the follower left the ISR
        first = partition.producers.ongoing_transactions().get(producer.producer_id, -1)
        await plain_batches_until(lambda: partition.log.log_start_offset > first, hold_s)
        counts["held_tiered_past_open"] += partition.log.log_start_offset > first
        cluster.start(victim)
        await settle(cluster, [key])
        await caught_up(cluster, [key])
        problems += _lso_agrees(cluster, key, producer.producer_id)
        back(left_at, "held_start_over_open")

        left_at = away()
        await plain_batches_until(lambda: False, partition.settings.log.segment_ms / 1000 + 1.0)
        await producer.produce(txn, key, 1, first=1)
        await producer.end(txn, commit=False)
        await plain_batches_until(lambda: partition.log.log_start_offset > left_at, hold_s)
        for live in cluster.live():  # the leader's local log start stays where it is now
            await live.broker.offload.stop()
        cluster.start(victim)
        await settle(cluster, [key])
        await caught_up(cluster, [key])
        problems += replicas_agree(cluster, [key])
        back(left_at, "held_start_over_ended")
    except (Fenced, Abortable) as exc:  # the world is calm: rare, and then nothing to check
        cluster.sim.trace.record("scenario", "the held transaction could not go on: %s", exc)
        counts["held_transaction_lost"] += 1
        if victim in cluster.down:
            cluster.start(victim)
    return problems, counts


async def caught_up(cluster: SimCluster, keys: list[Key], timeout_s: float = 30.0) -> None:
    """After `settle` (every replica holds the leader's log): until every replica also knows
    the leader's high watermark (one more fetch round), which its last stable offset is
    bounded by."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s

    def known(key: Key) -> bool:
        leader = cluster.leader_broker(*key)
        if leader is None:
            return False
        partition = leader.replica_manager.partitions[key]
        return all(
            cluster.brokers[n].broker.replica_manager.partitions[key].log.high_watermark == partition.log.high_watermark
            for n in partition.replicas
        )

    while loop.time() < deadline and not all(known(key) for key in keys):
        await asyncio.sleep(0.1)


def _lso_agrees(cluster: SimCluster, key: Key, producer_id: int) -> list[str]:
    leader = cluster.leader_broker(*key)
    assert leader is not None
    partition = leader.replica_manager.partitions[key]
    first = partition.producers.ongoing_transactions().get(producer_id)
    problems = []
    if first is None or partition.last_stable_offset != max(first, partition.log_start_offset):
        problems.append(
            f"{key[0]}-{key[1]}: the leader's last stable offset is {partition.last_stable_offset} with the "
            f"transaction of producer {producer_id} open at {first}"
        )
    for node_id in partition.replicas:
        replica = cluster.brokers[node_id].broker.replica_manager.partitions[key]
        if replica.last_stable_offset != partition.last_stable_offset:
            problems.append(
                f"{key[0]}-{key[1]}: broker {node_id}'s last stable offset is {replica.last_stable_offset}, the "
                f"leader's {partition.last_stable_offset} (a transaction open at {first}; broker {node_id} "
                f"holds [{replica.log.log_start_offset}, {replica.log.log_end_offset}) and open transactions "
                f"{dict(replica.producers.ongoing_transactions())})"
            )
    return problems


def replicas_agree(cluster: SimCluster, keys: list[Key]) -> list[str]:
    """Every replica has the leader's last stable offset, and the aborted transactions whose
    marker both hold (producer, first offset, marker offset: the last stable offset kept in
    an entry is the replica's own view, which may be later after a start-over)."""
    problems = []
    for key in keys:
        leader = cluster.leader_broker(*key)
        assert leader is not None
        partition = leader.replica_manager.partitions[key]
        for node_id in partition.replicas:
            replica = cluster.brokers[node_id].broker.replica_manager.partitions[key]
            if replica.last_stable_offset != partition.last_stable_offset:
                problems.append(
                    f"{key[0]}-{key[1]}: broker {node_id}'s last stable offset is {replica.last_stable_offset}, "
                    f"the leader's {partition.last_stable_offset}"
                )
            start = max(partition.log.log_start_offset, replica.log.log_start_offset)
            end = partition.log.high_watermark
            ours, theirs = (
                [(t.producer_id, t.first_offset, t.last_offset) for t in p.txn_index.markers_in(start, end)]
                for p in (partition, replica)
            )
            if ours != theirs:
                problems.append(
                    f"{key[0]}-{key[1]}: broker {node_id} knows the aborted transactions {theirs} with a marker in "
                    f"[{start}, {end}), the leader {ours}"
                )
    return problems


async def read_through_every_replica(
    cluster: SimCluster, ledger: TxnLedger, tail: Tail, rng: SimRandom, keys: list[Key], deadline_s: float
) -> tuple[list[str], int]:
    """Read each partition with read_committed through each of its replicas, as a client of
    that replica's AZ: the same transactions visible through all, each whole or not at all,
    none aborted or never asked to commit, every committed one; and what the tailing reader
    got during the run is among them, read only once its client had asked to commit."""
    problems = []
    txn_of = {value: txn for txn in ledger.txns for value in txn.records}
    visible: dict[Key, set[str]] = {}
    records = 0
    for key in keys:
        leader = cluster.leader_broker(*key)
        assert leader is not None
        partition = leader.replica_manager.partitions[key]
        end = partition.log.high_watermark
        for node_id in partition.replicas:
            az = cluster.brokers[node_id].az
            read = await read_committed(cluster, rng.fork(f"{key[1]}-{node_id}"), az, key, end, deadline_s, node_id)
            values = [value for _offset, value in read.records if value in txn_of]
            records += len(values)
            seen = set(values)
            where = f"{key[0]}-{key[1]} through broker {node_id}"
            if len(values) != len(seen):
                problems.append(f"{where}: read_committed returned a record twice: {sorted(values)}")
            if key in visible and visible[key] != seen:
                problems.append(
                    f"{where}: read_committed returned {sorted(seen ^ visible[key])} differently from the others"
                )
            visible.setdefault(key, seen)
            for txn in ledger.txns:
                here = {value for value, k in txn.records.items() if k == key}
                shown = here & seen
                what = f"transaction {txn.name} (asked {txn.intent}, {txn.outcome}; {txn.story})"
                if shown and (txn.intent != "commit" or txn.outcome == "aborted"):
                    problems.append(f"{where}: {what} was never committed, but {sorted(shown)} are visible")
                elif shown and shown != here:
                    problems.append(f"{where}: only {sorted(shown)} of {sorted(here)} of {what} are visible")
                elif txn.outcome == "committed" and shown != here:
                    problems.append(f"{where}: {what} committed, but {sorted(here - shown)} are not visible")
    for read in tail.reads:
        if read.intent != "commit" or read.value not in visible.get(read.key, set()):
            txn = txn_of[read.value]
            problems.append(
                f"a read_committed reader got {read.value} from broker {read.node_id} while its transaction "
                f"{txn.name} was asked {read.intent} (in the end: asked {txn.intent}, {txn.outcome})"
            )
    return problems, records
