"""A simulated network for the inter-broker RPC: a drop-in for broker.rpc.RpcClientPool whose
calls reach other nodes' handlers through seeded latency, drops, partitions and crashes.

Why: the broker's components talk through `pool.get(node_id, host, port).call(request,
timeout_s)` and serve `handler(request) -> response` (PeerService.handle). The simulation
keeps both ends real and replaces only the sockets (STYLE 4).

Fidelity, following broker/rpc (client.py, server.py):
- Every request and response is encoded with msgspec msgpack and decoded with the
  receiver's declared types, so no object is shared between nodes, and a message that would
  not survive the wire fails here too. A request of the wrong type raises TypeError, one
  above `max_frame_bytes` RpcError; a handler that raises (or returns a non-response)
  answers RpcRemoteError; no answer within `timeout_s` is RpcTimeout.
- A client has one lazy connection per peer address, set up in one round trip. Messages on
  a connection are delivered in send order in each direction (TCP): a latency spike delays
  what follows it (head-of-line blocking), a dropped message leaves the order of the rest
  unchanged. Each request is handled in its own task, started in delivery order (commits
  rely on it: they are applied before the handler's first await).
- When a connection is lost its pending calls fail with RpcUnavailable and its server-side
  handler tasks are cancelled, as RpcServer does on connection_lost.

Faults (`NetFaults`, drawn from the seeded rng, each recorded in the trace):
- latency per message (per link overridable with `set_latency`), with rare spikes;
- drops: a request never delivered, or handled and its answer lost; the caller times out;
- partitions (`partition(a, b, one_way=..., hold=...)`): messages across are dropped, or with
  `hold=True` held and delivered in order after `heal()` (TCP retransmitting through a
  short outage: the late delivery of a request whose caller gave up long ago); new
  connections across a partition time out;
- crashes (`crash(node, black_hole=...)`): the node's handlers are cancelled and its own calls
  fail; callers get a refused connection (RpcUnavailable at once: the process died, the host
  answers) or, with `black_hole=True`, silence (RpcTimeout: the host is gone).
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import msgspec

from broker.rpc import RpcError, RpcRemoteError, RpcTimeout, RpcUnavailable
from broker.rpc.client import DEFAULT_CONNECT_TIMEOUT_S
from broker.rpc.framing import DEFAULT_MAX_FRAME_BYTES, HEADER_BYTES, RpcErrorBody
from broker.rpc.server import MAX_ERROR_MESSAGE_CHARS

from .determinism import SimRandom
from .trace import Trace

Req = TypeVar("Req")
Resp = TypeVar("Resp")
Handler = Callable[[Any], Awaitable[Any]]

_ERROR_DECODER = msgspec.msgpack.Decoder(RpcErrorBody)
# Messages on the wire belong to no node: killing the sender does not recall a sent packet,
# and a pipe's timer must not die with whichever node happened to schedule it. (Callbacks
# never nest, so one empty context can be shared by all of them.)
_WIRE = contextvars.Context()


@dataclass(frozen=True)
class NetFaults:
    """One-way latency per message (seconds, uniform in [low, high]) and fault probabilities."""

    latency_s: tuple[float, float] = (0.0002, 0.002)
    spike_p: float = 0.0  # a message instead takes spike_s (and holds up those behind it)
    spike_s: tuple[float, float] = (0.05, 1.0)
    drop_request_p: float = 0.0  # the request is never delivered
    drop_response_p: float = 0.0  # the request is handled, its answer never arrives

    @classmethod
    def none(cls) -> NetFaults:
        return cls(latency_s=(0.0, 0.0))

    @classmethod
    def flaky(cls) -> NetFaults:
        return cls(spike_p=0.01, drop_request_p=0.01, drop_response_p=0.01)


@dataclass(slots=True)
class _Message:
    deliver_at: float
    correlation_id: int
    payload: bytes
    is_error: bool = False  # responses: an RpcErrorBody instead of a response


class _Pipe:
    """One direction of one connection: FIFO delivery at each message's time."""

    def __init__(
        self, network: SimNetwork, connection: _Connection, src: int, dst: int, deliver: Callable[[_Message], None]
    ) -> None:
        self._network = network
        self._connection = connection
        self.src = src
        self.dst = dst
        self._deliver = deliver
        self._queue: collections.deque[_Message] = collections.deque()
        self._timer: asyncio.TimerHandle | None = None
        self._last_at = 0.0
        self.held = False

    def send(self, correlation_id: int, payload: bytes, is_error: bool = False) -> None:
        network = self._network
        loop = asyncio.get_running_loop()
        at = max(loop.time() + network._latency(self.src, self.dst), self._last_at)
        self._last_at = at
        self._queue.append(_Message(at, correlation_id, payload, is_error))
        if self._timer is None and not self.held:
            self._timer = loop.call_at(at, self._pump, context=_WIRE)

    def kick(self) -> None:
        """Resume after a held partition healed."""
        self.held = False
        if self._queue and self._timer is None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_at(max(self._queue[0].deliver_at, loop.time()), self._pump, context=_WIRE)

    def clear(self) -> None:
        self._queue.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _pump(self) -> None:
        self._timer = None
        network = self._network
        loop = asyncio.get_running_loop()
        now = loop.time()
        while self._queue and self._queue[0].deliver_at <= now + 1e-9:
            if self._connection.lost:
                self._queue.clear()
                return
            blocked = network._blocked.get((self.src, self.dst))
            if blocked == "hold":
                self.held = True
                network._held.setdefault((self.src, self.dst), []).append(self)
                network.trace.record(
                    network.name, "n%d->n%d holding %d message(s) (partition)", self.src, self.dst, len(self._queue)
                )
                return
            message = self._queue.popleft()
            if blocked == "drop":
                network.trace.record(
                    network.name, "n%d->n%d #%d dropped (partition)", self.src, self.dst, message.correlation_id
                )
                continue
            self._deliver(message)
        if self._queue:
            self._timer = loop.call_at(self._queue[0].deliver_at, self._pump, context=_WIRE)


