"""AZ-local diskless traffic on 3 AZs, each with a broker that has a data dir and a stateless
one (`--stateless`): producers and consumers tagged with their AZ (client.id
`shoal_az=<az>`, client.rack) and bootstrapped only to their AZ's brokers. Every consumer
reads every record in order; record bytes never cross an AZ and metadata stays small; a
stateless broker and a leader can die under idempotent traffic without losing or
duplicating anything acknowledged.
"""

from __future__ import annotations

import threading
import time
import urllib.request
from collections import defaultdict
from collections.abc import Iterator

import pytest

from broker.devcluster import DevCluster
from tests.etcd_server import require_etcd_binary
from tests.integration.harness import wait_until
from tests.integration.test_cluster import create

AZS = ("az1", "az2", "az3")
PARTITIONS = 6
VALUE = b"x" * 1000


@pytest.fixture
def az_cluster(tmp_path) -> Iterator[DevCluster]:
    require_etcd_binary()
    with DevCluster(3, 3, stateless_per_az=1, work_dir=tmp_path / "cluster") as running:
        create(running, "az-t", [[p % 3, (p + 1) % 3, (p + 2) % 3] for p in range(PARTITIONS)])
        yield running


class AzProducer:
    """An idempotent acks=all confluent producer in one AZ, sending b"<az>-<seq>:" + 1000 bytes
    round-robin over the partitions from a thread; `acked[partition]` is (seq, offset) in order."""

    def __init__(self, cluster: DevCluster, az: str, limit: int) -> None:
        from confluent_kafka import Producer

        self.az, self.limit = az, limit
        self.producer = Producer(
            {
                "bootstrap.servers": cluster.bootstrap_by_az[az],
                "client.id": f"app,shoal_az={az}",
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 50,
                "message.timeout.ms": 120_000,
            }
        )
        self.acked: dict[int, list[tuple[int, int]]] = defaultdict(list)
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "AzProducer":
        self._thread.start()
        return self

    def _run(self) -> None:
        for seq in range(self.limit):
            if self._stop.is_set():
                break
            while True:
                try:
                    self.producer.produce(
                        "az-t",
                        value=f"{self.az}-{seq}:".encode() + VALUE,
                        partition=seq % PARTITIONS,
                        on_delivery=self._delivered(seq),
                    )
                    break
                except BufferError:
                    self.producer.poll(0.05)
            self.producer.poll(0)
            if seq % 200 == 199:
                time.sleep(0.05)  # about 4,000 records/s at most
        self.producer.flush(120)

    def _delivered(self, seq: int):  # type: ignore[no-untyped-def]
        def callback(err, msg) -> None:  # type: ignore[no-untyped-def]
            if err is not None:
                self.errors.append(str(err))
            else:
                self.acked[msg.partition()].append((seq, msg.offset()))

        return callback

    def count(self) -> int:
        return sum(len(v) for v in self.acked.values())

    def finish(self, stop: bool, timeout_s: float = 150) -> None:
        """Wait until everything sent is acknowledged (after stopping early, with `stop`)."""
        if stop:
            self._stop.set()
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), f"{self.az} producer did not finish"


def consume_all(cluster: DevCluster, az: str, ends: dict[int, int], timeout_s: float = 60) -> dict[int, list]:
    """(offset, value) of every record below `ends`, read through the AZ's own brokers."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_by_az[az],
            "client.id": f"shoal_az={az}",
            "client.rack": az,
            "group.id": f"reader-{az}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition("az-t", p, 0) for p in range(PARTITIONS)])
    got: dict[int, list] = defaultdict(list)
    deadline = time.monotonic() + timeout_s
    try:
        while any(len(got[p]) < ends[p] for p in ends) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                got[message.partition()].append((message.offset(), message.value()))
    finally:
        consumer.close()
    return got


IDLE_SAMPLE_S = 3.0


def metric_value(broker, name: str, label: str = "") -> float:  # type: ignore[no-untyped-def]
    """One broker's value of a metric (summed over its label sets), or of one labelled series."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=5).read().decode()
    prefix = name + (f"{{{label}}}" if label else "")
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(prefix) and (label or line[len(name)] in " {")
    )


def metric_sum(cluster: DevCluster, name: str, label: str = "") -> float:
    return sum(metric_value(b, name, label) for b in cluster.brokers if b.running())


