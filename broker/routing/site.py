"""What forwarding and remote reads use of this broker: what the read-replica policy reads
(reads/replica_policy.py) and the RPC pool that reaches the other brokers. Declared here
rather than taken from the handler context, because the context depends on routing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from ..reads.replica_policy import ReplicaSite

if TYPE_CHECKING:
    from ..rpc import RpcClientPool


class RoutingSite(ReplicaSite, Protocol):
    @property
    def rpc_pool(self) -> "RpcClientPool[Any, Any]": ...
