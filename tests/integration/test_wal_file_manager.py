"""Issue 14: the WAL file manager reclaims object storage, safely, with real processes.

- Three brokers in three AZs (etcd, moto): a diskless topic with retention.ms of seconds under
  continuous idempotent produce while a consumer tails it from the earliest offset; the
  manager's broker is killed with SIGKILL mid-run (another broker takes the manager over; GC
  pauses while the dead broker's replicas are unregistered, and says so); a topic is deleted;
  an orphan (uploaded, never committed, as by a broker that died before its commit) naming a
  partition with older references is put in the bucket. Then the bucket converges to what the logs reference: the consumer saw no gap
  and no duplicate, every record of a topic without retention reads back, and only a handful
  of objects remain.
- One broker whose deletes are throttled (tests/s3proxy.py answering DeleteObjects with
  503 SlowDown): nothing is forgotten, the manager backs off instead of retrying in a storm,
  and it catches up once the store recovers.
- The embedded default (file:// under the data dir, local metadata): the broker's own disk
  stops growing, and `shoal walfiles status|gc` work against it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from broker.devcluster import DevCluster
from tests.etcd_server import require_etcd_binary
from tests.s3proxy import configure_s3proxy, running_s3proxy, s3proxy_stats
from walfiles.format import WalObjectBuilder, read_object
from walfiles.keys import format_wal_key

from .clients import BackgroundProducer, build_batch, kp_admin, produce_kafka_python, read_all, make_records
from .harness import wait_until

pytestmark = pytest.mark.integration

FAST_GC = {
    "wal.file.manager.interval.ms": "1000",
    "wal.file.manager.grace.ms": "2000",
    "wal.commit.deadline.ms": "5000",
    "log.retention.check.interval.ms": "1000",
    "wal.linger.ms": "50",
}
SHORT = {"diskless.enable": "true", "retention.ms": "4000", "segment.ms": "1000", "min.insync.replicas": "2"}


def shoal(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "broker", *args], capture_output=True, text=True, timeout=timeout_s, check=False
    )


def walfiles(command: str, bootstrap: str, *extra: str) -> dict:
    result = shoal("walfiles", command, "--bootstrap-server", bootstrap, "--format", "json", *extra)
    assert result.returncode in (0, 10), result.stderr
    return json.loads(result.stdout)


def scrape(metrics_port: int, name: str) -> float | None:
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def create(bootstrap: str, name: str, partitions: int, configs: dict[str, str], rf: int = 1) -> None:
    from kafka.admin import NewTopic

    admin = kp_admin(bootstrap)
    try:
        admin.create_topics([NewTopic(name, partitions, rf, topic_configs=configs)])
    finally:
        admin.close()
    time.sleep(1.0)  # leaders elected and known to every broker


class TailingConsumer:
    """kafka-python from the earliest offset, in a thread: every offset it gets per partition.

    The topic's retention is 4 s, so a consumer that falls behind that far (a loaded machine,
    a broker killed under it) finds its next records deleted: OFFSET_OUT_OF_RANGE, and it
    starts again from the log start. That gap is Kafka's behaviour, not a loss, so the
    consumer resets itself (auto_offset_reset="none") and remembers where it did."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        from kafka import KafkaConsumer, TopicPartition

        self.consumer = KafkaConsumer(
            bootstrap_servers=bootstrap, auto_offset_reset="none", enable_auto_commit=False, fetch_max_wait_ms=200
        )
        assigned = [TopicPartition(topic, p) for p in range(partitions)]
        self.consumer.assign(assigned)
        self.consumer.seek_to_beginning(*assigned)
        self.offsets: dict[int, list[int]] = {p: [] for p in range(partitions)}
        self.resets: dict[int, list[int]] = {p: [] for p in range(partitions)}  # fetch offsets out of range
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "TailingConsumer":
        self._thread.start()
        return self

    def _run(self) -> None:
        from kafka.errors import OffsetOutOfRangeError

        while not self._stop.is_set():
            try:
                polled = self.consumer.poll(timeout_ms=200)
            except OffsetOutOfRangeError as exc:
                for tp, offset in exc.args[0].items():
                    self.resets[tp.partition].append(offset)
                    self.consumer.seek_to_beginning(tp)
                continue
            for tp, records in polled.items():
                self.offsets[tp.partition].extend(r.offset for r in records)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.consumer.close()

    def assert_no_gap_or_duplicate(self) -> None:
        """Offsets only ever increase, and skip ahead only where a fetch of the next one was
        out of range (retention deleted it first)."""
        for partition, offsets in self.offsets.items():
            assert offsets, f"partition {partition}: nothing consumed"
            for before, after in zip(offsets, offsets[1:]):
                assert after > before, f"partition {partition}: {after} after {before} (duplicate or reordered)"
                assert after == before + 1 or before + 1 in self.resets[partition], (
                    f"partition {partition}: gap {before + 1}..{after - 1} without an out-of-range fetch "
                    f"(resets at {self.resets[partition]})"
                )


