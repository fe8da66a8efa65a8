"""Reads from tiered segments (broker/tiering/reader.py): a consumer reading a segment on,
fetch by fetch, costs one GET per block (plus the index), whatever its fetch size, and gets
whole batches from the one holding its offset (regression: the first version GET each
fetch's range from the index position, re-reading overlaps: 3,316 GETs per GiB in
docs/benchmarks.md against 708 from WAL objects)."""

from __future__ import annotations

import asyncio

import pytest

from broker.clock import SystemClock
from broker.wal.cache import ObjectCache
from broker.log.markers import RemoteSegmentState
from broker.log.remote_segments import RemoteSegment
from broker.objectstore import MemoryObjectStore
from broker.tiering import reader as reader_module
from broker.tiering.reader import TieredReader
from tests.tiering.test_assemble import BASE, CLUSTER, TOPIC_ID, _scenario
from tiering.assemble import assemble_range


def _segment(monkeypatch: pytest.MonkeyPatch) -> tuple[MemoryObjectStore, RemoteSegment, list[bytes], list[str]]:
    gets: list[str] = []
    store = MemoryObjectStore(clock=SystemClock(), on_request=lambda op, outcome, s, n: gets.append(op))
    plan, served = _scenario(store, batches_per_object=10, objects=6)
    manifest = asyncio.run(assemble_range(store, CLUSTER, "p1", plan))
    segment = RemoteSegment(
        plan.segment_id,
        BASE,
        plan.next_offset - 1,
        plan.leader_epoch,
        RemoteSegmentState.COPY_SEGMENT_FINISHED,
        manifest.size_bytes,
        manifest.max_timestamp_ms,
        "p1",
        manifest.files[".index"].size,
        manifest.files[".timeindex"].size,
    )
    gets.clear()
    return store, segment, served, gets


def test_reading_on_costs_one_get_per_block(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reader_module, "BLOCK_BYTES", 4096)
    monkeypatch.setattr(reader_module, "MIN_READ_BYTES", 512)
    store, segment, served, gets = _segment(monkeypatch)
    reader = TieredReader(store, lambda: CLUSTER, ObjectCache(1 << 20))
    offset, got = BASE, []
    while offset <= segment.end_offset:
        batches = asyncio.run(reader.read(TOPIC_ID, 3, segment, offset, 700))
        assert batches and batches[0][0].base_offset <= offset <= batches[0][0].last_offset
        got += [bytes(view) for _header, view in batches]
        offset = batches[-1][0].last_offset + 1
    assert got == served
    blocks = -(-segment.size_bytes // 4096)
    assert gets.count("get") == blocks + 1, f"{gets.count('get')} GETs for {blocks} blocks and the index"


def test_read_from_the_middle_starts_at_the_batch_holding_the_offset(monkeypatch: pytest.MonkeyPatch) -> None:
    store, segment, served, _gets = _segment(monkeypatch)
    reader = TieredReader(store, lambda: CLUSTER, ObjectCache(1 << 30))
    middle = BASE + 31  # inside a 3-record batch
    batches = asyncio.run(reader.read(TOPIC_ID, 3, segment, middle, 1))
    assert len(batches) == 1 and batches[0][0].base_offset <= middle <= batches[0][0].last_offset


def test_without_a_cache_a_read_gets_just_its_range(monkeypatch: pytest.MonkeyPatch) -> None:
    store, segment, _served, gets = _segment(monkeypatch)
    reader = TieredReader(store, lambda: CLUSTER, ObjectCache(0))
    asyncio.run(reader.read(TOPIC_ID, 3, segment, BASE, 1))
    assert gets.count("get") == 2  # the index, and one read of at least MIN_READ_BYTES from the start
