"""ISR changes made by partition leaders: compare-and-set on the partition state.

A leader shrinks the ISR when a follower has not caught up for `replica.lag.time.max.ms`
and expands it when a follower holds everything committed. The write is a compare-and-set
on the state's revision, so it fails (and is forgotten) when the controller or a newer
leader changed the partition first: a deposed leader can never widen or narrow an ISR it
no longer owns. Until the store confirms, the high watermark counts the larger of the old
and proposed ISR (Kafka's "maximal ISR"), so no acknowledgement relies on a change that
might not happen. When the store's answer is ambiguous (MetadataUnavailable: the write may
or may not have happened), the larger ISR is kept until a read of the state tells: the
controller may already be electing from an ISR that holds the new member.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import msgspec

from ..metadata import KeyValue, MetadataError, MetadataUnavailable
from ..metadata import records
from ..partition_ids import TopicIdPartition

if TYPE_CHECKING:
    from ..cluster.view import ClusterView
    from ..clock import Clock
    from ..metadata import MetadataStore
    from ..metrics import BrokerMetrics
    from ..partition import Partition
    from ..replica_manager import ReplicaManager

log = logging.getLogger(__name__)

RESOLVE_BACKOFF_S = 0.5  # between reads of a state whose write had an unknown outcome


class IsrUpdater:
    def __init__(
        self,
        store: "MetadataStore",
        view: "ClusterView",
        replicas: "ReplicaManager",
        clock: "Clock",
        lag_max_ms: int,
        metrics: "BrokerMetrics | None" = None,
    ) -> None:
        self._store = store
        self._metrics = metrics  # shoal_isr_shrinks_total, shoal_isr_expands_total
        self._view = view
        self._replicas = replicas
        self._clock = clock
        self._lag_max_ms = lag_max_ms
        self._task: asyncio.Task[None] | None = None
        self._writes: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._check_lag(), name="isr-shrink")

    async def stop(self) -> None:
        tasks = [t for t in (self._task, *self._writes) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def maybe_expand(self, partition: "Partition", replica_id: int) -> None:
        """Add a caught-up follower to the ISR, if its broker is registered: as Kafka's
        controller refuses an ineligible replica (KIP-841), a broker that lost its lease is
        no candidate, and DeleteRecords does not wait for its log start."""
        leader = partition.leader_state
        if (
            leader is not None
            and replica_id in self._view.brokers
            and replica_id in leader.expand_candidates(partition.log.log_end_offset, partition.log_start_offset)
        ):
            self._propose(partition, sorted(leader.isr | {replica_id}))

    async def _check_lag(self) -> None:
        while True:
            await self._clock.sleep(self._lag_max_ms / 2000)
            now = self._clock.now_ms()
            for partition in list(self._replicas.partitions.values()):
                leader = partition.leader_state
                if leader is None:
                    continue
                lagging = leader.shrink_candidates(now, self._lag_max_ms, partition.log.log_end_offset)
                if lagging:
                    log.info(
                        "%s-%d: followers %s out of sync for more than %d ms",
                        partition.topic,
                        partition.index,
                        sorted(lagging),
                        self._lag_max_ms,
                    )
                    self._propose(partition, sorted(leader.isr - lagging))

    def _propose(self, partition: "Partition", isr: list[int]) -> None:
        state = self._view.partitions.get(TopicIdPartition(partition.topic_id, partition.index))
        leader = partition.leader_state
        if (
            state is None
            or leader is None
            or state.revision != partition.state_revision
            or leader.pending_isr is not None
        ):
            return
        leader.begin_isr_change(isr)
        record = msgspec.structs.replace(state.record, isr=isr, partition_epoch=state.record.partition_epoch + 1)
        task = asyncio.get_running_loop().create_task(self._write(partition, record, state.revision, state.record.isr))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _write(
        self, partition: "Partition", record: records.PartitionStateRecord, revision: int, before: list[int]
    ) -> None:
        key = records.partition_key(partition.topic_id, partition.index)
        value = records.encode(record)
        try:
            new_revision = await self._store.put(key, value, expected_revision=revision)
        except MetadataUnavailable as exc:
            log.warning(
                "%s-%d: ISR change to %s has an unknown outcome (%s): keeping the larger ISR until "
                "the metadata store answers",
                partition.topic,
                partition.index,
                record.isr,
                exc,
            )
            await self._resolve(partition, key, revision)
            return
        except MetadataError as exc:  # a conflict, or a refusal: not applied
            if partition.leader_state is not None:
                partition.leader_state.abort_isr_change()
            log.info("%s-%d: ISR change to %s not applied (%s)", partition.topic, partition.index, record.isr, exc)
            return
        log.info("%s-%d: ISR is now %s", partition.topic, partition.index, record.isr)
        if self._metrics is not None:
            self._metrics.observe_isr_change(before, record.isr)
        await self._view.apply_put(KeyValue(key, value, new_revision))

    async def _resolve(self, partition: "Partition", key: str, revision: int) -> None:
        """Read the state until the store answers: still at `revision` means the write did not
        happen (the committed ISR stands); anything newer goes to the view, which settles the
        pending change with what the store holds (ours, or a later decision)."""
        epoch = partition.leader_epoch
        while (
            partition.leader_state is not None
            and partition.leader_epoch == epoch
            and partition.leader_state.pending_isr is not None
        ):
            try:
                current = await self._store.get(key)
            except MetadataUnavailable:
                await self._clock.sleep(RESOLVE_BACKOFF_S)
                continue
            if current is None:
                return  # the partition was deleted
            if current.revision == revision:
                partition.leader_state.abort_isr_change()
            else:
                await self._view.apply_put(current)
            return
