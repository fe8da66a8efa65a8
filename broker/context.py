"""What a request handler may use of the broker, and nothing more.

Handlers and dispatch are typed against `HandlerContext` (forwarding and remote reads against
the narrower routing/site.py), never against the composition root (broker.py), so the
dependency points one way: the root builds the components and satisfies this Protocol
structurally; handlers see the components by concern.
Tests hand handlers a SimpleNamespace with just the members a case needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .clock import Clock
    from .cluster.view import ClusterView
    from .config import BrokerConfig
    from .wal.reader import WalReader
    from .wal.wal_writer import WalWriter
    from .groups.coordinator import GroupCoordinator
    from .metrics import BrokerMetrics
    from .objectstore import ObjectStore
    from .tiering.reader import TieredReader
    from .tiering.service import OffloadService
    from .peer_service import PeerRequest, PeerResponse
    from .producer_ids import ProducerIdAllocator
    from .transactions.coordinator import TransactionCoordinator
    from .replica_manager import ReplicaManager
    from .routing.cross_az import CrossAzBytes
    from .routing.router import AzRouter
    from .rpc import RpcClientPool
    from .topics import TopicCatalog
    from .waiters import FetchWaiters
    from .walfiles.manager import WalFileManager


class HandlerContext(Protocol):
    """Read-only members, grouped by concern."""

    # -- this broker: configuration, identity, lifecycle, clock, metrics --------------------
    @property
    def config(self) -> BrokerConfig: ...
    @property
    def node_id(self) -> int: ...
    @property
    def cluster_id(self) -> str: ...
    @property
    def stopping(self) -> bool: ...  # shutting down: parked fetches answer now
    @property
    def clock(self) -> Clock: ...
    @property
    def metrics(self) -> BrokerMetrics: ...

    # -- topics and the cluster view (metadata) ---------------------------------------------
    @property
    def catalog(self) -> TopicCatalog: ...
    @property
    def view(self) -> ClusterView: ...
    def assign_replicas(self, partitions: range | list[int], replication_factor: int) -> dict[int, list[int]]: ...

    # -- replicas hosted here, and waiting for their appends --------------------------------
    @property
    def replica_manager(self) -> ReplicaManager: ...
    @property
    def waiters(self) -> FetchWaiters: ...

    # -- clients' AZs: which broker represents a diskless partition, bytes across AZs -------
    @property
    def router(self) -> AzRouter: ...
    @property
    def cross_az(self) -> CrossAzBytes: ...

    # -- diskless WAL: writing produced batches, reading them back --------------------------
    @property
    def wal(self) -> WalWriter: ...
    @property
    def wal_reader(self) -> WalReader: ...
    @property
    def tiered_reader(self) -> TieredReader: ...
    @property
    def objects(self) -> ObjectStore: ...

    # -- other brokers (forwarded requests, remote reads) -----------------------------------
    @property
    def rpc_pool(self) -> RpcClientPool[PeerRequest, PeerResponse]: ...

    # -- coordinators -----------------------------------------------------------------------
    @property
    def groups(self) -> GroupCoordinator: ...
    @property
    def producer_ids(self) -> ProducerIdAllocator: ...
    @property
    def transactions(self) -> TransactionCoordinator: ...

    # -- the WAL file manager (answers on the controller) -------------------------------------
    @property
    def wal_files(self) -> WalFileManager: ...

    # -- tiering (offload on the partition leaders) -----------------------------------------
    @property
    def offload(self) -> OffloadService: ...
