"""The auditor of cluster simulations: once the faults stop and the cluster settles, the
brokers' logs are read back and held against what the clients were told (workload.Ledger).

Invariants (DESIGN "Invariants the tests must prove", and Kafka's):
- an acknowledged batch is in its partition's log, at the offset it was acknowledged with;
- a batch refused with a definite error is not in the log, and a batch appears at most once
  unless one of its attempts had an unknown outcome (an idempotent producer's, exactly once,
  in sequence order);
- a partition's batches from one connection are in the log in the order they were sent;
- offsets are dense, and every replica holds the leader's log (up to its end);
- what a consumer read is what the log holds at that offset (nothing read above the high
  watermark was later lost);
- no client was told OFFSET_OUT_OF_RANGE for an offset the leader held, and no committed
  offset went back (checked as the clients ran, see workload.py).
"""

from __future__ import annotations

import asyncio
from collections import Counter

from kafka.record.default_records import DefaultRecordBatch

from broker.groups.offsets_records import OFFSETS_TOPIC
from broker.protocol.errors import ErrorCode
from broker.reads.resolver import batch_pieces

from .cluster import SimCluster
from .metadata import MetadataFaults
from .network import NetFaults
from .objectstore import ObjectStoreFaults
from .workload import Key, Ledger

SETTLE_S = 300.0


async def settle(cluster: SimCluster, keys: list[Key], restart_down: bool = True) -> None:
    """Stop every fault, restart crashed brokers, and wait until every partition has a
    leader whose replicas all hold its whole log, committed."""
    cluster.metadata.faults = MetadataFaults.none()
    cluster.metadata.set_unavailable(False)
    cluster.objects.faulty.faults = ObjectStoreFaults.none()
    cluster.objects.faulty.resume()
    cluster.network.faults = NetFaults.none()
    cluster.network.heal()
    if restart_down:
        for node_id in sorted(cluster.down):
            cluster.start(node_id)
    offsets = cluster.live()[0].broker.catalog.get(OFFSETS_TOPIC) if cluster.live() else None
    if offsets is not None:  # group offsets are audited too: their partitions must settle
        keys = [*keys, *((OFFSETS_TOPIC, i) for i in range(offsets.partitions))]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SETTLE_S
    while loop.time() < deadline:
        if all(_settled(cluster, key) for key in keys):
            return
        await asyncio.sleep(0.5)
    unsettled = [key for key in keys if not _settled(cluster, key)]
    raise AssertionError(f"the cluster did not settle within {SETTLE_S:.0f} virtual s: {unsettled}")


def _settled(cluster: SimCluster, key: Key) -> bool:
    leader = cluster.leader_broker(*key)
    if leader is None:
        return False
    partition = leader.replica_manager.partitions[key]
    if (
        sorted(partition.isr) != sorted(partition.replicas)
        or partition.log.high_watermark != partition.log.log_end_offset
    ):
        return False
    for node_id in partition.replicas:
        replica = cluster.brokers.get(node_id)
        if replica is None or node_id in cluster.down or not replica.running:
            return False
        copy = replica.broker.replica_manager.partitions.get(key)
        if copy is None or copy.log.log_end_offset != partition.log.log_end_offset:
            return False
    return True


async def read_log(cluster: SimCluster, key: Key) -> dict[int, str]:
    """The leader's committed log of one partition: base offset -> batch value. Checks that
    offsets are dense and that every replica holds the same entries."""
    leader = cluster.leader_broker(*key)
    assert leader is not None, f"{key}: no leader"
    log = leader.replica_manager.partitions[key].log
    entries = (
        log.read(log.log_start_offset, 1 << 40, log.high_watermark) if log.high_watermark > log.log_start_offset else []
    )
    expected = log.log_start_offset
    for entry in entries:
        assert entry.base_offset == expected, f"{key}: entry at {entry.base_offset} where {expected} was next"
        expected = entry.last_offset + 1
    for node_id in leader.replica_manager.partitions[key].replicas:
        copy = cluster.brokers[node_id].broker.replica_manager.partitions[key].log
        theirs = copy.read(log.log_start_offset, 1 << 40, log.high_watermark) if entries else []
        assert [bytes(e.data) for e in theirs] == [bytes(e.data) for e in entries], (
            f"{key}: broker {node_id}'s copy differs from the leader's"
        )
    found: dict[int, str] = {}
    for entry, pieces in zip(entries, await batch_pieces(leader, entries)):
        assert not isinstance(pieces, Exception), f"{key}: batch at {entry.base_offset} unreadable: {pieces}"
        if entry.header.is_control:  # a marker (remote segment, mode switch): no client's batch
            continue
        record = next(iter(DefaultRecordBatch(b"".join(pieces))))
        found[entry.base_offset] = record.value.decode()
    return found


