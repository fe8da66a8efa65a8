"""Tiered segments carry their aborted-transaction index (KIP-405's TRANSACTION_INDEX): the
planner puts the aborts whose marker lies in a range into its plan, the assembler writes them
as the segment's `.txnindex`, the commit records its size, and a read_committed Fetch below
the local log answers them from the tiered indexes once local retention deleted the local
ones: on the partition's own broker and through a replica read for a broker without one.

Regression: before, the local `.txnindex` went with its local segment, and a read_committed
Fetch of the tiered range answered no aborted transactions, so consumers delivered aborted
records (tests/integration/test_tiering.py shows it with real clients).
"""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path
from types import SimpleNamespace

from broker.clock import ManualClock, SystemClock
from broker.wal.cache import ObjectCache
from broker.handlers import fetch
from broker.log.markers import EVENT_VERSION, RemoteSegmentEvent
from broker.log.txn_index import AbortedTxn
from broker.objectstore import MemoryObjectStore
from broker.tiering.planner import ReadyRange, plan_range
from broker.tiering.reader import TieredReader
from broker.partition import Partition
from broker.protocol.batch import parse_header
from broker.routing.messages import ROUTING_VERSION, ReadPartition, ReplicaReadRequest
from broker.reads.read_service import ReplicaReadService
from broker.reads.remote import RemoteRead
from broker.topics import Topic
from broker.waiters import FetchWaiters
from tests.unit.test_partition_tiering import FINISHED, SMALL_TIERED, STARTED, lead, open_partition
from tests.unit.test_transactions import fetch_request, handler_broker, txn_batch
from tests.unit.test_wal_writer import TOPIC_ID
from tiering.assemble import assemble_range
from tiering.plan import PlannedAbortedTxn
from walfiles.keys import SegmentFile

CLUSTER = "c1"
ABORTED = AbortedTxn(8, 2, 5, 6)  # producer 8's transaction [2, 3], its ABORT marker at 5


def transactional_partition(directory: Path, clock: ManualClock) -> Partition:
    """One batch per local segment: producer 7 commits [0, 1] (marker at 4), producer 8 aborts
    [2, 3] (marker at 5), then plain batches 6..9."""
    partition = lead(open_partition(directory, clock, **SMALL_TIERED))
    partition.topic_id = str(TOPIC_ID)
    partition.append_records(txn_batch(0, producer_id=7), acks=-1)
    partition.append_records(txn_batch(0, producer_id=8, tag=b"x"), acks=-1)
    partition.append_txn_marker(7, 0, 0, commit=True)
    partition.append_txn_marker(8, 0, 0, commit=False)
    partition.append_records(txn_batch(0, producer_id=9, transactional=False), acks=-1)
    partition.append_records(txn_batch(2, producer_id=9, transactional=False), acks=-1)
    assert partition.txn_index.all_entries() == [ABORTED]
    return partition


def tier(partition: Partition, store: MemoryObjectStore, base: int, next_offset: int) -> None:
    """Plan, assemble and commit one range, as the offload service does."""
    plan_id = f"p{base}"
    planned = plan_range(partition, ReadyRange(base, next_offset, 0), plan_id)
    manifest = asyncio.run(assemble_range(store, CLUSTER, plan_id, planned))
    files = manifest.files
    for state in (STARTED, FINISHED):
        partition.append_marker(
            RemoteSegmentEvent(
                EVENT_VERSION,
                state,
                planned.segment_id,
                base,
                next_offset - 1,
                planned.leader_epoch,
                manifest.size_bytes,
                manifest.max_timestamp_ms,
                plan_id,
                files[SegmentFile.OFFSET_INDEX.value].size,
                files[SegmentFile.TIME_INDEX.value].size,
                0 if manifest.txn_index_empty else files[SegmentFile.TXN_INDEX.value].size,
            )
        )


def test_the_plan_holds_the_aborts_whose_marker_is_in_the_range(tmp_path: Path) -> None:
    partition = transactional_partition(tmp_path, ManualClock(1_800_000_000_000))
    planned = plan_range(partition, ReadyRange(0, 6, 0), "p")
    assert planned.aborted_txns == [PlannedAbortedTxn(8, 2, 5, 6)]
    # the transaction's records without its marker: the segment holding the marker lists it
    assert plan_range(partition, ReadyRange(0, 5, 0), "p").aborted_txns == []
    assert plan_range(partition, ReadyRange(5, 6, 0), "p").aborted_txns == [PlannedAbortedTxn(8, 2, 5, 6)]


