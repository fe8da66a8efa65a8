"""A tiny fault-injecting HTTP/1.1 proxy for the S3 contract tests, on loopback only.

It sits between the S3 store and the moto server and, for each request, takes the next
fault from a queue: answer 503 SlowDown (or another status) without forwarding, reset the
connection, stall past the client's timeout, or forward the request and then drop the
answer ("lost ack"). With an empty queue it forwards. One request per connection
(`Connection: close`), so no keep-alive bookkeeping. It also records the peak number of
requests in flight, which tests use to check the store's concurrency bound.
"""

from __future__ import annotations

import asyncio
from collections import deque

_ERROR_XML = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    "<Error><Code>{code}</Code><Message>injected by faultproxy</Message></Error>"
)
_REASONS = {
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
    403: "Forbidden",
    429: "Too Many Requests",
}
MAX_HEADER_BYTES = 64 * 1024
STALL_S = 5.0  # bounded: a stalled request is abandoned by the client well before this


class FaultProxy:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.faults: deque[tuple[str, object]] = deque()
        self.requests: list[tuple[str, str]] = []  # (method, target) of every request seen
        self.headers: list[dict[str, str]] = []  # their headers, lower-case names
        self.in_flight = 0
        self.peak_in_flight = 0
        self.hold_s = 0.0  # delay before forwarding, to make concurrency observable
        self._server: asyncio.AbstractServer | None = None
        self.port = 0

    # -- test API --------------------------------------------------------------------------
    def fail(self, times: int, status: int = 503, code: str = "SlowDown") -> None:
        self.faults.extend([("status", (status, code))] * times)

    def reset(self, times: int = 1) -> None:
        self.faults.extend([("reset", None)] * times)

    def stall(self, times: int = 1) -> None:
        self.faults.extend([("stall", None)] * times)

    def lose_answer(self, times: int = 1) -> None:
        self.faults.extend([("lose_answer", None)] * times)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    # -- serving -----------------------------------------------------------------------------
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            if len(head) > MAX_HEADER_BYTES:
                return
            lines = head.decode("latin-1").split("\r\n")
            method, target, _ = lines[0].split(" ", 2)
            headers = [line for line in lines[1:] if line]
            names = {line.split(":", 1)[0].strip().lower(): line.split(":", 1)[1].strip() for line in headers}
            if "chunked" in names.get("transfer-encoding", "").lower():
                raise AssertionError("faultproxy does not support chunked request bodies")
            if names.get("expect", "").lower() == "100-continue":
                writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            body = await reader.readexactly(int(names.get("content-length", "0")))
            self.requests.append((method, target))
            self.headers.append(names)
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            try:
                await self._respond(method, headers, target, body, writer)
            finally:
                self.in_flight -= 1
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _respond(
        self, method: str, headers: list[str], target: str, body: bytes, writer: asyncio.StreamWriter
    ) -> None:
        kind, arg = self.faults.popleft() if self.faults else ("forward", None)
        if self.hold_s:
            await asyncio.sleep(self.hold_s)
        if kind == "status":
            status, code = arg  # type: ignore[misc]
            payload = _ERROR_XML.format(code=code).encode()
            writer.write(
                f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\nContent-Type: application/xml\r\n"
                f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode()
                + payload
            )
            await writer.drain()
            return
        if kind == "reset":
            writer.transport.abort()
            return
        if kind == "stall":
            await asyncio.sleep(STALL_S)
            return
        answer = await self._forward(method, headers, target, body)
        if kind == "lose_answer":
            writer.transport.abort()
            return
        writer.write(answer)
        await writer.drain()

    async def _forward(self, method: str, headers: list[str], target: str, body: bytes) -> bytes:
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        try:
            kept = [h for h in headers if h.split(":", 1)[0].strip().lower() not in ("connection", "expect")]
            request = f"{method} {target} HTTP/1.1\r\n" + "".join(h + "\r\n" for h in kept)
            up_writer.write(request.encode("latin-1") + b"Connection: close\r\n\r\n" + body)
            await up_writer.drain()
            answer = await asyncio.wait_for(up_reader.read(), timeout=STALL_S)
        finally:
            up_writer.close()
        # Tell the client this connection ends here, so it never reuses a closed socket.
        head, sep, rest = answer.partition(b"\r\n\r\n")
        lines = [line for line in head.split(b"\r\n") if not line.lower().startswith(b"connection:")]
        return b"\r\n".join(lines) + b"\r\nConnection: close" + sep + rest
