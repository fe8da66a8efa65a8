"""Transactions across a follower's start-over and tiering (review 3, F2).

A follower behind its leader's log start (it was away longer than local retention, or it is
a new replica) starts over there (`ReplicaFetcher._apply` -> `Partition.restart_at`). It
used to rebuild its producer state from the entries after that offset only, so a
transaction that began below it was unknown: the follower's last stable offset ignored it
(read_committed fetches it served returned undecided records), and its ABORT marker ended
nothing there, so no aborted-transaction entry: read_committed consumers of that replica,
and of every read once it led, delivered the aborted records. The leader now sends its
producer snapshot at its log start with the OFFSET_OUT_OF_RANGE answer, as it sends its
tiered segments and mode history. And tiering plans only below the last stable offset
(Kafka's RemoteLogManager), so tiered segments hold decided data only.

The replication tests run the real leader service and the real fetcher loop (its RPC pool
calls the service directly) over two real partitions; the reads go through the real Fetch
handler (and the tiered reader below the local log).
"""

from __future__ import annotations

import asyncio
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.clock import ManualClock, SystemClock
from broker.config import load_config
from broker.wal.cache import ObjectCache
from broker.handlers import fetch
from broker.log import EntryKind
from broker.log.txn_index import AbortedTxn
from broker.metadata.records import PartitionStateRecord
from broker.metrics import BrokerMetrics
from broker.objectstore import MemoryObjectStore
from broker.tiering.planner import ready_ranges
from broker.tiering.reader import TieredReader
from broker.partition import Partition
from broker.producers import EndTxn, ProducerStateManager, SnapshotError
from broker.producers import snapshot as snapshots
from broker.protocol.batch import CONTROL_FLAG, NO_SEQUENCE, TRANSACTIONAL_FLAG, BatchHeader
from broker.replication.fetcher import ReplicaFetcher
from broker.replication.leader_service import ReplicaFetchService
from broker.waiters import FetchWaiters
from tests.unit.producer_state_support import T0, hdr
from tests.unit.test_partition_tiering import CLOCK_START, SMALL_TIERED, open_partition
from tests.unit.test_tiered_transactions import CLUSTER, tier
from tests.unit.test_transactions import fetch_request, handler_broker, txn_batch
from tests.unit.test_wal_writer import TOPIC_ID

ABORTED = 8  # the producer whose transaction is aborted
PLAIN = 9  # an idempotent producer writing plain batches
LEADER_STATE = PartitionStateRecord(1, [0, 1], 0, 0, [0])  # broker 0 leads alone: the high watermark moves
NEW_LEADER_STATE = PartitionStateRecord(1, [0, 1], 1, 1, [1])


class Replication:
    """Broker 0's leader service over `leader`; broker 1's replica fetcher, whose RPC pool
    hands each request to that service."""

    def __init__(self, leader: Partition, clock: ManualClock) -> None:
        self.partition = leader
        self.service = ReplicaFetchService(self, self, FetchWaiters(), self, clock)  # type: ignore[arg-type]
        config = load_config(
            overrides={
                "node.id": "1",
                "replica.fetch.wait.max.ms": "20",
                "replica.fetch.backoff.ms": "50",
                "metrics.listen": None,
            },
            environ={},
        )
        view = SimpleNamespace(brokers={0: SimpleNamespace(rpc_host="broker0", rpc_port=9093)})
        cross_az = SimpleNamespace(replicated=lambda address, nbytes: None)
        self.fetcher = ReplicaFetcher(config, view, self, BrokerMetrics(), cross_az, SystemClock())  # type: ignore[arg-type]

    # the catalog, replica manager and ISR updater the leader service asks
    def by_id(self, topic_id: uuid.UUID):  # type: ignore[no-untyped-def]
        return SimpleNamespace(name=self.partition.topic) if topic_id == TOPIC_ID else None

    @property
    def partitions(self):  # type: ignore[no-untyped-def]
        return {self.partition.key: self.partition}

    def leader(self, name: str, index: int) -> Partition:
        self.partition.check_leader()
        return self.partition

    def maybe_expand(self, partition: Partition, replica_id: int) -> None:
        pass

    # the RPC pool and client the fetcher asks
    address = "broker0:9093"

    def get(self, node_id: int, host: str, port: int) -> "Replication":
        return self

    async def call(self, request, timeout_s: float):  # type: ignore[no-untyped-def]
        return await self.service.handle(request)

    async def catch_up(self, follower: Partition) -> None:
        """Follow the leader until the follower holds its whole log, committed."""
        follower.make_follower(PartitionStateRecord(1, [0, 1], 0, 0, [0]), 2)
        self.fetcher.on_role_changed(follower)
        leader = self.partition
        await _until(
            lambda: (
                follower.log.log_end_offset == leader.log.log_end_offset
                and follower.log.high_watermark == leader.log.high_watermark
            )
        )
        await self.fetcher.stop()


