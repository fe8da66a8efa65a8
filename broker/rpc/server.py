"""The inter-broker RPC listener: sockets, frames and concurrency; what a request means is
the handler's business.

Every request runs in its own task, so a slow request (a replica fetch waiting for data)
does not hold up the others on the connection; responses go back as they finish, matched
by correlation id. Limits: `max_frame_bytes` per frame (a bigger one, or any malformed
frame, closes that connection only) and `max_in_flight` requests handled at once per
connection (at the bound reading pauses, pushing back on the peer through TCP; the frames
of the chunk being read may overshoot it). Stop closes the listener and every connection
and cancels the handlers still running.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

import msgspec

from ..sockets import set_up_connection
from .errors import RpcRefused
from .framing import DEFAULT_MAX_FRAME_BYTES, FrameDecoder, FrameError, FrameKind, RpcErrorBody, encode_frame

log = logging.getLogger(__name__)

Req = TypeVar("Req")
Resp = TypeVar("Resp")
OnBytes = Callable[[str, str, int], None]  # (direction "in" | "out", peer "host:port", bytes)

DEFAULT_MAX_IN_FLIGHT = 1024
MAX_ERROR_MESSAGE_CHARS = 1024  # so an error frame always fits, whatever the exception says


class RpcServer(Generic[Req, Resp]):
    def __init__(
        self,
        handler: Callable[[Req], Awaitable[Resp]],
        request_type: Any,
        response_type: Any,
        *,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        on_bytes: OnBytes | None = None,
    ) -> None:
        """`request_type` and `response_type` are msgspec types, usually unions of tagged
        Structs; a handler result that is not a `response_type` is answered as an error."""
        self.handler = handler
        self.request_decoder: msgspec.msgpack.Decoder[Req] = msgspec.msgpack.Decoder(request_type)
        self.response_type = response_type
        self.encoder = msgspec.msgpack.Encoder()
        self.max_frame_bytes = max_frame_bytes
        self.max_in_flight = max_in_flight
        self.on_bytes = on_bytes
        self.connections: set[_ServerConnection[Req, Resp]] = set()
        self._server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _ServerConnection(self), host, port)

    @property
    def port(self) -> int:
        """The bound port (useful after starting on port 0)."""
        if self._server is None:
            raise RuntimeError("RpcServer is not started")
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        tasks = [task for conn in list(self.connections) for task in conn.abort()]
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()


class _ServerConnection(asyncio.Protocol, Generic[Req, Resp]):
    def __init__(self, server: RpcServer[Req, Resp]) -> None:
        self._server = server
        self._decoder = FrameDecoder(server.max_frame_bytes)
        self._transport: asyncio.Transport | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._can_write = asyncio.Event()
        self._can_write.set()
        self._reading_paused = False
        self.peer = "?"

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's transports are not subclasses
        self.peer = set_up_connection(transport)
        self._server.connections.add(self)

    def data_received(self, data: bytes) -> None:
        server = self._server
        if server.on_bytes is not None:
            server.on_bytes("in", self.peer, len(data))
        try:
            for frame in self._decoder.feed(data):
                if frame.kind is not FrameKind.REQUEST:
                    raise FrameError(f"unexpected {frame.kind.name} frame from a client")
                request = server.request_decoder.decode(frame.body)
                task = asyncio.get_running_loop().create_task(self._handle(frame.correlation_id, request))
                self._tasks.add(task)
                task.add_done_callback(self._handled)
        except (FrameError, msgspec.DecodeError) as exc:
            log.warning("rpc: closing connection from %s: %s", self.peer, exc)
            self.abort()
            return
        if len(self._tasks) >= server.max_in_flight and not self._reading_paused and self._transport is not None:
            self._reading_paused = True
            self._transport.pause_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.abort()
        self._server.connections.discard(self)

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()

    def abort(self) -> list[asyncio.Task[None]]:
        """Drop the connection and cancel its handlers; return them, to be awaited."""
        if self._transport is not None:
            self._transport.abort()
        self._can_write.set()  # writers blocked on a full buffer wake up and drop their response
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        return tasks

    async def _handle(self, correlation_id: int, request: Req) -> None:
        server = self._server
        try:
            response = await server.handler(request)
            if not isinstance(response, server.response_type):
                raise TypeError(f"handler returned a {type(response).__name__}, not a response type")
            frame = encode_frame(server.encoder, FrameKind.RESPONSE, correlation_id, response, server.max_frame_bytes)
        except Exception as exc:
            if isinstance(exc, RpcRefused):
                log.info("rpc: request %d from %s refused: %s", correlation_id, self.peer, exc)
            else:
                log.warning("rpc: request %d from %s failed", correlation_id, self.peer, exc_info=True)
            body = RpcErrorBody(f"{type(exc).__name__}: {exc}"[:MAX_ERROR_MESSAGE_CHARS])
            frame = encode_frame(server.encoder, FrameKind.ERROR, correlation_id, body, server.max_frame_bytes)
        await self._can_write.wait()
        transport = self._transport
        if transport is None or transport.is_closing():
            return  # the peer is gone; nobody is waiting for this response
        transport.write(frame)
        if server.on_bytes is not None:
            server.on_bytes("out", self.peer, len(frame))

    def _handled(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        transport = self._transport
        if self._reading_paused and len(self._tasks) < self._server.max_in_flight and transport is not None:
            self._reading_paused = False
            if not transport.is_closing():
                transport.resume_reading()
