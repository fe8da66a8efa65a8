"""The WAL writer's committer: one commit per leader broker per WAL object. Partitions this
broker leads are committed locally; the others are sent to their leaders over the RPC, all
in the WAL object's seal order (calls on one connection are written in call order and
applied by the leader in arrival order), and each partition's outcome is handed back on its
own: applied when its leader answers the commit, acknowledged when its acks are satisfied
(acks=all: ReplicationWaitRequests to the leader, answered partition by partition).

When a leader cannot be reached or has just changed, that leader's partitions fail with a
retriable error: NOT_LEADER_OR_FOLLOWER when the commit was not applied, REQUEST_TIMED_OUT
when it may have been (the connection failed after the commit was sent). The difference
matters: librdkafka takes NOT_LEADER_OR_FOLLOWER to mean "not persisted" and, should it bump
its epoch, sends such a batch again as a new one. The producer retries, and its idempotence
turns a commit that did land into the original offsets, never a duplicate.

Remote commits to one leader form a stream (commit_streams.py): numbered in sending order,
applied by the leader only in that order. When the leader answers that the stream is closed
from some position (a commit before it never arrived), every commit of it from there on is
known not to be applied: they fail at once, and the next commit opens a new stream. `route`
names the leader, its epoch and the stream a partition's commit would take now.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..metadata.records import NO_LEADER
from ..partition_ids import TopicIdPartition
from ..protocol.errors import ApiError, ErrorCode
from ..rpc import RpcError
from ..wire_errors import wire_error
from .commit_streams import CommitStream
from .commit import (
    ACKS_TIMEOUT_S,
    COMMIT_VERSION,
    CommitRequest,
    CommitResponse,
    CommitResult,
    PendingCommit,
    ReplicationWaitRequest,
    WaitPartition,
    failed,
)

if TYPE_CHECKING:
    from ..cluster.view import ClusterView
    from ..metrics import BrokerMetrics
    from ..rpc import RpcClient, RpcClientPool
    from .commit import LocalCommitter

RPC_MARGIN_S = 5.0  # on top of what the leader may take to answer
WAIT_ROUND_MS = 10_000  # one ReplicationWaitRequest's long poll


@dataclass(slots=True)
class _Stream:
    """This representative's commit stream to one leader."""

    number: int
    next_sequence: int = 0
    unanswered: dict[int, list[PendingCommit]] = field(default_factory=dict)  # sequence -> its outcomes


