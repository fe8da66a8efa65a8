"""DeleteRecords on tiered partitions (issue 26, F3) on three real brokers under faults.

Each seed draws a world as `tiering` does (one AZ or three, the tiering cadence, local
retention, segment roll time, jobs that fail or die half-way, crashes of any broker,
partitions, metadata outages, a flaky store) for two tiered topics of one partition each: a
diskless one (tiered by jobs running the real assembler) and a classic one (the broker copies
its segments). Producers write both; a deleter sends DeleteRecords through a client's
connection (to the partition's leader, or its AZ representative for the diskless topic)
every few seconds, up to an acknowledged batch, so the log start lands inside the tiered
range, past its end, or in the local log; consumers with auto.offset.reset=earliest tail both
partitions, resetting to ListOffsets EARLIEST whenever told OFFSET_OUT_OF_RANGE.

At the end the faults stop, the cluster settles, more cycles run, and:
- every replica's log start offset is at least the highest low watermark a DeleteRecords
  answered (the answer waits for every replica on a live broker) and at most what was asked;
- a fresh consumer reading from EARLIEST reaches the high watermark without being reset
  (no gap between the log start and the high watermark), reads nothing below the log start,
  and every acknowledged batch at or above it at its offset;
- no tiered segment wholly below the log start is left, nor any file of one in the store,
  and the rest of the `tiering` auditor's checks hold (tiering.py check_tiered).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from kafka.protocol.admin import DeleteRecordsRequest
from kafka.protocol.consumer import ListOffsetsRequest

from broker.log.markers import RemoteSegmentState
from broker.protocol.errors import ErrorCode

from ..audit import settle
from ..cluster import SimCluster
from ..determinism import SimRandom
from ..metadata import MetadataFaults
from ..network import NetFaults
from ..objectstore import ObjectStoreFaults
from ..registry import scenario
from ..runner import Sim
from ..workload import (
    REFRESH_ERRORS,
    Connections,
    Key,
    Ledger,
    Metadata,
    fetch_request,
    produce,
    produce_idempotent,
    read_batches,
)
from ..kafka import ConnectionLost
from .tiering import BROKERS, JOB_TIMEOUT_S, SimJobs, check_tiered, fault_schedule, final_cycles

TRAFFIC_S = 25.0
DISKLESS, CLASSIC = ("tiered", 0), ("classic", 0)
KEYS = [DISKLESS, CLASSIC]
EARLIEST = -2
DELETE_RECORDS_V, LIST_OFFSETS_V = 2, 7
MAX_FINAL_RESETS = 3  # a settled partition's reader is reset at most by the deletes it races


@dataclass
class Deletes:
    """What the deleter asked and was answered, per partition."""

    acked: dict[Key, int] = field(default_factory=dict)  # highest low watermark answered
    asked: dict[Key, int] = field(default_factory=dict)  # highest offset asked (an unanswered one may apply)
    answered: int = 0  # deletes answered without an error
    into_tiered: int = 0  # of those, whose offset was above a tiered segment's base when sent


async def create_topics(cluster: SimCluster, rng: SimRandom) -> None:
    first = cluster.live()[0].broker
    while len(first.view.brokers) < BROKERS:
        await asyncio.sleep(0.1)
    configs = {
        "remote.storage.enable": "true",
        "retention.ms": "-1",
        "min.insync.replicas": "2",
        "segment.ms": str(rng.choice([500, 1000, 2000])),
        "local.retention.ms": str(rng.choice([0, 1000, 3000])),
        "index.interval.bytes": str(rng.choice([0, 256, 4096])),
    }
    for (name, _index), diskless in ((DISKLESS, "true"), (CLASSIC, "false")):
        topic = first.catalog.prepare(name, 1, {**configs, "diskless.enable": diskless})
        await first.catalog.create(topic, first.assign_replicas(range(1), BROKERS))
    while not all(cluster.leader_broker(*key) for key in KEYS):
        await asyncio.sleep(0.1)


async def delete_records(
    cluster: SimCluster, ledger: Ledger, deletes: Deletes, rng: SimRandom, az: str, until_s: float
) -> None:
    """Every 1-4 s, DeleteRecords of one partition up to an acknowledged batch above the
    last answered low watermark (in the older half of those, so the log never empties)."""
    loop = asyncio.get_running_loop()
    client_id = f"deleter,shoal_az={az}"
    metadata = Metadata(cluster, az, client_id, rng.fork("metadata"))
    connections = Connections(cluster, client_id)
    while loop.time() < until_s:
        await asyncio.sleep(rng.between((1.0, 4.0)))
        key = KEYS[rng.randrange(len(KEYS))]
        floor = deletes.acked.get(key, 0)
        acked = sorted(s.acked_offset for s in ledger.sent.values() if s.key == key and (s.acked_offset or 0) > floor)
        if not acked or not await metadata.refresh() or key not in metadata.leaders:
            continue
        offset = acked[rng.randrange((len(acked) + 1) // 2)]
        deletes.asked[key] = max(deletes.asked.get(key, 0), offset)
        leader = cluster.leader_broker(*key)
        tiered = leader is not None and any(
            s.base_offset < offset for s in leader.replica_manager.partitions[key].remote_segments.readable
        )
        try:
            answer = await send_delete_records(connections, metadata.leaders[key], key, offset)
        except ConnectionLost:
            continue
        cluster.sim.trace.record(
            "scenario", "DeleteRecords %s-%d below %d: error %d, low watermark %d", *key, offset,
            answer.error_code, answer.low_watermark,
        )  # fmt: skip
        if answer.error_code:
            continue
        if answer.low_watermark < offset:
            ledger.violation(f"DeleteRecords {key} below {offset} answered low watermark {answer.low_watermark}")
        deletes.acked[key] = max(floor, answer.low_watermark)
        deletes.answered += 1
        deletes.into_tiered += tiered
    connections.close_all()


async def send_delete_records(connections: Connections, node_id: int, key: Key, offset: int) -> Any:
    """DeleteRecords of one partition below `offset`, sent to `node_id`: the partition's answer."""
    part = DeleteRecordsRequest.DeleteRecordsTopic.DeleteRecordsPartition(partition_index=key[1], offset=offset)
    request = DeleteRecordsRequest(
        topics=[DeleteRecordsRequest.DeleteRecordsTopic(name=key[0], partitions=[part])], timeout_ms=30_000
    )
    response = await connections.get(node_id).request(request, DELETE_RECORDS_V)
    return response.topics[0].partitions[0]


