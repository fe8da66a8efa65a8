"""Online mode switches (issue 16) on a 3-broker, 3-AZ cluster (etcd, moto, real broker
processes) under continuous acks=all production, idempotent and not, and a tailing consumer
group: classic -> diskless (`shoal topics set-mode --wait`) -> classic (confluent-kafka's
AdminClient.incremental_alter_configs) -> diskless with the partition leader killed (-9) in
the middle of the switch. Every acknowledged record is read back exactly once and in order,
by confluent-kafka and kafka-python, from offset 0 after the WAL file manager has run its
cycles (so it deleted nothing a switched partition still needs); the consumer group resumes
from its committed offsets; the switch is visible in describe, DescribeConfigs and metrics.
"""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest

from broker.devcluster import DevCluster
from tests.etcd_server import require_etcd_binary
from tests.integration.harness import wait_until
from tests.integration.test_az_routing import metric_sum, metric_value
from tests.integration.clients import kp_admin
from tests.integration.test_cluster import create
from tests.integration.test_operator_cli import shoal

pytestmark = pytest.mark.integration

TOPIC = "switching"
PARTITIONS = 3
SWITCHED_BACK = "switched-back"  # diskless, then classic for good: its WAL objects must stay


@pytest.fixture
def cluster(tmp_path) -> Iterator[DevCluster]:
    require_etcd_binary()
    # The WAL file manager may delete an object nothing references 3 s after its upload.
    settings = {
        "wal.file.manager.interval.ms": "1000",
        "wal.file.manager.grace.ms": "1000",
        "wal.commit.deadline.ms": "2000",
    }
    with DevCluster(3, 3, work_dir=tmp_path / "cluster", settings=settings) as running:
        replicas = [[p % 3, (p + 1) % 3, (p + 2) % 3] for p in range(PARTITIONS)]
        create(running, TOPIC, replicas, **{"diskless.enable": "false"})
        create(running, SWITCHED_BACK, replicas[:1], **{"diskless.enable": "true"})
        yield running


class Writer:
    """A confluent acks=all producer in one AZ sending b"<name>-<seq>" round-robin from a
    thread, about 300 records/s; `acked[partition]` is (seq, offset) in ack order. The
    non-idempotent one never retries (retries=0), so a record is written at most once."""

    def __init__(self, cluster: DevCluster, name: str, az: str, idempotent: bool) -> None:
        from confluent_kafka import Producer

        config: dict[str, Any] = {
            "bootstrap.servers": cluster.bootstrap_by_az[az],
            "client.id": f"{name},shoal_az={az}",
            "acks": "all",
            "linger.ms": 20,
            "message.timeout.ms": 60_000,
            "enable.idempotence": idempotent,
        }
        if not idempotent:
            config |= {"retries": 0, "max.in.flight.requests.per.connection": 1}
        self.name = name
        self.producer = Producer(config)
        self.acked: dict[int, list[tuple[int, int]]] = defaultdict(list)
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"writer-{name}", daemon=True)

    def start(self) -> "Writer":
        self._thread.start()
        return self

    def count(self) -> int:
        with self._lock:
            return sum(len(v) for v in self.acked.values())

    def _run(self) -> None:
        for seq in range(1_000_000):
            if self._stop.is_set():
                break
            while True:
                try:
                    self.producer.produce(
                        TOPIC,
                        value=f"{self.name}-{seq}".encode(),
                        partition=seq % PARTITIONS,
                        on_delivery=self._ack(seq),
                    )
                    break
                except BufferError:
                    self.producer.poll(0.05)
            self.producer.poll(0)
            if seq % 30 == 29:
                time.sleep(0.1)
        self.producer.flush(90)

    def _ack(self, seq: int):  # type: ignore[no-untyped-def]
        def callback(err, msg) -> None:  # type: ignore[no-untyped-def]
            with self._lock:
                if err is not None:
                    self.errors.append(str(err))
                else:
                    self.acked[msg.partition()].append((seq, msg.offset()))

        return callback

    def finish(self) -> None:
        self._stop.set()
        self._thread.join(120)
        assert not self._thread.is_alive(), f"{self.name} did not finish"


