"""A real broker, classic and diskless topics, for paths no other test drove: real consumers
with Fetch limits smaller than one batch (KIP-74; the exact batch counts are
tests/unit/test_fetch_limits_inprocess.py's), the periodic retention task, DeleteRecords
through kafka-python's admin client, RECORD_LIST_TOO_LARGE and the transactional-id refusal
in Produce."""

from __future__ import annotations

import time

import pytest

from tests.unit.test_fetch_limits_inprocess import MODES, VALUES

from .clients import (
    RawConnection,
    api_versions,
    build_batch,
    consume_confluent,
    consume_kafka_python,
    create_topic,
    decode_records,
    kp_admin,
    pick_version,
    raw_fetch,
    raw_produce,
    unique_topic,
)
from .conftest import _Factory
from .harness import wait_until

pytestmark = pytest.mark.integration

OFFSET_OUT_OF_RANGE = 1
RECORD_LIST_TOO_LARGE = 18


@pytest.fixture(scope="module")
def broker(tmp_path_factory):  # type: ignore[no-untyped-def]
    """One broker whose retention task runs every 200 ms (Kafka's default is 5 minutes)."""
    factory = _Factory(tmp_path_factory.mktemp("limits-broker"))
    yield factory(extra_args=["--set", "log.retention.check.interval.ms=200"])
    factory.close()


def topic_with_batches(bs: str, mode: str, prefix: str) -> tuple[str, dict[int, list[int]]]:
    """Three partitions holding VALUES' batches; returns the topic and each batch's size."""
    topic = unique_topic(f"{prefix}-{mode}")
    create_topic(bs, topic, partitions=3, configs={"diskless.enable": MODES[mode]})
    versions = api_versions(bs)
    sizes: dict[int, list[int]] = {}
    with RawConnection(bs) as conn:
        for p, values in VALUES.items():
            sizes[p] = []
            for i, size in enumerate(values):
                batch = build_batch([(b"%d-%d-%d" % (p, i, r), bytes([65 + r]) * size) for r in range(3)])
                assert raw_produce(conn, versions, topic, p, batch) == (0, 3 * i)
                sizes[p].append(len(batch))
    return topic, sizes


def earliest(bs: str, topic: str, partition: int) -> int:
    from kafka.protocol.consumer import ListOffsetsRequest

    versions = api_versions(bs)
    L = ListOffsetsRequest.ListOffsetsTopic
    request = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=0,
        topics=[L(name=topic, partitions=[L.ListOffsetsPartition(partition_index=partition, timestamp=-2)])],
    )
    with RawConnection(bs) as conn:
        response = conn.request(request, pick_version(versions, ListOffsetsRequest, cap=7), timeout_s=15)
    [part] = response.topics[0].partitions
    assert part.error_code == 0, part.error_code
    return part.offset


# -- Fetch limits smaller than one batch -----------------------------------------------------------


@pytest.mark.parametrize("mode", sorted(MODES))
def test_consumers_with_fetch_limits_below_one_batch_read_everything(broker, mode: str) -> None:  # type: ignore[no-untyped-def]
    """kafka-python with fetch_max_bytes=1, max_partition_fetch_bytes=1 and librdkafka with
    fetch.max.bytes=message.max.bytes=1000 (its minimum) and max.partition.fetch.bytes=1: every
    batch is larger, so only the first-batch rule lets them progress; they read everything."""
    topic, sizes = topic_with_batches(broker.bootstrap, mode, "small-fetch")
    total = 3 * sum(len(v) for v in VALUES.values())
    assert all(s > 1000 for s in sizes[0][:1])
    readers = {
        "kafka-python": lambda: consume_kafka_python(
            broker.bootstrap, topic, 3, total, timeout_s=30, fetch_max_bytes=1, max_partition_fetch_bytes=1
        ),
        "confluent": lambda: consume_confluent(
            broker.bootstrap,
            topic,
            3,
            total,
            timeout_s=30,
            fetch_max_bytes=1000,
            message_max_bytes=1000,
            max_partition_fetch_bytes=1,
        ),
    }
    for client, read in readers.items():
        got = read()
        for p in range(3):
            offsets = [r.offset for r in got if r.partition == p]
            assert offsets == list(range(3 * len(VALUES[p]))), f"{client}: partition {p} read {offsets}"


# -- retention and DeleteRecords -------------------------------------------------------------------


@pytest.mark.parametrize("mode", sorted(MODES))
def test_periodic_retention_task_deletes_old_segments(broker, mode: str) -> None:  # type: ignore[no-untyped-def]
    """retention.ms=60000, records an hour old, one batch per segment: the retention task
    (every 200 ms here) deletes every segment but the active one, so the log start offset
    (ListOffsets earliest) moves up to the last batch, and fetching below it is out of range."""
    bs = broker.bootstrap
    topic = unique_topic(f"retention-{mode}")
    create_topic(
        bs,
        topic,
        partitions=1,
        configs={"diskless.enable": MODES[mode], "retention.ms": "60000", "segment.bytes": "1024"},
    )
    old = int(time.time() * 1000) - 3_600_000
    versions = api_versions(bs)
    with RawConnection(bs) as conn:
        for i in range(5):
            batch = build_batch([(b"k", b"x" * 600)], timestamp_ms=old + i)
            assert raw_produce(conn, versions, topic, 0, batch) == (0, i)
    wait_until(lambda: earliest(bs, topic, 0) == 4, 30, what="the retention task to delete old segments")
    with RawConnection(bs) as conn:
        assert raw_fetch(conn, versions, topic, 0, 3).error_code == OFFSET_OUT_OF_RANGE
        kept = raw_fetch(conn, versions, topic, 0, 4)
    assert [r.offset for r in decode_records(kept.records)] == [4] and kept.log_start_offset == 4


