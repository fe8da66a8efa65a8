"""Issue 15: tiering with real processes: a broker on moto's S3 runs PySpark jobs (Spark local
mode, a subprocess of the broker) that assemble old ranges of a diskless topic into Kafka
segments; consumers of three clients read every record from the earliest offset across
tiered segments, WAL coordinates and the active log; the tiered ranges' WAL objects are
reclaimed; a broker killed mid-job loses nothing and the range commits once after restart.
Tiered segments carry their aborted-transaction index: read_committed consumers of a tiered
range skip aborted transactions. DeleteRecords moves the log start across tiers."""

from __future__ import annotations

import collections
import json
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from broker.log.txn_index import decode_entries
from tests.etcd_server import require_etcd_binary
from tests.gates import require_spark
from tests.tiering.kafka_segment_reader import check_segment

from .clients import (
    Rec,
    by_partition,
    consume_aiokafka,
    consume_confluent,
    consume_kafka_python,
    RawConnection,
    api_versions,
    build_batch,
    kp_admin,
    list_offsets_kafka_python,
    make_records,
    produce_kafka_python,
    raw_produce,
)
from .harness import wait_until
from .test_transactions import UNVERIFIED, Txn, check_reads, latest

pytestmark = pytest.mark.integration

SETTINGS = {
    "tiering.interval.ms": "1000",
    "log.retention.check.interval.ms": "1000",
    "wal.linger.ms": "20",
    "wal.file.manager.interval.ms": "1000",
    "wal.file.manager.grace.ms": "1000",
    "wal.commit.deadline.ms": "5000",
}
TOPIC = {
    "diskless.enable": "true",
    "remote.storage.enable": "true",
    "segment.bytes": str(48 << 10),  # of batch bytes: a local segment per ~100 batches here
    "local.retention.ms": "1000",
    "index.interval.bytes": "1024",
}


def scrape(metrics_port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + " ") or line.startswith(name + "{")
    )


def tiered_broker(broker_factory, moto_server, name: str, prefix: str, extra_args: tuple[str, ...] = ()):
    url = f"s3://{moto_server.bucket}/{prefix}?endpoint=http://127.0.0.1:{moto_server.port}&region=us-east-1"
    extra = ["--object-store", url] + [arg for k, v in SETTINGS.items() for arg in ("--set", f"{k}={v}")]
    return broker_factory(name, extra_args=extra + list(extra_args))


def s3_keys(moto_server, prefix: str) -> list[str]:
    import boto3

    s3 = boto3.client(
        "s3",
        endpoint_url=f"http://127.0.0.1:{moto_server.port}",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=moto_server.bucket, Prefix=prefix + "/")
    keys = [o["Key"] for page in pages for o in page.get("Contents", [])]
    s3.close()
    return keys