class Tail:
    """A consumer of group `tail` in az3 (auto commit) collecting (partition, offset, value)."""

    def __init__(self, cluster: DevCluster) -> None:
        from confluent_kafka import Consumer

        self.consumer = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap_by_az["az3"],
                "client.id": "tail,shoal_az=az3",
                "client.rack": "az3",
                "group.id": "tail",
                "auto.offset.reset": "earliest",
                "auto.commit.interval.ms": 500,
            }
        )
        self.consumer.subscribe([TOPIC])
        self.got: list[tuple[int, int, bytes]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tail", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            message = self.consumer.poll(0.2)
            if message is not None and not message.error():
                self.got.append((message.partition(), message.offset(), message.value()))

    def close(self) -> dict[int, int]:
        """Stop, commit synchronously, and return the committed offsets."""
        from confluent_kafka import KafkaError, KafkaException, TopicPartition

        self._stop.set()
        self._thread.join(30)
        try:
            self.consumer.commit(asynchronous=False)
        except KafkaException as exc:  # nothing consumed since the last auto commit
            if exc.args[0].code() != KafkaError._NO_OFFSET:
                raise
        committed = self.consumer.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=30)
        self.consumer.close()
        return {tp.partition: tp.offset for tp in committed}


def described(cluster: DevCluster) -> dict[str, Any]:
    out = shoal("topics", "describe", TOPIC, "--bootstrap-server", cluster.bootstrap, "--format", "json")
    assert out.returncode == 0, out.stderr
    [topic] = json.loads(out.stdout)
    return topic


def leader_of(cluster: DevCluster, partition: int) -> int:
    admin = kp_admin(cluster.bootstrap)
    try:
        [topic] = admin.describe_topics([TOPIC])
    finally:
        admin.close()
    return next(p["leader_id"] for p in topic["partitions"] if p["partition_index"] == partition)


def switch_with_confluent_admin(cluster: DevCluster, mode: str) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    entry = ConfigEntry("diskless.enable", "true" if mode == "diskless" else "false")
    entry.incremental_operation = AlterConfigOpType.SET
    resource = ConfigResource(ResourceType.TOPIC, TOPIC, incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


def more(writers: list[Writer], records: int, what: str) -> None:
    before = [w.count() for w in writers]
    wait_until(lambda: all(w.count() >= b + records for w, b in zip(writers, before)), 90, interval_s=0.2, what=what)


def read_everything(cluster: DevCluster, ends: dict[int, int]) -> dict[str, dict[int, list[tuple[int, bytes]]]]:
    """Every record below `ends` from offset 0, by confluent-kafka (az1) and kafka-python (az2)."""
    from confluent_kafka import Consumer, TopicPartition
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KpPartition

    reads: dict[str, dict[int, list[tuple[int, bytes]]]] = {
        "confluent": defaultdict(list),
        "kafka-python": defaultdict(list),
    }
    confluent = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_by_az["az1"],
            "client.id": "reader,shoal_az=az1",
            "group.id": "reader",
            "enable.auto.commit": False,
        }
    )
    confluent.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    deadline = time.monotonic() + 60
    got = reads["confluent"]
    while any(not got[p] or got[p][-1][0] < ends[p] - 1 for p in ends) and time.monotonic() < deadline:
        message = confluent.poll(0.5)
        if message is not None and not message.error():
            got[message.partition()].append((message.offset(), message.value()))
    confluent.close()
    kp = KafkaConsumer(bootstrap_servers=cluster.bootstrap_by_az["az2"], client_id="reader,shoal_az=az2")
    kp.assign([KpPartition(TOPIC, p) for p in range(PARTITIONS)])
    kp.seek_to_beginning()
    got = reads["kafka-python"]
    deadline = time.monotonic() + 60
    while any(not got[p] or got[p][-1][0] < ends[p] - 1 for p in ends) and time.monotonic() < deadline:
        for tp, messages in kp.poll(500).items():
            got[tp.partition] += [(m.offset, m.value) for m in messages]
    kp.close()
    return reads