def orphan_object(topic_id, cluster_id: str, prefix: str) -> tuple[str, bytes]:
    builder = WalObjectBuilder()
    builder.append(topic_id, 0, build_batch([(None, b"never committed")]))
    return format_wal_key(prefix, cluster_id, int(time.time() * 1000), 99, 1), builder.build()


def test_three_brokers_converge_to_what_the_logs_reference(tmp_path: Path) -> None:
    require_etcd_binary()
    import boto3

    with DevCluster(3, 3, work_dir=tmp_path / "cluster", settings=FAST_GC) as cluster:
        bootstrap = cluster.bootstrap
        create(bootstrap, "short", 3, SHORT, rf=3)
        create(bootstrap, "keep", 1, {"diskless.enable": "true", "min.insync.replicas": "2"}, rf=3)
        create(bootstrap, "gone", 1, {"diskless.enable": "true"}, rf=3)
        kept = make_records(20, partitions=1)
        for i in range(0, 20, 4):  # a few objects, each referenced by "keep" forever
            produce_kafka_python(bootstrap, "keep", kept[i : i + 4])
        produce_kafka_python(bootstrap, "gone", make_records(30, partitions=1))

        assert cluster.moto is not None
        s3 = boto3.client(
            "s3",
            endpoint_url=f"http://127.0.0.1:{cluster.moto.port}",
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        bucket, prefix = cluster.object_store_url.split("/")[2], cluster.object_store_url.split("/", 3)[3].split("?")[0]

        def wal_keys() -> list[str]:
            pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/wal/")
            return [o["Key"] for page in pages for o in page.get("Contents", [])]

        status = walfiles("status", bootstrap)
        first = wal_keys()[0]  # holds a batch of "keep" (produced first)
        cluster_id = first.split("/")[-2]
        index, _ = read_object(s3.get_object(Bucket=bucket, Key=first)["Body"].read())
        [(keep_id, _partition)] = index.partition_keys()
        # a commit that never happened, naming a partition that references older objects
        orphan, data = orphan_object(keep_id, cluster_id, prefix)
        s3.put_object(Bucket=bucket, Key=orphan, Body=data)

        producer = BackgroundProducer(bootstrap, "short", 3, enable_idempotence=True, acks="all").start()
        consumer = TailingConsumer(bootstrap, "short", 3).start()
        time.sleep(6)
        manager = status["manager_id"]
        peak = len(wal_keys())
        cluster.kill(manager)  # kill -9 of the manager's broker, mid-run
        others = [b for b in cluster.brokers if b.node_id != manager]
        wait_until(
            lambda: any(scrape(b.metrics_port, "shoal_walfiles_manager_active") == 1 for b in others),
            30,
            what="another broker runs the manager",
        )
        survivor = next(b for b in others if scrape(b.metrics_port, "shoal_walfiles_manager_active") == 1)
        paused = walfiles("gc", survivor.bootstrap)["status"]  # a cycle now: it must pause
        assert paused["paused"] and str(manager) in (paused["paused_reason"] or ""), paused
        cluster.restart(manager, graceful=False)
        admin = kp_admin(bootstrap)
        admin.delete_topics(["gone"])
        admin.close()
        time.sleep(6)
        producer.close()
        consumer.stop()
        consumer.assert_no_gap_or_duplicate()
        assert producer.acked_count() > 1000, producer.acked_count()

        # Roll the last segments (segment.ms passed) so retention can drop them, then wait
        time.sleep(1.5)
        produce_kafka_python(bootstrap, "short", make_records(3, partitions=3))

        def converged() -> bool:
            return len(wal_keys()) <= 10 and orphan not in wal_keys()

        wait_until(converged, 60, interval_s=1, what=f"the bucket converging (peak {peak} objects)")
        status = walfiles("status", bootstrap)
        assert not status["paused"] and status["deleted_objects_last_hour"] >= peak - 10, status
        assert [r.value for r in read_all(bootstrap, "keep", 1)[0]] == [r.value for r in kept]
        s3.close()


def test_throttled_deletes_back_off_and_catch_up(broker_factory, moto_server, tmp_path: Path) -> None:
    with running_s3proxy(moto_server.port, log_path=tmp_path / "proxy.log") as port:
        url = f"s3://{moto_server.bucket}/throttled?endpoint=http://127.0.0.1:{port}&region=us-east-1"
        extra = ["--object-store", url] + [arg for k, v in FAST_GC.items() for arg in ("--set", f"{k}={v}")]
        extra += ["--set", "wal.file.manager.backoff.max.ms=8000"]
        broker = broker_factory("throttled", extra_args=extra)
        create(broker.bootstrap, "short", 1, {**SHORT, "min.insync.replicas": "1"})
        for i in range(20):
            produce_kafka_python(broker.bootstrap, "short", make_records(2, partitions=1))
        configure_s3proxy(port, fail_fraction=1.0, fail_methods="POST")  # DeleteObjects is a POST
        time.sleep(1.5)
        produce_kafka_python(broker.bootstrap, "short", make_records(2, partitions=1))  # rolls the last segment
        wait_until(
            lambda: (scrape(broker.metrics_port, "shoal_walfiles_delete_failures_total") or 0) > 0,
            30,
            what="a throttled delete",
        )
        first = s3proxy_stats(port)["failed"].get("POST", 0)
        time.sleep(10)
        posts = s3proxy_stats(port)["failed"].get("POST", 0) - first
        # backoff 1 s, 2 s, 4 s, 8 s...: at most 4 cycles in 10 s, each one batch of deletes
        # that the store's client retries (6 attempts)
        assert posts <= 4 * 6, f"{posts} DeleteObjects calls in 10 s: a retry storm"
        status = walfiles("status", broker.bootstrap)
        assert status["unreferenced_objects"] >= 19, status
        configure_s3proxy(port, fail_fraction=0.0)
        wait_until(
            lambda: walfiles("status", broker.bootstrap)["objects"] <= 2,
            40,
            interval_s=1,
            what="deletes catching up after the throttling",
        )


def test_the_embedded_default_reclaims_its_own_disk(broker_factory) -> None:
    extra = [arg for k, v in FAST_GC.items() for arg in ("--set", f"{k}={v}")]
    broker = broker_factory("embedded", extra_args=extra)
    objects_dir = broker.data_dir / "objects"
    create(broker.bootstrap, "short", 2, {**SHORT, "min.insync.replicas": "1"})
    producer = BackgroundProducer(broker.bootstrap, "short", 2).start()
    time.sleep(10)
    producer.close()
    producer.assert_all_delivered()
    time.sleep(1.5)
    produce_kafka_python(broker.bootstrap, "short", make_records(2, partitions=2))

    def files() -> list[Path]:
        return [p for p in objects_dir.rglob("*") if p.is_file() and "/wal/" in str(p)]

    wait_until(lambda: len(files()) <= 3, 40, interval_s=1, what="the object directory shrinking")
    text = shoal("walfiles", "status", "--bootstrap-server", broker.bootstrap)
    assert text.returncode == 0 and "running" in text.stdout, text
    dry = walfiles("gc", broker.bootstrap, "--dry-run")
    assert dry["dry_run"] and dry["deleted_objects"] == 0
    assert dry["status"]["deleted_objects_last_hour"] > 20, dry