def s3_get(moto_server, key: str) -> bytes:
    import boto3

    s3 = boto3.client(
        "s3",
        endpoint_url=f"http://127.0.0.1:{moto_server.port}",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    try:
        return s3.get_object(Bucket=moto_server.bucket, Key=key)["Body"].read()
    finally:
        s3.close()


def create(bootstrap: str, name: str, partitions: int, configs: dict[str, str]) -> None:
    from kafka.admin import NewTopic

    admin = kp_admin(bootstrap)
    try:
        admin.create_topics([NewTopic(name, partitions, 1, topic_configs=configs)])
    finally:
        admin.close()
    time.sleep(0.5)


def produce_in_batches(bootstrap: str, topic: str, records: list[Rec], per_call: int = 40) -> None:
    for i in range(0, len(records), per_call):  # one produce call = a few batches: many WAL objects
        produce_kafka_python(bootstrap, topic, records[i : i + per_call], enable_idempotence=True, acks="all")


def assert_all_in_order(sent: list[Rec], got: list[Rec], client: str) -> None:
    """Every record once, in order per partition; offsets increase (markers take offsets)."""
    sent_p, got_p = by_partition(sent), by_partition(got)
    for p, expected in sent_p.items():
        actual = got_p.get(p, [])
        assert [r.content() for r in actual] == [r.content() for r in expected], (
            f"{client}: partition {p}: {len(actual)} records, expected {len(expected)} (or out of order)"
        )
        offsets = [r.offset for r in actual]
        assert offsets == sorted(set(offsets)), f"{client}: partition {p}: offsets not increasing"


def produce_transactions(bootstrap: str, topic: str) -> tuple[Txn, Txn, list[bytes], int]:
    """A committed and an aborted transaction interleaved over several small segments (the
    aborted one starts segments before its ABORT marker), then plain batches that seal the
    marker's segment. Returns both transactions, the plain values and the offset after the
    markers."""
    with RawConnection(bootstrap) as conn:
        versions = api_versions(bootstrap)
        committed, aborted = Txn(conn, versions, topic, "c"), Txn(conn, versions, topic, "a")
        for _ in range(4):
            committed.send(40)
            aborted.send(40)
        assert committed.end(commit=True) == 0 and aborted.end(commit=False) == 0
        after_markers = latest(conn, versions, topic, 0)
        plain: list[bytes] = []
        for i in range(8):
            values = [f"p-{i}-{j}".encode() for j in range(40)]
            assert raw_produce(conn, versions, topic, 0, build_batch([(b"k", v) for v in values]))[0] == 0
            plain += values
    return committed, aborted, plain, after_markers


def test_tiered_topic_reads_across_tiers_and_reclaims_wal_objects(broker_factory, moto_server) -> None:
    require_spark()
    prefix = f"tiering-{uuid.uuid4().hex[:6]}"
    broker = tiered_broker(broker_factory, moto_server, "tiered", prefix, tuple(UNVERIFIED))
    create(broker.bootstrap, "tiered", 2, TOPIC)
    create(broker.bootstrap, "tiered-txn", 1, {**TOPIC, "segment.bytes": "2048"})
    committed, aborted, plain, after_markers = produce_transactions(broker.bootstrap, "tiered-txn")
    old = make_records(2400, partitions=2, base_ts=int(time.time() * 1000) - 600_000, tag="old")
    produce_in_batches(broker.bootstrap, "tiered", old)
    wal_peak = len([k for k in s3_keys(moto_server, prefix) if "/wal/" in k])

    wait_until(  # two per partition ("tiered-txn" tiers its small segments too, once its transactions
        # ended: tiering stays below the last stable offset, so that can take a Spark job of its own first)
        lambda: sum(r["tiered_segments"] for r in tiering_status(broker.bootstrap) if r["topic"] == "tiered") >= 4,
        240,
        interval_s=1,
        what="tiered segments committed",
    )
    recent = make_records(300, partitions=2, tag="new")
    produce_in_batches(broker.bootstrap, "tiered", recent)
    sent = old + recent

    # Consumers from the earliest offset: tiered segments, then coordinates, then the tail
    for client, consume in (
        ("kafka-python", consume_kafka_python),
        ("confluent-kafka", consume_confluent),
        ("aiokafka", consume_aiokafka),
    ):
        assert_all_in_order(sent, consume(broker.bootstrap, "tiered", 2, len(sent), timeout_s=90), client)

    # Tiered files are Kafka segments an independent reader accepts
    keys = s3_keys(moto_server, prefix)
    manifests = [k for k in keys if k.endswith(".manifest")]
    assert len(manifests) >= 4
    # one of "tiered" (partition 1: "tiered-txn" has one); its producers never open transactions
    stem = next(k for k in manifests if json.loads(s3_get(moto_server, k))["partition"] == 1)[: -len(".manifest")]
    base_offset = int(stem.rsplit("/", 1)[1].split("-", 1)[0])
    files = {
        suffix: s3_get(moto_server, stem + suffix)
        for suffix in (".log", ".index", ".timeindex", ".snapshot", ".leader-epoch-checkpoint")
    }
    check_segment(
        files[".log"],
        files[".index"],
        files[".timeindex"],
        files[".snapshot"],
        files[".leader-epoch-checkpoint"],
        base_offset,
    )

    # ListOffsets: earliest is in tiered storage; a timestamp in the tiered range finds its record
    target = old[200]  # partition 0, well inside the first tiered segments
    offsets = list_offsets_kafka_python(broker.bootstrap, "tiered", 0, [target.timestamp])
    assert offsets["earliest"] == 0
    consumed = {r.content(): r.offset for r in consume_kafka_python(broker.bootstrap, "tiered", 2, len(sent))}
    assert offsets["by_ts"][target.timestamp] == (consumed[target.content()], target.timestamp)

    # The tiered ranges' WAL objects are reclaimed by the WAL file manager
    wait_until(
        lambda: len([k for k in s3_keys(moto_server, prefix) if "/wal/" in k]) < wal_peak // 2,
        60,
        interval_s=1,
        what=f"WAL objects of tiered ranges reclaimed (peak {wal_peak})",
    )
    assert scrape(broker.metrics_port, "shoal_tiering_jobs_total") >= 1

    # Transactions in a tiered range: the ABORT marker's segment is tiered and dropped
    # locally, and read_committed consumers still skip the aborted records
    wait_until(
        lambda: any(
            r["topic"] == "tiered-txn" and r["local_start"] >= after_markers for r in tiering_status(broker.bootstrap)
        ),
        120,
        interval_s=1,
        what="the transactions' segments tiered and dropped locally",
    )
    txn_indexes = [k for k in s3_keys(moto_server, prefix) if k.endswith(".txnindex")]
    entries = [(t.producer_id, t.first_offset) for k in txn_indexes for t in decode_entries(s3_get(moto_server, k))]
    assert entries == [(aborted.producer_id, 40)], "one tiered .txnindex: the abort (offsets 40.. after 0..39)"
    check_reads(
        broker.bootstrap,
        "tiered-txn",
        committed.values + plain,
        committed.values + aborted.values + plain,
    )


def shoal(*args: str, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "broker", *args], capture_output=True, text=True, timeout=timeout_s, check=False
    )