class _Endpoint:
    """A node's RPC listener: an address, a handler and the types it decodes and answers."""

    def __init__(
        self, node_id: int, address: str, handler: Handler, request_type: Any, response_type: Any, max_frame_bytes: int
    ) -> None:
        self.context = contextvars.copy_context()  # handlers run as the node that called serve()
        self.node_id = node_id
        self.address = address
        self.handler = handler
        self.request_decoder: msgspec.msgpack.Decoder[Any] = msgspec.msgpack.Decoder(request_type)
        self.response_type = response_type
        self.encoder = msgspec.msgpack.Encoder()
        self.max_frame_bytes = max_frame_bytes
        self.connections: dict[_Connection, None] = {}  # ordered: reset in a fixed order


class _Connection:
    """One client's connection to one endpoint."""

    def __init__(self, network: SimNetwork, client: SimRpcClient[Any, Any], endpoint: _Endpoint) -> None:
        self.network = network
        self.client = client
        self.endpoint = endpoint
        self.lost = False
        self.pending: dict[int, asyncio.Future[Any]] = {}
        self.handlers: dict[asyncio.Task[None], None] = {}  # server side, in start order
        self.requests = _Pipe(network, self, client.node_id, endpoint.node_id, self._on_request)
        self.responses = _Pipe(network, self, endpoint.node_id, client.node_id, self._on_response)
        endpoint.connections[self] = None

    def lose(self, reason: str, *, server_notices: bool = True) -> None:
        """Fail pending calls, discard what is in flight, and cancel the server-side handlers
        unless the server never hears of it (the caller's host vanished: no FIN, no RST)."""
        if self.lost:
            return
        self.lost = True
        self.endpoint.connections.pop(self, None)
        self.requests.clear()
        self.responses.clear()
        pending, self.pending = self.pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(RpcUnavailable(reason))
        if server_notices:
            for task in list(self.handlers):
                task.cancel()
        self.network.trace.record(
            self.network.name, "n%d->%s connection lost: %s", self.client.node_id, self.endpoint.address, reason
        )

    # -- server side ---------------------------------------------------------------------------
    def _on_request(self, message: _Message) -> None:
        network = self.network
        endpoint = self.endpoint
        src, dst = self.client.node_id, endpoint.node_id
        if network._endpoints.get(endpoint.address) is not endpoint or network._is_down(dst):
            node = network._nodes.get(dst)
            if node is not None and node.black_hole:
                network.trace.record(network.name, "n%d->n%d #%d dropped (node down)", src, dst, message.correlation_id)
            else:  # the host is back (or the listener gone) and answers the stale connection with a reset
                self.lose(f"connection to {endpoint.address} reset by peer")
            return
        if network._rng.chance(network.faults.drop_request_p):
            network.trace.record(network.name, "n%d->n%d #%d request dropped", src, dst, message.correlation_id)
            return
        try:
            request = endpoint.request_decoder.decode(message.payload)
        except msgspec.DecodeError as exc:  # RpcServer closes the connection on a bad frame
            self.lose(f"connection to {endpoint.address} closed by the server: {exc}")
            return
        network.trace.record(
            network.name, "n%d->n%d #%d %s delivered", src, dst, message.correlation_id, type(request).__name__
        )
        task = asyncio.get_running_loop().create_task(
            self._handle(message.correlation_id, request),
            name=f"rpc n{dst}<-n{src} #{message.correlation_id}",
            context=endpoint.context.copy(),
        )
        self.handlers[task] = None
        task.add_done_callback(self._handled)

    def _handled(self, task: asyncio.Task[None]) -> None:
        self.handlers.pop(task, None)

    async def _handle(self, correlation_id: int, request: Any) -> None:
        endpoint = self.endpoint
        try:
            response = await endpoint.handler(request)
            if not isinstance(response, endpoint.response_type):
                raise TypeError(f"handler returned a {type(response).__name__}, not a response type")
            payload, is_error = endpoint.encoder.encode(response), False
        except Exception as exc:
            body = RpcErrorBody(f"{type(exc).__name__}: {exc}"[:MAX_ERROR_MESSAGE_CHARS])
            payload, is_error = endpoint.encoder.encode(body), True
        if self.lost:
            return
        if len(payload) + HEADER_BYTES - 4 > endpoint.max_frame_bytes:
            payload, is_error = endpoint.encoder.encode(RpcErrorBody("response exceeds max_frame_bytes")), True
        self.responses.send(correlation_id, payload, is_error)

    # -- client side ---------------------------------------------------------------------------
    def _on_response(self, message: _Message) -> None:
        network = self.network
        src, dst = self.endpoint.node_id, self.client.node_id
        if network._is_down(dst):
            network.trace.record(network.name, "n%d->n%d #%d dropped (node down)", src, dst, message.correlation_id)
            return
        if network._rng.chance(network.faults.drop_response_p):
            network.trace.record(network.name, "n%d->n%d #%d response dropped", src, dst, message.correlation_id)
            return
        future = self.pending.get(message.correlation_id)
        if future is None or future.done():
            network.trace.record(network.name, "n%d->n%d #%d late response discarded", src, dst, message.correlation_id)
            return
        if message.is_error:
            text = _ERROR_DECODER.decode(message.payload).message
            network.trace.record(network.name, "n%d->n%d #%d remote error: %s", src, dst, message.correlation_id, text)
            future.set_exception(RpcRemoteError(text))
            return
        response = self.client.response_decoder.decode(message.payload)
        network.trace.record(
            network.name, "n%d->n%d #%d %s answered", src, dst, message.correlation_id, type(response).__name__
        )
        future.set_result(response)

    async def call(self, request: Any) -> Any:
        client = self.client
        if self.lost:
            raise RpcUnavailable(f"connection to {client.address} lost")
        payload = client.encoder.encode(request)
        if len(payload) + HEADER_BYTES - 4 > client.max_frame_bytes:
            raise RpcError(
                f"request not sent: frame of {len(payload) + HEADER_BYTES - 4} bytes exceeds "
                f"max_frame_bytes={client.max_frame_bytes}"
            )
        correlation_id = client.next_correlation_id()
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending[correlation_id] = future
        self.network.trace.record(
            self.network.name,
            "n%d->n%d #%d %s sent",
            client.node_id,
            self.endpoint.node_id,
            correlation_id,
            type(request).__name__,
        )
        try:
            self.requests.send(correlation_id, payload)
            return await future
        finally:
            self.pending.pop(correlation_id, None)


