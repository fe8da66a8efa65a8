"""Transactional clients for cluster simulations: producers that run Kafka's whole
transactional protocol over `kafka.SimConnection`, a read_committed reader, and the ledger
of what each transaction's producer was told, for the `transactions` scenario's auditor.

A `TxnProducer` behaves like Kafka's transactional producer (TransactionManager, TV1):
FindCoordinator(key_type 1) -> InitProducerId(transactional id) -> per transaction
AddPartitionsToTxn -> transactional Produce batches (idempotent sequences per partition,
retried with the same sequence) -> sometimes AddOffsetsToTxn + TxnOffsetCommit to the
group's coordinator -> EndTxn(commit or abort). Retriable answers are retried as Kafka's
client does: CONCURRENT_TRANSACTIONS and COORDINATOR_LOAD_IN_PROGRESS after a backoff,
NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE / a lost connection after finding the coordinator
again, NOT_LEADER_OR_FOLLOWER and friends after a metadata refresh. A failed produce makes the
transaction abortable (it is aborted and the epoch bumped, KIP-360); PRODUCER_FENCED,
INVALID_PRODUCER_EPOCH or an EndTxn whose outcome stays unknown end the producer instance,
and a new one (InitProducerId without a producer id) aborts or completes what it left.

A `Takeover` runs two instances of one transactional id at once: the producer pauses at a
chosen point of its protocol (a GC pause, a host cut off: the application's orchestrator
takes it for dead), a successor instance starts (InitProducerId without a producer id, which
fences it), and the paused one resumes as a zombie that carries on as if nothing happened:
it produces, adds partitions, commits offsets, ends transactions, and asks for a KIP-360
epoch bump with the producer id and epoch it holds, as Kafka's producer does in
abortTransaction() after an abortable error and librdkafka does when its transaction needs a
bump. The first fencing answer stops it (a fenced application shuts down). Whatever it sends
once its successor's InitProducerId was answered is marked late; a late InitProducerId or
EndTxn(commit) answered NONE is a violation at once, and the auditor fails the run if
anything late becomes visible.

Each transaction is written down in a `TxnLedger`: every record it sent (values unique in the
run), which were acknowledged, the group offsets it committed, what EndTxn asked and what the
client knows of the outcome: "committed" or "aborted" only when EndTxn answered NONE.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

from kafka.protocol.consumer import OffsetFetchRequest
from kafka.protocol.metadata import FindCoordinatorRequest
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    TxnOffsetCommitRequest,
)
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from broker.protocol.errors import RETRIABLE, ErrorCode

from .cluster import SimCluster
from .determinism import SimRandom
from .kafka import ConnectionLost
from .workload import REFRESH_ERRORS, Connections, Key, Metadata, fetch_request, one_batch_produce

PRODUCE_V, FETCH_V, FIND_COORDINATOR_V, OFFSET_FETCH_V = 9, 12, 3, 8
INIT_PRODUCER_ID_V, ADD_PARTITIONS_V, ADD_OFFSETS_V, END_TXN_V, TXN_OFFSET_COMMIT_V = 4, 3, 3, 3, 2
GROUP_KEY, TXN_KEY = 0, 1
RETRY_BACKOFF_S = (0.05, 0.2)
COORDINATOR_DEADLINE_S = 60.0  # max.block.ms / transaction.timeout: how long a coordinator request is retried
DELIVERY_TIMEOUT_S = 30.0  # delivery.timeout.ms: how long a batch is retried
FENCED = {ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.INVALID_PRODUCER_ID_MAPPING}
COORDINATOR_MOVED = {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE}
COORDINATOR_BUSY = {ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}
SUCCESSOR_NUMBERS = 100_000  # a successor's transactions are numbered above its predecessor's


@dataclass
class Txn:
    name: str  # "<producer>/<number>": its records' values start with it
    number: int  # increases in the producer's order; the group offset it commits
    transactional_id: str
    producer_id: int
    epoch: int
    group: str
    records: dict[str, Key] = field(default_factory=dict)  # value -> partition, every record sent
    acked: set[str] = field(default_factory=set)
    offsets: dict[Key, int] = field(default_factory=dict)  # group offsets TxnOffsetCommit accepted
    intent: str | None = None  # "commit" | "abort": what EndTxn asked, None if it was never sent
    outcome: str = "unknown"  # "committed" | "aborted" when EndTxn answered NONE
    story: list[str] = field(default_factory=list)
    late: set[str] = field(default_factory=set)  # records first sent after this instance was fenced
    late_end: bool = False  # EndTxn first sent after this instance was fenced


@dataclass
class TxnLedger:
    txns: list[Txn] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    transactional_ids: set[str] = field(default_factory=set)
    groups: set[str] = field(default_factory=set)

    def violation(self, text: str) -> None:
        self.violations.append(f"at {asyncio.get_running_loop().time():.3f} s: {text}")


class Fenced(Exception):
    """This producer instance is done (fenced, or it gave up on a request of unknown outcome)."""


class Abortable(Exception):
    """The transaction must be aborted (a batch could not be delivered, offsets not committed)."""


PAUSE_POINTS = (
    "abort_then_bump",  # an abortable error: EndTxn(abort) answered, paused, then InitProducerId(its id, epoch)
    "bump",  # paused between transactions, then InitProducerId(its id, epoch) (librdkafka's epoch bump)
    "mid_transaction",  # paused after AddPartitionsToTxn, then produces, commits offsets, ends it
    "between_transactions",  # paused, then begins the next transaction
)


@dataclass(frozen=True)
class Takeover:
    """When and where a producer pauses while a successor instance takes its transactional id."""

    at_s: float  # from then on, the producer pauses at its next `where`
    where: str  # one of PAUSE_POINTS
    resume_s: float  # how long after its successor's InitProducerId was answered it resumes
    successor_start_s: float  # the successor's start-up between its InitProducerId and first transaction


class CoordinatorKiller:
    """kill -9 of a transaction coordinator while an EndTxn to it is in flight (then a
    restart), holding the fault schedule's gate so that one fault at a time hits the cluster."""

    def __init__(self, cluster: SimCluster, rng: SimRandom, gate: asyncio.Lock, probability: float) -> None:
        self._cluster = cluster
        self._rng = rng
        self._gate = gate
        self._probability = probability
        self._tasks: list[asyncio.Task[None]] = []
        self.active = True
        self.kills = 0

    def maybe_kill(self, node_id: int | None) -> None:
        if not self.active or node_id is None or self._gate.locked() or self._cluster.down:
            return
        if not self._rng.chance(self._probability):
            return
        delay = self._rng.between((0.0, 0.3))
        down_s = self._rng.between((0.5, 6.0))
        self._tasks.append(asyncio.get_running_loop().create_task(self._kill(node_id, delay, down_s)))

    async def _kill(self, node_id: int, delay: float, down_s: float) -> None:
        async with self._gate:
            await asyncio.sleep(delay)
            if self._cluster.down or not self._cluster.brokers[node_id].running:
                return
            self._cluster.sim.trace.record("scenario", "killing coordinator %d mid-EndTxn", node_id)
            self._cluster.crash(node_id)
            self.kills += 1
            await asyncio.sleep(down_s)
            self._cluster.start(node_id)

    async def finished(self) -> None:
        self.active = False
        await asyncio.gather(*self._tasks)


