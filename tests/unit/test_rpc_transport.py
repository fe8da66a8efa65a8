"""RPC server and client over real loopback sockets: multiplexing, errors, timeouts, loss of
the connection, malformed input and the client pool. Every test is bounded by `run`."""

from __future__ import annotations

import asyncio
import logging
import random
import socket
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import msgspec
import pytest

from broker.rpc import (
    RpcClient,
    RpcClientPool,
    RpcError,
    RpcRemoteError,
    RpcServer,
    RpcTimeout,
    RpcUnavailable,
)
from broker.rpc.errors import RpcRefused
from broker.rpc.framing import HEADER, FrameDecoder, FrameKind, encode_frame

pytestmark = pytest.mark.timeout(30)
HOST = "127.0.0.1"


class Echo(msgspec.Struct, tag="echo"):
    n: int
    payload: bytes = b""


class Fail(msgspec.Struct, tag="fail"):
    message: str


class Echoed(msgspec.Struct, tag="echoed"):
    n: int
    payload: bytes


class Failed(msgspec.Struct, tag="failed"):
    reason: str


Request = Echo | Fail
Response = Echoed | Failed
Handler = Callable[[Request], Awaitable[Response]]


def run(coro: Coroutine[Any, Any, None], timeout_s: float = 10.0) -> None:
    asyncio.run(asyncio.wait_for(coro, timeout_s))


async def echo(request: Request) -> Response:
    if isinstance(request, Fail):
        raise ValueError(request.message)
    return Echoed(request.n, request.payload)


class ByteCounter:
    def __init__(self) -> None:
        self.totals: Counter[str] = Counter()
        self.peers: set[str] = set()

    def __call__(self, direction: str, peer: str, n: int) -> None:
        self.totals[direction] += n
        self.peers.add(peer)


@asynccontextmanager
async def serving(
    handler: Handler = echo, port: int = 0, **options: Any
) -> AsyncIterator[RpcServer[Request, Response]]:
    server: RpcServer[Request, Response] = RpcServer(handler, Request, Response, **options)
    await server.start(HOST, port)
    try:
        yield server
    finally:
        await server.stop()


@asynccontextmanager
async def client_of(port: int, **options: Any) -> AsyncIterator[RpcClient[Request, Response]]:
    client: RpcClient[Request, Response] = RpcClient(HOST, port, Request, Response, **options)
    try:
        yield client
    finally:
        await client.close()


def test_request_response_and_byte_counts() -> None:
    async def main() -> None:
        server_bytes, client_bytes = ByteCounter(), ByteCounter()
        async with serving(on_bytes=server_bytes) as server, client_of(server.port, on_bytes=client_bytes) as client:
            port = server.port
            assert await client.call(Echo(1, b"hello"), timeout_s=5) == Echoed(1, b"hello")
            big = bytes(random.Random(1).randbytes(1 << 20))
            assert await client.call(Echo(2, big), timeout_s=5) == Echoed(2, big)
        assert client_bytes.totals["out"] == server_bytes.totals["in"] > 1 << 20
        assert server_bytes.totals["out"] == client_bytes.totals["in"] > 1 << 20
        assert client_bytes.peers == {f"{HOST}:{port}"}
        assert len(server_bytes.peers) == 1  # both calls shared one connection

    run(main())


def test_concurrent_calls_answered_out_of_order() -> None:
    finished: list[int] = []

    async def slow_echo(request: Request) -> Response:
        assert isinstance(request, Echo)
        await asyncio.sleep(random.Random(request.n).uniform(0, 0.02))
        finished.append(request.n)
        return Echoed(request.n, request.payload)

    async def main() -> None:
        peers = ByteCounter()
        async with serving(slow_echo, on_bytes=peers) as server, client_of(server.port) as client:
            requests = [Echo(n, n.to_bytes(2, "big") * n) for n in range(200)]
            responses = await asyncio.gather(*(client.call(r, timeout_s=5) for r in requests))
        assert responses == [Echoed(r.n, r.payload) for r in requests]
        assert sorted(finished) == list(range(200))
        assert finished != list(range(200))  # the handler really did answer out of order
        assert len(peers.peers) == 1

    run(main())