async def _until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        assert loop.time() < deadline, "the follower did not catch up"
        await asyncio.sleep(0.01)


def partition(directory: Path, clock: ManualClock, **overrides: str) -> Partition:
    created = open_partition(directory, clock, **overrides)
    created.topic_id = str(TOPIC_ID)
    return created


def read_committed(replica: Partition, store: MemoryObjectStore, offset: int):  # type: ignore[no-untyped-def]
    """A consumer's read_committed Fetch at `offset`, served by `replica` (a leader now)."""
    broker = handler_broker(replica)
    broker.tiered_reader = TieredReader(store, lambda: CLUSTER, ObjectCache(1 << 20))
    header = SimpleNamespace(api_version=12, peer="p", client_id="c", forwarded=False)
    response = asyncio.run(fetch.handle(broker, header, fetch_request(offset, 1)))
    [answer] = response.responses[0].partitions
    return answer


def open_transaction_then_plain_batches(leader: Partition) -> None:
    """Producer 8's transaction opens at 0 ([0, 1]); producer 9's plain batches take 2..9.
    Each batch fills a local segment (segment.bytes 100)."""
    leader.append_records(txn_batch(0, producer_id=ABORTED, tag=b"ABORTED-"), acks=-1)
    for seq in range(0, 8, 2):
        leader.append_records(txn_batch(seq, producer_id=PLAIN, transactional=False), acks=-1)


def test_a_follower_starting_over_above_a_tiered_transaction_gets_its_abort(tmp_path: Path) -> None:
    """The repro's case (f2_restart_at_loses_open_txn.py), in the order the planner allows
    it now: the transaction is aborted (marker at 10), then [0, 6) is tiered and dropped
    locally; a new replica starts over at 6, between the transaction's first batch and its
    marker. It must index the ABORT as the leader does, and serve it once it leads."""
    clock = ManualClock(CLOCK_START)
    store = MemoryObjectStore(clock=SystemClock())
    leader = partition(tmp_path / "leader", clock, **SMALL_TIERED)
    leader.make_leader(0, LEADER_STATE, 1)
    open_transaction_then_plain_batches(leader)
    assert leader.last_stable_offset == 0
    leader.append_txn_marker(ABORTED, 0, 0, commit=False)  # offset 10
    assert leader.last_stable_offset == leader.log.high_watermark == 11
    for ready in ready_ranges(leader, clock.now_ms() + 10_000, 3, 1 << 30):
        tier(leader, store, ready.base_offset, ready.next_offset)
    clock.advance(10_000)
    leader.log.enforce_retention(clock.now_ms(), leader.remote_retention())
    assert (leader.log_start_offset, leader.log.log_start_offset) == (0, 6)
    assert leader.txn_index.all_entries() == [AbortedTxn(ABORTED, 0, 10, 11)]

    follower = partition(tmp_path / "follower", clock, **SMALL_TIERED)
    asyncio.run(Replication(leader, clock).catch_up(follower))

    assert follower.log.log_start_offset == 6, "the follower started over at the leader's log start"
    assert follower.txn_index.all_entries() == leader.txn_index.all_entries()
    assert dict(follower.producers.ongoing_transactions()) == {}
    assert follower.last_stable_offset == leader.last_stable_offset
    follower.make_leader(1, NEW_LEADER_STATE, 3)  # the old leader is gone
    answer = read_committed(follower, store, 0)
    assert [(a.producer_id, a.first_offset) for a in answer.aborted_transactions] == [(ABORTED, 0)], (
        "a read_committed consumer would deliver the aborted records"
    )


