"""The leader's side of replication: answers followers' ReplicaFetch requests.

For each partition it checks leadership and the follower's idea of the leader epoch, finds
where the follower's log diverges (divergence.py), records the follower's progress
(LeaderState), advances the high watermark, proposes ISR expansion, and returns entries
from the follower's log end offset up to the leader's own (not just the high watermark:
followers copy everything). With nothing to send it long-polls like a consumer fetch, but
answers at once when the high watermark or the log start offset moved past what it last
told that follower, so a follower serving AZ-local reads lags the leader by a round trip,
not by a long poll, and a DeleteRecords waiting for the followers' log starts (handlers/
delete_records.py) by two. It records the log start offset each follower reports.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING

from ..log import OffsetOutOfRangeError
from ..protocol.errors import ApiError
from ..reads.fencing import check_leader_epoch
from .divergence import check_fetch_position
from .messages import (
    REPLICATION_VERSION,
    FetchedPartition,
    FetchPartition,
    ReplicaFetchRequest,
    ReplicaFetchResponse,
)

if TYPE_CHECKING:
    from ..clock import Clock
    from ..replica_manager import ReplicaManager
    from ..topics import TopicCatalog
    from ..waiters import FetchWaiters
    from .isr import IsrUpdater


NOTHING_TOLD = (-1, -1)


def _news(result: FetchedPartition, told: dict[tuple[str, int], tuple[int, int]]) -> bool:
    """Whether the answer tells the follower something it must learn now: an error, a
    divergence, or a high watermark or log start offset (DeleteRecords waits for it) that
    moved past what it was told last."""
    hw, start = told.get((result.topic_id, result.partition), NOTHING_TOLD)
    return (
        bool(result.error_code)
        or result.diverging_epoch >= 0
        or result.high_watermark > hw
        or result.partition_log_start_offset > start
    )


class ReplicaFetchService:
    def __init__(
        self,
        catalog: "TopicCatalog",
        replicas: "ReplicaManager",
        waiters: "FetchWaiters",
        isr: "IsrUpdater",
        clock: "Clock",
    ) -> None:
        self._catalog = catalog
        self._replicas = replicas
        self._waiters = waiters
        self._isr = isr
        self._clock = clock
        self.stopping = False
        # follower -> (topic id, partition) -> the high watermark and log start offset last
        # sent; each follower's entry holds only the partitions of its latest request (all it
        # follows here)
        self._told: dict[int, dict[tuple[str, int], tuple[int, int]]] = {}

    async def handle(self, request: ReplicaFetchRequest) -> ReplicaFetchResponse:
        if request.version != REPLICATION_VERSION:
            raise ValueError(f"replica fetch version {request.version} is not supported")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(request.max_wait_ms, 0) / 1000
        while True:
            budget = request.max_bytes
            results = []
            sent = 0
            for wanted in request.partitions:
                result = self._fetch(request.replica_id, wanted, budget - sent)
                sent += sum(len(data) for _, data in result.entries)
                results.append(result)
            remaining = deadline - loop.time()
            told = self._told.get(request.replica_id, {})
            if sent or remaining <= 0 or self.stopping or any(_news(r, told) for r in results):
                self._told[request.replica_id] = {
                    (r.topic_id, r.partition): (r.high_watermark, r.partition_log_start_offset)
                    if not r.error_code
                    else told.get((r.topic_id, r.partition), NOTHING_TOLD)
                    for r in results
                }
                return ReplicaFetchResponse(REPLICATION_VERSION, results)
            await self._waiters.wait([(self._name(p), p.partition) for p in request.partitions], remaining)

    def _name(self, wanted: FetchPartition) -> str:
        topic = self._catalog.by_id(uuid.UUID(wanted.topic_id))
        return topic.name if topic is not None else ""

    def _fetch(self, replica_id: int, wanted: FetchPartition, max_bytes: int) -> FetchedPartition:
        partition = None
        try:
            partition = self._replicas.leader(self._name(wanted), wanted.partition)
            check_leader_epoch(wanted.current_leader_epoch, partition.leader_epoch)
            log = partition.log
            leo = log.log_end_offset
            if wanted.fetch_offset < log.log_start_offset:
                raise OffsetOutOfRangeError(wanted.fetch_offset, log.log_start_offset, leo)
            # Before the log-end check: a follower whose log outgrew this leader's (the old
            # leader's unreplicated tail) must learn where to truncate, not that it is out of range.
            diverging = check_fetch_position(partition.epochs, leo, wanted.fetch_offset, wanted.last_fetched_epoch)
            if diverging is not None:
                return FetchedPartition(
                    wanted.topic_id,
                    wanted.partition,
                    0,
                    log.high_watermark,
                    log.log_start_offset,
                    diverging[0],
                    diverging[1],
                    partition_log_start_offset=partition.log_start_offset,
                )
            if wanted.fetch_offset > leo:
                raise OffsetOutOfRangeError(wanted.fetch_offset, log.log_start_offset, leo)
            assert partition.leader_state is not None
            if partition.leader_state.on_follower_log_start(replica_id, wanted.log_start_offset):
                self._waiters.notify(partition.key)  # a DeleteRecords may wait for it
            if partition.leader_state.on_follower_fetch(replica_id, wanted.fetch_offset, leo, self._clock.now_ms()):
                partition.advance_high_watermark()
                self._isr.maybe_expand(partition, replica_id)  # after its log start is recorded: it counts
            entries = (
                [(int(e.kind), e.data) for e in log.read(wanted.fetch_offset, max_bytes, leo)]
                if wanted.fetch_offset < leo and max_bytes > 0
                else []
            )
            return FetchedPartition(
                wanted.topic_id,
                wanted.partition,
                0,
                log.high_watermark,
                log.log_start_offset,
                entries=entries,  # type: ignore[arg-type]  # msgspec sends a memoryview as bytes
                partition_log_start_offset=partition.log_start_offset,
            )
        except ApiError as exc:
            log_ = partition.log if partition is not None else None
            below_start = log_ is not None and wanted.fetch_offset < log_.log_start_offset
            # a follower below the log start starts over there: it gets what it cannot replay
            over = partition if partition is not None and below_start else None
            return FetchedPartition(
                wanted.topic_id,
                wanted.partition,
                int(exc.code),
                log_.high_watermark if log_ else -1,
                log_.log_start_offset if log_ else -1,
                remote_segments=over.remote_segments.snapshot()
                if over is not None and over.remote_segments.known
                else b"",
                modes=over.modes.snapshot() if over is not None else b"",
                producer_snapshot=over.producer_state_at_log_start() if over is not None else b"",
            )