def test_handler_exception_is_a_remote_error_and_the_connection_survives() -> None:
    async def main() -> None:
        peers = ByteCounter()

        async def handler(request: Request) -> Response:
            if isinstance(request, Echo) and request.n < 0:
                return "not a response"  # type: ignore[return-value]
            return await echo(request)

        async with serving(handler, on_bytes=peers) as server, client_of(server.port) as client:
            with pytest.raises(RpcRemoteError, match="ValueError: boom") as raised:
                await client.call(Fail("boom"), timeout_s=5)
            assert not raised.value.retriable
            assert raised.value.message == "ValueError: boom"
            with pytest.raises(RpcRemoteError, match="TypeError: handler returned a str"):
                await client.call(Echo(-1), timeout_s=5)
            assert await client.call(Echo(3), timeout_s=5) == Echoed(3, b"")
        assert len(peers.peers) == 1

    run(main())


def test_a_refusal_is_a_remote_error_logged_as_one_line(caplog: pytest.LogCaptureFixture) -> None:
    """A handler that declines for a passing reason (RpcRefused: a broker still opening its
    logs) fails the call like any error, but the server logs one INFO line, no traceback: the
    WAL file manager asks a starting broker every cycle, and that is not a fault."""

    class Starting(RpcRefused):
        pass

    async def handler(request: Request) -> Response:
        if isinstance(request, Fail):
            raise Starting(request.message)
        return await echo(request)

    async def main() -> None:
        async with serving(handler) as server, client_of(server.port) as client:
            with pytest.raises(RpcRemoteError, match="Starting: logs not open yet"):
                await client.call(Fail("logs not open yet"), timeout_s=5)

    with caplog.at_level(logging.INFO, logger="broker.rpc.server"):
        run(main())
    [record] = [r for r in caplog.records if "refused" in r.getMessage()]
    assert record.levelno == logging.INFO and record.exc_info is None
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_server_stop_fails_pending_calls_and_client_reconnects_after_restart() -> None:
    async def main() -> None:
        entered = asyncio.Event()
        cancelled: list[int] = []

        async def hang(request: Request) -> Response:
            assert isinstance(request, Echo)
            if request.n == 0:
                entered.set()
                try:
                    await asyncio.Event().wait()
                except asyncio.CancelledError:
                    cancelled.append(request.n)
                    raise
            return await echo(request)

        async with serving(hang) as server:
            port = server.port
            async with client_of(port) as client:
                pending = asyncio.create_task(client.call(Echo(0), timeout_s=5))
                await entered.wait()
                await server.stop()
                with pytest.raises(RpcUnavailable) as raised:
                    await pending
                assert not isinstance(raised.value, RpcTimeout)
                assert raised.value.retriable
                assert cancelled == [0]
                with pytest.raises(RpcUnavailable, match="cannot connect"):
                    await client.call(Echo(1), timeout_s=5)

                async with serving(hang, port=port):
                    assert await client.call(Echo(2), timeout_s=5) == Echoed(2, b"")

    run(main())


def test_timeout_discards_the_late_response() -> None:
    async def main() -> None:
        release = asyncio.Event()
        first_answered = asyncio.Event()

        async def handler(request: Request) -> Response:
            assert isinstance(request, Echo)
            if request.n == 1:
                await release.wait()
                first_answered.set()  # its response is written as soon as this returns
            else:
                release.set()
                await first_answered.wait()  # so the stale response reaches the client first
            return Echoed(request.n, request.payload)

        async with serving(handler) as server, client_of(server.port) as client:
            with pytest.raises(RpcTimeout, match="within 0.05s"):
                await client.call(Echo(1, b"late"), timeout_s=0.05)
            assert await client.call(Echo(2, b"fresh"), timeout_s=5) == Echoed(2, b"fresh")
            assert await client.call(Echo(3), timeout_s=5) == Echoed(3, b"")

    run(main())


def raw_frame(kind: int, body: bytes, version: int = 1, correlation_id: int = 1) -> bytes:
    return HEADER.pack(6 + len(body), version, kind, correlation_id) + body