def test_a_follower_starting_over_inside_an_open_transaction_keeps_it_unstable(tmp_path: Path) -> None:
    """A topic without tiered storage whose retention dropped the start of a transaction
    still open (the leader's LSO stays at its log start, as Kafka's): a replica starting over
    there must hold the transaction open (same LSO), and index its ABORT."""
    clock = ManualClock(CLOCK_START)
    leader = partition(tmp_path / "leader", clock, **{"segment.bytes": "100", "retention.ms": "1000"})
    leader.make_leader(0, LEADER_STATE, 1)
    open_transaction_then_plain_batches(leader)
    clock.advance(10_000)
    leader.log.enforce_retention(clock.now_ms())
    start = leader.log.log_start_offset
    assert 0 < start < leader.log.high_watermark
    assert leader.last_stable_offset == start, "an open transaction below the log start holds the LSO there"

    replication = Replication(leader, clock)
    follower = partition(tmp_path / "follower", clock, **{"segment.bytes": "100", "retention.ms": "1000"})
    asyncio.run(replication.catch_up(follower))
    assert follower.log.log_start_offset == start
    assert dict(follower.producers.ongoing_transactions()) == {ABORTED: 0}
    assert follower.last_stable_offset == leader.last_stable_offset == start

    leader.append_txn_marker(ABORTED, 0, 0, commit=False)
    asyncio.run(replication.catch_up(follower))
    assert follower.txn_index.all_entries() == leader.txn_index.all_entries() == [AbortedTxn(ABORTED, 0, 10, 11)]
    assert follower.last_stable_offset == leader.last_stable_offset == 11


def test_the_planner_tiers_nothing_at_or_above_the_last_stable_offset(tmp_path: Path) -> None:
    """Kafka's RemoteLogManager copies segments only below the LSO: a transaction still open
    keeps its first batch, and what follows it, local."""
    clock = ManualClock(CLOCK_START)
    leader = partition(tmp_path, clock, **SMALL_TIERED)
    leader.make_leader(0, LEADER_STATE, 1)
    for seq in range(0, 4, 2):
        leader.append_records(txn_batch(seq, producer_id=PLAIN, transactional=False), acks=-1)  # [0, 4)
    leader.append_records(txn_batch(0, producer_id=ABORTED, tag=b"OPEN-"), acks=-1)  # [4, 6), open
    for seq in range(4, 10, 2):
        leader.append_records(txn_batch(seq, producer_id=PLAIN, transactional=False), acks=-1)  # [6, 12)
    later = clock.now_ms() + 10_000
    assert leader.last_stable_offset == 4 and leader.log.high_watermark == 12

    ready = ready_ranges(leader, later, 100, 1 << 30)
    assert [(r.base_offset, r.next_offset) for r in ready] == [(0, 2), (2, 4)]

    leader.append_txn_marker(ABORTED, 0, 0, commit=True)
    ready = ready_ranges(leader, later, 100, 1 << 30)
    assert ready[-1].next_offset == leader.log.segment_base_offsets[-1], "all sealed segments, once decided"


def test_a_log_start_inside_a_segment_needs_no_snapshot_file(tmp_path: Path) -> None:
    """The state is derived from the leader's own (and its aborted-transaction index), so a
    log start with no snapshot file (DeleteRecords inside a segment; a follower's copy of its
    leader's log start, once it leads) serves as well."""
    clock = ManualClock(CLOCK_START)
    leader = partition(tmp_path / "leader", clock)  # one segment
    leader.make_leader(0, LEADER_STATE, 1)
    open_transaction_then_plain_batches(leader)
    leader.append_txn_marker(ABORTED, 0, 0, commit=False)  # offset 10
    leader.log.delete_records_before(4)
    assert not [o for o, _path in snapshots.list_snapshots(leader.directory) if o == 4]

    follower = partition(tmp_path / "follower", clock)
    asyncio.run(Replication(leader, clock).catch_up(follower))
    assert follower.log.log_start_offset == 4
    assert follower.txn_index.all_entries() == leader.txn_index.all_entries() == [AbortedTxn(ABORTED, 0, 10, 11)]
    for producer_id in (ABORTED, PLAIN):
        ours, theirs = leader.producers.entry(producer_id), follower.producers.entry(producer_id)
        assert theirs is not None and ours is not None
        assert (theirs.producer_epoch, list(theirs.batches), theirs.coordinator_epoch) == (
            ours.producer_epoch,
            list(ours.batches),
            ours.coordinator_epoch,
        )


# what one step of a producer does: a transactional batch, a plain idempotent one, a marker
# (commit?, coordinator epoch), or an epoch bump
Step = tuple[int, str, bool, int]
steps = st.lists(
    st.tuples(
        st.integers(1, 3), st.sampled_from(["txn", "txn", "plain", "end", "bump"]), st.booleans(), st.integers(0, 2)
    ),
    max_size=40,
)