class SimRpcClient(Generic[Req, Resp]):
    """broker.rpc.RpcClient's interface over a SimNetwork: `address`, `call`, `close`."""

    def __init__(
        self,
        network: SimNetwork,
        node_id: int,
        host: str,
        port: int,
        request_type: Any,
        response_type: Any,
        *,
        connect_timeout_s: float,
        max_frame_bytes: int,
    ) -> None:
        self.network = network
        self.node_id = node_id  # the calling node
        self.host = host
        self.port = port
        self.address = f"{host}:{port}"
        self.request_type = request_type
        self.encoder = msgspec.msgpack.Encoder()
        self.response_decoder: msgspec.msgpack.Decoder[Resp] = msgspec.msgpack.Decoder(response_type)
        self.max_frame_bytes = max_frame_bytes
        self._connect_timeout_s = connect_timeout_s
        self._conn: _Connection | None = None
        self._connecting: asyncio.Future[_Connection] | None = None
        self._last_id = 0
        self._closed = False

    async def call(self, request: Req, timeout_s: float) -> Resp:
        """As RpcClient.call: RpcTimeout, RpcUnavailable, RpcRemoteError or RpcError."""
        if not isinstance(request, self.request_type):
            raise TypeError(f"{type(request).__name__} is not a request type of this client")
        try:
            async with asyncio.timeout(timeout_s):
                conn = await self._connection()
                result: Resp = await conn.call(request)
                return result
        except TimeoutError:
            self.network.trace.record(
                self.network.name, "n%d->%s call timed out after %ss", self.node_id, self.address, timeout_s
            )
            raise RpcTimeout(f"no response from {self.address} within {timeout_s}s") from None

    async def close(self) -> None:
        self._closed = True
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.lose("client closed")

    def next_correlation_id(self) -> int:
        self._last_id = (self._last_id + 1) & 0xFFFF_FFFF
        return self._last_id

    def lose_connection(self, reason: str, *, server_notices: bool = True) -> None:
        if self._conn is not None:
            self._conn.lose(reason, server_notices=server_notices)

    async def _connection(self) -> _Connection:
        conn = self._conn
        if conn is not None and not conn.lost:
            return conn
        if self._closed:
            raise RpcUnavailable(f"client for {self.address} is closed")
        if self.network._is_down(self.node_id):
            raise RpcUnavailable(f"node {self.node_id} is down")
        attempt = self._connecting
        if attempt is None or attempt.done():
            attempt = self._connecting = asyncio.get_running_loop().create_future()
            attempt.add_done_callback(_retrieve)
            self.network._connect(self, attempt)
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                conn = await asyncio.shield(attempt)
        except TimeoutError:
            if self._connecting is attempt:  # the SYN was lost: the next call tries again
                self._connecting = None
            raise RpcTimeout(f"connecting to {self.address} timed out after {self._connect_timeout_s}s") from None
        if self._closed:
            conn.lose("client closed")
            raise RpcUnavailable(f"client for {self.address} is closed")
        self._conn = conn
        return conn


