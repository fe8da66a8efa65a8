"""A latency- and fault-injecting HTTP/1.1 proxy in front of an S3 endpoint (moto), on loopback.

Run it as a subprocess (tests and benchmarks use `running_s3proxy` below):

    python -m tests.s3proxy --upstream 127.0.0.1:PORT --port-file FILE
        [--delay-ms put=20,get=10] [--fail-fraction 0.1] [--lose-fraction 0.05]
        [--fail-methods PUT,GET] [--seed N] [--max-body-mb 256] [--parent-pid PID]

It binds 127.0.0.1 on a free port and writes that port to FILE (atomically) once it listens.
For every request, in this order:

1. delay: sleep `--delay-ms` for the request's method (PUT, GET, HEAD, DELETE, POST; names
   are case-insensitive), before anything is forwarded; requests overlap, so this is latency,
   not a throughput cap;
2. fail: with probability `--fail-fraction` (one seeded RNG), a request whose method is in
   `--fail-methods` (default: all) is answered `503 SlowDown` with an S3 XML error body and is
   NOT forwarded;
3. lose: with probability `--lose-fraction`, a request of those methods is forwarded, its
   answer read, and then the client connection is reset instead of answered (a "lost ack":
   the upstream did the work, the client cannot know);
4. otherwise it is forwarded and the answer relayed.

Client connections are kept alive (HTTP/1.1; aiobotocore reuses them); `Expect: 100-continue`
is answered at once; request bodies may use Content-Length or chunked encoding (relayed with
Content-Length). Upstream it keeps a small pool of keep-alive connections (a pooled connection
that turns out closed before answering is replaced once); moto's server answers every request
with `Connection: close`, so against moto each request opens a loopback connection, which is
cheap: 8 MiB PUTs (8 concurrent) measured ~165 MiB/s through the proxy vs ~205 MiB/s straight
to moto, 8 MiB GETs ~640 MiB/s either way (2-core machine). Everything is bounded: header size,
body size (`--max-body-mb`), client connections, idle and upstream timeouts. Only loopback: it
listens on 127.0.0.1 and refuses a non-loopback upstream. SIGTERM/SIGINT stop it (exit 0, a
one-line JSON summary on stderr); with `--parent-pid` it also exits when that process is gone.

Runtime control (never delayed or faulted; `__s3proxy` cannot be an S3 bucket name):

    GET  /__s3proxy/stats                     JSON counters (see Stats), settings and pid
    POST /__s3proxy/config?fail_fraction=1.0&lose_fraction=0&fail_methods=PUT&delay_ms=put=20
                                              change settings (omitted ones are kept); JSON settings

Python API (from tests and tests/bench/):

    from tests.s3proxy import running_s3proxy, configure_s3proxy, s3proxy_stats

    with running_s3proxy(moto.port, delay_ms={"put": 20, "get": 10},   # or "put=20,get=10"
                         fail_fraction=0.0, lose_fraction=0.0, fail_methods=None,  # None = all
                         seed=0, log_path=None) as port:
        endpoint = f"http://127.0.0.1:{port}"      # give this to the S3 client / broker URL
        configure_s3proxy(port, fail_fraction=1.0)  # at runtime; returns the new settings
        s3proxy_stats(port)["failed"]["PUT"]        # counters; ["pid"] is the proxy's pid

`running_s3proxy` starts `sys.executable -m tests.s3proxy` (cwd = repo root), waits (bounded,
`start_timeout_s`) for the port file, yields the port, and on exit stops the process by its
PID (SIGTERM, then SIGKILL). `log_path` receives the proxy's stderr (faults are not logged one by
one; the exit summary is).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
METHODS = ("GET", "PUT", "HEAD", "DELETE", "POST")
CONTROL_PREFIX = "/__s3proxy/"
MAX_HEADER_BYTES = 64 * 1024
DEFAULT_MAX_BODY_MB = 256
MAX_CLIENT_CONNECTIONS = 512
UPSTREAM_POOL_SIZE = 32  # idle keep-alive connections kept to the upstream
CLIENT_IDLE_TIMEOUT_S = 120.0  # a kept-alive client connection with no request is closed
BODY_TIMEOUT_S = 60.0  # to receive one request body
UPSTREAM_TIMEOUT_S = 60.0  # for the upstream to answer one request
STREAM_LIMIT = 1 << 20  # StreamReader buffer: fewer pause/resume cycles on 8 MiB bodies
START_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 5.0

_SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate. (injected by tests/s3proxy.py)</Message>"
    b"</Error>"
)
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "expect",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
    }
)
_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    413: "Payload Too Large",
    431: "Request Header Fields Too Large",
    502: "Bad Gateway",
    503: "Service Unavailable",
}


# -- settings and counters -------------------------------------------------------------------


def parse_delays(spec: str | Mapping[str, float] | None) -> dict[str, float]:
    """ "put=20,get=10" or {"put": 20} -> {"PUT": 20.0, "GET": 10.0} (milliseconds)."""
    if not spec:
        return {}
    items = (
        spec.items()
        if isinstance(spec, Mapping)
        else (part.split("=", 1) if "=" in part else (part, "") for part in spec.split(",") if part.strip())
    )
    out: dict[str, float] = {}
    for method, value in items:
        name = str(method).strip().upper()
        if name not in METHODS:
            raise ValueError(f"delay for unknown method {method!r} (known: {', '.join(METHODS)})")
        ms = float(value)
        if not 0 <= ms <= 60_000:
            raise ValueError(f"delay for {name} must be in [0, 60000] ms, got {ms}")
        out[name] = ms
    return out


def parse_methods(spec: str | None) -> frozenset[str]:
    if spec is None or spec.strip() in ("", "*", "all", "ALL"):
        return frozenset(METHODS)
    names = {m.strip().upper() for m in spec.split(",") if m.strip()}
    unknown = names - set(METHODS)
    if unknown:
        raise ValueError(f"unknown methods {sorted(unknown)} (known: {', '.join(METHODS)})")
    return frozenset(names)


def _fraction(value: str | float, what: str) -> float:
    f = float(value)
    if not 0.0 <= f <= 1.0:
        raise ValueError(f"{what} must be in [0, 1], got {f}")
    return f


@dataclass
class Settings:
    delay_ms: dict[str, float] = field(default_factory=dict)
    fail_fraction: float = 0.0
    lose_fraction: float = 0.0
    fail_methods: frozenset[str] = frozenset(METHODS)

    def as_json(self) -> dict:
        return {
            "delay_ms": dict(self.delay_ms),
            "fail_fraction": self.fail_fraction,
            "lose_fraction": self.lose_fraction,
            "fail_methods": sorted(self.fail_methods),
        }

    def update(self, query: Mapping[str, str]) -> None:
        """Apply a /__s3proxy/config query; all or nothing."""
        known = {"delay_ms", "fail_fraction", "lose_fraction", "fail_methods"}
        unknown = set(query) - known
        if unknown:
            raise ValueError(f"unknown settings {sorted(unknown)} (known: {sorted(known)})")
        delay = parse_delays(query["delay_ms"]) if "delay_ms" in query else self.delay_ms
        fail = _fraction(query["fail_fraction"], "fail_fraction") if "fail_fraction" in query else self.fail_fraction
        lose = _fraction(query["lose_fraction"], "lose_fraction") if "lose_fraction" in query else self.lose_fraction
        methods = parse_methods(query["fail_methods"]) if "fail_methods" in query else self.fail_methods
        self.delay_ms, self.fail_fraction, self.lose_fraction, self.fail_methods = delay, fail, lose, methods


@dataclass
class Stats:
    """Per-method counters: `requests` received, `forwarded` and answered by the upstream,
    `failed` (503 injected, not forwarded), `lost` (forwarded, answer dropped), plus upstream
    errors (answered 502), bytes relayed and connection counts."""

    requests: dict[str, int] = field(default_factory=dict)
    forwarded: dict[str, int] = field(default_factory=dict)
    failed: dict[str, int] = field(default_factory=dict)
    lost: dict[str, int] = field(default_factory=dict)
    upstream_errors: int = 0
    bad_requests: int = 0
    bytes_up: int = 0
    bytes_down: int = 0
    client_connections: int = 0
    client_connections_total: int = 0
    upstream_connects: int = 0

    @staticmethod
    def bump(counter: dict[str, int], method: str) -> None:
        counter[method] = counter.get(method, 0) + 1

    def as_json(self) -> dict:
        return {name: (dict(value) if isinstance(value, dict) else value) for name, value in vars(self).items()}


# -- HTTP plumbing ---------------------------------------------------------------------------


class _BadRequest(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class _StaleUpstream(Exception):
    """A pooled upstream connection closed before sending any byte of the answer."""


def _parse_headers(lines: list[str]) -> list[tuple[str, str]]:
    headers = []
    for line in lines:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name.strip():
            raise _BadRequest(400, f"malformed header line {line[:80]!r}")
        headers.append((name.strip(), value.strip()))
    return headers


def _header(headers: list[tuple[str, str]], name: str) -> str | None:
    for key, value in headers:
        if key.lower() == name:
            return value
    return None


async def _read_head(reader: asyncio.StreamReader) -> bytes:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise _BadRequest(431, "header section too large") from None
    if len(head) > MAX_HEADER_BYTES:
        raise _BadRequest(431, "header section too large")
    return head


async def _read_chunked(reader: asyncio.StreamReader, max_bytes: int) -> bytes:
    parts: list[bytes] = []
    total = 0
    while True:
        line = await reader.readuntil(b"\r\n")
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise _BadRequest(400, "malformed chunk size") from None
        if size == 0:
            for _ in range(100):  # trailers, bounded
                if await reader.readuntil(b"\r\n") == b"\r\n":
                    return b"".join(parts)
            raise _BadRequest(400, "too many trailer lines")
        total += size
        if total > max_bytes:
            raise _BadRequest(413, f"body larger than {max_bytes} bytes")
        parts.append(await reader.readexactly(size))
        if await reader.readexactly(2) != b"\r\n":
            raise _BadRequest(400, "malformed chunk terminator")


async def _read_body(reader: asyncio.StreamReader, headers: list[tuple[str, str]], max_bytes: int) -> bytes:
    encoding = (_header(headers, "transfer-encoding") or "").lower()
    if "chunked" in encoding:
        return await _read_chunked(reader, max_bytes)
    length = _header(headers, "content-length")
    if length is None:
        return b""
    try:
        n = int(length)
    except ValueError:
        raise _BadRequest(400, f"bad Content-Length {length!r}") from None
    if n < 0 or n > max_bytes:
        raise _BadRequest(413, f"body of {n} bytes, limit {max_bytes}")
    return await reader.readexactly(n) if n else b""


@dataclass
class _Answer:
    status_line: bytes
    headers: list[tuple[str, str]]
    body: bytes
    body_framed: bool  # False: no body by definition (HEAD, 204, 304): relay headers as is


class _Upstream:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer

    def close(self) -> None:
        self.writer.transport.abort()


class S3Proxy:
    def __init__(
        self,
        upstream: tuple[str, int],
        settings: Settings,
        *,
        seed: int = 0,
        max_body_bytes: int = DEFAULT_MAX_BODY_MB << 20,
    ):
        self.upstream = upstream
        self.settings = settings
        self.stats = Stats()
        self.max_body_bytes = max_body_bytes
        self._rng = random.Random(seed)
        self._pool: list[_Upstream] = []
        self._server: asyncio.AbstractServer | None = None
        self._clients: set[asyncio.StreamWriter] = set()
        self.port = 0

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._serve_client, "127.0.0.1", 0, limit=STREAM_LIMIT, backlog=256)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._clients):
            writer.transport.abort()
        for conn in self._pool:
            conn.close()
        self._pool.clear()

    # -- client side -----------------------------------------------------------------------
    async def _serve_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        stats = self.stats
        if len(self._clients) >= MAX_CLIENT_CONNECTIONS:
            writer.transport.abort()
            return
        self._clients.add(writer)
        stats.client_connections = len(self._clients)
        stats.client_connections_total += 1
        with contextlib.suppress(OSError):
            writer.transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                try:
                    head = await asyncio.wait_for(_read_head(reader), CLIENT_IDLE_TIMEOUT_S)
                except asyncio.IncompleteReadError:
                    return  # client closed between requests
                if not await self._serve_request(head, reader, writer):
                    return
        except _BadRequest as exc:
            stats.bad_requests += 1
            self._write_simple(writer, exc.status, str(exc).encode(), keep_alive=False)
            with contextlib.suppress(ConnectionError):
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.TimeoutError, asyncio.LimitOverrunError):
            pass
        finally:
            self._clients.discard(writer)
            stats.client_connections = len(self._clients)
            writer.close()

    async def _serve_request(self, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Serve one request; False when the connection must end."""
        lines = head.decode("latin-1").split("\r\n")
        try:
            method, target, version = lines[0].split(" ", 2)
        except ValueError:
            raise _BadRequest(400, f"malformed request line {lines[0][:80]!r}") from None
        method = method.upper()
        headers = _parse_headers(lines[1:])
        connection = (_header(headers, "connection") or "").lower()
        keep_alive = version == "HTTP/1.1" and "close" not in connection
        if (_header(headers, "expect") or "").lower() == "100-continue":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        body = await asyncio.wait_for(_read_body(reader, headers, self.max_body_bytes), BODY_TIMEOUT_S)
        if target.startswith(CONTROL_PREFIX):
            status, payload = self._control(method, target)
            self._write_simple(writer, status, payload, keep_alive, content_type="application/json")
            await writer.drain()
            return keep_alive

        stats, settings = self.stats, self.settings
        if method not in METHODS:
            raise _BadRequest(400, f"method {method!r} not proxied")
        stats.bump(stats.requests, method)
        stats.bytes_up += len(body)
        delay_ms = settings.delay_ms.get(method)
        if delay_ms:
            await asyncio.sleep(delay_ms / 1000)
        faultable = method in settings.fail_methods
        if faultable and settings.fail_fraction and self._rng.random() < settings.fail_fraction:
            stats.bump(stats.failed, method)
            self._write_simple(
                writer,
                503,
                _SLOW_DOWN,
                keep_alive,
                content_type="application/xml",
                extra=(("x-amz-request-id", "S3PROXYINJECTED"),),
            )
            await writer.drain()
            return keep_alive
        lose = faultable and settings.lose_fraction and self._rng.random() < settings.lose_fraction
        try:
            answer = await self._forward(method, target, headers, body)
        except (
            OSError,
            asyncio.IncompleteReadError,
            asyncio.TimeoutError,
            asyncio.LimitOverrunError,
            _StaleUpstream,
            _BadRequest,
            ValueError,
        ) as exc:
            stats.upstream_errors += 1
            message = f"<Error><Code>BadGateway</Code><Message>s3proxy upstream: {type(exc).__name__}</Message></Error>"
            self._write_simple(writer, 502, message.encode(), False, content_type="application/xml")
            await writer.drain()
            return False
        stats.bump(stats.forwarded, method)
        if lose:
            stats.bump(stats.lost, method)
            writer.transport.abort()  # the upstream did it; the client never hears
            return False
        out = [answer.status_line]
        out += [f"{k}: {v}".encode("latin-1") for k, v in answer.headers if k.lower() not in _HOP_BY_HOP]
        if answer.body_framed:
            out.append(b"Content-Length: %d" % len(answer.body))
        else:
            length = _header(answer.headers, "content-length")
            if length is not None:  # HEAD: the object's size, no body
                out.append(f"Content-Length: {length}".encode("latin-1"))
        if not keep_alive:
            out.append(b"Connection: close")
        writer.write(b"\r\n".join(out) + b"\r\n\r\n")
        if answer.body:
            writer.write(answer.body)
            stats.bytes_down += len(answer.body)
        await writer.drain()
        return keep_alive

    def _write_simple(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        body: bytes,
        keep_alive: bool,
        content_type: str = "text/plain",
        extra: tuple[tuple[str, str], ...] = (),
    ) -> None:
        head = [
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}",
            f"Content-Type: {content_type}",
            f"Content-Length: {len(body)}",
        ]
        head += [f"{k}: {v}" for k, v in extra]
        if not keep_alive:
            head.append("Connection: close")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)

    def _control(self, method: str, target: str) -> tuple[int, bytes]:
        parts = urllib.parse.urlsplit(target)
        action = parts.path[len(CONTROL_PREFIX) :]
        if action == "stats" and method == "GET":
            return 200, json.dumps(
                {**self.stats.as_json(), "settings": self.settings.as_json(), "pid": os.getpid()}
            ).encode()
        if action == "config" and method == "POST":
            query = dict(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
            try:
                self.settings.update(query)
            except ValueError as exc:
                return 400, json.dumps({"error": str(exc)}).encode()
            return 200, json.dumps(self.settings.as_json()).encode()
        return 404, json.dumps({"error": f"unknown control request {method} {parts.path}"}).encode()

    # -- upstream side -------------------------------------------------------------------------
    async def _connect(self) -> _Upstream:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(*self.upstream, limit=STREAM_LIMIT), UPSTREAM_TIMEOUT_S
        )
        with contextlib.suppress(OSError):
            writer.transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.stats.upstream_connects += 1
        return _Upstream(reader, writer)

    async def _forward(self, method: str, target: str, headers: list[tuple[str, str]], body: bytes) -> _Answer:
        kept = [f"{k}: {v}" for k, v in headers if k.lower() not in _HOP_BY_HOP]
        if body or method in ("PUT", "POST"):
            kept.append(f"Content-Length: {len(body)}")
        request = (f"{method} {target} HTTP/1.1\r\n" + "".join(h + "\r\n" for h in kept) + "\r\n").encode("latin-1")
        for attempt in range(2):
            pooled = self._pool.pop() if self._pool else None
            while pooled is not None and (pooled.reader.at_eof() or pooled.writer.transport.is_closing()):
                pooled.close()
                pooled = self._pool.pop() if self._pool else None
            conn = pooled or await self._connect()
            try:
                conn.writer.write(request)
                if body:
                    conn.writer.write(body)
                await conn.writer.drain()
                answer, reusable = await asyncio.wait_for(self._read_answer(conn.reader, method), UPSTREAM_TIMEOUT_S)
            except (_StaleUpstream, ConnectionError):
                conn.close()
                if pooled is not None and attempt == 0:
                    continue  # a stale pooled connection: once more, fresh
                raise
            except BaseException:
                conn.close()
                raise
            if reusable and len(self._pool) < UPSTREAM_POOL_SIZE:
                self._pool.append(conn)
            else:
                conn.close()
            return answer
        raise _StaleUpstream("unreachable")

    async def _read_answer(self, reader: asyncio.StreamReader, method: str) -> tuple[_Answer, bool]:
        while True:
            try:
                head = await _read_head(reader)
            except asyncio.IncompleteReadError as exc:
                if not exc.partial:
                    raise _StaleUpstream("upstream closed before answering") from None
                raise
            lines = head.decode("latin-1").split("\r\n")
            version, _, rest = lines[0].partition(" ")
            status = int(rest.split(" ", 1)[0])
            headers = _parse_headers(lines[1:])
            if status != 100:
                break
        keep = version == "HTTP/1.1" and "close" not in (_header(headers, "connection") or "").lower()
        status_line = lines[0].encode("latin-1")
        if method == "HEAD" or 100 <= status < 200 or status in (204, 304):
            return _Answer(status_line, headers, b"", False), keep
        if (
            "chunked" in (_header(headers, "transfer-encoding") or "").lower()
            or _header(headers, "content-length") is not None
        ):
            return _Answer(status_line, headers, await _read_body(reader, headers, self.max_body_bytes), True), keep
        chunks, total = [], 0  # delimited by the upstream closing
        while chunk := await reader.read(1 << 20):
            total += len(chunk)
            if total > self.max_body_bytes:
                raise _BadRequest(502, "upstream answer too large")
            chunks.append(chunk)
        return _Answer(status_line, headers, b"".join(chunks), True), False


