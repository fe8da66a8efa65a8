"""A stale representative's commit is refused (representation_fence.py): the fence alone, on
a real Partition, and through two real WAL writers sharing a leader, one of whose uploads
stalls while the client moves to the other (cluster seed 200161)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import pytest

from broker.clock import ManualClock, SystemClock
from broker.metadata.records import PartitionStateRecord
from broker.objectstore import MemoryObjectStore
from broker.protocol.errors import ApiError, ErrorCode
from broker.representation_fence import Admission, RepresentationFence
from broker.wal.commit import CommitBatch, CommitPartition, Representation
from broker.wal.wal_writer import PartitionAppend, WalWriter
from tests.unit.test_partition import CLOCK_START, batch
from tests.unit.test_wal_writer import CLUSTER, TOPIC_ID, Rig
from walfiles.keys import WalKeyAllocator


def took(node_id: int, az: str | None, revision: int, epoch: int = 0) -> Admission:
    return Admission(node_id, az, revision, epoch)


def test_another_representative_at_an_older_view_is_refused() -> None:
    fence = RepresentationFence()
    fence.admit(took(1, "az-a", 10), 0)
    fence.admit(took(0, "az-a", 12), 0)  # the AZ's clients moved to broker 0 as of revision 12
    with pytest.raises(ApiError) as refused:
        fence.admit(took(1, "az-a", 11), 0)
    assert refused.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    fence.admit(took(0, "az-a", 11), 0)  # the current representative's own older view: in order already
    fence.admit(took(1, "az-a", 13), 0)  # a newer view chose broker 1 again
    with pytest.raises(ApiError):
        fence.admit(took(0, "az-a", 12), 0)


def test_az_are_fenced_apart_and_sequenced_batches_only_recorded() -> None:
    fence = RepresentationFence()
    fence.admit(took(0, "az-a", 20), 0)
    fence.admit(took(1, "az-b", 10), 0)  # another AZ's representative: its own entry
    fence.admit(took(2, None, 5), 0)
    fence.admit(took(3, "az-a", 15), 0, refuse=False)  # idempotent: the sequence check orders it
    with pytest.raises(ApiError):
        fence.admit(took(3, "az-a", 15), 0)
    fence.clear()
    fence.admit(took(3, "az-a", 15), 0)


def test_a_plain_batch_taken_in_an_older_leader_epoch_is_refused() -> None:
    """The leader moved away and back while the batch uploaded (or the representative's view
    lagged): its client may have sent later batches to the other leader meanwhile."""
    fence = RepresentationFence()
    with pytest.raises(ApiError) as refused:
        fence.admit(took(1, "az-a", 10, epoch=3), 5)
    assert "leader epoch 3" in (refused.value.message or "")
    fence.admit(took(1, "az-a", 10, epoch=3), 5, refuse=False)  # idempotent
    fence.admit(took(1, "az-a", 11, epoch=5), 5)
    fence.admit(took(1, "az-a", 12, epoch=-1), 5)  # no epoch named: not checked


def test_a_new_leader_epoch_starts_a_new_fence(tmp_path: Path) -> None:
    from tests.unit.test_mode_switch import lead, open_partition

    clock = ManualClock(CLOCK_START)
    partition = lead(open_partition(tmp_path, clock, diskless=True))
    partition.representation.admit(took(0, "az-a", 12), 0)
    with pytest.raises(ApiError):
        partition.representation.admit(took(1, "az-a", 11), 0)
    partition.make_leader(0, PartitionStateRecord(1, [0], 0, 1, [0]), 2)
    partition.representation.admit(took(1, "az-a", 11, epoch=1), 1)


def test_the_claim_travels_with_the_commit_and_an_older_sender_sends_none() -> None:
    part = CommitPartition(TOPIC_ID, 0, -1, [CommitBatch(b"h" * 61, 8, 100)], 5, Representation(1, "az-a", 42, 7))
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(part), type=CommitPartition) == part
    older = msgspec.msgpack.encode([TOPIC_ID, 0, -1, [[b"h" * 61, 8, 100]], 5])
    assert msgspec.msgpack.decode(older, type=CommitPartition).represented_by is None


class StalledStore(MemoryObjectStore):
    """The first PUT waits until released: an upload that hangs at the old representative."""

    def __init__(self) -> None:
        super().__init__(clock=SystemClock())
        self.release = asyncio.Event()
        self.puts = 0

    async def put_if_absent(self, key: str, data: bytes) -> bool:
        self.puts += 1
        if self.puts == 1:
            await self.release.wait()
        return await super().put_if_absent(key, data)


def test_batches_stalled_at_a_representative_the_client_left_do_not_land_behind_later_ones(tmp_path: Path) -> None:
    """Broker 1 represents az-a and takes a plain producer's batch A; its upload stalls. The
    client moves to broker 0 (broker 1 drains: a newer view) and sends B, committed at once.
    A's commit then comes: committed, it would sit behind B. It is refused, retriable."""

    async def scenario() -> None:
        rig = Rig(tmp_path, MemoryObjectStore(clock=SystemClock()), partitions=1, wal_linger_ms=1)
        stalled = StalledStore()
        old_representative = WalWriter(
            stalled,
            WalKeyAllocator("", CLUSTER, 1, rig.clock.now_ms, first_sequence=0),
            rig.committer,
            rig.cache,
            rig.metrics,
            clock=SystemClock(),
            buffer_max_bytes=8 << 20,
            linger_ms=1,
            max_inflight_bytes=64 << 20,
        )

        def append(seq: int, node_id: int, revision: int) -> PartitionAppend:
            plain = rig.append(0, batch(seq, producer_id=-1))
            plain.represented_by = Representation(node_id, "az-a", revision, 0)
            return plain

        [a] = old_representative.submit([append(0, 1, 10)])
        while stalled.puts == 0:
            await asyncio.sleep(0.001)
        [b] = rig.writer.submit([append(0, 0, 12)])
        assert (await b).error_code == 0 and (await b).base_offset == 0
        stalled.release.set()
        late = await a
        assert late.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER, late
        assert "represented it since revision 12" in (late.error_message or "")
        assert rig.partitions[0].log.log_end_offset == 2, "only B is in the log"
        [retried] = rig.writer.submit([append(0, 0, 13)])  # the client sends A again, to broker 0
        assert (await retried).base_offset == 2
        await old_representative.close()
        await rig.writer.close()

    asyncio.run(scenario())
