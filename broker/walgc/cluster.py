"""Asking every data broker for its replicas' references (the manager's `ReferenceSource`).

Which brokers must answer: every registered broker that stores data, and every broker named
as a replica of any partition. A replica's broker that is not registered (down, or its
session expired) pauses the manager: its logs are on its disk, may reference anything, and
come back with it. Stateless brokers host no replicas and are not asked.
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
    from .reporter import ReferenceReporter

ASK_TIMEOUT_S = 10.0


class ClusterReferences:
    def __init__(
        self,
        node_id: int,
        view: "ClusterView",
        pool: "RpcClientPool[Any, Any]",  # the broker's peer pool (peer_service.py's messages)
        local: "ReferenceReporter",
    ) -> None:
        self._node_id = node_id
        self._view = view
        self._pool = pool
        self._local = local

    def required(self) -> set[int]:
        required = {b.node_id for b in self._view.brokers.values() if not b.stateless}
        for state in self._view.partitions.values():
            required.update(state.record.replicas)
        return required

    async def gather(self) -> list[WalReferencesResponse]:
        required = self.required()
        missing = sorted(required - set(self._view.brokers))
        if missing:
            raise GcPaused(
                f"broker(s) {', '.join(map(str, missing))} host replicas but are not registered "
                "(down?): their logs may reference any object"
            )
        if not required:
            raise GcPaused("no data broker is registered")
        request = WalReferencesRequest(WALGC_VERSION, self._node_id)
        nodes = sorted(required)
        answers = await asyncio.gather(*(self._ask(node, request) for node in nodes), return_exceptions=True)
        for node, answer in zip(nodes, answers):
            if isinstance(answer, BaseException):
                raise GcPaused(f"broker {node} did not answer ({answer!r}): its logs may reference any object")
        return cast("list[WalReferencesResponse]", answers)

    async def query(self, asked: dict[PartitionKey, list[str]]) -> dict[PartitionKey, tuple[set[str], set[str]]]:
        """Every broker named as a replica of an asked partition must answer (a replica not
        opened yet answers nothing for it: it references nothing yet)."""
        nodes: set[int] = set()
        for topic_id, index in asked:
            state = self._view.partitions.get(TopicIdPartition.of(uuid.UUID(topic_id), index))
            if state is not None:
                nodes.update(state.record.replicas)
        request = WalQueryRequest(WALGC_VERSION, [ObjectsQuery(t, p, ids) for (t, p), ids in sorted(asked.items())])
        found: dict[PartitionKey, tuple[set[str], set[str]]] = {}
        for answer in await asyncio.gather(*(self._ask(node, request) for node in sorted(nodes))):
            assert isinstance(answer, WalQueryResponse)
            for replica in answer.found:
                committed, uncommitted = found.setdefault((replica.topic_id, replica.partition), (set(), set()))
                committed.update(replica.committed)
                uncommitted.update(replica.uncommitted)
        return found

    async def _ask(
        self, node: int, request: WalReferencesRequest | WalQueryRequest
    ) -> WalReferencesResponse | WalQueryResponse:
        if node == self._node_id:
            return (
                self._local.answer(request)
                if isinstance(request, WalReferencesRequest)
                else self._local.answer_query(request)
            )
        registration = self._view.brokers.get(node)
        if registration is None:
            raise GcPaused(f"broker {node} hosts replicas but is not registered")
        client = self._pool.get(node, registration.rpc_host or "", registration.rpc_port)
        answer = await client.call(request, ASK_TIMEOUT_S)
        expected = WalReferencesResponse if isinstance(request, WalReferencesRequest) else WalQueryResponse
        if not isinstance(answer, expected) or answer.node_id != node:
            raise ValueError(f"unexpected answer {type(answer).__name__} from broker {node}")
        return answer
