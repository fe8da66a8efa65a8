"""The WAL writer: one broker's shared buffer of diskless batches, in stages (STYLE 7).

    open buffer --seal--> upload (concurrent) --> commit (in seal order) --> answer producers

Produce requests for diskless partitions are validated by the handler and handed over with
`submit`, which appends their batches, unmodified, to the open buffer (a WalObjectBuilder
holding references, no copy) and returns one future per partition. The buffer is sealed when
it reaches `wal.buffer.max.bytes` (so objects are at least that big at full load, at most one
request's partition data more), `wal.linger.ms` after its first batch, or, once it holds
`wal.quiet.min.bytes`, when no batch arrived for `wal.quiet.ms` while no earlier object is
being uploaded or committed (its producers are then all waiting for answers, so lingering on
would only add latency; a busy pipeline means more input is on its way, and the size floor
keeps PUTs per GiB bounded), and uploaded as one WAL object with one PUT, however many partitions and producers are in it. Uploads of
successive objects overlap; their commits are sent strictly in seal order, so per-partition
(and per-producer) order is the arrival order. Offsets are assigned by the leader at commit.

Each slot (one partition of one produce request) is answered on its own as soon as its
leader applied the commit and its acks are satisfied, whatever the other partitions of the
object do: a slow partition or leader delays only the producers that wrote to it.

Failure: an object whose upload fails (after the store's retries) fails every slot in it with
KAFKA_STORAGE_ERROR (retriable) and commits nothing. A commit error fails only its partitions.
Either way, an idempotent producer's later batches of those partitions, in this object or in
later ones, are refused with the same error until it sends the failed batch again
(producers/barriers.py): nothing of a producer lands behind a gap. The same holds when a
slot's acknowledgement fails (acks=all not satisfied: the batch may be cut off with the
leader's tail).

A partition's leader can change while its earlier commits are unresolved. A Kafka client
then waits for its requests to the old leader before producing to the new one (librdkafka
drains the partition), since the new leader knows nothing of what the old one may still
refuse or lose. The writer does the same for idempotent batches: a slot whose partition has
unsettled slots (not yet acknowledged or failed) sent another way (`Committer.route`: the
leader, its epoch, the commit stream) fails at once with NOT_LEADER_OR_FOLLOWER and holds
back its producers' later batches; a slot settles, and is held against later ones, in the
one callback that answers it.

Backpressure (`wal.max.inflight.bytes`): a slot's bytes count from admission until its
commit is applied (or the object fails); a submit that would pass the bound waits in a FIFO queue (and seals the
open buffer so uploads make progress). Waiting requests are admitted, and their batches
appended, in arrival order, so queuing never reorders a producer's batches. Producers see
slower answers; their own in-flight limits stop them sending more.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import uuid
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import TYPE_CHECKING

from walfiles.format import WalObjectBuilder
from walfiles.keys import WalKey, WalKeyAllocator

from ..clock import Clock
from ..objectstore import ObjectWriter
from ..producers.barriers import DEFAULT_MAX_BARRIERS, SequenceBarriers, sequenced
from ..protocol.batch import BatchFormatError, parse_header, split_batches
from ..protocol.errors import ApiError, ErrorCode
from ..wire_errors import wire_error
from .commit import (
    COMMIT_VERSION,
    CommitBatch,
    CommitPartition,
    CommitRequest,
    CommitResult,
    Committer,
    PendingCommit,
    Representation,
    failed,
)

if TYPE_CHECKING:
    from ..metrics import BrokerMetrics
    from .cache import ObjectCache

log = logging.getLogger(__name__)

# Commit refusals about one batch of one producer, not about the partition: no barrier (the
# leader refuses that producer's later batches itself, as out of sequence).
_BATCH_ERRORS = frozenset(
    {
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
        ErrorCode.DUPLICATE_SEQUENCE_NUMBER,
        ErrorCode.INVALID_PRODUCER_EPOCH,
        ErrorCode.PRODUCER_FENCED,
        ErrorCode.INVALID_TXN_STATE,
        ErrorCode.INVALID_RECORD,
        ErrorCode.CORRUPT_MESSAGE,
    }
)

# Keys tried for one object when each already holds another object (`_upload`). One collision
# is already unexpected (keys carry the node id and a per-process random sequence start).
WAL_KEY_ATTEMPTS = 3


class WalKeyCollision(Exception):
    """Every key tried for one WAL object already held another object."""


@dataclass(slots=True)
class PartitionAppend:
    """One partition's validated batches of one produce request."""

    topic_id: uuid.UUID
    partition: int
    acks: int
    batches: list[tuple[memoryview, bytes]]  # (the batch as the producer sent it, the header to commit)
    mode_offset: int  # the partition's last mode marker known here on admission (CommitPartition)
    represented_by: Representation | None = None  # who took them, for which AZ, as of which view
    answer_within_ms: int = 0  # the request's timeout: how long a refusal may take to reach the client

    @property
    def size(self) -> int:
        return sum(len(batch) for batch, _head in self.batches)


