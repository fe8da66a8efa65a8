"""Child-process plumbing shared by the dev cluster's etcd, S3 endpoint and brokers: free
loopback ports, bounded polling, and stopping a child by its PID (SIGTERM, then SIGKILL), so
each launcher does these the same way and none can leave a process behind."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import TypeVar

STOP_TIMEOUT_S = 10.0

T = TypeVar("T")


# Listeners for child processes take ports below the kernel's ephemeral range: a port
# picked inside it can be taken, between the probe and the child's bind, as the source
# port of any outgoing connection on the machine (a client, a broker's RPC), and the child
# then fails with "address already in use". Below the range only another listener can
# take it, and each process probes its own slice of that space (by pytest-xdist worker
# when there is one), so parallel test workers do not race each other either.
PORT_FLOOR = 10000
PORT_SLICES = 16
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_cursor: dict[tuple[int, int], int] = {}


def ephemeral_port_range(path: Path = EPHEMERAL_RANGE_FILE) -> tuple[int, int]:
    """The kernel's range for outgoing connections' source ports (Linux's default when unknown)."""
    try:
        low, high = (int(part) for part in path.read_text().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def port_slice(slot: int, ephemeral_low: int, slices: int = PORT_SLICES) -> tuple[int, int]:
    """The half-open span of listener ports for `slot` (a worker index or PID) below the
    ephemeral range; an empty span when that range starts too low to leave room."""
    width = (ephemeral_low - PORT_FLOOR) // slices
    if width < 64:
        return 0, 0
    start = PORT_FLOOR + (slot % slices) * width
    return start, start + width


def _slot() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    digits = "".join(ch for ch in worker if ch.isdigit())
    return int(digits) if digits else os.getpid()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free and outside the ephemeral range (see above)."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """`count` distinct free listener ports: every probe socket stays open until all are
    picked, so none is handed out twice. Falls back to the kernel's bind-to-0 choice when
    the ephemeral range leaves no room below it."""
    span = port_slice(_slot(), ephemeral_port_range()[0])
    with ExitStack() as stack:
        ports: list[int] = []
        while len(ports) < count:
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            ports.append(_bind_probe(sock, span))
        return ports


def _bind_probe(sock: socket.socket, span: tuple[int, int]) -> int:
    start, end = span
    for _ in range(end - start):
        port = _cursor.get(span, start)
        _cursor[span] = start + (port + 1 - start) % (end - start)
        try:
            sock.bind(("127.0.0.1", port))
            return port
        except OSError:
            continue
    sock.bind(("127.0.0.1", 0))
    return int(sock.getsockname()[1])


def wait_until(predicate: Callable[[], T], timeout_s: float, interval_s: float = 0.05, what: str = "condition") -> T:
    """Poll `predicate` until it returns a truthy value (returned) or the deadline passes
    (TimeoutError)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout_s:.1f}s waiting for {what}")
        time.sleep(interval_s)


def stop_process(process: subprocess.Popen[bytes], timeout_s: float = STOP_TIMEOUT_S) -> int | None:
    """SIGTERM and wait; SIGKILL if it has not exited within timeout_s. Returns the exit code
    of a graceful exit, None when it had to be killed. Idempotent."""
    if process.poll() is not None:
        return process.returncode
    process.terminate()
    try:
        return process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill_process(process)
        return None


def kill_process(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL (no chance to clean up) and reap it. Idempotent."""
    if process.poll() is None:
        process.kill()
        process.wait(timeout=STOP_TIMEOUT_S)


def log_tail(path: Path, lines: int = 60) -> str:
    """The last lines of a child's log, titled, for error messages."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no log at {path})"
    last = text.splitlines()[-lines:]
    return f"--- last {len(last)} lines of {path} ---\n" + "\n".join(last)
