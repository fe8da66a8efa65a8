"""Remote-segment markers on a real Partition in a temp dir (no sockets): the leader's
append_marker, a follower's append_replicated, truncation, the replay at open, the partition's
log start offset, and local retention with tiered segments (PartitionLog.enforce_retention
with a RemoteRetention).

Tests marked "Regression" pin a defect these tests found (inputs, expected and actual in
the docstring); each failed before its fix.
"""

from __future__ import annotations

import asyncio
import struct
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
from kafka.record.default_records import DefaultRecordBatch

from broker.clock import ManualClock
from broker.config import load_config
from broker.handlers import fetch
from broker.log import EntryKind, PartitionLog, RemoteRetention
from broker.log.markers import EVENT_VERSION, RemoteSegmentEvent, RemoteSegmentState, decode_marker
from broker.log.remote_segments import CHECKPOINT_FILE
from broker.metadata.records import PartitionStateRecord
from broker.metrics import BrokerMetrics
from broker.partition import Partition
from broker.topic_config import effective
from broker.topics import Topic
from broker.waiters import FetchWaiters
from tests.unit.test_fetch_handler import fetch_request
from tests.unit.test_log_support import T0, append_batch, open_log, small_config
from tests.unit.test_partition import batch

S = RemoteSegmentState
STARTED = S.COPY_SEGMENT_STARTED
FINISHED = S.COPY_SEGMENT_FINISHED
DELETE_STARTED = S.DELETE_SEGMENT_STARTED
CLOCK_START = 1_800_000_000_000
TIERED = {"remote.storage.enable": "true"}
# tiered, local retention 1 s, one records batch (two offsets) per local segment
SMALL_TIERED = {**TIERED, "segment.bytes": "100", "local.retention.ms": "1000", "retention.ms": "-1"}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(CLOCK_START)


def open_partition(directory: Path, clock: ManualClock, **overrides: str) -> Partition:
    settings = effective({"diskless.enable": "false", **overrides}, load_config(environ={}))  # appends records
    return Partition.open("t", 0, directory, settings, clock, 86_400_000, on_append=lambda p: None)


def lead(partition: Partition, replicas: tuple[int, ...] = (0,), epoch: int = 0) -> Partition:
    """Broker 0 leads with every replica in the ISR: with followers, the high watermark waits
    for them (fetched_by); alone (RF=1) it moves with every append."""
    partition.make_leader(0, PartitionStateRecord(1, list(replicas), 0, epoch, list(replicas)), 1)
    return partition


def follow(partition: Partition, epoch: int, revision: int = 2) -> Partition:
    partition.make_follower(PartitionStateRecord(1, [1, 0], 1, epoch, [1, 0]), revision)
    return partition


def fetched_by(partition: Partition, replica: int, offset: int, clock: ManualClock) -> None:
    """A follower fetch at `offset` (its log end), as the replication leader service records it."""
    assert partition.leader_state is not None
    partition.leader_state.on_follower_fetch(replica, offset, partition.log.log_end_offset, clock.now_ms())
    partition.advance_high_watermark()


def event(
    state: RemoteSegmentState, sid: str, base: int, end: int, epoch: int = 0, size: int = 500
) -> RemoteSegmentEvent:
    return RemoteSegmentEvent(EVENT_VERSION, state, sid, base, end, epoch, size, CLOCK_START, f"plan-{sid}")


def states(partition: Partition) -> dict[str, RemoteSegmentState]:
    return {s.segment_id: s.state for s in partition.remote_segments.segments}


def readable_ids(partition: Partition) -> list[str]:
    return [s.segment_id for s in partition.remote_segments.readable]


def log_entries(partition: Partition) -> list[tuple[int, bytes]]:
    """Every entry as replication sends it: (kind, the batch as stored, offsets and epoch patched)."""
    log = partition.log
    return [(int(e.kind), bytes(e.data)) for e in log.read(log.log_start_offset, 1 << 24, log.log_end_offset)]


def records_entry(base_offset: int, epoch: int, seq: int = 100) -> tuple[int, bytes]:
    """A records batch as a leader of `epoch` holds it at `base_offset` (outside the CRC)."""
    data = bytearray(batch(seq, producer_id=99))
    struct.pack_into(">q", data, 0, base_offset)
    struct.pack_into(">i", data, 12, epoch)
    return int(EntryKind.RECORDS), bytes(data)