def check(cluster: DevCluster, producers: list[AzProducer]) -> None:
    """Every AZ reads the same records in the same order; each producer's sequence is
    increasing per partition, without duplicates, and holds every acknowledged record."""
    ends = {p: max((o for prod in producers for s, o in prod.acked[p]), default=-1) + 1 for p in range(PARTITIONS)}
    reads = {az: consume_all(cluster, az, ends) for az in AZS}
    for p in range(PARTITIONS):
        first = reads[AZS[0]][p][: ends[p]]
        assert [o for o, _ in first] == list(range(ends[p])), f"partition {p}: offsets not dense"
        for az in AZS[1:]:
            assert reads[az][p][: ends[p]] == first, f"partition {p}: {az} read something else"
        stored = {o: v for o, v in first}
        for producer in producers:
            seqs = [int(v.split(b":")[0].split(b"-")[1]) for _, v in first if v.startswith(producer.az.encode() + b"-")]
            assert seqs == sorted(set(seqs)), f"partition {p}, {producer.az}: duplicated or reordered"
            for seq, offset in producer.acked[p]:
                assert stored.get(offset, b"").startswith(f"{producer.az}-{seq}:".encode()), (
                    f"partition {p}: acknowledged {producer.az}-{seq} at {offset} is not there"
                )


def test_az_local_traffic_keeps_record_bytes_in_their_az(az_cluster: DevCluster) -> None:
    # Idle brokers exchange metadata all the time (replica fetches long-poll every
    # replica.fetch.wait.max.ms, heartbeats): measured first, so the bound below is on what
    # produce adds, not on how long a loaded machine takes to run the test.
    idle_from, idle_start = metric_sum(az_cluster, "shoal_cross_az_bytes_total", 'kind="metadata"'), time.monotonic()
    time.sleep(IDLE_SAMPLE_S)
    before, started = metric_sum(az_cluster, "shoal_cross_az_bytes_total", 'kind="metadata"'), time.monotonic()
    idle_rate = (before - idle_from) / (started - idle_start)
    producers = [AzProducer(az_cluster, az, 3000).start() for az in AZS]
    for producer in producers:
        producer.finish(stop=False)
        assert not producer.errors and producer.count() == 3000
    check(az_cluster, producers)
    produced = metric_sum(az_cluster, "shoal_produced_bytes_total")
    records = metric_sum(az_cluster, "shoal_cross_az_bytes_total", 'kind="records"')
    metadata = metric_sum(az_cluster, "shoal_cross_az_bytes_total", 'kind="metadata"') - before
    background = idle_rate * (time.monotonic() - started)
    print(
        f"cross-AZ: records {records:.0f}, metadata {metadata:.0f} bytes ({background:.0f} of them idle "
        f"background at {idle_rate:.0f} B/s) of {produced:.0f} produced"
    )
    assert produced >= 9000 * len(VALUE)
    assert records <= 0.01 * produced, f"record bytes across AZs: {records} of {produced}"
    assert metadata - background <= 0.05 * produced, (
        f"metadata bytes across AZs: {metadata} ({background:.0f} idle background) of {produced}"
    )
    stateless_fetched = sum(metric_value(b, "shoal_fetched_bytes_total") for b in az_cluster.brokers[3:])
    assert stateless_fetched > 0, "the stateless brokers served fetches too"


def test_stateless_broker_leaves_and_joins_and_a_leader_dies_without_loss(az_cluster: DevCluster) -> None:
    producers = [AzProducer(az_cluster, az, 200_000).start() for az in AZS]
    wait_until(lambda: all(p.count() > 500 for p in producers), 60, interval_s=0.2, what="traffic")
    az_cluster.kill(3)  # the stateless broker of az1
    before = {p.az: p.count() for p in producers}
    wait_until(
        lambda: all(p.count() > before[p.az] + 500 for p in producers),
        120,
        interval_s=0.2,
        what="traffic after the stateless broker died",
    )
    joined_at = time.monotonic()
    az_cluster.restart(3, graceful=False)  # joins again: takes its share of az1's partitions
    wait_until(
        lambda: metric_value(az_cluster.broker(3), "shoal_produced_bytes_total") > 0,
        120,
        interval_s=0.5,
        what="the rejoined stateless broker taking produce",
    )
    print(f"rejoined broker took produce after {time.monotonic() - joined_at:.1f} s")
    az_cluster.kill(1)  # leads partitions 1 and 4
    before = {p.az: p.count() for p in producers}
    wait_until(
        lambda: all(p.count() > before[p.az] + 500 for p in producers),
        120,
        interval_s=0.2,
        what="traffic after a leader died",
    )
    for producer in producers:
        producer.finish(stop=True)
        assert not producer.errors, f"{producer.az}: {producer.errors[:3]}"
    az_cluster.restart(1, graceful=False)  # so every AZ has a replica to read from again
    check(az_cluster, producers)
