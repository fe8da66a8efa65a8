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
from typing import TYPE_CHECKING, Callable, Hashable

from ..log import OffsetOutOfRangeError
from ..partition_ids import TopicPartition
from ..protocol.errors import ApiError, ErrorCode
from ..reads.fencing import check_leader_epoch
from .divergence import check_fetch_position
from .fetch_sessions import NEW_SESSION, SESSIONLESS, LeaderSession, LeaderSessions, PartitionKey, key_of
from .messages import (
    REPLICATION_VERSION,
    FetchedPartition,
    FetchPartition,
    ReplicaFetchRequest,
    ReplicaFetchResponse,
)

if TYPE_CHECKING:
    from ..clock import Clock
    from ..partition import Partition
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
        max_sessions: int = 1000,
        new_session_id: Callable[[], int] = lambda: 1,
    ) -> None:
        self._catalog = catalog
        self._replicas = replicas
        self._waiters = waiters
        self._isr = isr
        self._clock = clock
        self._new_session_id = new_session_id
        self.stopping = False
        # Sessionless followers: follower -> (topic id, partition) -> the high watermark and
        # log start offset last sent; each follower's entry holds only the partitions of its
        # latest request (all it follows here)
        self._told: dict[int, dict[PartitionKey, tuple[int, int]]] = {}
        self.sessions = LeaderSessions(max_sessions)
        self._looking: tuple[int, PartitionKey] | None = None  # (follower, partition) being looked at
        waiters.subscribe(self._touched)

    def stop_answering(self) -> None:
        """Held requests answer now with what they have, and new ones at once (a stopping broker)."""
        self.stopping = True
        for session in self.sessions.by_replica.values():
            session.wake()

    async def handle(self, request: ReplicaFetchRequest) -> ReplicaFetchResponse:
        if request.version != REPLICATION_VERSION:
            raise ValueError(f"replica fetch version {request.version} is not supported")
        if request.session_epoch == SESSIONLESS:
            return await self._handle_sessionless(request)
        now_ms = self._clock.now_ms()
        if request.session_epoch == NEW_SESSION:
            session = self.sessions.open(self._new_session_id(), request.replica_id, now_ms)
            if session is None:  # at max.incremental.fetch.session.cache.slots: answered in full
                return await self._handle_sessionless(request)
        else:
            session = self.sessions.by_replica.get(request.replica_id)
            if session is None or session.id != request.session_id:
                return ReplicaFetchResponse(REPLICATION_VERSION, [], error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
            if session.next_epoch != request.session_epoch:
                self.sessions.close(request.replica_id)  # the follower starts over with a full request
                return ReplicaFetchResponse(REPLICATION_VERSION, [], error_code=ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        for key in request.forgotten:
            self.sessions.unwatch(session, tuple(key))  # type: ignore[arg-type]  # msgspec decodes a list
        named = session.update(request.partitions, ())
        for wanted in request.partitions:
            self.sessions.watch(session, key_of(wanted), TopicPartition(self._name(wanted), wanted.partition))
        session.next_epoch += 1
        session.last_request_ms = now_ms
        results = await self._answer_session(request, session, named)
        return ReplicaFetchResponse(REPLICATION_VERSION, results, session_id=session.id)

    async def _answer_session(
        self, request: ReplicaFetchRequest, session: LeaderSession, named: list[PartitionKey]
    ) -> list[FetchedPartition]:
        """Look at the partitions the request named and those touched since the last answer;
        answer with the named ones and those with entries or news, at once if there are
        entries or news, else when some partition of the session is touched or the wait is over
        (long poll)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(request.max_wait_ms, 0) / 1000
        answers: dict[PartitionKey, FetchedPartition] = {}
        again: dict[PartitionKey, None] = {}  # to look at in the next request's pass
        named_set = set(named)
        keys = named + [key for key in session.take_dirty() if key not in named_set]
        sent = 0
        urgent = False
        while True:
            for key in keys:
                wanted = session.wants.get(key)
                if wanted is None:
                    continue  # forgotten meanwhile
                self._looking = (session.replica_id, key)  # what this look changes, this answer tells
                try:
                    result = self._fetch(request.replica_id, wanted, request.max_bytes - sent)
                finally:
                    self._looking = None
                sent += sum(len(data) for _, data in result.entries)
                news = bool(result.entries) or _news(result, session.told)
                urgent = urgent or news
                if news or key in named_set:
                    answers[key] = result
                    if not result.error_code:
                        session.told[key] = (result.high_watermark, result.partition_log_start_offset)
                if self._settled(session, key, wanted, result):
                    again.pop(key, None)
                else:
                    again[key] = None
            remaining = deadline - loop.time()
            if urgent or self.stopping or remaining <= 0:
                for key in again:
                    session.dirty[key] = None
                return list(answers.values())
            await session.wait(remaining)
            keys = session.take_dirty()

    def _settled(
        self, session: LeaderSession, key: PartitionKey, wanted: FetchPartition, result: FetchedPartition
    ) -> bool:
        """After a look at one partition: steady if its follower holds the leader's whole log
        and sits in the ISR (nothing to look at until the partition is touched). False when
        the next request's pass must look again: the follower is behind (if the entries sent
        now do not move it, they are sent again, as without a session), diverged, or caught
        up outside the ISR (its expansion may have to be retried). An error needs neither:
        the follower backs off that partition and names it again."""
        session.steady.pop(key, None)
        if result.error_code:
            return True
        partition = self._replicas.partitions.get(session.names[key]) if key in session.names else None
        if partition is None or partition.leader_state is None:
            return True
        if (
            result.diverging_epoch < 0
            and wanted.fetch_offset == partition.log.log_end_offset
            and session.replica_id in partition.leader_state.isr
        ):
            session.steady[key] = None
            return True
        return False

    def on_role_changed(self, partition: "Partition") -> None:
        """A partition's state changed (leadership, epoch, ISR): followers in a session look
        at it again, so one that left the ISR while steady is offered to the ISR updater
        again (an ISR change keeps the leader epoch, so the follower names nothing)."""
        self._touched(partition.key)

    def _touched(self, name: Hashable) -> None:
        """A partition led here changed (an append, its high watermark or log start moved, it
        was deleted): the sessions holding it look at it again. A steady follower held the
        whole log when its session's latest request arrived, so it was caught up then, which
        the ISR lag check must count (the follower will not name the partition again until it
        has fetched what the change added)."""
        for session, key in self.sessions.watching(name):  # type: ignore[arg-type]
            if (session.replica_id, key) == self._looking:
                continue
            if key in session.steady:
                partition = self._replicas.partitions.get(name)  # type: ignore[call-overload]
                if partition is not None and partition.leader_state is not None:
                    partition.leader_state.on_follower_caught_up(session.replica_id, session.last_request_ms)
            session.touched(key)

    async def _handle_sessionless(self, request: ReplicaFetchRequest) -> ReplicaFetchResponse:
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