def tiered_below_the_local_log(tmp_path: Path) -> tuple[Partition, MemoryObjectStore]:
    """The partition with [0, 4) (the transactions' records) and [4, 6) (their markers)
    tiered as two segments and dropped locally."""
    clock = ManualClock(1_800_000_000_000)
    partition = transactional_partition(tmp_path, clock)
    store = MemoryObjectStore(clock=SystemClock())
    tier(partition, store, 0, 4)
    tier(partition, store, 4, 6)
    assert [s.txn_index_bytes for s in partition.remote_segments.readable] == [0, 34]
    clock.advance(10_000)
    partition.log.enforce_retention(clock.now_ms(), partition.remote_retention())
    assert partition.log.log_start_offset >= 6
    assert partition.aborted_transactions(0, 6) == [], "the local index went with the local segments"
    return partition, store


def served(answer) -> list[int]:
    data, pos, offsets = bytes(answer.records), 0, []
    while pos < len(data):
        header = parse_header(data[pos:])
        offsets.append(header.base_offset)
        pos += struct.unpack_from(">i", data, pos + 8)[0] + 12
    return offsets


def test_read_committed_below_the_local_log_names_the_aborted_transactions(tmp_path: Path) -> None:
    partition, store = tiered_below_the_local_log(tmp_path)
    txn_index_gets: list[str] = []
    get = store.get

    async def counting_get(key: str, start: int | None = None, end: int | None = None) -> bytes:
        if key.endswith(SegmentFile.TXN_INDEX.value):
            txn_index_gets.append(key)
        return await get(key, start, end)

    store.get = counting_get  # type: ignore[method-assign]
    broker = handler_broker(partition)
    broker.tiered_reader = TieredReader(store, lambda: CLUSTER, ObjectCache(1 << 20))
    header = SimpleNamespace(api_version=12, peer="p", client_id="c", forwarded=False)

    def fetch_at(offset: int, isolation_level: int):
        response = asyncio.run(fetch.handle(broker, header, fetch_request(offset, isolation_level)))
        [answer] = response.responses[0].partitions
        return answer

    answer = fetch_at(0, 1)  # the first segment: the abort's marker is in the next one
    assert served(answer) == [0, 2]
    assert [(a.producer_id, a.first_offset) for a in answer.aborted_transactions] == [(8, 2)]
    assert len(txn_index_gets) == 1, "the markers' segment's .txnindex only: the manifest says the other has none"
    answer = fetch_at(0, 1)
    assert [(a.producer_id, a.first_offset) for a in answer.aborted_transactions] == [(8, 2)]
    assert len(txn_index_gets) == 1, "read once, then from the object cache"
    answer = fetch_at(4, 1)  # the markers' segment
    assert served(answer) == [4, 5] and [(a.producer_id, a.first_offset) for a in answer.aborted_transactions] == [
        (8, 2)
    ]
    assert fetch_at(0, 0).aborted_transactions is None  # read_uncommitted: unchanged


def test_a_replica_read_of_a_tiered_range_carries_the_aborted_transactions(tmp_path: Path) -> None:
    partition, store = tiered_below_the_local_log(tmp_path)
    reader = TieredReader(store, lambda: CLUSTER, ObjectCache(1 << 20))
    topic = Topic("c", TOPIC_ID, 1, {}, partition.settings)
    service = ReplicaReadService(
        SimpleNamespace(by_id=lambda topic_id: topic),  # type: ignore[arg-type]
        SimpleNamespace(get=lambda name, index: partition),  # type: ignore[arg-type]
        FetchWaiters(),
        reader,
    )
    wanted = ReadPartition(str(TOPIC_ID), 0, 0, 1 << 20, 1)
    [result] = asyncio.run(service.handle(ReplicaReadRequest(ROUTING_VERSION, 5_000, [wanted]))).partitions
    read = RemoteRead(result)  # answered at once (a tiered answer does not long-poll)
    assert read.tiered is not None and read.last_stable_offset == partition.last_stable_offset
    assert read.aborted == [(8, 2, 5)]
    # the asking broker (no replica) reads the segment itself and serves the aborts with it
    broker = handler_broker(partition)
    broker.view = SimpleNamespace(partitions={})
    broker.tiered_reader = reader
    topics, _total, _error, _keys, found = fetch._read_all(broker, fetch_request(0, 1), {("c", 0): read})
    asyncio.run(fetch._resolve(broker, found))
    [answer] = topics[0].partitions
    assert served(answer) == [0, 2]
    assert [(a.producer_id, a.first_offset) for a in answer.aborted_transactions] == [(8, 2)]
