"""Issue 11, "Acknowledged means kept": a WAL object that cannot be read fails only the
partitions whose batches are in it. Co-fetched classic and diskless partitions keep flowing.

One broker on moto S3, with the object cache off (`cache.max.bytes=0`) so every diskless
fetch GETs from the bucket, as a consumer that catches up does. A classic topic and a
diskless topic with 4 partitions share every fetch. One WAL object holding only one batch
of diskless partition 0 is deleted from the bucket (boto3 against the moto endpoint). Then:

- a confluent-kafka consumer assigned to all five partitions receives everything in the
  classic partition and diskless partitions 1-3, including records produced while it reads,
  and partition 0 up to the missing batch;
- one raw Fetch of all five partitions answers partition 0 at the missing batch with
  KAFKA_STORAGE_ERROR (retriable) and no records, and serves the other four in the same
  response; partition 0 from offset 0 serves the batches before the missing one, with no error;
- the broker keeps running and serving.
"""

from __future__ import annotations

import time
import uuid

import pytest

from walfiles.format import read_object

from .clients import RawConnection, Rec, api_versions, create_topic, decode_records, pick_version, produce_kafka_python

pytestmark = pytest.mark.integration

KAFKA_STORAGE_ERROR = 56
DISKLESS_PARTITIONS = 4


@pytest.fixture
def s3_bucket(moto_server):
    import boto3
    from botocore.config import Config

    client = boto3.client(
        "s3",
        endpoint_url=f"http://127.0.0.1:{moto_server.port}",
        region_name="us-east-1",
        config=Config(retries={"max_attempts": 2}),
    )
    yield moto_server.bucket, client
    client.close()


def records(tag: str, n: int, partition: int) -> list[Rec]:
    ts = int(time.time() * 1000)
    return [Rec(partition, None, f"{tag}-{i}".encode(), (), ts) for i in range(n)]


def wal_keys(client, bucket: str, prefix: str) -> set[str]:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/wal/")
    return {o["Key"] for page in pages for o in page.get("Contents", [])}


def fetch_many(address: str, wanted: dict[tuple[str, int], int]) -> dict[tuple[str, int], object]:
    """One Fetch request for every (topic, partition) at its offset; each partition's answer."""
    from kafka.protocol.consumer import FetchRequest

    v = pick_version(api_versions(address), FetchRequest, cap=12)
    T = FetchRequest.FetchTopic
    topics: dict[str, list] = {}
    for (topic, partition), offset in wanted.items():
        topics.setdefault(topic, []).append(
            T.FetchPartition(
                partition=partition,
                current_leader_epoch=-1,
                fetch_offset=offset,
                log_start_offset=-1,
                partition_max_bytes=1 << 20,
            )
        )
    request = FetchRequest(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=16 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[T(topic=t, partitions=ps) for t, ps in topics.items()],
        forgotten_topics_data=[],
        rack_id="",
    )
    with RawConnection(address, timeout_s=20) as conn:
        response = conn.request(request, v, timeout_s=20)
    assert response.error_code == 0, f"Fetch failed as a whole: error {response.error_code}"
    return {(t.topic, p.partition_index): p for t in response.responses for p in t.partitions}