def leader_log(plan: list[Step]) -> tuple[ProducerStateManager, list[tuple[BatchHeader, int, EndTxn | None]]]:
    """Apply `plan` as a leader does (check, then on_append); the entries it appended."""
    mgr = ProducerStateManager(ManualClock(T0))
    entries: list[tuple[BatchHeader, int, EndTxn | None]] = []
    sequence = dict.fromkeys(range(1, 4), 0)
    epoch = dict.fromkeys(range(1, 4), 0)
    offset = 0
    for pid, action, commit, coordinator_epoch in plan:
        if action == "bump":
            epoch[pid], sequence[pid] = epoch[pid] + 1, 0
            continue
        end = EndTxn(commit, coordinator_epoch) if action == "end" else None
        if end is not None:
            header = hdr(pid=pid, epoch=epoch[pid], seq=NO_SEQUENCE, attributes=CONTROL_FLAG | TRANSACTIONAL_FLAG)
            verdict = mgr.check_marker(pid, epoch[pid], coordinator_epoch)
        else:
            attributes = TRANSACTIONAL_FLAG if action == "txn" else 0
            header = hdr(pid=pid, epoch=epoch[pid], seq=sequence[pid], count=2, attributes=attributes)
            verdict = mgr.check(header)
        if verdict is not None:
            continue
        mgr.on_append(header, offset, end_txn=end)
        entries.append((header, offset, end))
        offset += header.last_offset_delta + 1
        if end is None:
            sequence[pid] += 2
    return mgr, entries


@settings(max_examples=200, deadline=None)
@given(steps, st.floats(0, 1), st.floats(0, 1))
def test_starting_over_anywhere_with_the_leaders_state_ends_in_the_leaders_state(
    plan: list[Step], cut: float, replicated: float
) -> None:
    """For any log, any entry boundary as the leader's log start and any high watermark
    above it: a replica that begins with `state_at` that offset and replays the entries from
    there ends with the leader's producer state, open transactions and LSO, and completes
    every aborted transaction whose marker it replays as the leader did (the
    aborted-transaction index)."""
    leader, entries = leader_log(plan)
    starts = [offset for _h, offset, _e in entries] + [leader.map_end_offset]
    start = starts[int(cut * (len(starts) - 1))]
    high_watermark = start + int(replicated * (leader.map_end_offset - start))
    leader.on_high_watermark(high_watermark)
    completed = ProducerStateManager(ManualClock(T0))
    aborted = []
    for header, offset, end in entries:  # the leader's aborted-transaction index, from a replay of its log
        done = completed.replay(header, offset, end)
        if done is not None and done.aborted:
            aborted.append(done)
    with tempfile.TemporaryDirectory() as tmp:
        follower = ProducerStateManager(ManualClock(T0))
        state = leader.state_at(start, ((t.producer_id, t.first_offset, t.last_offset) for t in aborted))
        follower.start_over(Path(tmp), start, snapshots.decode_snapshot_at(snapshots.encode_snapshot(state), start))
        replayed = []
        for header, offset, end in entries:
            if offset >= start:
                done = follower.replay(header, offset, end)
                if done is not None and done.aborted:
                    replayed.append((done.producer_id, done.first_offset, done.last_offset))
        follower.on_high_watermark(high_watermark)
    assert replayed == [(t.producer_id, t.first_offset, t.last_offset) for t in aborted if t.last_offset >= start]
    assert dict(follower.ongoing_transactions()) == dict(leader.ongoing_transactions())
    assert follower.last_stable_offset(high_watermark) == leader.last_stable_offset(high_watermark)
    for pid, ours in leader.active_producers().items():
        theirs = follower.entry(pid)
        assert theirs is not None
        assert (theirs.producer_epoch, list(theirs.batches), theirs.coordinator_epoch) == (
            ours.producer_epoch,
            list(ours.batches),
            ours.coordinator_epoch,
        )


def test_a_snapshot_the_follower_cannot_use_is_refused_before_anything_changes(tmp_path: Path) -> None:
    clock = ManualClock(CLOCK_START)
    follower = partition(tmp_path, clock)
    follower.append_replicated(
        [(int(EntryKind.RECORDS), bytes(txn_batch(0, producer_id=PLAIN, transactional=False)))], 0
    )
    good = snapshots.encode_snapshot(snapshots.Snapshot(offset=6, producers=[]))
    newer = bytearray(good)
    newer[4:6] = (99).to_bytes(2, "big")
    for bad in (good[:-1] + b"x", bytes(newer), snapshots.encode_snapshot(snapshots.Snapshot(offset=5, producers=[]))):
        with pytest.raises(SnapshotError):
            follower.restart_at(6, bad)
        assert (follower.log.log_start_offset, follower.log.log_end_offset) == (0, 2)
    follower.restart_at(6, good)
    assert (follower.log.log_start_offset, follower.log.log_end_offset) == (6, 6)
    assert [offset for offset, _path in snapshots.list_snapshots(follower.directory)] == [6]
