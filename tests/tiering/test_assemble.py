"""The segment assembler (tiering/assemble.py) against the independent Kafka-format reader:
batches scattered over WAL objects become one Kafka segment whose files a Kafka reader
accepts, byte for byte what a fetch would have served."""

from __future__ import annotations

import asyncio
import struct
import uuid

import crc32c
import msgspec
import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from broker.clock import SystemClock
from broker.log.markers import RemoteSegmentEvent, RemoteSegmentState, encode_marker
from broker.log.txn_index import AbortedTxn, decode_entries
from broker.objectstore import MemoryObjectStore
from tests.tiering.kafka_segment_reader import check_segment, read_leader_epoch_checkpoint, read_producer_snapshot
from tiering.assemble import AssemblyError, assemble_range
from tiering.plan import (
    FileInfo,
    Plan,
    PlanFormatError,
    PlannedAbortedTxn,
    PlannedBatch,
    ProducerState,
    RangePlan,
    decode_manifest,
    decode_plan,
    encode_plan,
    segment_id_for,
)
from tiering.segment import lookup_position, split_log
from walfiles.keys import SegmentFile, format_tiered_segment_key, wal_prefix

CLUSTER = "c1"
TOPIC_ID = str(uuid.UUID(int=7))
BASE = 1000


def _batch(pid: int, seq: int, count: int, ts: int) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, 0, pid, 0, seq, 1 << 20)
    for i in range(count):
        builder.append(i, timestamp=ts + i, key=b"k%d" % i, value=b"v" * 200, headers=[])
    return bytes(builder.build())


def _patched(batch: bytes, base: int, epoch: int) -> bytes:
    buf = bytearray(batch)
    struct.pack_into(">q", buf, 0, base)
    struct.pack_into(">i", buf, 12, epoch)
    return bytes(buf)


def _scenario(store: MemoryObjectStore, batches_per_object: int = 3, objects: int = 4) -> tuple[RangePlan, list[bytes]]:
    """Batches spread over `objects` WAL objects with padding between them, one inline marker
    in the middle, two leader epochs; returns the plan and the batches a fetch would serve."""
    planned: list[PlannedBatch] = []
    served: list[bytes] = []
    offset = BASE
    seq = 0
    for o in range(objects):
        object_id = f"{o:013d}-0000000001-0000000000"
        body = bytearray(b"\xee" * 17)
        for _ in range(batches_per_object):
            raw = _batch(5, seq, 3, 1_700_000_000_000 + offset)
            epoch = 1 if offset < BASE + 10 else 2
            head = _patched(raw, offset, epoch)[:61]
            planned.append(PlannedBatch(head, object_id, len(body), len(raw)))
            served.append(head + raw[61:])
            last_data_offset = offset + 2
            body += raw + b"\xee" * 5
            offset += 3
            seq += 3
        asyncio.run(store.put(wal_prefix("", CLUSTER) + object_id, bytes(body)))
        if o == 1:
            event = RemoteSegmentEvent(1, RemoteSegmentState.COPY_SEGMENT_STARTED, "x", 0, 1, 1)
            marker = _patched(encode_marker(event, 1_700_000_000_000), offset, 2)
            planned.append(PlannedBatch(marker[:61], inline=marker))
            served.append(marker)
            offset += 1
    plan = RangePlan(
        topic="t",
        topic_id=TOPIC_ID,
        partition=3,
        base_offset=BASE,
        next_offset=offset,
        leader_epoch=2,
        segment_id=segment_id_for(TOPIC_ID, 3, BASE, 2, "p1"),
        index_interval_bytes=512,
        epochs=[(0, 0), (1, 500), (2, BASE + 10)],
        producers=[ProducerState(5, 0, seq - 1, last_data_offset, 2, 0)],
        batches=planned,
    )
    return plan, served


def _files(store: MemoryObjectStore, plan: RangePlan) -> dict[SegmentFile, bytes]:
    def key(f: SegmentFile) -> str:
        return format_tiered_segment_key(
            "", CLUSTER, uuid.UUID(TOPIC_ID), plan.partition, plan.base_offset, uuid.UUID(plan.segment_id), f
        )

    return {f: asyncio.run(store.get(key(f))) for f in SegmentFile if f is not SegmentFile.TXN_INDEX}


def test_assembled_segment_is_a_kafka_segment_with_the_served_bytes() -> None:
    store = MemoryObjectStore(clock=SystemClock())
    plan, served = _scenario(store)
    manifest = asyncio.run(assemble_range(store, CLUSTER, "p1", plan))
    files = _files(store, plan)
    assert files[SegmentFile.LOG] == b"".join(served)
    batches = check_segment(
        files[SegmentFile.LOG],
        files[SegmentFile.OFFSET_INDEX],
        files[SegmentFile.TIME_INDEX],
        files[SegmentFile.PRODUCER_SNAPSHOT],
        files[SegmentFile.LEADER_EPOCH_CHECKPOINT],
        BASE,
    )
    assert len(batches) == len(served)
    assert len(files[SegmentFile.OFFSET_INDEX]) > 0, "512-byte interval: several index entries"
    assert read_leader_epoch_checkpoint(files[SegmentFile.LEADER_EPOCH_CHECKPOINT]) == [
        (0, 0),
        (1, 500),
        (2, BASE + 10),
    ]
    assert [p.producer_id for p in read_producer_snapshot(files[SegmentFile.PRODUCER_SNAPSHOT])] == [5]
    stored = decode_manifest(files[SegmentFile.MANIFEST])
    assert stored == manifest
    assert (manifest.base_offset, manifest.end_offset) == (BASE, plan.next_offset - 1)
    assert manifest.size_bytes == len(files[SegmentFile.LOG])


