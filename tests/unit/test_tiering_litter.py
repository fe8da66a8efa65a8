"""The tiering litter sweep (broker/tiering/litter.py) with the real offload service, a real
partition in a temp dir, the in-memory object store and a manual clock.

Regression (tiering seed 10167 at c2fb7c8): the leader of epoch 0 planned ranges and its
job was uploading when leadership moved; the leader of epoch 1 found the segments still
COPY_SEGMENT_STARTED with no job of its own, deleted their files and appended
DELETE_SEGMENT_FINISHED; the old job's next upload landed after that, and its broker
stopped before its commit step (which deletes what it could not commit). The uploaded file
belonged to no segment any replica knew, and nothing ever deleted it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

from broker.clock import ManualClock
from broker.metrics import BrokerMetrics
from broker.objectstore import MemoryObjectStore
from broker.objectstore.store import ObjectInfo
from broker.tiering.service import OffloadService, OffloadSettings
from broker.partition import Partition
from tests.unit.test_partition_tiering import CLOCK_START, SMALL_TIERED, lead, open_partition
from tests.unit.test_tiered_transactions import CLUSTER
from tests.unit.test_transactions import txn_batch
from tests.unit.test_wal_writer import TOPIC_ID
from walfiles.keys import parse_tiered_segment_key, tiered_partition_prefix

JOB_TIMEOUT_MS = 60_000
GRACE_MS = 2 * JOB_TIMEOUT_MS  # what the sweep waits before it deletes an unknown segment's file


class HeldStore(MemoryObjectStore):
    """Uploads of tiered files (then: of the segments in `held`) wait for a `release()` each:
    a job held up (its broker paused, a slow store) while leadership moves on. Counts the
    listings of tiered prefixes."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock=clock)
        self.held: set[str] | None = None  # None: every tiered file
        self.waiting = asyncio.Event()
        self._permits = asyncio.Semaphore(0)
        self.tiered_lists = 0

    def release(self) -> None:
        self._permits.release()

    def list(self, prefix: str = "", start_after: str | None = None) -> AsyncIterator[ObjectInfo]:
        self.tiered_lists += prefix.startswith("tiered/")
        return super().list(prefix, start_after)

    async def put(self, key: str, data: bytes) -> None:
        held = self.held
        if key.startswith("tiered/") if held is None else any(segment_id in key for segment_id in held):
            self.waiting.set()
            await self._permits.acquire()
        await super().put(key, data)


def service(partition: Partition, store: MemoryObjectStore, clock: ManualClock, epoch: int) -> OffloadService:
    """The offload service of the broker leading `partition` in `epoch` (the metadata store's
    answer to its fence: whether the partition is still led in that epoch)."""

    async def leads(p: Partition) -> bool:
        return p.leader_state is not None and p.leader_epoch == epoch

    return OffloadService(
        lambda: [partition],
        store,
        lambda: CLUSTER,
        None,  # type: ignore[arg-type]  # a classic topic: the broker copies its ranges itself
        OffloadSettings(True, 60_000, 64, 1 << 30, JOB_TIMEOUT_MS),
        clock,
        BrokerMetrics(),
        lambda: uuid.UUID(int=epoch + 1),
        leads,
    )


def tiered_partition(directory: Path, clock: ManualClock) -> Partition:
    """Led in epoch 0, four batches in four sealed local segments past local retention."""
    partition = lead(open_partition(directory, clock, **SMALL_TIERED))
    partition.topic_id = str(TOPIC_ID)
    for seq in range(0, 10, 2):
        partition.append_records(txn_batch(seq, producer_id=9, transactional=False), acks=-1)
    clock.advance(5_000)
    return partition


def unknown_files(partition: Partition, store: MemoryObjectStore) -> list[str]:
    known = {s.segment_id for s in partition.remote_segments.segments}
    prefix = tiered_partition_prefix("", CLUSTER, TOPIC_ID, partition.index)
    return [
        key
        for key in store.keys()
        if key.startswith(prefix) and str(parse_tiered_segment_key(key).segment_id) not in known
    ]


async def a_late_upload_of_a_deposed_leader(
    partition: Partition, store: HeldStore, clock: ManualClock
) -> tuple[OffloadService, list[str]]:
    """Epoch 0's cycle uploads its first range's files; epoch 1's clean-up deletes that
    segment; then one held upload lands and epoch 0's broker stops. Returns epoch 1's
    service and the litter left."""
    old = service(partition, store, clock, 0)
    cycle = asyncio.get_running_loop().create_task(old.run_once())
    await store.waiting.wait()
    planned = {s.segment_id for s in partition.remote_segments.segments}
    assert planned, "epoch 0 planned nothing"
    store.held = planned

    lead(partition, epoch=1)  # leadership moves (the same replicated log, a new leader)
    new = service(partition, store, clock, 1)
    report = await new.run_once()
    assert report.deleted == len(planned), report  # epoch 0's segments abandoned, files deleted
    assert not planned & {s.segment_id for s in partition.remote_segments.segments}

    store.release()  # epoch 0's held upload lands after the deletion ...
    while not unknown_files(partition, store):
        await asyncio.sleep(0)
    cycle.cancel()  # ... and its broker stops before its commit step could discard it
    await asyncio.gather(cycle, return_exceptions=True)
    return new, unknown_files(partition, store)