async def routed_as_metadata_says(cluster: SimCluster, rng: SimRandom, az: str, key: Key, offset: int) -> int:
    """In a settled cluster, DeleteRecords sent where the client's Metadata names the
    partition (for a diskless topic, its AZ's representative, which sends it on to the
    leader): its error code (ListOffsets' and DeleteRecords' routing agree)."""
    client_id = f"final-deleter,shoal_az={az}"
    metadata = Metadata(cluster, az, client_id, rng)
    connections = Connections(cluster, client_id)
    try:
        if not await metadata.refresh() or key not in metadata.leaders:
            return int(ErrorCode.LEADER_NOT_AVAILABLE)
        return int((await send_delete_records(connections, metadata.leaders[key], key, offset)).error_code)
    except ConnectionLost:
        return int(ErrorCode.NETWORK_EXCEPTION)
    finally:
        connections.close_all()


async def earliest(connections: Connections, metadata: Metadata, key: Key) -> int | None:
    """ListOffsets EARLIEST of the partition, as the client's metadata routes it (None: failed)."""
    wanted = ListOffsetsRequest.ListOffsetsTopic
    request = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=0,
        topics=[
            wanted(name=key[0], partitions=[wanted.ListOffsetsPartition(partition_index=key[1], timestamp=EARLIEST)])
        ],
    )
    try:
        response = await connections.get(metadata.leaders[key]).request(request, LIST_OFFSETS_V)
    except ConnectionLost:
        return None
    [answer] = response.topics[0].partitions
    return answer.offset if answer.error_code == 0 else None