def tiering_status(bootstrap: str) -> list[dict]:
    """Every led partition's row of `shoal tiering status --format json` ([] if it fails)."""
    result = shoal("tiering", "status", "--bootstrap-server", bootstrap, "--format", "json")
    if result.returncode != 0:
        return []
    return [p for answer in json.loads(result.stdout)["brokers"] for p in answer["partitions"]]


def job_pids(parent: int) -> list[int]:
    """The tiering jobs (spark_jobs.assemble_segments) the broker `parent` started."""
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            ppid = int(next(l for l in status.read_text().splitlines() if l.startswith("PPid:")).split()[1])
            cmdline = (status.parent / "cmdline").read_bytes()
        except (OSError, StopIteration, ValueError):
            continue
        if ppid == parent and b"spark_jobs.assemble_segments" in cmdline:
            found.append(int(status.parent.name))
    return found


def alive(pid: int) -> bool:
    try:
        return "zombie" not in (Path(f"/proc/{pid}/status").read_text().split("State:", 1)[1].splitlines()[0])
    except (OSError, IndexError):
        return False


def test_broker_killed_mid_job_loses_nothing_and_the_range_commits_once(broker_factory, moto_server) -> None:
    require_spark()
    prefix = f"tiering-{uuid.uuid4().hex[:6]}"
    url = f"s3://{moto_server.bucket}/{prefix}?endpoint=http://127.0.0.1:{moto_server.port}&region=us-east-1"
    settings = {**SETTINGS, "tiering.interval.ms": "3600000"}  # cycles only when asked
    extra = ["--object-store", url] + [arg for k, v in settings.items() for arg in ("--set", f"{k}={v}")]
    broker = broker_factory("killed", extra_args=extra)
    create(broker.bootstrap, "tiered", 1, TOPIC)
    sent = make_records(1200, partitions=1, base_ts=int(time.time() * 1000) - 600_000, tag="old")
    produce_in_batches(broker.bootstrap, "tiered", sent)

    started = shoal("tiering", "run", "--bootstrap-server", broker.bootstrap)
    assert started.returncode == 0, started.stderr
    pid = broker.pid
    assert pid is not None
    [job] = wait_until(lambda: job_pids(pid), 30, interval_s=0.1, what="the tiering job running")
    time.sleep(2)  # Spark is starting or assembling
    broker.kill()  # kill -9 of the broker mid-job
    wait_until(lambda: not alive(job), 30, interval_s=0.2, what="the job dying with its broker")

    broker.restart(graceful=False)
    assert_all_in_order(sent, consume_kafka_python(broker.bootstrap, "tiered", 1, len(sent)), "after the kill")
    for _ in range(2):  # the first cycle abandons the dead job's segments and tiers again; the next deletes them
        ran = shoal("tiering", "run", "--wait", "--bootstrap-server", broker.bootstrap, "--format", "json")
        assert ran.returncode == 0, ran.stdout + ran.stderr
    status = json.loads(shoal("tiering", "status", "--bootstrap-server", broker.bootstrap, "--format", "json").stdout)
    [partition] = status["brokers"][0]["partitions"]
    assert partition["tiered_segments"] >= 1 and partition["tiered_start"] == 0, partition
    manifests = [k for k in s3_keys(moto_server, prefix) if k.endswith(".manifest")]
    assert len(manifests) == partition["tiered_segments"], "files of the dead job's segments are gone"
    assert_all_in_order(sent, consume_confluent(broker.bootstrap, "tiered", 1, len(sent)), "after tiering")
    text = shoal("tiering", "status", "--bootstrap-server", broker.bootstrap)
    assert text.returncode == 0 and "tiered" in text.stdout and "TIERED SEGMENTS" in text.stdout, text.stdout


