"""The WAL file manager: one per cluster (it runs on the controller), deleting the WAL objects
no replica can reference any more (policy.py says which and why).

A cycle, every `wal.file.manager.interval.ms`:
1. Fence: this broker must still hold the controller key in the metadata store (a read, so
   an unreachable store pauses the cycle too).
2. Ask every data broker for its replicas' oldest references (cluster.py); one broker that
   is registered-but-silent, not ready (still opening its partition logs), or that has not
   opened every replica the view gives it, or a replica's broker that is not registered,
   pauses the cycle: its logs may reference anything.
3. List the WAL prefix in key (= creation) order; judge each object; read the index of those
   the uploaders did not describe (bounded per cycle, cached).
4. Objects unreferenced for `wal.file.manager.grace.ms` are deleted in batches of at most
   1000 keys, four batches in flight, at most `wal.file.manager.max.deletes.per.cycle`,
   each group of batches fenced again.
   Only keys the store confirmed count as deleted; a failed batch (throttling, 503 SlowDown
   after the store's own retries) ends the cycle and doubles the wait before the next, up
   to `wal.file.manager.backoff.max.ms`, so a throttled bucket never sees a retry storm.
A cycle that hit its cap is followed by the next one a second later, not a whole interval.

Nothing here is on the produce or commit path: the manager only lists, reads indexes,
deletes, and asks brokers a question they answer from memory.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from walfiles.format import WalFormatError
from walfiles.keys import parse_wal_id

from ..metadata import MetadataError
from ..objectstore import NotFound, ObjectStore, ObjectStoreError
from ..objectstore.store import MAX_DELETE_BATCH
from .indexes import PartitionSets, read_partitions
from .messages import PLANNED_SHOWN, CycleReport, PlannedDelete, WalFilesStatus, WalReferencesResponse
from .policy import PartitionKey, PendingDeletes, Sample, Timing, combine, judge

if TYPE_CHECKING:
    from ..clock import Clock
    from ..config import BrokerConfig
    from ..metrics import BrokerMetrics

log = logging.getLogger(__name__)

SATURATED_PAUSE_S = 1.0  # between cycles while a backlog is being worked off
DELETE_CONCURRENCY = 4  # DeleteObjects calls in flight (4000 keys)
INDEX_READ_CONCURRENCY = 16
HOUR_MS = 3_600_000


class GcPaused(Exception):
    """The cycle cannot tell what is referenced; the message says why, for the operator, and
    `brokers` which data brokers it waits for (not registered, silent, or not ready)."""

    def __init__(self, reason: str, brokers: Iterable[int] = ()) -> None:
        super().__init__(reason)
        self.brokers = tuple(brokers)


class ReferenceSource(Protocol):
    async def gather(self) -> list[WalReferencesResponse]:
        """One answer from every data broker, or GcPaused."""

    async def query(self, asked: dict[PartitionKey, list[str]]) -> dict[PartitionKey, tuple[set[str], set[str]]]:
        """Of the asked objects per partition, those some replica of it references, as
        (committed, not yet committed); raises when a data broker does not answer."""


@dataclass(frozen=True, slots=True)
class ManagerSettings:
    interval_ms: int
    grace_ms: int
    commit_deadline_ms: int
    max_deletes_per_cycle: int
    max_pending_deletes: int
    max_index_reads_per_cycle: int
    index_cache_objects: int
    backoff_max_ms: int

    @classmethod
    def from_config(cls, config: BrokerConfig) -> ManagerSettings:
        return cls(
            config.wal_file_manager_interval_ms,
            config.wal_file_manager_grace_ms,
            config.wal_commit_deadline_ms,
            config.wal_file_manager_max_deletes_per_cycle,
            config.wal_file_manager_max_pending_deletes,
            config.wal_file_manager_max_index_reads_per_cycle,
            config.wal_file_manager_index_cache_objects,
            config.wal_file_manager_backoff_max_ms,
        )


@dataclass(slots=True)
class _Listed:
    key: str
    object_id: str
    created_ms: int
    size: int


@dataclass(slots=True)
class _Judged:
    """One cycle's findings over the listing."""

    objects: int = 0
    bytes: int = 0
    oldest_created_ms: int | None = None
    unreferenced: dict[str, tuple[int, str]] | None = None  # key -> (size, reason), in key order
    kept: collections.Counter[str] | None = None


