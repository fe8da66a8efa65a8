"""Child-process plumbing shared by the dev cluster's etcd, S3 endpoint and brokers: free
loopback ports, bounded polling, and stopping a child by its PID (SIGTERM, then SIGKILL), so
each launcher does these the same way and none can leave a process behind."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import TypeVar

STOP_TIMEOUT_S = 10.0

T = TypeVar("T")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the usual bind-to-0 trick)."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """`count` distinct free ports: every probe socket stays open until all are picked, so
    the kernel cannot hand out the same port twice."""
    with ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            ports.append(sock.getsockname()[1])
        return ports


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
