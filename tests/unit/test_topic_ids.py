"""Produce v13+ and Fetch v13+ address topics by id (KIP-516): the broker resolves ids,
answers with them, and rejects unknown ids with UNKNOWN_TOPIC_ID. On an in-process broker
(tests/inprocess.py)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import ProduceRequest

from tests.inprocess import InProcessBroker, InProcessClient
from tests.integration.clients import build_batch, decode_records

UNKNOWN_TOPIC_ID = 100


async def _topic_id(client: InProcessClient, topic: str) -> uuid.UUID:
    response = await client.request(
        MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False), 12
    )
    return response.topics[0].topic_id


async def _produce(client: InProcessClient, topic_id: uuid.UUID, records: bytes):  # type: ignore[no-untyped-def]
    data = ProduceRequest.TopicProduceData
    request = ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=10_000,
        topic_data=[data(topic_id=topic_id, partition_data=[data.PartitionProduceData(index=0, records=records)])],
    )
    return (await client.request(request, 13)).responses[0]


async def _fetch(client: InProcessClient, topic_id: uuid.UUID, version: int):  # type: ignore[no-untyped-def]
    topic = FetchRequest.FetchTopic
    request = FetchRequest(
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=1 << 20,
        session_id=0,
        session_epoch=-1,
        topics=[
            topic(
                topic_id=topic_id,
                partitions=[topic.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)],
            )
        ],
        forgotten_topics_data=[],
        rack_id="",
    )
    return (await client.request(request, version)).responses[0]


@pytest.mark.parametrize("fetch_version", [13, 16, 18])
def test_produce_and_fetch_by_topic_id(tmp_path: Path, fetch_version: int) -> None:
    async def scenario() -> None:
        async with InProcessBroker(tmp_path) as harness:
            client = harness.client()
            assert await client.create_topic("ids", 1) == 0
            topic_id = await _topic_id(client, "ids")
            produced = await _produce(client, topic_id, build_batch([(b"k", b"by-id")]))
            assert produced.topic_id == topic_id
            assert produced.partition_responses[0].error_code == 0
            fetched = await _fetch(client, topic_id, fetch_version)
        assert fetched.topic_id == topic_id
        assert [(r.key, r.value) for r in decode_records(fetched.partitions[0].records)] == [(b"k", b"by-id")]

    asyncio.run(scenario())


def test_unknown_topic_id(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with InProcessBroker(tmp_path) as harness:
            client = harness.client()
            stranger = uuid.UUID(int=0x5157)
            assert (await _produce(client, stranger, build_batch([(b"k", b"v")]))).partition_responses[
                0
            ].error_code == UNKNOWN_TOPIC_ID
            assert (await _fetch(client, stranger, 13)).partitions[0].error_code == UNKNOWN_TOPIC_ID

    asyncio.run(scenario())
