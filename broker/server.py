"""The Kafka listener: sockets, framing and per-connection response order, nothing else.

Each connection has one worker that answers its requests strictly in arrival order (as
Kafka does), while the transport keeps reading ahead: requests are pipelined, responses
are never reordered. Limits: `socket.request.max.bytes` per frame (bigger closes the
connection), `queued.max.requests` frames waiting per connection (more pauses reading,
which pushes back on the client through TCP), and `connections.max.idle.ms` of silence
closes a connection. Shutdown stops accepting, answers what was already received, then
closes.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import socket
from typing import TYPE_CHECKING

from .dispatch import ConnectionFault, dispatch
from .protocol.frames import FrameError, FrameReader, frame

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger(__name__)


class KafkaConnection(asyncio.Protocol):
    def __init__(self, server: "KafkaServer") -> None:
        self._server = server
        self._broker = server.broker
        self._reader = FrameReader(server.broker.config.socket_request_max_bytes)
        self._queue: collections.deque[bytes] = collections.deque()
        self._wakeup = asyncio.Event()
        self._can_write = asyncio.Event()
        self._can_write.set()
        self._transport: asyncio.Transport | None = None
        self._worker: asyncio.Task[None] | None = None
        self._reading_paused = False
        self._closing = False
        self.busy = False
        self.last_active = 0.0
        self.peer = "?"

    # -- transport callbacks -------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's transports are not subclasses
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.last_active = asyncio.get_running_loop().time()
        self._server.connections.add(self)
        self._broker.metrics.connections.inc()
        self._worker = asyncio.get_running_loop().create_task(self._work())

    def data_received(self, data: bytes) -> None:
        self.last_active = asyncio.get_running_loop().time()
        self._broker.metrics.bytes_in.inc(len(data))
        try:
            frames = self._reader.feed(data)
        except FrameError as exc:
            log.warning("closing connection from %s: %s", self.peer, exc)
            self.close()
            return
        if frames:
            self._queue.extend(frames)
            self._wakeup.set()
            if len(self._queue) >= self._broker.config.queued_max_requests and not self._reading_paused:
                self._reading_paused = True
                self._transport.pause_reading()  # type: ignore[union-attr]

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        self._wakeup.set()
        self._can_write.set()
        if self in self._server.connections:
            self._server.connections.discard(self)
            self._broker.metrics.connections.dec()

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()

    # -- work ------------------------------------------------------------------
    def close(self) -> None:
        self._closing = True
        self._wakeup.set()
        if self._transport is not None:
            self._transport.close()

    async def drain_and_close(self) -> None:
        """Stop reading, answer the requests already received, then close."""
        if self._transport is not None and not self._closing:
            self._transport.pause_reading()
        self._closing = True
        self._wakeup.set()
        if self._worker is not None:
            await self._worker

    async def _work(self) -> None:
        try:
            while True:
                if not self._queue:
                    if self._closing:
                        break
                    self._wakeup.clear()
                    await self._wakeup.wait()
                    continue
                if self._transport is None or self._transport.is_closing():
                    break
                request = self._queue.popleft()
                if self._reading_paused and len(self._queue) < self._broker.config.queued_max_requests // 2:
                    self._reading_paused = False
                    self._transport.resume_reading()
                self.busy = True
                try:
                    response = await dispatch(self._broker, request, self.peer)
                finally:
                    self.busy = False
                    self.last_active = asyncio.get_running_loop().time()
                if response is not None:
                    if self._transport.is_closing():
                        break  # the client went away while we worked; nobody to answer
                    self._broker.metrics.bytes_out.inc(sum(len(part) for part in response))
                    self._transport.writelines(frame(response))
                    await self._can_write.wait()
        except ConnectionFault as exc:
            log.warning("closing connection from %s: %s", self.peer, exc)
        except Exception:
            log.exception("connection from %s failed", self.peer)
        finally:
            if self._transport is not None:
                self._transport.close()


class KafkaServer:
    def __init__(self, broker: "Broker") -> None:
        self.broker = broker
        self.connections: set[KafkaConnection] = set()
        self._server: asyncio.base_events.Server | None = None
        self._reaper: asyncio.Task[None] | None = None

    async def start(self, host: str, port: int) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: KafkaConnection(self), host, port,
                                                reuse_address=True, backlog=1024)
        self._reaper = loop.create_task(self._reap_idle())

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        if self._reaper is not None:
            self._reaper.cancel()
        await asyncio.gather(*(c.drain_and_close() for c in list(self.connections)), return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _reap_idle(self) -> None:
        idle_s = self.broker.config.connections_max_idle_ms / 1000
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(idle_s / 2, 30.0))
            deadline = loop.time() - idle_s
            for conn in list(self.connections):
                if not conn.busy and conn.last_active < deadline:
                    log.info("closing idle connection from %s", conn.peer)
                    conn.close()
