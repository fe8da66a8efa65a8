"""Which ranges of a led partition are ready to offload, and the plan of each (pure reads of
the partition: its sealed local segments, entries, epochs, producer snapshots and
aborted-transaction index).

A range is a sealed local segment, or the part of one above what is already tiered (a new
leader's segment boundaries need not match the old leader's), entirely below the last
stable offset: as Kafka's RemoteLogManager ("copy segments only till the
last-stable-offset"), tiered storage holds only decided data, and a transaction still open
keeps its first batch in the local log. It is ready when it is older than
`local.retention.ms` (by its largest timestamp) or the local log is larger than
`local.retention.bytes`, oldest first, so tiered segments stay contiguous. Nothing is
planned while a planned segment is still unresolved.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.log import EntryKind
from broker.log.coordinates import decode_ref
from broker.log.markers import RemoteSegmentState
from broker.partition import Partition
from broker.producers import snapshot as snapshots
from tiering.plan import PlannedAbortedTxn, PlannedBatch, ProducerState, RangePlan, segment_id_for


@dataclass(frozen=True, slots=True)
class ReadyRange:
    base_offset: int
    next_offset: int
    batch_bytes: int


def ready_ranges(
    partition: Partition, now_ms: int, max_ranges: int, max_bytes: int, even_if_planned: bool = False
) -> list[ReadyRange]:
    """The ranges to offload now, oldest first, at most `max_ranges` and about `max_bytes`;
    none while a planned segment is unresolved, unless `even_if_planned` (the backlog)."""
    remote = partition.remote_segments
    if remote.in_state(RemoteSegmentState.COPY_SEGMENT_STARTED) and not even_if_planned:
        return []
    settings = partition.settings
    log = partition.log
    floor = remote.covered_end(log.log_start_offset)  # tiered without a gap from the local start
    local_bytes = log.size_bytes
    chosen: list[ReadyRange] = []
    total = 0
    for seg in log.sealed_segments():
        if seg.next_offset <= floor:
            continue
        if (
            seg.next_offset > partition.last_stable_offset
            or len(chosen) >= max_ranges
            or (chosen and total >= max_bytes)
        ):
            break
        old = settings.local_retention_ms >= 0 and now_ms - seg.largest_timestamp > settings.local_retention_ms
        large = settings.local_retention_bytes >= 0 and local_bytes > settings.local_retention_bytes
        if not (old or large):
            break
        chosen.append(ReadyRange(max(seg.base_offset, floor), seg.next_offset, seg.batch_bytes))
        total += seg.batch_bytes
        local_bytes -= seg.batch_bytes
    return chosen


def backlog_bytes(partition: Partition, now_ms: int) -> int:
    """Batch bytes of the ranges that are ready but not tiered (the backlog a stalled job leaves)."""
    return sum(r.batch_bytes for r in ready_ranges(partition, now_ms, 1 << 30, 1 << 62, even_if_planned=True))


def plan_range(partition: Partition, ready: ReadyRange, plan_id: str) -> RangePlan:
    """The plan of one ready range: every batch's committed header and location, the epoch
    lineage, the producer state at the range end and the aborted transactions whose marker is
    in the range (the segment's `.txnindex`: local retention deletes the local one)."""
    batches: list[PlannedBatch] = []
    headers = []
    for entry in partition.log.iter_entries(ready.base_offset):
        if entry.base_offset >= ready.next_offset:
            break
        head = bytes(entry.data[:61])
        if entry.kind == EntryKind.COORDINATES:
            ref = decode_ref(entry.payload)
            batches.append(PlannedBatch(head, ref.object_id, ref.offset, ref.length))
        else:
            batches.append(PlannedBatch(head, inline=bytes(entry.data)))
        headers.append(entry.header)
    # DeleteRecords may have left the local log starting inside a batch: the segment starts
    # with that batch (a segment is whole batches), and reads of it start at the log start.
    base_offset = min(headers[0].base_offset, ready.base_offset) if headers else ready.base_offset
    epochs = [(e.epoch, e.start_offset) for e in partition.epochs.entries() if e.start_offset < ready.next_offset]
    topic_id = str(partition.topic_id)
    return RangePlan(
        topic=partition.topic,
        topic_id=topic_id,
        partition=partition.index,
        base_offset=base_offset,
        next_offset=ready.next_offset,
        leader_epoch=partition.leader_epoch,
        segment_id=segment_id_for(topic_id, partition.index, base_offset, partition.leader_epoch, plan_id),
        index_interval_bytes=partition.settings.log.index_interval_bytes,
        epochs=epochs,
        producers=producer_state_at(partition, ready.next_offset),
        batches=batches,
        aborted_txns=[
            PlannedAbortedTxn(t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset)
            for t in partition.txn_index.markers_in(base_offset, ready.next_offset)
        ],
    )


def producer_state_at(partition: Partition, end_offset: int) -> list[ProducerState]:
    """Each producer's last batch below `end_offset`: the newest producer snapshot at or
    below it (read only), then the entry headers after it."""
    state: dict[int, ProducerState] = {}
    start = partition.log.log_start_offset
    for offset, path in reversed(snapshots.list_snapshots(partition.directory)):
        if offset > end_offset:
            continue
        try:
            loaded = snapshots.read_snapshot(path)
        except snapshots.SnapshotError:
            continue
        for p in loaded.producers:
            if p.batches:
                b = p.batches[-1]
                state[p.producer_id] = ProducerState(
                    p.producer_id,
                    p.producer_epoch,
                    b.last_seq,
                    b.last_offset,
                    b.last_offset - b.first_offset,
                    b.timestamp_ms,
                )
        start = max(offset, start)
        break
    for entry in partition.log.iter_entries(start):
        if entry.base_offset >= end_offset:
            break
        h = entry.header
        if h.producer_id >= 0 and not h.is_control:
            state[h.producer_id] = ProducerState(
                h.producer_id, h.producer_epoch, h.last_sequence, h.last_offset, h.last_offset_delta, h.max_timestamp
            )
    return sorted(state.values(), key=lambda p: p.producer_id)
