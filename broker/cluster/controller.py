"""The controller: one broker, elected through the store, that decides leadership.

Election: the `controller` key is created only when absent, under the broker's lease, so it
disappears with its holder and any broker may take over. The active controller reconciles
every partition against the live brokers whenever membership, topics or the controller
change (and every FULL_PASS_S as a safety net), and at every heartbeat interval the
partitions whose state changed since: dead brokers leave the ISR, dead leaders are replaced
(elections.py), partitions without a state (written by an older version, or a creation cut
short) get one, and every `leader.imbalance.check.interval.seconds` leadership moves back
to preferred replicas. Every write is a compare-and-set on the partition state's revision,
so a concurrent ISR change by a leader, or a deposed controller, can never overwrite a newer
decision. One pass's decisions go to the store in transactions of up to 128 writes (etcd's
default --max-txn-ops): a broker's death is a few round trips, not one per partition.

Controlled shutdown: a broker whose registration says `draining` is live but no leader
candidate; reconciling moves its leaderships to other in-sync replicas (elections.py) and
gives it no new ones. A draining broker never campaigns, and a draining controller keeps
reconciling (so it moves its own leaderships) until its broker calls `hand_over`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..metadata import KeyValue, MetadataError, RevisionConflict
from ..metadata import records
from ..metadata.store import MAX_REQUEST_BYTES, MAX_TXN_OPS
from . import elections
from ..partition_ids import TopicIdPartition
from ..loop_slices import LoopSlices
from .placement import assign_replicas

if TYPE_CHECKING:
    from ..clock import Clock
    from ..config import BrokerConfig
    from ..metadata import MetadataStore
    from ..metrics import BrokerMetrics
    from ..randomness import Random
    from ..topics import TopicCatalog
    from .registration import Membership
    from .view import ClusterView

log = logging.getLogger(__name__)

FULL_PASS_S = 10.0  # how often the controller looks at every partition without being woken


class Controller:
    def __init__(
        self,
        store: "MetadataStore",
        view: "ClusterView",
        catalog: "TopicCatalog",
        membership: "Membership",
        config: "BrokerConfig",
        clock: "Clock",
        rng: "Random",
    ) -> None:
        self._store = store
        self._random = rng
        self._view = view
        self._catalog = catalog
        self._membership = membership
        self._config = config
        self._clock = clock
        self.active = False
        self.metrics: BrokerMetrics | None = None  # set by the broker: election counters
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self._last_rebalance_ms = clock.monotonic_ms()
        # Partitions whose state changed since the last pass (the only ones whose decision can
        # differ, while brokers and topics stay as they were), and whether the next pass must
        # look at every partition: after a broker, topic or controller change, a failed pass,
        # and every FULL_PASS_S as a safety net.
        self._changed: set[TopicIdPartition] = set()
        self._full_pass_due = True
        self._last_full_pass_ms = clock.monotonic_ms()
        view.on_brokers_changed(self.wake)
        view.on_controller_changed(lambda _node: self.wake())
        view.on_partition_changed(lambda pid, _state: self._changed.add(pid))
        catalog.subscribe(self._on_topic)
        membership.on_new_lease(lambda _lease: self._resign("broker lease renewed"))

    def wake(self) -> None:
        """Reconcile every partition now (brokers, topics or the controller changed)."""
        self._full_pass_due = True
        self._wake.set()

    async def _on_topic(self, _name: str, _topic: object) -> None:
        self.wake()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="controller")

    async def stop(self) -> None:
        self._stopped = True  # Python 3.11's wait_for drops a cancel that meets a wake-up
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def _resign(self, why: str) -> None:
        if self.active:
            log.warning("controller %d resigns: %s", self._config.node_id, why)
        self.active = False
        self.wake()

    async def _run(self) -> None:
        interval_s = self._config.broker_heartbeat_interval_ms / 1000
        while not self._stopped:
            self._wake.clear()
            try:
                await self.step()
            except MetadataError as exc:
                log.warning("controller step failed (%s); retrying", exc)
            except Exception:
                log.exception("controller step failed")
            try:
                await asyncio.wait_for(self._wake.wait(), interval_s)
            except asyncio.TimeoutError:
                pass

    async def step(self) -> None:
        """Campaign if nobody holds the controller key; reconcile if we do."""
        node_id = self._config.node_id
        if self.active and self._view.controller_id not in (node_id, -1):
            self._resign(f"broker {self._view.controller_id} holds the controller key")
        if not self.active and self._view.controller_id == node_id:
            await self._reclaim()
        if not self.active and self._view.controller_id == -1:
            await self._campaign()
        if self.active:
            await self.reconcile()
        else:
            self._changed.clear()  # taking over starts with a full pass

    async def hand_over(self) -> None:
        """Controlled shutdown: stop deciding and, if this process holds the controller key,
        delete it, so a broker that is not draining takes over now rather than when this
        one's lease goes. This controller never campaigns again."""
        await self.stop()
        was_active, self.active = self.active, False
        if not was_active:
            return
        try:
            current = await self._store.get(records.CONTROLLER_KEY)
            if current is None:
                return
            holder = records.decode(current.value, records.ControllerRecord)
            if holder.node_id != self._config.node_id or holder.incarnation != self._membership.record.incarnation:
                return
            await self._store.delete(records.CONTROLLER_KEY, expected_revision=current.revision)
        except (RevisionConflict, MetadataError) as exc:
            log.warning("controller %d could not hand over (%s); its lease ends the role", self._config.node_id, exc)
            return
        log.info("controller %d hands over (controlled shutdown)", self._config.node_id)

    async def _campaign(self) -> None:
        lease = self._membership.lease
        if lease is None or self._membership.record.draining:
            return
        record = records.ControllerRecord(
            records.RECORD_VERSION, self._config.node_id, self._membership.record.incarnation
        )
        try:
            revision = await self._store.txn(
                {records.CONTROLLER_KEY: 0}, puts={records.CONTROLLER_KEY: records.encode(record)}, lease=lease
            )
        except RevisionConflict:
            return
        self.active = True
        await self._view.apply_put(KeyValue(records.CONTROLLER_KEY, records.encode(record), revision, lease.id))
        log.info("broker %d is the controller", self._config.node_id)

    async def _reclaim(self) -> None:
        """The key names this node but this process is not active: a campaign whose answer
        was lost (the write applied, the reply did not arrive). Nobody else campaigns while
        the key exists, and it lives as long as our lease: take it up if it is this
        incarnation's, under our current lease, or the cluster has no controller for good."""
        lease = self._membership.lease
        current = await self._store.get(records.CONTROLLER_KEY)
        if lease is None or current is None or current.lease != lease.id:
            return
        holder = records.decode(current.value, records.ControllerRecord)
        if holder.node_id == self._config.node_id and holder.incarnation == self._membership.record.incarnation:
            self.active = True
            log.info("broker %d is the controller (its campaign's answer was lost)", self._config.node_id)

    async def reconcile(self) -> None:
        """One pass. A full pass looks at every partition; between them, a pass looks only at
        the partitions whose state changed since the last one (none, on an idle cluster: a
        heartbeat tick then costs nothing per partition). A decision depends only on the
        partition's state, the live and draining brokers and the topic's settings, and any
        change of the last three wakes a full pass; a decision the last pass wrote, or failed
        to write for a conflict, changed the state it was made for."""
        live = {b.node_id for b in self._view.brokers.values() if not b.stateless}
        if not live:
            return
        now_ms = self._clock.monotonic_ms()
        full = self._full_pass_due or now_ms - self._last_full_pass_ms >= FULL_PASS_S * 1000
        changed, self._changed = self._changed, set()
        if full:
            self._full_pass_due, self._last_full_pass_ms = False, now_ms
        try:
            await self._reconcile(live, full, changed)
        except BaseException:
            self._full_pass_due = True  # decisions may be unwritten: look at everything again
            raise

    async def _reconcile(self, live: set[int], full: bool, changed: set[TopicIdPartition]) -> None:
        draining = {b.node_id for b in self._view.brokers.values() if b.draining and b.node_id in live}
        if full:
            await self._create_missing_states(live - draining or live)
        # the topic's unclean.leader.election.enable, else this broker's (its synonym)
        unclean = {str(t.topic_id) for t in self._catalog.all() if t.settings.unclean_leader_election}
        decisions: list[Decision] = []
        slices = LoopSlices(self._clock)
        # in the view's order either way, so that a pass writes its decisions in the same order
        if full:
            looked_at = list(self._view.partitions)
        elif changed:
            looked_at = [pid for pid in self._view.partitions if pid in changed]
        else:
            looked_at = []
        for pid in looked_at:
            await slices.pause_if_due()
            state = self._view.partitions.get(pid)  # the newest: the pass may have yielded
            if state is None:
                continue
            new = elections.reconcile(state.record, live, pid.topic_id in unclean, draining)
            if new is not None:
                if new.leader != state.record.leader:
                    log.info(
                        "partition %s/%d: leader %d -> %d (epoch %d), isr %s",
                        *pid,
                        state.record.leader,
                        new.leader,
                        new.leader_epoch,
                        new.isr,
                    )
                decisions.append((pid, new, state.revision))
        await self._write_all(decisions)
        now = self._clock.monotonic_ms()
        if (
            self._config.auto_leader_rebalance_enable
            and now - self._last_rebalance_ms >= self._config.leader_imbalance_check_interval_seconds * 1000
        ):
            self._last_rebalance_ms = now
            decisions = []
            for pid, state in list(self._view.partitions.items()):
                new = elections.preferred_leader(state.record, live, draining)
                if new is not None:
                    log.info(
                        "partition %s/%d: preferred leader %d takes over (epoch %d)", *pid, new.leader, new.leader_epoch
                    )
                    decisions.append((pid, new, state.revision))
            await self._write_all(decisions)

    async def _create_missing_states(self, live: set[int]) -> None:
        brokers = [(b.node_id, b.az) for b in self._view.brokers.values() if b.node_id in live]
        decisions: list[Decision] = []
        for topic in self._catalog.all():
            missing = [
                i
                for i in range(topic.partitions)
                if TopicIdPartition.of(topic.topic_id, i) not in self._view.partitions
            ]
            if not missing:
                continue
            factor = min(len(brokers), 1 if not topic.internal else self._config.offsets_topic_replication_factor)
            assignment = assign_replicas(missing, factor, brokers, start=self._random.randrange(len(brokers)))
            for index, replicas in assignment.items():
                record = records.PartitionStateRecord(records.RECORD_VERSION, replicas, replicas[0], 0, replicas)
                decisions.append((TopicIdPartition.of(topic.topic_id, index), record, 0))
        await self._write_all(decisions)

    async def _write_all(self, decisions: list[Decision]) -> None:
        """Write decisions in as few store transactions as etcd's limits allow: a broker's
        death changes every partition it led or followed, and one compare-and-set round
        trip each made the last of a thousand wait over a minute for its new leader. The
        writes are applied to this broker's view only after the last transaction: applying
        them takes this broker's own new roles up, milliseconds each, and with that between
        transactions the last of 3,350 leaderships moved by a controller that took half of
        them was written 4 s after the first (issue 28)."""
        written: list[KeyValue] = []
        try:
            for batch in write_batches(decisions):
                await self._write_batch(batch, written)
        finally:  # what was written before a failure, too: the next pass decides from it
            for kv in written:
                await self._view.apply_put(kv)

    async def _write_batch(self, batch: list[Decision], written: list[KeyValue]) -> None:
        """One transaction, every write a compare-and-set, its writes added to `written`. A
        conflict (a leader changed its ISR meanwhile, or the view lags) fails the whole
        transaction, so the batch is split in halves until the conflicting partition is
        written alone and looked at again."""
        if len(batch) == 1:
            await self._write(*batch[0])
            return
        writes = {records.partition_key(*pid): (pid, record, revision) for pid, record, revision in batch}
        values = {key: records.encode(record) for key, (_pid, record, _rev) in writes.items()}
        try:
            new_revision = await self._store.txn(
                {key: revision for key, (_pid, _record, revision) in writes.items()}, puts=values
            )
        except RevisionConflict:
            half = len(batch) // 2
            await self._write_batch(batch[:half], written)
            await self._write_batch(batch[half:], written)
            return
        for key, (pid, record, _revision) in writes.items():
            self._observe(pid, record)
            written.append(KeyValue(key, values[key], new_revision))

    def _observe(self, pid: TopicIdPartition, record: records.PartitionStateRecord) -> None:
        if self.metrics is not None:
            before = self._view.partitions.get(pid)
            self.metrics.observe_leader_assignment(before.record if before is not None else None, record)

    async def _write(self, pid: TopicIdPartition, record: records.PartitionStateRecord, revision: int) -> None:
        key = records.partition_key(*pid)
        value = records.encode(record)
        try:
            new_revision = await self._store.put(key, value, expected_revision=revision)
        except RevisionConflict:
            # Someone changed it first: look again with the store's state, not the view's,
            # which may lag behind (a slow watch) and would only conflict again.
            current = await self._store.get(key)
            if current is None:
                await self._view.apply_delete(key)
            else:
                await self._view.apply_put(current)
            self.wake()
            return
        self._observe(pid, record)
        await self._view.apply_put(KeyValue(key, value, new_revision))


# (partition, the state to write, the revision it must still have; 0 = absent)
Decision = tuple[TopicIdPartition, records.PartitionStateRecord, int]


def write_batches(decisions: list[Decision]) -> Iterator[list[Decision]]:
    """Consecutive runs of decisions that fit one store transaction (MAX_TXN_OPS writes,
    MAX_REQUEST_BYTES of keys and values)."""
    batch: list[Decision] = []
    size = 0
    for decision in decisions:
        pid, record, _revision = decision
        nbytes = len(records.partition_key(*pid)) + len(records.encode(record))
        if batch and (len(batch) == MAX_TXN_OPS or size + nbytes > MAX_REQUEST_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(decision)
        size += nbytes
    if batch:
        yield batch
