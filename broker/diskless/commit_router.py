"""The WAL writer's committer: one commit per leader broker per WAL object. Partitions this
broker leads are committed locally; the others are sent to their leaders over the RPC, all
in the WAL object's seal order (calls on one connection are written in call order and
applied by the leader in arrival order), and the answers are put back in request order.

When a leader cannot be reached or has just changed, that leader's partitions fail with a
retriable error (NOT_LEADER_OR_FOLLOWER; REQUEST_TIMED_OUT when the commit may have been
applied): the producer refreshes its metadata and retries, and its idempotence turns a
commit that did land into the original offsets, never a duplicate.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TYPE_CHECKING

from ..metadata.records import NO_LEADER
from ..protocol.errors import ApiError, ErrorCode
from ..rpc import RpcError, RpcTimeout
from .commit import ACKS_TIMEOUT_S, CommitRequest, CommitResponse, CommitResult, failed

if TYPE_CHECKING:
    from ..cluster.view import ClusterView
    from ..metrics import BrokerMetrics
    from ..rpc import RpcClientPool
    from .commit import LocalCommitter

REMOTE_TIMEOUT_S = ACKS_TIMEOUT_S + 5.0  # the leader answers acks=all within ACKS_TIMEOUT_S


class CommitRouter:
    def __init__(self, node_id: int, local: "LocalCommitter", view: "ClusterView", pool: "RpcClientPool",
                 metrics: "BrokerMetrics") -> None:
        self._node_id = node_id
        self._local = local
        self._view = view
        self._pool = pool
        self._metrics = metrics

    def commit(self, request: CommitRequest) -> Awaitable[CommitResponse]:
        by_leader: dict[int, list[int]] = {}
        for i, part in enumerate(request.partitions):
            state = self._view.partitions.get((str(part.topic_id), part.partition))
            by_leader.setdefault(state.record.leader if state is not None else NO_LEADER, []).append(i)
        pending: list[tuple[list[int], Awaitable[CommitResponse]]] = []
        for leader, indexes in by_leader.items():
            sub = CommitRequest(request.version, request.object_id, [request.partitions[i] for i in indexes])
            if leader == self._node_id:
                self._metrics.wal_commit_requests.labels("local").inc()
                pending.append((indexes, self._local.commit(sub)))
            else:
                self._metrics.wal_commit_requests.labels("remote").inc()
                pending.append((indexes, asyncio.ensure_future(self._remote(leader, sub))))
        return self._merged(len(request.partitions), request.version, pending)

    async def _remote(self, leader: int, request: CommitRequest) -> CommitResponse:
        broker = self._view.brokers.get(leader)
        if leader == NO_LEADER or broker is None or broker.rpc_host is None:
            return _all_failed(request, ApiError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                                 f"no live leader for these partitions (leader {leader})"))
        try:
            return await self._pool.get(leader, broker.rpc_host, broker.rpc_port).call(request, REMOTE_TIMEOUT_S)
        except RpcTimeout as exc:
            return _all_failed(request, ApiError(ErrorCode.REQUEST_TIMED_OUT, f"commit to broker {leader}: {exc}"))
        except RpcError as exc:
            return _all_failed(request, ApiError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"commit to broker {leader}: {exc}"))

    @staticmethod
    async def _merged(count: int, version: int,
                      pending: list[tuple[list[int], Awaitable[CommitResponse]]]) -> CommitResponse:
        results: list[CommitResult] = [failed(ApiError(ErrorCode.UNKNOWN_SERVER_ERROR, "not committed"))] * count
        for indexes, response in pending:
            for i, result in zip(indexes, (await response).results):
                results[i] = result
        return CommitResponse(version, results)


def _all_failed(request: CommitRequest, error: ApiError) -> CommitResponse:
    return CommitResponse(request.version, [failed(error)] * len(request.partitions))
