"""A TCP proxy for fault injection, run on an asyncio loop in a background thread.

It forwards 127.0.0.1:listen_port to 127.0.0.1:target_port and can abort every open
connection (both sides, with a reset) on `drop()`, or automatically each time
`drop_every_bytes` bytes went through in one direction, at most `max_drops` times. The
stream is cut inside the chunk that crosses the threshold: direction "up" (client to
server) leaves the server with half a request; "down" (server to client) loses a response
to a request the server already handled, so the client retries something that succeeded.
"""

from __future__ import annotations

import asyncio
import threading

from .harness import free_port

CHUNK = 64 * 1024


class TcpProxy:
    def __init__(
        self,
        target_port: int,
        *,
        listen_port: int | None = None,
        target_host: str = "127.0.0.1",
        drop_every_bytes: int | None = None,
        max_drops: int | None = None,
        direction: str = "up",
    ):
        self.target = (target_host, target_port)
        self.listen_port = listen_port or free_port()
        self.drop_every_bytes = drop_every_bytes
        self.max_drops = max_drops
        self.direction = direction
        self.drops = 0  # how many times connections were dropped
        self.connections = 0  # client connections accepted, in total
        self.bytes_up = 0  # client -> server, in total
        self.bytes_down = 0  # server -> client, in total
        self._since_drop = 0
        self._pairs: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.listen_port}"

    # -- lifecycle (called from the test thread) -------------------------------
    def start(self, timeout_s: float = 5.0) -> "TcpProxy":
        started = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                self._server = loop.run_until_complete(
                    asyncio.start_server(self._accept, "127.0.0.1", self.listen_port)
                )
            except BaseException as exc:  # noqa: BLE001 - reported to start()
                errors.append(exc)
                started.set()
                loop.close()
                return
            started.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        self._thread = threading.Thread(target=run, name=f"proxy-{self.listen_port}", daemon=True)
        self._thread.start()
        if not started.wait(timeout_s):
            raise TimeoutError("proxy did not start")
        if errors:
            raise errors[0]
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        if self._loop is None or self._thread is None:
            return

        async def shutdown() -> None:
            self._server.close()
            self._abort_all()
            await asyncio.sleep(0)
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        fut = asyncio.run_coroutine_threadsafe(shutdown(), self._loop)
        try:
            fut.result(timeout_s)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout_s)
            self._thread = None

    def drop(self) -> None:
        """Abort every open connection now (new connections are still accepted)."""
        if self._loop is None:
            return
        done = threading.Event()

        def do() -> None:
            self._abort_all()
            done.set()

        self._loop.call_soon_threadsafe(do)
        done.wait(5.0)

    def arm(self, drop_every_bytes: int | None, max_drops: int | None = None, direction: str = "up") -> None:
        """Start (or, with None, stop) dropping every `drop_every_bytes` bytes sent in
        `direction`, counting from now; `max_drops` bounds the total number of drops."""
        assert direction in ("up", "down")
        with self._lock:
            self.drop_every_bytes, self.max_drops, self._since_drop = drop_every_bytes, max_drops, 0
            self.direction = direction

    def open_connections(self) -> int:
        return len(self._pairs)

    def __enter__(self) -> "TcpProxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- inside the loop -------------------------------------------------------
    def _abort_all(self) -> None:
        pairs = list(self._pairs)
        self._pairs.clear()
        if pairs:
            with self._lock:
                self.drops += 1
                self._since_drop = 0
        for client, server in pairs:
            client.transport.abort()
            server.transport.abort()

    async def _accept(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            s_reader, s_writer = await asyncio.wait_for(asyncio.open_connection(*self.target), 5)
        except (OSError, asyncio.TimeoutError):
            c_writer.transport.abort()
            return
        pair = (c_writer, s_writer)
        self._pairs.add(pair)
        try:
            await asyncio.gather(
                self._pipe(c_reader, s_writer, pair, upstream=True),
                self._pipe(s_reader, c_writer, pair, upstream=False),
            )
        finally:
            self._pairs.discard(pair)
            c_writer.transport.abort()
            s_writer.transport.abort()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, pair, *, upstream: bool) -> None:
        try:
            while True:
                data = await reader.read(CHUNK)
                if not data:
                    break
                data, cut = self._count(data, upstream)
                if data:
                    writer.write(data)
                    await writer.drain()
                if cut:
                    self._abort_all()
                    return
        except (ConnectionError, OSError, asyncio.CancelledError):
            pass
        finally:
            # A half-closed or failed direction ends the whole pair.
            for w in pair:
                w.transport.abort()

    def _count(self, data: bytes, upstream: bool) -> tuple[bytes, bool]:
        """Returns the part of `data` to forward and whether to drop after it."""
        with self._lock:
            every = self.drop_every_bytes
            armed = (
                every is not None
                and upstream == (self.direction == "up")
                and (self.max_drops is None or self.drops < self.max_drops)
            )
            if armed and len(data) >= every - self._since_drop:
                data, cut = data[: every - self._since_drop], True
            else:
                cut = False
                if armed:
                    self._since_drop += len(data)
            if upstream:
                self.bytes_up += len(data)
            else:
                self.bytes_down += len(data)
            return data, cut
