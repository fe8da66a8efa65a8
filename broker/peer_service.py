"""What brokers ask each other over the inter-broker RPC (rpc/), and who answers: replica
fetches (replication/leader_service.py), diskless commits from produce representatives
and their acks=all waits
(wal/commit.py), entry reads for brokers without a replica
(reads/read_service.py), partition requests they send on
(routing/request_forwarding.py), the WAL file manager's question about references
(broker/walfiles/reporter.py), the transaction coordinator's permits (transactions/permits.py),
and a stopping broker's question about the metadata revision this
broker's cluster view has applied (cluster/peer_views.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Union

from .cluster.messages import VIEW_REVISION_VERSION, ViewRevisionRequest, ViewRevisionResponse
from .wal.commit import CommitRequest, CommitResponse, ReplicationWaitRequest, ReplicationWaitResponse
from .replication.messages import ReplicaFetchRequest, ReplicaFetchResponse
from .transactions.messages import TxnPermitRequest, TxnPermitResponse
from .routing.messages import KafkaForwardRequest, KafkaForwardResponse, ReplicaReadRequest, ReplicaReadResponse
from .walfiles.messages import WalQueryRequest, WalQueryResponse, WalReferencesRequest, WalReferencesResponse

if TYPE_CHECKING:
    from .wal.commit import LocalCommitter
    from .replication.leader_service import ReplicaFetchService
    from .reads.read_service import ReplicaReadService
    from .walfiles.reporter import ReferenceReporter

PeerRequest = Union[
    ReplicaFetchRequest,
    CommitRequest,
    ReplicationWaitRequest,
    ReplicaReadRequest,
    KafkaForwardRequest,
    WalReferencesRequest,
    WalQueryRequest,
    ViewRevisionRequest,
    TxnPermitRequest,
]
PeerResponse = Union[
    ReplicaFetchResponse,
    CommitResponse,
    ReplicationWaitResponse,
    ReplicaReadResponse,
    KafkaForwardResponse,
    WalReferencesResponse,
    WalQueryResponse,
    ViewRevisionResponse,
    TxnPermitResponse,
]


class PeerService:
    def __init__(
        self,
        fetches: "ReplicaFetchService",
        committer: "LocalCommitter",
        reads: "ReplicaReadService",
        forwarded: Callable[[KafkaForwardRequest], Awaitable[KafkaForwardResponse]],
        references: "ReferenceReporter",
        node_id: int,
        view_revision: Callable[[], int],
        permits: Callable[[TxnPermitRequest], TxnPermitResponse],
    ) -> None:
        self._permits = permits
        self._node_id = node_id
        self._view_revision = view_revision
        self._references = references
        self._fetches = fetches
        self._committer = committer
        self._reads = reads
        self._forwarded = forwarded

    async def handle(self, request: PeerRequest) -> PeerResponse:
        if isinstance(request, CommitRequest):
            # Applied before any await: commits of one representative's connection reach the
            # partitions in the order they were sent (the WAL objects' seal order).
            return self._committer.apply(request)
        if isinstance(request, ReplicationWaitRequest):
            return await self._committer.answer_wait(request)
        if isinstance(request, ReplicaFetchRequest):
            return await self._fetches.handle(request)
        if isinstance(request, ReplicaReadRequest):
            return await self._reads.handle(request)
        if isinstance(request, WalReferencesRequest):
            return await self._references.answer(request)
        if isinstance(request, WalQueryRequest):
            return await self._references.answer_query(request)
        if isinstance(request, TxnPermitRequest):
            return self._permits(request)
        if isinstance(request, ViewRevisionRequest):
            return ViewRevisionResponse(VIEW_REVISION_VERSION, self._node_id, self._view_revision())
        return await self._forwarded(request)
