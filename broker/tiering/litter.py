"""The litter sweep: files under a led partition's tiered prefix that no segment describes.

A segment's files are written by a job, and a job cannot be fenced by the object store: an
old leader's job (its broker deposed, paused, or on a Spark cluster that outlives it) may
upload a range after the new leader's clean-up deleted that range's files and appended
DELETE_SEGMENT_FINISHED, and a job whose broker stops or dies before its commit step never
deletes what it wrote. Nothing names those files any more, so nothing would ever delete
them. Kafka's RemoteLogManager leaves such dangling segments to the storage plugin; here the
leader lists its partition's prefix and deletes the files of segment ids it does not know,
once they are older than twice `tiering.job.timeout.ms` (the bound of any job this cluster
runs: an upload that lands later still gets deleted, by a later pass).

Safe because a segment can only be committed by the leader of the epoch that planned it,
whose log holds the segment's COPY_SEGMENT_STARTED marker: a file of a segment the current
leader knows nothing of (not in its applied set, no marker pending, no job of its own) can
never become readable. "Current" is checked against the metadata store (read now, not the
watched view) before anything is deleted, so a deposed leader, whose set lacks the newer
leader's segments, deletes nothing (as the WAL file manager fences itself on the controller
key).

Bounded: per led partition, one pass every twice `tiering.job.timeout.ms`, one LIST page
(`MAX_LIST_PAGE` keys) per cycle, deletes in pages of `MAX_DELETE_BATCH`; the state is one
cursor per led partition.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.clock import Clock
from broker.metadata import MetadataError
from broker.objectstore.store import MAX_DELETE_BATCH, MAX_LIST_PAGE, ObjectStore, ObjectStoreError
from broker.partition import Partition
from broker.partition_ids import TopicPartition
from walfiles.keys import parse_tiered_segment_key, tiered_partition_prefix

if TYPE_CHECKING:
    from broker.metrics import BrokerMetrics

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Pass:
    started_ms: int
    cursor: str | None  # list after this key ("" from the start); None: the pass is over


class LitterSweeper:
    def __init__(
        self,
        store: ObjectStore,
        cluster_id: Callable[[], str],
        leads: Callable[[Partition], Awaitable[bool]],
        grace_ms: int,
        clock: Clock,
        metrics: BrokerMetrics,
    ) -> None:
        self._store = store
        self._cluster_id = cluster_id
        self._leads = leads
        self._grace_ms = grace_ms
        self._clock = clock
        self._metrics = metrics
        self._passes: dict[TopicPartition, _Pass] = {}

    def forget_others(self, led: set[TopicPartition]) -> None:
        """Drop the state of partitions this broker no longer leads (its one bound)."""
        for key in self._passes.keys() - led:
            del self._passes[key]

    async def sweep(self, partition: Partition, known: Callable[[str], bool]) -> int:
        """One page of this partition's pass (starting one when the last is `grace_ms` old);
        returns the number of segment ids whose litter was deleted. `known(segment_id)`: a
        segment the leader's state or a job of its own names; its files are left alone."""
        now = self._clock.now_ms()
        current = self._passes.get(partition.key)
        if current is None or (current.cursor is None and now - current.started_ms >= self._grace_ms):
            current = self._passes[partition.key] = _Pass(now, "")
        if current.cursor is None:
            return 0  # this pass is over; the next starts `grace_ms` after it did
        prefix = tiered_partition_prefix("", self._cluster_id(), uuid.UUID(partition.topic_id), partition.index)
        cutoff = now - self._grace_ms
        litter: dict[str, list[str]] = {}  # segment id -> its files
        seen: list[str] = []
        try:
            async for info in self._store.list(prefix, start_after=current.cursor or None):
                seen.append(info.key)
                try:
                    segment_id = str(parse_tiered_segment_key(info.key).segment_id)
                except ValueError:
                    segment_id = ""  # not a segment file: not ours to judge
                if segment_id and info.last_modified_ms < cutoff and not known(segment_id):
                    litter.setdefault(segment_id, []).append(info.key)
                if len(seen) >= MAX_LIST_PAGE:
                    break
        except ObjectStoreError as exc:
            log.warning("%s-%d: tiered prefix not listed: %s", partition.topic, partition.index, exc)
            return 0
        if litter and not await self._fenced(partition):
            return 0  # the cursor stays: the page is looked at again next cycle
        # a short page is the end of the listing: the pass is over
        current.cursor = seen[-1] if len(seen) >= MAX_LIST_PAGE else None
        return await self._delete(partition, litter)

    async def _fenced(self, partition: Partition) -> bool:
        try:
            if await self._leads(partition):
                return True
            reason = "the metadata store names another leader or epoch"
        except MetadataError as exc:
            reason = f"the metadata store did not answer ({exc})"
        log.info("%s-%d: litter sweep skipped: %s", partition.topic, partition.index, reason)
        return False

    async def _delete(self, partition: Partition, litter: dict[str, list[str]]) -> int:
        keys = [key for segment_keys in litter.values() for key in segment_keys]
        gone: set[str] = set()
        try:
            for i in range(0, len(keys), MAX_DELETE_BATCH):
                gone.update(await self._store.delete_many(keys[i : i + MAX_DELETE_BATCH]))
        except ObjectStoreError as exc:
            log.warning("%s-%d: tiered litter not deleted yet: %s", partition.topic, partition.index, exc)
        swept = [segment_id for segment_id, segment_keys in litter.items() if gone.issuperset(segment_keys)]
        for segment_id in swept:
            log.info(
                "%s-%d: deleted the files of unknown tiered segment %s (litter of a dead or deposed job)",
                partition.topic,
                partition.index,
                segment_id,
            )
            self._metrics.tiering_segments.labels("litter").inc()
        return len(swept)