@pytest.mark.parametrize("mode", sorted(MODES))
def test_delete_records(broker, mode: str) -> None:  # type: ignore[no-untyped-def]
    """kafka-python's admin delete_records: the low watermark comes back and becomes the log
    start offset (ListOffsets earliest), consumers from earliest start there, offsets above the
    high watermark are OFFSET_OUT_OF_RANGE, and an offset below the log start changes nothing."""
    from kafka import TopicPartition
    from kafka.errors import OffsetOutOfRangeError

    bs = broker.bootstrap
    topic, _sizes = topic_with_batches(bs, mode, "delrec")
    ends = {p: 3 * len(v) for p, v in VALUES.items()}  # 12 each
    admin = kp_admin(bs)
    try:
        result = admin.delete_records(
            {TopicPartition(topic, 0): 5, TopicPartition(topic, 1): -1, TopicPartition(topic, 2): 0}
        )
        low = {tp.partition: (r["low_watermark"], r["error_code"]) for tp, r in result.items()}
        assert low == {0: (5, 0), 1: (ends[1], 0), 2: (0, 0)}  # -1: up to the high watermark
        assert [earliest(bs, topic, p) for p in range(3)] == [5, ends[1], 0]
        again = admin.delete_records({TopicPartition(topic, 0): 2})  # below the start: no change
        assert again[TopicPartition(topic, 0)]["low_watermark"] == 5 and earliest(bs, topic, 0) == 5
        with pytest.raises(OffsetOutOfRangeError):
            admin.delete_records({TopicPartition(topic, 2): ends[2] + 1})
        assert earliest(bs, topic, 2) == 0
    finally:
        admin.close()
    got = consume_kafka_python(bs, topic, 3, (ends[0] - 5) + ends[2], timeout_s=30)
    assert [r.offset for r in got if r.partition == 0] == list(range(5, ends[0]))
    assert [r.offset for r in got if r.partition == 1] == []
    assert [r.offset for r in got if r.partition == 2] == list(range(ends[2]))
    with RawConnection(bs) as conn:
        assert raw_fetch(conn, api_versions(bs), topic, 0, 4).error_code == OFFSET_OUT_OF_RANGE


def test_delete_records_negative_offset_is_out_of_range(broker) -> None:  # type: ignore[no-untyped-def]
    """Kafka (Partition.deleteRecordsOnLeader): an offset below 0, other than -1 (the high
    watermark), is OFFSET_OUT_OF_RANGE."""
    from kafka import TopicPartition
    from kafka.errors import OffsetOutOfRangeError

    topic, _sizes = topic_with_batches(broker.bootstrap, "classic", "delneg")
    admin = kp_admin(broker.bootstrap)
    try:
        with pytest.raises(OffsetOutOfRangeError):
            admin.delete_records({TopicPartition(topic, 0): -2})
    finally:
        admin.close()


# -- produce refusals over the wire --------------------------------------------------------------


@pytest.mark.parametrize("mode", sorted(MODES))
def test_batch_larger_than_a_segment_is_record_list_too_large(broker, mode: str) -> None:  # type: ignore[no-untyped-def]
    bs = broker.bootstrap
    topic = unique_topic(f"toolarge-{mode}")
    create_topic(bs, topic, partitions=1, configs={"diskless.enable": MODES[mode], "segment.bytes": "1024"})
    versions = api_versions(bs)
    with RawConnection(bs) as conn:
        assert raw_produce(conn, versions, topic, 0, build_batch([(b"k", b"x" * 2000)]))[0] == RECORD_LIST_TOO_LARGE
        assert raw_produce(conn, versions, topic, 0, build_batch([(b"k", b"x" * 500)])) == (0, 0)
        part = raw_fetch(conn, versions, topic, 0, 0)
    assert part.high_watermark == 1 and [len(r.value) for r in decode_records(part.records)] == [500]


@pytest.mark.parametrize("mode", sorted(MODES))
def test_transactional_produce_is_trusted(broker, mode: str) -> None:  # type: ignore[no-untyped-def]
    """A Produce with a transactional id is appended: without KIP-890 verification the broker
    trusts the client to have added the partition (the batch here is not even transactional)."""
    from kafka.protocol.producer import ProduceRequest

    bs = broker.bootstrap
    topic = unique_topic(f"txn-{mode}")
    create_topic(bs, topic, partitions=1, configs={"diskless.enable": MODES[mode]})
    versions = api_versions(bs)
    P = ProduceRequest.TopicProduceData
    request = ProduceRequest(
        transactional_id="tx-1",
        acks=-1,
        timeout_ms=10_000,
        topic_data=[
            P(name=topic, partition_data=[P.PartitionProduceData(index=0, records=build_batch([(b"k", b"v")]))])
        ],
    )
    with RawConnection(bs) as conn:
        response = conn.request(request, pick_version(versions, ProduceRequest, cap=12), timeout_s=15)
        assert response.responses[0].partition_responses[0].error_code == 0
        assert raw_fetch(conn, versions, topic, 0, 0).high_watermark == 1
