"""Fetch with limits smaller than the data (KIP-74) through dispatch on an in-process
broker (tests/inprocess.py), classic and diskless: what comes back is exactly KIP-74's
count of whole batches, in offset order. Real consumers with such limits are
tests/integration/test_limits_and_retention.py's."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.consumer import FetchRequest
from kafka.record.memory_records import MemoryRecords

from tests.inprocess import InProcessBroker, InProcessClient, fetch_request
from tests.integration.clients import build_batch
from tests.unit.test_fetch_limits import kip74

MODES = {"classic": "false", "diskless": "true"}
# Batch value sizes per partition: 4 batches of 3 records each (offsets 3*i .. 3*i+2).
VALUES = {0: [900, 150, 150, 150], 1: [250, 250, 250, 250], 2: [120, 400, 120, 120]}
LIMITS = [(1 << 20, 1 << 20), (1500, 1 << 20), (1 << 20, 1200), (100, 1 << 20), (1 << 20, 1), (2500, 900)]


async def topic_with_batches(client: InProcessClient, mode: str, topic: str) -> dict[int, list[int]]:
    """Three partitions holding VALUES' batches; each batch's size."""
    assert await client.create_topic(topic, 3, {"diskless.enable": MODES[mode]}) == 0
    sizes: dict[int, list[int]] = {}
    for p, values in VALUES.items():
        sizes[p] = []
        for i, size in enumerate(values):
            batch = build_batch([(b"%d-%d-%d" % (p, i, r), bytes([65 + r]) * size) for r in range(3)])
            assert await client.produce(topic, p, batch) == (0, 3 * i)
            sizes[p].append(len(batch))
    return sizes


async def fetch_many(
    client: InProcessClient, topic: str, order: list[int], max_bytes: int, partition_max_bytes: int
) -> list[list[Any]]:
    """One Fetch of `order`'s partitions from offset 0; each partition's batches (kafka-python's decoder)."""
    request = fetch_request(
        topic, dict.fromkeys(order, 0), max_bytes=max_bytes, partition_max_bytes=partition_max_bytes
    )
    response = await client.request(request, await client.version(FetchRequest, cap=12))
    [answer] = response.responses
    assert [p.partition_index for p in answer.partitions] == order
    out = []
    for part in answer.partitions:
        assert part.error_code == 0, part.error_code
        records, batches = MemoryRecords(bytes(part.records or b"")), []
        while (batch := records.next_batch()) is not None:
            assert batch.validate_crc()
            batches.append(batch)
        out.append(batches)
    return out


@pytest.mark.parametrize("mode", sorted(MODES))
def test_fetch_limits_smaller_than_the_data(tmp_path: Path, mode: str) -> None:
    """max_bytes across partitions, partition_max_bytes per partition, the first batch whole:
    what comes back is exactly KIP-74's count of whole batches, in offset order."""

    async def scenario() -> None:
        async with InProcessBroker(tmp_path) as harness:
            client = harness.client()
            sizes = await topic_with_batches(client, mode, "kip74")
            for max_bytes, partition_max_bytes in LIMITS:
                for order in ([0, 1, 2], [2, 1, 0]):
                    got = await fetch_many(client, "kip74", order, max_bytes, partition_max_bytes)
                    want = kip74([sizes[p] for p in order], max_bytes, partition_max_bytes)
                    where = f"max_bytes={max_bytes} partition_max_bytes={partition_max_bytes} order={order}"
                    assert [len(b) for b in got] == want, where
                    assert [[b.base_offset for b in bs] for bs in got] == [[3 * i for i in range(n)] for n in want], (
                        where
                    )
                    total = sum(sizes[p][i] for p, n in zip(order, want) for i in range(n))
                    assert total <= max(max_bytes, sizes[order[0]][0]), where

    asyncio.run(scenario())
