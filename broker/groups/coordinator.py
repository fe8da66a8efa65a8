"""The group coordinator: consumer groups and their committed offsets, durable in the
internal classic topic `__consumer_offsets`, on the coordinator runtime (`broker/coordinator`).

A group belongs to partition `partition_for(group_id)` of that topic, and the broker that
leads the partition coordinates it. The runtime loads a `shard.GroupShard` per partition
this broker leads (groups, offsets, the `ClassicGroup` drivers), writes through it
(append, replicate, then expose: a commit is answered, and visible to OffsetFetch, only
once the partition's ISR holds it), compacts the partition by re-append, fires the groups'
timers and unloads the shard when leadership moves. This facade is what the handlers call:
it finds the group's shard, turns requests into shard calls and waits for replication; it
also creates `__consumer_offsets`, expires offsets (`offsets.retention.minutes`, KIP-211)
and drops offsets of deleted topics.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Callable, Iterable

from ..coordinator.runtime import CoordinatorRuntime
from ..partition_ids import TopicIdPartition
from ..protocol.errors import ApiError, ErrorCode
from . import offsets_records
from .membership import ClassicGroup, GroupState
from .membership_config import GroupConfig
from .results import GroupDescription, JoinResult, LeaveResult, SyncResult
from .consumer_protocol import subscribed_topics
from .offsets import OffsetChange, OffsetValue
from .shard import GroupShard, GroupShardContext

if TYPE_CHECKING:
    import uuid

    from ..clock import Clock
    from ..cluster.view import ClusterView
    from ..config import BrokerConfig
    from ..metrics import BrokerMetrics
    from ..partition import Partition
    from ..replica_manager import ReplicaManager
    from ..topics import Topic, TopicCatalog

log = logging.getLogger(__name__)

INTERNAL_TOPIC_CONFIGS = {"retention.ms": "-1", "max.message.bytes": "10485760", "diskless.enable": "false"}


# A refused transactional offset append, as TxnOffsetCommit answers it: a fenced epoch, and
# a transaction the coordinator has not (or no longer) granted here (producers/state.py
# rule 17: AddOffsetsToTxn first; a late commit after the ABORT marker), which clients
# retry, then abort their transaction at their timeout.
_TXN_OFFSET_APPEND_ERRORS = {
    ErrorCode.INVALID_PRODUCER_EPOCH: ErrorCode.PRODUCER_FENCED,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
}


class GroupCoordinator:
    def __init__(
        self,
        config: "BrokerConfig",
        catalog: "TopicCatalog",
        view: "ClusterView",
        replicas: "ReplicaManager",
        clock: "Clock",
        metrics: "BrokerMetrics",
        assign_replicas: Callable[[range, int], dict[int, list[int]]],
        new_uuid: Callable[[], "uuid.UUID"],
    ) -> None:
        """`assign_replicas(partitions, replication factor)` places the offsets topic's replicas."""
        self._config = config
        self._catalog = catalog
        self._view = view
        self._replicas = replicas
        self._clock = clock
        self._assign_replicas = assign_replicas
        self._num_partitions = config.offsets_topic_num_partitions
        self._group_config = GroupConfig(
            initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
            min_session_timeout_ms=config.group_min_session_timeout_ms,
            max_session_timeout_ms=config.group_max_session_timeout_ms,
            max_size=config.group_max_size,
        )
        self._new_uuid = lambda: str(new_uuid())  # member ids
        self._metrics = metrics
        self._tasks: list[asyncio.Task[None]] = []
        self._runtime: CoordinatorRuntime[GroupShard] = CoordinatorRuntime(
            offsets_records.OFFSETS_TOPIC,
            self._partition,
            self._new_shard,
            self._now,
            write_timeout_ms=config.offsets_commit_timeout_ms,
            compaction_min_records=config.offsets_topic_compaction_min_records,
            verify_txn=config.transaction_partition_verification_enable,
        )
        self._shard_context = GroupShardContext(
            self._runtime,
            self._group_config,
            self._now,
            self._clock.monotonic_ms,
            self._new_uuid,
            self._metrics,
            self._count_groups,
        )

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        catalog = self._catalog
        live = sum(1 for b in self._view.brokers.values() if not b.stateless)
        if live >= self._config.offsets_topic_replication_factor or self._config.metadata == "local:":
            await self.ensure_offsets_topic()
        topic = catalog.get(offsets_records.OFFSETS_TOPIC)
        if topic is not None:
            self._num_partitions = topic.partitions
        catalog.subscribe(self._on_topic_change)
        self._replicas.on_role_changed(self._on_role_changed)
        for partition in list(self._replicas.partitions.values()):
            self._on_role_changed(partition)
        self._runtime.start()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._run_retention())]
        log.info(
            "group coordinator loaded %d groups and %d committed offsets",
            self._count_groups(),
            sum(1 for shard in self._runtime.shards() for _ in shard.offsets.latest.items()),
        )

    async def ensure_offsets_topic(self) -> None:
        """Create __consumer_offsets if missing: at start when enough brokers are up for its
        replication factor, else on the first FindCoordinator, as Kafka does."""
        catalog = self._catalog
        if catalog.get(offsets_records.OFFSETS_TOPIC) is not None:
            return
        prepared = catalog.prepare(
            offsets_records.OFFSETS_TOPIC,
            self._num_partitions,
            {**INTERNAL_TOPIC_CONFIGS, "segment.bytes": str(self._config.offsets_topic_segment_bytes)},
        )
        prepared.internal = True
        live = sum(1 for b in self._view.brokers.values() if not b.stateless)
        factor = min(self._config.offsets_topic_replication_factor, live)
        try:
            await catalog.create(prepared, self._assign_replicas(range(prepared.partitions), factor))
        except ApiError as exc:  # another broker created it first
            if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._runtime.stop()

    # -- membership ------------------------------------------------------------------------
    async def join(self, group_id: str, **kwargs: Any) -> JoinResult:
        shard = self._membership_shard_of(group_id)
        group = shard.groups.get(group_id)
        if group is None:
            group = shard.new_group(group_id)
        shard.note_join(group_id)
        return await shard.call(group, lambda: group.join(self._now(), **kwargs))

    async def sync(self, group_id: str, **kwargs: Any) -> SyncResult:
        shard = self._membership_shard_of(group_id)
        group = shard.groups.get(group_id)
        if group is None:
            return SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        return await shard.call(group, lambda: group.sync(self._now(), **kwargs))

    async def heartbeat(self, group_id: str, **kwargs: Any) -> int:
        shard = self._membership_shard_of(group_id)
        group = shard.groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return await shard.call(group, lambda: group.heartbeat(self._now(), **kwargs))

    async def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> LeaveResult:
        shard = self._membership_shard_of(group_id)
        group = shard.groups.get(group_id)
        if group is None:
            return LeaveResult(ErrorCode.NONE, tuple(ErrorCode.UNKNOWN_MEMBER_ID for _ in members))
        return await shard.call(group, lambda: group.leave(self._now(), members))

    # -- offsets ---------------------------------------------------------------------------
    async def commit_offsets(
        self,
        group_id: str,
        *,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        api_version: int,
        offsets: list[tuple["Topic | None", str, int, int, int, str | None, int]],
    ) -> list[int]:
        """offsets: (topic or None if unknown, name, partition, offset, leader_epoch, metadata,
        expire_timestamp_ms). Returns one error code per entry, in order."""
        shard = self._shard_of(group_id)
        group = shard.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                code = ErrorCode.GROUP_ID_NOT_FOUND if api_version >= 9 else ErrorCode.ILLEGAL_GENERATION
                return [code] * len(offsets)
            group = shard.new_group(group_id)
        error = await shard.call(
            group,
            lambda: group.validate_offset_commit(
                self._now(), member_id=member_id, group_instance_id=group_instance_id, generation_id=generation_id
            ),
        )
        if error != ErrorCode.NONE:
            return [error] * len(offsets)
        codes, changes = self._offset_writes(group_id, offsets)
        if changes:
            end = shard.append(offsets_records.offset_records(changes), changes)
            self._metrics.offset_commits.inc(len(changes))
            failure = await self._runtime.replicated(shard.index, end)
            if failure is not None:
                return [failure if c == ErrorCode.NONE else c for c in codes]
        return codes

    def _offset_writes(
        self, group_id: str, offsets: list[tuple["Topic | None", str, int, int, int, str | None, int]]
    ) -> tuple[list[int], list[OffsetChange]]:
        """One error code per entry (unknown partition, metadata too large, or none) and the
        offsets the valid ones set: (topic, name, partition, offset, leader_epoch, metadata,
        expire_timestamp_ms). A null metadata is stored as "", as Kafka does."""
        now = self._now()
        codes: list[int] = []
        changes: list[OffsetChange] = []
        limit = self._config.offset_metadata_max_bytes
        for topic, name, partition, offset, epoch, metadata, expire_ms in offsets:
            if topic is None or not 0 <= partition < topic.partitions:
                codes.append(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            elif metadata is not None and len(metadata.encode()) > limit:
                codes.append(ErrorCode.OFFSET_METADATA_TOO_LARGE)
            else:
                codes.append(ErrorCode.NONE)
                changes.append((group_id, name, partition, OffsetValue(offset, epoch, metadata or "", now, expire_ms)))
        return codes, changes

    async def txn_commit_offsets(
        self,
        group_id: str,
        *,
        producer_id: int,
        producer_epoch: int,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: list[tuple["Topic | None", str, int, int, int, str | None]],
    ) -> list[int]:
        """TxnOffsetCommit: offsets (topic or None, name, partition, offset, leader_epoch,
        metadata) written as a transactional batch of the producer; they become committed
        only when the transaction's COMMIT marker reaches this partition (`on_txn_marker`).
        One error code per entry, in order."""
        shard = self._shard_of(group_id)
        group = shard.groups.get(group_id)
        if group is not None:
            error = await shard.call(
                group,
                lambda: group.validate_offset_commit(
                    self._now(),
                    member_id=member_id,
                    group_instance_id=group_instance_id,
                    generation_id=generation_id,
                    is_transactional=True,
                ),
            )
            if error != ErrorCode.NONE:
                return [error] * len(offsets)
        elif generation_id >= 0:
            return [ErrorCode.ILLEGAL_GENERATION] * len(offsets)
        codes, changes = self._offset_writes(group_id, [(*o, -1) for o in offsets])
        if not changes:
            return codes
        # The partition checks the producer's epoch and sequence like any producer's batch:
        # continue the producer's sequence here (0 for a new epoch), as Kafka's coordinator
        # writes with its own producer state
        entry = self._partition(shard.index).producers.entry(producer_id)
        sequence = 0
        if entry is not None and entry.producer_epoch == producer_epoch and entry.batches:
            sequence = (entry.last_seq + 1) & 0x7FFFFFFF
        try:
            end = shard.append_transactional(
                (producer_id, producer_epoch, sequence),
                offsets_records.offset_records(changes),
                changes,
            )
        except ApiError as exc:
            code = _TXN_OFFSET_APPEND_ERRORS.get(exc.code, exc.code)
            return [code if c == ErrorCode.NONE else c for c in codes]
        failure = await self._runtime.replicated(shard.index, end)
        if failure is not None:
            return [failure if c == ErrorCode.NONE else c for c in codes]
        return codes

    def unstable_offsets(self, group_id: str) -> set[tuple[str, int]]:
        """(topic, partition) of the group's transactional offset commits still waiting for
        their marker (OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT for them)."""
        shard = self._shard_of(group_id)
        return shard.pending_txn_partitions(group_id)

    def on_txn_marker(self, index: int, producer_id: int, commit: bool, end_offset: int) -> None:
        """WriteTxnMarkers appended a marker to __consumer_offsets partition `index` (ending
        at `end_offset`): the producer's pending transactional offsets take effect or go."""
        shard = self._runtime.shard(index)
        if shard is not None:
            shard.replay_marker(end_offset, producer_id, commit)

    def fetch_offsets(
        self, group_id: str, wanted: Iterable[tuple[str, list[int]]] | None
    ) -> dict[str, dict[int, OffsetValue | None]]:
        """Committed offsets by topic and partition; None where nothing is committed.
        `wanted` None means every offset of the group."""
        shard = self._shard_of(group_id)
        self._runtime.expose(shard.index)
        self._runtime.require_loaded_state_replicated(shard.index)  # else a consumer could reset
        committed = shard.offsets.committed
        if wanted is None:
            found: dict[str, dict[int, OffsetValue | None]] = {}
            for (topic, partition), value in committed.of_group(group_id).items():
                found.setdefault(topic, {})[partition] = value
            return found
        return {topic: {p: committed.get(group_id, topic, p) for p in partitions} for topic, partitions in wanted}

    async def delete_offsets(self, group_id: str, wanted: list[tuple[str, int]]) -> tuple[int, list[ErrorCode]]:
        """OffsetDelete: (group error, per-partition errors), once the deletion is replicated."""
        shard = self._shard_of(group_id)
        group = shard.groups.get(group_id)
        if group is None and not shard.offsets.latest.has_group(group_id):
            return ErrorCode.GROUP_ID_NOT_FOUND, []
        subscribed = self._subscribed_topics(group) if group is not None else set()
        codes, removed = [], []
        for topic, partition in wanted:
            if topic in subscribed:
                codes.append(ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC)
                continue
            codes.append(ErrorCode.NONE)
            removed.append((group_id, topic, partition))
        failure = await self._removed_and_replicated(shard, removed)
        if failure is not None:
            return failure, []
        return ErrorCode.NONE, codes

    # -- admin -----------------------------------------------------------------------------
    def list_groups(self) -> list[tuple[str, str, str]]:
        """(group id, protocol type, state) of every group this coordinator knows."""
        shards = self._runtime.shards()
        listed = {
            gid: (g.protocol_type or "", g.state.value)
            for shard in shards
            for gid, g in shard.groups.items()
            if g.state is not GroupState.DEAD
        }
        for gid in (gid for shard in shards for gid in shard.offsets.latest.groups()):
            listed.setdefault(gid, ("", GroupState.EMPTY.value))
        return [(gid, ptype, state) for gid, (ptype, state) in sorted(listed.items())]

    def metric_rows(self) -> tuple[list[tuple[str, str, int, int]], list[tuple[str, int]]]:
        """For shoal_group_committed_offset and shoal_group_members (read at scrape time): the
        replicated committed offsets of the groups coordinated here, and each group's member
        count (groups known only by their offsets have 0)."""
        offsets: list[tuple[str, str, int, int]] = []
        members: dict[str, int] = {}
        for shard in self._runtime.shards():
            for group_id, topic, partition, value in shard.offsets.committed.items():
                offsets.append((group_id, topic, partition, value.offset))
                members.setdefault(group_id, 0)
            for group_id, group in shard.groups.items():
                if group.state is not GroupState.DEAD:
                    members[group_id] = group.size
        return offsets, list(members.items())

    def describe(self, group_id: str) -> GroupDescription | None:
        shard = self._shard_of(group_id)
        group = shard.groups.get(group_id)
        if group is None:
            if shard.offsets.latest.has_group(group_id):
                return GroupDescription(GroupState.EMPTY.value, "", "", ())
            return None
        return group.describe()

    async def delete_group(self, group_id: str) -> int:
        shard = self._shard_of(group_id)
        group = shard.groups.get(group_id)
        if group is None and not shard.offsets.latest.has_group(group_id):
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group is not None and not group.is_empty:
            return ErrorCode.NON_EMPTY_GROUP
        doomed = [(group_id, t, p) for (t, p) in shard.offsets.latest.of_group(group_id)]
        shard.forget_group(group_id)
        failure = await self._removed_and_replicated(shard, doomed)
        return ErrorCode.NONE if failure is None else failure

    # -- shards ----------------------------------------------------------------------------
    def _partition(self, index: int) -> "Partition":
        return self._replicas.get(offsets_records.OFFSETS_TOPIC, index)

    def _new_shard(self, index: int) -> GroupShard:
        return GroupShard(index, self._shard_context)

    async def _removed_and_replicated(self, shard: GroupShard, doomed: list[tuple[str, str, int]]) -> ErrorCode | None:
        end = shard.remove_offsets(doomed)
        return None if end is None else await self._runtime.replicated(shard.index, end)

    # -- housekeeping ----------------------------------------------------------------------
    async def _run_retention(self) -> None:
        config = self._config
        while True:
            await self._clock.sleep(config.offsets_retention_check_interval_ms / 1000)
            try:
                self.expire_offsets()
            except Exception:
                log.exception("offset expiry failed")

    def expire_offsets(self) -> int:
        retention_ms = self._config.offsets_retention_minutes * 60_000
        now = self._now()
        expired = sum(shard.expire_offsets(now, retention_ms) for shard in self._runtime.shards())
        if expired:
            log.info("expired %d committed offsets", expired)
        return expired

    async def _on_topic_change(self, name: str, topic: "Topic | None") -> None:
        if name == offsets_records.OFFSETS_TOPIC and topic is not None:
            self._num_partitions = topic.partitions
        if topic is None and name != offsets_records.OFFSETS_TOPIC:
            for shard in self._runtime.shards():
                shard.remove_offsets([(g, name, p) for g, p in shard.offsets.latest.of_topic(name)])

    # -- helpers ---------------------------------------------------------------------------
    def _shard_of(self, group_id: str) -> GroupShard:
        index = offsets_records.partition_for(group_id, self._num_partitions)
        shard = self._runtime.shard(index)
        if shard is None:
            raise ApiError(
                ErrorCode.NOT_COORDINATOR,
                f"this broker does not lead {offsets_records.OFFSETS_TOPIC}-{index}, which holds group {group_id!r}",
            )
        return shard

    def coordinator_of(self, group_id: str) -> int:
        """The node leading the group's __consumer_offsets partition; -1 while it has none."""
        topic = self._catalog.get(offsets_records.OFFSETS_TOPIC)
        if topic is None:
            return -1
        index = offsets_records.partition_for(group_id, topic.partitions)
        state = self._view.partitions.get(TopicIdPartition.of(topic.topic_id, index))
        return state.record.leader if state is not None else -1

    # -- leadership of __consumer_offsets partitions ---------------------------------------
    def _on_role_changed(self, partition: "Partition") -> None:
        self._runtime.on_role_changed(partition)

    def _membership_shard_of(self, group_id: str) -> GroupShard:
        """Kafka accepts an empty group id only for offset and admin requests."""
        if not group_id:
            raise ApiError(ErrorCode.INVALID_GROUP_ID, "group id may not be empty")
        return self._shard_of(group_id)

    def _subscribed_topics(self, group: ClassicGroup) -> set[str]:
        """Topics the group's consumers subscribe to (consumer protocol metadata), for OffsetDelete."""
        if group.protocol_type != "consumer" or group.is_empty:
            return set()
        topics: set[str] = set()
        for member in group.members:
            for name, metadata in member.protocols:
                if name == group.protocol_name:
                    topics |= subscribed_topics(metadata)
        return topics

    def _now(self) -> int:
        return self._clock.now_ms()

    def _count_groups(self) -> int:
        return sum(len(shard.groups) for shard in self._runtime.shards())