class WalFileManager:
    def __init__(
        self,
        *,
        node_id: int,
        store: ObjectStore,
        wal_prefix: Callable[[], str],
        references: ReferenceSource,
        holds_controller: Callable[[], Awaitable[bool]],
        is_controller: Callable[[], bool],
        settings: ManagerSettings,
        clock: Clock,
        metrics: BrokerMetrics,
    ) -> None:
        self._node_id = node_id
        self._store = store
        self._wal_prefix = wal_prefix
        self._references = references
        self._holds_controller = holds_controller
        self._is_controller = is_controller
        self._settings = settings
        self._clock = clock
        self._metrics = metrics
        self._pending = PendingDeletes(settings.max_pending_deletes)
        self._sets = PartitionSets(settings.index_cache_objects)
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._backoff_ms = 0
        self._lookup_cursor: str | None = None  # where the next cycle's lookups start
        self._next_cycle_mono_ms = -1
        self._paused_reason: str | None = None
        self._last_success_ms = -1
        self._history: collections.deque[tuple[int, int, int, int]] = (
            collections.deque()
        )  # (ms, objects, bytes, failures)
        self._status_numbers: dict[str, int] = {}
        metrics.walfiles_last_success_age.set_function(self._last_success_age_s)
        metrics.walfiles_manager_active.set_function(lambda: 1 if self._is_controller() else 0)
        metrics.walfiles_unreferenced_objects.set_function(lambda: len(self._pending))

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="wal-file-manager")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            delay_ms = self._settings.interval_ms
            if self._is_controller():
                try:
                    report = await self.run_cycle()
                    if report.deleted_objects >= self._settings.max_deletes_per_cycle:
                        delay_ms = min(delay_ms, int(SATURATED_PAUSE_S * 1000))
                except Exception:
                    log.exception("WAL file manager cycle failed")
                delay_ms = max(delay_ms, self._backoff_ms)
            self._next_cycle_mono_ms = self._clock.monotonic_ms() + delay_ms
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), delay_ms / 1000)
            except asyncio.TimeoutError:
                pass

    # -- the operator's view -------------------------------------------------------------------
    def status(self) -> WalFilesStatus:
        now = self._clock.now_ms()
        while self._history and now - self._history[0][0] > HOUR_MS:
            self._history.popleft()
        numbers = self._status_numbers
        next_in = self._next_cycle_mono_ms - self._clock.monotonic_ms() if self._next_cycle_mono_ms >= 0 else -1
        return WalFilesStatus(
            manager_id=self._node_id,
            active=self._is_controller(),
            paused=self._paused_reason is not None,
            paused_reason=self._paused_reason,
            objects=numbers.get("objects", 0),
            bytes=numbers.get("bytes", 0),
            referenced_bytes=numbers.get("referenced_bytes", 0),
            dead_bytes=numbers.get("dead_bytes", 0),
            unreferenced_objects=len(self._pending),
            unreferenced_bytes=numbers.get("unreferenced_bytes", 0),
            oldest_object_age_ms=numbers.get("oldest_object_age_ms", -1),
            last_success_ms=self._last_success_ms,
            last_success_age_ms=now - self._last_success_ms if self._last_success_ms >= 0 else -1,
            deleted_objects_last_hour=sum(h[1] for h in self._history),
            deleted_bytes_last_hour=sum(h[2] for h in self._history),
            delete_failures_last_hour=sum(h[3] for h in self._history),
            next_cycle_in_ms=max(next_in, 0) if next_in != -1 else -1,
        )

    def _last_success_age_s(self) -> float:
        return -1.0 if self._last_success_ms < 0 else (self._clock.now_ms() - self._last_success_ms) / 1000

    # -- one cycle -----------------------------------------------------------------------------
    async def run_cycle(self, dry_run: bool = False) -> CycleReport:
        """One cycle now (`shoal walfiles gc` calls this too); with `dry_run` nothing is
        deleted and the report lists what would be, and why."""
        async with self._lock:
            try:
                return await self._cycle(dry_run)
            except GcPaused as exc:
                self._pause(str(exc))
                return CycleReport(dry_run, self.status())

    def _pause(self, reason: str) -> None:
        if reason != self._paused_reason:
            log.warning("WAL file manager paused: %s", reason)
        self._paused_reason = reason
        self._metrics.walfiles_paused.set(1)
        self._metrics.walfiles_cycles.labels("paused").inc()

    async def _fence(self) -> None:
        try:
            holds = await self._holds_controller()
        except MetadataError as exc:
            raise GcPaused(f"the metadata store is unreachable ({exc})") from None
        if not holds:
            raise GcPaused(
                f"broker {self._node_id} no longer holds the controller key: another broker runs the manager"
            )

    async def _cycle(self, dry_run: bool) -> CycleReport:
        if not self._is_controller():
            raise GcPaused(f"broker {self._node_id} is not the controller: ask the controller")
        await self._fence()
        try:
            answers = await self._references.gather()
        except GcPaused as exc:
            self._metrics.walfiles_waiting_for_brokers.set(len(exc.brokers))
            raise
        self._metrics.walfiles_waiting_for_brokers.set(0)
        sample = combine(answers)
        for answer in answers:
            for uploaded in answer.uploaded:
                self._sets.put(uploaded.object_id, uploaded.committed, uploaded.maybe)
        timing = Timing(self._clock.now_ms(), self._settings.commit_deadline_ms, self._settings.grace_ms)
        judged = await self._judge_listing(sample, timing)
        assert judged.unreferenced is not None and judged.kept is not None
        mono = self._clock.monotonic_ms()
        self._pending.update(judged.unreferenced, mono)
        grace = self._settings.grace_ms
        ready = self._pending.ready(grace, mono, self._settings.max_deletes_per_cycle)
        planned = [
            PlannedDelete(key, size, reason, self._pending.waiting_ms(key, grace, mono))
            for key, (size, reason) in judged.unreferenced.items()
        ]
        deleted, deleted_bytes, failed = (0, 0, 0) if dry_run else await self._delete(ready, judged.unreferenced)
        unreferenced_bytes = sum(
            size for key, (size, _reason) in judged.unreferenced.items() if key in self._pending.since
        )
        live_bytes = judged.bytes - sum(size for size, _reason in judged.unreferenced.values())
        self._status_numbers = {
            "objects": judged.objects - deleted,
            "bytes": judged.bytes - deleted_bytes,
            "referenced_bytes": sample.referenced_bytes,
            "dead_bytes": max(0, live_bytes - sample.referenced_bytes),
            "unreferenced_bytes": unreferenced_bytes,
            "oldest_object_age_ms": -1
            if judged.oldest_created_ms is None
            else max(0, timing.now_ms - judged.oldest_created_ms),
        }
        self._record_gauges()
        if not dry_run:
            self._history.append((timing.now_ms, deleted, deleted_bytes, failed))
            if failed:
                self._backoff_ms = min(
                    self._settings.backoff_max_ms, max(self._settings.interval_ms, self._backoff_ms * 2)
                )
                self._metrics.walfiles_cycles.labels("failed_deletes").inc()
            else:
                self._backoff_ms = 0
                self._last_success_ms = timing.now_ms
                self._metrics.walfiles_cycles.labels("ok").inc()
            if self._paused_reason is not None:
                log.info("WAL file manager resumed")
            self._paused_reason = None
            self._metrics.walfiles_paused.set(0)
        return CycleReport(
            dry_run,
            self.status(),
            deleted,
            deleted_bytes,
            failed,
            planned[:PLANNED_SHOWN],
            len(planned),
            dict(judged.kept),
        )

    def _record_gauges(self) -> None:
        numbers, metrics = self._status_numbers, self._metrics
        metrics.walfiles_objects.set(numbers["objects"])
        metrics.walfiles_bytes.set(numbers["bytes"])
        metrics.walfiles_referenced_bytes.set(numbers["referenced_bytes"])
        metrics.walfiles_dead_bytes.set(numbers["dead_bytes"])
        metrics.walfiles_oldest_object_age.set(max(numbers["oldest_object_age_ms"], 0) / 1000)

    async def _judge_listing(self, sample: Sample, timing: Timing) -> _Judged:
        prefix = self._wal_prefix()
        judged = _Judged(unreferenced={}, kept=collections.Counter())
        assert judged.unreferenced is not None and judged.kept is not None
        # Objects to look up (index read or replicas asked), at most `budget` per cycle. When
        # there are more, the next cycle starts after the last one looked up, so the objects
        # at the front of the listing cannot starve the rest.
        budget = self._settings.max_index_reads_per_cycle
        after: list[tuple[_Listed, tuple[PartitionKey, ...]]] = []  # keys past the cursor
        before: list[tuple[_Listed, tuple[PartitionKey, ...]]] = []
        wanted = 0
        async for info in self._store.list(prefix):
            object_id = info.key[len(prefix) :]
            try:
                created_ms = parse_wal_id(object_id)[0]
            except ValueError:
                judged.kept["not a WAL object key"] += 1
                continue
            judged.objects += 1
            judged.bytes += info.size
            if judged.oldest_created_ms is None:
                judged.oldest_created_ms = created_ms
            verdict = judge(created_ms, self._sets.get(object_id), sample, timing)
            if verdict.deletable:
                judged.unreferenced[info.key] = (info.size, verdict.reason)
            elif verdict.needs_index or verdict.ask:
                wanted += 1
                queue = after if self._lookup_cursor is None or info.key > self._lookup_cursor else before
                if len(queue) < budget:
                    queue.append((_Listed(info.key, object_id, created_ms, info.size), verdict.ask))
            else:
                judged.kept["young" if verdict.reason.startswith("young") else "referenced"] += 1
        chosen = (after + before)[:budget]
        self._lookup_cursor = chosen[-1][0].key if wanted > len(chosen) else None
        if wanted > len(chosen):
            judged.kept["not looked up yet (wal.file.manager.max.index.reads.per.cycle)"] += wanted - len(chosen)
        to_read = [listed for listed, ask in chosen if not ask]
        to_ask = [(listed, ask) for listed, ask in chosen if ask]
        if to_read:
            to_ask += await self._read_indexes(to_read, sample, timing, judged)
        if to_ask:
            await self._ask_replicas(to_ask, judged)
        judged.unreferenced = dict(sorted(judged.unreferenced.items()))
        return judged

    async def _read_indexes(
        self, listed: list[_Listed], sample: Sample, timing: Timing, judged: _Judged
    ) -> list[tuple[_Listed, tuple[PartitionKey, ...]]]:
        """Read the objects' indexes and judge them; those still undecided must be asked about."""
        assert judged.unreferenced is not None and judged.kept is not None
        limit = asyncio.Semaphore(INDEX_READ_CONCURRENCY)
        to_ask: list[tuple[_Listed, tuple[PartitionKey, ...]]] = []

        async def one(item: _Listed) -> None:
            async with limit:
                try:
                    partitions = await read_partitions(self._store, item.key, item.size)
                except NotFound:
                    self._metrics.walfiles_index_reads.labels("gone").inc()
                    return  # deleted meanwhile (by an earlier manager's late request): nothing to do
                except (ObjectStoreError, WalFormatError) as exc:
                    self._metrics.walfiles_index_reads.labels("failed").inc()
                    log.warning("WAL object %s: index unreadable, kept: %s", item.key, exc)
                    judged.kept["index unreadable"] += 1  # type: ignore[index]
                    return
            self._metrics.walfiles_index_reads.labels("ok").inc()
            verdict = judge(item.created_ms, self._sets.put(item.object_id, (), partitions), sample, timing)
            if verdict.deletable:
                judged.unreferenced[item.key] = (item.size, verdict.reason)  # type: ignore[index]
            elif verdict.ask:
                to_ask.append((item, verdict.ask))
            else:
                judged.kept["young" if verdict.reason.startswith("young") else "referenced"] += 1  # type: ignore[index]

        await asyncio.gather(*(one(item) for item in listed))
        return to_ask

    async def _ask_replicas(self, to_ask: list[tuple[_Listed, tuple[PartitionKey, ...]]], judged: _Judged) -> None:
        """Objects that partitions with older references may reference: ask those partitions'
        replicas. A committed reference is remembered (the object stays until the partition's
        log start passes it); the others are asked again next cycle, also in the cycle that
        deletes the object."""
        assert judged.unreferenced is not None and judged.kept is not None
        asked: dict[PartitionKey, list[str]] = {}
        for item, partitions in to_ask:
            for partition in partitions:
                asked.setdefault(partition, []).append(item.object_id)
        try:
            answers = await self._references.query(asked)
        except Exception as exc:  # a broker down or slow: keep them all, ask again next cycle
            log.warning("WAL file manager: asking replicas about %d objects failed (%s)", len(to_ask), exc)
            judged.kept["reference question unanswered"] += len(to_ask)
            return
        for item, partitions in to_ask:
            committed = [p for p in partitions if item.object_id in answers.get(p, (set(), set()))[0]]
            uncommitted = [p for p in partitions if item.object_id in answers.get(p, (set(), set()))[1]]
            if committed:
                known = self._sets.get(item.object_id)
                if known is not None:
                    self._sets.put(item.object_id, known.committed | set(committed), known.maybe - set(committed))
            if committed or uncommitted:
                judged.kept["referenced"] += 1
            else:
                judged.unreferenced[item.key] = (
                    item.size,
                    f"none of the {len(partitions)} partition(s) that may reference it and hold older "
                    "references has it (asked their replicas)",
                )

    async def _delete(self, ready: list[str], sizes: dict[str, tuple[int, str]]) -> tuple[int, int, int]:
        """Delete `ready` in batches of MAX_DELETE_BATCH keys, DELETE_CONCURRENCY at a time,
        the fence read before each group; (objects, bytes) confirmed and keys that failed.
        A group with a failure is the last of the cycle."""
        deleted = deleted_bytes = failed = 0
        prefix_len = len(self._wal_prefix())
        batches = [ready[start : start + MAX_DELETE_BATCH] for start in range(0, len(ready), MAX_DELETE_BATCH)]
        for first in range(0, len(batches), DELETE_CONCURRENCY):
            group = batches[first : first + DELETE_CONCURRENCY]
            await self._fence()
            outcomes = await asyncio.gather(
                *(self._store.delete_many(batch) for batch in group), return_exceptions=True
            )
            group_failed = 0
            for batch, outcome in zip(group, outcomes):
                if isinstance(outcome, ObjectStoreError):
                    group_failed += len(batch)
                    log.warning("WAL file manager: deleting %d objects failed (%s)", len(batch), outcome)
                    continue
                if isinstance(outcome, BaseException):
                    raise outcome
                self._pending.forget(outcome)
                batch_bytes = sum(sizes[key][0] for key in outcome)
                for key in outcome:
                    self._sets.forget(key[prefix_len:])
                deleted += len(outcome)
                deleted_bytes += batch_bytes
                self._metrics.walfiles_deleted_objects.inc(len(outcome))
                self._metrics.walfiles_deleted_bytes.inc(batch_bytes)
                group_failed += len(batch) - len(outcome)
            if group_failed:
                failed += group_failed
                self._metrics.walfiles_delete_failures.inc(group_failed)
                log.info(
                    "WAL file manager: %d deletes failed or were refused; backing off, they are retried later",
                    group_failed,
                )
                break
        return deleted, deleted_bytes, failed
