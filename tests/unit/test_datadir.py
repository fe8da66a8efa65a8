"""The data dir's identity file and lock (Kafka's meta.properties and .lock): written on the
first start and on upgrade, a node.id or cluster.id that differs refuses to start with a
message naming the file, the values and the fix, and a second process on the same data dir
is refused while the first holds the lock."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from broker.config import StartRefused
from broker.datadir import IDENTITY_FILE, LOCK_FILE, DataDir, DataDirError, read_identity

ROOT = Path(__file__).resolve().parents[2]


def test_first_start_writes_the_identity_and_a_restart_with_the_same_identity_is_accepted(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = DataDir.open(data, 3)
    assert first.identity is None and not (data / IDENTITY_FILE).exists()
    first.check_cluster("clusterA", "local:")
    assert json.loads((data / IDENTITY_FILE).read_text()) == {"version": 1, "node_id": 3, "cluster_id": "clusterA"}
    first.close()
    again = DataDir.open(data, 3)
    assert again.identity is not None and (again.identity.node_id, again.identity.cluster_id) == (3, "clusterA")
    again.check_cluster("clusterA", "local:")
    again.close()


def test_another_node_id_is_refused_naming_the_file_both_ids_and_the_fix(tmp_path: Path) -> None:
    data_dir = DataDir.open(tmp_path, 1)
    data_dir.check_cluster("clusterA", "local:")
    data_dir.close()
    with pytest.raises(DataDirError) as refused:
        DataDir.open(tmp_path, 2)
    message = str(refused.value)
    assert str(tmp_path / IDENTITY_FILE) in message
    assert "belongs to node.id 1" in message and "configured with node.id 2" in message
    assert "start it with node.id 1" in message and "\n" not in message
    assert isinstance(refused.value, StartRefused), "the CLI exits 2 on it"
    DataDir.open(tmp_path, 1).close()  # the refusal released the lock


def test_another_cluster_id_is_refused_naming_the_file_both_ids_and_the_fix(tmp_path: Path) -> None:
    data_dir = DataDir.open(tmp_path, 1)
    data_dir.check_cluster("clusterA", "local:")
    data_dir.close()
    again = DataDir.open(tmp_path, 1)
    with pytest.raises(DataDirError) as refused:
        again.check_cluster("clusterB", "etcd://127.0.0.1:2379/other")
    message = str(refused.value)
    assert str(tmp_path / IDENTITY_FILE) in message
    assert "belongs to cluster clusterA" in message and "(etcd://127.0.0.1:2379/other) is cluster clusterB" in message
    with pytest.raises(DataDirError, match="holds no cluster"):
        again.refuse_new_cluster("etcd://127.0.0.1:2379/empty")
    again.close()
    assert read_identity(tmp_path).cluster_id == "clusterA", "a refusal changes nothing"


def test_a_data_dir_without_identity_file_gets_one(tmp_path: Path) -> None:
    """A data dir from before identity files existed (an upgrade)."""
    (tmp_path / "logs" / "t-0").mkdir(parents=True)
    (tmp_path / "metadata").mkdir()
    data_dir = DataDir.open(tmp_path, 5)
    data_dir.refuse_new_cluster("local:")  # no identity yet: a new cluster is fine
    data_dir.check_cluster("clusterA", "local:")
    data_dir.close()
    identity = read_identity(tmp_path)
    assert identity is not None and (identity.version, identity.node_id, identity.cluster_id) == (1, 5, "clusterA")
    assert (tmp_path / "logs" / "t-0").is_dir()


def test_unknown_identity_version_and_garbage_are_refused(tmp_path: Path) -> None:
    (tmp_path / IDENTITY_FILE).write_text('{"version": 2, "node_id": 1, "cluster_id": "c", "disk": "x"}')
    with pytest.raises(DataDirError, match="identity format version 2 is not supported"):
        DataDir.open(tmp_path, 1)
    (tmp_path / IDENTITY_FILE).write_text("{not json")
    with pytest.raises(DataDirError, match="is not a valid identity file"):
        DataDir.open(tmp_path, 1)


def test_a_data_dir_locked_by_another_process_is_refused_naming_its_pid(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; from broker.datadir import DataDir\n"
            "d = DataDir.open(Path(sys.argv[1]), 1); print('locked', flush=True); sys.stdin.read()",
            str(tmp_path),
        ],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"locked\n"
        with pytest.raises(DataDirError) as refused:
            DataDir.open(tmp_path, 1)
        message = str(refused.value)
        assert (
            f"data dir {tmp_path} is in use by another broker process (pid {holder.pid} holds "
            f"{tmp_path / LOCK_FILE})" in message
        )
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=10)
        holder.stdout.close()
    DataDir.open(tmp_path, 1).close()  # the lock went with the process


def test_the_lock_is_per_open_data_dir_even_in_one_process(tmp_path: Path) -> None:
    first = DataDir.open(tmp_path, 1)
    with pytest.raises(DataDirError, match="is in use by another broker process"):
        DataDir.open(tmp_path, 1)
    first.close()
    first.close()
    DataDir.open(tmp_path, 1).close()
