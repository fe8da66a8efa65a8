"""Inter-broker RPC: msgspec messages over TCP on a listener of its own, apart from Kafka's.

Generic over message types: the server is given a handler and the request and response
types (unions of tagged msgspec Structs declared by whoever owns the calls); the client
multiplexes concurrent calls over one connection. Frame format: docs/formats.md,
"Inter-broker RPC".
"""

from .client import RpcClient, RpcClientPool
from .errors import RpcError, RpcRemoteError, RpcTimeout, RpcUnavailable
from .server import RpcServer

__all__ = [
    "RpcClient",
    "RpcClientPool",
    "RpcError",
    "RpcRemoteError",
    "RpcServer",
    "RpcTimeout",
    "RpcUnavailable",
]
