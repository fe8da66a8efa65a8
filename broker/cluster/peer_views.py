"""The last step of a controlled shutdown before the listener closes: wait until every
other registered broker's cluster view has applied the store revision at which this
broker's leaderships moved (and its registration turned draining). Until then a peer a
client asks for metadata may still name this broker, and the client's retry would find
its port closed. Each peer is asked over the inter-broker RPC; one that does not answer
(gone, or too old to know the question) is not waited for again."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ..rpc import RpcError
from .messages import VIEW_REVISION_VERSION, ViewRevisionRequest, ViewRevisionResponse

if TYPE_CHECKING:
    from ..clock import Clock
    from ..rpc import RpcClientPool
    from .view import ClusterView

log = logging.getLogger(__name__)

ASK_TIMEOUT_S = 1.0  # a peer slower than this to say its revision is not waited for
POLL_S = 0.02  # between rounds of asking the peers still behind


async def wait_for_peer_views(
    node_id: int,
    view: "ClusterView",
    pool: "RpcClientPool[Any, Any]",
    revision: int,
    deadline_ms: int,
    clock: "Clock",
) -> list[int]:
    """Wait until each other registered broker has applied `revision`, or `deadline_ms`
    (on `clock`) passes; return the peers that are behind or did not answer. A broker that
    registers meanwhile (restarted, its view still loading) is asked too."""
    done: set[int] = set()  # confirmed, or gone silent (not asked again)
    unanswered: list[int] = []
    while True:
        behind = sorted(b.node_id for b in view.brokers.values() if b.node_id not in done and b.node_id != node_id)
        for peer in behind:
            registration = view.brokers.get(peer)
            if registration is None or not registration.rpc_host:  # gone, or no RPC listener
                done.add(peer)
                continue
            client = pool.get(peer, registration.rpc_host, registration.rpc_port)
            try:
                answer = await client.call(ViewRevisionRequest(VIEW_REVISION_VERSION), ASK_TIMEOUT_S)
            except RpcError as exc:
                log.info("controlled shutdown: broker %d did not say its metadata revision (%s)", peer, exc)
                done.add(peer)
                unanswered.append(peer)
                continue
            if isinstance(answer, ViewRevisionResponse) and answer.revision >= revision:
                done.add(peer)
        behind = sorted(b.node_id for b in view.brokers.values() if b.node_id not in done and b.node_id != node_id)
        if not behind or clock.monotonic_ms() >= deadline_ms:
            return behind + sorted(unanswered)
        await clock.sleep(POLL_S)
