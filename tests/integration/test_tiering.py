"""Issue 15: tiering with real processes: a broker on moto's S3 runs PySpark jobs (Spark local
mode, a subprocess of the broker) that assemble old ranges of a diskless topic into Kafka
segments; consumers of three clients read every record from the earliest offset across
tiered segments, WAL coordinates and the active log; the tiered ranges' WAL objects are
reclaimed; a broker killed mid-job loses nothing and the range commits once after restart."""

from __future__ import annotations

import time
import urllib.request
import uuid

import pytest

from tests.gates import require_spark
from tests.tiering.kafka_segment_reader import check_segment

from .clients import (
    Rec,
    by_partition,
    consume_aiokafka,
    consume_confluent,
    consume_kafka_python,
    kp_admin,
    list_offsets_kafka_python,
    make_records,
    produce_kafka_python,
)
from .harness import wait_until

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


def tiered_broker(broker_factory, moto_server, name: str, prefix: str):
    url = f"s3://{moto_server.bucket}/{prefix}?endpoint=http://127.0.0.1:{moto_server.port}&region=us-east-1"
    extra = ["--object-store", url] + [arg for k, v in SETTINGS.items() for arg in ("--set", f"{k}={v}")]
    return broker_factory(name, extra_args=extra)


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


def test_tiered_topic_reads_across_tiers_and_reclaims_wal_objects(broker_factory, moto_server) -> None:
    require_spark()
    prefix = f"tiering-{uuid.uuid4().hex[:6]}"
    broker = tiered_broker(broker_factory, moto_server, "tiered", prefix)
    create(broker.bootstrap, "tiered", 2, TOPIC)
    old = make_records(2400, partitions=2, base_ts=int(time.time() * 1000) - 600_000, tag="old")
    produce_in_batches(broker.bootstrap, "tiered", old)
    wal_peak = len([k for k in s3_keys(moto_server, prefix) if "/wal/" in k])

    wait_until(
        lambda: scrape(broker.metrics_port, "shoal_tiering_segments_total") >= 4,  # two per partition
        120,
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
    stem = manifests[0][: -len(".manifest")]
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
