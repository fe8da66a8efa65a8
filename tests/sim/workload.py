"""What clients do in cluster simulations, and what they saw: producers, consumers and an
offset committer over `kafka.SimConnection`, each writing down what it was promised in a
`Ledger` that the auditor (audit.py) checks against the brokers' logs.

The clients behave like Kafka's: they learn leaders from Metadata, send each broker one
request for all its partitions, pipeline requests on a connection, refresh their metadata
on NOT_LEADER_OR_FOLLOWER and friends, and drop a connection whose request timed out.
Producers are non-idempotent with acks=all, as librdkafka's default is: a failed batch is
sent again up to MAX_ATTEMPTS times, as librdkafka retries (so a record may appear once per
ambiguous attempt), and the auditor checks per-connection order exactly over the batches
that landed on their only attempt. Consumers start at offset 0 and report OFFSET_OUT_OF_RANGE instead of resetting,
as `auto.offset.reset=error` does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kafka.protocol.consumer import FetchRequest, OffsetCommitRequest, OffsetFetchRequest
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest
from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from broker.protocol.errors import ErrorCode

from .cluster import SimCluster
from .determinism import SimRandom
from .kafka import ConnectionLost, SimConnection

PRODUCE_V, FETCH_V, METADATA_V, COMMIT_V, OFFSET_FETCH_V, FIND_COORDINATOR_V, INIT_PRODUCER_ID_V = 9, 12, 12, 8, 8, 3, 4
MAX_IN_FLIGHT = 5  # per connection, as librdkafka's default for idempotence

Key = tuple[str, int]  # (topic, partition)


@dataclass
class Attempt:
    connection: str  # "<producer>#<connection number>"
    order: int  # position in that connection's sends to this partition
    outcome: str = "pending"  # acked | definite (refused: not appended) | ambiguous (may be appended)
    error: int = 0  # the error code answered, if any
    wire: str = ""  # how it was sent, when that varies between attempts (epoch and sequence)


@dataclass
class Sent:
    batch: str  # "<producer>/<seq>": the record's value, unique in the run
    key: Key
    attempts: list[Attempt] = field(default_factory=list)
    acked_offset: int | None = None  # the base offset the broker answered with
    idempotent: bool = False  # sent with a producer id and sequence: at most once, in sequence order
    sequence: int = -1
    must_land: bool = False  # the producer reported it delivered (offset or not): it must be in the log

    @property
    def may_be_appended(self) -> bool:
        return any(a.outcome in ("acked", "ambiguous", "pending") for a in self.attempts)


@dataclass
class Ledger:
    """What the clients were told, for the auditor."""

    sent: dict[str, Sent] = field(default_factory=dict)
    consumed: dict[Key, dict[int, str]] = field(default_factory=dict)  # offset -> batch read there
    committed: dict[tuple[str, str, int], int] = field(default_factory=dict)  # (group, topic, p) -> acked offset
    violations: list[str] = field(default_factory=list)

    def violation(self, text: str) -> None:
        self.violations.append(f"at {asyncio.get_running_loop().time():.3f} s: {text}")


class Metadata:
    """A client's view of leaders (for diskless topics: its AZ's representatives)."""

    def __init__(self, cluster: SimCluster, az: str, client_id: str, rng: SimRandom) -> None:
        self._cluster = cluster
        self._az = az
        self._client_id = client_id
        self._rng = rng
        self.leaders: dict[Key, int] = {}
        self.epochs: dict[Key, int] = {}

    async def refresh(self) -> bool:
        live = self._cluster.live()
        if not live:
            return False
        local = [b for b in live if b.az == self._az] or live
        target = local[self._rng.randrange(len(local))]
        try:
            conn = SimConnection(
                target, self._client_id, lambda: target.node_id in self._cluster.down, self._cluster.client_connections
            )
            response = await conn.request(
                MetadataRequest(
                    topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
                ),
                METADATA_V,
            )
            conn.close()
        except ConnectionLost:
            return False
        self.leaders = {
            (t.name, p.partition_index): p.leader_id
            for t in response.topics
            if t.error_code == 0
            for p in t.partitions
            if p.error_code == 0 and p.leader_id >= 0
        }
        self.epochs = {(t.name, p.partition_index): p.leader_epoch for t in response.topics for p in t.partitions}
        return True


class Connections:
    """One connection per broker, as a client keeps them; reopened after a failure."""

    def __init__(self, cluster: SimCluster, client_id: str) -> None:
        self._cluster = cluster
        self._client_id = client_id
        self._open: dict[int, SimConnection] = {}
        self.opened = 0

    def get(self, node_id: int) -> SimConnection:
        conn = self._open.get(node_id)
        if conn is None or conn.closed:
            target = self._cluster.brokers.get(node_id)
            if target is None:
                raise ConnectionLost(f"no broker {node_id}")
            conn = SimConnection(
                target, self._client_id, lambda: node_id in self._cluster.down, self._cluster.client_connections
            )
            self.opened += 1
            self._open[node_id] = conn
        return conn

    def close_all(self) -> None:
        for conn in self._open.values():
            conn.close()
        self._open.clear()


REFRESH_ERRORS = {
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
}


# Answers after which the batch may have been appended all the same (Kafka's producer
# treats them as retriable and may duplicate a non-idempotent batch); every other error says
# the batch was not appended.
AMBIGUOUS_ERRORS = {
    ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.UNKNOWN_SERVER_ERROR,
}
MAX_ATTEMPTS = 3


def make_batch(value: str, now_ms: int, producer_id: int = -1, sequence: int = -1, producer_epoch: int = 0) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=producer_id,
        producer_epoch=producer_epoch if producer_id >= 0 else -1,
        base_sequence=sequence,
        batch_size=1 << 20,
    )
    builder.append(0, timestamp=now_ms, key=None, value=value.encode(), headers=[])
    return bytes(builder.build())


def one_batch_produce(key: Key, records: bytes, transactional_id: str | None = None) -> ProduceRequest:
    """An acks=all Produce request holding one partition's records, as a client sends one
    partition per request (librdkafka with idempotence)."""
    return ProduceRequest(
        transactional_id=transactional_id,
        acks=-1,
        timeout_ms=30_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=key[0],
                partition_data=[ProduceRequest.TopicProduceData.PartitionProduceData(index=key[1], records=records)],
            )
        ],
    )


async def produce(
    cluster: SimCluster,
    ledger: Ledger,
    rng: SimRandom,
    name: str,
    az: str,
    partitions: list[Key],
    until_s: float,
    pause_s: tuple[float, float] = (0.001, 0.05),
) -> None:
    """Send batches until `until_s` (virtual): each request holds 1-3 partitions that one
    broker serves, classic and diskless mixed, pipelined up to MAX_IN_FLIGHT per connection;
    a failed batch is sent again (up to MAX_ATTEMPTS), as librdkafka retries."""
    loop = asyncio.get_running_loop()
    client_id = f"{name},shoal_az={az}"
    metadata = Metadata(cluster, az, client_id, rng.fork("metadata"))
    connections = Connections(cluster, client_id)
    in_flight: dict[int, list[asyncio.Task[bool]]] = {}
    orders: dict[tuple[str, Key], int] = {}
    retries: list[Sent] = []
    seq = 0
    stale = True
    while loop.time() < until_s:
        stale = stale or any(t.result() for tasks in in_flight.values() for t in tasks if t.done())
        in_flight = {n: [t for t in tasks if not t.done()] for n, tasks in in_flight.items()}
        if stale:
            stale = not await metadata.refresh()
            if stale:
                await asyncio.sleep(0.5)
                continue
        by_broker: dict[int, list[Key]] = {}
        for key in partitions:
            if key in metadata.leaders:
                by_broker.setdefault(metadata.leaders[key], []).append(key)
        if not by_broker:
            stale = True
            await asyncio.sleep(0.2)
            continue
        node_id = sorted(by_broker)[rng.randrange(len(by_broker))]
        candidates = by_broker[node_id]
        try:
            conn = connections.get(node_id)
        except ConnectionLost:
            stale = True
            await asyncio.sleep(0.2)
            continue
        if len(in_flight.get(node_id, [])) >= MAX_IN_FLIGHT:
            await asyncio.wait(in_flight[node_id][:1])
            continue
        batches: list[Sent] = []
        for key in sorted({candidates[rng.randrange(len(candidates))] for _ in range(1 + rng.randrange(3))}):
            retry = next((r for r in retries if r.key == key), None)
            if retry is not None:
                retries.remove(retry)
                batches.append(retry)
            else:
                seq += 1
                batches.append(ledger.sent.setdefault(f"{name}/{seq}", Sent(f"{name}/{seq}", key)))
        connection = f"{name}#{connections.opened}"
        topics: dict[str, list[Any]] = {}
        for sent in batches:
            order = orders[(connection, sent.key)] = orders.get((connection, sent.key), 0) + 1
            sent.attempts.append(Attempt(connection, order))
            topics.setdefault(sent.key[0], []).append(
                ProduceRequest.TopicProduceData.PartitionProduceData(
                    index=sent.key[1], records=make_batch(sent.batch, cluster.sim.clock.now_ms())
                )
            )
        request = ProduceRequest(
            transactional_id=None,
            acks=-1,
            timeout_ms=30_000,
            topic_data=[
                ProduceRequest.TopicProduceData(name=topic, partition_data=parts) for topic, parts in topics.items()
            ],
        )
        answer = conn.send(request, PRODUCE_V)
        _trace_sent(cluster, connection, node_id, batches)
        in_flight.setdefault(node_id, []).append(loop.create_task(_produced(cluster, answer, batches, retries)))
        await asyncio.sleep(rng.between(pause_s))
    connections.close_all()
    for tasks in in_flight.values():
        await asyncio.gather(*tasks, return_exceptions=True)
    for sent in ledger.sent.values():
        for attempt in sent.attempts:
            if attempt.outcome == "pending":
                attempt.outcome = "ambiguous"


async def produce_idempotent(
    cluster: SimCluster, ledger: Ledger, rng: SimRandom, name: str, az: str, partitions: list[Key], until_s: float
) -> None:
    """An idempotent producer (a producer id, a sequence per partition), one batch in flight
    per partition: a batch is retried with its sequence until it is acknowledged, so each
    must land exactly once, in sequence order, whatever the brokers go through."""
    loop = asyncio.get_running_loop()
    client_id = f"{name},shoal_az={az}"
    metadata = Metadata(cluster, az, client_id, rng.fork("metadata"))
    connections = Connections(cluster, client_id)
    producer_id = -1
    next_sequence = dict.fromkeys(partitions, 0)
    current: dict[Key, Sent] = {}  # the batch in flight or to retry, per partition
    in_flight: set[Key] = set()
    stale = True
    while loop.time() < until_s:
        if producer_id < 0:
            producer_id = await init_producer_id(cluster, connections, rng)
            if producer_id < 0:
                await asyncio.sleep(0.25)
                continue
        if stale:
            stale = not await metadata.refresh()
            if stale:
                await asyncio.sleep(0.25)
                continue
        idle = [key for key in partitions if key not in in_flight and key in metadata.leaders]
        if not idle:
            await asyncio.sleep(0.01)
            continue
        key = idle[rng.randrange(len(idle))]
        node_id = metadata.leaders[key]
        try:
            conn = connections.get(node_id)
        except ConnectionLost:
            stale = True
            await asyncio.sleep(0.2)
            continue
        sent = current.get(key)
        if sent is None:
            sequence = next_sequence[key]
            next_sequence[key] += 1
            sent = current[key] = ledger.sent.setdefault(
                f"{name}/{key[0]}-{key[1]}/{sequence}",
                Sent(f"{name}/{key[0]}-{key[1]}/{sequence}", key, idempotent=True, sequence=sequence),
            )
        sent.attempts.append(Attempt(f"{name}#{connections.opened}", len(sent.attempts) + 1))
        request = one_batch_produce(key, make_batch(sent.batch, cluster.sim.clock.now_ms(), producer_id, sent.sequence))
        in_flight.add(key)
        _trace_sent(cluster, sent.attempts[-1].connection, node_id, [sent])

        async def answered(key: Key, sent: Sent, answer: asyncio.Future[Any]) -> None:
            nonlocal stale
            try:
                refresh = await _produced(cluster, answer, [sent], [])
                stale = stale or refresh
                if sent.attempts[-1].outcome == "acked":
                    del current[key]
                elif sent.attempts[-1].error in (
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    ErrorCode.INVALID_PRODUCER_EPOCH,
                ):
                    ledger.violation(
                        f"{name}: {ErrorCode(sent.attempts[-1].error).name} for {sent.batch} "
                        "(its predecessors were all acknowledged)"
                    )
                    del current[key]  # a client would bump its epoch; the run goes on
            finally:
                in_flight.discard(key)

        loop.create_task(answered(key, sent, conn.send(request, PRODUCE_V)))
        await asyncio.sleep(rng.between((0.001, 0.03)))
    connections.close_all()
    while in_flight:
        await asyncio.sleep(0.1)


async def init_producer_id(cluster: SimCluster, connections: Connections, rng: SimRandom) -> int:
    live = cluster.live()
    if not live:
        return -1
    target = live[rng.randrange(len(live))]
    try:
        response = await connections.get(target.node_id).request(
            InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000), INIT_PRODUCER_ID_V
        )
    except ConnectionLost:
        return -1
    return response.producer_id if response.error_code == 0 else -1


def _trace_sent(cluster: SimCluster, connection: str, node_id: int, batches: list[Sent]) -> None:
    """Producers' requests in the trace, so a replay shows which batch went where, when."""
    sends = ", ".join(f"{s.batch} to {s.key[0]}-{s.key[1]} (attempt {len(s.attempts)})" for s in batches)
    cluster.sim.trace.record("client", "%s -> n%d: %s", connection, node_id, sends)