# ---- the leader -------------------------------------------------------------------------------


def test_a_marker_takes_one_offset_and_is_a_control_batch_in_the_log(tmp_path: Path, clock: ManualClock) -> None:
    partition = lead(open_partition(tmp_path, clock), epoch=3)
    assert partition.append_records(batch(0), acks=1).base_offset == 0  # offsets 0, 1
    started = event(STARTED, "a", 0, 1, epoch=3)
    assert partition.append_marker(started) == 2
    assert partition.log.log_end_offset == 3
    assert partition.log.high_watermark == 3  # RF=1: committed at once, so applied at once
    assert states(partition) == {"a": STARTED} and partition.remote_segments.known
    assert partition.append_records(batch(2), acks=1).base_offset == 3  # producer state unaffected
    finished = event(FINISHED, "a", 0, 1, epoch=3)
    assert partition.append_marker(finished) == 5
    assert readable_ids(partition) == ["a"]

    entries = partition.log.read(0, 1 << 20, partition.log.high_watermark)
    assert [e.kind for e in entries] == [
        EntryKind.RECORDS,
        EntryKind.REMOTE_SEGMENT,
        EntryKind.RECORDS,
        EntryKind.REMOTE_SEGMENT,
    ]
    for entry, ev in ((entries[1], started), (entries[3], finished)):
        assert entry.base_offset == entry.last_offset  # one offset
        assert entry.header.partition_leader_epoch == 3
        assert decode_marker(entry.data) == ev
        kafka_batch = DefaultRecordBatch(bytes(entry.data))  # as a consumer would parse it
        assert kafka_batch.validate_crc() and kafka_batch.is_control_batch
        assert (kafka_batch.base_offset, kafka_batch.leader_epoch) == (entry.base_offset, 3)
        assert len(list(kafka_batch)) == 1


def _fetch_broker(partition: Partition) -> SimpleNamespace:
    settings = partition.settings
    topics = {"t": Topic("t", uuid.UUID(int=77), 1, {}, settings)}
    hosted = {("t", 0): partition}

    def leader(name: str, index: int) -> Partition:
        hosted[(name, index)].check_leader()
        return hosted[(name, index)]

    return SimpleNamespace(
        catalog=SimpleNamespace(get=topics.get, by_id=lambda topic_id: None),
        replica_manager=SimpleNamespace(
            partitions=hosted, get=lambda name, index: hosted[(name, index)], leader=leader
        ),
        view=SimpleNamespace(partitions={}),
        waiters=FetchWaiters(),
        metrics=BrokerMetrics(),
        stopping=False,
        router=SimpleNamespace(racks=SimpleNamespace(remember=lambda peer, rack: None)),
    )


def test_a_marker_is_served_by_fetch_like_any_batch(tmp_path: Path, clock: ManualClock) -> None:
    """markers.py: a marker "is served to consumers like any other [batch] and they skip it
    ... so the offset it takes never stalls a consumer". Fetch from below it and from its own
    offset returns its control batch; a consumer at a trailing marker reaches the log end
    (were it dropped, the answer from its offset would be empty with HW = offset + 1: lag 1
    forever, e.g. while the offload service appends markers to an idle partition)."""
    partition = lead(open_partition(tmp_path, clock))
    records = bytes(batch(0))
    partition.append_records(memoryview(records), acks=1)
    offset = partition.append_marker(event(STARTED, "a", 0, 1))
    [marker] = [bytes(e.data) for e in partition.log.read(offset, 1 << 20, offset + 1)]

    async def fetch_from(start: int) -> bytes:
        response = await fetch.handle(
            _fetch_broker(partition), SimpleNamespace(api_version=12, peer="p"), fetch_request(("t", 0, start))
        )
        [answer] = response.responses[0].partitions
        assert answer.error_code == 0 and answer.high_watermark == offset + 1
        return bytes(answer.records)

    assert asyncio.run(fetch_from(0)) == records + marker
    assert asyncio.run(fetch_from(offset)) == marker