def transactional_batch(value: str, now_ms: int, producer_id: int, epoch: int, sequence: int) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=True,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        batch_size=1 << 20,
    )
    builder.append(0, timestamp=now_ms, key=None, value=value.encode(), headers=[])
    return bytes(builder.build())


class Clients:
    """A client's connections, metadata and coordinators."""

    def __init__(self, cluster: SimCluster, rng: SimRandom, client_id: str, az: str) -> None:
        self.cluster = cluster
        self.rng = rng
        self.metadata = Metadata(cluster, az, client_id, rng.fork("metadata"))
        self.connections = Connections(cluster, client_id)
        self.coordinators: dict[tuple[int, str], int] = {}

    async def find(self, key_type: int, key: str) -> int | None:
        found = self.coordinators.get((key_type, key))
        if found is not None:
            return found
        live = self.cluster.live()
        if not live:
            return None
        target = live[self.rng.randrange(len(live))]
        try:
            response = await self.connections.get(target.node_id).request(
                FindCoordinatorRequest(key=key, key_type=key_type), FIND_COORDINATOR_V
            )
        except ConnectionLost:
            return None
        if response.error_code != 0:
            return None
        self.coordinators[(key_type, key)] = response.node_id
        return int(response.node_id)

    async def ask(self, key_type: int, key: str, request: Any, version: int) -> Any | None:
        """Send `request` to the coordinator of `key`; None when there is none or the
        connection failed (the coordinator is looked up again next time)."""
        node = await self.find(key_type, key)
        if node is None:
            return None
        try:
            return await self.connections.get(node).request(request, version)
        except ConnectionLost:
            self.coordinators.pop((key_type, key), None)
            return None

    def moved(self, key_type: int, key: str) -> None:
        self.coordinators.pop((key_type, key), None)

    async def backoff(self) -> None:
        await asyncio.sleep(self.rng.between(RETRY_BACKOFF_S))


