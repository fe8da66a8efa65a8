"""Issue 16's operator CLI, the part built so far: the installed `shoal` command against a
real broker (topics list|describe|create|delete, cluster describe, config validate, version):
output in both formats, exit codes (0 ok, 1 error, 2 usage), bad usage, an unreachable
cluster, and messages that name the problem and the fix."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

SHOAL = str(Path(sys.executable).parent / "shoal")  # the installed entry point


def shoal(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SHOAL, *args], capture_output=True, text=True, timeout=timeout_s, check=False)


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory):  # type: ignore[no-untyped-def]
    from .harness import BrokerProcess

    base = tmp_path_factory.mktemp("cli")
    broker = BrokerProcess(base / "data", base / "broker.log").start()
    yield broker.bootstrap
    broker.stop()
    broker.kill()


def test_topics_lifecycle_in_both_formats(bootstrap: str) -> None:
    b = ("--bootstrap-server", bootstrap)
    created = shoal(
        "topics", "create", "cli-t", "--partitions", "3", "--mode", "diskless", "--config", "retention.ms=60000", *b
    )
    assert created.returncode == 0 and "Created topic cli-t." in created.stdout, created.stderr
    again = shoal("topics", "create", "cli-t", *b)
    assert again.returncode == 1 and "exists already (--if-not-exists accepts that)" in again.stderr
    assert shoal("topics", "create", "cli-t", "--if-not-exists", *b).returncode == 0
    listed = shoal("topics", "list", "--exclude-internal", *b, "--format", "json")
    assert listed.returncode == 0 and "cli-t" in json.loads(listed.stdout)
    assert "__consumer_offsets" not in json.loads(listed.stdout)

    text = shoal("topics", "describe", "cli-t", *b)
    assert text.returncode == 0, text.stderr
    assert "Topic: cli-t" in text.stdout and "PartitionCount: 3" in text.stdout and "Mode: diskless" in text.stdout
    assert text.stdout.count("\tPartition: ") == 3 and "Leader: 0" in text.stdout
    [described] = json.loads(shoal("topics", "describe", "cli-t", *b, "--format", "json").stdout)
    assert described["mode"] == "diskless" and described["partition_count"] == 3
    assert described["configs"]["retention.ms"] == "60000"
    assert [p["isr"] for p in described["partitions"]] == [[0], [0], [0]]
    healthy = json.loads(shoal("topics", "describe", "--under-replicated-partitions", *b, "--format", "json").stdout)
    assert healthy == [], "a single broker's partitions are never under-replicated"

    grown = shoal("topics", "alter", "cli-t", "--partitions", "4", *b)
    assert grown.returncode == 0, grown.stderr
    [grown_topic] = json.loads(shoal("topics", "describe", "cli-t", *b, "--format", "json").stdout)
    assert grown_topic["partition_count"] == 4
    shrink = shoal("topics", "alter", "cli-t", "--partitions", "2", *b)
    assert shrink.returncode == 1 and "cannot give cli-t 2 partitions" in shrink.stderr

    missing = shoal("topics", "describe", "no-such-topic", *b)
    assert missing.returncode == 1 and "no such topic: no-such-topic" in missing.stderr
    assert shoal("topics", "delete", "cli-t", *b).returncode == 0
    gone = shoal("topics", "delete", "cli-t", *b)
    assert gone.returncode == 1 and "--if-exists" in gone.stderr
    assert shoal("topics", "delete", "cli-t", "--if-exists", *b).returncode == 0


def test_classic_mode_and_cluster_describe(bootstrap: str) -> None:
    b = ("--bootstrap-server", bootstrap)
    assert shoal("topics", "create", "cli-classic", "--mode", "classic", *b).returncode == 0
    [described] = json.loads(shoal("topics", "describe", "cli-classic", *b, "--format", "json").stdout)
    assert described["mode"] == "classic"
    cluster = json.loads(shoal("cluster", "describe", *b, "--format", "json").stdout)
    assert cluster["controller_id"] == 0 and cluster["cluster_id"]
    [broker] = cluster["brokers"]
    assert broker["node_id"] == 0 and broker["stateless"] is False and broker["version"] and broker["controller"]
    text = shoal("cluster", "describe", *b)
    assert text.returncode == 0 and "BROKER" in text.stdout and "0*" in text.stdout and "data" in text.stdout


def test_bad_usage_exits_2_with_a_message(bootstrap: str, tmp_path: Path) -> None:
    assert shoal("topics", "list").returncode == 2  # --bootstrap-server missing (argparse)
    bad = shoal("topics", "list", "--bootstrap-server", "nonsense")
    assert bad.returncode == 2 and "expects HOST:PORT" in bad.stderr
    props = tmp_path / "client.properties"
    props.write_text("client.id=ops\nsasl.jaas.config=x\n")
    unknown = shoal("topics", "list", "--bootstrap-server", bootstrap, "--command-config", str(props))
    assert unknown.returncode == 2 and "'sasl.jaas.config' is not a client property" in unknown.stderr
    props.write_text("# operators' settings\nclient.id=ops\nrequest.timeout.ms=20000\n")
    assert shoal("topics", "list", "--bootstrap-server", bootstrap, "--command-config", str(props)).returncode == 0
    contradiction = shoal(
        "topics",
        "create",
        "x",
        "--mode",
        "classic",
        "--config",
        "diskless.enable=true",
        "--bootstrap-server",
        bootstrap,
    )
    assert contradiction.returncode == 2 and "contradicts" in contradiction.stderr
    assert shoal("topics", "frobnicate", "--bootstrap-server", bootstrap).returncode == 2


def test_unreachable_cluster_exits_1_and_says_so() -> None:
    from .harness import free_port

    started = time.monotonic()
    result = shoal("topics", "list", "--bootstrap-server", f"127.0.0.1:{free_port()}")
    assert result.returncode == 1 and "cannot reach the cluster" in result.stderr
    assert time.monotonic() - started < 45


def test_config_validate_and_version(tmp_path: Path) -> None:
    good = tmp_path / "good.toml"
    good.write_text('node.id = 3\nobject.store = "file:///tmp/objects"\n[wal]\nlinger.ms = 20\n')
    checked = shoal("config", "validate", str(good), "--format", "json")
    assert checked.returncode == 0 and json.loads(checked.stdout)["settings"]["wal.linger.ms"] == 20
    bad = tmp_path / "bad.toml"
    bad.write_text("node.id = -1\n")
    refused = shoal("config", "validate", str(bad))
    assert refused.returncode == 1 and "node.id" in refused.stderr
    version = shoal("version")
    assert version.returncode == 0 and version.stdout.startswith("shoal ")


def test_cluster_health_sees_a_dead_broker_and_waits_for_recovery(tmp_path: Path) -> None:
    """3 brokers, a topic with RF 3: healthy (exit 0); a broker killed: unhealthy (exit 10),
    naming the broker that hosts replicas and is not registered; restarted: `--watch
    --exit-when-healthy` ends with 0."""
    from broker.devcluster import DevCluster
    from tests.etcd_server import require_etcd_binary

    require_etcd_binary()
    with DevCluster(3, 3, work_dir=tmp_path / "cluster") as cluster:
        b = ("--bootstrap-server", cluster.bootstrap)
        assert shoal("topics", "create", "rf3", "--partitions", "3", "--replication-factor", "3", *b).returncode == 0
        wait = ("--watch", "--exit-when-healthy", "--interval", "1", "--max-checks", "60")
        assert shoal("cluster", "health", *wait, *b, timeout_s=120).returncode == 0
        cluster.kill(2)
        survivors = ",".join(x.bootstrap for x in cluster.brokers if x.node_id != 2)
        deadline = time.monotonic() + 60
        while True:  # first "does not answer", then, once its lease expired, "not registered"
            checked = shoal("cluster", "health", "--bootstrap-server", survivors, "--format", "json")
            report = json.loads(checked.stdout) if checked.stdout else {}
            if checked.returncode == 10 and any("broker 2 hosts replicas" in p for p in report["problems"]):
                break
            assert checked.returncode == 10 and time.monotonic() < deadline, (checked.stdout, checked.stderr)
            time.sleep(1)
        assert not report["healthy"]  # under-replicated too, once the ISR shrinks (replica.lag.time.max.ms)
        text = shoal("cluster", "health", "--bootstrap-server", survivors)
        assert text.returncode == 10 and "UNHEALTHY" in text.stdout and "not registered" in text.stdout
        cluster.restart(2, graceful=False)
        recovered = shoal("cluster", "health", *wait, *b, timeout_s=120)
        assert recovered.returncode == 0 and recovered.stdout.strip().endswith("healthy"), recovered.stdout


def test_configs_describe_and_alter(bootstrap: str) -> None:
    b = ("--bootstrap-server", bootstrap)
    entity = ("--entity-type", "topics", "--entity-name", "cli-configs")
    assert shoal("topics", "create", "cli-configs", *b).returncode == 0
    altered = shoal("configs", "alter", *entity, "--add-config", "retention.ms=60000,segment.ms=120000", *b)
    assert altered.returncode == 0, altered.stderr
    described = json.loads(shoal("configs", "describe", *entity, *b, "--format", "json").stdout)
    assert described["retention.ms"]["value"] == "60000" and described["segment.ms"]["value"] == "120000"
    assert shoal("configs", "alter", *entity, "--delete-config", "segment.ms", *b).returncode == 0
    text = shoal("configs", "describe", *entity, *b)
    assert "retention.ms" in text.stdout and "segment.ms" not in text.stdout
    everything = json.loads(shoal("configs", "describe", *entity, "--all", *b, "--format", "json").stdout)
    assert everything["segment.ms"]["source"] == "DEFAULT_CONFIG"
    refused = shoal("configs", "alter", *entity, "--add-config", "retention.ms=soon", *b)
    assert refused.returncode == 1 and "refused" in refused.stderr and "retention.ms" in refused.stderr
    assert shoal("configs", "alter", *entity, *b).returncode == 2  # nothing to alter


def test_groups_list_describe_lag_delete(bootstrap: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    b = ("--bootstrap-server", bootstrap)
    assert shoal("topics", "create", "cli-groups", "--partitions", "2", *b).returncode == 0
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for i in range(10):
        producer.send("cli-groups", b"x%d" % i, partition=i % 2)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(
        "cli-groups",
        bootstrap_servers=bootstrap,
        group_id="cli-g",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    read = 0
    deadline = time.monotonic() + 30
    while read < 6 and time.monotonic() < deadline:
        read += sum(len(records) for records in consumer.poll(timeout_ms=500, max_records=6 - read).values())
    consumer.commit()
    assert "cli-g" in [g["group"] for g in json.loads(shoal("groups", "list", *b, "--format", "json").stdout)]
    [group] = json.loads(shoal("groups", "describe", "cli-g", *b, "--format", "json").stdout)
    assert group["state"] == "Stable" and len(group["members"]) == 1
    assert sorted(group["members"][0]["partitions"]["cli-groups"]) == [0, 1]
    lag = json.loads(shoal("groups", "lag", "cli-g", *b, "--format", "json").stdout)
    assert sum(p["lag"] for p in lag) == 10 - read and all(p["end"] == 5 for p in lag)
    assert "LAG" in shoal("groups", "lag", "cli-g", *b).stdout
    consumer.close()
    reset = ("groups", "reset-offsets", "cli-g", "--topic", "cli-groups", "--to-earliest", *b)
    planned = shoal(*reset)
    assert planned.returncode == 0 and "dry run" in planned.stdout, planned.stderr
    assert (
        sum(p["lag"] for p in json.loads(shoal("groups", "lag", "cli-g", *b, "--format", "json").stdout)) == 10 - read
    )
    executed = shoal(*reset, "--execute", "--format", "json")
    assert executed.returncode == 0, executed.stderr
    assert [p["new_offset"] for p in json.loads(executed.stdout)] == [0, 0]
    assert sum(p["lag"] for p in json.loads(shoal("groups", "lag", "cli-g", *b, "--format", "json").stdout)) == 10
    one = shoal("groups", "reset-offsets", "cli-g", "--topic", "cli-groups:1", "--to-offset", "99", "--execute", *b)
    assert one.returncode == 0 and "5" in one.stdout  # clamped to the log end
    bad = shoal("groups", "reset-offsets", "cli-g", "--topic", "cli-groups:7", "--to-latest", *b)
    assert bad.returncode == 2 and "no partition [7]" in bad.stderr
    deleted = shoal("groups", "delete", "cli-g", *b)
    assert deleted.returncode == 0, deleted.stderr
    again = shoal("groups", "delete", "cli-g", *b)
    assert again.returncode == 1 and "cli-g" in again.stderr


def test_set_mode_both_ways_with_describe_configs_and_added_partitions(bootstrap: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    b = ("--bootstrap-server", bootstrap)
    assert shoal("topics", "create", "cli-switch", "--partitions", "2", "--mode", "classic", *b).returncode == 0
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i in range(4):
        producer.send("cli-switch", b"classic-%d" % i, partition=i % 2)
    producer.flush()

    bad = shoal("topics", "set-mode", "cli-switch", "tiered", *b)
    assert bad.returncode == 2 and "invalid choice" in bad.stderr
    missing = shoal("topics", "set-mode", "no-such-topic", "diskless", *b)
    assert missing.returncode == 1 and "no-such-topic" in missing.stderr
    switched = shoal("topics", "set-mode", "cli-switch", "diskless", "--wait", *b, "--format", "json")
    assert switched.returncode == 0, switched.stderr
    answer = json.loads(switched.stdout)
    assert answer["switched"] is True and [p["mode"] for p in answer["partitions"]] == ["diskless", "diskless"]
    [topic] = json.loads(shoal("topics", "describe", "cli-switch", *b, "--format", "json").stdout)
    assert topic["mode"] == "diskless" and [p["mode_since"] for p in topic["partitions"]] == [2, 2]
    text = shoal("topics", "describe", "cli-switch", *b).stdout
    assert "Mode: diskless (since offset 2)" in text, text
    configs = json.loads(
        shoal(
            "configs", "describe", "--entity-type", "topics", "--entity-name", "cli-switch", *b, "--format", "json"
        ).stdout
    )
    assert configs["diskless.enable"]["value"] == "true" and configs["diskless.mode.status"]["value"] == "diskless"

    # a partition added now is created classic (the creation mode) and switched by its leader
    assert shoal("topics", "alter", "cli-switch", "--partitions", "3", *b).returncode == 0
    again = shoal("topics", "set-mode", "cli-switch", "diskless", "--wait", "--timeout-ms", "30000", *b)
    assert again.returncode == 0, again.stderr
    producer.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")  # knows the new partition
    for i in range(6):
        producer.send("cli-switch", b"diskless-%d" % i, partition=i % 3)
    producer.flush()
    back = shoal("topics", "set-mode", "cli-switch", "classic", "--wait", *b)
    assert back.returncode == 0 and "cli-switch is classic" in back.stdout, back.stderr
    for i in range(3):
        producer.send("cli-switch", b"classic-again-%d" % i, partition=i)
    producer.flush()
    producer.close()

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=2000, fetch_max_wait_ms=100)
    consumer.assign([TopicPartition("cli-switch", p) for p in range(3)])
    consumer.seek_to_beginning()
    got = sorted(m.value for m in consumer)
    consumer.close()
    expected = [b"classic-%d" % i for i in range(4)] + [b"diskless-%d" % i for i in range(6)]
    assert got == sorted(expected + [b"classic-again-%d" % i for i in range(3)])
    unreachable = shoal("topics", "set-mode", "cli-switch", "diskless", "--bootstrap-server", "127.0.0.1:1")
    assert unreachable.returncode == 1