async def _produced(cluster: SimCluster, answer: asyncio.Future[Any], batches: list[Sent], retries: list[Sent]) -> bool:
    """Note each batch's outcome (and trace it); True when the metadata needs a refresh."""
    trace = cluster.sim.trace
    try:
        response = await asyncio.wait_for(answer, 35.0)
    except (ConnectionLost, TimeoutError) as exc:
        trace.record("client", "%s: no answer (%s)", ", ".join(s.batch for s in batches), type(exc).__name__)
        for sent in batches:  # unknown outcome: the batch may or may not be in the log
            sent.attempts[-1].outcome = "ambiguous"
            if len(sent.attempts) < MAX_ATTEMPTS:
                retries.append(sent)
        return True
    results = {(t.name, p.index): p for t in response.responses for p in t.partition_responses}
    for sent in batches:
        result = results[sent.key]
        if result.error_code == 0:
            trace.record("client", "%s acknowledged at offset %d", sent.batch, result.base_offset)
            sent.attempts[-1].outcome = "acked"
            sent.acked_offset = result.base_offset
            continue
        trace.record(
            "client", "%s refused: %s (%s)", sent.batch, ErrorCode(result.error_code).name, result.error_message
        )
        sent.attempts[-1].outcome = "ambiguous" if result.error_code in AMBIGUOUS_ERRORS else "definite"
        sent.attempts[-1].error = result.error_code
        if len(sent.attempts) < MAX_ATTEMPTS:
            retries.append(sent)
    return any(r.error_code in REFRESH_ERRORS for r in results.values())


