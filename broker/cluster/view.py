"""ClusterView: this broker's copy of the cluster metadata, kept current by one list and a
watch over the store. It holds the live brokers, the controller and every partition state;
topic records go to the TopicCatalog. Listeners hear of every change after it is applied.

A watch that breaks (etcd restarting, history compacted) is re-established by listing again
and diffing against what the view holds, so no change is ever missed, only coalesced. While
the store is unreachable the view keeps its last state: brokers keep serving the leadership
they have.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from ..clock import Clock
from ..loop_slices import RunSlices
from ..metadata import EventType, KeyValue, MetadataError, MetadataStore
from ..metadata import records
from ..partition_ids import TopicIdPartition
from ..topics import TopicCatalog

log = logging.getLogger(__name__)

RETRY_S = 0.5


class PartitionState:
    """A partition state record and the store revision it was read at (for compare-and-set)."""

    __slots__ = ("record", "revision")

    def __init__(self, record: records.PartitionStateRecord, revision: int) -> None:
        self.record = record
        self.revision = revision


class ClusterView:
    def __init__(self, store: MetadataStore, catalog: TopicCatalog, clock: Clock) -> None:
        self._store = store
        self._clock = clock
        self._catalog = catalog
        self.brokers: dict[int, records.BrokerRecord] = {}
        self.controller_id = -1
        self.partitions: dict[TopicIdPartition, PartitionState] = {}
        # topic id -> index -> state, the same states by topic: a full Metadata answer looks
        # up every topic's, and scanning every partition for each made it quadratic
        self._by_topic: dict[str, dict[int, PartitionState]] = {}
        self._keys: set[str] = set()  # every key applied, for the diff after a re-list
        # Partition changes come in runs (a CreateTopics, a watch response of a failover's
        # moves), and a hosting broker opens or re-roles a partition for each, milliseconds
        # apiece: a run hands the event loop back every 20 ms (issue 28).
        self._slices = RunSlices(clock)
        self._on_brokers: list[Callable[[], Any]] = []
        self._on_partition: list[Callable[[TopicIdPartition, PartitionState | None], Any]] = []
        self._on_controller: list[Callable[[int], Any]] = []
        self._task: asyncio.Task[None] | None = None
        self._revision = 0
        self.applied_revision = 0  # every change up to this store revision is applied (and told)
        # broker -> the revision of the latest partition state that gave it a leadership or took one away
        self._leadership_changed_at: dict[int, int] = {}

    # -- subscriptions --------------------------------------------------------------------
    def on_brokers_changed(self, listener: Callable[[], Any]) -> None:
        self._on_brokers.append(listener)

    def on_partition_changed(self, listener: Callable[[TopicIdPartition, PartitionState | None], Any]) -> None:
        self._on_partition.append(listener)

    def on_controller_changed(self, listener: Callable[[int], Any]) -> None:
        self._on_controller.append(listener)

    # -- queries ----------------------------------------------------------------------------
    def live_ids(self) -> set[int]:
        return set(self.brokers)

    def partitions_of(self, topic_id: str) -> dict[int, PartitionState]:
        return dict(self._by_topic.get(topic_id, {}))

    def leadership_changed_at(self, node_id: int) -> int:
        """The revision of the latest partition state applied here that made `node_id` a
        partition's leader or took the leadership from it (0: none): a broker in controlled
        shutdown waits until its peers have applied it."""
        return self._leadership_changed_at.get(node_id, 0)

    # -- lifecycle --------------------------------------------------------------------------
    async def start(self) -> None:
        """Load everything once (so the broker starts with a full picture), then follow."""
        await self._relist()
        self._task = asyncio.get_running_loop().create_task(self._follow(), name="cluster-view")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _follow(self) -> None:
        while True:
            try:
                async with await self._store.watch("", start_revision=self._revision + 1) as watch:
                    async for event in watch:
                        if event.type is EventType.PUT:
                            await self.apply_put(event.kv)
                        else:
                            await self.apply_delete(event.kv.key)
                        # a revision is applied once all its changes are (a transaction's
                        # come one by one, and applying one lets other tasks run); a watch
                        # that breaks inside one resumes at it, not after it
                        done = event.revision if event.last_in_revision else event.revision - 1
                        self._revision = max(self._revision, done)
                        self.applied_revision = max(self.applied_revision, done)
            except asyncio.CancelledError:
                raise
            except MetadataError as exc:
                log.warning("metadata watch interrupted (%s); listing again", exc)
            except Exception:
                log.exception("metadata watch failed; listing again")
            await self._clock.sleep(RETRY_S)
            try:
                await self._relist()
            except MetadataError as exc:
                log.warning("metadata store unreachable (%s); serving the last known state", exc)

    async def _relist(self) -> None:
        kvs, revision = await self._store.list_with_revision("")
        present = {kv.key for kv in kvs}
        for key in sorted(self._keys - present):
            await self.apply_delete(key)
        for kv in kvs:
            await self.apply_put(kv)
        self._revision = max(self._revision, revision)
        self.applied_revision = max(self.applied_revision, revision)

    async def catch_up(self, deadline_ms: int, poll_s: float) -> int | None:
        """Wait until this view has applied every key as the store holds it now (a listing
        names the store's latest change; the watch must have applied that revision), or
        `deadline_ms` passes on the clock. Returns that revision, or None when the store could
        not be listed or the view did not get there in time. A view lags by as much as its
        watch does (slow, or broken and waiting to list again): a broker that decides from
        it what it still leads (a controlled shutdown) needs it current. The store's own
        revision is no target: in a shared etcd it also counts writes outside this
        cluster's prefix, which no watch here delivers."""
        latest: int | None = None
        while True:
            if latest is None:
                try:
                    latest = max((kv.revision for kv in await self._store.list("")), default=0)
                except MetadataError as exc:
                    log.info("could not list the metadata store to catch up with it (%s); trying again", exc)
            if latest is not None and self.applied_revision >= latest:
                return latest
            if self._clock.monotonic_ms() >= deadline_ms:
                return None
            await self._clock.sleep(poll_s)

    # -- applying changes (also called directly by the writer, before its watch event) -----
    async def apply_put(self, kv: KeyValue) -> None:
        key = kv.key
        self._keys.add(key)
        if key.startswith(records.PARTITION_PREFIX):
            known = self.partitions.get(records.parse_partition_key(key))
            if known is not None and known.revision >= kv.revision:
                return
            state = PartitionState(records.decode(kv.value, records.PartitionStateRecord), kv.revision)
            pid = records.parse_partition_key(key)
            self.partitions[pid] = state
            self._by_topic.setdefault(pid.topic_id, {})[pid.partition] = state
            if known is None or known.record.leader != state.record.leader:
                for node in {state.record.leader, records.NO_LEADER if known is None else known.record.leader}:
                    self._leadership_changed_at[node] = max(self._leadership_changed_at.get(node, 0), kv.revision)
            await self._tell(self._on_partition, pid, state)
            await self._slices.pause_if_due()
        elif key.startswith(records.BROKER_PREFIX):
            record = records.decode(kv.value, records.BrokerRecord)
            if self.brokers.get(record.node_id) != record:
                self.brokers[record.node_id] = record
                await self._tell(self._on_brokers)
        elif key.startswith(records.TOPIC_PREFIX):
            await self._catalog.apply_record(records.decode(kv.value, records.TopicRecord))
        elif key == records.CONTROLLER_KEY:
            node_id = records.decode(kv.value, records.ControllerRecord).node_id
            if node_id != self.controller_id:
                self.controller_id = node_id
                await self._tell(self._on_controller, node_id)

    async def apply_delete(self, key: str) -> None:
        self._keys.discard(key)
        if key.startswith(records.PARTITION_PREFIX):
            pid = records.parse_partition_key(key)
            if self.partitions.pop(pid, None) is not None:
                of_topic = self._by_topic.get(pid.topic_id, {})
                of_topic.pop(pid.partition, None)
                if not of_topic:
                    self._by_topic.pop(pid.topic_id, None)
                await self._tell(self._on_partition, pid, None)
                await self._slices.pause_if_due()
        elif key.startswith(records.BROKER_PREFIX):
            if self.brokers.pop(int(key[len(records.BROKER_PREFIX) :]), None) is not None:
                await self._tell(self._on_brokers)
        elif key.startswith(records.TOPIC_PREFIX):
            await self._catalog.apply_delete(key[len(records.TOPIC_PREFIX) :])
        elif key == records.CONTROLLER_KEY:
            self.controller_id = -1
            await self._tell(self._on_controller, -1)

    @staticmethod
    async def _tell(listeners: list[Callable[..., Any]], *args: Any) -> None:
        for listener in listeners:
            try:
                result = listener(*args)
                if asyncio.iscoroutine(result):
                    await result
            except Exception:
                log.exception("cluster view listener %s failed", listener)