class TxnProducer:
    def __init__(
        self,
        cluster: SimCluster,
        ledger: TxnLedger,
        rng: SimRandom,
        name: str,
        az: str,
        keys: list[Key],
        transactional_id: str,
        timeout_ms: int,
        killer: CoordinatorKiller | None,
    ) -> None:
        self.cluster = cluster
        self.ledger = ledger
        self.rng = rng
        self.name = name
        self.az = az
        self.keys = keys
        self.tid = transactional_id
        self.timeout_ms = timeout_ms
        self.killer = killer
        self.clients = Clients(cluster, rng.fork("clients"), f"{name},shoal_az={az}", az)
        self.group = f"g-{name}"
        self.producer_id = -1
        self.epoch = -1
        self.sequences: dict[Key, int] = {}
        self.numbers = 0
        self.stale = True
        self.until_s = 0.0
        self.takeover: Takeover | None = None  # pending until this producer pauses for it
        self.zombie = False  # a successor took the transactional id while this one was paused
        self.fenced_at: float | None = None  # when the successor's InitProducerId was answered
        self.stopped = False  # a zombie stops at its first fencing answer
        self.on_initialized: Callable[[], None] | None = None  # told once, at the first InitProducerId answered
        self.start_delay_s = 0.0  # before the first transaction (a successor's start-up)
        self._successor: asyncio.Task[None] | None = None
        ledger.transactional_ids.add(transactional_id)

    def trace(self, text: str, *args: object) -> None:
        self.cluster.sim.trace.record(self.name, text, *args)

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    async def run(self, until_s: float) -> None:
        self.until_s = until_s
        while self.now() < until_s and not self.stopped:
            if self.producer_id < 0:
                await self.init(bump=False)
                if self.start_delay_s:
                    await asyncio.sleep(self.start_delay_s)
                    self.start_delay_s = 0.0
                continue
            if self._pauses_here("bump"):
                await self.pause()
                await self.init(bump=True)
                continue
            if self._pauses_here("between_transactions"):
                await self.pause()
            await self.one_transaction()
            await asyncio.sleep(self.rng.between((0.0, 0.3)))
        if self.producer_id < 0 and not self.stopped:  # a new instance aborts (or completes) what the last one left
            await self.init(bump=False)
        self.clients.connections.close_all()
        if self._successor is not None:
            await self._successor

    # -- two instances of one transactional id ----------------------------------------------
    def _pauses_here(self, where: str) -> bool:
        takeover = self.takeover
        return takeover is not None and takeover.where == where and self.now() >= takeover.at_s

    async def pause(self) -> None:
        """Stop here while a successor instance starts and takes the transactional id, then
        resume, a zombie, some time after the successor's InitProducerId was answered."""
        takeover = self.takeover
        assert takeover is not None
        self.takeover = None
        self.zombie = True
        self.ledger.counts[f"takeover_{takeover.where}"] += 1
        self.trace("pauses (%s): a successor takes transactional id %s", takeover.where, self.tid)
        successor = TxnProducer(
            self.cluster,
            self.ledger,
            self.rng.fork("successor"),
            f"{self.name}b",
            self.az,
            self.keys,
            self.tid,
            self.timeout_ms,
            self.killer,
        )
        successor.group = self.group  # the same application: its offsets continue this one's
        successor.numbers = self.numbers + SUCCESSOR_NUMBERS
        successor.start_delay_s = takeover.successor_start_s
        initialized = asyncio.Event()

        def fenced() -> None:
            self.fenced_at = self.now()
            initialized.set()

        successor.on_initialized = fenced
        self._successor = asyncio.get_running_loop().create_task(successor.run(self.until_s))
        await initialized.wait()
        await asyncio.sleep(takeover.resume_s)
        self.trace(
            "resumes with producer %d epoch %d, fenced since %.3f s", self.producer_id, self.epoch, self.fenced_at
        )

    def _stop(self, why: str) -> None:
        self.trace("zombie stops: %s", why)
        self.ledger.counts["zombie_stopped"] += 1
        self.stopped = True
        self.producer_id, self.epoch = -1, -1

    def _late(self) -> bool:
        return self.fenced_at is not None

    # -- producer id ---------------------------------------------------------------------------
    async def init(self, bump: bool) -> None:
        """InitProducerId until it succeeds; `bump`: KIP-360, the current id and epoch presented."""
        expected = (self.producer_id, self.epoch) if bump else (-1, -1)
        self.ledger.counts["init_bump" if bump else "init_new"] += 1
        deadline = self.now() + 10 * COORDINATOR_DEADLINE_S
        while self.now() < deadline:
            response = await self.clients.ask(
                TXN_KEY,
                self.tid,
                InitProducerIdRequest(
                    transactional_id=self.tid,
                    transaction_timeout_ms=self.timeout_ms,
                    producer_id=expected[0],
                    producer_epoch=expected[1],
                ),
                INIT_PRODUCER_ID_V,
            )
            code = ErrorCode.NETWORK_EXCEPTION if response is None else response.error_code
            if code == ErrorCode.NONE:
                self.producer_id, self.epoch = response.producer_id, response.producer_epoch
                self.sequences = {}
                self.trace("InitProducerId: producer %d epoch %d", self.producer_id, self.epoch)
                if self._late():
                    self.ledger.violation(
                        f"{self.name}, fenced by its successor at {self.fenced_at:.3f} s, was handed producer "
                        f"{self.producer_id} epoch {self.epoch} for InitProducerId with producer {expected[0]} "
                        f"epoch {expected[1]}"
                    )
                self._initialized()
                return
            if code in FENCED and self.zombie:
                self._stop(f"InitProducerId with producer {expected[0]} epoch {expected[1]}: {_name(code)}")
                return
            if code in FENCED and expected != (-1, -1):
                # KIP-360: a retry after a bump whose answer was lost presents the old epoch
                self.ledger.counts["init_bump_fenced"] += 1
                self.trace("InitProducerId with producer %d epoch %d: %s", *expected, ErrorCode(code).name)
                expected = (-1, -1)
                continue
            if code in COORDINATOR_MOVED:
                self.clients.moved(TXN_KEY, self.tid)
            elif code not in COORDINATOR_BUSY and code != ErrorCode.NETWORK_EXCEPTION:
                self.ledger.violation(f"{self.name}: InitProducerId answered {_name(code)}")
            await self.clients.backoff()
        self.ledger.violation(f"{self.name}: InitProducerId did not succeed in {10 * COORDINATOR_DEADLINE_S:.0f} s")
        self.producer_id = -1
        self._initialized()

    def _initialized(self) -> None:
        if self.on_initialized is not None:
            self.on_initialized()
            self.on_initialized = None

    def new_instance(self, txn: Txn, why: str) -> None:
        """The application closes this producer and starts another: its next InitProducerId
        carries no producer id (fencing this one)."""
        txn.story.append(why)
        if self.zombie:
            self._stop(f"{txn.name}: {why}")
            return
        self.trace("%s: %s; a new producer instance takes over", txn.name, why)
        self.ledger.counts["new_instances"] += 1
        self.producer_id, self.epoch = -1, -1
        self.clients.coordinators.clear()

    # -- one transaction -----------------------------------------------------------------------
    async def one_transaction(self) -> None:
        number = self.numbers
        self.numbers += 1
        txn = Txn(f"{self.name}/{number}", number, self.tid, self.producer_id, self.epoch, self.group)
        self.ledger.txns.append(txn)
        parts = self.rng.sample(self.keys, k=self.rng.randint(1, min(3, len(self.keys))))
        self.trace("%s begins (producer %d epoch %d) on %s", txn.name, self.producer_id, self.epoch, parts)
        abortable = False
        try:
            await self.add_partitions(txn, parts)
            if self._pauses_here("mid_transaction"):
                await self.pause()
            results = await asyncio.gather(
                *(self.produce(txn, key, self.rng.randint(1, 3)) for key in parts), return_exceptions=True
            )
            for result in results:
                if isinstance(result, Fenced):
                    raise result
                if isinstance(result, BaseException) and not isinstance(result, Abortable):
                    raise result
            abortable = any(isinstance(result, Abortable) for result in results)
            if self._pauses_here("abort_then_bump"):
                txn.story.append("an abortable error (simulated)")
                abortable = True
            if not abortable and self.rng.chance(0.4):
                await self.commit_offsets(txn)
            if self.rng.chance(0.05):  # the application dies before ending it
                self.new_instance(txn, "abandoned before EndTxn")
                return
        except Fenced as exc:
            self.new_instance(txn, str(exc))
            return
        except Abortable as exc:
            txn.story.append(str(exc))
            abortable = True
        commit = not abortable and self.rng.chance(0.65)
        if await self.end(txn, commit) and abortable:
            if self._pauses_here("abort_then_bump"):
                await self.pause()
            await self.init(bump=True)  # sequences may have gaps: a new epoch restarts them

    async def add_partitions(self, txn: Txn, parts: list[Key]) -> None:
        by_topic: dict[str, list[int]] = {}
        for topic, index in sorted(parts):
            by_topic.setdefault(topic, []).append(index)
        request = AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=self.tid,
            v3_and_below_producer_id=self.producer_id,
            v3_and_below_producer_epoch=self.epoch,
            v3_and_below_topics=[
                AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=name, partitions=indexes)
                for name, indexes in by_topic.items()
            ],
        )
        await self._coordinator_call(txn, "AddPartitionsToTxn", request, ADD_PARTITIONS_V, _add_partitions_code)

    async def _coordinator_call(self, txn: Txn, what: str, request: Any, version: int, code_of: Any) -> None:
        """A transaction-coordinator request retried until it succeeds; Fenced otherwise."""
        deadline = self.now() + COORDINATOR_DEADLINE_S
        while self.now() < deadline:
            response = await self.clients.ask(TXN_KEY, self.tid, request, version)
            code = ErrorCode.NETWORK_EXCEPTION if response is None else code_of(response)
            if code == ErrorCode.NONE:
                return
            self.trace("%s: %s", what, _name(code))
            if code in FENCED:
                raise Fenced(f"{what}: {_name(code)}")
            if code in COORDINATOR_MOVED:
                self.clients.moved(TXN_KEY, self.tid)
            elif code not in COORDINATOR_BUSY and code != ErrorCode.NETWORK_EXCEPTION:
                self.ledger.violation(f"{txn.name}: {what} answered {_name(code)}")
                raise Fenced(f"{what}: {_name(code)}")
            await self.clients.backoff()
        raise Fenced(f"{what} did not succeed in {COORDINATOR_DEADLINE_S:.0f} s")

    async def produce(self, txn: Txn, key: Key, count: int, first: int = 0) -> None:
        """`count` records of `txn` to `key`, numbered from `first` (unique in the transaction)."""
        for i in range(first, first + count):
            value = f"{txn.name}/{key[0]}-{key[1]}/{i}"
            sequence = self.sequences.get(key, 0)
            self.sequences[key] = sequence + 1
            txn.records[value] = key
            if self._late():
                txn.late.add(value)
            await self._send(txn, key, value, sequence)
            txn.acked.add(value)

    async def _send(self, txn: Txn, key: Key, value: str, sequence: int) -> None:
        """One batch, retried with its sequence until acknowledged (or Fenced/Abortable)."""
        metadata = self.clients.metadata
        deadline = self.now() + DELIVERY_TIMEOUT_S
        records = transactional_batch(value, self.cluster.sim.clock.now_ms(), self.producer_id, self.epoch, sequence)
        while self.now() < deadline:
            if self.stale or key not in metadata.leaders:
                self.stale = not await metadata.refresh()
                if self.stale or key not in metadata.leaders:
                    await self.clients.backoff()
                    continue
            request = one_batch_produce(key, records, self.tid)
            node_id = metadata.leaders[key]
            try:
                response = await self.clients.connections.get(node_id).request(request, PRODUCE_V)
            except ConnectionLost as exc:
                self.trace("Produce %s: %s", value, exc)
                self.stale = True
                await self.clients.backoff()
                continue
            code = response.responses[0].partition_responses[0].error_code
            if code != ErrorCode.NONE:
                self.trace("Produce %s to broker %d: %s", value, node_id, _name(code))
            if code == ErrorCode.NONE:
                return
            if code in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH):
                raise Fenced(f"Produce {value}: {_name(code)}")
            if code not in RETRIABLE:
                self.ledger.counts[f"produce_{_name(code)}"] += 1
                raise Abortable(f"Produce {value}: {_name(code)}")
            self.stale = self.stale or code in REFRESH_ERRORS
            await self.clients.backoff()
        raise Abortable(f"Produce {value}: not delivered in {DELIVERY_TIMEOUT_S:.0f} s")

    async def commit_offsets(self, txn: Txn) -> None:
        """AddOffsetsToTxn, then TxnOffsetCommit of offset `txn.number` for 1-2 partitions."""
        self.ledger.groups.add(self.group)
        await self._coordinator_call(
            txn,
            "AddOffsetsToTxn",
            AddOffsetsToTxnRequest(
                transactional_id=self.tid, producer_id=self.producer_id, producer_epoch=self.epoch, group_id=self.group
            ),
            ADD_OFFSETS_V,
            lambda r: r.error_code,
        )
        keys = self.rng.sample(self.keys, k=self.rng.randint(1, 2))
        by_topic: dict[str, list[int]] = {}
        for topic, index in sorted(keys):
            by_topic.setdefault(topic, []).append(index)
        topic_type = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
        request = TxnOffsetCommitRequest(
            transactional_id=self.tid,
            group_id=self.group,
            producer_id=self.producer_id,
            producer_epoch=self.epoch,
            topics=[
                topic_type(
                    name=name,
                    partitions=[
                        topic_type.TxnOffsetCommitRequestPartition(
                            partition_index=index,
                            committed_offset=txn.number,
                            committed_leader_epoch=-1,
                            committed_metadata="",
                        )
                        for index in indexes
                    ],
                )
                for name, indexes in by_topic.items()
            ],
        )
        deadline = self.now() + COORDINATOR_DEADLINE_S
        while self.now() < deadline:
            response = await self.clients.ask(GROUP_KEY, self.group, request, TXN_OFFSET_COMMIT_V)
            codes = (
                {ErrorCode.NETWORK_EXCEPTION}
                if response is None
                else {p.error_code for t in response.topics for p in t.partitions}
            )
            if codes == {ErrorCode.NONE}:
                for key in keys:
                    txn.offsets[key] = txn.number
                return
            if codes & FENCED:
                raise Fenced(f"TxnOffsetCommit: {sorted(_name(c) for c in codes)}")
            if codes & (COORDINATOR_MOVED | {ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT}):
                self.clients.moved(GROUP_KEY, self.group)
            elif not codes <= COORDINATOR_BUSY | {ErrorCode.NONE}:
                self.ledger.counts["txn_offset_commit_failed"] += 1
                raise Abortable(f"TxnOffsetCommit: {sorted(_name(c) for c in codes)}")
            await self.clients.backoff()
        raise Abortable(f"TxnOffsetCommit did not succeed in {COORDINATOR_DEADLINE_S:.0f} s")

    async def end(self, txn: Txn, commit: bool) -> bool:
        """EndTxn until it is answered NONE (True), or this instance gives up (False)."""
        txn.intent = "commit" if commit else "abort"
        txn.late_end = self._late()
        self.trace("%s: EndTxn(%s)", txn.name, txn.intent)
        request = EndTxnRequest(
            transactional_id=self.tid, producer_id=self.producer_id, producer_epoch=self.epoch, committed=commit
        )
        deadline = self.now() + COORDINATOR_DEADLINE_S
        first = True
        while self.now() < deadline:
            if first and self.killer is not None:
                self.killer.maybe_kill(self.clients.coordinators.get((TXN_KEY, self.tid)))
            first = False
            response = await self.clients.ask(TXN_KEY, self.tid, request, END_TXN_V)
            code = ErrorCode.NETWORK_EXCEPTION if response is None else response.error_code
            if code == ErrorCode.NONE:
                txn.outcome = "committed" if commit else "aborted"
                self.trace("%s %s", txn.name, txn.outcome)
                if commit and txn.late_end:
                    self.ledger.violation(
                        f"{txn.name}: {self.name}, fenced by its successor at {self.fenced_at:.3f} s, "
                        f"committed a transaction (producer {self.producer_id} epoch {self.epoch})"
                    )
                return True
            if code in FENCED:
                self.new_instance(txn, f"EndTxn: {_name(code)}")
                return False
            if code == ErrorCode.NETWORK_EXCEPTION and self.rng.chance(0.3):
                self.new_instance(txn, "EndTxn of unknown outcome given up")
                return False
            if code in COORDINATOR_MOVED:
                self.clients.moved(TXN_KEY, self.tid)
            elif code not in COORDINATOR_BUSY and code != ErrorCode.NETWORK_EXCEPTION:
                self.ledger.counts[f"end_txn_{_name(code)}"] += 1
                self.new_instance(txn, f"EndTxn: {_name(code)}")
                return False
            await self.clients.backoff()
        self.new_instance(txn, f"EndTxn not answered in {COORDINATOR_DEADLINE_S:.0f} s")
        return False


