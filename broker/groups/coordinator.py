"""The group coordinator: drives `ClassicGroup` state machines and owns committed offsets,
both durable in the internal classic topic `__consumer_offsets`.

A group belongs to partition `partition_for(group_id)` of that topic, and the broker that
leads the partition coordinates it (all partitions are local on a single broker; the
cluster issue moves coordination with partition leadership). The driver:

- turns the state machine's parked requests (`Pending`) into futures and resolves them
  from `take_completions()` after every call and every timer tick;
- writes a group snapshot whenever the state machine reaches a Kafka store point, and
  one batch per OffsetCommit; a commit is answered, and visible to OffsetFetch, only once
  the partition's ISR holds it (replicate, then expose: `offsets.ReplicatedOffsets`);
- rebuilds everything at start by replaying each partition from its log start, and keeps
  that replay short by *compaction by re-append*: once a partition holds more than
  `offsets.topic.compaction.min.records` superseded records, the live state as appended so
  far is appended again, and once that re-append is replicated the log start moves past
  the old records (replicate, then truncate: a follower that takes over in between still
  holds everything). No separate snapshot files, so a follower gets the same history;
- expires offsets (`offsets.retention.minutes`, KIP-211) and drops offsets of deleted topics.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable

from ..protocol.errors import ApiError, ErrorCode
from . import records
from .membership import (
    ClassicGroup, GroupConfig, GroupDescription, GroupState, JoinResult, LeaveResult, Pending,
    SyncResult, decode_snapshot, encode_snapshot,
)
from .consumer_protocol import subscribed_topics
from .offsets import OffsetChange, ReplicatedOffsets
from .records import GroupKey, OffsetKey, OffsetValue

if TYPE_CHECKING:
    from ..broker import Broker
    from ..partition import Partition
    from ..topics import Topic

log = logging.getLogger(__name__)

INTERNAL_TOPIC_CONFIGS = {"retention.ms": "-1", "max.message.bytes": "10485760", "diskless.enable": "false"}
MAX_TIMER_SLEEP_S = 1.0


@dataclass(slots=True)
class _PartitionStats:
    live_keys: set[bytes]
    records_since_compaction: int = 0


class GroupCoordinator:
    def __init__(self, broker: "Broker") -> None:
        self._broker = broker
        config = broker.config
        self._num_partitions = config.offsets_topic_num_partitions
        self._group_config = GroupConfig(
            initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
            min_session_timeout_ms=config.group_min_session_timeout_ms,
            max_session_timeout_ms=config.group_max_session_timeout_ms,
            max_size=config.group_max_size,
        )
        self._groups: dict[str, ClassicGroup] = {}
        self.offsets = ReplicatedOffsets()
        self._waiting: dict[Pending, asyncio.Future[Any]] = {}
        self._stats: dict[int, _PartitionStats] = {}
        self._timer_waker: asyncio.Future[None] | None = None
        self._last_join_at: dict[str, int] = {}  # monotonic ms of each group's latest JoinGroup
        self._new_uuid = lambda: str(broker.env.new_uuid())  # member ids
        self._metrics = broker.metrics
        self._tasks: list[asyncio.Task[None]] = []
        self._led: set[int] = set()  # __consumer_offsets partitions this broker leads and has loaded
        self._truncations: dict[int, asyncio.Task[None]] = {}  # partition -> log start move after compaction
        self._loaded_to: dict[int, int] = {}  # partition -> its log end offset when this broker loaded it

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        catalog = self._broker.catalog
        live = sum(1 for b in self._broker.view.brokers.values() if not b.stateless)
        if live >= self._broker.config.offsets_topic_replication_factor or self._broker.config.metadata == "local:":
            await self.ensure_offsets_topic()
        topic = catalog.get(records.OFFSETS_TOPIC)
        if topic is not None:
            self._num_partitions = topic.partitions
        catalog.subscribe(self._on_topic_change)
        self._broker.replicas.on_role_changed(self._on_role_changed)
        for partition in list(self._broker.replicas.partitions.values()):
            self._on_role_changed(partition)
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._run_timers()), loop.create_task(self._run_retention())]
        log.info("group coordinator loaded %d groups and %d committed offsets",
                 len(self._groups), sum(1 for _ in self.offsets.latest.items()))

    async def ensure_offsets_topic(self) -> None:
        """Create __consumer_offsets if missing: at start when enough brokers are up for its
        replication factor, else on the first FindCoordinator, as Kafka does."""
        catalog = self._broker.catalog
        if catalog.get(records.OFFSETS_TOPIC) is not None:
            return
        prepared = catalog.prepare(records.OFFSETS_TOPIC, self._num_partitions, {
            **INTERNAL_TOPIC_CONFIGS, "segment.bytes": str(self._broker.config.offsets_topic_segment_bytes)})
        prepared.internal = True
        live = sum(1 for b in self._broker.view.brokers.values() if not b.stateless)
        factor = min(self._broker.config.offsets_topic_replication_factor, live)
        try:
            await catalog.create(prepared, self._broker.assign_replicas(range(prepared.partitions), factor))
        except ApiError as exc:  # another broker created it first
            if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise

    async def stop(self) -> None:
        tasks = [*self._tasks, *self._truncations.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        now = self._now()
        for group in list(self._groups.values()):
            group.unload(now)
            self._deliver(group)

    # -- membership ------------------------------------------------------------------------
    async def join(self, group_id: str, **kwargs: Any) -> JoinResult:
        self._require_membership_group(group_id)
        group = self._groups.get(group_id)
        if group is None:
            group = self._groups[group_id] = self._new_group(group_id)
        self._last_join_at[group_id] = self._broker.clock.monotonic_ms()
        return await self._call(group, lambda: group.join(self._now(), **kwargs))

    async def sync(self, group_id: str, **kwargs: Any) -> SyncResult:
        self._require_membership_group(group_id)
        group = self._groups.get(group_id)
        if group is None:
            return SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        return await self._call(group, lambda: group.sync(self._now(), **kwargs))

    async def heartbeat(self, group_id: str, **kwargs: Any) -> int:
        self._require_membership_group(group_id)
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return await self._call(group, lambda: group.heartbeat(self._now(), **kwargs))

    async def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> LeaveResult:
        self._require_membership_group(group_id)
        group = self._groups.get(group_id)
        if group is None:
            return LeaveResult(ErrorCode.NONE, tuple(ErrorCode.UNKNOWN_MEMBER_ID for _ in members))
        return await self._call(group, lambda: group.leave(self._now(), members))

    # -- offsets ---------------------------------------------------------------------------
    async def commit_offsets(self, group_id: str, *, member_id: str, group_instance_id: str | None,
                             generation_id: int, api_version: int,
                             offsets: list[tuple["Topic | None", str, int, int, int, str | None, int]],
                             ) -> list[int]:
        """offsets: (topic or None if unknown, name, partition, offset, leader_epoch, metadata,
        expire_timestamp_ms). Returns one error code per entry, in order."""
        self._require_coordinator(group_id)
        group = self._groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                code = ErrorCode.GROUP_ID_NOT_FOUND if api_version >= 9 else ErrorCode.ILLEGAL_GENERATION
                return [code] * len(offsets)
            group = self._groups[group_id] = self._new_group(group_id)
        error = await self._call(group, lambda: group.validate_offset_commit(
            self._now(), member_id=member_id, group_instance_id=group_instance_id, generation_id=generation_id))
        if error != ErrorCode.NONE:
            return [error] * len(offsets)
        now = self._now()
        codes: list[int] = []
        writes: list[tuple[OffsetKey, OffsetValue]] = []
        limit = self._broker.config.offset_metadata_max_bytes
        for topic, name, partition, offset, epoch, metadata, expire_ms in offsets:
            if topic is None or not 0 <= partition < topic.partitions:
                codes.append(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            elif metadata is not None and len(metadata.encode()) > limit:
                codes.append(ErrorCode.OFFSET_METADATA_TOO_LARGE)
            else:
                codes.append(ErrorCode.NONE)
                key = OffsetKey(records.FORMAT_VERSION, group_id, name, partition)
                writes.append((key, OffsetValue(records.FORMAT_VERSION, offset, epoch, metadata, now, expire_ms)))
        if writes:
            changes: list[OffsetChange] = [(group_id, key.topic, key.partition, value) for key, value in writes]
            end = self._append(group_id, [(records.encode(k), records.encode(v)) for k, v in writes], changes)
            self._metrics.offset_commits.inc(len(writes))
            failure = await self._replicated(records.partition_for(group_id, self._num_partitions), end)
            if failure is not None:
                return [failure if c == ErrorCode.NONE else c for c in codes]
        return codes

    def fetch_offsets(self, group_id: str, wanted: Iterable[tuple[str, list[int]]] | None
                      ) -> dict[str, dict[int, OffsetValue | None]]:
        """Committed offsets by topic and partition; None where nothing is committed.
        `wanted` None means every offset of the group."""
        self._require_coordinator(group_id)
        index = records.partition_for(group_id, self._num_partitions)
        self._expose(index)
        loaded_to = self._loaded_to.get(index, 0)
        if self._partition(index).log.high_watermark < loaded_to:
            # What this leader loaded is not all known to be replicated yet (its high
            # watermark came back from a checkpoint, or its followers are away): an answer
            # now could miss offsets its predecessor acknowledged, and a consumer would reset.
            raise ApiError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                           f"{records.OFFSETS_TOPIC}-{index} is replicated up to {self._partition(index).log.high_watermark}"
                           f" of the {loaded_to} offsets loaded; retry")
        committed = self.offsets.committed
        if wanted is None:
            found: dict[str, dict[int, OffsetValue | None]] = {}
            for (topic, partition), value in committed.of_group(group_id).items():
                found.setdefault(topic, {})[partition] = value
            return found
        return {topic: {p: committed.get(group_id, topic, p) for p in partitions} for topic, partitions in wanted}

    async def delete_offsets(self, group_id: str, wanted: list[tuple[str, int]]) -> tuple[int, list[ErrorCode]]:
        """OffsetDelete: (group error, per-partition errors), once the deletion is replicated."""
        self._require_coordinator(group_id)
        group = self._groups.get(group_id)
        if group is None and not self.offsets.latest.has_group(group_id):
            return ErrorCode.GROUP_ID_NOT_FOUND, []
        subscribed = self._subscribed_topics(group) if group is not None else set()
        codes, removed = [], []
        for topic, partition in wanted:
            if topic in subscribed:
                codes.append(ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC)
                continue
            codes.append(ErrorCode.NONE)
            removed.append((group_id, topic, partition))
        failure = await self._removed_and_replicated(removed)
        if failure is not None:
            return failure, []
        return ErrorCode.NONE, codes

    # -- admin -----------------------------------------------------------------------------
    def list_groups(self) -> list[tuple[str, str, str]]:
        """(group id, protocol type, state) of every group this coordinator knows."""
        listed = {gid: (g.protocol_type or "", g.state.value) for gid, g in self._groups.items()
                  if g.state is not GroupState.DEAD}
        for gid in self.offsets.latest.groups():
            listed.setdefault(gid, ("", GroupState.EMPTY.value))
        return [(gid, ptype, state) for gid, (ptype, state) in sorted(listed.items())]

    def describe(self, group_id: str) -> GroupDescription | None:
        self._require_coordinator(group_id)
        group = self._groups.get(group_id)
        if group is None:
            if self.offsets.latest.has_group(group_id):
                return GroupDescription(GroupState.EMPTY.value, "", "", ())
            return None
        return group.describe()

    async def delete_group(self, group_id: str) -> int:
        self._require_coordinator(group_id)
        group = self._groups.get(group_id)
        if group is None and not self.offsets.latest.has_group(group_id):
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group is not None and not group.is_empty:
            return ErrorCode.NON_EMPTY_GROUP
        doomed = [(group_id, t, p) for (t, p) in self.offsets.latest.of_group(group_id)]
        self._forget_group(group_id)
        failure = await self._removed_and_replicated(doomed)
        return ErrorCode.NONE if failure is None else failure

    # -- driving the state machine ---------------------------------------------------------
    async def _call(self, group: ClassicGroup, operation: Callable[[], Any]) -> Any:
        result = operation()
        future: asyncio.Future[Any] | None = None
        if isinstance(result, Pending):
            future = asyncio.get_running_loop().create_future()
            self._waiting[result] = future
        self._deliver(group)
        return await future if future is not None else result

    def _deliver(self, group: ClassicGroup) -> None:
        """Persist a store point, then answer parked requests, then re-arm the timer."""
        snapshot = group.take_store_request()
        if snapshot is not None:
            key = records.encode(GroupKey(records.FORMAT_VERSION, group.group_id))
            self._append(group.group_id, [(key, encode_snapshot(snapshot))])
        rebalanced = False
        for pending, answer in group.take_completions():
            rebalanced |= isinstance(answer, JoinResult) and answer.error_code == ErrorCode.NONE
            future = self._waiting.pop(pending, None)
            if future is not None and not future.done():
                future.set_result(answer)
        if rebalanced and group.group_id in self._last_join_at:
            self._metrics.group_rebalances.inc()
            self._metrics.group_rebalance_seconds.observe(
                (self._broker.clock.monotonic_ms() - self._last_join_at[group.group_id]) / 1000)
        if group.state is GroupState.DEAD and self._groups.get(group.group_id) is group:
            del self._groups[group.group_id]
            self._last_join_at.pop(group.group_id, None)
        self._metrics.groups.set(len(self._groups))
        if self._timer_waker is not None and not self._timer_waker.done():
            self._timer_waker.set_result(None)  # a deadline may now be earlier than the timer's

    async def _run_timers(self) -> None:
        while True:
            now = self._now()
            next_deadline: int | None = None
            for group in list(self._groups.values()):
                deadline = group.next_deadline_ms()
                if deadline is None:
                    continue
                if deadline <= now:
                    group.tick(now)
                    self._deliver(group)
                    deadline = group.next_deadline_ms()
                if deadline is not None and (next_deadline is None or deadline < next_deadline):
                    next_deadline = deadline
            sleep_s = MAX_TIMER_SLEEP_S if next_deadline is None else \
                min(MAX_TIMER_SLEEP_S, max(0.001, (next_deadline - self._now()) / 1000))
            # asyncio.wait, not wait_for: on Python 3.11 wait_for can swallow a cancellation
            # that arrives as the awaited future completes, and stop() would hang.
            self._timer_waker = asyncio.get_running_loop().create_future()
            await asyncio.wait((self._timer_waker,), timeout=sleep_s)

    # -- persistence -----------------------------------------------------------------------
    def _partition(self, index: int) -> "Partition":
        return self._broker.replicas.get(records.OFFSETS_TOPIC, index)

    def _append(self, group_id: str, items: list[tuple[bytes, bytes | None]],
                changes: list[OffsetChange] | None = None) -> int:
        """Append to the group's partition (`changes`: the offsets these records set or
        delete); returns the log end offset after it."""
        index = records.partition_for(group_id, self._num_partitions)
        batch = records.build_batch(items, self._now())
        end = self._partition(index).append_records(memoryview(batch), acks=1).end_offset
        self.offsets.appended(index, end, changes or [])
        stats = self._stats.setdefault(index, _PartitionStats(set()))
        for key, value in items:
            stats.records_since_compaction += 1
            (stats.live_keys.add if value is not None else stats.live_keys.discard)(key)
        threshold = max(self._broker.config.offsets_topic_compaction_min_records, 2 * len(stats.live_keys))
        if stats.records_since_compaction > threshold:
            self._compact(index)
        return end

    async def _replicated(self, index: int, end_offset: int) -> ErrorCode | None:
        """Wait until partition `index` replicated its log below `end_offset`, like any
        acks=all write, and expose what it replicated; the error code to answer if it did not."""
        try:
            await self._partition(index).wait_replicated(end_offset, self._broker.config.offsets_commit_timeout_ms / 1000)
        except ApiError as exc:
            return ErrorCode.NOT_COORDINATOR if exc.code == ErrorCode.NOT_LEADER_OR_FOLLOWER \
                else ErrorCode.REQUEST_TIMED_OUT
        finally:
            self._expose(index)
        return None

    def _expose(self, index: int) -> None:
        """Make offset changes below the partition's high watermark visible to OffsetFetch."""
        if index in self._led:
            self.offsets.replicated(index, self._partition(index).log.high_watermark)

    async def _removed_and_replicated(self, doomed: list[tuple[str, str, int]]) -> ErrorCode | None:
        failures = [await self._replicated(index, end) for index, end in self._remove_offsets(doomed).items()]
        return next((f for f in failures if f is not None), None)

    def _compact(self, index: int) -> None:
        """Append the partition's live state again (as appended so far: the change that
        triggered compaction included), then, once that is replicated, move the log start
        past the records it supersedes."""
        partition = self._partition(index)
        live: list[tuple[bytes, bytes | None]] = []
        for group_id, group in self._groups.items():
            if records.partition_for(group_id, self._num_partitions) == index and group.state is not GroupState.DEAD:
                live.append((records.encode(GroupKey(records.FORMAT_VERSION, group_id)),
                             encode_snapshot(group.to_snapshot())))
        for group_id, topic, p, value in self.offsets.latest.items():
            if records.partition_for(group_id, self._num_partitions) == index:
                live.append((records.encode(OffsetKey(records.FORMAT_VERSION, group_id, topic, p)),
                             records.encode(value)))
        start = partition.log.log_end_offset
        chunk = 1000
        for i in range(0, len(live), chunk):
            partition.append_records(memoryview(records.build_batch(live[i:i + chunk], self._now())), acks=1)
        end = partition.log.log_end_offset
        self._stats[index] = _PartitionStats({key for key, _ in live})
        log.info("compacted %s-%d: %d live records re-appended at offset %d",
                 records.OFFSETS_TOPIC, index, len(live), start)
        previous = self._truncations.pop(index, None)
        if previous is not None:
            previous.cancel()  # this compaction's start is later and covers it
        if partition.log.high_watermark >= end:  # a lone replica: replicated already
            _truncate_before(partition, start)
            return
        task = asyncio.get_running_loop().create_task(
            self._truncate_when_replicated(partition, partition.leader_epoch, start, end))
        self._truncations[index] = task
        task.add_done_callback(lambda done: self._truncations.pop(index, None)
                               if self._truncations.get(index) is done else None)

    async def _truncate_when_replicated(self, partition: "Partition", epoch: int, start: int, end: int) -> None:
        try:
            await partition.wait_replicated(end, self._broker.config.offsets_commit_timeout_ms / 1000)
        except ApiError as exc:
            log.info("%s-%d: compaction's re-append not replicated (%s); the log start stays",
                     partition.topic, partition.index, exc.message)
            return
        if partition.leader is not None and partition.leader_epoch == epoch:
            _truncate_before(partition, start)

    def _load_partition(self, index: int) -> None:
        partition = self._partition(index)
        snapshots: dict[str, bytes | None] = {}
        stats = _PartitionStats(set())
        for entry in partition.log.iter_entries(partition.log.log_start_offset):
            changes: list[OffsetChange] = []
            for raw_key, value in records.read_batch(entry.data):
                stats.records_since_compaction += 1
                (stats.live_keys.add if value is not None else stats.live_keys.discard)(raw_key)
                key = records.decode_key(raw_key)
                if isinstance(key, OffsetKey):
                    changes.append((key.group, key.topic, key.partition,
                                    None if value is None else records.decode_offset(value)))
                else:
                    snapshots[key.group] = value
            self.offsets.appended(index, entry.last_offset + 1, changes)
        self.offsets.replicated(index, partition.log.high_watermark)
        self._loaded_to[index] = partition.log.log_end_offset
        now = self._now()
        for group_id, value in snapshots.items():
            if value is not None:
                self._groups[group_id] = ClassicGroup.from_snapshot(decode_snapshot(value), self._group_config, now,
                                                                    new_uuid=self._new_uuid)
        self._stats[index] = stats

    # -- housekeeping ----------------------------------------------------------------------
    async def _run_retention(self) -> None:
        config = self._broker.config
        while True:
            await asyncio.sleep(config.offsets_retention_check_interval_ms / 1000)
            try:
                self.expire_offsets()
            except Exception:
                log.exception("offset expiry failed")

    def expire_offsets(self) -> int:
        retention_ms = self._broker.config.offsets_retention_minutes * 60_000
        due = [(g, t, p) for g, t, p in self.offsets.committed.expired(self._now(), retention_ms, self._empty_since)
               if not self.offsets.is_pending(records.partition_for(g, self._num_partitions), g, t, p)]
        self._remove_offsets(due)
        for group_id in {g for g, _, _ in due}:
            group = self._groups.get(group_id)
            if group is not None and group.is_empty and not self.offsets.latest.has_group(group_id):
                self._forget_group(group_id)
        if due:
            log.info("expired %d committed offsets", len(due))
        return len(due)

    def _empty_since(self, group_id: str) -> int | None:
        group = self._groups.get(group_id)
        if group is None:
            return -1
        if not group.is_empty:
            return None
        stamp = group.current_state_timestamp_ms
        return -1 if stamp is None else stamp

    def _remove_offsets(self, doomed: list[tuple[str, str, int]]) -> dict[int, int]:
        """Append tombstones for the offsets that exist; returns, per partition written, the
        log end offset to wait for."""
        by_group: dict[str, list[tuple[str, int]]] = {}
        for group_id, topic, partition in doomed:
            if self.offsets.latest.get(group_id, topic, partition) is not None:
                by_group.setdefault(group_id, []).append((topic, partition))
        ends: dict[int, int] = {}
        for group_id, keys in by_group.items():
            tombstones: list[tuple[bytes, bytes | None]] = [
                (records.encode(OffsetKey(records.FORMAT_VERSION, group_id, t, p)), None) for t, p in keys]
            changes: list[OffsetChange] = [(group_id, t, p, None) for t, p in keys]
            ends[records.partition_for(group_id, self._num_partitions)] = self._append(group_id, tombstones, changes)
        return ends

    def _forget_group(self, group_id: str) -> None:
        group = self._groups.pop(group_id, None)
        if group is not None:
            group.unload(self._now(), ErrorCode.COORDINATOR_NOT_AVAILABLE)
            self._deliver(group)
            self._append(group_id, [(records.encode(GroupKey(records.FORMAT_VERSION, group_id)), None)])

    async def _on_topic_change(self, name: str, topic: "Topic | None") -> None:
        if name == records.OFFSETS_TOPIC and topic is not None:
            self._num_partitions = topic.partitions
        if topic is None and name != records.OFFSETS_TOPIC:
            self._remove_offsets([(g, name, p) for g, p in self.offsets.latest.of_topic(name)])

    # -- helpers ---------------------------------------------------------------------------
    def _require_coordinator(self, group_id: str) -> None:
        index = records.partition_for(group_id, self._num_partitions)
        if index not in self._led:
            raise ApiError(ErrorCode.NOT_COORDINATOR,
                           f"this broker does not lead {records.OFFSETS_TOPIC}-{index}, which holds group {group_id!r}")

    def coordinator_of(self, group_id: str) -> int:
        """The node leading the group's __consumer_offsets partition; -1 while it has none."""
        topic = self._broker.catalog.get(records.OFFSETS_TOPIC)
        if topic is None:
            return -1
        index = records.partition_for(group_id, topic.partitions)
        state = self._broker.view.partitions.get((str(topic.topic_id), index))
        return state.record.leader if state is not None else -1

    # -- leadership of __consumer_offsets partitions ---------------------------------------
    def _on_role_changed(self, partition: "Partition") -> None:
        if partition.topic != records.OFFSETS_TOPIC:
            return
        index = partition.index
        if partition.leader is not None and index not in self._led:
            self._load_partition(index)
            self._led.add(index)
            log.info("coordinating the groups of %s-%d", records.OFFSETS_TOPIC, index)
        elif partition.leader is None and index in self._led:
            self._led.discard(index)
            self._unload_partition(index)
            log.info("no longer coordinating the groups of %s-%d", records.OFFSETS_TOPIC, index)

    def _unload_partition(self, index: int) -> None:
        """Leadership moved: forget the partition's groups (their members get NOT_COORDINATOR
        and find the new coordinator) and offsets; the new leader replays them."""
        now = self._now()
        for group_id in [g for g in self._groups if records.partition_for(g, self._num_partitions) == index]:
            group = self._groups.pop(group_id)
            group.unload(now)
            self._deliver(group)
        self.offsets.forget(index, lambda group_id: records.partition_for(group_id, self._num_partitions) == index)
        self._stats.pop(index, None)
        truncation = self._truncations.pop(index, None)
        if truncation is not None:
            truncation.cancel()

    def _require_membership_group(self, group_id: str) -> None:
        """Kafka accepts an empty group id only for offset and admin requests."""
        if not group_id:
            raise ApiError(ErrorCode.INVALID_GROUP_ID, "group id may not be empty")
        self._require_coordinator(group_id)

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
        return self._broker.clock.now_ms()

    def _new_group(self, group_id: str) -> ClassicGroup:
        return ClassicGroup(group_id, self._group_config, new_uuid=self._new_uuid, now_ms=self._now())


def _truncate_before(partition: "Partition", offset: int) -> None:
    """Move the log start of a compacted partition, and drop the producer snapshots below it."""
    partition.log.delete_records_before(offset)
    partition.producers.delete_snapshots_before(partition.directory, partition.log.log_start_offset)