def test_a_leaders_marker_applies_once_the_high_watermark_passes_it(tmp_path: Path, clock: ManualClock) -> None:
    partition = lead(open_partition(tmp_path, clock), replicas=(0, 1), epoch=2)
    partition.append_records(batch(0), acks=1)  # 0, 1
    assert partition.append_marker(event(STARTED, "a", 0, 1, epoch=2)) == 2
    assert partition.log.high_watermark == 0
    assert partition.remote_segments.segments == []  # in the log, not committed
    assert partition.remote_segments.known and (tmp_path / CHECKPOINT_FILE).exists()
    fetched_by(partition, 1, 2, clock)
    assert partition.log.high_watermark == 2 and partition.remote_segments.segments == []
    fetched_by(partition, 1, 3, clock)
    assert states(partition) == {"a": STARTED}
    assert partition.append_marker(event(FINISHED, "a", 0, 1, epoch=2)) == 3
    assert readable_ids(partition) == [] and partition.remote_segments.tiered_end == 0
    fetched_by(partition, 1, 4, clock)
    assert readable_ids(partition) == ["a"] and partition.remote_segments.tiered_end == 2


def test_finished_planned_in_an_earlier_epoch_is_fenced_on_leader_and_follower(
    tmp_path: Path, clock: ManualClock
) -> None:
    leader = lead(open_partition(tmp_path / "leader", clock), epoch=5)
    leader.append_records(batch(0), acks=1)
    leader.append_marker(event(STARTED, "a", 0, 1, epoch=4))
    leader.append_marker(event(FINISHED, "a", 0, 1, epoch=4))  # the planner led epoch 4
    assert states(leader) == {"a": STARTED} and readable_ids(leader) == []
    follower = follow(open_partition(tmp_path / "follower", clock), epoch=5)
    follower.append_replicated(log_entries(leader), leader.log.high_watermark)
    assert follower.remote_segments.segments == leader.remote_segments.segments
    assert readable_ids(follower) == []


# ---- followers and truncation -----------------------------------------------------------------


def _leader_with_markers(directory: Path, clock: ManualClock) -> Partition:
    """Epoch 2, replicas 0 and 1: records 0-1, STARTED "a" at 2, FINISHED "a" at 3, nothing committed."""
    leader = lead(open_partition(directory, clock), replicas=(0, 1), epoch=2)
    leader.append_records(batch(0), acks=1)
    leader.append_marker(event(STARTED, "a", 0, 1, epoch=2))
    leader.append_marker(event(FINISHED, "a", 0, 1, epoch=2))
    return leader


def test_a_follower_applies_markers_at_the_leaders_high_watermark(tmp_path: Path, clock: ManualClock) -> None:
    leader = _leader_with_markers(tmp_path / "leader", clock)
    follower = follow(open_partition(tmp_path / "follower", clock), epoch=2)
    follower.append_replicated(log_entries(leader), leader_high_watermark=2)
    assert follower.log.log_end_offset == 4 and follower.log.high_watermark == 2
    assert follower.remote_segments.segments == [] and follower.remote_segments.known
    follower.append_replicated([], leader_high_watermark=3)
    assert states(follower) == {"a": STARTED}
    follower.append_replicated([], leader_high_watermark=4)
    assert readable_ids(follower) == ["a"]
    fetched_by(leader, 1, 4, clock)
    assert leader.remote_segments.segments == follower.remote_segments.segments


def test_a_follower_never_applies_a_marker_truncated_before_it_committed(tmp_path: Path, clock: ManualClock) -> None:
    leader = _leader_with_markers(tmp_path / "leader", clock)
    follower = follow(open_partition(tmp_path / "follower", clock), epoch=2)
    follower.append_replicated(log_entries(leader), leader_high_watermark=3)  # STARTED committed, FINISHED not
    assert states(follower) == {"a": STARTED}
    follow(follower, epoch=3, revision=3)  # a new leader, which never had the FINISHED at 3
    follower.truncate_to(3)
    assert follower.log.log_end_offset == 3
    follower.append_replicated([records_entry(3, epoch=3)], leader_high_watermark=5)
    assert follower.log.high_watermark == 5
    assert states(follower) == {"a": STARTED} and readable_ids(follower) == []
    follower.close()
    reopened = open_partition(tmp_path / "follower", clock)
    assert states(reopened) == {"a": STARTED} and readable_ids(reopened) == []