async def audit(cluster: SimCluster, ledger: Ledger, keys: list[Key]) -> dict[str, int]:
    """Check the invariants; raise AssertionError naming every violation. Returns counts."""
    logs = {key: await read_log(cluster, key) for key in keys}
    problems = list(ledger.violations)
    where: dict[str, list[tuple[Key, int]]] = {}
    for key, entries in logs.items():
        for offset, batch in entries.items():
            where.setdefault(batch, []).append((key, offset))
    acked = 0
    for sent in ledger.sent.values():
        found = where.get(sent.batch, [])
        if sent.acked_offset is not None:
            acked += 1
            if (sent.key, sent.acked_offset) not in found:
                problems.append(
                    f"acknowledged batch {sent.batch} missing from {sent.key[0]}-{sent.key[1]} at offset "
                    f"{sent.acked_offset} (found at {found})"
                )
        if sent.must_land and not found:
            problems.append(
                f"batch {sent.batch}, reported delivered to its producer, is not in {sent.key[0]}-{sent.key[1]}"
            )
        if found and not sent.may_be_appended:
            problems.append(
                f"batch {sent.batch} was refused every time ({[a.outcome for a in sent.attempts]}) "
                f"but is in the log at {found}"
            )
        ambiguous = sum(1 for a in sent.attempts if a.outcome in ("ambiguous", "pending"))
        if len(found) > (1 if sent.idempotent else 1 + ambiguous):
            problems.append(
                f"batch {sent.batch} appears {len(found)} times: {found}; attempts "
                f"{[(a.connection, a.wire, a.outcome, ErrorCode(a.error).name) for a in sent.attempts]}"
            )
    by_connection: dict[tuple[str, Key], list[tuple[int, int, str]]] = {}
    for sent in ledger.sent.values():
        if len(sent.attempts) == 1 and len(where.get(sent.batch, [])) == 1:
            attempt = sent.attempts[0]
            offset = where[sent.batch][0][1]
            by_connection.setdefault((attempt.connection, sent.key), []).append((attempt.order, offset, sent.batch))
    for (connection, key), landed in by_connection.items():
        by_order = [batch for _order, _offset, batch in sorted(landed)]
        by_offset = [batch for _order, _offset, batch in sorted(landed, key=lambda t: t[1])]
        if by_order != by_offset:
            problems.append(
                f"{key[0]}-{key[1]}: batches of connection {connection} are in the log out of the order "
                f"they were sent: sent {by_order}, logged {by_offset}"
            )
    by_producer: dict[tuple[str, Key], list[tuple[int, int]]] = {}  # idempotent: (offset, sequence)
    for sent in ledger.sent.values():
        if sent.idempotent and where.get(sent.batch):
            by_producer.setdefault((sent.batch.split("/")[0], sent.key), []).append(
                (where[sent.batch][0][1], sent.sequence)
            )
    for (producer, key), landed in by_producer.items():
        sequences = [sequence for _offset, sequence in sorted(landed)]
        if sequences != sorted(sequences):
            problems.append(
                f"{key[0]}-{key[1]}: idempotent producer {producer}'s batches are out of sequence "
                f"order in the log: {sequences[:30]}"
            )
    for key, consumed in ledger.consumed.items():
        for offset, batch in consumed.items():
            if offset >= min(logs[key], default=0) and logs[key].get(offset) != batch:
                problems.append(
                    f"{key[0]}-{key[1]}: a consumer read {batch} at offset {offset}; the log holds "
                    f"{logs[key].get(offset)} there (read above what was committed?)"
                )
    for (group, topic, partition), offset in ledger.committed.items():
        coordinator = _coordinator_of(cluster, group)
        fetched = coordinator.groups.fetch_offsets(group, [(topic, [partition])])[topic][partition]
        if fetched is None or fetched.offset < offset:
            problems.append(
                f"group {group} {topic}-{partition}: committed offset {fetched.offset if fetched else None} "
                f"below the acknowledged commit {offset}"
            )
    if problems:
        raise AssertionError(f"{len(problems)} violation(s):\n  " + "\n  ".join(problems[:20]))
    counts = Counter(
        {
            "acked": acked,
            "sent": len(ledger.sent),
            "commits": len(ledger.committed),
            "consumed": sum(len(c) for c in ledger.consumed.values()),
        }
    )
    return dict(counts)


def _coordinator_of(cluster: SimCluster, group: str):  # type: ignore[no-untyped-def]
    for candidate in cluster.live():
        index = candidate.broker.groups.coordinator_of(group)
        if index == candidate.node_id:
            return candidate.broker
    raise AssertionError(f"no live coordinator for group {group}")
