"""OffsetForLeaderEpoch below the local log: the epoch history outlives the local segments
that tiering lets local retention drop, so the leader still says where an old epoch ends
(KIP-320 consumers validate positions in tiered ranges); the partition's log start offset
(ListOffsets EARLIEST) is the tiered start while the local log (EARLIEST_LOCAL) starts later."""

from __future__ import annotations

from pathlib import Path

from broker.clock import ManualClock
from broker.log.markers import EVENT_VERSION, RemoteSegmentEvent, RemoteSegmentState
from broker.metadata.records import PartitionStateRecord
from tests.unit.test_partition import CLOCK_START, batch, open_partition


def test_epoch_ends_are_answered_for_tiered_ranges(tmp_path: Path) -> None:
    clock = ManualClock(CLOCK_START)
    partition = open_partition(
        tmp_path / "t-0", clock, **{"remote.storage.enable": "true", "segment.bytes": "300", "local.retention.ms": "0"}
    )
    for seq in range(0, 8, 2):  # epoch 0: offsets 0..7
        partition.append_records(batch(seq), acks=1)
    partition.make_leader(0, PartitionStateRecord(1, [0], 0, 1, [0]), 2)  # epoch 1 from offset 8
    for seq in range(8, 16, 2):
        partition.append_records(batch(seq), acks=1)
    end = partition.log.segment_base_offsets[-1]
    assert end > 8, "several local segments, epoch 1 among the sealed ones"
    finished = RemoteSegmentEvent(EVENT_VERSION, RemoteSegmentState.COPY_SEGMENT_FINISHED, "s", 0, end - 1, 1, 1, 1)
    partition.append_marker(finished)
    clock.advance(10_000)
    assert partition.log.enforce_retention(clock.now_ms(), partition.remote_retention()) > 0
    assert partition.log.log_start_offset == end and partition.log_start_offset == 0

    assert partition.epochs.end_offset_for(0, partition.log.log_end_offset) == (0, 8)
    assert partition.epochs.end_offset_for(1, partition.log.log_end_offset) == (1, partition.log.log_end_offset)
