"""Launch and control real `shoal broker` processes, for the dev cluster and the integration
tests.

Owns: starting a broker on loopback ports and a data dir, waiting for `/readyz` with a
deadline, graceful stop (SIGTERM), hard kill (SIGKILL), restart on the same ports and data
dir, and keeping the broker's stderr in a file whose tail is shown when something goes
wrong. Nothing here knows about Kafka clients.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from .process import STOP_TIMEOUT_S, free_port, kill_process, log_tail, stop_process

# The directory holding the `broker` package: the working directory of a broker process, so
# the `python -m broker` fallback runs this very copy.
PACKAGE_ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 30.0


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
    """One broker on loopback.

    `advertise_port` lets a test put a proxy in front of the broker: clients then
    bootstrap through the proxy and the broker's Metadata names the proxy, so every
    client connection goes through it. `rpc_port` is the inter-broker listener that etcd
    metadata requires; `env` replaces os.environ (as it is at each start) for the process;
    `new_session` keeps a terminal's Ctrl-C from reaching it directly (its launcher stops it
    instead).
    """

    def __init__(
        self,
        data_dir: Path,
        log_path: Path,
        *,
        node_id: int = 0,
        az: str | None = None,
        port: int | None = None,
        metrics_port: int | None = None,
        rpc_port: int | None = None,
        advertise_port: int | None = None,
        config_file: Path | None = None,
        extra_args: list[str] | None = None,
        command: list[str] | None = None,
        env: Mapping[str, str] | None = None,
        new_session: bool = False,
        stateless: bool = False,
    ):
        self.data_dir = Path(data_dir)
        self.log_path = Path(log_path)
        self.node_id = node_id
        self.az = az
        self.port = port or free_port()
        self.metrics_port = metrics_port or free_port()
        self.rpc_port = rpc_port
        self.advertise_port = advertise_port or self.port
        self.config_file = config_file
        self.extra_args = list(extra_args or [])
        self.command = command or broker_command()  # overridable for the harness self-test
        self.env = env
        self.new_session = new_session
        self.stateless = stateless  # no data dir (`data_dir` then holds nothing)
        self.proc: subprocess.Popen[bytes] | None = None
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
            "--listen",
            f"127.0.0.1:{self.port}",
            "--advertise",
            f"127.0.0.1:{self.advertise_port}",
            "--node-id",
            str(self.node_id),
            "--metrics-listen",
            f"127.0.0.1:{self.metrics_port}",
        ]
        cmd += ["--stateless"] if self.stateless else ["--data-dir", str(self.data_dir)]
        if self.az is not None:
            cmd += ["--az", self.az]
        if self.rpc_port is not None:
            cmd += ["--rpc-listen", f"127.0.0.1:{self.rpc_port}"]
        if self.config_file is not None:
            cmd += ["--config", str(self.config_file)]
        return cmd + self.extra_args

    # -- lifecycle -------------------------------------------------------------
    def start(self, wait: bool = True, timeout_s: float = READY_TIMEOUT_S) -> BrokerProcess:
        if self.running():
            raise BrokerError("broker already running")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        env = {**(os.environ if self.env is None else self.env), "PYTHONUNBUFFERED": "1"}
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== start #{self.starts}: {' '.join(self.args())}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.args(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                cwd=PACKAGE_ROOT,
                env=env,
                start_new_session=self.new_session,
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
                raise BrokerError(f"broker {self.node_id} exited with code {code} before it was ready\n{self.tail()}")
            if self.ready():
                return
            time.sleep(0.1)
        self.kill()
        raise BrokerError(f"broker {self.node_id} not ready within {timeout_s:.0f}s (killed)\n{self.tail()}")

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, signum: int) -> None:
        if self.proc is not None and self.running():
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
        return None if self.proc is None else stop_process(self.proc, timeout_s)

    def kill(self) -> None:
        """SIGKILL (kill -9): no chance to flush or clean up."""
        if self.proc is not None:
            kill_process(self.proc)

    def restart(self, graceful: bool = True, timeout_s: float = READY_TIMEOUT_S) -> BrokerProcess:
        """Stop (or kill) and start again on the same ports and data dir."""
        if graceful:
            self.stop()
        else:
            self.kill()
        return self.start(timeout_s=timeout_s)

    # -- diagnostics -----------------------------------------------------------
    def tail(self, lines: int = 60) -> str:
        return log_tail(self.log_path, lines)

    def partition_dir(self, topic: str, partition: int) -> Path:
        """DATA_DIR/<topic>-<partition>/, found by globbing (it may sit in a subdirectory)."""
        name = f"{topic}-{partition}"
        direct = self.data_dir / name
        if direct.is_dir():
            return direct
        found = [p for p in self.data_dir.rglob(name) if p.is_dir()]
        if len(found) != 1:
            raise BrokerError(f"expected one directory {name!r} under {self.data_dir}, found {found}")
        return found[0]

    def newest_segment(self, topic: str, partition: int) -> Path:
        """The newest `*.log` segment of a partition (segment names sort by base offset)."""
        segments = sorted(self.partition_dir(topic, partition).glob("*.log"), key=lambda p: (len(p.stem), p.stem))
        if not segments:
            raise BrokerError(f"no *.log segment in {self.partition_dir(topic, partition)}")
        return segments[-1]

    def __repr__(self) -> str:
        return f"<BrokerProcess node={self.node_id} pid={self.pid} port={self.port} data_dir={self.data_dir}>"
