"""The transaction coordinator (Kafka's TransactionCoordinator): transactional ids in the
internal classic topic `__transaction_state`, on the coordinator runtime (`broker/coordinator`).

A transactional id belongs to partition `partition_for(id)` (Kafka's `Utils.abs(id.hashCode) %
transaction.state.log.num.partitions`, the helper the group coordinator uses), and the broker
leading that partition coordinates it. Every state change is appended to the partition and
answered once replicated (append, replicate, then answer). EndTxn persists PrepareCommit or
PrepareAbort, answers, and then writes the COMMIT/ABORT markers to every partition of the
transaction through their leaders (WriteTxnMarkers: a call on this broker, forwarded over the
inter-broker RPC to others), retrying until each is written or its partition is gone, and
persists CompleteCommit/CompleteAbort. A new leader of the partition resumes the markers of
transactions it finds prepared. Ongoing transactions older than their timeout are aborted
with the epoch bumped (the producer is fenced) by a scan every
`transaction.abort.timed.out.transaction.cleanup.interval.ms`. With
`transaction.partition.verification.enable`, AddPartitionsToTxn is answered once the
partitions' leaders hold the producer epoch's permit to open a transaction (permits.py).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from kafka.protocol.producer import WriteTxnMarkersRequest

from ..coordinator.runtime import CoordinatorRuntime
from ..groups.offsets_records import OFFSETS_TOPIC
from ..partition_ids import TopicIdPartition
from ..protocol.errors import ApiError, ErrorCode
from . import metadata as txn_rules
from .metadata import TransactionMetadata, TxnState
from .permits import PermitGranter, SendPermits
from .records import TRANSACTION_TOPIC, partition_for
from .shard import TransactionShard, TxnShardContext

if TYPE_CHECKING:
    from ..clock import Clock
    from ..cluster.view import ClusterView
    from ..config import BrokerConfig
    from ..partition import Partition
    from ..producer_ids import ProducerIdAllocator
    from ..replica_manager import ReplicaManager
    from ..topics import TopicCatalog

log = logging.getLogger(__name__)

INTERNAL_TOPIC_CONFIGS = {"retention.ms": "-1", "max.message.bytes": "10485760", "diskless.enable": "false"}
MARKER_RETRY_MIN_S = 0.05
MARKER_RETRY_MAX_S = 1.0
WRITE_TXN_MARKERS_VERSION = 1
# Errors after which a partition's marker is given up: the partition is gone, or a newer
# producer epoch or coordinator already ended the transaction there (Kafka drops them too).
_MARKER_DONE = frozenset(
    {
        ErrorCode.NONE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.INVALID_PRODUCER_EPOCH,
        ErrorCode.TRANSACTION_COORDINATOR_FENCED,
    }
)

# What an append to __transaction_state that failed is answered with (Kafka's
# TransactionStateManager.appendTransactionToLog): the codes transactional clients retry.
_APPEND_ERRORS = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
}

# (leader node, request) -> response: the broker sends WriteTxnMarkers to a partition leader
SendMarkers = Callable[[int, Any], Awaitable[Any]]


class TransactionCoordinator:
    def __init__(
        self,
        config: "BrokerConfig",
        catalog: "TopicCatalog",
        view: "ClusterView",
        replicas: "ReplicaManager",
        clock: "Clock",
        producer_ids: "ProducerIdAllocator",
        assign_replicas: Callable[[range, int], dict[int, list[int]]],
        send_markers: SendMarkers,
        send_permits: SendPermits,
    ) -> None:
        self._config = config
        self._catalog = catalog
        self._view = view
        self._replicas = replicas
        self._clock = clock
        self._producer_ids = producer_ids
        self._assign_replicas = assign_replicas
        self._send_markers = send_markers
        self._num_partitions = config.transaction_state_log_num_partitions
        self._tasks: set[asyncio.Task[None]] = set()
        self._scans: list[asyncio.Task[None]] = []
        self._runtime: CoordinatorRuntime[TransactionShard] = CoordinatorRuntime(
            TRANSACTION_TOPIC,
            self._partition,
            self._new_shard,
            clock.now_ms,
            write_timeout_ms=config.offsets_commit_timeout_ms,
            compaction_min_records=config.offsets_topic_compaction_min_records,
        )
        self._permits = PermitGranter(catalog, view, clock, send_permits)
        self._verify = config.transaction_partition_verification_enable
        self._shard_context = TxnShardContext(self._runtime, self._leader_epoch, self._resume, self._grant_again)

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        topic = self._catalog.get(TRANSACTION_TOPIC)
        if topic is not None:
            self._num_partitions = topic.partitions
        self._catalog.subscribe(self._on_topic_change)
        self._replicas.on_role_changed(self._runtime.on_role_changed)
        self._view.on_partition_changed(self._on_partition_changed)
        for partition in list(self._replicas.partitions.values()):
            self._runtime.on_role_changed(partition)
        self._runtime.start()
        loop = asyncio.get_running_loop()
        config = self._config
        self._scans = [
            loop.create_task(
                self._every(config.transaction_abort_timed_out_transaction_cleanup_interval_ms, self.abort_timed_out)
            ),
            loop.create_task(
                self._every(config.transaction_remove_expired_transaction_cleanup_interval_ms, self.remove_expired)
            ),
        ]

    async def stop(self) -> None:
        tasks = [*self._tasks, *self._scans]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._permits.stop()
        await self._runtime.stop()

    async def ensure_topic(self) -> None:
        """Create __transaction_state if missing, on the first FindCoordinator for a
        transactional id, as Kafka does (clusters without transactions never hold it)."""
        if self._catalog.get(TRANSACTION_TOPIC) is not None:
            return
        live = sum(1 for b in self._view.brokers.values() if not b.stateless)
        factor = max(1, min(self._config.transaction_state_log_replication_factor, live))
        min_isr = max(1, min(self._config.transaction_state_log_min_isr, factor))
        prepared = self._catalog.prepare(
            TRANSACTION_TOPIC,
            self._num_partitions,
            {
                **INTERNAL_TOPIC_CONFIGS,
                "segment.bytes": str(self._config.transaction_state_log_segment_bytes),
                "min.insync.replicas": str(min_isr),
            },
        )
        prepared.internal = True
        try:
            await self._catalog.create(prepared, self._assign_replicas(range(prepared.partitions), factor))
        except ApiError as exc:  # another broker created it first
            if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise

    def coordinator_of(self, transactional_id: str) -> int:
        """The node leading the id's __transaction_state partition; -1 while it has none."""
        topic = self._catalog.get(TRANSACTION_TOPIC)
        if topic is None:
            return -1
        state = self._view.partitions.get(
            TopicIdPartition.of(topic.topic_id, partition_for(transactional_id, topic.partitions))
        )
        return state.record.leader if state is not None else -1

    # -- requests --------------------------------------------------------------------------
    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, expected: tuple[int, int] | None
    ) -> tuple[int, int]:
        """(producer id, epoch), or ApiError (CONCURRENT_TRANSACTIONS while an ongoing
        transaction of the previous epoch is being aborted: the client retries)."""
        if not transactional_id:
            raise ApiError(ErrorCode.INVALID_REQUEST, "the transactional id may not be empty")
        txn_rules.check_timeout(timeout_ms, self._config.transaction_max_timeout_ms)
        shard = self._shard_of(transactional_id)
        new_id = -1
        if txn_rules.needs_new_producer_id(shard.txns.get(transactional_id)):
            new_id = await self._producer_ids.next_id()
            shard = self._shard_of(transactional_id)  # leadership may have moved meanwhile
        current = shard.txns.get(transactional_id)
        if txn_rules.needs_new_producer_id(current) and new_id < 0:
            raise ApiError(ErrorCode.CONCURRENT_TRANSACTIONS, f"{transactional_id} changed meanwhile; retry")
        txn = txn_rules.init_producer_id(
            current,
            transactional_id,
            timeout_ms=timeout_ms,
            now_ms=self._clock.now_ms(),
            new_producer_id=new_id,
            expected=expected,
        )
        try:
            await self._persist(shard, txn)
        finally:
            if txn.state is TxnState.PREPARE_ABORT and self._still(shard, txn):  # appended, replicated or not
                log.info(
                    "%s: epoch %d fences producer %d, aborting its transaction",
                    transactional_id,
                    txn.producer_epoch,
                    txn.producer_id,
                )
                self._resume(shard, txn)
        if txn.state is TxnState.PREPARE_ABORT:
            raise ApiError(ErrorCode.CONCURRENT_TRANSACTIONS, f"{transactional_id}: aborting the ongoing transaction")
        return txn.producer_id, txn.producer_epoch

    async def add_partitions(
        self, transactional_id: str, producer_id: int, epoch: int, partitions: frozenset[tuple[str, int]]
    ) -> None:
        shard = self._shard_of(transactional_id)
        txn = txn_rules.add_partitions(
            shard.txns.get(transactional_id), transactional_id, producer_id, epoch, partitions, self._clock.now_ms()
        )
        if txn is not None:
            await self._persist(shard, txn)
        else:  # a retry: what its first attempt appended may not be replicated yet, answer as that write would
            await self._replicated(shard, self._partition(shard.index).log.log_end_offset, transactional_id)
        if self._verify:  # also for partitions added before: a retried request re-grants
            current = shard.txns[transactional_id]
            await self._permits.grant(current, partitions, lambda: self._wants_permits(shard, current))

    def verify_partitions(
        self, transactional_id: str, producer_id: int, epoch: int, partitions: frozenset[tuple[str, int]]
    ) -> dict[tuple[str, int], ErrorCode]:
        """AddPartitionsToTxn v4+ verify_only: which partitions the ongoing transaction holds."""
        shard = self._shard_of(transactional_id)
        return txn_rules.verify_partitions(
            shard.txns.get(transactional_id), transactional_id, producer_id, epoch, partitions
        )

    def _wants_permits(self, shard: TransactionShard, txn: TransactionMetadata) -> bool:
        """Whether `txn`'s producer epoch is still in the ongoing transaction it was granted for."""
        current = shard.txns.get(txn.transactional_id)
        return (
            shard.active
            and current is not None
            and current.state is TxnState.ONGOING
            and (current.producer_id, current.producer_epoch) == (txn.producer_id, txn.producer_epoch)
        )

    def _grant_again(self, shard: TransactionShard, txn: TransactionMetadata) -> None:
        """A new coordinator's ongoing transactions: their leaders may have lost the permits."""
        if self._verify:
            self._permits.grant_later(txn, txn.partitions, lambda: self._wants_permits(shard, txn))

    def _on_partition_changed(self, pid: TopicIdPartition, state: Any) -> None:
        """A partition's new leader holds no permits: grant those of its ongoing transactions."""
        if not self._verify or state is None or state.record.leader < 0:
            return
        topic = self._catalog.by_id(uuid.UUID(pid[0]))
        if topic is None:
            return
        part = (topic.name, pid[1])
        for shard in self._runtime.shards():
            for txn in shard.txns.values():
                if txn.state is TxnState.ONGOING and part in txn.partitions:
                    self._permits.grant_later(txn, [part], functools.partial(self._wants_permits, shard, txn))

    def offsets_partition(self, group_id: str) -> tuple[str, int]:
        """The __consumer_offsets partition of a group (AddOffsetsToTxn adds it)."""
        topic = self._catalog.get(OFFSETS_TOPIC)
        if topic is None:
            raise ApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{OFFSETS_TOPIC} does not exist yet")
        return OFFSETS_TOPIC, partition_for(group_id, topic.partitions)

    async def end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> None:
        shard = self._shard_of(transactional_id)
        txn = txn_rules.end_txn(
            shard.txns.get(transactional_id), transactional_id, producer_id, epoch, commit, self._clock.now_ms()
        )
        if txn is None:
            return
        try:
            await self._persist(shard, txn)
        finally:
            if self._still(shard, txn):  # appended: its markers follow once it is replicated, whatever the answer
                self._resume(shard, txn)

    def describe(self, transactional_id: str) -> TransactionMetadata | None:
        """DescribeTransactions: the id's latest state here (NOT_COORDINATOR if led elsewhere)."""
        return self._shard_of(transactional_id).txns.get(transactional_id)

    def transactions(self) -> list[TransactionMetadata]:
        """Every transactional id coordinated here (ListTransactions, the operator view)."""
        return [txn for shard in self._runtime.shards() for txn in shard.txns.values()]

    # -- writes ----------------------------------------------------------------------------
    async def _persist(self, shard: TransactionShard, txn: TransactionMetadata) -> None:
        try:
            end = shard.write(txn)
        except ApiError as exc:  # a client must get a coordinator error it retries, not the log's
            raise ApiError(_APPEND_ERRORS.get(exc.code, exc.code), str(exc)) from exc
        await self._replicated(shard, end, txn.transactional_id)

    async def _replicated(self, shard: TransactionShard, end: int, transactional_id: str) -> None:
        failure = await self._runtime.replicated(shard.index, end)
        if failure is not None:
            raise ApiError(
                ErrorCode.NOT_COORDINATOR
                if failure == ErrorCode.NOT_COORDINATOR
                else ErrorCode.COORDINATOR_NOT_AVAILABLE,
                f"{TRANSACTION_TOPIC}-{shard.index}: the state change of {transactional_id} was not replicated",
            )

    # -- markers ---------------------------------------------------------------------------
    def _resume(self, shard: TransactionShard, txn: TransactionMetadata) -> None:
        task = asyncio.get_running_loop().create_task(self._complete(shard, txn))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _complete(self, shard: TransactionShard, txn: TransactionMetadata) -> None:
        """Once the prepared transaction is replicated, write its markers, then persist its
        completion. Both are retried for as long as this shard holds `txn`: a Prepare*
        state whose write timed out (the ISR was slow) or whose completion could not be
        appended would otherwise hold the transactional id until the coordinator moved."""
        try:
            if not await self._until_replicated(shard, txn):
                return
            await self._write_markers(shard, txn)
            done = txn_rules.complete(txn, self._clock.now_ms())
            delay = MARKER_RETRY_MIN_S
            while self._still(shard, txn):
                try:
                    end = shard.write(done)
                except ApiError as exc:
                    log.info("%s: persisting %s failed (%s); retrying", txn.transactional_id, done.state.value, exc)
                    await self._clock.sleep(delay)
                    delay = min(delay * 2, MARKER_RETRY_MAX_S)
                    continue
                await self._runtime.replicated(shard.index, end)  # not in time: a new leader resumes it
                log.debug("%s: %s", txn.transactional_id, done.state.value)
                return
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s: completing the transaction failed", txn.transactional_id)

    async def _until_replicated(self, shard: TransactionShard, txn: TransactionMetadata) -> bool:
        """Wait until what the shard appended so far (`txn` included) is replicated: markers
        must not be written for a Prepare* state that a new leader could lose. False once
        the shard no longer holds `txn`."""
        end = self._partition(shard.index).log.log_end_offset
        delay = MARKER_RETRY_MIN_S
        while self._still(shard, txn):
            failure = await self._runtime.replicated(shard.index, end)
            if failure is None:
                return self._still(shard, txn)
            if failure == ErrorCode.NOT_COORDINATOR:
                return False
            await self._clock.sleep(delay)
            delay = min(delay * 2, MARKER_RETRY_MAX_S)
        return False

    def _still(self, shard: TransactionShard, txn: TransactionMetadata) -> bool:
        return shard.active and shard.txns.get(txn.transactional_id) is txn

    async def _write_markers(self, shard: TransactionShard, txn: TransactionMetadata) -> None:
        pending = set(txn.partitions)
        commit = txn.state is TxnState.PREPARE_COMMIT
        delay = MARKER_RETRY_MIN_S
        while pending and self._still(shard, txn):
            by_leader: dict[int, list[tuple[str, int]]] = {}
            for topic_name, index in sorted(pending):
                topic = self._catalog.get(topic_name)
                if topic is None or index >= topic.partitions:
                    pending.discard((topic_name, index))  # deleted: nothing to end there
                    continue
                state = self._view.partitions.get(TopicIdPartition.of(topic.topic_id, index))
                leader = state.record.leader if state is not None else -1
                if leader >= 0:
                    by_leader.setdefault(leader, []).append((topic_name, index))
            results = await asyncio.gather(
                *(self._send(node, txn, commit, shard.coordinator_epoch, parts) for node, parts in by_leader.items())
            )
            for written in results:
                pending -= written
            if pending:
                await self._clock.sleep(delay)
                delay = min(delay * 2, MARKER_RETRY_MAX_S)

    async def _send(
        self, node: int, txn: TransactionMetadata, commit: bool, coordinator_epoch: int, parts: list[tuple[str, int]]
    ) -> set[tuple[str, int]]:
        """Send one WriteTxnMarkers to `node`; the partitions that are done."""
        by_topic: dict[str, list[int]] = {}
        for topic_name, index in parts:
            by_topic.setdefault(topic_name, []).append(index)
        marker = WriteTxnMarkersRequest.WritableTxnMarker
        request = WriteTxnMarkersRequest(
            markers=[
                marker(
                    producer_id=txn.producer_id,
                    producer_epoch=txn.producer_epoch,
                    transaction_result=commit,
                    topics=[
                        marker.WritableTxnMarkerTopic(name=name, partition_indexes=indexes)
                        for name, indexes in by_topic.items()
                    ],
                    coordinator_epoch=coordinator_epoch,
                )
            ],
            version=WRITE_TXN_MARKERS_VERSION,
        )
        try:
            response = await self._send_markers(node, request)
        except Exception as exc:  # the leader is away: retried
            log.info("%s: WriteTxnMarkers to broker %d failed (%s); retrying", txn.transactional_id, node, exc)
            return set()
        done: set[tuple[str, int]] = set()
        for result in response.markers:
            for topic in result.topics:
                for partition in topic.partitions:
                    if partition.error_code in _MARKER_DONE:
                        done.add((topic.name, partition.partition_index))
                        if partition.error_code != ErrorCode.NONE:
                            log.info(
                                "%s: marker for %s-%d given up: error %d",
                                txn.transactional_id,
                                topic.name,
                                partition.partition_index,
                                partition.error_code,
                            )
        return done

    # -- timeouts and expiry ----------------------------------------------------------------
    async def _every(self, interval_ms: int, scan: Callable[[], Awaitable[int]]) -> None:
        while True:
            await self._clock.sleep(interval_ms / 1000)
            try:
                await scan()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("transaction coordinator scan %s failed", scan.__name__)

    async def remove_expired(self) -> int:
        """Forget transactional ids idle longer than `transactional.id.expiration.ms` (no
        transaction open or being ended), with a tombstone in `__transaction_state` (the next
        compaction drops the id altogether), as Kafka's `removeExpiredTransactionalIds`; how many.
        A producer that comes back later gets a new producer id."""
        now = self._clock.now_ms()
        expiration_ms = self._config.transactional_id_expiration_ms
        removed = 0
        for shard in self._runtime.shards():
            for txn in [t for t in shard.txns.values() if txn_rules.idle_expired(t, now, expiration_ms)]:
                log.info(
                    "%s: idle for %d ms (transactional.id.expiration.ms=%d); forgetting it and producer %d",
                    txn.transactional_id,
                    now - txn.last_update_ms,
                    expiration_ms,
                    txn.producer_id,
                )
                shard.remove(txn.transactional_id)
                removed += 1
        return removed

    async def abort_timed_out(self) -> int:
        """Abort every Ongoing transaction older than its timeout; how many."""
        now = self._clock.now_ms()
        aborted = 0
        for shard in self._runtime.shards():
            for txn in [t for t in shard.txns.values() if t.expired(now)]:
                fenced = txn_rules.abort_timed_out(txn, now)
                log.info(
                    "%s: transaction of producer %d epoch %d timed out after %d ms; aborting",
                    txn.transactional_id,
                    txn.producer_id,
                    txn.producer_epoch,
                    txn.timeout_ms,
                )
                shard.write(fenced)
                aborted += 1
                self._resume(shard, fenced)  # its markers once it is replicated
        return aborted

    # -- shards ----------------------------------------------------------------------------
    def _partition(self, index: int) -> "Partition":
        return self._replicas.get(TRANSACTION_TOPIC, index)

    def _leader_epoch(self, index: int) -> int:
        return self._partition(index).leader_epoch

    def _new_shard(self, index: int) -> TransactionShard:
        return TransactionShard(index, self._shard_context)

    def _shard_of(self, transactional_id: str) -> TransactionShard:
        if self._catalog.get(TRANSACTION_TOPIC) is None:
            raise ApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{TRANSACTION_TOPIC} does not exist yet")
        index = partition_for(transactional_id, self._num_partitions)
        shard = self._runtime.shard(index)
        if shard is None:
            raise ApiError(
                ErrorCode.NOT_COORDINATOR,
                f"this broker does not lead {TRANSACTION_TOPIC}-{index}, which holds transactional id {transactional_id!r}",
            )
        self._runtime.require_loaded_state_replicated(index)
        return shard

    async def _on_topic_change(self, name: str, topic: Any) -> None:
        if name == TRANSACTION_TOPIC and topic is not None:
            self._num_partitions = topic.partitions
