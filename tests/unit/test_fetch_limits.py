"""Fetch sizing (KIP-74) in the Fetch handler, over real classic and diskless partitions and no
sockets: the response stays within `max_bytes` and each partition within
`partition_max_bytes`, except that the first batch of the response is returned whole when it
alone is larger, so a consumer always progresses. Only the first partition with data gets
that exception; limits are counted in whole batches."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
from kafka.protocol.consumer import FetchRequest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from broker.clock import SystemClock
from broker.config import load_config
from broker.handlers import fetch
from broker.objectstore import MemoryObjectStore
from broker.partition import Partition
from broker.topic_config import effective
from broker.topics import Topic
from broker.waiters import FetchWaiters
from tests.unit.test_partition import CLOCK_START, lead
from tests.unit.test_wal_writer import TOPIC_ID, Rig

CLASSIC_ID = uuid.UUID(int=9)
# Batch sizes (value bytes) per partition: partition 0 starts with a big batch, the others mix.
VALUES = {0: [3000, 500, 500, 500], 1: [700, 700, 700, 700], 2: [400, 1200, 400, 400]}


def value_batch(size: int, tag: int) -> memoryview:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    builder.append(0, timestamp=CLOCK_START, key=b"%d" % tag, value=bytes([tag % 251]) * size, headers=[])
    return memoryview(bytes(builder.build()))


async def topics_with_data(tmp_path: Path) -> tuple[SimpleNamespace, dict[str, list[list[int]]]]:
    """Diskless "d" and classic "c", three partitions each holding VALUES' batches (one record
    each, so offset i is batch i). Returns the broker seam and each partition's batch sizes."""
    rig = Rig(tmp_path / "d", MemoryObjectStore(clock=SystemClock()), partitions=3, wal_linger_ms=1)
    classic_settings = effective({"diskless.enable": "false"}, load_config(environ={}))
    hosted: dict[tuple[str, int], Partition] = {}
    sizes: dict[str, list[list[int]]] = {"c": [], "d": []}
    for index, values in VALUES.items():
        classic = lead(
            Partition.open(
                "c", index, tmp_path / f"c-{index}", classic_settings, rig.clock, 86_400_000, on_append=lambda p: None
            )
        )
        batches = [value_batch(v, index * 10 + i) for i, v in enumerate(values)]
        for b in batches:
            classic.append_records(b, acks=1)
            [result] = await asyncio.gather(*rig.writer.submit([rig.append(index, b)]))
            assert result.error_code == 0
        hosted[("c", index)] = classic
        hosted[("d", index)] = rig.partitions[index]
        sizes["c"].append([len(b) for b in batches])
        sizes["d"].append([len(b) for b in batches])
    topics = {"d": Topic("d", TOPIC_ID, 3, {}, rig.settings), "c": Topic("c", CLASSIC_ID, 3, {}, classic_settings)}

    def leader(name: str, index: int) -> Partition:
        hosted[(name, index)].check_leader()
        return hosted[(name, index)]

    broker = SimpleNamespace(
        catalog=SimpleNamespace(get=topics.get, by_id=lambda topic_id: None),
        replica_manager=SimpleNamespace(
            partitions=hosted, get=lambda name, index: hosted[(name, index)], leader=leader
        ),
        wal_reader=rig.reader,
        waiters=FetchWaiters(),
        metrics=rig.metrics,
        stopping=False,
        router=SimpleNamespace(racks=SimpleNamespace(remember=lambda peer, rack: None)),
    )
    return broker, sizes


def request(
    topic: str, order: list[int], max_bytes: int, partition_max_bytes: int, offsets: dict[int, int] | None = None
) -> FetchRequest:
    T = FetchRequest.FetchTopic
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        rack_id="",
        forgotten_topics_data=[],
        topics=[
            T(
                topic=topic,
                partitions=[
                    T.FetchPartition(
                        partition=p,
                        current_leader_epoch=-1,
                        fetch_offset=(offsets or {}).get(p, 0),
                        last_fetched_epoch=-1,
                        log_start_offset=-1,
                        partition_max_bytes=partition_max_bytes,
                    )
                    for p in order
                ],
            )
        ],
    )


