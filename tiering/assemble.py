"""Assemble one planned range into a Kafka log segment in the object store: the work of one
tiering task, runnable anywhere that reaches the store (a Spark executor, a test).

The batches' bytes are read with coalesced ranged GETs (batches of one WAL object that lie
close together share one request, as on the fetch path); each batch is the committed 61-byte
header from the plan followed by the object's bytes after the first 61, so offsets, leader
epochs and LogAppendTime stamps are exactly what a fetch serves. Every batch is checked
(batchLength against the coordinates, CRC32C against the header) before it is written. The
plan's aborted transactions become the segment's `.txnindex` (Kafka's layout), written only
when there are any, as KIP-405's optional transaction index; the manifest says which.

Files are written under the segment's stem, the result manifest last: until the manifest
exists the segment does not exist for anyone, and a re-run writes the same keys with the same
bytes (the segment id comes from the plan), so the task is idempotent.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

import crc32c

from broker.log.txn_index import AbortedTxn, TxnIndexCorruptError, decode_entries, encode_entries
from broker.objectstore.store import ObjectReader, ObjectStore
from broker.protocol.batch import BATCH_HEADER_SIZE, LOG_OVERHEAD, OFFSET_ATTRIBUTES, parse_header
from tiering.plan import MANIFEST_VERSION, FileInfo, PlannedBatch, RangePlan, SegmentManifest, encode_manifest
from tiering.segment import (
    ProducerSnapshotEntry,
    encode_leader_epoch_checkpoint,
    encode_producer_snapshot,
    index_batches,
)
from walfiles.format import coalesce
from walfiles.keys import SegmentFile, format_tiered_segment_key, wal_prefix

DEFAULT_MAX_GAP_BYTES = 1 << 20
DEFAULT_MAX_GET_BYTES = 16 << 20


class AssemblyError(Exception):
    """The bytes at a batch's coordinates are not that batch: the range cannot be tiered."""


async def read_batches(
    store: ObjectReader,
    key_of: Callable[[str], str],
    batches: list[PlannedBatch],
    max_gap_bytes: int = DEFAULT_MAX_GAP_BYTES,
    max_get_bytes: int = DEFAULT_MAX_GET_BYTES,
) -> list[bytes]:
    """Each planned batch as complete Kafka batch bytes, in plan order."""
    by_object: dict[str, list[int]] = {}
    for i, planned in enumerate(batches):
        if planned.inline is None:
            assert planned.object_id is not None
            by_object.setdefault(planned.object_id, []).append(i)
    bodies: dict[int, memoryview] = {}

    async def read_object(object_id: str, members: list[int]) -> None:
        ranges = [(batches[i].offset, batches[i].offset + batches[i].length) for i in members]
        groups = coalesce(ranges, max_gap_bytes, max_get_bytes)
        datas = await asyncio.gather(*(store.get(key_of(object_id), g.start, g.end) for g in groups))
        for group, data in zip(groups, datas, strict=True):
            view = memoryview(data)
            for m in group.members:
                start, end = ranges[m]
                bodies[members[m]] = view[start - group.start : end - group.start]

    await asyncio.gather(*(read_object(o, members) for o, members in by_object.items()))
    return [_batch(planned, bodies.get(i)) for i, planned in enumerate(batches)]


def _batch(planned: PlannedBatch, body: memoryview | None) -> bytes:
    if planned.inline is not None:
        return planned.inline
    assert body is not None
    where = f"WAL object {planned.object_id} at {planned.offset}"
    if len(body) != planned.length or len(body) < BATCH_HEADER_SIZE:
        raise AssemblyError(f"{where}: {len(body)} bytes, expected {planned.length} (object shorter than planned)")
    header = parse_header(planned.header)
    if int.from_bytes(body[8:12], "big") + LOG_OVERHEAD != planned.length or header.size != planned.length:
        raise AssemblyError(f"{where}: batchLength does not match the planned {planned.length} bytes")
    crc = crc32c.crc32c(body[BATCH_HEADER_SIZE:], crc32c.crc32c(planned.header[OFFSET_ATTRIBUTES:]))
    if crc != header.crc:
        raise AssemblyError(f"{where}: CRC32C mismatch for the batch at offset {header.base_offset}")
    return planned.header + bytes(body[BATCH_HEADER_SIZE:])


def _txn_index(planned: RangePlan) -> bytes:
    """The `.txnindex` of the range, checked as a reader will check it (markers in the range,
    in order)."""
    data = encode_entries(
        [AbortedTxn(t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset) for t in planned.aborted_txns]
    )
    try:
        decode_entries(data, planned.base_offset, planned.next_offset)
    except TxnIndexCorruptError as exc:
        raise AssemblyError(f"aborted transactions of the plan: {exc}") from None
    return data


async def assemble_range(
    store: ObjectStore,
    cluster_id: str,
    plan_id: str,
    planned: RangePlan,
    key_prefix: str = "",
    max_gap_bytes: int = DEFAULT_MAX_GAP_BYTES,
    max_get_bytes: int = DEFAULT_MAX_GET_BYTES,
) -> SegmentManifest:
    """Read, check and write one range's segment; returns the manifest it wrote."""
    wal = wal_prefix(key_prefix, cluster_id)
    batches = await read_batches(store, lambda o: wal + o, planned.batches, max_gap_bytes, max_get_bytes)
    indexes = index_batches(batches, planned.base_offset, planned.index_interval_bytes)
    if indexes.next_offset != planned.next_offset:
        raise AssemblyError(f"batches end at {indexes.next_offset}, the plan says {planned.next_offset}")
    files = {
        SegmentFile.LOG: b"".join(batches),
        SegmentFile.OFFSET_INDEX: bytes(indexes.offset_index),
        SegmentFile.TIME_INDEX: bytes(indexes.time_index),
        SegmentFile.PRODUCER_SNAPSHOT: encode_producer_snapshot(
            [
                ProducerSnapshotEntry(
                    p.producer_id, p.epoch, p.last_sequence, p.last_offset, p.offset_delta, p.timestamp_ms
                )
                for p in planned.producers
            ]
        ),
        SegmentFile.LEADER_EPOCH_CHECKPOINT: encode_leader_epoch_checkpoint(planned.epochs),
    }
    if planned.aborted_txns:
        files[SegmentFile.TXN_INDEX] = _txn_index(planned)

    def key(file: SegmentFile) -> str:
        return format_tiered_segment_key(
            key_prefix,
            cluster_id,
            uuid.UUID(planned.topic_id),
            planned.partition,
            planned.base_offset,
            uuid.UUID(planned.segment_id),
            file,
        )

    await asyncio.gather(*(store.put(key(f), data) for f, data in files.items()))
    manifest = SegmentManifest(
        version=MANIFEST_VERSION,
        plan_id=plan_id,
        segment_id=planned.segment_id,
        topic_id=planned.topic_id,
        partition=planned.partition,
        base_offset=planned.base_offset,
        end_offset=planned.next_offset - 1,
        size_bytes=indexes.size,
        max_timestamp_ms=indexes.max_timestamp,
        leader_epochs=planned.epochs,
        files={f.value: FileInfo(len(data), crc32c.crc32c(data)) for f, data in files.items()},
        txn_index_empty=SegmentFile.TXN_INDEX not in files,
    )
    await store.put(key(SegmentFile.MANIFEST), encode_manifest(manifest))
    return manifest
