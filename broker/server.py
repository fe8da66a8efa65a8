"""The Kafka listener: sockets, framing and per-connection response order, nothing else.

Each connection has one worker that takes its requests strictly in arrival order, and one
writer that answers them in that order, while the transport keeps reading ahead: requests
are pipelined, responses are never reordered. Produce requests may overlap each other while
they wait for a diskless commit (see KafkaConnection._work); everything else runs alone. Limits: `socket.request.max.bytes` per frame (bigger closes the
connection), `queued.max.requests` frames waiting per connection (more pauses reading,
which pushes back on the client through TCP), and `connections.max.idle.ms` of silence
closes a connection. Shutdown stops accepting, answers what was already received, then
closes.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import TYPE_CHECKING

from .dispatch import ConnectionFault, dispatch
from .sockets import set_up_connection
from .protocol.frames import FrameError, FrameReader, frame

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger(__name__)

PRODUCE_KEY = b"\x00\x00"  # api_key 0 as the first two bytes of a request frame
MAX_PIPELINED_PRODUCE = 16  # produce requests of one connection waiting for WAL commits at once


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
        self._pending = 0  # requests dispatched and not yet answered
        self._idle = asyncio.Event()
        self._idle.set()
        self.busy = False
        self.last_active = 0.0
        self.peer = "?"

    # -- transport callbacks -------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's transports are not subclasses
        self.peer = set_up_connection(transport)
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
        """Take requests in arrival order. Produce requests may overlap one another (up to
        MAX_PIPELINED_PRODUCE): each appends synchronously when it starts, so the order of the
        batches is the arrival order, and only the wait for a WAL commit overlaps. Any other
        request waits until everything before it is answered and runs alone, as in Kafka."""
        responses: asyncio.Queue[asyncio.Task[list[bytes | bytearray] | None] | None] = asyncio.Queue()
        writer = asyncio.get_running_loop().create_task(self._write_responses(responses))
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
                pipelined = request[:2] == PRODUCE_KEY
                if not pipelined or self._pending >= MAX_PIPELINED_PRODUCE:
                    await self._idle.wait()
                self._pending += 1
                self._idle.clear()
                self.busy = True
                responses.put_nowait(asyncio.get_running_loop().create_task(dispatch(self._broker, request, self.peer)))
                if not pipelined:
                    await self._idle.wait()
        finally:
            responses.put_nowait(None)
            await writer
            if self._transport is not None:
                self._transport.close()

    async def _write_responses(self, responses: asyncio.Queue) -> None:  # type: ignore[type-arg]
        """Write answers strictly in request order. After a fault the connection is closed and
        the remaining requests are only waited out (nobody is left to answer)."""
        faulted = False
        while (task := await responses.get()) is not None:
            response = None
            try:
                response = await task
            except ConnectionFault as exc:
                if not faulted:
                    log.warning("closing connection from %s: %s", self.peer, exc)
                faulted = True
            except Exception:
                log.exception("connection from %s failed", self.peer)
                faulted = True
            finally:
                self._pending -= 1
                if self._pending == 0:
                    self._idle.set()
                    self.busy = False
                self.last_active = asyncio.get_running_loop().time()
            if faulted or self._transport is None or self._transport.is_closing():
                faulted = True
                if self._transport is not None:
                    self._transport.close()
                continue
            if response is not None:
                self._broker.metrics.bytes_out.inc(sum(len(part) for part in response))
                self._transport.writelines(frame(response))
                await self._can_write.wait()


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