def test_missing_wal_object_fails_only_its_partition(broker_factory, moto_server, s3_bucket):
    bucket, s3 = s3_bucket
    prefix = f"it-{uuid.uuid4().hex[:10]}"
    url = f"s3://{bucket}/{prefix}?endpoint=http://127.0.0.1:{moto_server.port}&region=us-east-1"
    broker = broker_factory(
        extra_args=["--object-store", url, "--set", "wal.linger.ms=50", "--set", "cache.max.bytes=0"]
    )
    bs = broker.bootstrap
    classic, diskless = f"mw-classic-{uuid.uuid4().hex[:6]}", f"mw-diskless-{uuid.uuid4().hex[:6]}"
    create_topic(bs, classic, 1, configs={"diskless.enable": "false"})
    create_topic(bs, diskless, DISKLESS_PARTITIONS)
    healthy = [(classic, 0)] + [(diskless, p) for p in range(1, DISKLESS_PARTITIONS)]
    expected: dict[tuple[str, int], list[bytes]] = {tp: [] for tp in healthy}

    def produce(tag: str, n: int, targets: list[tuple[str, int]]) -> None:
        for topic, partition in targets:
            batch = records(f"{tag}-{topic}-{partition}", n, partition)
            offsets = produce_kafka_python(bs, topic, batch, acks="all")
            assert offsets == sorted(offsets)
            if (topic, partition) in expected:
                expected[(topic, partition)] += [r.value for r in batch]

    # Before: every partition has records, in objects that stay.
    produce("before", 20, healthy)
    produce_kafka_python(bs, diskless, records("before-p0", 20, 0), acks="all")
    # The doomed object: one produce, to diskless partition 0 alone, in a quiet moment.
    keys = wal_keys(s3, bucket, prefix)
    lost_offsets = produce_kafka_python(bs, diskless, records("lost-p0", 10, 0), acks="all")
    assert lost_offsets == list(range(20, 30))
    [doomed] = wal_keys(s3, bucket, prefix) - keys
    index, _ = read_object(s3.get_object(Bucket=bucket, Key=doomed)["Body"].read())
    assert [p.partition for p in index.partitions] == [0] and index.batch_count == 1, index
    s3.delete_object(Bucket=bucket, Key=doomed)
    assert doomed not in wal_keys(s3, bucket, prefix)
    # After it: partition 0 goes on, behind the hole; the others too.
    assert produce_kafka_python(bs, diskless, records("after-p0", 10, 0), acks="all") == list(range(30, 40))
    produce("middle", 20, healthy)

    # One raw Fetch over all five partitions.
    at_hole = fetch_many(bs, {**{tp: 0 for tp in healthy}, (diskless, 0): 20})
    p0 = at_hole[(diskless, 0)]
    assert p0.error_code == KAFKA_STORAGE_ERROR and not p0.records, (p0.error_code, p0.records)
    for tp in healthy:
        assert at_hole[tp].error_code == 0, f"{tp}: error {at_hole[tp].error_code}"
        assert [r.value for r in decode_records(at_hole[tp].records)] == expected[tp], tp
    from_start = fetch_many(bs, {(diskless, 0): 0, (classic, 0): 0})
    assert from_start[(diskless, 0)].error_code == 0
    assert [r.value for r in decode_records(from_start[(diskless, 0)].records)] == [
        r.value for r in records("before-p0", 20, 0)
    ], "the batches before the missing one are served"

    # A consumer over all five partitions: everything flows but partition 0 past the hole,
    # including records produced while it reads.
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": f"mw-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "fetch.wait.max.ms": 100,
            "client.id": "issue11-missing-wal",
        }
    )
    consumer.assign([TopicPartition(t, p, 0) for t, p in healthy + [(diskless, 0)]])
    got: dict[tuple[str, int], list[tuple[int, bytes]]] = {tp: [] for tp in healthy + [(diskless, 0)]}
    errors: list[str] = []

    def read_until(done, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not done() and time.monotonic() < deadline:
            for m in consumer.consume(num_messages=500, timeout=0.2):
                if m.error() is not None:
                    errors.append(str(m.error()))
                else:
                    got[(m.topic(), m.partition())].append((m.offset(), m.value()))

    def caught_up() -> bool:
        return all(len(got[tp]) >= len(expected[tp]) for tp in healthy) and len(got[(diskless, 0)]) >= 20

    try:
        read_until(caught_up, 60)
        assert caught_up(), {tp: len(v) for tp, v in got.items()}
        produce("while-reading", 10, healthy)
        produce_kafka_python(bs, diskless, records("late-p0", 5, 0), acks="all")
        read_until(caught_up, 60)
        time.sleep(1.0)  # anything extra (partition 0 past the hole, duplicates) would arrive now
        read_until(lambda: False, 1.0)
    finally:
        consumer.close()
    for tp in healthy:
        assert [v for _o, v in got[tp]] == expected[tp], f"{tp}: not every record, or not once, in order"
        assert [o for o, _v in got[tp]] == list(range(len(expected[tp])))
    assert got[(diskless, 0)] == [(i, f"before-p0-{i}".encode()) for i in range(20)], (
        "partition 0: exactly the records before the missing object"
    )
    print(f"consumer errors reported: {errors[:3]} ({len(errors)})")
    assert broker.running()
    again = fetch_many(bs, {(diskless, 0): 30, (classic, 0): 0})
    assert again[(diskless, 0)].error_code == 0 and len(decode_records(again[(diskless, 0)].records)) >= 10
    assert again[(classic, 0)].error_code == 0
