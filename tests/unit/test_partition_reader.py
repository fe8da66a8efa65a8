"""One partition's read (reads/partition_reader.py): the hosted replica's local log, the
isolation bound, KIP-74 sizing, the aborted transactions, the out-of-range answer only the
leader gives; and tiered spans resolved through the resolver registry (reads/resolver.py).
Fetch, the replica read service and ListOffsets are covered through their own tests."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

from broker.clock import ManualClock
from broker.protocol.batch import parse_header
from broker.protocol.errors import ErrorCode
from broker.reads.partition_reader import READ_COMMITTED, PartitionReader, ReadTarget, read_replica, within
from broker.reads.resolver import TieredSpan, batch_pieces
from broker.topics import Topic
from tests.unit.test_transactions import TOPIC_ID, classic, clock, handler_broker, run_txn_story

__all__ = ["clock"]  # the fixture
READ_UNCOMMITTED = 0


def offsets(read) -> list[int]:  # type: ignore[no-untyped-def]
    return [e.base_offset for e in read.entries]


def test_a_replica_read_is_bounded_by_its_isolation_level(tmp_path: Path, clock: ManualClock) -> None:
    partition = classic(tmp_path, clock)
    run_txn_story(partition)  # LSO 6, high watermark 8, producer 8's [2, 4) aborted by the marker at 5
    committed = read_replica(partition, 0, 1 << 20, READ_COMMITTED, first_whole=True)
    assert offsets(committed) == [0, 2, 4, 5] and committed.span is None
    assert (committed.high_watermark, committed.last_stable_offset, committed.log_start_offset) == (8, 6, 0)
    assert committed.aborted == [(8, 2, 5)] and committed.wait_key == partition.key
    uncommitted = read_replica(partition, 0, 1 << 20, READ_UNCOMMITTED, first_whole=True)
    assert offsets(uncommitted) == [0, 2, 4, 5, 6] and uncommitted.aborted is None
    assert read_replica(partition, 6, 1 << 20, READ_COMMITTED, first_whole=True).aborted == []  # nothing served


def test_kip74_the_first_batch_whole_then_nothing_past_max_bytes(tmp_path: Path, clock: ManualClock) -> None:
    partition = classic(tmp_path, clock)
    run_txn_story(partition)
    first = partition.log.read(0, 1, 8)[0].header.size
    assert offsets(read_replica(partition, 0, 1, READ_UNCOMMITTED, first_whole=True)) == [0]
    assert offsets(read_replica(partition, 0, 1, READ_UNCOMMITTED, first_whole=False)) == []
    assert offsets(read_replica(partition, 0, first, READ_UNCOMMITTED, first_whole=False)) == [0]
    entries = partition.log.read(0, 1 << 20, 8)
    assert [e.base_offset for e in within(entries, 1, first_whole=True)] == [0]  # a replica's answer, sized here
    assert within(entries, 1, first_whole=False) == []
    assert [e.base_offset for e in within(entries, 2 * first, first_whole=False)] == [0, 2]


def test_only_the_leader_answers_out_of_range_with_its_offsets(tmp_path: Path, clock: ManualClock) -> None:
    partition = classic(tmp_path, clock)
    run_txn_story(partition)
    reader = PartitionReader(handler_broker(partition))  # type: ignore[arg-type]
    topic = Topic("c", TOPIC_ID, 1, {}, partition.settings)
    beyond = reader.read(ReadTarget(topic, 0), 20, 1 << 20, READ_UNCOMMITTED, first_whole=True)
    assert beyond.error is not None and beyond.error.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert (beyond.high_watermark, beyond.last_stable_offset, beyond.log_start_offset) == (8, 6, 0)
    fenced = reader.read(
        ReadTarget(topic, 0, current_leader_epoch=partition.leader_epoch + 1), 0, 1 << 20, READ_UNCOMMITTED, True
    )
    assert fenced.error is not None and fenced.error.code == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert fenced.high_watermark == -1 and not fenced.found


class FakeTieredReader:
    """A segment holding the given batches; fails for offset 99."""

    def __init__(self, *batches: memoryview) -> None:
        self.batches = [(parse_header(b), b) for b in batches]

    async def read(self, topic_id: str, partition: int, segment: object, offset: int, max_bytes: int) -> list:  # type: ignore[type-arg]
        if offset == 99:
            raise OSError("the segment is damaged")
        return [(h, v) for h, v in self.batches if h.last_offset >= offset]


def span(offset: int, limit: int, first_whole: bool, upper: int | None) -> TieredSpan:
    return TieredSpan(str(TOPIC_ID), 0, SimpleNamespace(), offset, limit, first_whole, upper)  # type: ignore[arg-type]


def test_a_tiered_span_resolves_through_the_registry_cut_and_sized(tmp_path: Path, clock: ManualClock) -> None:
    partition = classic(tmp_path, clock)
    run_txn_story(partition)
    batches = [entry.data for entry in partition.log.read(0, 1 << 20, 8)]  # offsets 0, 2, 4, 5, 6
    sources = SimpleNamespace(tiered_reader=FakeTieredReader(*batches), wal_reader=None)
    size = parse_header(batches[0]).size
    spans = [
        span(0, 1 << 20, True, None),
        span(0, 1 << 20, True, 2),
        span(0, size - 1, False, None),
        span(99, 1, True, None),
    ]
    whole, cut, too_small, failed = asyncio.run(batch_pieces(sources, spans))  # type: ignore[arg-type]
    assert whole == batches and cut == batches[:1]  # read_committed: below the last stable offset only
    assert too_small == []  # not the response's first batch: nothing past max_bytes
    assert isinstance(failed, OSError)  # this span only