def kip74(sizes: list[list[int]], max_bytes: int, partition_max_bytes: int) -> list[int]:
    """How many batches of each partition (in request order) Kafka returns."""
    total, first, out = 0, True, []
    for batches in sizes:
        limit, taken, used = min(partition_max_bytes, max_bytes - total), 0, 0
        for size in batches:
            if used + size > limit and not (first and taken == 0):
                break
            taken, used = taken + 1, used + size
        if taken:
            first, total = False, total + used
        out.append(taken)
    return out


async def fetch_counts(
    broker,
    topic: str,
    order: list[int],
    max_bytes: int,
    pmb: int,  # type: ignore[no-untyped-def]
    offsets: dict[int, int] | None = None,
) -> tuple[list[int], int]:
    response = await fetch.handle(
        broker, SimpleNamespace(api_version=12, peer="p"), request(topic, order, max_bytes, pmb, offsets)
    )
    [answer] = response.responses
    counts, total = [], 0
    for part in answer.partitions:
        assert part.error_code == 0
        data = bytes(part.records or b"")
        total += len(data)
        batches, pos = [], 0
        while pos < len(data):
            batch = DefaultRecordBatch(data[pos:])
            batches.append(batch)
            pos += batch.size_in_bytes
        start = (offsets or {}).get(part.partition_index, 0)
        assert [b.base_offset for b in batches] == list(range(start, start + len(batches))), "whole batches, in order"
        counts.append(len(batches))
    return counts, total


LIMITS = [  # (max_bytes, partition_max_bytes)
    (1 << 20, 1 << 20),  # everything
    (2500, 1 << 20),  # the response limit cuts across partitions
    (5000, 1 << 20),
    (1 << 20, 1500),  # the partition limit cuts each partition
    (100, 1 << 20),  # smaller than any batch: the first batch whole, nothing else
    (1 << 20, 100),
    (4000, 1000),
]


@pytest.mark.parametrize("topic", ["c", "d"])
@pytest.mark.parametrize("max_bytes, pmb", LIMITS)
@pytest.mark.parametrize("order", [[0, 1, 2], [1, 2, 0], [2, 0, 1]])
def test_fetch_sizes_follow_kip74(tmp_path: Path, topic: str, max_bytes: int, pmb: int, order: list[int]) -> None:
    async def scenario() -> None:
        broker, sizes = await topics_with_data(tmp_path)
        in_order = [sizes[topic][p] for p in order]
        counts, total = await fetch_counts(broker, topic, order, max_bytes, pmb)
        assert counts == kip74(in_order, max_bytes, pmb), (counts, in_order)
        first_batch = next(s[0] for s in in_order if s)
        assert total <= max(max_bytes, first_batch), "over max_bytes beyond the first batch"
        assert counts[0] >= 1, "the first partition with data always yields its first batch"

    asyncio.run(scenario())


@pytest.mark.parametrize("topic", ["c", "d"])
def test_first_batch_exception_goes_to_the_first_partition_with_data(tmp_path: Path, topic: str) -> None:
    """Partition 1 is fetched at its log end (nothing to send): partition 0, next in the
    request, gets the first-batch exception, partition 2 gets nothing."""

    async def scenario() -> None:
        broker, sizes = await topics_with_data(tmp_path)
        counts, total = await fetch_counts(broker, topic, [1, 0, 2], 100, 100, offsets={1: 4})
        assert counts == [0, 1, 0] and total == sizes[topic][0][0]

    asyncio.run(scenario())


@pytest.mark.parametrize("topic", ["c", "d"])
def test_a_consumer_with_tiny_limits_reads_everything_in_order(tmp_path: Path, topic: str) -> None:
    """max_bytes = partition_max_bytes = 1, as a consumer with minimal fetch sizes sends: one
    batch per fetch, and fetching from the next offset each time reads every batch."""

    async def scenario() -> None:
        broker, sizes = await topics_with_data(tmp_path)
        for index in range(3):
            offset, fetched = 0, 0
            for _ in range(10):  # bounded: 4 batches per partition
                counts, _total = await fetch_counts(broker, topic, [index], 1, 1, offsets={index: offset})
                if counts == [0]:
                    break
                assert counts == [1]
                offset, fetched = offset + 1, fetched + 1
            assert fetched == len(sizes[topic][index])

    asyncio.run(scenario())