def test_each_az_reads_tiered_segments_itself_followers_and_stateless_brokers(tmp_path: Path) -> None:
    """Two AZs, each with a data broker and a stateless one; the partition's leader in az1 tiers
    it; a consumer in each AZ (client.rack, its AZ's brokers only) reads every record from the
    earliest offset: the tiered range is read from the store by a broker of its own AZ (the
    follower or the stateless broker), so no record byte crosses an AZ."""
    require_spark()
    require_etcd_binary()
    from broker.devcluster import DevCluster
    from tests.integration.test_cluster import create as create_placed

    with DevCluster(2, 2, stateless_per_az=1, work_dir=tmp_path / "cluster", settings=SETTINGS) as cluster:
        create_placed(cluster, "tiered", [[0, 1]], **TOPIC)
        sent = make_records(1200, partitions=1, base_ts=int(time.time() * 1000) - 600_000, tag="old")
        produce_in_batches(cluster.bootstrap, "tiered", sent)
        wait_until(
            lambda: scrape(cluster.broker(0).metrics_port, "shoal_tiering_segments_total") >= 1,
            120,
            interval_s=1,
            what="a tiered segment committed by the leader",
        )
        wait_until(  # the leader dropped the tiered range locally; the follower follows
            lambda: (rows := tiering_status(cluster.bootstrap)) and all(p["local_start"] > 0 for p in rows),
            60,
            interval_s=1,
            what="the local log starting above the tiered range",
        )
        for az in ("az1", "az2"):
            got = consume_confluent(
                cluster.bootstrap_by_az[az],
                "tiered",
                1,
                len(sent),
                timeout_s=90,
                client_rack=az,
                client_id=f"shoal_az={az}",
            )
            assert_all_in_order(sent, got, f"consumer in {az}")
            readers = [b for b in cluster.brokers if b.az == az]
            assert sum(scrape(b.metrics_port, "shoal_tiered_read_bytes_total") for b in readers) > 0, (
                f"a broker of {az} read the tiered segment itself"
            )
        records = sum(scrape(b.metrics_port, 'shoal_cross_az_bytes_total{kind="records"}') for b in cluster.brokers)
        assert records == 0, f"{records} record bytes crossed an AZ"