def test_a_deposed_leaders_late_upload_is_swept_once_older_than_any_job(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock(CLOCK_START)
        store = HeldStore(clock)
        partition = tiered_partition(tmp_path, clock)
        new, litter = await a_late_upload_of_a_deposed_leader(partition, store, clock)
        assert litter, "the race did not happen"
        readable = {s.segment_id for s in partition.remote_segments.readable}

        clock.advance(GRACE_MS - 1)  # a job may still be writing: nothing of it is touched yet
        assert (await new.run_once()).litter == 0
        assert unknown_files(partition, store) == litter

        clock.advance(GRACE_MS)
        report = await new.run_once()
        assert unknown_files(partition, store) == [], "litter of a deposed leader's job left in the store"
        assert report.litter == 1, report
        now_readable = {s.segment_id for s in partition.remote_segments.readable}
        assert readable <= now_readable
        for segment_id in now_readable:  # the new leader's segments keep every file
            assert len([k for k in store.keys() if segment_id in k]) >= 6

    asyncio.run(main())


def test_a_leader_the_metadata_store_no_longer_names_deletes_no_litter(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock(CLOCK_START)
        store = HeldStore(clock)
        partition = tiered_partition(tmp_path, clock)
        _new, litter = await a_late_upload_of_a_deposed_leader(partition, store, clock)
        clock.advance(2 * GRACE_MS)
        stale = service(partition, store, clock, 0)  # its set may lack a newer leader's segments
        assert (await stale.run_once()).litter == 0
        assert unknown_files(partition, store) == litter

    asyncio.run(main())


def test_the_sweep_lists_one_page_per_cycle_and_one_pass_per_grace(tmp_path: Path) -> None:
    """Bounded: a pass lists one page per cycle, then waits until it is GRACE_MS old."""

    async def main() -> None:
        clock = ManualClock(CLOCK_START)
        store = HeldStore(clock)
        store.held = set()
        partition = lead(open_partition(tmp_path, clock, **{**SMALL_TIERED, "local.retention.ms": "3600000"}))
        partition.topic_id = str(TOPIC_ID)
        prefix = tiered_partition_prefix("", CLUSTER, TOPIC_ID, partition.index)
        litter = [f"{prefix}{i:020d}-{uuid.UUID(int=i)}.log" for i in range(1500)]
        for key in litter:
            await store.put(key, b"x")
        clock.advance(GRACE_MS + 1)
        new = service(partition, store, clock, 0)
        assert (await new.run_once()).litter == 1000 and len(store.keys()) == 500
        assert (await new.run_once()).litter == 500 and store.keys() == []
        assert (await new.run_once()).litter == 0 and store.tiered_lists == 2, "a pass before GRACE_MS"
        clock.advance(GRACE_MS)
        await new.run_once()
        assert store.tiered_lists == 3

    asyncio.run(main())


def test_a_deletion_mark_lost_to_a_truncation_is_made_again(tmp_path: Path) -> None:
    """Tiering seed 690260 (at 03b32e8): a leader marked an abandoned segment
    DELETE_SEGMENT_STARTED and remembered it as being deleted; the mark was lost with its
    unreplicated tail when leadership moved, and when the broker led again it skipped the
    segment as "marked in an earlier cycle" for ever: it stayed COPY_SEGMENT_STARTED. Here the
    mark is lost the same way, as the service sees it: appended, then neither pending nor
    applied."""

    async def main() -> None:
        clock = ManualClock(CLOCK_START)
        store = HeldStore(clock)
        partition = tiered_partition(tmp_path, clock)
        old = service(partition, store, clock, 0)
        cycle = asyncio.get_running_loop().create_task(old.run_once())
        await store.waiting.wait()
        abandoned = {s.segment_id for s in partition.remote_segments.segments}
        assert abandoned, "epoch 0 planned nothing"
        store.held = abandoned  # only epoch 0's job stays held up
        lead(partition, epoch=1)
        new = service(partition, store, clock, 1)
        real_mark = new._mark
        new._mark = lambda *args: None  # type: ignore[method-assign]  # appended, then truncated away
        await new.run_once()
        new._mark = real_mark  # type: ignore[method-assign]
        assert abandoned <= {s.segment_id for s in partition.remote_segments.segments}, "still STARTED"
        report = await new.run_once()
        assert report.deleted == len(abandoned), report
        assert not abandoned & {s.segment_id for s in partition.remote_segments.segments}
        cycle.cancel()
        await asyncio.gather(cycle, return_exceptions=True)

    asyncio.run(main())
