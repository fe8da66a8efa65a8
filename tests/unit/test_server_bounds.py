"""The listener's per-connection pipeline and memory bounds, over a fake transport (no
sockets): what is read, what waits, and what is answered in which order."""

from __future__ import annotations

import asyncio
import struct

import pytest

from broker.clock import SystemClock
from broker.config import load_config
from broker.metrics import BrokerMetrics
from broker.server import KafkaConnection, KafkaServer, ServerLimits

PRODUCE, FETCH, METADATA = 0, 1, 3


class Transport:
    """Records what the connection asks of its socket."""

    def __init__(self) -> None:
        self.paused = False
        self.written: list[bytes] = []
        self.closed = False

    def get_extra_info(self, name: str):  # type: ignore[no-untyped-def]
        return ("10.0.0.1", 5000) if name == "peername" else None

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def writelines(self, parts) -> None:  # type: ignore[no-untyped-def]
        self.written.append(b"".join(parts))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


class Handlers:
    """Stands in for dispatch: each request (api key, correlation id) waits until released."""

    def __init__(self) -> None:
        self.started: list[int] = []
        self.gates: dict[int, asyncio.Event] = {}

    async def dispatch(self, frame: bytes, peer: str) -> list[bytes]:
        correlation = struct.unpack_from(">i", frame, 4)[0]
        self.started.append(correlation)
        await self.gates.setdefault(correlation, asyncio.Event()).wait()
        return [struct.pack(">i", correlation)]

    def release(self, correlation: int) -> None:
        self.gates.setdefault(correlation, asyncio.Event()).set()


def request(api_key: int, correlation: int, body_bytes: int = 0) -> bytes:
    payload = struct.pack(">hhi", api_key, 0, correlation) + b"\0" * body_bytes
    return struct.pack(">i", len(payload)) + payload


def listener(handlers: Handlers, **overrides: str) -> KafkaServer:
    config = load_config(overrides={"metrics.listen": None, **overrides}, environ={})
    return KafkaServer(handlers.dispatch, ServerLimits.from_config(config), BrokerMetrics(), SystemClock())


def connect(server: KafkaServer) -> tuple[KafkaConnection, Transport]:
    connection, transport = KafkaConnection(server), Transport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    return connection, transport


@pytest.fixture
def handlers() -> Handlers:
    return Handlers()


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


def test_produce_requests_overlap_far_beyond_sixteen_and_answers_keep_request_order(handlers: Handlers) -> None:
    async def scenario() -> None:
        connection, transport = connect(listener(handlers))
        connection.data_received(b"".join(request(PRODUCE, c, 100) for c in range(40)))
        await settle()
        assert handlers.started == list(range(40)), "all 40 produce requests run at once"
        for c in reversed(range(40)):  # answered in reverse: written in request order all the same
            handlers.release(c)
        await settle()
        assert transport.written == [struct.pack(">ii", 4, c) for c in range(40)]

    asyncio.run(scenario())


def test_metadata_does_not_wait_for_produce_but_fetch_does(handlers: Handlers) -> None:
    async def scenario() -> None:
        connection, _transport = connect(listener(handlers))
        connection.data_received(request(PRODUCE, 0) + request(METADATA, 1) + request(FETCH, 2) + request(PRODUCE, 3))
        await settle()
        assert handlers.started == [0, 1], "Metadata runs beside the pending Produce"
        handlers.release(1)
        await settle()
        assert handlers.started == [0, 1], "Fetch waits until the Produce before it is answered"
        handlers.release(0)
        await settle()
        assert handlers.started == [0, 1, 2], "...and the Produce after the Fetch waits for the Fetch"
        handlers.release(2)
        await settle()
        assert handlers.started == [0, 1, 2, 3]

    asyncio.run(scenario())


def test_one_connection_is_bounded_in_bytes(handlers: Handlers) -> None:
    """Regression (issue 11, defect 6): a connection could make the broker buffer
    queued.max.requests frames of up to socket.request.max.bytes each."""

    async def scenario() -> None:
        connection, transport = connect(listener(handlers, **{"queued.max.request.bytes.per.connection": "10000"}))
        connection.data_received(b"".join(request(PRODUCE, c, 3000) for c in range(3)))
        await settle()
        assert not transport.paused
        connection.data_received(request(PRODUCE, 3, 3000))
        assert transport.paused, "12 KB held: past the connection's 10 KB"
        handlers.release(0)
        handlers.release(1)
        await settle()
        assert not transport.paused

    asyncio.run(scenario())


def test_a_frame_is_reserved_before_its_body_is_read_and_the_pool_bounds_the_broker(handlers: Handlers) -> None:
    async def scenario() -> None:
        server = listener(handlers, **{"queued.max.request.bytes": "50000"})
        first, first_transport = connect(server)
        second, second_transport = connect(server)
        big = request(PRODUCE, 0, 60_000)
        first.data_received(big[:100])  # its prefix says 60 KB: reserved now, the pool is full
        assert server.memory.used_bytes >= 60_000 and not first_transport.paused
        second.data_received(request(PRODUCE, 7, 10)[:6])  # a new frame: no room for it
        assert second_transport.paused
        first.data_received(big[100:])
        await settle()
        assert handlers.started == [0]
        handlers.release(0)
        await settle()
        assert not second_transport.paused and server.memory.used_bytes < 100, "room again: the second reads on"

    asyncio.run(scenario())


def test_a_frame_larger_than_the_connection_bound_is_still_read_alone(handlers: Handlers) -> None:
    async def scenario() -> None:
        connection, transport = connect(listener(handlers, **{"queued.max.request.bytes.per.connection": "1000"}))
        data = request(PRODUCE, 0, 5000)
        for i in range(0, len(data), 512):
            connection.data_received(data[i : i + 512])
            assert i + 512 >= len(data) or not transport.paused
        await settle()
        assert handlers.started == [0]

    asyncio.run(scenario())
