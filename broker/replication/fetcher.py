"""The follower's side of replication: one fetch loop per leader broker, covering every
partition this broker follows on it (as Kafka's ReplicaFetcherThread does).

Each round sends the follower's log end offset and last fetched epoch per partition; the
answer is either entries to append (as the leader stores them), a divergence point to
truncate to (divergence.truncation_offset), or an error that waits for new metadata: that
partition then sits out `replica.fetch.backoff.ms` while the others go on (one failing
partition must not turn the leader's long poll into a busy loop for all of them). An
answer is applied only if the partition still follows the same leader in the same epoch
as when the request was sent.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from ..log import EntryKind
from ..metadata.records import NO_LEADER
from ..producers import SnapshotError
from ..protocol.errors import ErrorCode
from ..rpc import RpcClientPool, RpcError
from .divergence import truncation_offset
from .fetch_sessions import FollowerSession
from .messages import (
    NO_DIVERGENCE,
    REPLICATION_VERSION,
    FetchedPartition,
    FetchPartition,
    ReplicaFetchRequest,
    ReplicaFetchResponse,
)

if TYPE_CHECKING:
    from ..clock import Clock
    from ..cluster.view import ClusterView
    from ..config import BrokerConfig
    from ..partition import Partition
    from ..metrics import BrokerMetrics
    from ..routing.cross_az import CrossAzBytes

log = logging.getLogger(__name__)

RPC_TIMEOUT_MARGIN_S = 10.0


class ReplicaFetcher:
    def __init__(
        self,
        config: "BrokerConfig",
        view: "ClusterView",
        pool: RpcClientPool[ReplicaFetchRequest, ReplicaFetchResponse],
        metrics: "BrokerMetrics",
        cross_az: "CrossAzBytes",
        clock: "Clock",
    ) -> None:
        self._config = config
        self._clock = clock
        self._cross_az = cross_az
        self._view = view
        self._pool = pool
        self._metrics = metrics
        self._following: dict[int, dict[tuple[str, int], "Partition"]] = {}  # leader -> partitions
        self._loops: dict[int, asyncio.Task[None]] = {}
        self._wake: dict[int, asyncio.Event] = {}
        self._delayed: dict[tuple[str, int], int] = {}  # partition -> monotonic ms until which it backs off
        self._sessions: dict[int, FollowerSession] = {}  # leader -> our fetch session with it

    def on_role_changed(self, partition: "Partition") -> None:
        """Follow the partition's leader, or stop following when this broker leads it."""
        self._delayed.pop(partition.key, None)
        for leader_id, partitions in self._following.items():
            if partitions.pop(partition.key, None) is not None and leader_id in self._wake:
                self._wake[leader_id].set()
        leader_id = partition.leader_id
        if partition.leader_state is not None or leader_id in (NO_LEADER, self._config.node_id):
            return
        self._following.setdefault(leader_id, {})[partition.key] = partition
        if leader_id not in self._loops or self._loops[leader_id].done():
            self._wake[leader_id] = asyncio.Event()
            self._loops[leader_id] = asyncio.get_running_loop().create_task(
                self._run(leader_id), name=f"replica-fetcher-{leader_id}"
            )
        self._wake[leader_id].set()

    async def stop(self) -> None:
        for task in self._loops.values():
            task.cancel()
        await asyncio.gather(*self._loops.values(), return_exceptions=True)

    async def _run(self, leader_id: int) -> None:
        try:
            await self._fetch_rounds(leader_id)
        finally:
            self._sessions.pop(leader_id, None)  # a later loop for this leader opens a new session

    async def _fetch_rounds(self, leader_id: int) -> None:
        backoff_s = self._config.replica_fetch_backoff_ms / 1000
        while self._following.get(leader_id):
            self._wake[leader_id].clear()
            broker = self._view.brokers.get(leader_id)
            if broker is None or broker.rpc_host is None:
                await self._pause(leader_id, backoff_s)
                continue
            now = self._clock.monotonic_ms()
            sent = [p for p in self._following[leader_id].values() if self._delayed.get(p.key, 0) <= now]
            if not sent:  # every partition is backing off after an error
                resume_ms = min(self._delayed.get(p.key, now) for p in self._following[leader_id].values())
                await self._pause(leader_id, max(resume_ms - now, 1) / 1000)
                continue
            epochs = {p.key: p.leader_epoch for p in sent}
            current = {
                (p.topic_id, p.index): FetchPartition(
                    p.topic_id,
                    p.index,
                    p.log.log_end_offset,
                    p.epochs.latest_epoch,
                    p.leader_epoch,
                    p.log_start_offset,
                )
                for p in sent
            }
            session = self._sessions.setdefault(leader_id, FollowerSession())
            session_id, session_epoch, named, forgotten = session.request(current)
            request = ReplicaFetchRequest(
                REPLICATION_VERSION,
                self._config.node_id,
                self._config.replica_fetch_wait_max_ms,
                self._config.replica_fetch_max_bytes,
                named,
                session_id,
                session_epoch,
                forgotten,
            )
            client = self._pool.get(leader_id, broker.rpc_host, broker.rpc_port)
            try:
                response = await client.call(
                    request, self._config.replica_fetch_wait_max_ms / 1000 + RPC_TIMEOUT_MARGIN_S
                )
            except RpcError as exc:
                log.info("replica fetch from broker %d failed: %s", leader_id, exc)
                session.reset()  # the leader may or may not have taken that request's epoch
                await self._pause(leader_id, backoff_s)
                continue
            session.answered(current, response.session_id, response.error_code)
            if response.error_code:  # the leader forgot the session (it restarted, or closed it)
                log.info(
                    "replica fetch session with broker %d: %s; starting a new one",
                    leader_id,
                    ErrorCode(response.error_code).name,
                )
                if session.refused > 1:  # refused again at once: something is wrong, do not spin
                    await self._pause(leader_id, backoff_s)
                continue
            self._cross_az.replicated(
                client.address,
                sum(len(data) for r in response.partitions for kind, data in r.entries if kind == EntryKind.RECORDS),
            )
            asked = {(p.topic_id, p.index): p for p in sent}
            for result in response.partitions:
                partition = asked.get((result.topic_id, result.partition))
                if partition is None:
                    continue
                current_partition = self._following.get(leader_id, {}).get(partition.key)
                if current_partition is not partition or partition.leader_epoch != epochs[partition.key]:
                    session.unapplied_answer(result.topic_id, result.partition)
                    continue  # moved on while the request was in flight
                try:
                    healthy = self._apply(partition, result)
                except Exception:
                    log.exception("%s-%d: applying a replica fetch failed", partition.topic, partition.index)
                    healthy = False
                if healthy:
                    self._delayed.pop(partition.key, None)
                    partition.fetched_in_epoch = epochs[partition.key]
                else:  # this partition backs off; the others go on (the leader long-polls for them)
                    self._delayed[partition.key] = self._clock.monotonic_ms() + int(backoff_s * 1000)
                    session.unapplied_answer(result.topic_id, result.partition)  # named again once it is back

    def _apply(self, partition: "Partition", result: FetchedPartition) -> bool:
        """Apply one partition's answer; False when it failed (that partition backs off)."""
        if (
            result.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
            and result.log_start_offset > partition.log.log_end_offset
        ):
            try:  # with the leader's producer state there: transactions open at that offset
                partition.restart_at(result.log_start_offset, result.producer_snapshot)
            except SnapshotError as exc:  # e.g. a newer leader's format: wait for an upgrade, drop nothing
                log.error(
                    "%s-%d: cannot start over at the leader's log start: %s", partition.topic, partition.index, exc
                )
                return False
            if result.remote_segments:  # what the leader tiered below its log: now ours too
                partition.remote_segments.install(result.remote_segments, result.log_start_offset)
            if result.modes:
                partition.install_leader_modes(result.modes, result.log_start_offset)
            return True
        if result.error_code:
            log.debug(
                "%s-%d: replica fetch error %s", partition.topic, partition.index, ErrorCode(result.error_code).name
            )
            return False
        if result.diverging_epoch != NO_DIVERGENCE:
            offset, _complete = truncation_offset(
                partition.epochs,
                partition.log.log_end_offset,
                result.diverging_epoch,
                result.diverging_end_offset,
                high_watermark=partition.log.high_watermark,
            )
            partition.truncate_to(offset)
            return True
        appended = partition.append_replicated(result.entries, result.high_watermark)
        self._metrics.replication_bytes.inc(appended)
        start = min(result.log_start_offset, partition.log.high_watermark)
        if start > partition.log.log_start_offset:  # the leader deleted records (retention, DeleteRecords)
            partition.log.delete_records_before(start)
        if result.partition_log_start_offset > partition.remote_segments.log_start_offset:  # DeleteRecords
            partition.delete_records_before(min(result.partition_log_start_offset, partition.log.high_watermark))
        return True

    async def _pause(self, leader_id: int, seconds: float) -> None:
        try:
            await asyncio.wait_for(self._wake[leader_id].wait(), seconds)
        except asyncio.TimeoutError:
            pass
