"""retention.bytes of a partition with tiered segments counts each offset once, as Kafka's
RemoteLogManager does (the tiered segments plus UnifiedLog.onlyLocalLogSegmentsSize, the local
segments above the tiered end): a range that is both tiered and still local (local retention
has not dropped it yet) is counted in the tiered size only. The real offload service's cycle
over a real partition in a temp dir.

Regression (issue 26, F4): the service added the whole local log to the tiered size, so the
overlap counted twice and the oldest tiered segment (often the only copy of its records) was
deleted while the partition was within retention.bytes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from pathlib import Path

from broker.clock import ManualClock, SystemClock
from broker.metrics import BrokerMetrics
from broker.objectstore import MemoryObjectStore
from broker.tiering.service import OffloadService, OffloadSettings
from broker.partition import Partition
from tests.unit.test_partition_tiering import TIERED, lead, open_partition
from tests.unit.test_tiered_transactions import CLUSTER, tier
from tests.unit.test_transactions import txn_batch
from tests.unit.test_wal_writer import TOPIC_ID

CLOCK_START = 1_800_000_000_000
# one batch (two offsets) per local segment; local retention an hour, so what is tiered stays local
SETTINGS = {**TIERED, "segment.bytes": "100", "local.retention.ms": "3600000", "retention.ms": "-1"}


def with_retention_bytes(partition: Partition, retention_bytes: int) -> None:
    log_settings = dataclasses.replace(partition.settings.log, retention_bytes=retention_bytes)
    partition.update_settings(dataclasses.replace(partition.settings, log=log_settings))


async def leads(_partition: Partition) -> bool:
    return True


def one_cycle(partition: Partition, store: MemoryObjectStore, clock: ManualClock) -> int:
    """One cycle of the real service over the partition; the tiered segments it deleted."""
    service = OffloadService(
        lambda: [partition],
        store,
        lambda: CLUSTER,
        None,  # type: ignore[arg-type]  # no job runs: nothing is ready (local retention an hour)
        OffloadSettings(True, 60_000, 64, 1 << 30, 1_800_000),
        clock,
        BrokerMetrics(),
        lambda: uuid.UUID(int=1),
        leads,
    )
    report = asyncio.run(service.run_once())
    assert not report.failed and not report.job_error, report
    return report.deleted


def test_a_range_both_tiered_and_local_counts_once_against_retention_bytes(tmp_path: Path) -> None:
    clock = ManualClock(CLOCK_START)
    store = MemoryObjectStore(clock=SystemClock())
    partition = lead(open_partition(tmp_path, clock, **SETTINGS))
    partition.topic_id = str(TOPIC_ID)
    for seq in range(0, 20, 2):
        partition.append_records(txn_batch(seq, producer_id=9, transactional=False), acks=-1)
    tier(partition, store, 0, 6)  # [0, 6) tiered, and still in the local log
    remote = partition.remote_segments
    [segment] = remote.readable
    assert partition.log.log_start_offset == 0 < segment.next_offset == remote.tiered_end
    local_only = sum(  # Kafka's onlyLocalLogSegmentsSize: segments from the tiered end (aligned here)
        path.stat().st_size for path in tmp_path.glob("*.log") if int(path.stem) >= remote.tiered_end
    )
    assert 0 < local_only < partition.log.size_bytes
    size = remote.size_bytes + local_only  # each offset once

    # Kafka deletes a segment when the size without it is still at or above the limit
    with_retention_bytes(partition, size - segment.size_bytes + 1)
    assert one_cycle(partition, store, clock) == 0, "a tiered segment deleted within retention.bytes"
    assert remote.readable == [segment]

    with_retention_bytes(partition, size - segment.size_bytes)
    assert one_cycle(partition, store, clock) == 1
    assert remote.readable == [] and not [k for k in store.keys() if segment.segment_id in k]


def test_the_local_size_from_an_offset_counts_the_entries_from_it_in_the_segment_holding_it(tmp_path: Path) -> None:
    clock = ManualClock(CLOCK_START)
    partition = lead(open_partition(tmp_path, clock, **{**SETTINGS, "segment.bytes": "1000000"}))
    for seq in range(0, 8, 2):  # four batches of the same size, one segment
        partition.append_records(txn_batch(seq, producer_id=9, transactional=False), acks=-1)
    log = partition.log
    assert len(log.segment_base_offsets) == 1 and log.size_bytes % 4 == 0
    entry = log.size_bytes // 4
    assert [log.size_bytes_from(offset) for offset in (0, 2, 4, 6, 8)] == [4 * entry, 3 * entry, 2 * entry, entry, 0]
