"""The last wait of a controlled shutdown (broker/cluster/peer_views.py), over real RPC
servers on loopback: a peer is asked again until its view has applied the revision; a peer
too old to know the question (it closes the connection) and a peer still behind at the
deadline are reported, and neither makes the wait run past its bound."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from broker.clock import SystemClock
from broker.cluster.messages import VIEW_REVISION_VERSION, ViewRevisionRequest, ViewRevisionResponse
from broker.cluster.peer_views import wait_for_peer_views
from broker.peer_service import PeerRequest, PeerResponse
from broker.rpc import RpcClientPool, RpcServer
from broker.walfiles.messages import WalQueryRequest, WalQueryResponse


def view_of(ports: dict[int, int]) -> Any:
    brokers = {node: SimpleNamespace(node_id=node, rpc_host="127.0.0.1", rpc_port=port) for node, port in ports.items()}
    return SimpleNamespace(brokers=brokers)


async def serve(handler: Any, request_type: Any, response_type: Any) -> tuple[RpcServer[Any, Any], int]:
    server: RpcServer[Any, Any] = RpcServer(handler, request_type, response_type)
    await server.start("127.0.0.1", 0)
    return server, server.port


def test_asks_again_until_applied_and_skips_a_peer_that_does_not_know_the_question() -> None:
    async def main() -> None:
        asked: list[int] = []

        async def catching_up(request: ViewRevisionRequest) -> ViewRevisionResponse:
            asked.append(1)
            return ViewRevisionResponse(VIEW_REVISION_VERSION, 1, 4 + len(asked))  # 5, 6, 7, ...

        async def older(request: WalQueryRequest) -> WalQueryResponse:  # pragma: no cover - never decoded
            raise AssertionError("an older broker cannot decode the question")

        new, new_port = await serve(catching_up, PeerRequest, PeerResponse)
        old, old_port = await serve(older, WalQueryRequest, WalQueryResponse)
        pool: RpcClientPool[Any, Any] = RpcClientPool(PeerRequest, PeerResponse)
        clock = SystemClock()
        try:
            view = view_of({0: 1, 1: new_port, 2: old_port})  # 0 is the stopping broker itself
            behind = await wait_for_peer_views(0, view, pool, 7, clock.monotonic_ms() + 5_000, clock)
            assert behind == [2]
            assert len(asked) == 3
        finally:
            await pool.close()
            await new.stop()
            await old.stop()

    asyncio.run(main())


def test_a_peer_still_behind_at_the_deadline_is_reported() -> None:
    async def main() -> None:
        async def stuck(request: ViewRevisionRequest) -> ViewRevisionResponse:
            return ViewRevisionResponse(VIEW_REVISION_VERSION, 1, 3)

        server, port = await serve(stuck, PeerRequest, PeerResponse)
        pool: RpcClientPool[Any, Any] = RpcClientPool(PeerRequest, PeerResponse)
        clock = SystemClock()
        try:
            started = clock.monotonic_ms()
            behind = await wait_for_peer_views(0, view_of({1: port}), pool, 7, started + 200, clock)
            assert behind == [1]
            assert clock.monotonic_ms() - started < 2_000
        finally:
            await pool.close()
            await server.stop()

    asyncio.run(main())
