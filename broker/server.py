"""The Kafka listener: sockets, framing, per-connection order and memory bounds, nothing else.

Each connection has one worker that takes its requests strictly in arrival order, and one
writer that answers them in that order, while the transport keeps reading ahead: requests
are pipelined, responses are never reordered.

What may overlap (docs/architecture.md "Request path"): Produce requests start as they
arrive, while earlier ones still wait for their commits or replication (each appends or
submits its batches when it starts, so a partition's batches keep arrival order). A request
that reads or changes what a Produce wrote (Fetch, ListOffsets, DeleteRecords,
InitProducerId, admin changes, ...) waits until every earlier request is answered, as Kafka
serves one request at a time per connection; requests that neither depend on nor affect
produced data (`INDEPENDENT_OF_PRODUCE`: Metadata, ApiVersions, group membership,
OffsetFetch, ...) wait only for earlier requests of that same kind. Any request other than
Produce holds back the requests after it until it is answered.

Bounds, each pushing back on clients by no longer reading their sockets (TCP does the rest):
`socket.request.max.bytes` per frame (bigger closes the connection);
`queued.max.requests` requests received and not yet handled per connection;
`queued.max.request.bytes.per.connection` bytes of them per connection; and
`queued.max.request.bytes` for the whole broker (request_memory.py: a frame's size is
reserved when its prefix arrives, before its body is read). A request's bytes are given back
when its handler finishes. `connections.max.idle.ms` of silence closes a connection.
Shutdown stops accepting, answers what was already received, then closes.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .request_memory import RequestMemory
from .sockets import set_up_connection
from .protocol.api_keys import ApiKey
from .protocol.errors import ConnectionFault
from .protocol.frames import FrameError, FrameReader, frame

if TYPE_CHECKING:
    from .clock import Clock
    from .config import BrokerConfig
    from .metrics import BrokerMetrics

log = logging.getLogger(__name__)

# One request frame and the client's "host:port" -> the encoded response (None: no answer).
Dispatch = Callable[[bytes, str], Coroutine[Any, Any, "list[bytes | bytearray] | None"]]
Answer = asyncio.Task["list[bytes | bytearray] | None"]  # a request being handled

# APIs that neither read nor change what an earlier Produce of the connection wrote, so they
# need not wait for pipelined Produce requests to be answered.
INDEPENDENT_OF_PRODUCE = frozenset(
    {
        ApiKey.API_VERSIONS,
        ApiKey.METADATA,
        ApiKey.FIND_COORDINATOR,
        ApiKey.JOIN_GROUP,
        ApiKey.SYNC_GROUP,
        ApiKey.HEARTBEAT,
        ApiKey.LEAVE_GROUP,
        ApiKey.DESCRIBE_GROUPS,
        ApiKey.LIST_GROUPS,
        ApiKey.OFFSET_FETCH,
        ApiKey.DESCRIBE_CONFIGS,
        ApiKey.DESCRIBE_CLUSTER,
        ApiKey.DESCRIBE_TOPIC_PARTITIONS,
    }
)


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """The listener's bounds (see the module docstring), from the broker's configuration."""

    socket_request_max_bytes: int
    queued_max_requests: int
    queued_max_request_bytes_per_connection: int
    queued_max_request_bytes: int
    connections_max_idle_ms: int

    @classmethod
    def from_config(cls, config: BrokerConfig) -> ServerLimits:
        return cls(
            config.socket_request_max_bytes,
            config.queued_max_requests,
            config.queued_max_request_bytes_per_connection,
            config.queued_max_request_bytes,
            config.connections_max_idle_ms,
        )


class KafkaConnection(asyncio.Protocol):
    def __init__(self, server: "KafkaServer") -> None:
        self._server = server
        self._metrics = server.metrics
        limits = server.limits
        self._reader = FrameReader(limits.socket_request_max_bytes)
        self._max_requests = limits.queued_max_requests
        self._max_bytes = limits.queued_max_request_bytes_per_connection
        self._memory = server.memory
        self._queue: collections.deque[bytes] = collections.deque()
        self._wakeup = asyncio.Event()
        self._can_write = asyncio.Event()
        self._can_write.set()
        self._transport: asyncio.Transport | None = None
        self._worker: asyncio.Task[None] | None = None
        self._reading_paused = False
        self._closing = False
        self._held_requests = 0  # received and not yet handled
        self._held_bytes = 0  # their bytes, plus the reservation of the frame being read
        self._partial_reserved = 0  # that reservation: the declared size of the frame being read
        self.last_active = 0.0
        self.peer = "?"

    @property
    def busy(self) -> bool:
        return self._held_requests > 0

    # -- transport callbacks -------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's transports are not subclasses
        self.peer = set_up_connection(transport)
        self.last_active = asyncio.get_running_loop().time()
        self._server.connections.add(self)
        self._metrics.connections.inc()
        self._worker = asyncio.get_running_loop().create_task(self._work())

    def data_received(self, data: bytes) -> None:
        self.last_active = asyncio.get_running_loop().time()
        self._metrics.bytes_in.inc(len(data))
        try:
            frames = self._reader.feed(data)
        except FrameError as exc:
            log.warning("closing connection from %s: %s", self.peer, exc)
            self.close()
            return
        if frames:
            # the first frame completed the one reserved (if any); the others arrived whole in
            # this read and are counted as they are (at most one read's worth past a bound)
            unreserved = sum(len(f) for f in frames) - self._partial_reserved
            self._partial_reserved = 0
            self._memory.charge(unreserved)
            self._held_bytes += unreserved
            self._held_requests += len(frames)
            self._queue.extend(frames)
            self._wakeup.set()
        self._admit()

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        self._memory.forget(self)
        if self._reading_paused:  # a paused connection that ends is not paused any more
            self._reading_paused = False
            self._server.paused_connections -= 1
        self._wakeup.set()
        self._can_write.set()
        if self in self._server.connections:
            self._server.connections.discard(self)
            self._metrics.connections.dec()

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()

    # -- memory bounds -----------------------------------------------------------
    def _admit(self) -> None:
        """Read on, or stop reading until requests are handled or the pool has room."""
        if self._closing or self._transport is None:
            return
        if self._partial_reserved:
            self._read(True)  # a granted frame is still arriving: it is read whole
            return
        if self._held_requests >= self._max_requests or self._held_bytes >= self._max_bytes:
            self._memory.forget(self)  # our own requests will make room: do not hold up others
            self._read(False)
            return
        need = self._reader.incomplete_frame_bytes
        if self._memory.try_reserve(need, self, self._on_room):
            self._partial_reserved = need
            self._held_bytes += need
            self._read(True)
        else:
            self._read(False)

    def _on_room(self) -> None:
        asyncio.get_running_loop().call_soon(self._admit)

    def _read(self, on: bool) -> None:
        assert self._transport is not None
        if on and self._reading_paused:
            self._reading_paused = False
            self._transport.resume_reading()
            self._server.paused_connections -= 1
        elif not on and not self._reading_paused:
            self._reading_paused = True
            self._transport.pause_reading()
            self._server.paused_connections += 1

    def _handled(self, task: Answer, nbytes: int, in_flight: set[Answer]) -> None:
        """A request's handler finished: its bytes are no longer needed."""
        in_flight.discard(task)
        self._held_requests -= 1
        self._held_bytes -= nbytes
        self._memory.release(nbytes)
        self.last_active = asyncio.get_running_loop().time()
        self._admit()

    # -- work ------------------------------------------------------------------
    def close(self) -> None:
        self._closing = True
        self._wakeup.set()
        if self._transport is not None:
            self._transport.close()

    async def drain_and_close(self) -> None:
        """Stop reading, answer the requests already received, then close."""
        if self._transport is not None and not self._closing:
            self._read(False)
        self._closing = True
        self._wakeup.set()
        if self._worker is not None:
            await self._worker

    async def _work(self) -> None:
        """Take requests in arrival order and start each once what it must follow is done
        (see the module docstring); the writer answers them in the same order."""
        responses: asyncio.Queue[Answer | None] = asyncio.Queue()
        writer = asyncio.get_running_loop().create_task(self._write_responses(responses))
        in_flight: set[Answer] = set()
        exclusive: Answer | None = None  # latest request other than Produce
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
                api_key = int.from_bytes(request[:2], "big", signed=True)
                if exclusive is not None and not exclusive.done():
                    await asyncio.wait((exclusive,))
                if api_key != ApiKey.PRODUCE and api_key not in INDEPENDENT_OF_PRODUCE and in_flight:
                    await asyncio.wait(set(in_flight))
                task = asyncio.get_running_loop().create_task(self._server.dispatch(request, self.peer))
                in_flight.add(task)
                task.add_done_callback(functools.partial(self._handled, nbytes=len(request), in_flight=in_flight))
                if api_key != ApiKey.PRODUCE:
                    exclusive = task
                responses.put_nowait(task)
        finally:
            responses.put_nowait(None)
            await writer
            unread = sum(len(request) for request in self._queue) + self._partial_reserved
            self._held_requests -= len(self._queue)
            self._queue.clear()
            self._partial_reserved = 0
            self._held_bytes -= unread
            self._memory.release(unread)
            self._memory.forget(self)
            if self._transport is not None:
                self._transport.close()

    async def _write_responses(self, responses: asyncio.Queue[Answer | None]) -> None:
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
            if faulted or self._transport is None or self._transport.is_closing():
                faulted = True
                if self._transport is not None:
                    self._transport.close()
                continue
            if response is not None:
                self._metrics.bytes_out.inc(sum(len(part) for part in response))
                self._transport.writelines(frame(response))
                await self._can_write.wait()


class KafkaServer:
    def __init__(self, dispatch: Dispatch, limits: ServerLimits, metrics: BrokerMetrics, clock: Clock) -> None:
        self.dispatch = dispatch
        self.clock = clock
        self.limits = limits
        self.metrics = metrics
        self.connections: set[KafkaConnection] = set()
        self.memory = RequestMemory(limits.queued_max_request_bytes, metrics.request_memory_bytes.set)
        self.paused_connections = 0  # not being read from: at a bound
        self._server: asyncio.base_events.Server | None = None
        self._reaper: asyncio.Task[None] | None = None

    async def start(self, host: str, port: int) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: KafkaConnection(self), host, port, reuse_address=True, backlog=1024
        )
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
        idle_s = self.limits.connections_max_idle_ms / 1000
        loop = asyncio.get_running_loop()
        while True:
            await self.clock.sleep(min(idle_s / 2, 30.0))
            deadline = loop.time() - idle_s
            for conn in list(self.connections):
                if not conn.busy and conn.last_active < deadline:
                    log.info("closing idle connection from %s", conn.peer)
                    conn.close()