def test_a_deposed_leaders_uncommitted_marker_never_applies(tmp_path: Path, clock: ManualClock) -> None:
    partition = _leader_with_markers(tmp_path, clock)
    fetched_by(partition, 1, 3, clock)  # STARTED committed, FINISHED at 3 not
    assert states(partition) == {"a": STARTED}
    follow(partition, epoch=3)  # broker 1 took over: its log ends at 3
    partition.truncate_to(3)
    partition.append_replicated([records_entry(3, epoch=3), records_entry(5, epoch=3, seq=102)], 7)
    assert partition.log.high_watermark == 7
    assert states(partition) == {"a": STARTED} and readable_ids(partition) == []


def test_a_marker_appended_while_the_high_watermark_lags_still_applies(tmp_path: Path, clock: ManualClock) -> None:
    """Regression (partition.py, append_marker): `_append` advances the high watermark, and
    commit_through then applies any earlier pending marker and moves `applied_through` to the
    new HW, *before* `remote_segments.on_append` is told about the new marker; on_append then
    ignores it as already applied (offset < applied_through). It is committed but never
    applied, not at a replay either (applied_through is persisted past it), while followers
    apply it: leader and followers disagree on the tiered segments.

    Reachable when the HW can move but nobody moved it: an ISR expansion is proposed
    (begin_isr_change: the HW waits for the joining replica), a marker is appended, the
    proposal is refused (replication/isr.py calls abort_isr_change and does not advance the
    HW), then the next marker is appended.

    Input: replicas [0, 1], ISR [0]; expansion to [0, 1] pending; STARTED "a" at 0 (HW 0);
    abort; STARTED "b" at 1 (HW jumps to 2). Expected: "a" and "b" STARTED. Actual: only "a"."""
    partition = lead(open_partition(tmp_path, clock), replicas=(0, 1))
    partition.make_leader(0, PartitionStateRecord(1, [0, 1], 0, 0, [0]), 2)  # broker 1 out of the ISR
    assert partition.leader_state is not None
    partition.leader_state.on_follower_fetch(1, 0, 0, clock.now_ms())
    partition.leader_state.begin_isr_change([0, 1])
    assert partition.append_marker(event(STARTED, "a", 0, 9)) == 0
    assert partition.log.high_watermark == 0 and partition.remote_segments.segments == []
    partition.leader_state.abort_isr_change()
    assert partition.append_marker(event(STARTED, "b", 10, 19)) == 1
    assert partition.log.high_watermark == 2
    assert states(partition) == {"a": STARTED, "b": STARTED}


# ---- log start offset and local retention ------------------------------------------------------


def _tiered_partition(directory: Path, clock: ManualClock) -> Partition:
    """RF=1 leader with SMALL_TIERED settings."""
    return lead(open_partition(directory, clock, **SMALL_TIERED))


def test_log_start_offset_is_the_tiered_start_below_the_local_log(tmp_path: Path, clock: ManualClock) -> None:
    partition = _tiered_partition(tmp_path, clock)
    for seq in range(0, 10, 2):
        partition.append_records(batch(seq), acks=1)
    assert partition.log.segment_base_offsets == [0, 2, 4, 6, 8]
    assert partition.log_start_offset == 0 and partition.remote_retention() is not None
    partition.append_marker(event(STARTED, "a", 0, 5))  # 10
    partition.append_marker(event(FINISHED, "a", 0, 5))  # 11
    assert partition.remote_segments.tiered_end == 6
    assert partition.log_start_offset == 0  # both tiers start at 0
    clock.advance(10_000)  # every record is past local.retention.ms
    assert partition.log.enforce_retention(clock.now_ms(), partition.remote_retention()) == 3
    assert partition.log.log_start_offset == 6 and partition.log.segment_base_offsets[:2] == [6, 8]
    assert partition.log_start_offset == 0  # what is below the local log is read from "a"
    # without readable tiered segments it is the local log's
    partition.append_marker(event(DELETE_STARTED, "a", 0, 5))
    assert partition.remote_segments.start_offset is None
    assert partition.log_start_offset == 6


def test_retention_without_tiered_storage_is_plain(tmp_path: Path, clock: ManualClock) -> None:
    partition = lead(open_partition(tmp_path, clock, **{"segment.bytes": "100", "retention.ms": "1000"}))
    for seq in range(0, 6, 2):
        partition.append_records(batch(seq), acks=1)
    assert partition.remote_retention() is None
    clock.advance(10_000)
    assert partition.log.enforce_retention(clock.now_ms(), partition.remote_retention()) == 2
    assert partition.log_start_offset == partition.log.log_start_offset == 4


