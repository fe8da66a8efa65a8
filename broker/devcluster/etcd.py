"""A single-member etcd on loopback, for the dev cluster, tests and benchmarks.

`start_etcd(dir)` runs Debian's etcd (etcd-server: /usr/bin/etcd, or $SHOAL_ETCD_BIN) on
free 127.0.0.1 client and peer ports with its data under `dir`, waits (bounded) until
/health answers, and returns an `EtcdServer`. `stop()` ends it by PID (SIGTERM, then
SIGKILL), `kill()` crashes it (SIGKILL), and `start()` runs it again with the same data
dir and ports, for restart tests. `.ci/install-etcd` installs the binary.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from .process import free_ports, kill_process, log_tail, stop_process

ETCD_BIN = os.environ.get("SHOAL_ETCD_BIN", "/usr/bin/etcd")
MISSING = f"etcd is not installed ({ETCD_BIN}): run `bash .ci/install-etcd` (or set SHOAL_ETCD_BIN)"
START_TIMEOUT_S = 30.0
PORT_ATTEMPTS = 3  # a probed free port can be taken before etcd binds it


def etcd_binary() -> str | None:
    """The etcd executable, or None when it is not installed."""
    if os.path.isfile(ETCD_BIN) and os.access(ETCD_BIN, os.X_OK):
        return ETCD_BIN
    return shutil.which("etcd") if ETCD_BIN == "/usr/bin/etcd" else None


@dataclass
class EtcdServer:
    base_dir: Path
    client_port: int
    peer_port: int
    name: str = "shoal-test"
    binary: str = ETCD_BIN
    new_session: bool = False  # True: a terminal's Ctrl-C reaches only our launcher, which stops it
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def endpoint(self) -> str:
        """host:port of the client listener."""
        return f"{self.host}:{self.client_port}"

    @property
    def client_url(self) -> str:
        return f"http://{self.endpoint}"

    @property
    def data_dir(self) -> Path:
        return self.base_dir / "data"

    @property
    def log_path(self) -> Path:
        return self.base_dir / "etcd.log"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def url(self, prefix: str) -> str:
        """The broker's `metadata` URL for keys under `prefix`."""
        return f"etcd://{self.endpoint}/{prefix}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.client_url}/health", timeout=1.0) as response:
                return json.loads(response.read()).get("health") == "true"
        except (OSError, ValueError):
            return False

    def start(self, timeout_s: float = START_TIMEOUT_S) -> EtcdServer:
        """Run etcd (again: same data dir and ports) and wait until it is healthy; raises
        RuntimeError with the log's tail if it exits or is not healthy within timeout_s."""
        if self.running:
            raise RuntimeError(f"etcd (pid {self.pid}) is already running")
        self.base_dir.mkdir(parents=True, exist_ok=True)
        peer_url = f"http://{self.host}:{self.peer_port}"
        args = [
            self.binary,
            "--name",
            self.name,
            "--data-dir",
            str(self.data_dir),
            "--listen-client-urls",
            self.client_url,
            "--advertise-client-urls",
            self.client_url,
            "--listen-peer-urls",
            peer_url,
            "--initial-advertise-peer-urls",
            peer_url,
            "--initial-cluster",
            f"{self.name}={peer_url}",
            "--initial-cluster-token",
            f"{self.name}-{self.client_port}",
            "--initial-cluster-state",
            "new",  # ignored once the data dir exists
            # Faster elections shorten start-up and allow 1-second leases (etcd's minimum
            # lease TTL is 1.5 x the election timeout).
            "--heartbeat-interval",
            "50",
            "--election-timeout",
            "500",
            "--logger",
            "zap",
            "--log-outputs",
            "stderr",
            "--log-level",
            "warn",
        ]
        env = {key: value for key, value in os.environ.items() if not key.startswith("ETCD")}
        with open(self.log_path, "ab") as log:
            log.write(f"--- starting etcd on {self.endpoint} at {time.strftime('%H:%M:%S')}\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                args,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=self.new_session,
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            if self.healthy():
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(
            f"etcd did not become healthy on {self.endpoint} within {timeout_s:.0f} s\n{log_tail(self.log_path)}"
        )

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it lingers. Idempotent."""
        if self.process is not None:
            stop_process(self.process)

    def kill(self) -> None:
        """Crash it: SIGKILL (no clean shutdown). Idempotent."""
        if self.process is not None:
            kill_process(self.process)

    def restart(self, timeout_s: float = START_TIMEOUT_S) -> EtcdServer:
        self.stop()
        return self.start(timeout_s)


def start_etcd(
    base_dir: str | os.PathLike[str],
    name: str = "shoal-test",
    timeout_s: float = START_TIMEOUT_S,
    *,
    new_session: bool = False,
) -> EtcdServer:
    """Start a fresh single-member etcd under base_dir (RuntimeError if it cannot)."""
    binary = etcd_binary()
    if binary is None:
        raise RuntimeError(MISSING)
    errors = []
    for attempt in range(PORT_ATTEMPTS):
        client_port, peer_port = free_ports(2)
        server = EtcdServer(Path(base_dir) / f"etcd-{attempt}", client_port, peer_port, name, binary, new_session)
        try:
            return server.start(timeout_s)
        except RuntimeError as exc:
            errors.append(str(exc))
    raise RuntimeError("etcd did not start:\n" + "\n".join(errors))