def test_rerun_writes_the_same_bytes() -> None:
    store = MemoryObjectStore(clock=SystemClock())
    plan, _ = _scenario(store)
    asyncio.run(assemble_range(store, CLUSTER, "p1", plan))
    first = _files(store, plan)
    asyncio.run(assemble_range(store, CLUSTER, "p1", plan))
    assert _files(store, plan) == first


def test_wrong_coordinates_fail_and_write_no_manifest() -> None:
    store = MemoryObjectStore(clock=SystemClock())
    plan, _ = _scenario(store)
    bad = plan.batches[4]
    batches = list(plan.batches)
    batches[4] = PlannedBatch(bad.header, bad.object_id, bad.offset + 1, bad.length)
    broken = msgspec.structs.replace(plan, batches=batches)
    with pytest.raises(AssemblyError):
        asyncio.run(assemble_range(store, CLUSTER, "p1", broken))
    keys = asyncio.run(_keys(store))
    assert not any(k.endswith(".manifest") for k in keys)


async def _keys(store: MemoryObjectStore) -> list[str]:
    return [info.key async for info in store.list("")]


def test_coalesced_reads_use_one_get_per_object() -> None:
    gets: list[str] = []
    store = MemoryObjectStore(clock=SystemClock(), on_request=lambda op, outcome, s, n: gets.append(op))
    plan, _ = _scenario(store, batches_per_object=5, objects=3)
    gets.clear()
    asyncio.run(assemble_range(store, CLUSTER, "p1", plan))
    assert gets.count("get") == 3


def test_index_lookup_finds_every_batch() -> None:
    store = MemoryObjectStore(clock=SystemClock())
    plan, served = _scenario(store)
    asyncio.run(assemble_range(store, CLUSTER, "p1", plan))
    files = _files(store, plan)
    batches = split_log(files[SegmentFile.LOG])
    for position, header in batches:
        for offset in (header.base_offset, header.last_offset):
            start = lookup_position(files[SegmentFile.OFFSET_INDEX], BASE, offset)
            assert start <= position
            found = next(h for p, h in split_log(files[SegmentFile.LOG], start) if h.last_offset >= offset)
            assert found.base_offset == header.base_offset


def test_aborted_transactions_become_the_segments_txnindex() -> None:
    """Kafka's .txnindex layout (34-byte entries), listed in the manifest with its size and
    CRC32C; without aborted transactions there is no file and the manifest says so."""
    store = MemoryObjectStore(clock=SystemClock())
    plan, _ = _scenario(store)
    aborts = [PlannedAbortedTxn(5, BASE, BASE + 8, BASE + 9), PlannedAbortedTxn(6, BASE + 3, BASE + 20, BASE + 21)]
    manifest = asyncio.run(assemble_range(store, CLUSTER, "p1", msgspec.structs.replace(plan, aborted_txns=aborts)))
    key = format_tiered_segment_key(
        "", CLUSTER, uuid.UUID(TOPIC_ID), 3, BASE, uuid.UUID(plan.segment_id), SegmentFile.TXN_INDEX
    )
    data = asyncio.run(store.get(key))
    assert data == struct.pack(">hqqqq", 0, 5, BASE, BASE + 8, BASE + 9) + struct.pack(
        ">hqqqq", 0, 6, BASE + 3, BASE + 20, BASE + 21
    )
    assert decode_entries(data, BASE, plan.next_offset) == [AbortedTxn(*msgspec.structs.astuple(t)) for t in aborts]
    assert not manifest.txn_index_empty
    assert manifest.files[".txnindex"] == FileInfo(len(data), crc32c.crc32c(data))

    plain = MemoryObjectStore(clock=SystemClock())
    plan, _ = _scenario(plain)
    manifest = asyncio.run(assemble_range(plain, CLUSTER, "p1", plan))
    assert manifest.txn_index_empty and ".txnindex" not in manifest.files
    assert not any(k.endswith(".txnindex") for k in asyncio.run(_keys(plain)))


def test_an_abort_outside_the_range_fails_the_segment() -> None:
    store = MemoryObjectStore(clock=SystemClock())
    plan, _ = _scenario(store)
    outside = [PlannedAbortedTxn(5, BASE, plan.next_offset, plan.next_offset + 1)]  # its marker is past the range
    with pytest.raises(AssemblyError, match="outside the segment"):
        asyncio.run(assemble_range(store, CLUSTER, "p1", msgspec.structs.replace(plan, aborted_txns=outside)))


def test_a_version_1_plan_reads_with_no_aborted_transactions() -> None:
    """A plan written before the upgrade (no `aborted_txns`) still runs; a newer one is refused."""
    store = MemoryObjectStore(clock=SystemClock())
    plan, _ = _scenario(store)
    old = msgspec.msgpack.decode(encode_plan(Plan(1, "p1", CLUSTER, 1, 0, [plan]))[4:])
    del old["ranges"][0]["aborted_txns"]
    decoded = decode_plan(b"SHTP" + msgspec.msgpack.encode(old))
    assert decoded.version == 1 and decoded.ranges[0].aborted_txns == []
    with pytest.raises(PlanFormatError, match="version 3"):
        decode_plan(encode_plan(Plan(3, "p1", CLUSTER, 1, 0, [plan])))
