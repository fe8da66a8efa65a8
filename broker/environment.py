"""What a broker talks to outside its own logic: time, randomness and ids, the metadata
store, the object store and the other brokers.

`Environment.for_process` builds the real ones from the configuration. The simulation
(tests/sim) builds one world of fakes with faults instead (a virtual clock, an in-memory
metadata store and object store, a simulated network) and hands each broker its own
Environment: only the bottom layer is swapped (STYLE 4), every component above it is the
real one. Components take what they need from here through their constructors; none of
them reads the wall clock, draws random numbers or makes ids on its own.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .clock import Clock, SystemClock
from .config import parse_host_port
from .heap import HeapFreezer
from .metadata import MetadataStore, open_store
from .objectstore import ObjectStore, RequestObserver, open_object_store
from .randomness import Random, new_uuid
from .rpc import RpcClientPool, RpcServer
from .rpc.server import OnBytes

if TYPE_CHECKING:
    from .tiering.runner import TieringJobs
    from .config import BrokerConfig


class PeerTransport(Protocol):
    """How this broker reaches the others (client pools) and is reached by them."""

    def client_pool(self, on_bytes: OnBytes | None) -> RpcClientPool[Any, Any]: ...

    async def serve(self, handler: Callable[[Any], Awaitable[Any]]) -> None: ...

    async def stop(self) -> None: ...


class TcpPeers:
    """The inter-broker RPC over TCP (`rpc.listen`, `rpc.advertise`)."""

    def __init__(self, listen: str | None, request_type: Any, response_type: Any) -> None:
        self._listen = listen
        self._types = (request_type, response_type)
        self._server: RpcServer[Any, Any] | None = None

    def client_pool(self, on_bytes: OnBytes | None) -> RpcClientPool[Any, Any]:
        return RpcClientPool(*self._types, on_bytes=on_bytes)

    async def serve(self, handler: Callable[[Any], Awaitable[Any]]) -> None:
        if self._listen:
            host, port = parse_host_port(self._listen, "rpc.listen")
            self._server = RpcServer(handler, *self._types)
            await self._server.start(host, port)

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop()


@dataclass
class Environment:
    clock: Clock
    random: Random  # placement starts, jitter: anything drawn
    metadata: MetadataStore
    objects: ObjectStore
    peers: PeerTransport
    tiering_jobs: TieringJobs | None = None  # None: Spark (tiering.spark.*); simulations run jobs in-process
    # Freezes long-lived partition state out of full garbage collections (heap.py); None:
    # never (simulations and in-process tests share one interpreter among many brokers)
    heap: HeapFreezer | None = None

    def new_uuid(self) -> uuid.UUID:
        """A random (version 4) UUID from `random`: topic ids, incarnations, cluster ids."""
        return new_uuid(self.random)

    @classmethod
    def for_process(cls, config: "BrokerConfig", on_object_request: RequestObserver | None = None) -> "Environment":
        from .peer_service import PeerRequest, PeerResponse  # late: peer_service imports most of the broker

        clock, rng = SystemClock(), Random()
        return cls(
            clock=clock,
            random=rng,
            metadata=open_store(config, clock),
            objects=open_object_store(
                config.object_store_url,
                max_concurrency=config.object_store_max_concurrency,
                on_request=on_object_request,
                clock=clock,
                rng=rng,
            ),
            peers=TcpPeers(config.rpc_listen, PeerRequest, PeerResponse),
            heap=HeapFreezer(),
        )