def _log(path: Path, segments: int, records: int = 3, ts_step: int = 1_000, hw: int | None = None) -> PartitionLog:
    """`segments` local segments of one batch of `records` offsets each (the last one active);
    batch i has timestamp T0 + i * ts_step."""
    log = open_log(path, config=small_config(segment_bytes=300, retention_ms=-1, retention_bytes=-1))
    for i in range(segments):
        append_batch(log, records, 100, T0 + i * ts_step, set_hw=hw is None)
    if hw is not None:
        log.update_high_watermark(hw)
    assert log.segment_base_offsets == [i * records for i in range(segments)]
    return log


@pytest.mark.parametrize(
    "remote,now,hw,deleted",
    [
        # nothing tiered: nothing goes, however old
        (RemoteRetention(0, 0, 0), T0 + 10**9, None, 0),
        # tiered, but no local limit
        (RemoteRetention(12, -1, -1), T0 + 10**9, None, 0),
        # everything below tiered_end is old: the four segments entirely below 12 go
        (RemoteRetention(12, 1_000, -1), T0 + 10**9, None, 4),
        # tiered_end inside a segment (13: the segment [12, 14] is only partly tiered)
        (RemoteRetention(13, 1_000, -1), T0 + 10**9, None, 4),
        (RemoteRetention(11, 1_000, -1), T0 + 10**9, None, 3),
        # by age: only segments whose largest timestamp is older than 2.5 s (T0, +1 s, +2 s)
        (RemoteRetention(27, 2_500, -1), T0 + 5_000, None, 3),
        # by size: local.retention.bytes 0 would take every sealed segment; tiered ones only go
        (RemoteRetention(6, -1, 0), T0, None, 2),
        # tiered_end above the high watermark: the high watermark bounds it
        (RemoteRetention(27, 1_000, -1), T0 + 10**9, 7, 2),
    ],
)
def test_local_retention_deletes_only_tiered_local_segments(
    tmp_path: Path, remote: RemoteRetention, now: int, hw: int | None, deleted: int
) -> None:
    log = _log(tmp_path, 10, hw=hw)
    bases = log.segment_base_offsets
    assert log.enforce_retention(now, remote) == deleted
    assert log.segment_base_offsets == bases[deleted:]
    assert log.log_start_offset == bases[deleted]
    for base, nxt in zip(bases, bases[1:]):  # what went was tiered; what is tiered and old may stay
        if base < log.log_start_offset:
            assert nxt <= remote.tiered_end
    log.close()


def test_local_retention_by_size_stops_at_the_limit(tmp_path: Path) -> None:
    log = _log(tmp_path, 10)
    one = log.size_bytes // 10
    assert log.enforce_retention(T0, RemoteRetention(27, -1, log.size_bytes - 3 * one)) == 3
    assert log.segment_base_offsets[0] == 9
    log.close()


def test_local_retention_keeps_local_segments_in_a_gap_between_tiered_segments(
    tmp_path: Path, clock: ManualClock
) -> None:
    """Regression (partition.py remote_retention / remote_segments.py tiered_end): RemoteRetention
    gets `tiered_end`, the end of the *last* readable segment, and enforce_retention deletes
    every old local segment below it, as if everything below were tiered. Readable segments
    need not be contiguous: a job with several ranges may commit a later range while an
    earlier one fails (broker/tiering/service.py _run_job commits range by range: a missing manifest,
    the overlap refusal or fencing fails one), and the planner never goes back (it plans from
    tiered_end). The local copy of the untiered gap is then deleted: offsets in it are read
    neither locally (below the log start) nor from tiered storage (segment_for is None).

    Input: RF=1, tiered, local.retention.ms 1 s; records at 0-1, 2-3, 4-5, 6-7 (one local
    segment each); FINISHED "a" [0, 1] and "c" [4, 5], nothing for [2, 3]; clock + 10 s;
    enforce_retention(now, remote_retention()). Expected: the local segment at 2 stays (only
    the one at 0 may go). Actual: segments 0, 2 and 4 are deleted, log start 6; offsets 2-3
    are lost."""
    partition = _tiered_partition(tmp_path, clock)
    for seq in range(0, 8, 2):
        partition.append_records(batch(seq), acks=1)
    for sid, base, end in (("a", 0, 1), ("c", 4, 5)):
        partition.append_marker(event(STARTED, sid, base, end))
        partition.append_marker(event(FINISHED, sid, base, end))
    assert readable_ids(partition) == ["a", "c"] and partition.remote_segments.segment_for(2) is None
    clock.advance(10_000)
    partition.log.enforce_retention(clock.now_ms(), partition.remote_retention())
    assert partition.log.log_start_offset <= 2  # offsets 2-3 are still readable somewhere


