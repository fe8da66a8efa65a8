"""Real clients against one broker: every field round-trips, per partition in order, across
every producer/consumer pair and every compression codec. One broker per module; each test
uses its own topics."""

from __future__ import annotations

import pytest

from .clients import (
    CODECS,
    CONSUMERS,
    PRODUCERS,
    RawConnection,
    api_versions,
    assert_same_records,
    by_partition,
    create_topic,
    decode_records,
    make_records,
    raw_fetch,
    unique_topic,
)

pytestmark = pytest.mark.integration

CLIENTS = list(PRODUCERS)
CODEC_IDS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def assert_acked_offsets(recs, offsets) -> None:
    """What each producer reported: offsets dense from 0, in send order, per partition."""
    per_partition: dict[int, list[int]] = {}
    for r, off in zip(recs, offsets):
        per_partition.setdefault(r.partition, []).append(off)
    for p, offs in per_partition.items():
        assert offs == list(range(len(offs))), f"partition {p}: acked offsets {offs[:20]}..."


@pytest.mark.parametrize("consumer", CLIENTS)
@pytest.mark.parametrize("producer", CLIENTS)
def test_roundtrip_matrix(module_broker, producer, consumer):
    """Topic created and records produced by `producer`'s client, read back by `consumer`'s:
    key, value, headers (repeated and empty ones), timestamp, partition and order."""
    bs = module_broker.bootstrap
    topic = unique_topic(f"rt-{producer}-{consumer}")
    create_topic(bs, topic, partitions=3, client=producer)
    recs = make_records(45, partitions=3, tag=producer)
    offsets = PRODUCERS[producer](bs, topic, recs)  # kafka-python: idempotent by default
    assert_acked_offsets(recs, offsets)
    got = CONSUMERS[consumer](bs, topic, 3, len(recs))
    assert_same_records(recs, got)
    for p, consumed in by_partition(got).items():  # consumers see the offsets producers were told
        assert [r.offset for r in consumed] == list(range(len(consumed))), f"partition {p}"


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("producer", CLIENTS)
def test_compression_codecs(module_broker, producer, codec):
    """Compressed batches are stored as sent (codec kept) and every client decodes them."""
    bs = module_broker.bootstrap
    topic = unique_topic(f"codec-{codec}-{producer}")
    create_topic(bs, topic, partitions=2)
    recs = make_records(40, partitions=2, tag=codec)
    option = {"confluent": "compression.type"}.get(producer, "compression_type")
    offsets = PRODUCERS[producer](bs, topic, recs, **{option: codec})
    assert_acked_offsets(recs, offsets)
    for consumer in CLIENTS:
        got = CONSUMERS[consumer](bs, topic, 2, len(recs), settle_s=0.2)
        assert_same_records(recs, got)
    # The broker keeps the producer's compression (compression.type=producer).
    versions = api_versions(bs)
    with RawConnection(bs) as conn:
        data = raw_fetch(conn, versions, topic, 0, 0)
    from kafka.record.memory_records import MemoryRecords

    mr = MemoryRecords(bytes(data.records))
    codecs = []
    while (batch := mr.next_batch()) is not None:
        codecs.append(batch.compression_type)
    # librdkafka sends a batch uncompressed when compressing would not shrink it (a batch
    # of one small record can be cut by timing), so look for the codec in any batch.
    assert CODEC_IDS[codec] in codecs, f"batch codecs {codecs}"
    assert [r.value for r in decode_records(data.records)] == [r.value for r in by_partition(recs)[0]]
