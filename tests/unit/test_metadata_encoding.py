"""The hand encoder of Metadata responses against kafka-python's schema encoder: byte for
byte equal over every version, with the values that vary the layout (null rack and cluster
id, internal topics, error entries, empty and repeated node lists)."""

from __future__ import annotations

import random
import uuid

import pytest
from kafka.protocol.metadata import MetadataResponse

from broker.protocol.metadata_encoding import BrokerRow, TopicSectionEncoder, encode_metadata_body

_Broker = MetadataResponse.MetadataResponseBroker
_Topic = MetadataResponse.MetadataResponseTopic
_Partition = _Topic.MetadataResponsePartition


def _nodes(rng: random.Random) -> list[int]:
    return rng.sample(range(0, 300), rng.choice((0, 1, 3, 3, 3, 5)))


def _random_answer(rng: random.Random) -> tuple[list[BrokerRow], str | None, int, list[dict]]:  # type: ignore[type-arg]
    brokers = [
        BrokerRow(n, f"broker-{n}.shoal.svc", 9092 + n, rng.choice((None, f"az-{n % 3}")))
        for n in rng.sample(range(300), rng.randint(0, 6))
    ]
    topics = []
    for t in range(rng.randint(0, 6)):
        partitions = [
            dict(
                error_code=rng.choice((0, 0, 0, 5)),
                partition_index=p,
                leader_id=rng.choice((-1, 0, 7, 299)),
                leader_epoch=rng.randint(-1, 2**31 - 1),
                replica_nodes=_nodes(rng),
                isr_nodes=_nodes(rng),
                offline_replicas=_nodes(rng),
            )
            for p in range(rng.choice((0, 1, 3, 200)))
        ]
        topics.append(
            dict(
                error_code=rng.choice((0, 0, 3)),
                name=f"tópic-{t}-" + "x" * rng.randint(0, 300),
                topic_id=uuid.UUID(int=rng.getrandbits(128)),
                is_internal=rng.random() < 0.2,
                partitions=partitions,
            )
        )
    return brokers, rng.choice((None, "shoal-cluster-id")), rng.randint(-1, 299), topics


@pytest.mark.parametrize("version", range(0, 14))
@pytest.mark.parametrize("seed", range(8))
def test_the_hand_encoder_matches_kafka_pythons_schema_encoder(version: int, seed: int) -> None:
    rng = random.Random(seed * 100 + version)
    brokers, cluster_id, controller_id, topics = _random_answer(rng)
    if version < 2:
        cluster_id = None  # not in the layout before v2
    if version < 1:
        brokers = [BrokerRow(b.node_id, b.host, b.port, None) for b in brokers]
    expected = MetadataResponse(
        throttle_time_ms=0,
        brokers=[_Broker(node_id=b.node_id, host=b.host, port=b.port, rack=b.rack) for b in brokers],
        cluster_id=cluster_id,
        controller_id=controller_id,
        topics=[
            _Topic(**{**t, "partitions": [_Partition(**p) for p in t["partitions"]]})  # type: ignore[dict-item]
            for t in topics
        ],
        error_code=0,
    ).encode(version=version)
    encoder = TopicSectionEncoder(version)
    sections = [
        encoder.topic(
            t["error_code"],
            t["name"],
            t["topic_id"],
            t["is_internal"],
            [
                encoder.partition(
                    p["error_code"],
                    p["partition_index"],
                    p["leader_id"],
                    p["leader_epoch"],
                    p["replica_nodes"],
                    p["isr_nodes"],
                    p["offline_replicas"],
                )
                for p in t["partitions"]
            ],
        )
        for t in topics
    ]
    body = b"".join(encode_metadata_body(version, brokers, cluster_id, controller_id, sections))
    assert body == bytes(expected)


def test_an_error_entry_without_a_name_decodes_as_null_from_v12() -> None:
    encoder = TopicSectionEncoder(12)
    topic_id = uuid.uuid4()
    section = encoder.topic(100, None, topic_id, False, [])
    decoded = MetadataResponse.decode(b"".join(encode_metadata_body(12, [], "c", 0, [section])), version=12)
    assert (decoded.topics[0].error_code, decoded.topics[0].name, decoded.topics[0].topic_id) == (100, None, topic_id)
