"""Online mode switches: each leader brings its partitions to their topic's `diskless.enable`.

An operator changes `diskless.enable` (AlterConfigs, IncrementalAlterConfigs, `shoal topics
set-mode`); the topic record then names the mode wanted, and every broker routes clients by
it. Each partition's leader, on the change and on every tick, compares the mode its log is
appended in (the last mode marker, log/modes.py) with the topic's, and when they differ
switches: seals the active segment, appends a mode marker, and from then on accepts only the
new mode's appends (Partition.switch_mode). Appends of the old mode that arrive later, such
as a commit of a WAL object uploaded before the switch, are refused with a retriable error,
so a batch lands wholly before the marker or is retried after it; producer state is the
partition's and carries across.

Once the marker is committed (the high watermark passed it), the leader writes the mode and
the marker's offset into the partition state in the metadata store (compare-and-set, like an
ISR change), so every broker can show the switch's progress (`shoal topics describe`,
DescribeConfigs' `diskless.mode.status`). A partition without a leader switches when it gets
one: a new leader runs the same check, and a marker it does not hold (lost with the old
leader's uncommitted tail) is simply appended again.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import msgspec

from ..loop_slices import LoopSlices
from ..metadata import KeyValue, MetadataError
from .status import recorded_mode
from ..metadata import records
from ..partition_ids import TopicIdPartition, TopicPartition
from ..producers.open_transactions import open_transaction_age_s
from ..protocol.errors import ApiError

if TYPE_CHECKING:
    from ..clock import Clock
    from ..cluster.view import ClusterView
    from ..metadata import MetadataStore
    from ..metrics import BrokerMetrics
    from ..partition import Partition
    from ..replica_manager import ReplicaManager
    from ..topics import Topic, TopicCatalog

log = logging.getLogger(__name__)

TICK_S = 0.5  # how often leaders look at the partitions whose switch is unfinished
FULL_PASS_S = 10.0  # how often they look at every partition without being woken (a safety net)


def mode_name(diskless: bool) -> str:
    return "diskless" if diskless else "classic"


class ModeSwitcher:
    def __init__(
        self,
        replicas: ReplicaManager,
        catalog: TopicCatalog,
        view: ClusterView,
        store: MetadataStore,
        clock: Clock,
        metrics: BrokerMetrics,
    ) -> None:
        self._replicas = replicas
        self._catalog = catalog
        self._view = view
        self._store = store
        self._clock = clock
        self._metrics = metrics
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._writing: set[TopicIdPartition] = set()
        self._unfinished: list[Partition] = []  # led partitions the last pass did not finish
        # partitions whose state or role changed since the last pass (a dict: ordered, deterministic)
        self._changed: dict[TopicPartition, Partition] = {}
        self._full_pass_due = True
        self._last_full_pass = clock.monotonic()
        catalog.subscribe(self._on_topic)
        replicas.on_role_changed(self._on_role_changed)
        metrics.led_partitions.source = self.led_partition_rows
        metrics.leader_partitions_by_mode.labels("diskless").set_function(lambda: self.led_by_mode(True))
        metrics.leader_partitions_by_mode.labels("classic").set_function(lambda: self.led_by_mode(False))
        metrics.producer_sequence_barriers.labels("leader").set_function(self.leader_barriers)
        metrics.transaction_permits.set_function(self.transaction_permits)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="mode-switch")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def wake(self) -> None:
        """A topic's config changed: look at every partition now, not at the next tick."""
        self._full_pass_due = True
        self._wake.set()

    def _on_role_changed(self, partition: Partition) -> None:
        """A partition's state or leadership changed: look at it now. Only at it: a failover
        or a restart changes thousands, and a full pass for each change made the passes
        quadratic (issue 28: most of a broker's time after a kill at 10,000 partitions)."""
        self._changed[partition.key] = partition
        self._wake.set()

    async def _on_topic(self, _name: str, _topic: Topic | None) -> None:
        self.wake()

    async def _run(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), TICK_S)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()
            try:
                await self.reconcile()
            except Exception:
                log.exception("mode switch check failed")

    async def reconcile(self) -> None:
        """Switch every led partition whose mode is not its topic's and publish committed
        switches. A full pass looks at every led partition; other ticks look only at those
        the last pass left unfinished, so an idle broker's tick costs nothing per partition
        (issue 28: a pass over 20,000 partitions twice a second was most of its idle CPU).
        A full pass runs when a topic changed and every FULL_PASS_S as a safety net; a
        partition whose state or role changed is looked at in the next pass."""
        now = self._clock.monotonic()
        full = self._full_pass_due or now - self._last_full_pass >= FULL_PASS_S
        changed, self._changed = self._changed, {}
        if full:
            self._full_pass_due = False
            self._last_full_pass = now
            candidates = list(self._replicas.partitions.values())
        else:
            looked = dict.fromkeys(p.key for p in self._unfinished)
            candidates = [p for p in self._unfinished if self._replicas.partitions.get(p.key) is p]
            candidates += [
                p for key, p in changed.items() if key not in looked and self._replicas.partitions.get(key) is p
            ]
        unfinished: list[Partition] = []
        slices = LoopSlices(self._clock)
        for partition in candidates:
            await slices.pause_if_due()
            topic = self._catalog.get(partition.topic)
            if partition.leader_state is None or topic is None:
                continue
            wanted = topic.settings.diskless
            if partition.diskless != wanted:
                self._switch(partition, wanted)
            if not await self._publish(partition, topic):
                unfinished.append(partition)
        self._unfinished = unfinished
        self._metrics.mode_switch_pending_partitions.set(len(unfinished))

    def led_partition_rows(self) -> dict[tuple[str, str], tuple[float, ...]]:
        """BrokerMetrics.led_partitions' rows, read at scrape time (on the event loop, where
        the metrics listener runs): one per partition led here."""
        now_ms = self._clock.now_ms()
        rows: dict[tuple[str, str], tuple[float, ...]] = {}
        for partition in self._led():
            plog = partition.log
            rows[(partition.topic, str(partition.index))] = (
                1 if partition.diskless else 0,
                partition.modes.boundary(),
                plog.size_bytes,
                partition.log_start_offset,
                plog.log_end_offset,
                plog.high_watermark,
                open_transaction_age_s(partition.producers, now_ms),
            )
        return rows

    def led_by_mode(self, diskless: bool) -> int:
        """shoal_leader_partitions_by_mode, at scrape time."""
        return sum(1 for partition in self._led() if partition.diskless == diskless)

    def leader_barriers(self) -> int:
        """shoal_producer_sequence_barriers{where="leader"}, at scrape time."""
        return sum(len(partition.barriers) for partition in self._led())

    def transaction_permits(self) -> int:
        """shoal_transaction_permits, at scrape time."""
        return sum(partition.producers.permit_count for partition in self._led())

    def _led(self) -> list[Partition]:
        return [
            partition
            for partition in self._replicas.partitions.values()
            if partition.leader_state is not None and self._catalog.get(partition.topic) is not None
        ]

    def _switch(self, partition: Partition, diskless: bool) -> None:
        try:
            partition.switch_mode(diskless)
        except (ApiError, OSError) as exc:  # the disk refused the roll or the marker: the next tick tries again
            log.warning("%s-%d: switching to %s failed: %s", partition.topic, partition.index, mode_name(diskless), exc)
            return
        self._metrics.mode_switches.labels(mode_name(diskless)).inc()

    async def _publish(self, partition: Partition, topic: Topic) -> bool:
        """Write the partition's committed mode into its state; True when the store already
        holds the topic's mode (nothing left to do for this partition)."""
        pid = TopicIdPartition(partition.topic_id, partition.index)
        state = self._view.partitions.get(pid)
        if state is None:
            return False
        boundary = partition.modes.boundary()
        current = (partition.diskless, boundary)
        if recorded_mode(state.record, topic) == current:
            return partition.diskless == topic.settings.diskless
        leader = partition.leader_state
        if (
            boundary >= partition.log.high_watermark  # the marker is not committed yet
            or leader is None
            or leader.pending_isr is not None
            or state.revision != partition.state_revision
            or pid in self._writing
        ):
            return False
        record = msgspec.structs.replace(
            state.record,
            diskless=partition.diskless,
            mode_offset=boundary,
            partition_epoch=state.record.partition_epoch + 1,
        )
        key = records.partition_key(partition.topic_id, partition.index)
        value = records.encode(record)
        self._writing.add(pid)
        try:
            revision = await self._store.put(key, value, expected_revision=state.revision)
        except MetadataError as exc:  # a conflict or an unknown outcome: the next tick looks again
            log.info("%s-%d: recording the mode switch deferred (%s)", partition.topic, partition.index, exc)
            return False
        finally:
            self._writing.discard(pid)
        log.info(
            "%s-%d: %s from offset %d (committed)",
            partition.topic,
            partition.index,
            mode_name(partition.diskless),
            boundary,
        )
        await self._view.apply_put(KeyValue(key, value, revision))
        return partition.diskless == topic.settings.diskless