class CommitRouter:
    def __init__(
        self,
        node_id: int,
        local: "LocalCommitter",
        view: "ClusterView",
        pool: "RpcClientPool",
        metrics: "BrokerMetrics",
        incarnation: str = "",
    ) -> None:
        self._node_id = node_id
        self._incarnation = incarnation
        self._local = local
        self._view = view
        self._pool = pool
        self._metrics = metrics
        self._following: set[asyncio.Task[None]] = set()  # remote commits not yet acknowledged
        self._streams: dict[int, _Stream] = {}  # leader -> this broker's current stream to it (one per broker)

    def _leader(self, topic_id: uuid.UUID, partition: int) -> tuple[int, int]:
        state = self._view.partitions.get(TopicIdPartition.of(topic_id, partition))
        return (NO_LEADER, -1) if state is None else (state.record.leader, state.record.leader_epoch)

    def route(self, topic_id: uuid.UUID, partition: int) -> object:
        leader, epoch = self._leader(topic_id, partition)
        stream = self._streams.get(leader)
        return (leader, epoch, -1 if leader == self._node_id else 0 if stream is None else stream.number)

    def commit(self, request: CommitRequest) -> list[PendingCommit]:
        by_leader: dict[int, list[int]] = {}
        for i, part in enumerate(request.partitions):
            by_leader.setdefault(self._leader(part.topic_id, part.partition)[0], []).append(i)
        pending: list[PendingCommit | None] = [None] * len(request.partitions)
        for leader, indexes in by_leader.items():
            sub = CommitRequest(request.version, request.object_id, [request.partitions[i] for i in indexes])
            if leader == self._node_id:
                self._metrics.wal_commit_requests.labels("local").inc()
                outcomes = self._local.commit(sub)
            else:
                self._metrics.wal_commit_requests.labels("remote").inc()
                outcomes = self._remote(leader, sub)
            for i, outcome in zip(indexes, outcomes):
                pending[i] = outcome
        return pending  # type: ignore[return-value]  # every index belongs to one leader

    def _remote(self, leader: int, request: CommitRequest) -> list[PendingCommit]:
        loop = asyncio.get_running_loop()
        outcomes = [PendingCommit(loop.create_future(), loop.create_future()) for _ in request.partitions]
        broker = self._view.brokers.get(leader)
        if leader == NO_LEADER or broker is None or broker.rpc_host is None:
            error = failed(
                ApiError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"no live leader for these partitions (leader {leader})")
            )
            for outcome in outcomes:
                outcome.applied.set_result(error)
                outcome.acknowledged.set_result(error)
            return outcomes
        client = self._pool.get(leader, broker.rpc_host, broker.rpc_port)
        stream = self._streams.get(leader)
        if stream is None:
            stream = self._streams[leader] = _Stream(0)
        sequence = stream.next_sequence
        stream.next_sequence += 1
        stream.unanswered[sequence] = outcomes
        request = CommitRequest(
            request.version,
            request.object_id,
            request.partitions,
            CommitStream(self._node_id, self._incarnation, stream.number, sequence),
        )
        # Tasks start in creation order and the client writes calls in order: seal order holds.
        call = asyncio.ensure_future(client.call(request, ACKS_TIMEOUT_S + RPC_MARGIN_S))
        task = asyncio.ensure_future(self._follow(leader, client, request, call, outcomes))
        self._following.add(task)
        task.add_done_callback(self._following.discard)
        return outcomes

    async def _follow(
        self,
        leader: int,
        client: RpcClient,
        request: CommitRequest,
        call: asyncio.Future[CommitResponse],
        outcomes: list[PendingCommit],
    ) -> None:
        try:
            await self._hand_back(leader, client, request, call, outcomes)
        finally:  # whatever happened, nobody is left waiting
            unknown = failed(ApiError(ErrorCode.REQUEST_TIMED_OUT, f"commit to broker {leader} did not finish"))
            _outcomes_unknown([outcome for outcome in outcomes if not outcome.applied.done()])
            for outcome in outcomes:
                for future in (outcome.applied, outcome.acknowledged):
                    if not future.done():
                        future.set_result(unknown)

    async def _hand_back(
        self,
        leader: int,
        client: RpcClient,
        request: CommitRequest,
        call: asyncio.Future[CommitResponse],
        outcomes: list[PendingCommit],
    ) -> None:
        """Hand back the leader's answer per partition, then wait out acks=all ones."""
        try:
            try:
                response: CommitResponse = await call
            finally:
                if request.stream is not None:
                    self._answered(leader, request.stream)
            results = response.results
            if response.stream_closed_from >= 0 and request.stream is not None:
                self._closed(leader, request.stream, response.stream_closed_from, results[0] if results else None)
        except RpcError as exc:  # unavailable: sent, maybe applied (REQUEST_TIMED_OUT); else not applied
            results = [failed(wire_error(exc, f"commit to broker {leader}"))] * len(outcomes)
            _outcomes_unknown(outcomes)
        waiting: list[tuple[PendingCommit, CommitResult, WaitPartition]] = []
        for outcome, part, result in zip(outcomes, request.partitions, results):
            if outcome.applied.done():
                continue  # its stream closed before it (_closed): not applied, already answered
            outcome.applied.set_result(result)
            if result.error_code or result.replicated:
                outcome.acknowledged.set_result(result)
            else:
                waiting.append(
                    (
                        outcome,
                        result,
                        WaitPartition(part.topic_id, part.partition, result.leader_epoch, result.end_offset),
                    )
                )
        deadline = asyncio.get_running_loop().time() + ACKS_TIMEOUT_S
        while waiting:
            remaining_ms = int((deadline - asyncio.get_running_loop().time()) * 1000)
            if remaining_ms <= 0:
                for outcome, _result, _wanted in waiting:
                    outcome.acknowledged.set_result(
                        failed(
                            ApiError(
                                ErrorCode.REQUEST_TIMED_OUT,
                                f"not replicated to the ISR of broker {leader}'s partition in time",
                            )
                        )
                    )
                return
            wait_ms = min(remaining_ms, WAIT_ROUND_MS)
            try:
                answer = await client.call(
                    ReplicationWaitRequest(COMMIT_VERSION, wait_ms, [w for _o, _r, w in waiting]),
                    wait_ms / 1000 + RPC_MARGIN_S,
                )
                answers = answer.results
            except RpcError as exc:  # applied: REQUEST_TIMED_OUT for any RPC failure, not wire_error's NOT_LEADER
                for outcome, _result, _wanted in waiting:  # appended, replication unknown: the producer retries
                    outcome.acknowledged.set_result(
                        failed(ApiError(ErrorCode.REQUEST_TIMED_OUT, f"waiting for acks at broker {leader}: {exc}"))
                    )
                return
            still = []
            for (outcome, result, wanted), done in zip(waiting, answers):
                if not done.done:
                    still.append((outcome, result, wanted))
                elif done.error_code:
                    outcome.acknowledged.set_result(CommitResult(done.error_code, done.error_message))
                else:
                    outcome.acknowledged.set_result(result)
            waiting = still

    def _answered(self, leader: int, stream: CommitStream) -> None:
        current = self._streams.get(leader)
        if current is not None and current.number == stream.number:
            current.unanswered.pop(stream.sequence, None)

    def _closed(self, leader: int, stream: CommitStream, closed_from: int, refusal: CommitResult | None) -> None:
        """The leader refuses the stream's commits from `closed_from` on: none of them was
        applied or ever will be, so those still unanswered fail now rather than at their
        call's timeout, and the next commit opens a new stream. (Until the WAL writer has
        settled them, their partitions' idempotent batches are not sent on the new stream:
        `route` changed.)"""
        current = self._streams.get(leader)
        if current is None or current.number != stream.number:
            return  # a stream already left: its commits from the closing position on were failed then
        self._metrics.wal_commit_stream_closures.inc()
        error = refusal or failed(
            ApiError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"commit stream to broker {leader} closed")
        )
        for sequence in [s for s in current.unanswered if s >= closed_from]:
            for outcome in current.unanswered.pop(sequence):
                for future in (outcome.applied, outcome.acknowledged):
                    if not future.done():
                        future.set_result(error)
        self._streams[leader] = _Stream(current.number + 1)


def _outcomes_unknown(outcomes: list[PendingCommit]) -> None:
    """The commit may have been applied or not: nobody knows (WAL file manager, PendingCommit)."""
    for outcome in outcomes:
        if not outcome.applied.done():  # not already known to be refused (CommitRouter._closed)
            outcome.outcome_known = False
