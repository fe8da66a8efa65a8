"""Kafka clients for cluster simulations, speaking the real protocol to the real listener.

`SimConnection` is one client connection: requests are encoded with kafka-python's classes
and fed to the broker's own `server.KafkaConnection` over a fake transport, so pipelining,
per-connection order and the memory bounds are the listener's, exactly as with a socket.
A connection to a crashed broker fails (refused); a broker that dies with requests in
flight leaves them unanswered, and the client's own timeout ends them, as with TCP.
"""

from __future__ import annotations

import asyncio
import collections
import struct
from collections.abc import Callable
from typing import Any

from broker.protocol.frames import FrameReader
from broker.protocol.messages import RESPONSE_CLASSES
from broker.server import KafkaConnection

from .cluster import SimBroker
from .nodes import as_node

REQUEST_TIMEOUT_S = 30.0  # a client's request.timeout.ms


class ConnectionLost(Exception):
    """The connection broke, or could not be made: the broker is down."""


class _Transport:
    """What KafkaConnection sees as its socket."""

    def __init__(self, client: "SimConnection") -> None:
        self._client = client
        self.reading = True
        self.closed = False

    def get_extra_info(self, name: str) -> Any:
        return ("10.0.0.9", 40000) if name == "peername" else None

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True
        self._client._flush()

    def writelines(self, parts: list[bytes | bytearray | memoryview]) -> None:
        self._client._received(b"".join(parts))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._client._lost("closed by the broker")


class SimConnection:
    def __init__(
        self,
        target: SimBroker,
        client_id: str,
        is_down: Callable[[], bool],
        registry: dict[int, list[Any]] | None = None,
    ) -> None:
        if is_down() or not target.running:
            raise ConnectionLost(f"broker {target.node_id} refused the connection")
        self.node_id = target.node_id
        self._is_down = is_down
        self._client_id = client_id
        self._transport = _Transport(self)
        self._reader = FrameReader(1 << 30)
        self._outbox: collections.deque[bytes] = collections.deque()
        self._pending: collections.deque[tuple[int, int, int, asyncio.Future[Any]]] = collections.deque()
        self._correlation = 0
        self.closed = False
        with as_node(target.node):  # the listener's tasks are the broker's: a crash freezes them
            self._server_side = KafkaConnection(target.broker.server)
            self._server_side.connection_made(self._transport)  # type: ignore[arg-type]
        if registry is not None:  # so that a crash of the broker resets this connection
            connections = registry.setdefault(target.node_id, [])
            connections[:] = [c for c in connections if not c.closed]
            connections.append(self)

    def send(self, request: Any, version: int) -> asyncio.Future[Any]:
        """Write a request (pipelined: do not wait for earlier answers); its response future."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self.closed or self._is_down():
            self.close("the broker is down")
            future.set_exception(ConnectionLost(f"connection to broker {self.node_id} is closed"))
            return future
        self._correlation += 1
        request.with_header(correlation_id=self._correlation, client_id=self._client_id)
        self._pending.append((self._correlation, type(request).API_KEY, version, future))
        self._outbox.append(bytes(request.encode(version=version, header=True, framed=True)))
        self._flush()
        return future

    async def request(self, request: Any, version: int, timeout_s: float = REQUEST_TIMEOUT_S) -> Any:
        future = self.send(request, version)
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout_s)
        except TimeoutError:
            self.close("request timed out")  # what clients do: drop the connection, fail what is in flight
            raise ConnectionLost(f"no answer from broker {self.node_id} in {timeout_s}s") from None

    def close(self, reason: str = "closed by the client") -> None:
        if self.closed:
            return
        self._lost(reason)
        if not self._is_down():
            self._server_side.connection_lost(None)

    def reset(self, reason: str) -> None:
        """The broker's end is gone (its process died): fail everything in flight now."""
        self._lost(reason)

    # -- transport side -------------------------------------------------------------------------
    def _flush(self) -> None:
        """Deliver what the client wrote while the broker reads (TCP holds the rest)."""
        while self._outbox and self._transport.reading and not self.closed and not self._is_down():
            self._server_side.data_received(self._outbox.popleft())

    def _received(self, data: bytes) -> None:
        for frame in self._reader.feed(data):
            correlation_id = struct.unpack_from(">i", frame)[0]
            expected, api_key, version, future = self._pending.popleft()
            assert correlation_id == expected, f"response {correlation_id} out of order (expected {expected})"
            if not future.done():
                future.set_result(RESPONSE_CLASSES[api_key].decode(frame, version=version, header=True))

    def _lost(self, reason: str) -> None:
        self.closed = True
        self._transport.closed = True
        while self._pending:
            future = self._pending.popleft()[3]
            if not future.done():
                future.set_exception(ConnectionLost(f"broker {self.node_id}: {reason}"))
                future.exception()  # retrieved: nobody may be waiting any more
