"""The partitions this broker hosts: opened when a partition state (cluster/view.py) lists
this broker as a replica, made leader or follower as the states change, deleted with their
topic, and maintained by background tasks (flush policy, time-based segment roll,
retention, producer-id expiry).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import uuid
from pathlib import Path
from typing import Awaitable, Callable

from .clock import Clock
from .cluster.view import ClusterView, PartitionState
from .config import BrokerConfig
from .heap import HeapFreezer
from .log.open_files import OpenFiles
from .loop_slices import LoopSlices
from .metrics import BrokerMetrics
from .partition import Partition
from .partition_ids import TopicIdPartition, TopicPartition
from .protocol.errors import ApiError, ErrorCode
from .topics import Topic, TopicCatalog
from .waiters import FetchWaiters


log = logging.getLogger(__name__)


class ReplicaManager:
    def __init__(
        self,
        config: BrokerConfig,
        catalog: TopicCatalog,
        view: ClusterView,
        clock: Clock,
        metrics: BrokerMetrics,
        waiters: FetchWaiters,
        new_uuid: Callable[[], uuid.UUID],
        open_files: OpenFiles | None = None,
        heap: HeapFreezer | None = None,
    ) -> None:
        self._config = config
        self._heap = heap  # freezes opened partitions' state out of full garbage collections (heap.py)
        self._open_files = open_files  # the broker's bound on open segment files (log/open_files.py)
        self._new_uuid = new_uuid
        self._catalog = catalog
        self._view = view
        self._role_listeners: list[Callable[[Partition], None]] = []
        self._clock = clock
        self._metrics = metrics
        self.waiters = waiters
        self._dir = None if config.stateless else config.data_path / "logs"  # stateless: hosts nothing
        self.partitions: dict[TopicPartition, Partition] = {}
        # (partition states looked at, of how many) while start() opens the hosted replicas: /readyz
        self.opening = (0, 0)
        self._tasks: list[asyncio.Task[None]] = []
        catalog.subscribe(self._on_topic_change)
        view.on_partition_changed(self._on_partition_state)
        self._started = False
        self._loaded = False

    @property
    def loaded(self) -> bool:
        """Every replica the view gave this broker at start is open, and it is not stopping:
        until then its logs on disk may reference what the open partitions do not show, and
        the WAL file manager's reporter answers NotReady (broker/walfiles/reporter.py)."""
        return self._loaded

    def on_role_changed(self, listener: Callable[[Partition], None]) -> None:
        """Told after a hosted partition became leader or follower (or changed epoch)."""
        self._role_listeners.append(listener)

    async def start(self) -> None:
        if self._dir is not None:
            self._dir.mkdir(parents=True, exist_ok=True)
        self._started = True
        await self._open_hosted()
        if not self._started:
            return  # stopped while opening
        self._loaded = True
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._every(self._config.log_flush_scheduler_interval_ms, self._flush_and_roll)),
            loop.create_task(self._every(self._config.log_retention_check_interval_ms, self._enforce_retention)),
            loop.create_task(
                self._every(self._config.producer_id_expiration_check_interval_ms, self._expire_producers)
            ),
        ]

    async def _open_hosted(self) -> None:
        """Open every replica the view gives this broker, handing the event loop back every
        loop_slices.SLICE_S of work: a broker with thousands of partitions takes seconds to open
        them, and meanwhile its lease keep-alives, the metadata watch (which opens and moves
        partitions itself) and the metrics listener must go on (issue 28: a broker whose opens
        outlasted its 6 s lease exited with LeaseExpired and could not start again)."""
        slices = LoopSlices(self._clock)
        pids = list(self._view.partitions)
        self.opening = (0, len(pids))
        if self._heap is not None:
            self._heap.settled()  # the loaded metadata: long-lived, out of full collections
        for done, pid in enumerate(pids, start=1):
            if not self._started:
                return
            self._on_partition_state(pid, self._view.partitions.get(pid))  # the newest state, not the listed one
            self.opening = (done, len(pids))
            await slices.pause_if_due()

    async def stop(self) -> None:
        self._started = False
        self._loaded = False
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.waiters.notify_all()
        # Every other part of the broker has stopped: nothing uses the partitions now. Their
        # last flushes run on the executor's threads at once (each log a few fsyncs: one by
        # one, a broker with thousands of written partitions took minutes to stop, all of it
        # holding the event loop), then the files are released here.
        loop = asyncio.get_running_loop()
        partitions = list(self.partitions.values())
        closed = await asyncio.gather(
            *(loop.run_in_executor(None, partition.close_durably) for partition in partitions),
            return_exceptions=True,
        )
        for partition, outcome in zip(partitions, closed):
            if isinstance(outcome, BaseException):
                log.error("closing %s-%d failed: %r", partition.topic, partition.index, outcome)
            partition.log.release_files()
        self.partitions.clear()

    def get(self, topic: str, index: int) -> Partition:
        partition = self.partitions.get(TopicPartition(topic, index))
        if partition is None:
            known = self._catalog.get(topic)
            if known is not None and 0 <= index < known.partitions:
                raise ApiError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"This server is not a replica of {topic}-{index}")
            raise ApiError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"This server does not host this topic-partition: {topic}-{index}"
            )
        return partition

    def leader(self, topic: str, index: int) -> Partition:
        """The partition, if this broker leads it (NOT_LEADER_OR_FOLLOWER otherwise)."""
        partition = self.get(topic, index)
        partition.check_leader()
        return partition

    # -- partition states ------------------------------------------------------------------
    def _on_partition_state(self, pid: TopicIdPartition, state: PartitionState | None) -> None:
        if state is None or not self._started or self._dir is None:
            return
        topic = self._catalog.by_id(uuid.UUID(pid[0]))
        record = state.record
        node_id = self._config.node_id
        if topic is None or node_id not in record.replicas or pid[1] >= topic.partitions:
            return
        partition = self.partitions.get(TopicPartition(topic.name, pid[1])) or self._open(topic, pid[1])
        if state.revision < partition.state_revision:
            return
        if record.leader == node_id:
            partition.make_leader(node_id, record, state.revision)
        else:
            partition.make_follower(record, state.revision)
        for listener in self._role_listeners:
            listener(partition)

    # -- catalog changes -------------------------------------------------------
    async def _on_topic_change(self, name: str, topic: Topic | None) -> None:
        if topic is None:
            await self._delete_topic(name)
            return
        for index in range(topic.partitions):
            partition = self.partitions.get(TopicPartition(name, index))
            if partition is not None:
                partition.update_settings(topic.settings)
                partition.created_diskless = topic.born_diskless
        if self._started:  # states may have arrived before their topic record
            for index, state in self._view.partitions_of(str(topic.topic_id)).items():
                self._on_partition_state(TopicIdPartition.of(topic.topic_id, index), state)

    def _open(self, topic: Topic, index: int) -> Partition:
        assert self._dir is not None, "a stateless broker hosts no partition"
        directory = self._dir / f"{topic.name}-{index}"
        partition = Partition.open(
            topic.name,
            index,
            directory,
            topic.settings,
            self._clock,
            self._config.producer_id_expiration_ms,
            self._on_append,
            max_barriers=self._config.producer_sequence_barriers_max,
            max_permits=self._config.transaction_partition_verification_max_permits,
            open_files=self._open_files,
        )
        partition.topic_id = str(topic.topic_id)
        partition.created_diskless = topic.born_diskless
        self.partitions[TopicPartition(topic.name, index)] = partition
        self._metrics.partitions.set(len(self.partitions))
        if self._heap is not None:
            self._heap.opened()
        return partition

    async def _delete_topic(self, name: str) -> None:
        doomed: list[Path] = []
        for key in [k for k in self.partitions if k[0] == name]:
            partition = self.partitions.pop(key)
            partition.retire()
            for listener in self._role_listeners:
                listener(partition)
            partition.log.close()
            tombstone = partition.directory.with_name(f"{partition.directory.name}.{self._new_uuid().hex}-delete")
            partition.directory.rename(tombstone)
            doomed.append(tombstone)
            self.waiters.notify(key)
        self._metrics.partitions.set(len(self.partitions))
        if self._heap is not None and doomed:
            self._heap.removed(len(doomed))
        if doomed:
            await asyncio.get_running_loop().run_in_executor(None, _remove_trees, doomed)

    def _on_append(self, partition: Partition) -> None:
        self.waiters.notify(partition.key)

    # -- background maintenance ------------------------------------------------
    async def _every(self, interval_ms: int, job: Callable[[], Awaitable[object]]) -> None:
        while True:
            await self._clock.sleep(interval_ms / 1000)
            try:
                await job()
            except Exception:
                log.exception("background job %s failed", getattr(job, "__name__", job))

    async def _flush_and_roll(self) -> None:
        """Every second: roll segments older than segment.ms and flush logs due by flush.ms or
        flush.messages. A log with nothing due until later is skipped at the cost of one
        comparison (PartitionLog.maintenance_due_ms), so idle partitions cost nearly nothing."""
        now = self._clock.now_ms()
        loop = asyncio.get_running_loop()
        for partition in list(self.partitions.values()):
            log = partition.log
            if log.maintenance_due_ms > now:
                continue
            log.maybe_roll(now)
            if log.needs_flush(now):
                started = self._clock.monotonic()
                await loop.run_in_executor(None, log.flush)
                self._metrics.log_flush_seconds.observe(self._clock.monotonic() - started)
            log.plan_maintenance()

    async def _enforce_retention(self) -> None:
        now = self._clock.now_ms()
        for partition in list(self.partitions.values()):
            if partition.log.enforce_retention(now, partition.remote_retention()):
                partition.producers.delete_snapshots_before(partition.directory, partition.log.log_start_offset)

    async def _expire_producers(self) -> None:
        now = self._clock.now_ms()
        for partition in list(self.partitions.values()):
            partition.producers.expire(now)


def _remove_trees(paths: list[Path]) -> None:
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)