def _add_partitions_code(response: Any) -> int:
    codes = {p.partition_error_code for t in response.results_by_topic_v3_and_below for p in t.results_by_partition}
    for code in (*sorted(FENCED), *sorted(COORDINATOR_MOVED), *sorted(COORDINATOR_BUSY)):
        if code in codes:
            return code
    return codes.pop() if len(codes) == 1 else ErrorCode.UNKNOWN_SERVER_ERROR


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


# -- reading back ----------------------------------------------------------------------------------
@dataclass
class CommittedRead:
    records: list[tuple[int, str]]  # (offset, value) as a read_committed consumer returns them
    high_watermark: int
    last_stable_offset: int


async def read_committed(
    cluster: SimCluster,
    rng: SimRandom,
    az: str,
    key: Key,
    end_offset: int,
    deadline_s: float,
    node_id: int | None = None,
) -> CommittedRead:
    """Read one partition from offset 0 to `end_offset` (the leader's high watermark) with
    isolation_level READ_COMMITTED, through the Fetch path, and filter as Kafka's consumer
    does (`CompletedFetch`: a transactional batch of a producer inside one of the answer's
    aborted transactions is skipped until that producer's ABORT marker; control batches never
    show). The broker answering may be a replica whose high watermark lags the leader's a
    little: the reader goes on until its position and an answer's last stable offset reach
    `end_offset`; AssertionError if that does not happen by `deadline_s` (a hanging
    transaction). `node_id`: ask that broker (a replica of a diskless partition serves from
    its own log) rather than the one the client's metadata names."""
    clients = Clients(cluster, rng, f"reader,shoal_az={az}", az)
    loop = asyncio.get_running_loop()
    found: list[tuple[int, str]] = []
    position = 0
    stale = True
    last = (-1, -1)
    try:
        while loop.time() < deadline_s:
            if stale or key not in clients.metadata.leaders:
                stale = not await clients.metadata.refresh() or key not in clients.metadata.leaders
                if stale:
                    await asyncio.sleep(0.25)
                    continue
            request = fetch_request(key, position, az, isolation_level=1, max_wait_ms=100)
            try:
                target = clients.metadata.leaders[key] if node_id is None else node_id
                response = await clients.connections.get(target).request(request, FETCH_V)
            except ConnectionLost as exc:
                cluster.sim.trace.record("reader", "%s-%d at %d: %s", *key, position, exc)
                stale = True
                await asyncio.sleep(0.1)
                continue
            part = response.responses[0].partitions[0]
            if part.error_code:
                cluster.sim.trace.record("reader", "%s-%d at %d: %s", *key, position, _name(part.error_code))
                stale = True
                await asyncio.sleep(0.1)
                continue
            last = (part.high_watermark, part.last_stable_offset)
            position, records = _committed_records(part.records, part.aborted_transactions or [], position)
            found += records
            if position >= end_offset and part.last_stable_offset >= end_offset:
                return CommittedRead(found, part.high_watermark, part.last_stable_offset)
            if not records:
                await asyncio.sleep(0.1)
    finally:
        clients.connections.close_all()
    raise AssertionError(
        f"{key[0]}-{key[1]}: a read_committed reader did not reach the high watermark at position {position} "
        f"(high watermark, last stable offset: {last})"
    )


