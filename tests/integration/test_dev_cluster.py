"""`shoal dev cluster` and the DevCluster launcher behind it (broker/devcluster).

What the launcher owns, checked here: every broker becomes ready, brokers go round-robin over
the AZs (and report their AZ as their rack), etcd and the S3 endpoint answer, the printed
bootstrap addresses (all, and per AZ) serve a real Kafka client's metadata requests, one
broker can be killed and restarted, SIGINT or SIGTERM to the command ends every child (checked
by PID) within a bounded time, and bad usage or a missing dependency is refused with exit 2
and a readable message. That the brokers form one cluster is the cluster issue's to test.
"""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.devcluster import DevCluster
from tests.etcd_server import require_etcd_binary

from .clients import kp_admin
from .harness import broker_command, wait_until

pytestmark = pytest.mark.integration

STARTUP_TIMEOUT_S = 90.0  # etcd, moto and the brokers, on a loaded CI machine
SHUTDOWN_TIMEOUT_S = 45.0  # brokers in parallel, then moto, then etcd, each bounded


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def describe_cluster(bootstrap: str) -> tuple[list[str], dict[int, str | None]]:
    """Topic names and node id -> rack, from metadata requests by kafka-python."""
    admin = kp_admin(bootstrap)
    try:
        brokers = admin.describe_cluster()["brokers"]
        return admin.list_topics(), {b["broker_id"]: b["rack"] for b in brokers}
    finally:
        admin.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    require_etcd_binary()
    with DevCluster(4, 3, work_dir=tmp_path_factory.mktemp("dev-cluster"), settings={"num.partitions": "2"}) as running:
        yield running


def test_brokers_are_ready_round_robin_over_the_azs(cluster: DevCluster) -> None:
    assert [b.node_id for b in cluster.brokers] == [0, 1, 2, 3]
    assert [b.az for b in cluster.brokers] == ["az1", "az2", "az3", "az1"]
    assert all(b.running() and b.ready() for b in cluster.brokers)
    assert (
        len(
            {b.port for b in cluster.brokers}
            | {b.rpc_port for b in cluster.brokers}
            | {b.metrics_port for b in cluster.brokers}
        )
        == 12
    )
    by_port = {b.port: b for b in cluster.brokers}
    assert cluster.bootstrap_by_az == {
        "az1": f"{cluster.brokers[0].bootstrap},{cluster.brokers[3].bootstrap}",
        "az2": cluster.brokers[1].bootstrap,
        "az3": cluster.brokers[2].bootstrap,
    }
    for address in cluster.bootstrap.split(","):
        broker = by_port[int(address.rsplit(":", 1)[1])]
        _, racks = describe_cluster(address)
        assert racks[broker.node_id] == broker.az


def test_etcd_and_s3_answer(cluster: DevCluster) -> None:
    assert cluster.etcd is not None and cluster.etcd.healthy()
    assert cluster.metadata_url == f"etcd://{cluster.etcd.endpoint}/shoal"
    assert cluster.moto is not None
    with urllib.request.urlopen(f"{cluster.moto.endpoint}/{cluster.moto.bucket}?list-type=2", timeout=10) as answer:
        assert answer.status == 200
    for broker in cluster.brokers:
        args = broker.args()
        assert args[args.index("--metadata") + 1] == cluster.metadata_url
        assert args[args.index("--object-store") + 1] == cluster.object_store_url
        assert "num.partitions=2" in args


def test_kill_and_restart_one_broker(cluster: DevCluster) -> None:
    victim = cluster.broker(1)
    pid, port = victim.pid, victim.port
    cluster.kill(1)
    assert not victim.running() and victim.proc is not None and victim.proc.returncode == -signal.SIGKILL
    assert cluster.exited() == [f"broker 1 (pid {pid}) exited with code {-signal.SIGKILL}"]
    assert all(b.ready() for b in cluster.brokers if b is not victim)
    assert cluster.restart(1) is victim
    assert victim.ready() and victim.pid != pid and victim.port == port
    assert cluster.exited() == []
    describe_cluster(victim.bootstrap)


def test_stop_ends_every_child(cluster: DevCluster) -> None:
    pids = cluster.pids()
    assert set(pids) == {"etcd", "s3", "broker 0", "broker 1", "broker 2", "broker 3"}
    assert all(alive(pid) for pid in pids.values())
    cluster.stop()
    assert not any(alive(pid) for pid in pids.values())
    assert sorted(name for name, _ in (line.split(" (pid") for line in cluster.exited())) == sorted(pids)
    cluster.stop()  # idempotent


# -- the command -----------------------------------------------------------------------------


