"""The offload service: on each broker, for the partitions it leads with
`remote.storage.enable`, plan ready ranges, run a tiering job (diskless topics; classic
ones are copied by the broker itself), commit what it produced, and apply retention to
tiered segments (docs/architecture.md "Tiering").

One cycle (every `tiering.interval.ms`, or on `shoal tiering run`):

1. Clean up: a COPY_SEGMENT_STARTED segment that no job of this leader is working on (its job
   died, or another leader planned it), every segment wholly below the log start offset
   (DeleteRecords) and every segment past `retention.ms`/`retention.bytes` (across tiers) get
   DELETE_SEGMENT_STARTED, their files deleted, DELETE_SEGMENT_FINISHED. Then the litter
   sweep (litter.py) deletes files under the partition's prefix that no segment describes
   (a deposed or dead job's late or orphaned uploads), once older than any job can run.
2. Plan (planner.py) and append one COPY_SEGMENT_STARTED marker per range; once replicated,
   write the plan object and run the job (runner.py).
3. Commit: for each range whose result manifest exists and matches the plan, and whose
   partition this broker still leads *in the planning epoch*, append COPY_SEGMENT_FINISHED.
   A job planned under an old leader can never commit: its epoch no longer matches, and its
   STARTED segment is cleaned up by step 1. Once FINISHED is committed, local retention may
   drop the superseded local entries, and the WAL file manager then deletes the WAL objects
   only they referenced.

Nothing here is on the produce or fetch path: a missing Spark or a failing job leaves
produce and consume working, with a backlog that `shoal_tiering_backlog_bytes` shows. After
a failed job the next cycle waits twice as long (up to an hour), so a broken setup does not
append markers every interval.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from broker.clock import Clock
from broker.config import BrokerConfig
from broker.log.markers import EVENT_VERSION, RemoteSegmentEvent, RemoteSegmentState
from broker.log.remote_segments import RemoteSegment
from broker.objectstore.store import MAX_DELETE_BATCH, NotFound, ObjectStore, ObjectStoreError
from broker.tiering.litter import LitterSweeper
from broker.tiering.planner import ReadyRange, backlog_bytes, plan_range, ready_ranges
from broker.tiering.runner import JobOutcome, TieringJobs
from broker.partition import Partition
from broker.partition_ids import TopicPartition
from broker.protocol.errors import ApiError
from tiering.assemble import AssemblyError, assemble_range
from tiering.plan import PLAN_VERSION, Plan, PlanFormatError, RangePlan, SegmentManifest, decode_manifest, encode_plan
from walfiles.keys import SegmentFile, format_plan_key, format_tiered_segment_key, plans_prefix

if TYPE_CHECKING:
    from broker.metrics import BrokerMetrics

log = logging.getLogger(__name__)

REPLICATION_WAIT_S = 30.0  # for the STARTED markers to commit before the job runs
MAX_BACKOFF_MS = 3_600_000
DISCARD_ATTEMPTS = 3  # bulk deletes of an uncommitted range's files, for the keys a store refused


@dataclass(frozen=True, slots=True)
class OffloadSettings:
    enable: bool
    interval_ms: int
    max_ranges_per_job: int
    max_job_bytes: int
    job_timeout_ms: int

    @classmethod
    def from_config(cls, config: BrokerConfig) -> "OffloadSettings":
        return cls(
            config.tiering_enable,
            config.tiering_interval_ms,
            config.tiering_max_ranges_per_job,
            config.tiering_max_job_bytes,
            config.tiering_job_timeout_ms,
        )


@dataclass(slots=True)
class PartitionStatus:
    """What `shoal tiering status` shows for one led partition."""

    topic: str
    partition: int
    tiered_segments: int
    tiered_bytes: int
    tiered_start: int
    tiered_end: int
    local_start: int
    backlog_bytes: int


@dataclass(slots=True)
class RunReport:
    """One cycle's outcome, kept for `shoal tiering status`."""

    started_ms: int
    finished_ms: int = 0
    planned: int = 0
    committed: int = 0
    deleted: int = 0
    litter: int = 0  # segment ids whose files the litter sweep deleted
    failed: list[str] = field(default_factory=list)  # "topic-partition@offset: why"
    job_error: str = ""


