"""Admin API errors, DescribeConfigs, and max.message.bytes enforcement."""

from __future__ import annotations

import pytest

from .clients import (
    ADMINS,
    CALL_TIMEOUT_S,
    DESCRIBE_CONFIGS,
    RawConnection,
    Rec,
    api_versions,
    build_batch,
    consume_kafka_python,
    create_topic,
    decode_records,
    make_records,
    pick_version,
    produce_confluent,
    produce_kafka_python,
    raw_fetch,
    raw_produce,
    unique_topic,
)

pytestmark = pytest.mark.integration

TOPIC_ALREADY_EXISTS = 36
INVALID_TOPIC_EXCEPTION = 17
INVALID_CONFIG = 40
MESSAGE_TOO_LARGE = 10
DEFAULT_MAX_MESSAGE_BYTES = 1048588


@pytest.mark.parametrize("client", list(ADMINS))
def test_create_topic_errors(module_broker, client):
    bs = module_broker.bootstrap
    create = ADMINS[client]
    topic = unique_topic(f"adm-{client}")
    assert create(bs, topic, 2) == 0
    assert create(bs, topic, 2) == TOPIC_ALREADY_EXISTS
    assert create(bs, "bad/name", 1) == INVALID_TOPIC_EXCEPTION
    assert create(bs, unique_topic("badcfg"), 1, {"max.message.bytes": "not-a-number"}) == INVALID_CONFIG
    assert create(bs, unique_topic("unkcfg"), 1, {"no.such.config": "1"}) == INVALID_CONFIG


@pytest.mark.parametrize("name", [".", "..", "x" * 250, "spaces are bad", "ümlaut"])
def test_invalid_topic_names(module_broker, name):
    assert ADMINS["kafka-python"](module_broker.bootstrap, name, 1) == INVALID_TOPIC_EXCEPTION


def test_failed_creates_leave_no_topic(module_broker):
    """A topic rejected for its config must not exist afterwards."""
    bs = module_broker.bootstrap
    name = unique_topic("rejected")
    assert ADMINS["kafka-python"](bs, name, 1, {"max.message.bytes": "-5x"}) == INVALID_CONFIG
    from kafka.protocol.metadata import MetadataRequest

    versions = api_versions(bs)
    v = pick_version(versions, MetadataRequest, cap=12)
    with RawConnection(bs) as conn:
        req = MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=name)],
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        resp = conn.request(req, v)
    assert [t.error_code for t in resp.topics] == [3]  # UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.parametrize("client", list(DESCRIBE_CONFIGS))
def test_describe_configs_max_message_bytes(module_broker, client):
    bs = module_broker.bootstrap
    plain, custom = unique_topic("cfg-default"), unique_topic("cfg-custom")
    create_topic(bs, plain)
    create_topic(bs, custom, configs={"max.message.bytes": "20000"})
    assert DESCRIBE_CONFIGS[client](bs, plain)["max.message.bytes"] == str(DEFAULT_MAX_MESSAGE_BYTES)
    assert DESCRIBE_CONFIGS[client](bs, custom)["max.message.bytes"] == "20000"


def test_message_too_large_default_limit_raw(module_broker):
    """A batch above the default max.message.bytes gets MESSAGE_TOO_LARGE and is not stored;
    the partition keeps working."""
    bs = module_broker.bootstrap
    topic = unique_topic("big")
    create_topic(bs, topic)
    versions = api_versions(bs)
    big = build_batch([(b"k", b"x" * (DEFAULT_MAX_MESSAGE_BYTES + 100))])
    small = build_batch([(b"k", b"fits")])
    with RawConnection(bs, timeout_s=30) as conn:
        assert raw_produce(conn, versions, topic, 0, small) == (0, 0)
        assert raw_produce(conn, versions, topic, 0, big)[0] == MESSAGE_TOO_LARGE
        assert raw_produce(conn, versions, topic, 0, small) == (0, 1)
        part = raw_fetch(conn, versions, topic, 0, 0)
    assert part.high_watermark == 2
    assert [r.value for r in decode_records(part.records)] == [b"fits", b"fits"]