# -- process entry point ---------------------------------------------------------------------


def _loopback_host_port(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {value!r}")
    resolved = "127.0.0.1" if host == "localhost" else host
    try:
        if not ipaddress.ip_address(resolved).is_loopback:
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(f"upstream must be a loopback address, got {host!r}") from None
    return resolved, int(port)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tests.s3proxy", description=__doc__.split("\n\n")[0])
    p.add_argument("--upstream", required=True, type=_loopback_host_port, metavar="HOST:PORT")
    p.add_argument("--port-file", required=True, metavar="FILE", help="the listening port is written here")
    p.add_argument("--delay-ms", default="", help="per-method delays, e.g. put=20,get=10")
    p.add_argument("--fail-fraction", type=float, default=0.0, help="answer 503 SlowDown without forwarding")
    p.add_argument("--lose-fraction", type=float, default=0.0, help="forward, then reset instead of answering")
    p.add_argument("--fail-methods", default=None, help="methods faults apply to, e.g. PUT,GET (default: all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-body-mb", type=int, default=DEFAULT_MAX_BODY_MB)
    p.add_argument("--parent-pid", type=int, default=None, help="exit when this process is gone")
    return p


async def _main(args: argparse.Namespace) -> None:
    settings = Settings(
        delay_ms=parse_delays(args.delay_ms),
        fail_fraction=_fraction(args.fail_fraction, "--fail-fraction"),
        lose_fraction=_fraction(args.lose_fraction, "--lose-fraction"),
        fail_methods=parse_methods(args.fail_methods),
    )
    proxy = S3Proxy(args.upstream, settings, seed=args.seed, max_body_bytes=args.max_body_mb << 20)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    port = await proxy.start()
    tmp = f"{args.port_file}.tmp{os.getpid()}"
    with open(tmp, "w") as fh:
        fh.write(f"{port}\n")
    os.replace(tmp, args.port_file)
    print(
        f"s3proxy: listening on 127.0.0.1:{port}, upstream {args.upstream[0]}:{args.upstream[1]}, "
        f"settings {json.dumps(settings.as_json())}",
        file=sys.stderr,
        flush=True,
    )
    while not stop.is_set():
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), 1.0)
        if args.parent_pid is not None and os.getppid() != args.parent_pid:
            print("s3proxy: parent process is gone, exiting", file=sys.stderr, flush=True)
            break
    await proxy.stop()
    print(f"s3proxy: exiting, stats {json.dumps(proxy.stats.as_json())}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        import uvloop

        uvloop.run(_main(args))
    except ImportError:
        asyncio.run(_main(args))
    return 0


# -- launcher (tests, benchmarks) ------------------------------------------------------------


def _delay_spec(delay_ms: str | Mapping[str, float] | None) -> str:
    return ",".join(f"{m.lower()}={v:g}" for m, v in parse_delays(delay_ms).items())


@contextlib.contextmanager
def running_s3proxy(
    upstream_port: int,
    *,
    delay_ms: str | Mapping[str, float] | None = None,
    fail_fraction: float = 0.0,
    lose_fraction: float = 0.0,
    fail_methods: str | None = None,
    seed: int = 0,
    log_path: str | os.PathLike[str] | None = None,
    upstream_host: str = "127.0.0.1",
    start_timeout_s: float = START_TIMEOUT_S,
) -> Iterator[int]:
    """Run the proxy in front of 127.0.0.1:`upstream_port`; yields the port it listens on.
    Stops it by PID (SIGTERM, then SIGKILL) on exit."""
    tmpdir = tempfile.mkdtemp(prefix="s3proxy-")
    port_file = Path(tmpdir) / "port"
    cmd = [
        sys.executable,
        "-m",
        "tests.s3proxy",
        "--upstream",
        f"{upstream_host}:{upstream_port}",
        "--port-file",
        str(port_file),
        "--fail-fraction",
        str(fail_fraction),
        "--lose-fraction",
        str(lose_fraction),
        "--seed",
        str(seed),
        "--parent-pid",
        str(os.getpid()),
    ]
    if delay_ms:
        cmd += ["--delay-ms", _delay_spec(delay_ms)]
    if fail_methods:
        cmd += ["--fail-methods", fail_methods]
    log = open(log_path, "ab") if log_path is not None else None
    try:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log or subprocess.DEVNULL,
            stderr=log or subprocess.DEVNULL,
            cwd=REPO_ROOT,
        )
    finally:
        if log is not None:
            log.close()
    try:
        deadline = time.monotonic() + start_timeout_s
        port = None
        while port is None:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"s3proxy exited with code {proc.returncode} before listening"
                    + (f" (log: {log_path})" if log_path else "")
                )
            if time.monotonic() > deadline:
                raise RuntimeError(f"s3proxy did not write its port within {start_timeout_s:.0f}s")
            with contextlib.suppress(OSError, ValueError):
                port = int(port_file.read_text())
            if port is None:
                time.sleep(0.02)
        yield port
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=STOP_TIMEOUT_S)
        with contextlib.suppress(OSError):
            port_file.unlink()
        with contextlib.suppress(OSError):
            os.rmdir(tmpdir)