class OffloadService:
    def __init__(
        self,
        partitions: Callable[[], list[Partition]],
        store: ObjectStore,
        cluster_id: Callable[[], str],
        runner: TieringJobs,
        settings: OffloadSettings,
        clock: Clock,
        metrics: BrokerMetrics,
        new_uuid: Callable[[], uuid.UUID],
        leads: Callable[[Partition], Awaitable[bool]],
    ) -> None:
        self._partitions = partitions
        self._store = store
        self._cluster_id = cluster_id
        self._runner = runner
        self._settings = settings
        self._clock = clock
        self._metrics = metrics
        self._new_uuid = new_uuid
        self._in_flight: set[str] = set()  # segment ids a job of this broker is working on
        self._deleting: set[str] = set()  # segment ids marked DELETE_SEGMENT_STARTED, not committed yet
        # a job runs at most job_timeout_ms (it is killed then): twice that outlasts any upload
        self._litter = LitterSweeper(store, cluster_id, leads, 2 * settings.job_timeout_ms, clock, metrics)
        self._lock = asyncio.Lock()  # one cycle at a time (the loop and `shoal tiering run`)
        self._task: asyncio.Task[None] | None = None
        self._triggered: asyncio.Task[RunReport] | None = None
        self._failures = 0
        self.last_run: RunReport | None = None
        self.last_success_ms = 0
        metrics.tiering_backlog_bytes.set_function(lambda: self._backlog())

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        for task in (self._task, self._triggered):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    def trigger(self, topic: str | None = None, index: int | None = None) -> None:
        """Start a cycle now without waiting for it (`shoal tiering run` without --wait)."""
        if self._triggered is None or self._triggered.done():
            self._triggered = asyncio.get_running_loop().create_task(self.run_once(topic, index))

    async def _loop(self) -> None:
        while True:
            wait = min(self._settings.interval_ms * (2 ** min(self._failures, 10)), MAX_BACKOFF_MS)
            await self._clock.sleep(wait / 1000)
            try:
                report = await self.run_once()
            except Exception:
                log.exception("tiering cycle failed")
                self._failures += 1
                continue
            self._failures = self._failures + 1 if report.job_error or report.failed else 0

    def eligible(self, topic: str | None = None, index: int | None = None) -> list[Partition]:
        """Led partitions with tiered storage on (optionally one topic or partition)."""
        return [
            p
            for p in self._partitions()
            if p.leader_state is not None
            and p.settings.remote_storage
            and (topic is None or p.topic == topic)
            and (index is None or p.index == index)
        ]

    def status(self) -> list[PartitionStatus]:
        now = self._clock.now_ms()
        return [
            PartitionStatus(
                p.topic,
                p.index,
                len(p.remote_segments.readable),
                p.remote_segments.size_bytes,
                p.log_start_offset,
                p.remote_segments.tiered_end,
                p.log.log_start_offset,
                backlog_bytes(p, now),
            )
            for p in self.eligible()
        ]

    def _backlog(self) -> int:
        now = self._clock.now_ms()
        return sum(backlog_bytes(p, now) for p in self.eligible())

    async def run_once(self, topic: str | None = None, index: int | None = None) -> RunReport:
        async with self._lock:
            report = RunReport(started_ms=self._clock.now_ms())
            self.last_run = report
            partitions = self.eligible(topic, index)
            for partition in partitions:
                report.deleted += await self._clean_up(partition)
                report.litter += await self._sweep_litter(partition)
            if topic is None and index is None:
                self._litter.forget_others({p.key for p in partitions})
            if partitions:
                await self._sweep_plans()
            plan_id = str(self._new_uuid())
            before = set(self._in_flight)
            try:
                await self._plan_and_run(plan_id, partitions, report)
            finally:  # even when cancelled (the broker stops): nothing stays in flight
                self._in_flight &= before
            report.finished_ms = self._clock.now_ms()
            if not report.job_error and not report.failed:
                self.last_success_ms = report.finished_ms
                self._metrics.tiering_last_success.set(report.finished_ms / 1000)
            return report

    async def _plan_and_run(self, plan_id: str, partitions: list[Partition], report: RunReport) -> None:
        ranges = await self._plan(plan_id, partitions, report)
        # A partition's ranges all go one way (each way commits them in order). The job reads
        # WAL objects and inline batches alike, so a partition goes to it when it is diskless
        # or any of its ranges references the WAL (a classic topic switched from diskless).
        by_job = {p.key for p, r in ranges if p.settings.diskless or r.references_wal}
        diskless = [(p, r) for p, r in ranges if p.key in by_job]
        classic = [(p, r) for p, r in ranges if p.key not in by_job]
        if diskless:
            await self._run_job(plan_id, diskless, report)
        if classic:
            await self._copy_classic(plan_id, classic, report)

    # -- 1. clean up ---------------------------------------------------------------------------
    async def _clean_up(self, partition: Partition) -> int:
        """Mark orphaned, dropped (wholly below the log start offset) and expired segments
        DELETE_SEGMENT_STARTED; delete the files of those whose mark has committed (readers
        no longer see them) and mark them finished."""
        remote = partition.remote_segments
        abandoned = [  # no job of ours works on it, and no marker of it waits to commit
            s
            for s in remote.in_state(RemoteSegmentState.COPY_SEGMENT_STARTED)
            if s.segment_id not in self._in_flight and not remote.has_pending(s.segment_id)
        ]
        doomed = [(s, "abandoned") for s in abandoned] + [(s, "below the log start") for s in remote.below_log_start()]
        for segment, why in doomed + [(s, "expired") for s in self._expired(partition)]:
            if segment.segment_id in self._deleting and (
                remote.has_pending(segment.segment_id) or segment.state == RemoteSegmentState.DELETE_SEGMENT_STARTED
            ):
                continue  # marked in an earlier cycle: the mark waits to commit, or has committed
            # (otherwise the mark was lost with an unreplicated tail when leadership moved:
            # make it again, or the segment stays COPY_SEGMENT_STARTED for ever; tiering seed 690260)
            try:
                log.info(
                    "%s-%d: deleting tiered segment %s [%d, %d] (%s)",
                    partition.topic,
                    partition.index,
                    segment.segment_id,
                    segment.base_offset,
                    segment.end_offset,
                    why,
                )
                self._mark(partition, segment, RemoteSegmentState.DELETE_SEGMENT_STARTED)
                self._deleting.add(segment.segment_id)
            except ApiError as exc:
                log.warning(
                    "%s-%d: cannot mark %s for deletion: %s", partition.topic, partition.index, segment.segment_id, exc
                )
        deleted = 0
        for segment in remote.in_state(RemoteSegmentState.DELETE_SEGMENT_STARTED):
            try:
                keys = [
                    self._key(partition.topic_id, partition.index, segment.base_offset, segment.segment_id, f)
                    for f in SegmentFile
                ]
                refused = sorted(set(keys) - set(await self._store.delete_many(keys)))
                if refused:
                    log.warning("%s-%d: could not delete %s; will retry", partition.topic, partition.index, refused)
                    continue
                self._mark(partition, segment, RemoteSegmentState.DELETE_SEGMENT_FINISHED)
            except (ApiError, ObjectStoreError) as exc:
                log.warning(
                    "%s-%d: tiered segment %s not deleted yet: %s",
                    partition.topic,
                    partition.index,
                    segment.segment_id,
                    exc,
                )
                continue
            self._deleting.discard(segment.segment_id)
            deleted += 1
            self._metrics.tiering_segments.labels("deleted").inc()
        return deleted

    async def _sweep_litter(self, partition: Partition) -> int:
        """Files under the partition's prefix of segments nobody knows (litter.py): a segment
        is known when applied, when a marker of it waits to commit, or a job of ours has it."""
        remote = partition.remote_segments
        known = {s.segment_id for s in remote.segments} | self._in_flight | self._deleting
        return await self._litter.sweep(
            partition, lambda segment_id: segment_id in known or remote.has_pending(segment_id)
        )

    async def _sweep_plans(self) -> None:
        """Delete plans older than twice `tiering.job.timeout.ms`: their job is over, and
        their broker died before deleting them (it deletes its own after every job)."""
        cutoff = self._clock.now_ms() - 2 * self._settings.job_timeout_ms
        try:
            stale = [
                info.key
                async for info in self._store.list(plans_prefix("", self._cluster_id()))
                if info.last_modified_ms < cutoff
            ]
            if stale:
                await self._store.delete_many(stale[:MAX_DELETE_BATCH])
        except ObjectStoreError as exc:
            log.warning("old tiering plans not swept: %s", exc)

    def _expired(self, partition: Partition) -> list[RemoteSegment]:
        """Readable segments past retention.ms or beyond retention.bytes, oldest first; Kafka's
        retention for a topic with tiered storage. The size counts each offset once, as
        Kafka's RemoteLogManager does (the tiered segments, plus the local log above the
        tiered end: what is both tiered and still local is counted in the tiered size only)."""
        cfg = partition.settings.log
        now = self._clock.now_ms()
        remote = partition.remote_segments
        readable = remote.readable
        total = 0  # only with a size limit: the local size may take a walk of entry heads
        if cfg.retention_bytes >= 0:
            total = remote.size_bytes + partition.log.size_bytes_from(remote.tiered_end)
        expired = []
        for segment in readable:
            by_time = cfg.retention_ms >= 0 and now - segment.max_timestamp_ms > cfg.retention_ms
            by_size = cfg.retention_bytes >= 0 and total - segment.size_bytes >= cfg.retention_bytes
            if not (by_time or by_size):
                break
            expired.append(segment)
            total -= segment.size_bytes
        return expired

    # -- 2. plan ---------------------------------------------------------------------------------
    async def _plan(
        self, plan_id: str, partitions: list[Partition], report: RunReport
    ) -> list[tuple[Partition, RangePlan]]:
        now = self._clock.now_ms()
        budget_ranges, budget_bytes = self._settings.max_ranges_per_job, self._settings.max_job_bytes
        chosen: list[tuple[Partition, ReadyRange]] = []
        for partition in partitions:
            if budget_ranges <= 0 or budget_bytes <= 0:
                break
            ready = ready_ranges(partition, now, budget_ranges, budget_bytes)
            budget_ranges -= len(ready)
            budget_bytes -= sum(r.batch_bytes for r in ready)
            chosen += [(partition, r) for r in ready]
        planned: list[tuple[Partition, RangePlan, int]] = []
        for partition, one in chosen:
            try:
                plan = plan_range(partition, one, plan_id)
                offset = partition.append_marker(_event(plan, RemoteSegmentState.COPY_SEGMENT_STARTED, plan_id))
            except ApiError as exc:
                report.failed.append(f"{partition.topic}-{partition.index}@{one.base_offset}: {exc}")
                continue
            self._in_flight.add(plan.segment_id)
            planned.append((partition, plan, offset))
        ready_to_run: list[tuple[Partition, RangePlan]] = []
        for partition, plan, offset in planned:
            try:
                await partition.wait_replicated(offset + 1, REPLICATION_WAIT_S)
            except ApiError as exc:
                self._in_flight.discard(plan.segment_id)
                report.failed.append(f"{partition.topic}-{partition.index}@{plan.base_offset}: {exc}")
                continue
            ready_to_run.append((partition, plan))
        report.planned = len(ready_to_run)
        return ready_to_run

    # -- 3. run and commit ---------------------------------------------------------------------
    async def _run_job(self, plan_id: str, ranges: list[tuple[Partition, RangePlan]], report: RunReport) -> None:
        broken: set[TopicPartition] = set()  # partitions with a range not committed: their later ranges wait
        plan = Plan(PLAN_VERSION, plan_id, self._cluster_id(), -1, self._clock.now_ms(), [r for _p, r in ranges])
        key = format_plan_key("", self._cluster_id(), uuid.UUID(plan_id))
        started = self._clock.monotonic()
        try:
            await self._store.put(key, encode_plan(plan))
            outcome = await self._runner.run(key)
        except ObjectStoreError as exc:
            outcome = JobOutcome(False, None, f"cannot write the plan: {exc}")
        finally:
            self._metrics.tiering_job_seconds.observe(self._clock.monotonic() - started)
        self._metrics.tiering_jobs.labels("ok" if outcome.ok else "failed").inc()
        if not outcome.ok:
            report.job_error = outcome.error
            log.warning("tiering job %s: %s", plan_id, outcome.error)
        try:
            for partition, planned in ranges:
                await self._commit_or_discard(partition, planned, report, broken)
        finally:
            for _partition, planned in ranges:
                self._in_flight.discard(planned.segment_id)
            try:
                await self._store.delete_many([key])
            except ObjectStoreError:
                pass  # an orphan plan costs a few bytes; the next cleanup of the prefix takes it

    async def _copy_classic(self, plan_id: str, ranges: list[tuple[Partition, RangePlan]], report: RunReport) -> None:
        """Classic segments hold their batches: the broker writes the Kafka segment itself
        (the same assembler, every batch inline), one range at a time, no Spark."""
        broken: set[TopicPartition] = set()
        try:
            for partition, planned in ranges:
                if partition.key not in broken:
                    try:
                        await assemble_range(self._store, self._cluster_id(), plan_id, planned)
                    except (ObjectStoreError, AssemblyError) as exc:
                        report.failed.append(f"{partition.topic}-{partition.index}@{planned.base_offset}: {exc}")
                        broken.add(partition.key)
                        continue
                await self._commit_or_discard(partition, planned, report, broken)
        finally:
            for _partition, planned in ranges:
                self._in_flight.discard(planned.segment_id)

    async def _commit_or_discard(
        self, partition: Partition, planned: RangePlan, report: RunReport, broken: set[TopicPartition]
    ) -> None:
        """Commit the range; when that is not possible, delete what the job wrote for it, so
        that a job that outlived its leadership leaves nothing behind (the segment, if still
        COPY_SEGMENT_STARTED, is cleaned up by a leader later as well). A partition's ranges
        commit in order: after one that did not, the later ones are discarded too, so tiered
        segments never leave a gap that local retention could drop."""
        why = (
            "an earlier range of the partition was not committed"
            if partition.key in broken
            else await self._commit(partition, planned)
        )
        if not why:
            report.committed += 1
            return
        broken.add(partition.key)
        report.failed.append(f"{partition.topic}-{partition.index}@{planned.base_offset}: {why}")
        keys = [
            self._key(planned.topic_id, planned.partition, planned.base_offset, planned.segment_id, f)
            for f in SegmentFile
        ]
        try:
            for _attempt in range(DISCARD_ATTEMPTS):  # a store may refuse some keys of a bulk delete
                keys = sorted(set(keys) - set(await self._store.delete_many(keys)))
                if not keys:
                    return
            log.warning(
                "%s-%d: files of uncommitted segment %s not deleted: %s refused",
                partition.topic,
                partition.index,
                planned.segment_id,
                keys,
            )
        except ObjectStoreError as exc:
            log.warning(
                "%s-%d: files of uncommitted segment %s not deleted: %s",
                partition.topic,
                partition.index,
                planned.segment_id,
                exc,
            )

    async def _commit(self, partition: Partition, planned: RangePlan) -> str:
        """Append COPY_SEGMENT_FINISHED for one range; returns why not ("" when done)."""
        manifest = await self._manifest(partition, planned)
        if isinstance(manifest, str):
            return manifest
        if partition.leader_state is None or partition.leader_epoch != planned.leader_epoch:
            return f"leadership moved (planned in epoch {planned.leader_epoch}, now {partition.leader_epoch})"
        current = next((s for s in partition.remote_segments.segments if s.segment_id == planned.segment_id), None)
        if current is None or current.state != RemoteSegmentState.COPY_SEGMENT_STARTED:
            return "the segment is no longer COPY_SEGMENT_STARTED"
        if partition.log_start_offset >= planned.next_offset:
            return "the range went below the log start offset (DeleteRecords) before the commit"
        event = RemoteSegmentEvent(
            EVENT_VERSION,
            RemoteSegmentState.COPY_SEGMENT_FINISHED,
            planned.segment_id,
            planned.base_offset,
            planned.next_offset - 1,
            planned.leader_epoch,
            manifest.size_bytes,
            manifest.max_timestamp_ms,
            manifest.plan_id,
            manifest.files[SegmentFile.OFFSET_INDEX.value].size,
            manifest.files[SegmentFile.TIME_INDEX.value].size,
            0 if manifest.txn_index_empty else manifest.files[SegmentFile.TXN_INDEX.value].size,
        )
        try:
            partition.append_marker(event)
        except ApiError as exc:
            return str(exc)
        log.info(
            "%s-%d: tiered segment %s [%d, %d] committed (%d bytes)",
            partition.topic,
            partition.index,
            planned.segment_id,
            planned.base_offset,
            planned.next_offset - 1,
            manifest.size_bytes,
        )
        self._metrics.tiering_segments.labels("committed").inc()
        self._metrics.tiering_bytes.inc(manifest.size_bytes)
        return ""

    async def _manifest(self, partition: Partition, planned: RangePlan) -> SegmentManifest | str:
        key = self._key(
            planned.topic_id, planned.partition, planned.base_offset, planned.segment_id, SegmentFile.MANIFEST
        )
        try:
            manifest = decode_manifest(await self._store.get(key))
        except NotFound:
            return "the job wrote no result manifest"
        except (ObjectStoreError, PlanFormatError) as exc:
            return f"unreadable result manifest: {exc}"
        if (manifest.base_offset, manifest.end_offset, manifest.segment_id, manifest.txn_index_empty) != (
            planned.base_offset,
            planned.next_offset - 1,
            planned.segment_id,
            not planned.aborted_txns,
        ) or (not manifest.txn_index_empty and SegmentFile.TXN_INDEX.value not in manifest.files):
            return "the result manifest does not match the plan"
        return manifest

    # -- helpers -------------------------------------------------------------------------------
    def _mark(self, partition: Partition, segment: RemoteSegment, state: RemoteSegmentState) -> None:
        partition.append_marker(
            RemoteSegmentEvent(
                EVENT_VERSION,
                state,
                segment.segment_id,
                segment.base_offset,
                segment.end_offset,
                segment.leader_epoch,
                segment.size_bytes,
                segment.max_timestamp_ms,
                segment.plan_id,
            )
        )

    def _key(self, topic_id: str, partition: int, base_offset: int, segment_id: str, file: SegmentFile) -> str:
        """A file of one tiered segment (a planned range or a known segment)."""
        return format_tiered_segment_key(
            "", self._cluster_id(), uuid.UUID(topic_id), partition, base_offset, uuid.UUID(segment_id), file
        )


def _event(plan: RangePlan, state: RemoteSegmentState, plan_id: str) -> RemoteSegmentEvent:
    return RemoteSegmentEvent(
        EVENT_VERSION,
        state,
        plan.segment_id,
        plan.base_offset,
        plan.next_offset - 1,
        plan.leader_epoch,
        plan.size_bytes,
        -1,
        plan_id,
    )