async def consume_from_earliest(
    cluster: SimCluster, consumed: dict[int, str], rng: SimRandom, name: str, az: str, key: Key, until_s: float
) -> tuple[int, int, list[str]]:
    """A consumer with auto.offset.reset=earliest: starts at ListOffsets EARLIEST and goes
    back there on OFFSET_OUT_OF_RANGE. Returns (position, resets, problems); stops at the
    high watermark once `until_s` has passed."""
    loop = asyncio.get_running_loop()
    client_id = f"{name},shoal_az={az}"
    metadata = Metadata(cluster, az, client_id, rng.fork("metadata"))
    connections = Connections(cluster, client_id)
    position: int | None = None
    resets = 0
    problems: list[str] = []
    stale = True
    while loop.time() < until_s + 120:
        if stale or key not in metadata.leaders:
            stale = not await metadata.refresh() or key not in metadata.leaders
            if stale:
                await asyncio.sleep(0.25)
                continue
        if position is None:
            position = await earliest(connections, metadata, key)
            if position is None:
                stale = True
                await asyncio.sleep(0.25)
                continue
        request = fetch_request(key, position, az, isolation_level=0, max_wait_ms=500)
        try:
            response = await connections.get(metadata.leaders[key]).request(request, 12)
        except ConnectionLost:
            stale = True
            await asyncio.sleep(0.1)
            continue
        part = response.responses[0].partitions[0]
        if part.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            position, resets, stale = None, resets + 1, True
            await asyncio.sleep(0.1)
            continue
        if part.error_code:
            stale = stale or part.error_code in REFRESH_ERRORS
            await asyncio.sleep(0.1)
            continue
        for offset, batch in read_batches(part.records):
            if offset != position:
                problems.append(f"{name}: {key} batch at offset {offset} where {position} was next")
            if batch is not None and consumed.setdefault(offset, batch) != batch:
                problems.append(f"{name}: {key} offset {offset} read as {batch}, earlier as {consumed[offset]}")
            position = offset + 1
        if loop.time() >= until_s and position >= part.high_watermark:
            break
    connections.close_all()
    return position or 0, resets, problems


def check_log_starts(cluster: SimCluster, deletes: Deletes) -> list[str]:
    """Every replica's log start offset is at least what DeleteRecords answered (it waited for
    them all) and at most what was asked. A follower's may be above the leader's: a delete a
    former leader applied but never answered (it died first) stays with it, as in Kafka."""
    problems = []
    for key in KEYS:
        leader = cluster.leader_broker(*key)
        assert leader is not None
        partition = leader.replica_manager.partitions[key]
        start = partition.log_start_offset
        acked, asked = deletes.acked.get(key, 0), deletes.asked.get(key, 0)
        for node_id in partition.replicas:
            theirs = cluster.brokers[node_id].broker.replica_manager.partitions[key].log_start_offset
            if not acked <= theirs <= max(asked, start):
                problems.append(
                    f"{key}: broker {node_id}'s log start is {theirs} (the leader's {start}): "
                    f"DeleteRecords answered up to {acked}, asked up to {asked}"
                )
        below = [
            (s.base_offset, s.end_offset)
            for s in partition.remote_segments.segments
            if s.state == RemoteSegmentState.COPY_SEGMENT_FINISHED and s.end_offset < start
        ]
        if below:
            problems.append(f"{key}: tiered segments wholly below the log start {start} left: {below}")
    return problems