def test_max_message_bytes_boundary(module_broker):
    """Kafka rejects a batch only when it is larger than max.message.bytes: exactly at the
    limit is accepted, one byte more is MESSAGE_TOO_LARGE."""
    bs = module_broker.bootstrap
    topic = unique_topic("boundary")
    create_topic(bs, topic, configs={"max.message.bytes": "5000"})

    def batch_of_size(size: int) -> bytes:
        value_len = size - len(build_batch([(b"k", b"")]))
        for _ in range(8):  # varint lengths: converge in a few steps
            batch = build_batch([(b"k", b"v" * value_len)])
            if len(batch) == size:
                return batch
            value_len += size - len(batch)
        raise AssertionError(f"cannot build a batch of exactly {size} bytes")

    versions = api_versions(bs)
    with RawConnection(bs) as conn:
        assert raw_produce(conn, versions, topic, 0, batch_of_size(5000)) == (0, 0)
        assert raw_produce(conn, versions, topic, 0, batch_of_size(5001))[0] == MESSAGE_TOO_LARGE


def test_message_too_large_topic_limit_clients(module_broker):
    """Topic max.message.bytes=20000: kafka-python and librdkafka producers get
    MESSAGE_TOO_LARGE from the broker (their own client-side limits are higher)."""
    from confluent_kafka import KafkaError, KafkaException
    from kafka.errors import MessageSizeTooLargeError

    bs = module_broker.bootstrap
    topic = unique_topic("limit")
    create_topic(bs, topic, configs={"max.message.bytes": "20000"})
    ok = make_records(1, 1, tag="ok")
    produce_kafka_python(bs, topic, ok)
    too_big = [Rec(0, b"k", b"y" * 30_000, (), ok[0].timestamp)]
    with pytest.raises(MessageSizeTooLargeError):
        produce_kafka_python(bs, topic, too_big, max_request_size=5 << 20, compression_type=None)
    with pytest.raises(KafkaException) as exc:
        produce_confluent(bs, topic, too_big, **{"message.max.bytes": 5 << 20})
    assert exc.value.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    got = consume_kafka_python(bs, topic, 1, expected=1, timeout_s=CALL_TIMEOUT_S)
    assert [r.value for r in got] == [ok[0].value]


def test_describe_topic_partitions_pages_match_metadata(module_broker):
    """kafka-python's describe_topic_partitions (DescribeTopicPartitions, API 75) paged four
    partitions at a time gives every partition once, with what Metadata says about it."""
    from kafka import KafkaAdminClient

    bs = module_broker.bootstrap
    names = sorted([unique_topic("dtp-a"), unique_topic("dtp-b")])
    create_topic(bs, names[0], partitions=7)
    create_topic(bs, names[1], partitions=5)
    admin = KafkaAdminClient(bootstrap_servers=bs, request_timeout_ms=10_000, client_id="shoal-it-admin")
    try:
        seen, cursor, pages = [], None, 0
        while True:
            page = admin.describe_topic_partitions(names, response_partition_limit=4, cursor=cursor)
            pages += 1
            for topic in page["topics"]:
                assert topic["error_code"] == 0
                seen += [
                    (topic["name"], p["partition_index"], p["leader_id"], p["replica_nodes"])
                    for p in topic["partitions"]
                ]
            cursor = page["next_cursor"]
            if cursor is None:
                break
            assert pages < 10
        assert pages == 3
        assert [(n, i) for n, i, _, _ in seen] == [(names[0], i) for i in range(7)] + [(names[1], i) for i in range(5)]
        described = {
            (t["name"], p["partition_index"]): (p["leader_id"], p["replica_nodes"])
            for t in admin.describe_topics(names)
            for p in t["partitions"]
        }
        assert {(n, i): (leader, replicas) for n, i, leader, replicas in seen} == described
        (missing,) = admin.describe_topic_partitions([unique_topic("dtp-none")])["topics"]
        assert missing["error_code"] == 3  # UNKNOWN_TOPIC_OR_PARTITION
    finally:
        admin.close()