async def consume(
    cluster: SimCluster, ledger: Ledger, rng: SimRandom, name: str, az: str, key: Key, until: Callable[[], bool]
) -> int:
    """Read one partition from offset 0 until `until()`; returns the next offset to read.
    OFFSET_OUT_OF_RANGE for an offset the leader holds is a violation (the client would
    reset its position: auto.offset.reset)."""
    client_id = f"{name},shoal_az={az}"
    metadata = Metadata(cluster, az, client_id, rng.fork("metadata"))
    connections = Connections(cluster, client_id)
    consumed = ledger.consumed.setdefault(key, {})
    position = 0
    stale = True
    loop = asyncio.get_running_loop()
    refresh_at = 0.0  # clients also refresh on a timer (metadata.max.age.ms): they move to brokers that came back
    while not until():
        if loop.time() >= refresh_at:
            stale, refresh_at = True, loop.time() + rng.between((1.0, 5.0))
        if stale or key not in metadata.leaders:
            stale = not await metadata.refresh() or key not in metadata.leaders
            if stale:
                await asyncio.sleep(0.25)
                continue
        node_id = metadata.leaders[key]
        request = fetch_request(key, position, az, isolation_level=0, max_wait_ms=500)
        try:
            response = await connections.get(node_id).request(request, FETCH_V)
        except ConnectionLost:
            stale = True
            await asyncio.sleep(0.1)
            continue
        part = response.responses[0].partitions[0]
        if part.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            leader = cluster.leader_broker(*key)
            if leader is not None:
                held = leader.replica_manager.partitions[key]  # its start counts tiered segments
                if held.log_start_offset <= position <= held.log.log_end_offset:
                    ledger.violation(
                        f"{name}: OFFSET_OUT_OF_RANGE from broker {node_id} for {key[0]}-{key[1]} "
                        f"offset {position}, which the leader holds [{held.log_start_offset}, "
                        f"{held.log.log_end_offset}]: the client would reset its offsets"
                    )
            stale = True
            await asyncio.sleep(0.5)
            continue
        if part.error_code:
            stale = stale or part.error_code in REFRESH_ERRORS
            await asyncio.sleep(0.1)
            continue
        for offset, batch in read_batches(part.records):
            if batch is None:  # a control batch (a remote-segment marker): skipped, as clients do
                position = offset + 1
                continue
            if offset != position:
                ledger.violation(
                    f"{name}: {key[0]}-{key[1]} batch at offset {offset} where {position} was next (offsets not dense)"
                )
            previous = consumed.setdefault(offset, batch)
            if previous != batch:
                ledger.violation(f"{name}: {key[0]}-{key[1]} offset {offset} read as {batch}, earlier as {previous}")
            position = offset + 1
    connections.close_all()
    return position