def _committed_records(data: bytes | None, aborted: list[Any], position: int) -> tuple[int, list[tuple[int, str]]]:
    queue = sorted((a.first_offset, a.producer_id) for a in aborted)
    aborting: set[int] = set()
    found: list[tuple[int, str]] = []
    data = data or b""
    at = 0
    while at + 12 <= len(data):
        size = int.from_bytes(data[at + 8 : at + 12], "big") + 12
        if at + size > len(data):
            break  # a partial batch at the end of the answer
        batch = DefaultRecordBatch(data[at : at + size])
        at += size
        last_offset = batch.base_offset + batch.last_offset_delta
        if last_offset < position:
            continue
        position = last_offset + 1
        if batch.producer_id >= 0:
            while queue and queue[0][0] <= last_offset:
                aborting.add(queue.pop(0)[1])
            if batch.is_control_batch:
                if next(iter(batch)).abort:  # a ControlRecord
                    aborting.discard(batch.producer_id)
                continue
            if batch.is_transactional and batch.producer_id in aborting:
                continue
        if batch.is_control_batch:
            continue
        for record in batch:
            found.append((record.offset, bytes(record.value).decode()))
    return position, found


async def fetch_stable_offsets(cluster: SimCluster, rng: SimRandom, group: str, deadline_s: float) -> dict[Key, int]:
    """OffsetFetch with require_stable (read_committed) of every partition of `group`;
    AssertionError if the answer stays UNSTABLE_OFFSET_COMMIT (or fails) until `deadline_s`."""
    clients = Clients(cluster, rng, "offsets-reader", "az1")
    loop = asyncio.get_running_loop()
    last: object = None
    try:
        while loop.time() < deadline_s:
            response = await clients.ask(
                GROUP_KEY,
                group,
                OffsetFetchRequest(
                    groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id=group, topics=None)],
                    require_stable=True,
                ),
                OFFSET_FETCH_V,
            )
            if response is None:
                await asyncio.sleep(0.25)
                continue
            answer = response.groups[0]
            codes = {answer.error_code} | {p.error_code for t in answer.topics for p in t.partitions}
            if codes == {ErrorCode.NONE}:
                return {
                    (t.name, p.partition_index): p.committed_offset
                    for t in answer.topics
                    for p in t.partitions
                    if p.committed_offset >= 0
                }
            last = sorted(_name(c) for c in codes)
            if codes & COORDINATOR_MOVED:
                clients.moved(GROUP_KEY, group)
            await asyncio.sleep(0.25)
    finally:
        clients.connections.close_all()
    raise AssertionError(f"group {group}: OffsetFetch(require_stable) kept answering {last}")
