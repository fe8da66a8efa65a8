"""The consumer groups and committed offsets of one `__consumer_offsets` partition: the
coordinator runtime's shard for consumer groups (Kafka's GroupCoordinatorShard).

It knows what the records mean (`offsets_records`), rebuilds groups and offsets from them on
load, hands the runtime its live state for compaction, and drives the `ClassicGroup` state
machines: parked requests (`Pending`) become futures resolved from `take_completions()`,
store points become appends (written before the answers of the same call are sent), and
each group's next deadline becomes a timer keyed by its id.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from ..coordinator.record_batches import Record
from ..protocol.errors import ErrorCode
from . import legacy_records, offsets_records
from .membership import ClassicGroup, GroupState
from .membership_config import GroupConfig
from .offsets import OffsetChange, ReplicatedOffsets, WrittenChange
from .offsets_records import GroupKey, OffsetKey
from .results import JoinResult, Pending

if TYPE_CHECKING:
    from ..coordinator.runtime import CoordinatorRuntime
    from ..metrics import BrokerMetrics


@dataclass(frozen=True, slots=True)
class GroupShardContext:
    """What every group shard shares; the GroupCoordinator builds it from its own fields."""

    runtime: "CoordinatorRuntime[GroupShard]"
    config: GroupConfig
    now_ms: Callable[[], int]
    monotonic_ms: Callable[[], int]
    new_uuid: Callable[[], str]  # member ids
    metrics: "BrokerMetrics"
    count_groups: Callable[[], int]  # groups over all shards, for the gauge


class GroupShard:
    def __init__(self, index: int, context: GroupShardContext) -> None:
        self.index = index
        self._context = context
        self.groups: dict[str, ClassicGroup] = {}
        self.offsets = ReplicatedOffsets()
        self._waiting: dict[Pending, asyncio.Future[Any]] = {}
        self._last_join_at: dict[str, int] = {}  # monotonic ms of each group's latest JoinGroup
        self._loaded_snapshots: dict[str, bytes | None] = {}  # latest snapshot per group, while loading
        # TxnOffsetCommit: offsets of open transactions by producer id, with the log offset of
        # their batch, applied at the COMMIT marker where nothing newer was written, dropped at
        # ABORT (Kafka's pendingTransactionalOffsets), and the first offset of each producer's
        # transactional records (compaction keeps them until the marker)
        self.txn_offsets: dict[int, list[WrittenChange]] = {}
        self._txn_first_offset: dict[int, int] = {}
        self._legacy_records = False  # replay met records of Shoal's msgpack format

    # -- CoordinatorShard ------------------------------------------------------------------
    def replay(self, end_offset: int, batch: list[Record]) -> None:
        changes: list[OffsetChange] = []
        for raw_key, value in batch:
            self._legacy_records |= legacy_records.is_legacy(raw_key)
            key = offsets_records.decode_key(raw_key)
            if isinstance(key, OffsetKey):
                changes.append(
                    (
                        key.group,
                        key.topic,
                        key.partition,
                        None if value is None else offsets_records.decode_offset(value),
                    )
                )
            elif isinstance(key, GroupKey):
                self._loaded_snapshots[key.group] = value
        self._appended(end_offset - len(batch), end_offset, changes)

    def _appended(self, first_offset: int, end_offset: int, changes: list[OffsetChange]) -> None:
        """Plain changes written by the batch at `first_offset`. A deletion also drops the
        partition's pending transactional offsets (Kafka's replay of a tombstone): they were
        written before it and must not bring the offset back at their COMMIT marker."""
        deleted = {(g, t, p) for g, t, p, value in changes if value is None}
        if deleted and self.txn_offsets:
            for producer_id, pending in self.txn_offsets.items():
                self.txn_offsets[producer_id] = [w for w in pending if w[0][:3] not in deleted]
        self.offsets.appended(first_offset, end_offset, changes)

    def replay_transactional(self, first_offset: int, end_offset: int, producer_id: int, batch: list[Record]) -> None:
        changes = self.txn_offsets.setdefault(producer_id, [])
        self._txn_first_offset.setdefault(producer_id, first_offset)
        for raw_key, value in batch:
            self._legacy_records |= legacy_records.is_legacy(raw_key)
            key = offsets_records.decode_key(raw_key)
            if isinstance(key, OffsetKey) and value is not None:
                change = (key.group, key.topic, key.partition, offsets_records.decode_offset(value))
                changes.append((change, first_offset))

    def replay_marker(self, end_offset: int, producer_id: int, commit: bool) -> None:
        """The producer's transaction ended here: its offsets become committed where no
        offset of their partition was written after them (exposed once the marker is
        replicated), or are dropped (Kafka's replayEndTransactionMarker)."""
        changes = self.txn_offsets.pop(producer_id, [])
        self._txn_first_offset.pop(producer_id, None)
        if commit and changes:
            self.offsets.committed_txn(end_offset, changes)

    def compaction_floor(self) -> int | None:
        """The first record of the oldest open transaction, and the record of the current
        offset of each partition a transaction holds an offset for: `live_records` does not
        re-append those (a copy would be newer in the log than the pending offset, which its
        COMMIT marker would then wrongly skip), so the log must keep them where they are."""
        floors = list(self._txn_first_offset.values())
        for group_id, topic, partition in self._pending_txn_keys():
            written_at = self.offsets.written_at(group_id, topic, partition)
            if written_at is not None:
                floors.append(written_at)
        return min(floors, default=None)

    def _pending_txn_keys(self) -> set[tuple[str, str, int]]:
        return {(g, t, p) for pending in self.txn_offsets.values() for (g, t, p, _), _at in pending}

    def holds_legacy_records(self) -> bool:
        return self._legacy_records

    def has_pending_txn_offset(self, group_id: str, topic: str, partition: int) -> bool:
        return (group_id, topic, partition) in self._pending_txn_keys()

    def pending_txn_partitions(self, group_id: str) -> set[tuple[str, int]]:
        """(topic, partition) of the group's offsets waiting for a transaction's marker."""
        return {(t, p) for g, t, p in self._pending_txn_keys() if g == group_id}

    def on_loaded(self) -> None:
        """Groups come back Stable (or Empty) with fresh session deadlines."""
        now = self._context.now_ms()
        for group_id, value in self._loaded_snapshots.items():
            if value is not None:
                group = self.groups[group_id] = ClassicGroup.from_snapshot(
                    offsets_records.decode_group(group_id, value),
                    self._context.config,
                    now,
                    new_uuid=self._context.new_uuid,
                )
                self._arm(group)
        self._loaded_snapshots = {}

    def on_replicated(self, high_watermark: int) -> None:
        self.offsets.replicated(high_watermark)

    def live_records(self) -> list[Record]:
        live: list[Record] = []
        for group_id, group in self.groups.items():
            if group.state is not GroupState.DEAD:
                live.append((offsets_records.group_key(group_id), offsets_records.group_value(group.to_snapshot())))
        pending = self._pending_txn_keys()
        for group_id, topic, p, value in self.offsets.latest.items():
            if (group_id, topic, p) in pending:
                continue  # kept in place: compaction_floor
            live.append((offsets_records.offset_key(group_id, topic, p), offsets_records.offset_value(value)))
        return live

    def on_unloaded(self) -> None:
        """Members get NOT_COORDINATOR and find the new coordinator, which replays the log."""
        now = self._context.now_ms()
        for group_id in list(self.groups):
            group = self.groups.pop(group_id)
            group.unload(now)
            self.deliver(group)

    # -- driving the state machines --------------------------------------------------------
    def new_group(self, group_id: str) -> ClassicGroup:
        group = self.groups[group_id] = ClassicGroup(
            group_id, self._context.config, new_uuid=self._context.new_uuid, now_ms=self._context.now_ms()
        )
        return group

    def note_join(self, group_id: str) -> None:
        """A JoinGroup arrived: the rebalance it completes is timed from here."""
        self._last_join_at[group_id] = self._context.monotonic_ms()

    async def call(self, group: ClassicGroup, operation: Callable[[], Any]) -> Any:
        result = operation()
        future: asyncio.Future[Any] | None = None
        if isinstance(result, Pending):
            future = asyncio.get_running_loop().create_future()
            self._waiting[result] = future
        self.deliver(group)
        return await future if future is not None else result

    def deliver(self, group: ClassicGroup) -> None:
        """Persist a store point, then answer parked requests, then re-arm the group's timer."""
        snapshot = group.take_store_request()
        if snapshot is not None:
            self.append([(offsets_records.group_key(group.group_id), offsets_records.group_value(snapshot))])
        rebalanced = False
        for pending, answer in group.take_completions():
            rebalanced |= isinstance(answer, JoinResult) and answer.error_code == ErrorCode.NONE
            future = self._waiting.pop(pending, None)
            if future is not None and not future.done():
                future.set_result(answer)
        metrics = self._context.metrics
        if rebalanced and group.group_id in self._last_join_at:
            metrics.group_rebalances.inc()
            metrics.group_rebalance_seconds.observe(
                (self._context.monotonic_ms() - self._last_join_at[group.group_id]) / 1000
            )
        if group.state is GroupState.DEAD and self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]
            self._last_join_at.pop(group.group_id, None)
        metrics.groups.set(self._context.count_groups())
        self._arm(group)

    def _arm(self, group: ClassicGroup) -> None:
        timers = self._context.runtime.timers
        deadline = group.next_deadline_ms()
        if deadline is None or self.groups.get(group.group_id) is not group:
            timers.cancel(self.index, group.group_id)
        else:
            timers.schedule(self.index, group.group_id, deadline, lambda now: self._tick(group, now))

    def _tick(self, group: ClassicGroup, now: int) -> None:
        if self.groups.get(group.group_id) is group:
            group.tick(now)
            self.deliver(group)

    # -- writes ----------------------------------------------------------------------------
    def append(self, items: list[Record], changes: list[OffsetChange] | None = None) -> int:
        """Append to this shard's partition (`changes`: the offsets these records set or
        delete); returns the log end offset after it."""
        return self._context.runtime.append(
            self.index, items, lambda end: self._appended(end - len(items), end, changes or [])
        )

    def append_transactional(
        self, producer: tuple[int, int, int], items: list[Record], changes: list[OffsetChange]
    ) -> int:
        """Append a TxnOffsetCommit as a transactional batch of `producer` (id, epoch, base
        sequence); its offsets wait for the producer's marker."""

        def appended(end: int) -> None:
            first = end - len(items)
            self.replay_transactional(first, end, producer[0], [])
            self.txn_offsets[producer[0]].extend((change, first) for change in changes)

        return self._context.runtime.append(self.index, items, appended, producer)

    def remove_offsets(self, doomed: list[tuple[str, str, int]]) -> int | None:
        """Append tombstones for the offsets that exist; the log end offset to wait for, None
        when nothing was written."""
        by_group: dict[str, list[tuple[str, int]]] = {}
        for group_id, topic, partition in doomed:
            if self.offsets.latest.get(group_id, topic, partition) is not None:
                by_group.setdefault(group_id, []).append((topic, partition))
        end: int | None = None
        for group_id, keys in by_group.items():
            changes: list[OffsetChange] = [(group_id, t, p, None) for t, p in keys]
            end = self.append(offsets_records.offset_records(changes), changes)
        return end

    def forget_group(self, group_id: str) -> None:
        group = self.groups.pop(group_id, None)
        if group is not None:
            group.unload(self._context.now_ms(), ErrorCode.COORDINATOR_NOT_AVAILABLE)
            self.deliver(group)
            self.append([(offsets_records.group_key(group_id), None)])

    # -- housekeeping ----------------------------------------------------------------------
    def expire_offsets(self, now_ms: int, retention_ms: int) -> int:
        """Remove the offsets due (KIP-211; not those with a change still replicating or an
        open transaction's offset pending, as Kafka), and Empty groups left without offsets;
        how many offsets expired."""
        in_txn = self._pending_txn_keys()
        due = [
            (g, t, p)
            for g, t, p in self.offsets.committed.expired(now_ms, retention_ms, self._empty_since)
            if not self.offsets.is_pending(g, t, p) and (g, t, p) not in in_txn
        ]
        self.remove_offsets(due)
        for group_id in {g for g, _, _ in due}:
            group = self.groups.get(group_id)
            if group is not None and group.is_empty and not self.offsets.latest.has_group(group_id):
                self.forget_group(group_id)
        return len(due)

    def _empty_since(self, group_id: str) -> int | None:
        group = self.groups.get(group_id)
        if group is None:
            return -1
        if not group.is_empty:
            return None
        stamp = group.current_state_timestamp_ms
        return -1 if stamp is None else stamp
