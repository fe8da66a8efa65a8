"""Inter-broker RPC client: many concurrent calls multiplexed over one lazy TCP connection.

Calls are matched to responses by correlation id, so a slow call never holds up a fast
one. When the connection is lost every pending call fails with RpcUnavailable and the next
call reconnects; the caller decides whether to retry (the request may have been handled).
A call that times out forgets its correlation id, so its late response is discarded.
Pending calls are bounded by the callers' own concurrency and each call's timeout.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Generic, TypeVar

import msgspec

from .errors import RpcError, RpcRemoteError, RpcTimeout, RpcUnavailable
from ..sockets import set_up_connection
from .framing import DEFAULT_MAX_FRAME_BYTES, FrameDecoder, FrameError, FrameKind, RpcErrorBody, encode_frame
from .server import OnBytes

log = logging.getLogger(__name__)

Req = TypeVar("Req")
Resp = TypeVar("Resp")

DEFAULT_CONNECT_TIMEOUT_S = 5.0


class RpcClient(Generic[Req, Resp]):
    def __init__(
        self,
        host: str,
        port: int,
        request_type: Any,
        response_type: Any,
        *,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        on_bytes: OnBytes | None = None,
    ) -> None:
        """`request_type` and `response_type` are the msgspec types RpcServer was given.
        A request of the wrong type is refused here: the server would close the connection
        on it, failing every other call multiplexed over it."""
        self.host = host
        self.port = port
        self.address = f"{host}:{port}"
        self.request_type = request_type
        self.encoder = msgspec.msgpack.Encoder()
        self.response_decoder: msgspec.msgpack.Decoder[Resp] = msgspec.msgpack.Decoder(response_type)
        self.error_decoder = msgspec.msgpack.Decoder(RpcErrorBody)
        self.max_frame_bytes = max_frame_bytes
        self.on_bytes = on_bytes
        self._connect_timeout_s = connect_timeout_s
        self._conn: _ClientConnection[Req, Resp] | None = None
        self._connect_lock = asyncio.Lock()
        self._last_id = 0
        self._closed = False

    async def call(self, request: Req, timeout_s: float) -> Resp:
        """Send `request` and wait for its response; `timeout_s` covers connecting too.

        Raises RpcTimeout, RpcUnavailable (retriable), RpcRemoteError (the handler raised)
        or RpcError (the request is too big to send)."""
        if not isinstance(request, self.request_type):
            raise TypeError(f"{type(request).__name__} is not a request type of this client")
        try:
            async with asyncio.timeout(timeout_s):
                conn = await self._connection()
                return await conn.call(request)
        except TimeoutError:
            raise RpcTimeout(f"no response from {self.address} within {timeout_s}s") from None

    async def close(self) -> None:
        """Fail pending calls and close the connection; later calls raise RpcUnavailable."""
        self._closed = True
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close("client closed")

    def next_correlation_id(self) -> int:
        # Wraps at 2**32; reusing an id still pending would need 4 billion calls within one timeout.
        self._last_id = (self._last_id + 1) & 0xFFFF_FFFF
        return self._last_id

    async def _connection(self) -> _ClientConnection[Req, Resp]:
        conn = self._conn
        if conn is not None and not conn.lost:
            return conn
        async with self._connect_lock:  # concurrent first calls share one connection attempt
            conn = self._conn
            if conn is not None and not conn.lost:
                return conn
            if self._closed:
                raise RpcUnavailable(f"client for {self.address} is closed")
            loop = asyncio.get_running_loop()
            try:
                _, new_conn = await asyncio.wait_for(
                    loop.create_connection(lambda: _ClientConnection(self), self.host, self.port),
                    self._connect_timeout_s,
                )
            except TimeoutError:
                raise RpcTimeout(f"connecting to {self.address} timed out after {self._connect_timeout_s}s") from None
            except OSError as exc:
                raise RpcUnavailable(f"cannot connect to {self.address}: {exc}") from None
            if self._closed:  # close() ran while connecting
                await new_conn.close("client closed")
                raise RpcUnavailable(f"client for {self.address} is closed")
            self._conn = new_conn
            return new_conn


class _ClientConnection(asyncio.Protocol, Generic[Req, Resp]):
    def __init__(self, client: RpcClient[Req, Resp]) -> None:
        self._client = client
        self._decoder = FrameDecoder(client.max_frame_bytes)
        self._transport: asyncio.Transport | None = None
        self._pending: dict[int, asyncio.Future[Resp]] = {}
        self._can_write = asyncio.Event()
        self._can_write.set()
        self._closed = asyncio.get_running_loop().create_future()
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's transports are not subclasses
        set_up_connection(transport)

    def data_received(self, data: bytes) -> None:
        client = self._client
        if client.on_bytes is not None:
            client.on_bytes("in", client.address, len(data))
        try:
            for frame in self._decoder.feed(data):
                if frame.kind is FrameKind.REQUEST:
                    raise FrameError("unexpected REQUEST frame from a server")
                future = self._pending.get(frame.correlation_id)  # the call removes it when it returns
                if future is None or future.done():
                    continue  # the call timed out or was cancelled
                if frame.kind is FrameKind.RESPONSE:
                    future.set_result(client.response_decoder.decode(frame.body))
                else:
                    future.set_exception(RpcRemoteError(client.error_decoder.decode(frame.body).message))
        except (FrameError, msgspec.DecodeError) as exc:
            log.warning("rpc: closing connection to %s: %s", client.address, exc)
            self._lose(f"connection to {client.address} closed: {exc}")

    def connection_lost(self, exc: Exception | None) -> None:
        detail = f": {exc}" if exc is not None else ""
        self._lose(f"connection to {self._client.address} lost{detail}")
        if not self._closed.done():
            self._closed.set_result(None)

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()

    async def call(self, request: Req) -> Resp:
        await self._can_write.wait()
        transport = self._transport
        if self.lost or transport is None:
            raise RpcUnavailable(f"connection to {self._client.address} lost")
        client = self._client
        correlation_id = client.next_correlation_id()
        try:
            frame = encode_frame(client.encoder, FrameKind.REQUEST, correlation_id, request, client.max_frame_bytes)
        except FrameError as exc:
            raise RpcError(f"request not sent: {exc}") from None
        future: asyncio.Future[Resp] = asyncio.get_running_loop().create_future()
        self._pending[correlation_id] = future
        try:
            transport.write(frame)
            if client.on_bytes is not None:
                client.on_bytes("out", client.address, len(frame))
            return await future
        finally:
            self._pending.pop(correlation_id, None)

    async def close(self, reason: str) -> None:
        self._lose(reason)
        await self._closed

    def _lose(self, reason: str) -> None:
        """Mark the connection unusable, fail every pending call and drop the socket."""
        self.lost = True
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(RpcUnavailable(reason))
        self._can_write.set()  # calls waiting to write wake up and see `lost`
        if self._transport is not None:
            self._transport.abort()


class RpcClientPool(Generic[Req, Resp]):
    """One RpcClient per peer node, replaced when the node's address changes."""

    def __init__(
        self,
        request_type: Any,
        response_type: Any,
        *,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        on_bytes: OnBytes | None = None,
    ) -> None:
        self._request_type = request_type
        self._response_type = response_type
        self._options: dict[str, Any] = {
            "connect_timeout_s": connect_timeout_s,
            "max_frame_bytes": max_frame_bytes,
            "on_bytes": on_bytes,
        }
        self._clients: dict[int, RpcClient[Req, Resp]] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def get(self, node_id: int, host: str, port: int) -> RpcClient[Req, Resp]:
        client = self._clients.get(node_id)
        if client is not None and client.host == host and client.port == port:
            return client
        if client is not None:  # the node moved: its calls in flight fail with RpcUnavailable
            task = asyncio.get_running_loop().create_task(client.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
        client = RpcClient(host, port, self._request_type, self._response_type, **self._options)
        self._clients[node_id] = client
        return client

    def retain(self, node_ids: set[int]) -> None:
        """Close the clients of nodes not in `node_ids` (they left the cluster), so the pool
        holds one client per live peer, not one per node ever seen; a returning node gets a
        new client on its next call."""
        for node_id in [n for n in self._clients if n not in node_ids]:
            task = asyncio.get_running_loop().create_task(self._clients.pop(node_id).close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        await asyncio.gather(*(client.close() for client in clients), *self._closing)
