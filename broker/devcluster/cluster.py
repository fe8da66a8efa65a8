"""The dev cluster: etcd, an S3 endpoint (moto's server mode) and N brokers spread
round-robin over M AZs (az1..azM), all on loopback; for demos (`shoal dev cluster`,
`make dev-cluster`) and the integration tests, which use the same launcher.

Every child is started in its own session, so a terminal's Ctrl-C reaches only the launcher,
which then stops the brokers first (they may still flush to S3 and write to etcd), then the
S3 endpoint and etcd: each by its PID, SIGTERM then SIGKILL after a bounded wait.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from contextlib import ExitStack
from pathlib import Path
from types import FrameType, TracebackType

from ..config import ConfigError, load_config
from . import etcd, s3
from .brokers import READY_TIMEOUT_S, BrokerProcess
from .process import free_ports, stop_process

# The --base-port layout gives each kind of listener a block of this many ports (Kafka,
# inter-broker RPC, metrics), which is also why a dev cluster has at most this many brokers;
# one machine runs out of CPU well before that.
PORT_BLOCK = 100
MAX_BROKERS = PORT_BLOCK
ETCD_PREFIX = "shoal"
BUCKET = "shoal-dev"
OBJECT_PREFIX = "cluster"
WATCH_INTERVAL_S = 1.0


class UsageError(ValueError):
    """A cluster that cannot be built as asked (sizes, ports, work dir, settings)."""


class MissingDependency(RuntimeError):
    """etcd or moto is not installed; the message names the fix."""


def az_name(node_id: int, azs: int) -> str:
    """Brokers go round-robin over the AZs: node 0 in az1, node 1 in az2, ..."""
    return f"az{node_id % azs + 1}"


def check_dependencies() -> None:
    """Raise MissingDependency naming every missing piece and how to install it."""
    missing = [
        message
        for message, ok in ((etcd.MISSING, etcd.etcd_binary() is not None), (s3.MISSING, s3.moto_available()))
        if not ok
    ]
    if missing:
        raise MissingDependency("; ".join(missing))


class DevCluster:
    """etcd + moto + `brokers` broker processes in `azs` AZs under `work_dir`.

    `start()` (or `with DevCluster(...) as cluster:`) runs them all and waits until every
    broker answers /readyz; `stop()` ends them all and is idempotent. `work_dir` must be
    empty or absent (default: a temporary dir, removed by `stop()`). `base_port`: Kafka
    listeners on base_port + node id, inter-broker RPC from base_port + 100, metrics from
    base_port + 200; default: free ports. `settings` (config key -> value) go to every broker.
    """

    def __init__(
        self,
        brokers: int = 3,
        azs: int = 3,
        *,
        work_dir: str | Path | None = None,
        base_port: int | None = None,
        settings: Mapping[str, str] | None = None,
        command: list[str] | None = None,
        stateless_per_az: int = 0,
    ) -> None:
        if not 1 <= brokers <= MAX_BROKERS:
            raise UsageError(f"--brokers must be between 1 and {MAX_BROKERS}, got {brokers}")
        if not 1 <= azs <= brokers:
            raise UsageError(f"--azs must be between 1 and --brokers ({brokers}): every AZ needs a broker, got {azs}")
        if base_port is not None and not 1024 <= base_port <= 65535 - 2 * PORT_BLOCK - brokers:
            raise UsageError(
                f"--base-port must be between 1024 and {65535 - 2 * PORT_BLOCK - brokers} "
                f"(it needs base+{2 * PORT_BLOCK + brokers - 1}), got {base_port}"
            )
        if (
            work_dir is not None
            and Path(work_dir).exists()
            and (not Path(work_dir).is_dir() or any(Path(work_dir).iterdir()))
        ):
            raise UsageError(
                f"--dir {work_dir} is not empty: a dev cluster starts from scratch "
                "(its S3 endpoint keeps objects in memory only)"
            )
        self.settings = dict(settings or {})
        try:
            load_config(None, self.settings, environ={})
        except ConfigError as exc:
            raise UsageError(str(exc)) from None
        if not 0 <= stateless_per_az <= MAX_BROKERS:
            raise UsageError(f"--stateless-per-az must be between 0 and {MAX_BROKERS}, got {stateless_per_az}")
        self.num_brokers = brokers
        self.stateless_per_az = stateless_per_az
        self.azs = azs
        self.base_port = base_port
        self.command = command
        self._owns_dir = work_dir is None
        self.work_dir = Path(tempfile.mkdtemp(prefix="shoal-dev-") if work_dir is None else work_dir)
        self.etcd: etcd.EtcdServer | None = None
        self.moto: s3.MotoServer | None = None
        self.moto_process: subprocess.Popen[bytes] | None = None
        self.brokers: list[BrokerProcess] = []

    # -- lifecycle -------------------------------------------------------------------------
    def start(self, timeout_s: float = READY_TIMEOUT_S) -> DevCluster:
        """Start everything; on any failure stop what was started and raise (MissingDependency,
        BrokerError or RuntimeError, with the failing process's log tail)."""
        try:
            check_dependencies()
            self.work_dir.mkdir(parents=True, exist_ok=True)
            self.etcd = etcd.start_etcd(self.work_dir, "shoal-dev", timeout_s, new_session=True)
            self.moto_process, self.moto = s3.start_moto(self.work_dir / "moto.log", BUCKET, new_session=True)
            self.brokers = self._make_brokers()
            first, *rest = self.brokers
            # Alone first: it creates the cluster's internal topics, which brokers starting
            # at the same moment would race to create.
            first.start(timeout_s=timeout_s)
            for broker in rest:
                broker.start(wait=False)
            for broker in rest:
                broker.wait_ready(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Brokers (all told at once, so they shut down in parallel), then the S3 endpoint,
        then etcd; then the work dir if it is a temporary one. Idempotent."""
        with ExitStack() as stack:  # runs every step even if one fails, in reverse order
            if self._owns_dir:
                stack.callback(shutil.rmtree, self.work_dir, ignore_errors=True)
            if self.etcd is not None:
                stack.callback(self.etcd.stop)
            if self.moto_process is not None:
                stack.callback(stop_process, self.moto_process)
            for broker in self.brokers:
                stack.callback(broker.stop)  # waits; its repeated SIGTERM is a no-op for a stopping broker
            for broker in self.brokers:
                broker.signal(signal.SIGTERM)

    def __enter__(self) -> DevCluster:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- one broker --------------------------------------------------------------------------
    def broker(self, node_id: int) -> BrokerProcess:
        return self.brokers[node_id]

    def kill(self, node_id: int) -> None:
        """SIGKILL one broker (a crash)."""
        self.broker(node_id).kill()

    def restart(self, node_id: int, graceful: bool = True, timeout_s: float = READY_TIMEOUT_S) -> BrokerProcess:
        """Stop (or kill) one broker and start it again on its ports and data dir; waits for
        /readyz."""
        return self.broker(node_id).restart(graceful, timeout_s)

    # -- what to tell clients ----------------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        """Every broker's Kafka address, comma-separated."""
        return ",".join(broker.bootstrap for broker in self.brokers)

    @property
    def bootstrap_by_az(self) -> dict[str, str]:
        """AZ name -> its brokers' Kafka addresses, comma-separated (az1 first)."""
        return {
            az: ",".join(b.bootstrap for b in self.brokers if b.az == az)
            for az in (az_name(n, self.azs) for n in range(self.azs))
        }

    @property
    def metadata_url(self) -> str:
        assert self.etcd is not None, "not started"
        return self.etcd.url(ETCD_PREFIX)

    @property
    def object_store_url(self) -> str:
        assert self.moto is not None, "not started"
        return self.moto.object_store_url(OBJECT_PREFIX)

    def pids(self) -> dict[str, int]:
        """Name -> PID of every child started (running or not): what `stop()` ends."""
        return {name: process.pid for name, process in self._children()}

    def exited(self) -> list[str]:
        """One line per child that is no longer running."""
        return [
            f"{name} (pid {process.pid}) exited with code {process.returncode}"
            for name, process in self._children()
            if process.poll() is not None
        ]

    def _children(self) -> list[tuple[str, subprocess.Popen[bytes]]]:
        named = [
            ("etcd", self.etcd.process if self.etcd else None),
            ("s3", self.moto_process),
            *((f"broker {b.node_id}", b.proc) for b in self.brokers),
        ]
        return [(name, process) for name, process in named if process is not None]

    def describe(self) -> str:
        """What `shoal dev cluster` prints once everything is ready."""
        assert self.etcd is not None and self.moto is not None and self.moto_process is not None, "not started"
        where = f"{self.work_dir} (temporary, removed at exit)" if self._owns_dir else str(self.work_dir)
        stateless = f" (+{self.stateless_per_az} stateless per AZ)" if self.stateless_per_az else ""
        lines = [
            f"Shoal dev cluster: {self.num_brokers} brokers{stateless} in {self.azs} AZs; work dir {where}",
            f"  etcd       {self.etcd.endpoint}  metadata {self.metadata_url}  pid {self.etcd.pid}",
            f"  s3 (moto)  {self.moto.endpoint}  object store {self.object_store_url}  pid {self.moto_process.pid}",
        ]
        lines += [
            f"  broker {b.node_id}{'*' if b.stateless else ' '}  {b.az}  kafka {b.bootstrap}  rpc 127.0.0.1:{b.rpc_port}  "
            f"metrics http://127.0.0.1:{b.metrics_port}/metrics  pid {b.pid}  log {b.log_path}"
            for b in self.brokers
        ]
        lines.append(f"bootstrap: {self.bootstrap}")
        lines += [f"bootstrap {az}: {servers}" for az, servers in self.bootstrap_by_az.items()]
        lines.append("Ready. Ctrl-C stops everything.")
        return "\n".join(lines)

    def _make_brokers(self) -> list[BrokerProcess]:
        n = self.num_brokers + self.stateless_per_az * self.azs  # stateless ones get the last node ids
        if self.base_port is None:
            ports = free_ports(3 * n)
            listeners = [(ports[i], ports[n + i], ports[2 * n + i]) for i in range(n)]
        else:
            base = self.base_port
            listeners = [(base + i, base + PORT_BLOCK + i, base + 2 * PORT_BLOCK + i) for i in range(n)]
        shared = ["--metadata", self.metadata_url]
        if "object.store" not in self.settings:  # e.g. a latency proxy in front of moto
            shared += ["--object-store", self.object_store_url]
        shared += [arg for key, value in self.settings.items() for arg in ("--set", f"{key}={value}")]
        env = s3.fake_aws_environ()
        return [
            BrokerProcess(
                self.work_dir / f"broker-{node}" / "data",
                self.work_dir / f"broker-{node}" / "broker.log",
                node_id=node,
                az=az_name(node if node < self.num_brokers else node - self.num_brokers, self.azs),
                port=kafka,
                rpc_port=rpc,
                metrics_port=metrics,
                extra_args=shared,
                command=self.command,
                env=env,
                new_session=True,
                stateless=node >= self.num_brokers,
            )
            for node, (kafka, rpc, metrics) in enumerate(listeners)
        ]


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(
    brokers: int,
    azs: int | None,
    work_dir: str | None,
    base_port: int | None,
    settings: Mapping[str, str],
    stateless_per_az: int = 0,
) -> int:
    """`shoal dev cluster`: start, print the addresses, report children that exit, and stop
    everything on SIGINT or SIGTERM. Exit 2 for bad usage or a missing dependency, 1 when
    the cluster cannot start, 0 after a requested stop."""
    try:
        cluster = DevCluster(
            brokers,
            min(3, brokers) if azs is None else azs,
            work_dir=work_dir,
            base_port=base_port,
            settings=settings,
            stateless_per_az=stateless_per_az,
        )
    except UsageError as exc:
        print(f"shoal dev cluster: {exc}", file=sys.stderr)
        return 2
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        cluster.start()
        print(cluster.describe(), flush=True)
        reported: set[str] = set()
        while True:  # until a signal: the developer may kill a broker on purpose, so only report it
            for line in cluster.exited():
                if line not in reported:
                    reported.add(line)
                    print(f"shoal dev cluster: {line}", file=sys.stderr, flush=True)
            time.sleep(WATCH_INTERVAL_S)
    except KeyboardInterrupt:
        code = 0
    except MissingDependency as exc:
        print(f"shoal dev cluster: {exc}", file=sys.stderr)
        code = 2
    except RuntimeError as exc:  # BrokerError too
        print(f"shoal dev cluster: cannot start: {exc}", file=sys.stderr)
        code = 1
    finally:
        for sig in previous:  # a second Ctrl-C must not cut the shutdown short
            signal.signal(sig, signal.SIG_IGN)
        print("shoal dev cluster: stopping", file=sys.stderr, flush=True)
        cluster.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print("shoal dev cluster: stopped", file=sys.stderr, flush=True)
    return code
