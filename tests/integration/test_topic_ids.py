"""Produce v13+ and Fetch v13+ address topics by id (KIP-516): the broker resolves ids,
answers with them, and rejects unknown ids with UNKNOWN_TOPIC_ID."""

from __future__ import annotations

import uuid

import pytest
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import ProduceRequest

from .clients import RawConnection, build_batch, create_topic, decode_records, unique_topic

pytestmark = pytest.mark.integration
UNKNOWN_TOPIC_ID = 100


def _topic_id(conn: RawConnection, topic: str) -> uuid.UUID:
    response = conn.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                            allow_auto_topic_creation=False), 12)
    return response.topics[0].topic_id


def _produce(conn: RawConnection, topic_id: uuid.UUID, records: bytes):  # type: ignore[no-untyped-def]
    data = ProduceRequest.TopicProduceData
    request = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=10_000, topic_data=[
        data(topic_id=topic_id, partition_data=[data.PartitionProduceData(index=0, records=records)])])
    return conn.request(request, 13).responses[0]


def _fetch(conn: RawConnection, topic_id: uuid.UUID, version: int):  # type: ignore[no-untyped-def]
    topic = FetchRequest.FetchTopic
    request = FetchRequest(max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, session_id=0, session_epoch=-1,
                           topics=[topic(topic_id=topic_id, partitions=[topic.FetchPartition(
                               partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])],
                           forgotten_topics_data=[], rack_id="")
    return conn.request(request, version).responses[0]


@pytest.mark.parametrize("fetch_version", [13, 16, 18])
def test_produce_and_fetch_by_topic_id(module_broker, fetch_version: int) -> None:  # type: ignore[no-untyped-def]
    name = unique_topic("ids")
    create_topic(module_broker.bootstrap, name, 1)
    with RawConnection(module_broker.bootstrap) as conn:
        topic_id = _topic_id(conn, name)
        produced = _produce(conn, topic_id, build_batch([(b"k", b"by-id")]))
        assert produced.topic_id == topic_id
        assert produced.partition_responses[0].error_code == 0
        fetched = _fetch(conn, topic_id, fetch_version)
    assert fetched.topic_id == topic_id
    assert [(r.key, r.value) for r in decode_records(fetched.partitions[0].records)] == [(b"k", b"by-id")]


def test_unknown_topic_id(module_broker) -> None:  # type: ignore[no-untyped-def]
    with RawConnection(module_broker.bootstrap) as conn:
        stranger = uuid.uuid4()
        assert _produce(conn, stranger, build_batch([(b"k", b"v")])).partition_responses[0].error_code \
            == UNKNOWN_TOPIC_ID
        assert _fetch(conn, stranger, 13).partitions[0].error_code == UNKNOWN_TOPIC_ID