def test_without_spark_produce_and_consume_work_and_the_backlog_shows(broker_factory, moto_server) -> None:
    """A broken job setup (here: no spark-submit) fails every job; clients do not notice, the
    backlog metric grows, status names the failure, and failed cycles back off."""
    prefix = f"tiering-{uuid.uuid4().hex[:6]}"
    url = f"s3://{moto_server.bucket}/{prefix}?endpoint=http://127.0.0.1:{moto_server.port}&region=us-east-1"
    settings = {**SETTINGS, "tiering.interval.ms": "500", "tiering.spark.submit": "/nonexistent/spark-submit"}
    extra = ["--object-store", url] + [arg for k, v in settings.items() for arg in ("--set", f"{k}={v}")]
    broker = broker_factory("nospark", extra_args=extra)
    create(broker.bootstrap, "tiered", 1, TOPIC)
    old = make_records(1200, partitions=1, base_ts=int(time.time() * 1000) - 600_000, tag="old")
    produce_in_batches(broker.bootstrap, "tiered", old)
    wait_until(
        lambda: scrape(broker.metrics_port, 'shoal_tiering_jobs_total{outcome="failed"}') >= 1,
        30,
        interval_s=0.5,
        what="a failed job",
    )
    backlog = scrape(broker.metrics_port, "shoal_tiering_backlog_bytes")
    assert backlog > 0
    more = make_records(1200, partitions=1, base_ts=int(time.time() * 1000) - 500_000, tag="more")
    produce_in_batches(broker.bootstrap, "tiered", more)
    assert_all_in_order(old + more, consume_kafka_python(broker.bootstrap, "tiered", 1, len(old) + len(more)), "kp")
    assert scrape(broker.metrics_port, "shoal_tiering_backlog_bytes") > backlog
    failed_before = scrape(broker.metrics_port, 'shoal_tiering_jobs_total{outcome="failed"}')
    time.sleep(6)
    assert scrape(broker.metrics_port, 'shoal_tiering_jobs_total{outcome="failed"}') - failed_before <= 4, (
        "failed cycles back off (0.5 s doubling), not one job per interval"
    )
    text = shoal("tiering", "status", "--bootstrap-server", broker.bootstrap)
    assert "cannot start /nonexistent/spark-submit" in text.stdout, text.stdout


def test_classic_topic_segments_are_tiered_by_the_broker_and_read_back(broker_factory, moto_server) -> None:
    """A classic topic with remote.storage.enable: closed segments are copied to tiered storage
    by the broker (no Spark), local retention drops them, and every reader serves them."""
    prefix = f"tiering-{uuid.uuid4().hex[:6]}"
    broker = tiered_broker(broker_factory, moto_server, "classic", prefix)
    create(broker.bootstrap, "classic-tiered", 1, {**TOPIC, "diskless.enable": "false"})
    sent = make_records(1500, partitions=1, base_ts=int(time.time() * 1000) - 600_000, tag="classic")
    produce_in_batches(broker.bootstrap, "classic-tiered", sent)
    wait_until(
        lambda: (
            (rows := tiering_status(broker.bootstrap))
            and rows[0]["tiered_segments"] >= 2
            and rows[0]["local_start"] > 0
        ),
        60,
        interval_s=0.5,
        what="classic segments tiered and dropped locally",
    )
    assert scrape(broker.metrics_port, "shoal_tiering_jobs_total") == 0, "no Spark job for a classic topic"
    for client, consume in (("kafka-python", consume_kafka_python), ("confluent-kafka", consume_confluent)):
        assert_all_in_order(sent, consume(broker.bootstrap, "classic-tiered", 1, len(sent)), client)
    stem = next(k for k in s3_keys(moto_server, prefix) if k.endswith(".manifest"))[: -len(".manifest")]
    files = [
        s3_get(moto_server, stem + suffix)
        for suffix in (".log", ".index", ".timeindex", ".snapshot", ".leader-epoch-checkpoint")
    ]
    check_segment(*files, int(stem.rsplit("/", 1)[1].split("-", 1)[0]))


def test_retention_applies_across_tiers_and_deletes_expired_tiered_segments(broker_factory, moto_server) -> None:
    """retention.ms covers both tiers: ranges older than it are deleted from tiered storage
    (their files too) once tiered, and the log start offset moves past them."""
    prefix = f"tiering-{uuid.uuid4().hex[:6]}"
    broker = tiered_broker(broker_factory, moto_server, "retention", prefix)
    configs = {**TOPIC, "diskless.enable": "false", "retention.ms": "300000"}  # 5 minutes
    create(broker.bootstrap, "expiring", 1, configs)
    now = int(time.time() * 1000)
    expired = make_records(800, partitions=1, base_ts=now - 3_600_000, tag="expired")  # an hour old
    recent = make_records(800, partitions=1, base_ts=now - 60_000, tag="recent")
    produce_in_batches(broker.bootstrap, "expiring", expired + recent)
    wait_until(
        lambda: scrape(broker.metrics_port, 'shoal_tiering_segments_total{event="deleted"}') >= 1,
        60,
        interval_s=0.5,
        what="an expired tiered segment deleted",
    )
    offsets = list_offsets_kafka_python(broker.bootstrap, "expiring", 0, [])
    assert offsets["earliest"] > 0
    got = consume_kafka_python(broker.bootstrap, "expiring", 1, len(recent), settle_s=1.0)
    assert got[0].offset >= offsets["earliest"] > 0
    assert [r.content() for r in got if r.key.startswith(b"recent")] == [r.content() for r in recent], (
        "every recent record is still there"
    )
    assert len(got) < len(expired) + len(recent), "the expired segment's records are gone"
    [row] = tiering_status(broker.bootstrap)
    manifests = [k for k in s3_keys(moto_server, prefix) if k.endswith(".manifest")]
    assert len(manifests) == row["tiered_segments"], "the files of deleted segments are gone"


