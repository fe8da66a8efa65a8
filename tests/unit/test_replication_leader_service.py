"""The leader's answer to replica fetches, over a real partition log and no sockets:
entries from the follower's offset, divergence by epoch, fencing, the high watermark, and
when a fetch is held (long poll) or answered at once."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from broker.clock import ManualClock
from broker.metadata.records import PartitionStateRecord
from broker.protocol.errors import ErrorCode
from broker.replication.leader_service import ReplicaFetchService
from broker.replication.messages import REPLICATION_VERSION, FetchPartition, ReplicaFetchRequest
from broker.waiters import FetchWaiters
from tests.unit.test_partition import CLOCK_START, batch, open_partition

TOPIC_ID = uuid.UUID(int=7)
HELD_S = 60.0  # a fetch that is held waits this long; the tests fail long before


class Rig:
    """One partition led by broker 0 with follower 1, behind the service."""

    def __init__(self, tmp_path: Path, isr: tuple[int, ...] = (0, 1)) -> None:
        self.clock = ManualClock(CLOCK_START)
        self.waiters = FetchWaiters()
        self.partition = open_partition(tmp_path / "t-0", self.clock)
        self.partition._on_append = lambda p: self.waiters.notify(p.key)
        self.partition.make_leader(0, PartitionStateRecord(1, [0, 1], 0, 3, list(isr)), 2)
        self.name = "t"
        self.expanded: list[int] = []
        self.service = ReplicaFetchService(self, self, self.waiters, self, self.clock)  # type: ignore[arg-type]

    # the catalog, replica manager and ISR updater the service asks
    def by_id(self, topic_id: uuid.UUID):  # type: ignore[no-untyped-def]
        return self if topic_id == TOPIC_ID else None

    @property
    def partitions(self):  # type: ignore[no-untyped-def]
        return {self.partition.key: self.partition}

    def leader(self, name: str, index: int):  # type: ignore[no-untyped-def]
        self.partition.check_leader()
        return self.partition

    def maybe_expand(self, partition, replica_id: int) -> None:  # type: ignore[no-untyped-def]
        self.expanded.append(replica_id)

    async def fetch(
        self,
        offset: int,
        last_epoch: int = -1,
        epoch: int = 3,
        wait_s: float = 5.0,  # type: ignore[no-untyped-def]
        replica: int = 1,
        max_wait_ms: int = int(HELD_S * 1000),
    ):
        request = ReplicaFetchRequest(
            REPLICATION_VERSION,
            replica,
            max_wait_ms,
            1 << 20,
            [FetchPartition(str(TOPIC_ID), 0, offset, last_epoch, epoch)],
        )
        [result] = (await asyncio.wait_for(self.service.handle(request), wait_s)).partitions
        return result

    def append(self) -> None:
        """One batch of 2 records from the next producer sequence."""
        self.partition.append_records(batch(self.partition.log.log_end_offset), acks=1)


def run(coro) -> None:  # type: ignore[no-untyped-def]
    asyncio.run(coro)


def test_entries_then_the_moved_high_watermark_at_once_then_a_held_fetch(tmp_path: Path) -> None:
    async def scenario() -> None:
        rig = Rig(tmp_path)
        first = await rig.fetch(0)  # nothing to send, but the follower has never been told the HW
        assert (first.error_code, first.high_watermark, first.entries) == (0, 0, [])
        rig.append()
        copied = await rig.fetch(0)
        assert [kind for kind, _ in copied.entries] == [1] and copied.high_watermark == 0
        moved = await rig.fetch(2, last_epoch=3)  # the follower now holds offset 0-1: HW moves
        assert (moved.high_watermark, moved.entries) == (2, []), "answered at once with the new HW"
        assert rig.partition.log.high_watermark == 2
        held = asyncio.ensure_future(rig.fetch(2, last_epoch=3))
        await asyncio.sleep(0.05)
        assert not held.done(), "nothing new: the fetch is held"
        rig.append()
        woken = await held
        assert len(woken.entries) == 1 and woken.high_watermark == 2

    run(scenario())


def test_divergence_fencing_and_out_of_range(tmp_path: Path) -> None:
    async def scenario() -> None:
        rig = Rig(tmp_path)
        rig.append()  # epoch 3 starts at 0 on this leader
        diverged = await rig.fetch(5, last_epoch=3)
        assert (diverged.diverging_epoch, diverged.diverging_end_offset) == (3, 2)
        assert (await rig.fetch(0, epoch=2)).error_code == ErrorCode.FENCED_LEADER_EPOCH
        assert (await rig.fetch(0, epoch=4)).error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
        assert (await rig.fetch(9)).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        rig.partition.make_follower(PartitionStateRecord(1, [0, 1], 1, 4, [0, 1]), 3)
        assert (await rig.fetch(0, epoch=4)).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER

    run(scenario())


def test_what_the_leader_remembers_per_follower_is_what_it_follows_now(tmp_path: Path) -> None:
    """Regression (issue 11, leaks): the high watermark told to each follower was kept for
    every partition ever fetched, never pruned."""

    async def scenario() -> None:
        rig = Rig(tmp_path)
        rig.append()
        await rig.fetch(0)
        assert rig.service._told == {1: {(str(TOPIC_ID), 0): (0, 0)}}  # high watermark, log start
        request = ReplicaFetchRequest(REPLICATION_VERSION, 1, 0, 1 << 20, [])  # follows nothing here any more
        await rig.service.handle(request)
        assert rig.service._told == {1: {}}

    run(scenario())


def test_each_follower_fetch_is_offered_to_the_isr_updater(tmp_path: Path) -> None:
    """A follower outside the ISR catches up by fetching: every fetch of a replica of the
    partition goes to the ISR updater (which decides whether to expand, replication/isr.py),
    with the follower's id; a fetch from a broker that is no replica does not."""

    async def scenario() -> None:
        rig = Rig(tmp_path, isr=(0,))
        rig.append()
        rig.append()
        assert rig.partition.log.high_watermark == 4, "ISR [0]: the leader alone commits"
        first = await rig.fetch(0)
        assert len(first.entries) == 2 and rig.expanded == [1]
        caught_up = await rig.fetch(4, last_epoch=3, max_wait_ms=0)
        assert caught_up.entries == [] and rig.expanded == [1, 1]
        stranger = await rig.fetch(4, last_epoch=3, replica=5, max_wait_ms=0)
        assert stranger.entries == [] and rig.expanded == [1, 1], "broker 5 is no replica of t-0"

    run(scenario())