@dataclass(slots=True)
class _Slot:
    part: CommitPartition
    future: asyncio.Future[CommitResult]
    size: int  # its batches' bytes, counted in flight until its commit is applied
    route: object  # where its commit would have gone when it was admitted (Committer.route)


@dataclass(slots=True)
class _OpenObject:
    builder: WalObjectBuilder
    slots: list[_Slot] = field(default_factory=list)
    linger: asyncio.TimerHandle | None = None
    quiet: asyncio.TimerHandle | None = None
    last_append: float = 0.0  # loop time of the latest admitted batch
    dispatched: asyncio.Future[None] | None = None  # done once its commit is sent (or it failed)


# (object id, partitions that reference it for good, partitions that may): the WAL file
# manager's cheap source of truth about uploaded objects (broker/walfiles/reporter.py RecentUploads)
OnCommitted = Callable[[str, list[tuple[uuid.UUID, int]], list[tuple[uuid.UUID, int]]], None]


@dataclass(slots=True)
class _Waiting:
    appends: list[PartitionAppend]
    futures: list[asyncio.Future[CommitResult]]
    size: int
    admitted: asyncio.Future[None] | None


class WalWriter:
    def __init__(
        self,
        store: ObjectWriter,
        keys: WalKeyAllocator,
        committer: Committer,
        cache: "ObjectCache | None",
        metrics: "BrokerMetrics",
        *,
        clock: Clock,
        buffer_max_bytes: int,
        linger_ms: int,
        max_inflight_bytes: int,
        quiet_ms: int = 0,
        quiet_min_bytes: int = 0,
        on_committed: OnCommitted | None = None,
        barriers: SequenceBarriers | None = None,
    ) -> None:
        self._store = store
        self._on_committed = on_committed
        self._reports: set[asyncio.Task[None]] = set()
        self._clock = clock  # times uploads and commits for the metrics
        self._barriers = (
            barriers if barriers is not None else SequenceBarriers(DEFAULT_MAX_BARRIERS, self._clock.monotonic)
        )
        self._keys = keys
        self._committer = committer
        self._cache = cache
        self._metrics = metrics
        self._buffer_max_bytes = buffer_max_bytes
        self._linger_s = linger_ms / 1000
        self._quiet_s = quiet_ms / 1000  # 0: never sealed for quiet
        self._quiet_min_bytes = quiet_min_bytes
        self._max_inflight_bytes = max_inflight_bytes
        self._open: _OpenObject | None = None
        self._inflight_bytes = 0
        self._waiting: collections.deque[_Waiting] = collections.deque()
        self._last_dispatched: asyncio.Future[None] | None = None
        self._ships: set[asyncio.Task[None]] = set()
        # (topic id, partition) -> route -> slots sent that way and not yet settled; bounded by
        # the slots in flight (wal.max.inflight.bytes), empty once they are answered
        self._unsettled: dict[tuple[uuid.UUID, int], dict[object, int]] = {}

    @property
    def inflight_bytes(self) -> int:
        return self._inflight_bytes

    def submit(
        self, appends: list[PartitionAppend], admitted: asyncio.Future[None] | None = None
    ) -> list[asyncio.Future[CommitResult]]:
        """Buffer the batches of one produce request; one future per partition, resolved with
        the leader's answer. Never reorders: a request queued by backpressure holds back
        every later one. `admitted` is resolved once the batches are in a buffer (at once,
        unless backpressure queues them): an acks=0 request waits for it, so that its
        connection, not this writer, holds what the object store cannot take yet."""
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in appends]
        size = sum(a.size for a in appends)
        if not self._waiting and (self._inflight_bytes == 0 or self._inflight_bytes + size <= self._max_inflight_bytes):
            self._admit(appends, futures, size, admitted)
        else:
            self._waiting.append(_Waiting(appends, futures, size, admitted))
            self._metrics.wal_backpressure_waits.inc()
            self._seal("backpressure")
        return futures

    async def close(self) -> None:
        """Seal what is buffered and wait until every object is committed or failed (requests
        waiting for backpressure are admitted as objects finish, and shipped too)."""
        while self._open is not None or self._ships:
            self._seal("shutdown")
            await asyncio.gather(*list(self._ships), return_exceptions=True)
        for report in list(self._reports):  # the manager reads those objects' indexes instead
            report.cancel()

    # -- stages ----------------------------------------------------------------------------
    def _admit(
        self,
        appends: list[PartitionAppend],
        futures: list[asyncio.Future[CommitResult]],
        size: int,
        admitted: asyncio.Future[None] | None,
    ) -> None:
        _done(admitted)
        self._inflight_bytes += size
        self._metrics.wal_inflight_bytes.set(self._inflight_bytes)
        loop = asyncio.get_running_loop()
        for append, future in zip(appends, futures):
            obj = self._open
            if obj is None:
                obj = self._open = _OpenObject(WalObjectBuilder())
                obj.linger = loop.call_later(self._linger_s, self._seal_on_linger, obj)
            obj.last_append = loop.time()
            commit_batches = []
            for batch, head in append.batches:
                where = obj.builder.append(append.topic_id, append.partition, batch)
                commit_batches.append(CommitBatch(head, where.offset, where.length))
            obj.slots.append(
                _Slot(
                    CommitPartition(
                        append.topic_id,
                        append.partition,
                        append.acks,
                        commit_batches,
                        append.mode_offset,
                        append.represented_by,
                        append.answer_within_ms,
                    ),
                    future,
                    append.size,
                    self._committer.route(append.topic_id, append.partition),
                )
            )
            if obj.builder.size >= self._buffer_max_bytes:
                self._seal("size")
            else:
                self._arm_quiet(obj)
        self._metrics.wal_buffer_bytes.set(self._open.builder.size if self._open else 0)

    def _seal_on_linger(self, obj: _OpenObject) -> None:
        if self._open is obj:
            self._seal("linger")

    def _arm_quiet(self, obj: _OpenObject | None) -> None:
        """One timer per buffer, pushed back to `wal.quiet.ms` after the latest batch when it
        fires early (rather than re-armed on every batch, a timer per request)."""
        if (
            obj is None
            or not self._quiet_s
            or obj.quiet is not None
            or self._ships
            or obj.builder.size < self._quiet_min_bytes
        ):
            return
        loop = asyncio.get_running_loop()
        obj.quiet = loop.call_later(max(0.0, obj.last_append + self._quiet_s - loop.time()), self._seal_on_quiet, obj)

    def _seal_on_quiet(self, obj: _OpenObject) -> None:
        obj.quiet = None
        if self._open is not obj or self._ships:
            return  # sealed meanwhile, or re-armed when the pipeline drains (_shipped)
        if asyncio.get_running_loop().time() - obj.last_append >= self._quiet_s - 1e-6:  # timers may fire a hair early
            self._seal("quiet")
        else:
            self._arm_quiet(obj)

    def _shipped(self, ship: asyncio.Task[None]) -> None:
        self._ships.discard(ship)
        if not self._ships:
            self._arm_quiet(self._open)

    def _seal(self, reason: str) -> None:
        obj = self._open
        if obj is None:
            return
        self._open = None
        for timer in (obj.linger, obj.quiet):
            if timer is not None:
                timer.cancel()
        self._metrics.wal_buffer_bytes.set(0)
        self._metrics.wal_seals.labels(reason).inc()
        loop = asyncio.get_running_loop()
        obj.dispatched = loop.create_future()
        ship = loop.create_task(self._ship(obj, self._keys.next(), self._last_dispatched))
        self._last_dispatched = obj.dispatched
        self._ships.add(ship)
        ship.add_done_callback(self._shipped)

    async def _ship(self, obj: _OpenObject, key: WalKey, previous: asyncio.Future[None] | None) -> None:
        """Upload, then commit once the previous object's commit is sent: one PUT, one commit
        per leader. Each slot is then answered on its own, as soon as its partition's commit
        is acknowledged, and its bytes stop counting in flight once the commit is applied:
        a slow partition or leader holds back only the producers that wrote to it."""
        metrics = self._metrics
        try:
            data = b"".join(obj.builder.buffers())
            metrics.wal_object_bytes.observe(len(data))
            started = self._clock.monotonic()
            try:
                key = await self._upload(key, data)
            except Exception as exc:  # ObjectStoreError after retries, or anything unexpected
                log.warning(
                    "WAL object %s (%d bytes, %d partitions) failed to upload: %s",
                    key.object_id,
                    len(data),
                    len(obj.slots),
                    exc,
                )
                metrics.wal_objects.labels("upload_failed").inc()
                self._fail(obj, wire_error(exc, "WAL object upload failed, nothing was committed"))
                if previous is not None:
                    await previous  # the next object's commit still waits for every earlier one's
                return
            metrics.wal_upload_seconds.observe(self._clock.monotonic() - started)
            if self._cache is not None:
                self._cache.put_object(key.object_id, data)
            if previous is not None:
                await previous  # commits go in seal order; never fails
            routes = self._hold_back(obj)
            if not obj.slots:
                return
            started = self._clock.monotonic()
            pending = self._committer.commit(
                CommitRequest(COMMIT_VERSION, key.object_id, [slot.part for slot in obj.slots])
            )
        except Exception as exc:
            log.exception("WAL object %s: commit failed", key.object_id)
            metrics.wal_objects.labels("commit_failed").inc()
            self._fail(obj, wire_error(exc, "WAL commit failed"))
            return
        finally:
            _done(obj.dispatched)
        for slot, route, outcome in zip(obj.slots, routes, pending):
            sent = self._unsettled.setdefault((slot.part.topic_id, slot.part.partition), {})
            sent[route] = sent.get(route, 0) + 1  # until _settle
            outcome.applied.add_done_callback(lambda _applied, slot=slot: self._release(slot.size))  # type: ignore[misc]  # lambda with a default
            outcome.acknowledged.add_done_callback(functools.partial(self._settle, slot, route, outcome))
        slots, obj.slots = obj.slots, []  # answered by the callbacks: nothing left for _fail
        applied = await asyncio.gather(*(outcome.applied for outcome in pending))
        if self._on_committed is not None:
            report = asyncio.get_running_loop().create_task(self._report(key.object_id, slots, pending, applied))
            self._reports.add(report)
            report.add_done_callback(self._reports.discard)
        metrics.wal_commit_seconds.observe(self._clock.monotonic() - started)
        metrics.wal_objects.labels("committed").inc()

    async def _report(
        self, object_id: str, slots: list[_Slot], pending: list[PendingCommit], applied: list[CommitResult]
    ) -> None:
        """Tell `on_committed` which partitions reference the object for good (committed:
        acks=all and replicated) and which may (appended but not known to be replicated, or
        the leader's answer was lost); those whose commit was refused reference nothing."""
        committed: list[tuple[uuid.UUID, int]] = []
        maybe: list[tuple[uuid.UUID, int]] = []
        for slot, outcome, result in zip(slots, pending, applied):
            where = (slot.part.topic_id, slot.part.partition)
            if result.error_code == 0 and slot.part.acks == -1:
                # shielded: close() cancels reports, which must not cancel the commit's own future
                acknowledged = await asyncio.shield(outcome.acknowledged)
                (committed if acknowledged.error_code == 0 else maybe).append(where)
            elif result.error_code == 0 or not outcome.outcome_known:
                maybe.append(where)
        assert self._on_committed is not None
        self._on_committed(object_id, committed, maybe)

    async def _upload(self, key: WalKey, data: bytes) -> WalKey:
        """PUT the object under a key no other object holds and return that key. The PUT is
        conditional, never an overwrite: another process with this node id, or this node
        before its clock stepped back, may have written the same key and committed batches in
        it. A taken key is replaced by a fresh one from the allocator, up to WAL_KEY_ATTEMPTS
        keys; then WalKeyCollision (the object fails like any upload failure)."""
        for attempt in range(1, WAL_KEY_ATTEMPTS + 1):
            if await self._store.put_if_absent(key.format(), data):
                return key
            self._metrics.wal_key_collisions.inc()
            if attempt == WAL_KEY_ATTEMPTS:
                raise WalKeyCollision(
                    f"{WAL_KEY_ATTEMPTS} keys in a row, the last {key.format()}, already held "
                    "other objects (none was overwritten)"
                )
            fresh = self._keys.next()
            log.warning(
                "WAL object key %s already holds another object (another broker process with node "
                "id %d, or a clock stepped back?): not overwritten, uploading as %s instead",
                key.format(),
                key.node_id,
                fresh.format(),
            )
            key = fresh
        raise AssertionError("unreachable")

    def refused(
        self, topic_id: uuid.UUID, partition: int, records: memoryview, error: ErrorCode, answer_within_s: float = 0.0
    ) -> None:
        """The produce handler refused these batches before submitting them (this broker is
        not the partition's representative for the client's AZ, as of now): if the view
        changes under the client's pipelined requests, its next batches must not land here
        ahead of the refused ones (producers/barriers.py)."""
        try:
            for _pos, header in split_batches(records):
                self._barriers.failed((topic_id, partition), header, error, answer_within_s=answer_within_s)
        except BatchFormatError:
            return  # nothing sequenced can be told apart in a malformed request
        self._metrics.producer_sequence_barriers.labels("representative").set(len(self._barriers))

    def _bar(self, slot: _Slot, error: ErrorCode, route: object = None) -> None:
        """The slot did not reach the log (or, sent `route`, may have: only batches sent
        another way are held back): hold back its producers' later batches."""
        where = (slot.part.topic_id, slot.part.partition)
        for batch in slot.part.batches:
            self._barriers.failed(
                where, parse_header(batch.header), error, route, answer_within_s=slot.part.answer_within_ms / 1000
            )
        self._metrics.producer_sequence_barriers.labels("representative").set(len(self._barriers))

    def _hold_back(self, obj: _OpenObject) -> list[object]:
        """Fail the slots whose producer has an earlier batch of the partition that failed
        and was not sent again yet (producers/barriers.py), with that batch's error, the
        idempotent slots whose partition has unsettled slots sent another way, and the plain
        slots whose route changed since they were admitted. Returns the route of each slot
        kept."""
        kept, routes = [], []
        barred = bool(self._barriers)
        for slot in obj.slots:
            where = (slot.part.topic_id, slot.part.partition)
            route = self._committer.route(*where)
            refusal = None
            if self._barriers:  # the usual case: none, and no header to look at
                barrier = None
                for batch in slot.part.batches:
                    barrier = barrier or self._barriers.check(where, parse_header(batch.header), route)
                if barrier is not None:
                    refusal = ApiError(
                        barrier.error,
                        f"an earlier batch of this producer (sequence {barrier.first_sequence}) failed: retry it first",
                    )
            sent = self._unsettled.get(where)
            if refusal is None and sent and any(r != route for r in sent) and _sequenced(slot):
                refusal = ApiError(
                    ErrorCode.NOT_LEADER_OR_FOLLOWER,
                    "the partition's leader changed while earlier batches sent to the previous one are unresolved",
                )
                self._bar(slot, refusal.code)
            if refusal is None and route != slot.route and not _sequenced(slot):
                # A plain producer's later batches may already be in the log by the new route
                # (its client moved with the leader while this object uploaded): committed
                # now, this one would land after them. Kafka's leader fails a request it did
                # not append before losing leadership; so does this representative. Sequenced
                # batches need not: the leader's sequence check keeps them in order.
                refusal = ApiError(
                    ErrorCode.NOT_LEADER_OR_FOLLOWER,
                    "the partition's leader changed while its WAL object was uploading",
                )
            if refusal is None:
                kept.append(slot)
                routes.append(route)
                continue
            self._metrics.produce_barrier_refusals.inc()
            slot.future.set_result(failed(refusal))
            self._release(slot.size)
        obj.slots = kept
        if barred or self._barriers:
            self._metrics.producer_sequence_barriers.labels("representative").set(len(self._barriers))
        return routes

    def _settle(
        self, slot: _Slot, route: object, outcome: PendingCommit, acknowledged: asyncio.Future[CommitResult]
    ) -> None:
        """The slot's outcome is known: answer it, hold its producers' later batches back if it
        failed (only those sent another way if it may be in the log after all), or lift what
        its success makes moot, and only then stop counting it as unsettled (all in one
        callback, so that no later batch slips through in between)."""
        where = (slot.part.topic_id, slot.part.partition)
        result = _answer(slot, acknowledged)
        if result.error_code and result.error_code not in _BATCH_ERRORS:
            applied = outcome.applied.result()
            maybe_in_log = not outcome.outcome_known or not applied.error_code
            self._bar(slot, ErrorCode(result.error_code), route if maybe_in_log else None)
        elif not result.error_code and self._barriers:  # the usual case: none, and no header to look at
            for batch in slot.part.batches:
                self._barriers.acknowledged(where, parse_header(batch.header))
            self._metrics.producer_sequence_barriers.labels("representative").set(len(self._barriers))
        sent = self._unsettled[where]
        sent[route] -= 1
        if not sent[route]:
            del sent[route]
            if not sent:
                del self._unsettled[where]

    def _fail(self, obj: _OpenObject, error: ApiError) -> None:
        """Nothing of the object was committed: answer every slot, free its bytes."""
        for slot in obj.slots:
            self._bar(slot, error.code)
            if not slot.future.done():
                slot.future.set_result(failed(error))
            self._release(slot.size)
        obj.slots = []

    def _release(self, size: int) -> None:
        self._inflight_bytes -= size
        while self._waiting and (
            self._inflight_bytes == 0 or self._inflight_bytes + self._waiting[0].size <= self._max_inflight_bytes
        ):
            waiting = self._waiting.popleft()
            self._admit(waiting.appends, waiting.futures, waiting.size, waiting.admitted)
        self._metrics.wal_inflight_bytes.set(self._inflight_bytes)


def _answer(slot: _Slot, acknowledged: asyncio.Future[CommitResult]) -> CommitResult:
    if acknowledged.cancelled() or acknowledged.exception() is not None:
        result = failed(ApiError(ErrorCode.UNKNOWN_SERVER_ERROR, "the commit's outcome was lost"))
    else:
        result = acknowledged.result()
    if not slot.future.done():
        slot.future.set_result(result)
    return result


def _sequenced(slot: _Slot) -> bool:
    """Some batch of the slot has a producer id and a sequence (idempotent or transactional)."""
    return any(sequenced(parse_header(batch.header)) for batch in slot.part.batches)


def _done(future: asyncio.Future[None] | None) -> None:
    if future is not None and not future.done():
        future.set_result(None)
