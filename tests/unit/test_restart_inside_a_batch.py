"""A follower that starts over at a leader's log start inside a batch.

DeleteRecords may move a log start offset inside a batch, as in Kafka. A follower behind it
starts over there (`ReplicaFetcher._apply` -> `Partition.restart_at`) and fetches from it;
the leader answers with the batch that holds it, whose base offset is below the follower's
log end. The follower used to refuse that entry ("replicated entry at B, log end offset is
X") on every fetch, backing off for ever: a replica that could never rejoin the ISR. As
Kafka's Partition.appendRecordsToFollowerOrFutureReplica does, an empty log at its log start
now restarts at the batch's base offset and takes it, while the log start offset stays
where DeleteRecords put it: nothing below it is served, here as on the leader. The producer
state the leader sent for its log start leaves that batch out, and replaying it brings the
follower to the leader's state (an open transaction it begins, an idempotent producer's
sequences, so a retry after a failover is still a duplicate).

The replication runs the real leader service and the real fetcher loop over two real
partitions, classic and diskless (entries that only point at their WAL object).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from broker.clock import ManualClock, SystemClock
from broker.config import load_config
from broker.log import EntryKind, OffsetOutOfRangeError
from broker.log.coordinates import make_ref
from broker.log.txn_index import AbortedTxn
from broker.log_validator import prepare_diskless
from broker.metadata.records import PartitionStateRecord
from broker.objectstore import MemoryObjectStore
from broker.partition import Partition
from broker.topic_config import effective
from tests.unit.test_partition_tiering import CLOCK_START, SMALL_TIERED
from tests.unit.test_restart_producer_state import LEADER_STATE, NEW_LEADER_STATE, Replication, _until
from tests.unit.test_tiered_transactions import tier
from tests.unit.test_transactions import txn_batch
from tests.unit.test_wal_writer import TOPIC_ID
from walfiles.keys import format_wal_id

TXN = 8  # a transactional producer: one batch of three records, [2, 4]
PLAIN = 9  # an idempotent producer: [0, 1], [5, 8] (sequences 2..5), [10, 11]
ABORT_AT = 9
ONE_BATCH_SEGMENTS = {**SMALL_TIERED, "segment.bytes": "150"}  # tiered storage, one batch per local segment


def open_replica(directory: Path, clock: ManualClock, diskless: bool, **overrides: str) -> Partition:
    settings = effective({"diskless.enable": str(diskless).lower(), **overrides}, load_config(environ={}))
    partition = Partition.open("t", 0, directory, settings, clock, 86_400_000, on_append=lambda p: None)
    partition.topic_id = str(TOPIC_ID)
    return partition


def produce(partition: Partition, seq: int, count: int, producer_id: int, transactional: bool = False) -> int:
    """One batch, as a classic produce or a diskless commit; returns its base offset."""
    records = txn_batch(seq, count=count, producer_id=producer_id, transactional=transactional)
    if not partition.diskless:
        return partition.append_records(records, acks=-1).base_offset
    [(view, head)] = prepare_diskless(records, partition.settings, CLOCK_START)
    ref = make_ref(format_wal_id(CLOCK_START, producer_id, seq), 8, len(view))
    return partition.append_coordinates([(head, ref)], -1, partition.modes.boundary()).base_offset


def fill(leader: Partition) -> None:
    """[0, 1] idempotent; [2, 4] a transaction's first batch; [5, 8] idempotent."""
    assert produce(leader, 0, 2, PLAIN) == 0
    assert produce(leader, 0, 3, TXN, transactional=True) == 2
    assert produce(leader, 2, 4, PLAIN) == 5


def assert_same_producer_state(follower: Partition, leader: Partition) -> None:
    assert set(follower.producers.active_producers()) == set(leader.producers.active_producers())
    for producer_id, ours in leader.producers.active_producers().items():
        theirs = follower.producers.entry(producer_id)
        assert theirs is not None
        assert (theirs.producer_epoch, list(theirs.batches), theirs.current_txn_first_offset) == (
            ours.producer_epoch,
            list(ours.batches),
            ours.current_txn_first_offset,
        ), producer_id
    assert dict(follower.producers.ongoing_transactions()) == dict(leader.producers.ongoing_transactions())
    assert follower.last_stable_offset == leader.last_stable_offset
    assert follower.txn_index.all_entries() == leader.txn_index.all_entries()


def entries(partition: Partition, offset: int) -> list[tuple[EntryKind, int, bytes]]:
    return [(e.kind, e.base_offset, bytes(e.data)) for e in partition.log.read(offset, 1 << 20, 1 << 62)]


async def follow_until_caught_up(replication: Replication, follower: Partition) -> None:
    """The fetcher loop follows the leader until the follower holds its whole log, committed;
    a follower stuck backing off fails within a few seconds."""
    leader = replication.partition
    follower.make_follower(PartitionStateRecord(1, [0, 1], 0, 0, [0]), 2)
    replication.fetcher.on_role_changed(follower)
    try:
        await _until(
            lambda: (
                follower.log.log_end_offset == leader.log.log_end_offset
                and follower.log.high_watermark == leader.log.high_watermark
            ),
            timeout_s=3.0,
        )
    finally:
        await replication.fetcher.stop()