GARBAGE = {
    "oversize": HEADER.pack(2**20, 1, 0, 1),
    "bad version": raw_frame(0, msgspec.msgpack.encode(Echo(1)), version=7),
    "bad kind": raw_frame(9, msgspec.msgpack.encode(Echo(1))),
    "response to a server": raw_frame(1, msgspec.msgpack.encode(Echoed(1, b""))),
    "undecodable body": raw_frame(0, b"\xc1"),
    "not a request type": raw_frame(0, msgspec.msgpack.encode(Echoed(1, b""))),
}


@pytest.mark.parametrize("garbage", GARBAGE.values(), ids=GARBAGE.keys())
def test_malformed_frame_closes_only_that_connection(garbage: bytes, caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        async with serving(max_frame_bytes=1 << 16) as server, client_of(server.port) as client:
            assert await client.call(Echo(1), timeout_s=5) == Echoed(1, b"")
            reader, writer = await asyncio.open_connection(HOST, server.port)
            writer.write(garbage)
            assert await reader.read() == b""  # the server closed the raw connection
            writer.close()
            assert await client.call(Echo(2), timeout_s=5) == Echoed(2, b"")  # on the old connection
            async with client_of(server.port) as other:
                assert await other.call(Echo(3), timeout_s=5) == Echoed(3, b"")

    with caplog.at_level(logging.WARNING, logger="broker.rpc.server"):
        run(main())
    assert any("closing connection from" in r.getMessage() for r in caplog.records)


@asynccontextmanager
async def raw_server(answer: Callable[[int, bytes], bytes]) -> AsyncIterator[int]:
    """A fake peer that replies to each request frame with `answer(correlation_id, body)`."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = FrameDecoder()
        while data := await reader.read(65536):
            for frame in decoder.feed(data):
                writer.write(answer(frame.correlation_id, bytes(frame.body)))
        writer.close()

    server = await asyncio.start_server(serve, HOST, 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()


def test_responses_are_matched_by_correlation_id_not_arrival() -> None:
    encoder = msgspec.msgpack.Encoder()

    def answer(correlation_id: int, body: bytes) -> bytes:
        request = msgspec.msgpack.decode(body, type=Echo)
        stray = encode_frame(encoder, FrameKind.RESPONSE, correlation_id + 1000, Echoed(-1, b"stray"))
        real = encode_frame(encoder, FrameKind.RESPONSE, correlation_id, Echoed(request.n, b"real"))
        return bytes(stray + real)

    async def main() -> None:
        async with raw_server(answer) as port, client_of(port) as client:
            assert await client.call(Echo(5), timeout_s=5) == Echoed(5, b"real")
            assert await client.call(Echo(6), timeout_s=5) == Echoed(6, b"real")

    run(main())


def test_malformed_response_fails_pending_calls_and_client_reconnects() -> None:
    answers = iter([raw_frame(0, b""), raw_frame(1, b"\xc1"), None])

    def answer(correlation_id: int, body: bytes) -> bytes:
        bad = next(answers)
        if bad is not None:
            return bad[:6] + correlation_id.to_bytes(4, "big") + bad[10:]
        n = msgspec.msgpack.decode(body, type=Echo).n
        return bytes(encode_frame(msgspec.msgpack.Encoder(), FrameKind.RESPONSE, correlation_id, Echoed(n, b"")))

    async def main() -> None:
        async with raw_server(answer) as port, client_of(port) as client:
            with pytest.raises(RpcUnavailable, match="unexpected REQUEST frame"):
                await client.call(Echo(1), timeout_s=5)
            with pytest.raises(RpcUnavailable, match="closed"):
                await client.call(Echo(2), timeout_s=5)
            assert await client.call(Echo(3), timeout_s=5) == Echoed(3, b"")

    run(main())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def test_connection_refused_is_unavailable_not_timeout() -> None:
    async def main() -> None:
        async with client_of(free_port()) as client:
            with pytest.raises(RpcUnavailable, match="cannot connect") as raised:
                await client.call(Echo(1), timeout_s=5)
            assert not isinstance(raised.value, RpcTimeout)

    run(main())


def test_requests_that_cannot_be_sent_fail_alone() -> None:
    async def main() -> None:
        async with serving() as server, client_of(server.port, max_frame_bytes=1000) as client:
            with pytest.raises(RpcError, match="exceeds max_frame_bytes=1000") as raised:
                await client.call(Echo(1, b"x" * 2000), timeout_s=5)
            assert not isinstance(raised.value, RpcUnavailable)
            with pytest.raises(TypeError, match="Echoed is not a request type"):
                await client.call(Echoed(1, b""), timeout_s=5)  # type: ignore[arg-type]
            assert await client.call(Echo(2), timeout_s=5) == Echoed(2, b"")

    run(main())


def test_oversize_response_is_a_remote_error() -> None:
    async def double(request: Request) -> Response:
        assert isinstance(request, Echo)
        return Echoed(request.n, request.payload * 2)

    async def main() -> None:
        async with serving(double, max_frame_bytes=1000) as server, client_of(server.port) as client:
            with pytest.raises(RpcRemoteError, match="exceeds max_frame_bytes=1000"):
                await client.call(Echo(1, b"x" * 900), timeout_s=5)
            assert await client.call(Echo(2), timeout_s=5) == Echoed(2, b"")

    run(main())


def test_in_flight_requests_per_connection_are_bounded() -> None:
    async def main() -> None:
        release = asyncio.Event()
        running = 0
        peak = 0

        async def handler(request: Request) -> Response:
            nonlocal running, peak
            running += 1
            peak = max(peak, running)
            await release.wait()
            running -= 1
            return await echo(request)

        async with serving(handler, max_in_flight=3) as server, client_of(server.port) as client:
            calls = []
            for n in range(10):  # one at a time, so each request arrives in a chunk of its own
                calls.append(asyncio.create_task(client.call(Echo(n), timeout_s=5)))
                for _ in range(5):
                    await asyncio.sleep(0.002)
                assert running == min(n + 1, 3)
            release.set()
            assert await asyncio.gather(*calls) == [Echoed(n, b"") for n in range(10)]
            assert peak == 3

    run(main())


def test_closed_client_fails_pending_and_later_calls() -> None:
    async def main() -> None:
        entered = asyncio.Event()

        async def hang(request: Request) -> Response:
            entered.set()
            await asyncio.Event().wait()
            raise AssertionError

        async with serving(hang) as server:
            client: RpcClient[Request, Response] = RpcClient(HOST, server.port, Request, Response)
            pending = asyncio.create_task(client.call(Echo(1), timeout_s=5))
            await entered.wait()
            await client.close()
            with pytest.raises(RpcUnavailable, match="client closed"):
                await pending
            with pytest.raises(RpcUnavailable, match="is closed"):
                await client.call(Echo(2), timeout_s=5)

    run(main())


def test_pool_reuses_clients_and_replaces_moved_nodes() -> None:
    async def main() -> None:
        async with serving() as first, serving() as second:
            pool: RpcClientPool[Request, Response] = RpcClientPool(Request, Response)
            a = pool.get(1, HOST, first.port)
            assert pool.get(1, HOST, first.port) is a
            b = pool.get(2, HOST, first.port)
            assert b is not a
            assert await a.call(Echo(1), timeout_s=5) == Echoed(1, b"")

            moved = pool.get(1, HOST, second.port)
            assert moved is not a
            assert await moved.call(Echo(2), timeout_s=5) == Echoed(2, b"")
            with pytest.raises(RpcUnavailable, match="is closed"):
                await a.call(Echo(3), timeout_s=5)

            pool.retain({1})  # node 2 left the cluster: its client is closed and forgotten
            with pytest.raises(RpcUnavailable, match="is closed"):
                await b.call(Echo(5), timeout_s=5)
            assert pool.get(2, HOST, first.port) is not b

            await pool.close()
            for client in (b, moved):
                with pytest.raises(RpcUnavailable, match="is closed"):
                    await client.call(Echo(4), timeout_s=5)

    run(main())