@scenario("tiered_delete_records", max_virtual_s=900.0, max_steps=3_000_000, test_seeds=8)
async def tiered_delete_records(sim: Sim) -> dict[str, int]:
    """3 brokers, a diskless and a classic tiered topic, DeleteRecords into and past the tiered range, faults."""
    rng = sim.fork("scenario")
    azs = ["az1"] if rng.chance(0.5) else ["az1", "az2", "az3"]
    interval_ms = rng.choice([500, 1000, 2000])
    built = SimCluster.build(
        sim,
        azs=azs,
        settings={
            "tiering.interval.ms": str(interval_ms),
            "tiering.job.timeout.ms": str(int(JOB_TIMEOUT_S * 1000)),
            "log.retention.check.interval.ms": "500",
            "wal.linger.ms": str(rng.choice([5, 50, 250])),
            "wal.file.manager.interval.ms": "1000",
            "wal.file.manager.grace.ms": "2000",
            "wal.commit.deadline.ms": "5000",
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
        await create_topics(built, rng)
        weather = rng.fork("weather")
        built.metadata.faults = MetadataFaults(unavailable_p=weather.choice([0.0, 0.02]), ambiguous_p=0.0)
        built.objects.faulty.faults = weather.choice([ObjectStoreFaults(), ObjectStoreFaults.flaky()])
        built.network.faults = weather.choice([NetFaults(), NetFaults.flaky()])
        ledger, deletes = Ledger(), Deletes()
        loop = asyncio.get_running_loop()
        until_s = loop.time() + TRAFFIC_S
        clients = rng.fork("clients")
        tailed: dict[Key, dict[int, str]] = {key: {} for key in KEYS}
        tasks = [
            loop.create_task(produce(built, ledger, clients.fork("p"), "p", azs[0], KEYS, until_s)),
            loop.create_task(produce_idempotent(built, ledger, clients.fork("i"), "i", azs[-1], KEYS, until_s)),
            loop.create_task(delete_records(built, ledger, deletes, clients.fork("d"), azs[-1], until_s)),
            loop.create_task(fault_schedule(built, rng.fork("faults"), until_s)),
        ]
        tails = [
            loop.create_task(
                consume_from_earliest(built, tailed[key], clients.fork(f"c{i}"), f"c{i}", azs[0], key, until_s)
            )
            for i, key in enumerate(KEYS)
        ]
        await asyncio.gather(*tasks)
        problems = list(ledger.violations)
        for _position, _resets, found in await asyncio.gather(*tails):
            problems += found
        await settle(built, KEYS)
        calm[0] = True
        await asyncio.sleep(max(10.0, 8 * interval_ms / 1000))
        await final_cycles(built, detached)
        problems += check_log_starts(built, deletes)
        acked = 0
        for i, key in enumerate(KEYS):
            leader = built.leader_broker(*key)
            assert leader is not None
            start = leader.replica_manager.partitions[key].log_start_offset
            error = await routed_as_metadata_says(built, clients.fork(f"final-delete-{i}"), azs[-1], key, start)
            if error:
                problems.append(
                    f"{key}: DeleteRecords (a no-op below {start}) sent as Metadata routes it: error {error}"
                )
            read: dict[int, str] = {}
            position, resets, found = await consume_from_earliest(
                built, read, clients.fork(f"final-{i}"), f"final-{i}", azs[-1], key, loop.time()
            )
            problems += found
            sim.trace.record("audit", "%s read from EARLIEST to %d with %d resets", key, position, resets)
            if resets > MAX_FINAL_RESETS:
                problems.append(f"{key}: a reader from EARLIEST was reset {resets} times (a gap makes it loop)")
            if read and min(read) < start:
                problems.append(f"{key}: offsets below the log start {start} were served: {sorted(read)[:5]}")
            for sent in ledger.sent.values():
                if sent.key == key and sent.acked_offset is not None and sent.acked_offset >= start:
                    acked += 1
                    if read.get(sent.acked_offset) != sent.batch:
                        problems.append(
                            f"acknowledged {sent.batch} at {key}@{sent.acked_offset} (log start {start}): "
                            f"read {read.get(sent.acked_offset)}"
                        )
        store_keys = [k for k in built.objects.memory._objects if "/tiered/" in k or k.startswith("tiered/")]
        problems += check_tiered(built, store_keys, KEYS)
        if problems:
            raise AssertionError("\n  ".join(problems[:10]))
        stats = {"acked": acked, "deletes": deletes.answered, "into_tiered": deletes.into_tiered}
        sim.trace.record("audit", "ok: %s", stats)
        return stats
