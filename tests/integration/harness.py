"""Launch and control real `shoal broker` processes for the integration tests.

Owns: picking free loopback ports, starting a broker on a data dir, waiting for
`/readyz` with a deadline, graceful stop (SIGTERM), hard kill (SIGKILL), restart on
the same data dir, and keeping the broker's stderr in a file whose tail is shown when
something goes wrong. Nothing here knows about Kafka clients.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the usual bind-to-0 trick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate, timeout_s: float, interval_s: float = 0.05, what: str = "condition"):
    """Poll `predicate` until it returns a truthy value or the deadline passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout_s:.1f}s waiting for {what}")
        time.sleep(interval_s)


def broker_command() -> list[str]:
    """The console script from the active virtualenv, else `python -m broker`."""
    script = Path(sys.executable).parent / "shoal"
    if script.exists():
        return [str(script)]
    found = shutil.which("shoal")
    if found:
        return [found]
    return [sys.executable, "-m", "broker"]


class BrokerError(RuntimeError):
    pass


class BrokerProcess:
    """One single-node broker (node 0) on loopback.

    `advertise_port` lets a test put a proxy in front of the broker: clients then
    bootstrap through the proxy and the broker's Metadata names the proxy, so every
    client connection goes through it.
    """

    def __init__(self, data_dir: Path, log_path: Path, *, port: int | None = None,
                 metrics_port: int | None = None, advertise_port: int | None = None,
                 config_file: Path | None = None, extra_args: list[str] | None = None,
                 command: list[str] | None = None):
        self.data_dir = Path(data_dir)
        self.log_path = Path(log_path)
        self.port = port or free_port()
        self.metrics_port = metrics_port or free_port()
        self.advertise_port = advertise_port or self.port
        self.config_file = config_file
        self.extra_args = list(extra_args or [])
        self.command = command or broker_command()   # overridable for the harness self-test
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    # -- addresses -------------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        """Where clients should bootstrap (the advertised address)."""
        return f"127.0.0.1:{self.advertise_port}"

    @property
    def direct_bootstrap(self) -> str:
        """The broker's own listener, bypassing any proxy (only for bootstrapping:
        Metadata still names the advertised address)."""
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def args(self) -> list[str]:
        cmd = self.command + [
            "broker",
            "--listen", f"127.0.0.1:{self.port}",
            "--advertise", f"127.0.0.1:{self.advertise_port}",
            "--node-id", "0",
            "--data-dir", str(self.data_dir),
            "--metrics-listen", f"127.0.0.1:{self.metrics_port}",
        ]
        if self.config_file is not None:
            cmd += ["--config", str(self.config_file)]
        return cmd + self.extra_args

    # -- lifecycle -------------------------------------------------------------
    def start(self, wait: bool = True, timeout_s: float = READY_TIMEOUT_S) -> "BrokerProcess":
        if self.running():
            raise BrokerError("broker already running")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== start #{self.starts}: {' '.join(self.args())}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.args(), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                cwd=REPO_ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        if wait:
            self.wait_ready(timeout_s)
        return self

    def ready(self) -> bool:
        url = f"http://127.0.0.1:{self.metrics_port}/readyz"
        try:
            with urllib.request.urlopen(url, timeout=0.5) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                code = None if self.proc is None else self.proc.returncode
                raise BrokerError(f"broker exited with code {code} before it was ready\n"
                                  f"{self.tail()}")
            if self.ready():
                return
            time.sleep(0.1)
        self.kill()
        raise BrokerError(f"broker not ready within {timeout_s:.0f}s (killed)\n{self.tail()}")

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, signum: int) -> None:
        if self.running():
            self.proc.send_signal(signum)

    def wait_exit(self, timeout_s: float) -> int | None:
        """The exit code, or None if the process is still running at the deadline."""
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM and wait; SIGKILL if it does not exit in time. Returns the exit code
        of the graceful exit, or None when it had to be killed."""
        if not self.running():
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        code = self.wait_exit(timeout_s)
        if code is None:
            self.kill()
        return code

    def kill(self) -> None:
        """SIGKILL (kill -9): no chance to flush or clean up."""
        if self.running():
            self.proc.kill()
            self.proc.wait(timeout=10)

    def restart(self, graceful: bool = True, timeout_s: float = READY_TIMEOUT_S) -> "BrokerProcess":
        """Stop (or kill) and start again on the same ports and data dir."""
        if graceful:
            self.stop()
        else:
            self.kill()
        return self.start(timeout_s=timeout_s)

    # -- diagnostics -----------------------------------------------------------
    def tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return f"(no broker log at {self.log_path})"
        last = text.splitlines()[-lines:]
        return f"--- last {len(last)} lines of {self.log_path} ---\n" + "\n".join(last)

    def partition_dir(self, topic: str, partition: int) -> Path:
        """DATA_DIR/<topic>-<partition>/, found by globbing (it may sit in a subdirectory)."""
        name = f"{topic}-{partition}"
        direct = self.data_dir / name
        if direct.is_dir():
            return direct
        found = [p for p in self.data_dir.rglob(name) if p.is_dir()]
        if len(found) != 1:
            raise BrokerError(f"expected one directory {name!r} under {self.data_dir}, "
                              f"found {found}")
        return found[0]

    def newest_segment(self, topic: str, partition: int) -> Path:
        """The newest `*.log` segment of a partition (segment names sort by base offset)."""
        segments = sorted(self.partition_dir(topic, partition).glob("*.log"),
                          key=lambda p: (len(p.stem), p.stem))
        if not segments:
            raise BrokerError(f"no *.log segment in {self.partition_dir(topic, partition)}")
        return segments[-1]

    def __repr__(self) -> str:
        return f"<BrokerProcess pid={self.pid} port={self.port} data_dir={self.data_dir}>"