def read_until_ready(process: subprocess.Popen[bytes], timeout_s: float) -> str:
    """The command's stdout up to its "Ready." line (AssertionError if it exits or stays
    silent). Reads the pipe's bytes directly: a buffered reader would hide lines from select."""
    assert process.stdout is not None
    fd, text, deadline = process.stdout.fileno(), "", time.monotonic() + timeout_s
    while "Ready." not in text:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"no 'Ready.' within {timeout_s:.0f}s; stdout so far:\n{text}"
        readable, _, _ = select.select([fd], [], [], min(remaining, 1.0))
        if readable:
            chunk = os.read(fd, 65536)
            assert chunk, f"shoal dev cluster exited ({process.wait(10)}); stdout:\n{text}"
            text += chunk.decode()
    return text


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_command_prints_bootstrap_addresses_and_a_signal_stops_everything(
    tmp_path: Path, signum: signal.Signals
) -> None:
    require_etcd_binary()
    work_dir = tmp_path / "cluster"
    stderr_path = tmp_path / "stderr.txt"
    with open(stderr_path, "w") as stderr:
        process = subprocess.Popen(
            [*broker_command(), "dev", "cluster", "--brokers", "3", "--azs", "2", "--dir", str(work_dir)],
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
    pids: list[int] = []
    try:
        output = read_until_ready(process, STARTUP_TIMEOUT_S)
        pids = [int(pid) for pid in re.findall(r"\bpid (\d+)", output)]
        assert len(pids) == 5, output  # etcd, moto, three brokers
        everything = re.search(r"^bootstrap: (\S+)$", output, re.M)
        per_az = dict(re.findall(r"^bootstrap (az\d+): (\S+)$", output, re.M))
        assert everything is not None and sorted(per_az) == ["az1", "az2"], output
        addresses = everything.group(1).split(",")
        assert len(addresses) == 3
        assert per_az == {"az1": f"{addresses[0]},{addresses[2]}", "az2": addresses[1]}
        for address in addresses:
            topics, _ = describe_cluster(address)
            assert isinstance(topics, list)
        for servers in per_az.values():
            describe_cluster(servers)

        process.send_signal(signum)
        assert process.wait(timeout=SHUTDOWN_TIMEOUT_S) == 0  # a bound: raises if it takes longer
        wait_until(lambda: not any(alive(pid) for pid in pids), 5, what="every child to be gone")
        assert (work_dir / "broker-0" / "broker.log").exists()  # --dir is kept
        assert "stopped" in stderr_path.read_text()
    finally:
        if process.poll() is None:  # SIGTERM first: the launcher then stops its children
            process.terminate()
            try:
                process.wait(SHUTDOWN_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        for pid in pids:  # only if the launcher failed to: the children it started for this test
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def run_command(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*broker_command(), "dev", "cluster", *args], capture_output=True, text=True, timeout=60, env=env
    )


@pytest.mark.parametrize(
    "args,says",
    [
        (["--brokers", "0"], "--brokers must be between 1 and"),
        (["--azs", "0"], "--azs must be between 1 and --brokers (3)"),
        (["--brokers", "2", "--azs", "3"], "--azs must be between 1 and --brokers (2)"),
        (["--brokers", "two"], "invalid int value"),
        (["--base-port", "65500"], "--base-port must be between 1024 and"),
        (["--set", "num.partitions=zero"], "num.partitions"),
        (["--set", "no.such.key=1"], "no.such.key"),
        (["--set", "num.partitions"], "expects KEY=VALUE"),
    ],
)
def test_bad_usage_exits_2(args: list[str], says: str) -> None:
    result = run_command(*args)
    assert result.returncode == 2, result
    assert says in result.stderr and "Traceback" not in result.stderr


def test_a_work_dir_in_use_is_refused(tmp_path: Path) -> None:
    (tmp_path / "old").write_text("x")
    result = run_command("--dir", str(tmp_path))
    assert result.returncode == 2 and "is not empty" in result.stderr


def test_missing_etcd_and_moto_are_named_with_the_fix(tmp_path: Path) -> None:
    shadow = tmp_path / "shadow"
    (shadow / "moto").mkdir(parents=True)
    (shadow / "moto" / "__init__.py").write_text("")  # a moto without its server
    env = {
        **os.environ,
        "SHOAL_ETCD_BIN": str(tmp_path / "no-etcd"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(shadow), os.environ.get("PYTHONPATH")])),
    }
    result = run_command("--brokers", "1", env=env)
    assert result.returncode == 2, result
    assert ".ci/install-etcd" in result.stderr and "make install" in result.stderr
    assert "Traceback" not in result.stderr
