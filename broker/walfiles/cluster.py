"""Asking every data broker for its replicas' references (the manager's `ReferenceSource`).

Which brokers must answer: every registered broker that stores data, and every broker named
as a replica of any partition. A replica's broker that is not registered (down, or its
session expired) pauses the manager: its logs are on its disk, may reference anything, and
come back with it. Stateless brokers host no replicas and are not asked.

What an answer must cover: every replica this manager's view gives the broker, of a topic
its catalog knows (what the broker's replica manager opens; a deleted topic's leftover
states are not hosted anywhere). A broker still opening its logs answers `NotReady`
(reporter.py); one that answers without a replica the view gives it (its view lags this
one, the partition failed to open, or an older broker answering before its logs are open)
pauses the manager too: that replica's log on its disk may reference anything. The
snapshot of the view is taken before asking, so a replica assigned while the question is
out does not count against an answer that could not know it; a view that lags behind the
broker's costs nothing (the broker reports every replica it has open, listed or not).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING, Any, cast

from ..partition_ids import TopicIdPartition
from .manager import GcPaused
from .messages import (
    WALGC_VERSION,
    ObjectsQuery,
    WalQueryRequest,
    WalQueryResponse,
    WalReferencesRequest,
    WalReferencesResponse,
)
from .policy import PartitionKey

if TYPE_CHECKING:
    from ..cluster.view import ClusterView
    from ..rpc import RpcClientPool
    from ..topics import TopicCatalog
    from .reporter import ReferenceReporter

ASK_TIMEOUT_S = 10.0


class ClusterReferences:
    def __init__(
        self,
        node_id: int,
        view: "ClusterView",
        catalog: "TopicCatalog",
        pool: "RpcClientPool[Any, Any]",  # the broker's peer pool (peer_service.py's messages)
        local: "ReferenceReporter",
    ) -> None:
        self._node_id = node_id
        self._view = view
        self._catalog = catalog
        self._pool = pool
        self._local = local

    def required(self) -> set[int]:
        required = {b.node_id for b in self._view.brokers.values() if not b.stateless}
        for state in self._view.partitions.values():
            required.update(state.record.replicas)
        return required

    def hosted(self) -> dict[int, set[PartitionKey]]:
        """The replicas this view gives each broker, of topics the catalog knows."""
        hosted: dict[int, set[PartitionKey]] = {}
        counts: dict[str, int] = {}  # topic id -> partitions (0: not in the catalog)
        for (topic_id, index), state in self._view.partitions.items():
            if topic_id not in counts:
                topic = self._catalog.by_id(uuid.UUID(topic_id))
                counts[topic_id] = 0 if topic is None else topic.partitions
            if index >= counts[topic_id]:
                continue
            for node in state.record.replicas:
                hosted.setdefault(node, set()).add((topic_id, index))
        return hosted

    async def gather(self) -> list[WalReferencesResponse]:
        required = self.required()
        missing = sorted(required - set(self._view.brokers))
        if missing:
            raise GcPaused(
                f"broker(s) {', '.join(map(str, missing))} host replicas but are not registered "
                "(down?): their logs may reference any object",
                missing,
            )
        if not required:
            raise GcPaused("no data broker is registered")
        hosted = self.hosted()
        request = WalReferencesRequest(WALGC_VERSION, self._node_id)
        nodes = sorted(required)
        answers = await asyncio.gather(*(self._ask(node, request) for node in nodes), return_exceptions=True)
        problems: dict[int, str] = {}
        for node, answer in zip(nodes, answers):
            if isinstance(answer, BaseException):
                problems[node] = f"broker {node} did not answer ({_said(answer)})"
                continue
            assert isinstance(answer, WalReferencesResponse)
            if answer.opened is None:
                problems[node] = f"broker {node} did not say which replicas it has open (an older version: upgrade it)"
                continue
            opened = {(t, p) for t, indexes in answer.opened.items() for p in indexes}
            unopened = sorted(hosted.get(node, set()) - opened)
            if unopened:
                problems[node] = _unopened(node, unopened, len(hosted[node]))
        if problems:
            raise GcPaused("; ".join(problems.values()) + ": their logs may reference any object", sorted(problems))
        return cast("list[WalReferencesResponse]", answers)

    async def query(self, asked: dict[PartitionKey, list[str]]) -> dict[PartitionKey, tuple[set[str], set[str]]]:
        """Every broker named as a replica of an asked partition must answer, for each asked
        partition the view gives it (reporter.py answers for every one it has open)."""
        nodes: set[int] = set()
        for topic_id, index in asked:
            state = self._view.partitions.get(TopicIdPartition.of(uuid.UUID(topic_id), index))
            if state is not None:
                nodes.update(state.record.replicas)
        hosted = self.hosted()
        request = WalQueryRequest(WALGC_VERSION, [ObjectsQuery(t, p, ids) for (t, p), ids in sorted(asked.items())])
        found: dict[PartitionKey, tuple[set[str], set[str]]] = {}
        ordered = sorted(nodes)
        for node, answer in zip(ordered, await asyncio.gather(*(self._ask(node, request) for node in ordered))):
            assert isinstance(answer, WalQueryResponse)
            must = hosted.get(node, set()).intersection(asked)
            unopened = sorted(must - {(r.topic_id, r.partition) for r in answer.found})
            if unopened:
                raise GcPaused(_unopened(node, unopened, len(hosted[node])), [node])
            for replica in answer.found:
                committed, uncommitted = found.setdefault((replica.topic_id, replica.partition), (set(), set()))
                committed.update(replica.committed)
                uncommitted.update(replica.uncommitted)
        return found

    async def _ask(
        self, node: int, request: WalReferencesRequest | WalQueryRequest
    ) -> WalReferencesResponse | WalQueryResponse:
        if node == self._node_id:
            if isinstance(request, WalReferencesRequest):
                return await self._local.answer(request)
            return await self._local.answer_query(request)
        registration = self._view.brokers.get(node)
        if registration is None:
            raise GcPaused(f"broker {node} hosts replicas but is not registered")
        client = self._pool.get(node, registration.rpc_host or "", registration.rpc_port)
        answer = await client.call(request, ASK_TIMEOUT_S)
        expected = WalReferencesResponse if isinstance(request, WalReferencesRequest) else WalQueryResponse
        if not isinstance(answer, expected) or answer.node_id != node:
            raise ValueError(f"unexpected answer {type(answer).__name__} from broker {node}")
        return answer


def _said(error: BaseException) -> str:
    """`RpcRemoteError: NotReady: broker 2 has not opened ...`, `RpcTimeout: no response ...`"""
    return f"{type(error).__name__}: {error}"


def _unopened(node: int, unopened: list[PartitionKey], hosted: int) -> str:
    topic_id, index = unopened[0]
    return (
        f"broker {node} has not opened {len(unopened)} of the {hosted} replica(s) the cluster view gives it "
        f"(e.g. partition {index} of topic {topic_id}; starting, its view lags, or the partition failed to open)"
    )