# ---- reopening --------------------------------------------------------------------------------


def test_reopening_rebuilds_the_same_remote_segments(tmp_path: Path, clock: ManualClock) -> None:
    partition = lead(open_partition(tmp_path, clock, **TIERED, **{"segment.bytes": "150"}))  # rolls often
    for sid, base in (("a", 0), ("b", 100), ("c", 200)):
        partition.append_records(batch(0, producer_id=base + 1), acks=1)
        partition.append_marker(event(STARTED, sid, base, base + 99))
    partition.append_marker(event(FINISHED, "a", 0, 99, size=1_234))
    partition.append_marker(event(DELETE_STARTED, "c", 200, 299))
    assert len(partition.log.segment_base_offsets) > 3
    before = partition.remote_segments.segments
    assert states(partition) == {"a": FINISHED, "b": STARTED, "c": DELETE_STARTED}
    partition.close()
    reopened = open_partition(tmp_path, clock, **TIERED, **{"segment.bytes": "150"})
    assert reopened.remote_segments.segments == before
    assert readable_ids(reopened) == ["a"] and reopened.remote_segments.size_bytes == 1_234
    assert reopened.log_start_offset == 0


def test_reopening_replays_a_marker_the_checkpoint_does_not_hold(tmp_path: Path, clock: ManualClock) -> None:
    """The checkpoint is written when a marker applies; a crash between the log append and that
    write leaves a committed marker only in the log (here: the older checkpoint put back)."""
    partition = lead(open_partition(tmp_path, clock))
    partition.append_records(batch(0), acks=1)
    partition.append_marker(event(STARTED, "a", 0, 1))
    older = (tmp_path / CHECKPOINT_FILE).read_bytes()
    partition.append_marker(event(FINISHED, "a", 0, 1))
    partition.append_records(batch(2), acks=1)
    partition.close()
    (tmp_path / CHECKPOINT_FILE).write_bytes(older)
    reopened = open_partition(tmp_path, clock)
    assert readable_ids(reopened) == ["a"]
    assert reopened.remote_segments.applied_through == reopened.log.high_watermark


def test_reopening_keeps_an_uncommitted_marker_pending(tmp_path: Path, clock: ManualClock) -> None:
    partition = _leader_with_markers(tmp_path, clock)
    fetched_by(partition, 1, 3, clock)  # STARTED committed, FINISHED at 3 not
    partition.close()
    reopened = open_partition(tmp_path, clock)
    assert states(reopened) == {"a": STARTED}  # replayed, waiting for the high watermark
    follow(reopened, epoch=2)
    reopened.append_replicated([], leader_high_watermark=4)  # the leader committed it meanwhile
    assert readable_ids(reopened) == ["a"]


def test_remote_segments_outlive_the_local_segments_holding_their_markers(tmp_path: Path, clock: ManualClock) -> None:
    partition = _tiered_partition(tmp_path, clock)
    for seq in range(0, 4, 2):
        partition.append_records(batch(seq), acks=1)  # 0-1, 2-3
    partition.append_marker(event(STARTED, "a", 0, 5))  # 4
    partition.append_marker(event(FINISHED, "a", 0, 5))  # 5: "a" holds its own markers
    partition.append_records(batch(4), acks=1)  # 6-7
    partition.append_marker(event(STARTED, "b", 6, 7))  # 8
    partition.append_marker(event(FINISHED, "b", 6, 7))  # 9
    partition.append_records(batch(6), acks=1)  # 10-11: the active segment
    clock.advance(10_000)
    partition.log.enforce_retention(clock.now_ms(), partition.remote_retention())
    assert partition.log.log_start_offset == 8  # the markers of "a" left the local log
    before = partition.remote_segments.segments
    partition.close()
    reopened = open_partition(tmp_path, clock, **SMALL_TIERED)
    assert reopened.remote_segments.segments == before
    assert readable_ids(reopened) == ["a", "b"]
    assert reopened.log_start_offset == 0 and reopened.log.log_start_offset == 8