@pytest.mark.parametrize("diskless", [False, True], ids=["classic", "diskless"])
@pytest.mark.parametrize(
    ("deleted_to", "base"),
    [(3, 2), (4, 2), (6, 5), (8, 5)],
    ids=["inside-a-transactional-batch", "at-its-last-offset", "inside-an-idempotent-batch", "at-that-ones-last"],
)
def test_a_follower_starts_over_at_a_log_start_inside_a_batch(
    tmp_path: Path, diskless: bool, deleted_to: int, base: int
) -> None:
    clock = ManualClock(CLOCK_START)
    leader = open_replica(tmp_path / "leader", clock, diskless)
    leader.make_leader(0, LEADER_STATE, 1)
    follower = open_replica(tmp_path / "follower", clock, diskless)
    replication = Replication(leader, clock)
    assert produce(leader, 100, 1, 77) == 0  # [0] another producer's batch, which the follower holds
    asyncio.run(follow_until_caught_up(replication, follower))

    fill_after = leader.log.log_end_offset  # the follower is away from here on
    assert produce(leader, 0, 2, PLAIN) == fill_after
    assert produce(leader, 0, 3, TXN, transactional=True) == fill_after + 2
    assert produce(leader, 2, 4, PLAIN) == fill_after + 5
    deleted_to, base = deleted_to + fill_after, base + fill_after
    assert leader.delete_records_before(deleted_to) == deleted_to  # DeleteRecords, its follower away
    assert follower.log.log_end_offset < deleted_to

    asyncio.run(follow_until_caught_up(replication, follower))

    assert follower.log_start_offset == follower.log.log_start_offset == deleted_to, "nothing below it is served"
    assert follower.log.segment_base_offsets[0] == base, "the local log starts at the batch holding the log start"
    with pytest.raises(OffsetOutOfRangeError):
        follower.log.read(deleted_to - 1, 1 << 20, 1 << 62)
    assert entries(follower, deleted_to) == entries(leader, deleted_to)
    assert_same_producer_state(follower, leader)
    assert follower.epochs.end_offset_for(0, follower.log.log_end_offset) == leader.epochs.end_offset_for(
        0, leader.log.log_end_offset
    )
    if diskless:
        assert follower.wal_references.oldest_created_ms() == leader.wal_references.oldest_created_ms()

    # the transaction ends after the start-over: the follower indexes its ABORT as the leader does
    leader.append_txn_marker(TXN, 0, 0, commit=False)
    assert produce(leader, 6, 2, PLAIN) == leader.log.log_end_offset - 2
    asyncio.run(follow_until_caught_up(replication, follower))
    assert leader.txn_index.all_entries() == [AbortedTxn(TXN, fill_after + 2, fill_after + ABORT_AT, fill_after + 10)]
    assert_same_producer_state(follower, leader)

    follower.close()  # a restart keeps the log start and the state: the snapshot lies inside the batch
    follower = open_replica(tmp_path / "follower", clock, diskless)
    assert (follower.log_start_offset, follower.log.segment_base_offsets[0]) == (deleted_to, base)
    assert_same_producer_state(follower, leader)

    follower.make_leader(1, NEW_LEADER_STATE, 3)  # the old leader is gone
    end = follower.log.log_end_offset
    assert produce(follower, 2, 4, PLAIN) == fill_after + 5, "a retry of the batch at [5, 8] is a duplicate"
    assert follower.log.log_end_offset == end


def test_a_follower_starts_over_inside_a_batch_of_a_tiered_segment(tmp_path: Path) -> None:
    """DeleteRecords inside a batch that a tiered segment also holds: the follower installs the
    leader's segments at the log start, then takes the batch below it."""
    clock = ManualClock(CLOCK_START)
    store = MemoryObjectStore(clock=SystemClock())
    leader = open_replica(tmp_path / "leader", clock, False, **ONE_BATCH_SEGMENTS)
    leader.make_leader(0, LEADER_STATE, 1)
    fill(leader)
    tier(leader, store, 0, 5)
    assert leader.delete_records_before(3) == 3
    assert [(s.base_offset, s.end_offset) for s in leader.remote_segments.readable] == [(0, 4)]

    follower = open_replica(tmp_path / "follower", clock, False, **ONE_BATCH_SEGMENTS)
    asyncio.run(follow_until_caught_up(Replication(leader, clock), follower))

    assert follower.log_start_offset == follower.log.log_start_offset == 3
    assert follower.log.segment_base_offsets[0] == 2
    assert [(s.segment_id, s.base_offset) for s in follower.remote_segments.readable] == [
        (s.segment_id, s.base_offset) for s in leader.remote_segments.readable
    ]
    assert entries(follower, 3) == entries(leader, 3)
    assert_same_producer_state(follower, leader)