def test_delete_records_moves_the_log_start_across_tiers_for_a_real_client(broker_factory, moto_server) -> None:
    """Issue 26 (F3): DeleteRecords past the tiered end of a classic tiered topic, with
    confluent-kafka. The watermarks (ListOffsets) start at the offset asked, a consumer with
    auto.offset.reset=earliest gets exactly the kept records once and none of the deleted ones,
    and the tiered segments below the offset are deleted from the store. Before, the low
    watermark stayed at the tiered start and the consumer looped over the tiered range for ever
    (OFFSET_OUT_OF_RANGE at the tiered end, then a reset to the earliest offset)."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    prefix = f"tiering-{uuid.uuid4().hex[:6]}"
    broker = tiered_broker(broker_factory, moto_server, "delete-records", prefix)
    create(broker.bootstrap, "deleting", 1, {**TOPIC, "diskless.enable": "false", "segment.bytes": "8192"})
    sent = make_records(400, partitions=1, base_ts=int(time.time() * 1000) - 600_000, tag="del")
    produce_in_batches(broker.bootstrap, "deleting", sent)
    wait_until(
        lambda: (rows := tiering_status(broker.bootstrap)) and rows[0]["tiered_segments"] >= 2,
        60,
        interval_s=0.5,
        what="classic segments tiered",
    )
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    keep_local = ConfigEntry("local.retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)
    [altered] = admin.incremental_alter_configs(
        [ConfigResource(ConfigResource.Type.TOPIC, "deleting", incremental_configs=[keep_local])]
    ).values()
    altered.result(10)  # nothing more is tiered: what follows stays local only
    kept: list[int] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(5):
        producer.produce("deleting", value=b"kept-%d" % i, on_delivery=lambda err, msg: kept.append(msg.offset()))
        producer.flush(10)
    target = kept[0]
    [row] = tiering_status(broker.bootstrap)
    assert row["tiered_end"] <= target

    [answer] = admin.delete_records([TopicPartition("deleting", 0, target)]).values()
    assert answer.result(10).low_watermark == target
    tp = TopicPartition("deleting", 0)
    probe = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "probe"})
    low, high = probe.get_watermark_offsets(tp, timeout=10, cached=False)
    probe.close()
    # The tiering cycle after DeleteRecords marks the tiered segments below it for deletion:
    # those markers are log entries, so the high watermark may already be past the kept records.
    assert low == target and high >= kept[-1] + 1, (low, high, target, kept)

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"readers-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    seen: collections.Counter[int] = collections.Counter()
    try:
        consumer.subscribe(["deleting"])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and sum(seen.values()) < 20:  # a loop shows within 20 deliveries
            for message in consumer.consume(num_messages=100, timeout=0.5):
                if message.error() is None:
                    seen[message.offset()] += 1
            if seen.keys() >= set(kept):  # all kept: a little longer for what should not come
                deadline = min(deadline, time.monotonic() + 2)
    finally:
        consumer.close()
    assert sorted(seen) == kept and set(seen.values()) == {1}, f"delivered {dict(seen)}, expected {kept} once each"

    wait_until(
        lambda: (
            tiering_status(broker.bootstrap)[0]["tiered_segments"] == 0
            and not [k for k in s3_keys(moto_server, prefix) if "/tiered/" in k]
        ),
        30,
        interval_s=0.5,
        what="the tiered segments below the log start and their files deleted",
    )