def check(reads: dict[int, list[tuple[int, bytes]]], writers: list[Writer], client: str) -> None:
    """Offsets increase; each writer's sequence increases per partition (no duplicate, no
    reordering); every acknowledged record is at its acknowledged offset."""
    for p in range(PARTITIONS):
        records = reads[p]
        offsets = [o for o, _v in records]
        assert offsets == sorted(set(offsets)), f"{client}, partition {p}: offsets repeat or go back"
        stored = dict(records)
        for writer in writers:
            prefix = writer.name.encode() + b"-"
            seqs = [int(v[len(prefix) :]) for _o, v in records if v.startswith(prefix)]
            assert seqs == sorted(set(seqs)), f"{client}, partition {p}, {writer.name}: duplicated or reordered"
            missing = [(s, o) for s, o in writer.acked[p] if stored.get(o) != f"{writer.name}-{s}".encode()]
            assert not missing, f"{client}, partition {p}, {writer.name}: acknowledged records missing {missing[:5]}"


def write_and_switch_back(cluster: DevCluster) -> list[bytes]:
    """Regression: the WAL file manager asked only partitions of diskless topics about their
    references, so once SWITCHED_BACK was classic, the WAL objects its log still pointed at
    were deleted (3 s later here) and reading it from offset 0 failed. Returns what was written."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", linger_ms=5)
    values = [b"before-%d" % i for i in range(50)]
    for value in values:
        producer.send(SWITCHED_BACK, value, partition=0)
    producer.flush(30)
    switched = shoal("topics", "set-mode", SWITCHED_BACK, "classic", "--wait", "--bootstrap-server", cluster.bootstrap)
    assert switched.returncode == 0, switched.stderr
    values += [b"after-%d" % i for i in range(5)]
    for value in values[50:]:
        producer.send(SWITCHED_BACK, value, partition=0)
    producer.flush(30)
    producer.close()
    return values


def write_and_delete(cluster: DevCluster) -> None:
    """A diskless topic written and deleted: its WAL objects are garbage the manager must delete."""
    from kafka import KafkaProducer

    create(cluster, "doomed", [[0, 1, 2]], **{"diskless.enable": "true"})
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", linger_ms=5)
    for i in range(20):
        producer.send("doomed", b"doomed-%d" % i, partition=0)
    producer.flush(30)
    producer.close()
    admin = kp_admin(cluster.bootstrap)
    try:
        admin.delete_topics(["doomed"])
    finally:
        admin.close()


def read_switched_back(cluster: DevCluster) -> list[bytes]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, consumer_timeout_ms=10_000, fetch_max_wait_ms=100)
    consumer.assign([TopicPartition(SWITCHED_BACK, 0)])
    consumer.seek_to_beginning()
    got = [m.value for m in consumer]
    consumer.close()
    return got


def test_switch_both_ways_under_load_with_a_leader_killed_mid_switch(cluster: DevCluster) -> None:
    switched_back = write_and_switch_back(cluster)
    write_and_delete(cluster)
    wait_until(
        lambda: metric_sum(cluster, "shoal_walfiles_deleted_objects_total") > 0,
        60,
        interval_s=0.5,
        what="the WAL file manager deleting the deleted topic's objects",
    )
    writers = [Writer(cluster, "idem", "az1", True).start(), Writer(cluster, "plain", "az2", False).start()]
    tail = Tail(cluster)
    more(writers, 150, "classic traffic")

    # classic -> diskless with the CLI, waiting for every partition
    started_s = time.monotonic()
    switched = shoal("topics", "set-mode", TOPIC, "diskless", "--wait", "--bootstrap-server", cluster.bootstrap)
    print(f"classic -> diskless under load: {time.monotonic() - started_s:.2f} s (set-mode --wait, CLI included)")
    assert switched.returncode == 0, switched.stderr
    assert "every partition has switched" in switched.stdout
    topic = described(cluster)
    assert topic["mode"] == "diskless" and all(p["mode"] == "diskless" for p in topic["partitions"])
    assert all(p["mode_since"] > 0 for p in topic["partitions"]), "each partition's boundary is shown"
    assert metric_sum(cluster, "shoal_mode_switches_total", 'to="diskless"') == PARTITIONS
    more(writers, 150, "diskless traffic")

    # diskless -> classic with confluent-kafka's AdminClient (IncrementalAlterConfigs)
    switch_with_confluent_admin(cluster, "classic")
    wait_until(lambda: described(cluster)["mode"] == "classic", 60, interval_s=0.5, what="the switch to classic")
    more(writers, 150, "classic traffic again")

    # the consumer group resumes where it committed
    committed = tail.close()
    first = tail.got
    tail = Tail(cluster)
    wait_until(lambda: {p for p, _o, _v in tail.got} == set(range(PARTITIONS)), 60, what="the tail resuming")
    for p in range(PARTITIONS):
        resumed = min(o for q, o, _v in tail.got if q == p)
        assert resumed >= committed[p] > 0, f"partition {p}: resumed at {resumed}, committed {committed[p]}"

    # classic -> diskless, the leader of partition 0 killed mid-switch
    victim = leader_of(cluster, 0)
    started = shoal("topics", "set-mode", TOPIC, "diskless", "--bootstrap-server", cluster.bootstrap)
    assert started.returncode == 0, started.stderr
    cluster.kill(victim)
    more(writers, 100, "traffic with a broker down")
    cluster.restart(victim, graceful=False)
    finished = shoal(
        "topics",
        "set-mode",
        TOPIC,
        "diskless",
        "--wait",
        "--timeout-ms",
        "90000",
        "--bootstrap-server",
        cluster.bootstrap,
    )
    assert finished.returncode == 0, finished.stderr
    more(writers, 150, "diskless traffic after the restart")
    for writer in writers:
        writer.finish()
    assert writers[0].errors == [], f"the idempotent producer lost records: {writers[0].errors[:3]}"
    print(f"non-idempotent producer: {len(writers[1].errors)} retriable errors during the switches")

    # the WAL file manager runs a few cycles; then everything is still readable from 0
    cycles = metric_sum(cluster, "shoal_walfiles_cycles_total")
    wait_until(lambda: metric_sum(cluster, "shoal_walfiles_cycles_total") >= cycles + 2, 60, what="GC cycles")
    ends = {p: max(o for w in writers for _s, o in w.acked[p]) + 1 for p in range(PARTITIONS)}
    for client, reads in read_everything(cluster, ends).items():
        check(reads, writers, client)
    wait_until(
        lambda: all(max(o for q, o, _v in tail.got if q == p) >= ends[p] - 1 for p in range(PARTITIONS)),
        60,
        what="the tail reaching the end",
    )
    tail_reads: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    for p, o, v in sorted(set(first) | set(tail.got)):
        tail_reads[p].append((o, v))
    check(tail_reads, writers, "the tailing group")
    tail.close()
    assert read_switched_back(cluster) == switched_back, "a switched partition's diskless range lost its WAL objects"
    pending = [metric_value(b, "shoal_mode_switch_pending_partitions") for b in cluster.brokers if b.running()]
    assert pending == [0, 0, 0]
    # per partition, from its leader: the main topic's 3 are diskless, the switched-back one classic
    wait_until(lambda: metric_sum(cluster, "shoal_partition_diskless") == PARTITIONS, 10, what="per-partition modes")
    assert metric_sum(cluster, "shoal_partition_mode_since_offset", f'partition="0",topic="{TOPIC}"') > 0
