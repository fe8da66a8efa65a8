"""What forwarding uses of this broker: the cluster view (where the other brokers listen)
and the RPC pool that reaches them. Declared here rather than taken from the handler
context, because the context depends on routing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..cluster.view import ClusterView
    from ..rpc import RpcClientPool


class RoutingSite(Protocol):
    @property
    def view(self) -> "ClusterView": ...

    @property
    def rpc_pool(self) -> "RpcClientPool[Any, Any]": ...