def _control(port: int, path: str, method: str, timeout_s: float) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{CONTROL_PREFIX}{path}", method=method, data=b"" if method == "POST" else None
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as resp:
        return json.loads(resp.read())


def configure_s3proxy(
    port: int,
    *,
    delay_ms: str | Mapping[str, float] | None = None,
    fail_fraction: float | None = None,
    lose_fraction: float | None = None,
    fail_methods: str | None = None,
    timeout_s: float = 5.0,
) -> dict:
    """Change a running proxy's settings (None keeps a setting; delay_ms={} clears delays);
    returns the settings now in force."""
    query: dict[str, str] = {}
    if delay_ms is not None:
        query["delay_ms"] = _delay_spec(delay_ms)
    if fail_fraction is not None:
        query["fail_fraction"] = str(fail_fraction)
    if lose_fraction is not None:
        query["lose_fraction"] = str(lose_fraction)
    if fail_methods is not None:
        query["fail_methods"] = fail_methods
    return _control(port, "config?" + urllib.parse.urlencode(query), "POST", timeout_s)


def s3proxy_stats(port: int, timeout_s: float = 5.0) -> dict:
    """The running proxy's counters (see Stats), its current `settings` and its `pid`."""
    return _control(port, "stats", "GET", timeout_s)


if __name__ == "__main__":
    sys.exit(main())