class SimRpcPool(Generic[Req, Resp]):
    """broker.rpc.RpcClientPool's interface for one node of a SimNetwork."""

    def __init__(
        self,
        network: SimNetwork,
        node_id: int,
        request_type: Any,
        response_type: Any,
        *,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    ) -> None:
        self.network = network
        self.node_id = node_id
        self._request_type = request_type
        self._response_type = response_type
        self._connect_timeout_s = connect_timeout_s
        self._max_frame_bytes = max_frame_bytes
        self._clients: dict[int, SimRpcClient[Req, Resp]] = {}
        network._pools.setdefault(node_id, []).append(self)

    def get(self, node_id: int, host: str, port: int) -> SimRpcClient[Req, Resp]:
        client = self._clients.get(node_id)
        if client is not None and client.host == host and client.port == port:
            return client
        if client is not None:  # the node moved: its calls in flight fail with RpcUnavailable
            client.lose_connection("peer address changed")
        client = SimRpcClient(
            self.network,
            self.node_id,
            host,
            port,
            self._request_type,
            self._response_type,
            connect_timeout_s=self._connect_timeout_s,
            max_frame_bytes=self._max_frame_bytes,
        )
        self._clients[node_id] = client
        return client

    async def close(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.close()

    def retain(self, node_ids: set[int]) -> None:
        """Forget the clients of nodes not in `node_ids` (RpcClientPool.retain)."""
        for node_id in [n for n in self._clients if n not in node_ids]:
            self._clients.pop(node_id).lose_connection("peer left the cluster")

    def lose_all(self, reason: str, *, server_notices: bool = True) -> None:
        for client in self._clients.values():
            client.lose_connection(reason, server_notices=server_notices)


@dataclass
class _Node:
    down: bool = False
    black_hole: bool = False
    addresses: list[str] = field(default_factory=list)


class SimNetwork:
    """The nodes, their listeners, and the links between them; see the module docstring."""

    def __init__(self, rng: SimRandom, trace: Trace, *, faults: NetFaults | None = None, name: str = "net") -> None:
        self._rng = rng
        self.trace = trace
        self.faults = faults or NetFaults()
        self.name = name
        self._endpoints: dict[str, _Endpoint] = {}
        self._address_owner: dict[str, int] = {}
        self._nodes: dict[int, _Node] = {}
        self._pools: dict[int, list[SimRpcPool[Any, Any]]] = {}
        self._link_latency: dict[tuple[int, int], tuple[float, float]] = {}
        self._blocked: dict[tuple[int, int], str] = {}  # (src, dst) -> "drop" | "hold"
        self._held: dict[tuple[int, int], list[_Pipe]] = {}

    # -- topology ------------------------------------------------------------------------------
    def pool(self, node_id: int, request_type: Any, response_type: Any, **options: Any) -> SimRpcPool[Any, Any]:
        """A client pool for calls made by `node_id` (what the broker builds RpcClientPool for)."""
        return SimRpcPool(self, node_id, request_type, response_type, **options)

    def serve(
        self,
        node_id: int,
        host: str,
        port: int,
        handler: Handler,
        request_type: Any,
        response_type: Any,
        *,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    ) -> None:
        """Listen on host:port for `node_id` (RpcServer.start)."""
        address = f"{host}:{port}"
        if address in self._endpoints:
            raise ValueError(f"{address} is already served by node {self._endpoints[address].node_id}")
        self._endpoints[address] = _Endpoint(node_id, address, handler, request_type, response_type, max_frame_bytes)
        self._address_owner[address] = node_id
        node = self._nodes.setdefault(node_id, _Node())
        if address not in node.addresses:
            node.addresses.append(address)
        self.trace.record(self.name, "n%d serves %s", node_id, address)

    def stop_serving(self, host: str, port: int) -> None:
        """Close the listener and reset its connections, cancelling their handlers (RpcServer.stop)."""
        endpoint = self._endpoints.pop(f"{host}:{port}", None)
        if endpoint is not None:
            for conn in list(endpoint.connections):
                conn.lose(f"connection to {endpoint.address} reset: server stopped")

    def set_latency(self, src: int, dst: int, bounds: tuple[float, float], *, both_ways: bool = True) -> None:
        """Override the one-way latency of a link (e.g. across availability zones)."""
        self._link_latency[(src, dst)] = bounds
        if both_ways:
            self._link_latency[(dst, src)] = bounds

    def partition(
        self, a: int | Iterable[int], b: int | Iterable[int], *, one_way: bool = False, hold: bool = False
    ) -> None:
        """Cut the links from every node of `a` to every node of `b` (and back unless
        `one_way`). Messages across are dropped, or held until `heal` with `hold=True`."""
        mode = "hold" if hold else "drop"
        side_a, side_b = _nodes(a), _nodes(b)
        for x in side_a:
            for y in side_b:
                self._blocked[(x, y)] = mode
                if not one_way:
                    self._blocked[(y, x)] = mode
        self.trace.record(self.name, "partition %s %s %s (%s)", side_a, "->" if one_way else "<->", side_b, mode)

    def heal(self, a: int | Iterable[int] | None = None, b: int | Iterable[int] | None = None) -> None:
        """Restore the links between `a` and `b` (both ways), or every link with no arguments;
        held messages are then delivered, in order."""
        if a is None or b is None:
            links = list(self._blocked)
        else:
            side_a, side_b = _nodes(a), _nodes(b)
            links = [
                link
                for link in self._blocked
                if (link[0] in side_a and link[1] in side_b) or (link[0] in side_b and link[1] in side_a)
            ]
        for link in links:
            del self._blocked[link]
            for pipe in self._held.pop(link, []):
                pipe.kick()
        self.trace.record(self.name, "healed %d link(s)", len(links))

    def crash(self, node_id: int, *, black_hole: bool = False) -> None:
        """The node dies: its listeners close, its handlers are cancelled, its own calls fail.
        Callers then find a refused port (RpcUnavailable), or with `black_hole` silence
        (their calls time out). The broker's tasks are the caller's business to cancel."""
        node = self._nodes.setdefault(node_id, _Node())
        node.down, node.black_hole = True, black_hole
        self.trace.record(self.name, "n%d crashed%s", node_id, " (black hole)" if black_hole else "")
        for address in node.addresses:
            endpoint = self._endpoints.pop(address, None)
            if endpoint is None:
                continue
            for conn in list(endpoint.connections):
                if black_hole:  # nobody will ever answer; nobody sends a reset either
                    for task in list(conn.handlers):
                        task.cancel()
                    conn.handlers.clear()
                    conn.requests.clear()
                    conn.responses.clear()
                else:
                    conn.lose(f"connection to {address} reset: node {node_id} crashed")
        for pool in self._pools.get(node_id, []):  # its handlers elsewhere run on unless the peer saw a reset
            pool.lose_all(f"node {node_id} crashed", server_notices=not black_hole)

    def restart(self, node_id: int) -> None:
        """The node is reachable again; it serves once it calls `serve` again."""
        node = self._nodes.setdefault(node_id, _Node())
        node.down = node.black_hole = False
        self.trace.record(self.name, "n%d restarted", node_id)

    # -- internals -----------------------------------------------------------------------------
    def _is_down(self, node_id: int) -> bool:
        node = self._nodes.get(node_id)
        return node is not None and node.down

    def _latency(self, src: int, dst: int) -> float:
        rng = self._rng
        if rng.chance(self.faults.spike_p):
            delay = rng.between(self.faults.spike_s)
            self.trace.record(self.name, "n%d->n%d latency spike %.3fs", src, dst, delay)
            return delay
        return rng.between(self._link_latency.get((src, dst), self.faults.latency_s))

    def _connect(self, client: SimRpcClient[Any, Any], result: asyncio.Future[_Connection]) -> None:
        """Resolve `result` after one round trip with a connection, or fail it (refused);
        leave it pending when the SYN is lost (black hole, partition): the caller times out."""
        loop = asyncio.get_running_loop()
        src = client.node_id
        owner = self._address_owner.get(client.address)
        dst = owner if owner is not None else -1
        out = self._latency(src, dst)

        def arrive() -> None:
            if result.done():
                return
            endpoint = self._endpoints.get(client.address)
            node = self._nodes.get(dst)
            if (
                self._blocked.get((src, dst))
                or self._blocked.get((dst, src))
                or (node is not None and node.black_hole)
                or self._is_down(src)
            ):
                self.trace.record(self.name, "n%d->%s connect: no answer", src, client.address)
                return
            back = self._latency(dst, src)
            if endpoint is None:
                self.trace.record(self.name, "n%d->%s connect: refused", src, client.address)
                loop.call_later(
                    back,
                    _fail,
                    result,
                    RpcUnavailable(f"cannot connect to {client.address}: connection refused"),
                    context=_WIRE,
                )
                return
            conn = _Connection(self, client, endpoint)
            self.trace.record(self.name, "n%d->%s (n%d) connected", src, client.address, endpoint.node_id)
            loop.call_later(back, _succeed, result, conn, context=_WIRE)

        loop.call_later(out, arrive, context=_WIRE)


def _nodes(side: int | Iterable[int]) -> list[int]:
    return [side] if isinstance(side, int) else list(side)


def _succeed(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)
    elif isinstance(value, _Connection):
        value.lose("nobody waited for the connection")


def _retrieve(future: asyncio.Future[Any]) -> None:
    """A connection attempt may fail after every caller gave up: not an unhandled error."""
    if not future.cancelled():
        future.exception()


def _fail(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)
