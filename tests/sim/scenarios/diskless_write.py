"""Smoke scenario: one broker's diskless write path, real components over a faulty object store.

    idempotent producers --submit--> WalWriter --PUT--> RetryingObjectStore(FaultyObjectStore)
                                         \\--commit (seal order)--> LocalCommitter --> Partition logs

Per seed: 1-3 partitions (real logs in the run's temp dir), 1-3 idempotent producers sending
requests of 1-2 partitions at random virtual times and retrying retriable errors with the
same sequence numbers, random linger / quiet / buffer / in-flight bounds (so seals by linger, quiet, size
and backpressure all happen), and one of four object-store weathers: calm, slow, flaky, or
flaky with a stall of up to 40 s (longer than the commit deadline once retries pile up).

The auditor (DESIGN invariants 1-3 on one broker) checks, per partition:
- offsets are dense from 0 and the high watermark is the log end;
- no (producer, sequence) is in the log twice, and every entry is a batch a producer sent;
- every acknowledged batch is in the log exactly once, at the offset it was answered with;
- acknowledged batches are in the order of their submits;
- the bytes at each entry's coordinates in the object store are the producer's batch.

Transactions (about half the seeds, from their own random stream so the other seeds run as
before): the first producer is transactional. Its batches carry the transactional flag, and
after a request is resolved it ends its open transaction on the partitions it wrote since
the last marker, at random with COMMIT or ABORT (Partition.append_txn_marker, as
WriteTxnMarkers does), and all of them when it stops. The auditor then also checks that
the last stable offset is the high watermark (nothing is left open), that the markers are
inline RECORDS control batches, and that a read_committed consumer (Kafka's consumer rules
over the entries below the LSO and the partition's aborted-transaction list) sees exactly the
non-transactional batches and those of committed transactions.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from dataclasses import dataclass, field

from kafka.record.default_records import DefaultRecordBatchBuilder

from broker.config import load_config
from broker.wal.cache import ObjectCache
from broker.wal.commit import CommitResult, LocalCommitter
from broker.log.coordinates import decode_ref
from broker.log.txn_markers import decode_txn_marker, is_txn_marker
from broker.wal.wal_writer import PartitionAppend, WalWriter
from broker.log import EntryKind
from broker.metadata.records import PartitionStateRecord
from broker.metrics import BrokerMetrics
from broker.log_validator import prepare_diskless
from broker.partition import Partition
from broker.protocol.batch import parse_header
from broker.protocol.errors import RETRIABLE
from broker.topic_config import TopicSettings, effective
from walfiles.keys import SEQUENCE_MODULUS, WalKeyAllocator, wal_prefix

from ..determinism import SimRandom
from ..objectstore import ObjectStoreFaults, build_object_store
from ..registry import scenario
from ..loop import DEFAULT_EPOCH_MS
from ..runner import Sim

TOPIC = "t"
TOPIC_ID = uuid.UUID(int=42)
CLUSTER = "sim-cluster"
NODE_ID = 0
MAX_ATTEMPTS = 12  # a producer's tries per batch (Kafka's are bounded by delivery.timeout.ms)
RETRY_BACKOFF_S = 0.1

WEATHERS = {
    "calm": ObjectStoreFaults(),
    "slow": ObjectStoreFaults(slow_p=0.1, slow_s=(0.2, 4.0)),
    "flaky": ObjectStoreFaults.flaky(),
    "stalls": ObjectStoreFaults.flaky(),
}


@dataclass
class Batch:
    producer_id: int
    partition: int
    base_sequence: int
    count: int
    data: bytes
    acked: tuple[int, int] | None = None  # (submit index, base offset) of the attempt that succeeded
    attempts: list[tuple[int, int]] = field(default_factory=list)  # (submit index, error code)
    committed: bool | None = None  # transactional: how the transaction holding it ended


class Catalog:
    """The committer's catalog and replica lookups over one topic's real partitions."""

    def __init__(self, partitions: dict[int, Partition]) -> None:
        self.name = TOPIC
        self.partitions = {(TOPIC, index): partition for index, partition in partitions.items()}

    def by_id(self, topic_id: uuid.UUID) -> Catalog | None:
        return self if topic_id == TOPIC_ID else None

    def get(self, name: str, index: int) -> Partition:
        return self.partitions[(name, index)]


_batches: dict[tuple[int, int, int], bytes] = {}
_settings: list[TopicSettings] = []


_txn_batches: dict[tuple[int, int, int], bytes] = {}


def make_batch(producer_id: int, base_sequence: int, count: int, transactional: bool = False) -> bytes:
    """A Kafka v2 batch; built once per process (kafka-python's builder is a fifth of a
    seed's CPU time otherwise). Timestamps are the sim epoch: the topic accepts any past
    timestamp (message.timestamp.before.max.ms is unbounded by default)."""
    key = (producer_id, base_sequence, count)
    cache = _txn_batches if transactional else _batches
    cached = cache.get(key)
    if cached is None:
        cached = cache[key] = _build_batch(producer_id, base_sequence, count, DEFAULT_EPOCH_MS, transactional)
    return cached


def topic_settings() -> TopicSettings:
    """Immutable and the same for every seed: computed once per process."""
    if not _settings:
        _settings.append(effective({"diskless.enable": "true"}, load_config(environ={})))
    return _settings[0]


def _build_batch(
    producer_id: int, base_sequence: int, count: int, timestamp_ms: int, transactional: bool = False
) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=transactional,
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=base_sequence,
        batch_size=1 << 20,
    )
    for i in range(count):
        builder.append(
            i, timestamp=timestamp_ms, key=None, value=b"%d/%d" % (producer_id, base_sequence + i), headers=[]
        )
    return bytes(builder.build())


@scenario("diskless_write", max_virtual_s=1800.0, max_steps=200_000, test_seeds=1000)
async def diskless_write(sim: Sim) -> dict[str, int]:
    """Diskless write path (WalWriter, LocalCommitter, real logs) over a faulty object store."""
    rng = sim.fork("scenario")
    clock = sim.clock
    settings = topic_settings()
    partitions = {
        index: Partition.open(
            TOPIC, index, sim.tmp / f"{TOPIC}-{index}", settings, clock, 86_400_000, on_append=lambda _p: None
        )
        for index in range(rng.randint(1, 3))
    }
    for partition in partitions.values():
        partition.make_leader(NODE_ID, PartitionStateRecord(1, [NODE_ID], 0, 0, [NODE_ID]), 1)
    catalog = Catalog(partitions)
    committer = LocalCommitter(catalog, catalog, clock, deadline_ms=60_000)  # type: ignore[arg-type]

    weather = rng.choice(sorted(WEATHERS))
    # Few attempts and short timeouts let failures through to the WAL writer (upload failed:
    # every batch of the object fails and is retried by its producer).
    max_attempts, request_timeout_s = rng.choice([1, 2, 4]), rng.choice([2.0, 10.0, 30.0])
    objects = build_object_store(
        sim.fork("objectstore"),
        sim.trace,
        clock,
        faults=WEATHERS[weather],
        max_attempts=max_attempts,
        request_timeout_s=request_timeout_s,
    )
    one_batch = len(make_batch(1, 0, 2))
    writer = WalWriter(
        objects.store,
        WalKeyAllocator("", CLUSTER, NODE_ID, clock.now_ms, first_sequence=rng.randrange(SEQUENCE_MODULUS)),
        committer,
        ObjectCache(1 << 20),
        BrokerMetrics(),
        clock=clock,
        buffer_max_bytes=one_batch * rng.randint(1, 8),
        linger_ms=rng.randint(1, 50),
        max_inflight_bytes=one_batch * rng.choice([2, 4, 16, 1 << 10]),
        quiet_ms=rng.choice([0, 1, 5, 20]),
        quiet_min_bytes=one_batch * rng.randint(0, 4),
    )
    sim.trace.record(
        "scenario",
        "%d partition(s), weather %s, %d attempt(s) of %.0f s",
        len(partitions),
        weather,
        max_attempts,
        request_timeout_s,
    )
    if weather == "stalls":  # up to 90 s: past the 60 s commit deadline once an upload gets through
        stall_at, stall_for = rng.uniform(0.0, 3.0), rng.uniform(0.1, 90.0)
        sim.loop.call_later(stall_at, objects.faulty.stall)
        sim.loop.call_later(stall_at + stall_for, objects.faulty.resume)

    batches: list[Batch] = []
    submits = itertools.count()
    txn_rng = sim.fork("transactions")  # its own stream: seeds without transactions run as before
    txn_producer = 1000 if txn_rng.random() < 0.5 else -1
    if txn_producer >= 0:
        sim.trace.record("scenario", "producer %d is transactional", txn_producer)

    def end_transactions(producer_id: int, open_txn: dict[int, list[Batch]], everything: bool) -> None:
        """End the producer's transaction on some (or every) partition it wrote to since its
        last marker there: COMMIT or ABORT at random, as a coordinator's WriteTxnMarkers."""
        for index in sorted(open_txn):
            if not everything and txn_rng.random() < 0.5:
                continue
            commit = txn_rng.random() < 0.5
            offset = partitions[index].append_txn_marker(producer_id, 0, 0, commit) - 1
            sim.trace.record(
                "producer", "p%d %s partition %d at %d", producer_id, "commits" if commit else "aborts", index, offset
            )
            for batch in open_txn.pop(index):
                batch.committed = commit

    async def produce(producer_id: int, requests: int, prng_name: str) -> None:
        prng = sim.fork(prng_name)
        next_sequence = {index: 0 for index in partitions}
        abandoned: set[int] = set()
        transactional = producer_id == txn_producer
        open_txn: dict[int, list[Batch]] = {}
        try:
            await _produce(producer_id, requests, prng, next_sequence, abandoned, transactional, open_txn)
        finally:
            if transactional:
                end_transactions(producer_id, open_txn, everything=True)

    async def _produce(
        producer_id: int,
        requests: int,
        prng: SimRandom,
        next_sequence: dict[int, int],
        abandoned: set[int],
        transactional: bool,
        open_txn: dict[int, list[Batch]],
    ) -> None:
        for _ in range(requests):
            await asyncio.sleep(prng.expovariate(1 / 0.02))
            usable = [p for p in partitions if p not in abandoned]
            if not usable:
                return
            chosen = prng.sample(usable, k=min(len(usable), prng.randint(1, 2)))
            pending = []
            for index in chosen:
                count = prng.randint(1, 3)
                batch = Batch(
                    producer_id,
                    index,
                    next_sequence[index],
                    count,
                    make_batch(producer_id, next_sequence[index], count, transactional),
                )
                next_sequence[index] += count
                batches.append(batch)
                pending.append(batch)
                if transactional:
                    open_txn.setdefault(index, []).append(batch)
            for _attempt in range(MAX_ATTEMPTS):
                index_of_submit = next(submits)
                appends = [
                    PartitionAppend(
                        TOPIC_ID, b.partition, -1, prepare_diskless(memoryview(b.data), settings, clock.now_ms()), -1
                    )
                    for b in pending
                ]
                sim.trace.record(
                    "producer",
                    "p%d submit #%d %s",
                    producer_id,
                    index_of_submit,
                    [(b.partition, b.base_sequence) for b in pending],
                )
                results: list[CommitResult] = await asyncio.gather(*writer.submit(appends))
                retry = []
                for batch, result in zip(pending, results):
                    batch.attempts.append((index_of_submit, result.error_code))
                    if result.error_code == 0:
                        batch.acked = (index_of_submit, result.base_offset)
                    elif result.error_code in RETRIABLE:
                        sim.trace.record(
                            "producer",
                            "p%d partition %d seq %d: error %d, will retry",
                            producer_id,
                            batch.partition,
                            batch.base_sequence,
                            result.error_code,
                        )
                        retry.append(batch)
                    else:
                        raise AssertionError(
                            f"p{producer_id} batch seq {batch.base_sequence} of partition "
                            f"{batch.partition}: non-retriable error {result.error_code} "
                            f"{result.error_message}"
                        )
                pending = retry
                if not pending:
                    break
                await asyncio.sleep(RETRY_BACKOFF_S * (1 + prng.random()))
            for batch in pending:  # gave up: later sequences of this partition would be out of order
                sim.trace.record(
                    "producer",
                    "p%d gives up on partition %d at seq %d",
                    producer_id,
                    batch.partition,
                    batch.base_sequence,
                )
                abandoned.add(batch.partition)
            if transactional:
                end_transactions(producer_id, open_txn, everything=False)

    producers = rng.randint(1, 3)
    try:
        await asyncio.gather(*(produce(1000 + i, rng.randint(5, 20), f"producer-{i}") for i in range(producers)))
        await writer.close()
        objects.faulty.faults = ObjectStoreFaults.none()
        return await audit(sim, partitions, batches, objects.memory)
    finally:
        for partition in partitions.values():
            partition.close()  # file descriptors: a worker runs thousands of seeds


async def audit(sim: Sim, partitions: dict[int, Partition], batches: list[Batch], memory: object) -> dict[str, int]:
    """Check the invariants listed in the module docstring; raise AssertionError on the first
    broken one, naming the partition, offset and batch."""
    sent = {(b.partition, b.producer_id, b.base_sequence): b for b in batches}
    acked_total = 0
    for index, partition in partitions.items():
        log = partition.log
        assert log.high_watermark == log.log_end_offset, (
            f"partition {index}: high watermark {log.high_watermark} != log end {log.log_end_offset}"
        )
        entries = log.read(log.log_start_offset, 1 << 30, log.high_watermark) if log.log_end_offset else []
        expected_offset = 0
        seen: dict[tuple[int, int], int] = {}
        for entry in entries:
            header = entry.header
            assert entry.base_offset == expected_offset, (
                f"partition {index}: offsets not dense: expected {expected_offset}, found {entry.base_offset}"
            )
            expected_offset = entry.last_offset + 1
            if is_txn_marker(header):
                assert entry.kind == EntryKind.RECORDS, f"partition {index}: marker at {entry.base_offset} not inline"
                continue
            assert entry.kind == EntryKind.COORDINATES, f"partition {index}: entry kind {entry.kind}"
            key = (header.producer_id, header.base_sequence)
            assert key not in seen, (
                f"partition {index}: producer {key[0]} seq {key[1]} at offsets {seen[key]} and {entry.base_offset}"
            )
            seen[key] = entry.base_offset
            batch = sent.get((index, *key))
            assert batch is not None, f"partition {index}: offset {entry.base_offset} holds a batch nobody sent {key}"
            assert header.records_count == batch.count, f"partition {index}: offset {entry.base_offset} record count"
            ref = decode_ref(entry.payload)
            stored = await memory.get(wal_prefix("", CLUSTER) + ref.object_id, ref.offset, ref.end)  # type: ignore[attr-defined]
            assert stored == batch.data, (
                f"partition {index}: offset {entry.base_offset}: the bytes at {ref} are not the batch that was sent"
            )
        acked = sorted((b for b in batches if b.partition == index and b.acked is not None), key=lambda b: b.acked[0])  # type: ignore[index]
        acked_total += len(acked)
        last_offset = -1
        for batch in acked:
            submit, offset = batch.acked  # type: ignore[misc]
            key = (batch.producer_id, batch.base_sequence)
            assert seen.get(key) == offset, (
                f"partition {index}: acknowledged batch {key} (submit #{submit}) answered offset {offset}, "
                f"log has it at {seen.get(key)}"
            )
            assert offset > last_offset, (
                f"partition {index}: acknowledged batch {key} (submit #{submit}) at {offset} is before an earlier submit's"
            )
            last_offset = offset
        _audit_read_committed(index, partition, entries, sent, seen)
    sim.trace.record("audit", "ok: %d batch(es) sent, %d acknowledged", len(batches), acked_total)
    return {"batches": len(batches), "acked": acked_total}


def _audit_read_committed(
    index: int,
    partition: Partition,
    entries: list,
    sent: dict[tuple[int, int, int], Batch],
    seen: dict[tuple[int, int], int],
) -> None:
    """Every transaction ended: the LSO is the high watermark. A read_committed consumer
    (Kafka's rules: a transactional batch of a producer between an aborted transaction's
    first offset and its ABORT marker is skipped, control batches are never shown) sees
    exactly the non-transactional batches and those of committed transactions."""
    log = partition.log
    assert partition.last_stable_offset == log.high_watermark, (
        f"partition {index}: last stable offset {partition.last_stable_offset} with every transaction ended "
        f"(high watermark {log.high_watermark}, open {dict(partition.producers.ongoing_transactions())})"
    )
    pending_aborts = sorted(
        (t.first_offset, t.producer_id) for t in partition.aborted_transactions(0, log.high_watermark)
    )
    aborting: set[int] = set()
    visible: set[tuple[int, int]] = set()
    for entry in entries:
        header = entry.header
        while pending_aborts and pending_aborts[0][0] <= entry.base_offset:
            aborting.add(pending_aborts.pop(0)[1])
        if is_txn_marker(header):
            if not decode_txn_marker(entry.data).commit:
                aborting.discard(header.producer_id)
            continue
        if header.is_transactional and header.producer_id in aborting:
            continue
        visible.add((header.producer_id, header.base_sequence))
    for key in seen:
        batch = sent[(index, *key)]
        if parse_header(batch.data).is_transactional:
            assert batch.committed is not None, (
                f"partition {index}: transactional batch {key} at {seen[key]} was never ended"
            )
    expected = {key for key in seen if sent[(index, *key)].committed is not False}
    assert visible == expected, (
        f"partition {index}: read_committed sees {sorted(visible - expected)} it must not, "
        f"misses {sorted(expected - visible)}"
    )