def read_batches(records: bytes | None) -> list[tuple[int, str | None]]:
    """(base offset, value) of each one-record batch in a Fetch answer (value None for a
    control batch)."""
    found = []
    position = 0
    data = records or b""
    while position + 12 <= len(data):
        size = int.from_bytes(data[position + 8 : position + 12], "big") + 12
        batch = DefaultRecordBatch(data[position : position + size])
        found.append((batch.base_offset, None if batch.is_control_batch else next(iter(batch)).value.decode()))
        position += size
    return found


async def commit_offsets(
    cluster: SimCluster, ledger: Ledger, rng: SimRandom, name: str, az: str, group: str, keys: list[Key], until_s: float
) -> None:
    """Commit ever larger offsets (OffsetCommit without a generation, as standalone consumers
    do) and fetch them back: a fetched offset below one already acknowledged is a rollback."""
    loop = asyncio.get_running_loop()
    client_id = f"{name},shoal_az={az}"
    connections = Connections(cluster, client_id)
    coordinator: int | None = None
    next_offset = dict.fromkeys(keys, 0)
    while loop.time() < until_s:
        if coordinator is None:
            coordinator = await _find_coordinator(cluster, connections, group, rng)
            if coordinator is None:
                await asyncio.sleep(0.25)
                continue
        try:
            conn = connections.get(coordinator)
            if rng.chance(0.6):
                key = keys[rng.randrange(len(keys))]
                offset = next_offset[key] = next_offset[key] + 1 + rng.randrange(5)
                response = await conn.request(
                    OffsetCommitRequest(
                        group_id=group,
                        generation_id_or_member_epoch=-1,
                        member_id="",
                        group_instance_id=None,
                        topics=[
                            OffsetCommitRequest.OffsetCommitRequestTopic(
                                name=key[0],
                                partitions=[
                                    OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                                        partition_index=key[1],
                                        committed_offset=offset,
                                        committed_leader_epoch=-1,
                                        committed_metadata="",
                                    )
                                ],
                            )
                        ],
                    ),
                    COMMIT_V,
                )
                error = response.topics[0].partitions[0].error_code
                if error == 0:
                    ledger.committed[(group, *key)] = offset
                elif error in REFRESH_ERRORS:
                    coordinator = None
            else:
                acked = {key: ledger.committed.get((group, *key)) for key in keys}  # before asking
                response = await conn.request(
                    OffsetFetchRequest(
                        groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id=group, topics=None)],
                        require_stable=False,
                    ),
                    OFFSET_FETCH_V,
                )
                answer = response.groups[0]
                if answer.error_code:
                    coordinator = None if answer.error_code in REFRESH_ERRORS else coordinator
                else:
                    fetched = {
                        (t.name, p.partition_index): p.committed_offset for t in answer.topics for p in t.partitions
                    }
                    for key, offset in acked.items():
                        if offset is not None and fetched.get(key, -1) < offset:
                            ledger.violation(
                                f"{name}: group {group} {key[0]}-{key[1]} fetched offset "
                                f"{fetched.get(key, -1)} below the acknowledged commit {offset}"
                            )
        except ConnectionLost:
            coordinator = None
        await asyncio.sleep(rng.between((0.01, 0.2)))
    connections.close_all()


async def _find_coordinator(cluster: SimCluster, connections: Connections, group: str, rng: SimRandom) -> int | None:
    live = cluster.live()
    if not live:
        return None
    target = live[rng.randrange(len(live))]
    try:
        response = await connections.get(target.node_id).request(
            FindCoordinatorRequest(key=group, key_type=0), FIND_COORDINATOR_V
        )
    except ConnectionLost:
        return None
    return response.node_id if response.error_code == 0 else None


def fetch_request(key: Key, position: int, az: str | None, *, isolation_level: int, max_wait_ms: int) -> Any:
    """A consumer's Fetch of one partition from `position` (FETCH_V), as the sim's readers send it."""
    partition = FetchRequest.FetchTopic.FetchPartition(
        partition=key[1],
        current_leader_epoch=-1,
        fetch_offset=position,
        last_fetched_epoch=-1,
        log_start_offset=-1,
        partition_max_bytes=256 << 10,
    )
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=isolation_level,
        session_id=0,
        session_epoch=-1,
        rack_id=az,
        forgotten_topics_data=[],
        topics=[FetchRequest.FetchTopic(topic=key[0], partitions=[partition])],
    )
