"""Mode switches on a real Partition in a temp dir (no sockets): mode markers, the history
that remembers them, which appends a leader accepts on each side of a marker, followers,
truncation, reopening, and what the WAL file manager is told.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from kafka.record.memory_records import MemoryRecords

from broker.clock import ManualClock
from broker.config import load_config
from broker.log import EntryKind
from broker.log.coordinates import make_ref
from broker.log.markers import MarkerFormatError, encode_marker
from broker.log.modes import (
    CHECKPOINT_FILE,
    ModeChange,
    ModeEvent,
    ModeHistory,
    ModeHistoryError,
    decode_mode_marker,
    encode_mode_marker,
)
from broker.metadata.records import PartitionStateRecord
from broker.log_validator import prepare_diskless
from broker.partition import Partition
from broker.partition_ids import TopicPartition
from broker.protocol.batch import parse_header
from broker.protocol.errors import ApiError, ErrorCode
from broker.topic_config import effective
from tests.inprocess import InProcessBroker
from tests.integration.clients import build_batch
from tests.unit.test_partition import CLOCK_START, batch
from tests.unit.test_partition_tiering import event, fetched_by, log_entries
from walfiles.keys import format_wal_id

ONE_BATCH_SEGMENTS = {"segment.bytes": "100"}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(CLOCK_START)


def open_partition(directory: Path, clock: ManualClock, diskless: bool, **overrides: str) -> Partition:
    settings = effective({"diskless.enable": str(diskless).lower(), **overrides}, load_config(environ={}))
    return Partition.open("t", 0, directory, settings, clock, 86_400_000, on_append=lambda p: None)


def lead(partition: Partition, replicas: tuple[int, ...] = (0,), epoch: int = 0) -> Partition:
    partition.make_leader(0, PartitionStateRecord(1, list(replicas), 0, epoch, list(replicas)), 1)
    return partition


def commit(partition: Partition, seq: int, producer_id: int = 7, mode_offset: int | None = None) -> int:
    """A diskless append as the leader's commit path makes it, of a batch its representative
    accepted knowing the partition's mode up to `mode_offset` (default: its last marker);
    returns the base offset."""
    mode_offset = partition.modes.boundary() if mode_offset is None else mode_offset
    [(view, head)] = prepare_diskless(batch(seq, producer_id=producer_id), partition.settings, CLOCK_START)
    return partition.append_coordinates(
        [(head, make_ref(format_wal_id(CLOCK_START, 1, seq), 8, len(view)))], 1, mode_offset
    ).base_offset


def kinds(partition: Partition) -> list[tuple[int, EntryKind]]:
    log = partition.log
    return [(e.base_offset, e.kind) for e in log.read(log.log_start_offset, 1 << 24, log.log_end_offset)]


# -- the marker and the history ------------------------------------------------------------------


def test_a_mode_marker_is_a_control_batch_that_round_trips() -> None:
    data = encode_mode_marker(ModeEvent(1, True, False), CLOCK_START)
    header = parse_header(data)
    assert header.is_control and header.records_count == 1 and header.producer_id == -1
    assert decode_mode_marker(data) == ModeEvent(1, True, False)
    with pytest.raises(MarkerFormatError):  # a remote-segment marker is another control type
        decode_mode_marker(encode_marker(event(0, "s", 0, 1), CLOCK_START))
    with pytest.raises(MarkerFormatError):
        decode_mode_marker(encode_mode_marker(ModeEvent(2, True, False), CLOCK_START))
    for cut in (10, 61, 70, len(data) - 2):
        with pytest.raises(MarkerFormatError):
            decode_mode_marker(data[:cut])


def test_the_history_persists_truncates_and_forgets_markers_above_the_log_end(tmp_path: Path) -> None:
    history = ModeHistory.open(tmp_path, log_end_offset=0)
    assert history.diskless(base=False) is False and history.boundary() == -1
    assert not history.ever_diskless(base=False) and history.ever_diskless(base=True)
    history.record(ModeChange(10, True, 1))
    history.record(ModeChange(20, False, 2))
    assert history.diskless(base=False) is False and history.boundary() == 20 and history.ever_diskless(False)
    with pytest.raises(ValueError):
        history.record(ModeChange(15, True, 2))
    assert ModeHistory.open(tmp_path, log_end_offset=100).changes == history.changes
    # written before the marker's append: a log that ends at 20 never got the second marker
    reopened = ModeHistory.open(tmp_path, log_end_offset=20)
    assert reopened.changes == [ModeChange(10, True, 1)] and reopened.diskless(False) is True
    reopened.truncate_from(10)
    assert ModeHistory.open(tmp_path, 100).changes == []


def test_install_takes_the_leaders_markers_below_its_log_start(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    leader = ModeHistory.open(tmp_path / "a", 0)
    leader.record(ModeChange(5, True, 1))
    leader.record(ModeChange(50, False, 3))
    (tmp_path / "b").mkdir()
    follower = ModeHistory.open(tmp_path / "b", 0)
    follower.install(leader.snapshot(), start_offset=40)  # the marker at 50 arrives with the log
    assert follower.changes == [ModeChange(5, True, 1)]
    assert ModeHistory.open(tmp_path / "b", 100).changes == [ModeChange(5, True, 1)]


def test_a_corrupt_history_is_an_error_not_a_silent_mode_change(tmp_path: Path) -> None:
    history = ModeHistory.open(tmp_path, 0)
    history.record(ModeChange(1, True, 0))
    path = tmp_path / CHECKPOINT_FILE
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ModeHistoryError, match="checksum"):
        ModeHistory.open(tmp_path, 100)
    path.write_bytes(b"SH")
    with pytest.raises(ModeHistoryError, match="truncated"):
        ModeHistory.open(tmp_path, 100)


# -- the leader ------------------------------------------------------------------------------------


def test_classic_to_diskless_seals_the_segment_appends_a_marker_and_refuses_records_after_it(
    tmp_path: Path, clock: ManualClock
) -> None:
    partition = lead(open_partition(tmp_path / "p", clock, diskless=False))
    partition.append_records(batch(0), acks=1)
    assert not partition.diskless
    with pytest.raises(ApiError) as refused:
        commit(partition, 2)
    assert refused.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    boundary = partition.switch_mode(True)
    assert boundary == 2 and partition.diskless and partition.modes.boundary() == 2
    assert partition.log.segment_base_offsets[-1] == 2  # the new mode starts a segment of its own
    assert partition.switch_mode(True) == 2  # already there: nothing appended
    with pytest.raises(ApiError) as refused:
        partition.append_records(batch(2), acks=1)
    assert refused.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER and "diskless" in refused.value.message
    # the producer's sequence carries across the marker: 2 is next, a resend of 0 is a duplicate
    assert commit(partition, 2) == 3
    assert commit(partition, 0) == 0
    assert kinds(partition) == [(0, EntryKind.RECORDS), (2, EntryKind.MODE), (3, EntryKind.COORDINATES)]
    assert partition.may_reference_wal


def test_diskless_to_classic_and_back_keeps_every_range_and_reports_wal_references(
    tmp_path: Path, clock: ManualClock
) -> None:
    partition = lead(open_partition(tmp_path / "p", clock, diskless=True))
    partition.created_diskless = True
    commit(partition, 0)
    partition.switch_mode(False)
    partition.update_settings(effective({"diskless.enable": "false"}, load_config(environ={})))
    partition.append_records(batch(2), acks=1)
    assert partition.may_reference_wal  # classic now, but its log still holds coordinates
    assert partition.wal_references.oldest_created_ms() == CLOCK_START
    partition.switch_mode(True)
    commit(partition, 4)
    assert [k for _o, k in kinds(partition)] == [
        EntryKind.COORDINATES,
        EntryKind.MODE,
        EntryKind.RECORDS,
        EntryKind.MODE,
        EntryKind.COORDINATES,
    ]
    assert [(c.offset, c.diskless) for c in partition.modes.changes] == [(2, False), (5, True)]


def test_a_commit_of_batches_accepted_before_the_last_switch_to_classic_is_refused(
    tmp_path: Path, clock: ManualClock
) -> None:
    """Diskless, classic, diskless again while a WAL object was uploading: its batches were
    accepted before the classic range, so they may not land after it. What the representative
    knew when it accepted them (the recorded marker) tells them apart from later ones."""
    partition = lead(open_partition(tmp_path / "p", clock, diskless=True))
    partition.created_diskless = True
    commit(partition, 0, mode_offset=-1)
    assert partition.switch_mode(False) == 2
    partition.append_records(batch(2), acks=1)
    assert partition.switch_mode(True) == 5
    with pytest.raises(ApiError) as refused:  # accepted before the switch to classic at 2
        commit(partition, 4, mode_offset=-1)
    assert refused.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert "switched to classic at offset 2" in refused.value.message
    assert partition.log.log_end_offset == 6
    assert commit(partition, 4, mode_offset=2) == 6  # accepted knowing of the classic range: after it
    assert commit(partition, 6, mode_offset=5) == 8


def test_a_switch_to_diskless_takes_commits_before_its_marker_is_recorded(tmp_path: Path, clock: ManualClock) -> None:
    """A representative learns of a marker only once it is committed and recorded: batches it
    accepted meanwhile (knowing of no marker, or of the last one) are committed, as before."""
    partition = lead(open_partition(tmp_path / "p", clock, diskless=False))
    partition.append_records(batch(0), acks=1)
    partition.switch_mode(True)
    assert commit(partition, 2, mode_offset=-1) == 3
    partition.switch_mode(False)
    partition.switch_mode(True)
    assert commit(partition, 4, mode_offset=5) == 7  # knew of the switch to classic at 5


def test_a_never_switched_classic_partition_is_not_asked_about_wal_objects(tmp_path: Path, clock: ManualClock) -> None:
    partition = lead(open_partition(tmp_path / "p", clock, diskless=False))
    partition.append_records(batch(0), acks=1)
    assert not partition.may_reference_wal


def test_the_mode_survives_a_restart_and_retention_deleting_the_markers_segment(
    tmp_path: Path, clock: ManualClock
) -> None:
    partition = lead(
        open_partition(tmp_path / "p", clock, diskless=False, **ONE_BATCH_SEGMENTS, **{"retention.ms": "1000"})
    )
    partition.append_records(batch(0), acks=1)
    partition.switch_mode(True)
    commit(partition, 2)
    commit(partition, 4)
    clock.advance(10_000)
    commit(partition, 6)
    partition.log.enforce_retention(clock.now_ms(), None)
    assert partition.log.log_start_offset > partition.modes.boundary()  # the marker's segment is gone
    partition.close()
    reopened = lead(open_partition(tmp_path / "p", clock, diskless=True, **ONE_BATCH_SEGMENTS))
    reopened.created_diskless = False
    assert reopened.diskless and reopened.modes.boundary() == 2
    reopened.close()


# -- followers and truncation ------------------------------------------------------------------------


def test_a_follower_learns_the_mode_from_the_replicated_marker_and_forgets_it_when_truncated(
    tmp_path: Path, clock: ManualClock
) -> None:
    leader = lead(open_partition(tmp_path / "leader", clock, diskless=False), replicas=(0, 1))
    leader.append_records(batch(0), acks=1)
    leader.switch_mode(True)
    follower = open_partition(tmp_path / "follower", clock, diskless=True)
    follower.created_diskless = False
    follower.make_follower(PartitionStateRecord(1, [0, 1], 0, 0, [0, 1]), 1)
    assert not follower.diskless
    follower.append_replicated(log_entries(leader), leader.log.high_watermark)
    assert follower.diskless and follower.modes.boundary() == 2
    fetched_by(leader, 1, follower.log.log_end_offset, clock)
    assert leader.log.high_watermark == 3  # the marker is committed
    follower.truncate_to(2)  # say a new leader never had the marker
    assert not follower.diskless and follower.modes.changes == []
    follower.close()
    assert not open_partition(tmp_path / "follower", clock, diskless=True).modes.changes


def test_a_new_leader_without_the_marker_switches_again_and_one_with_it_does_not(
    tmp_path: Path, clock: ManualClock
) -> None:
    partition = open_partition(tmp_path / "p", clock, diskless=True)
    partition.created_diskless = False
    lead(partition, epoch=1)
    partition.append_records(batch(0), acks=1)
    assert partition.switch_mode(True) == 2
    lead(partition, epoch=2)
    assert partition.switch_mode(True) == 2  # it holds the marker: nothing to do


# -- a whole broker: one connection's batches across a switch and back (sim seed 77047) -------------


async def _until(done: Callable[[], bool], what: str) -> None:
    for _ in range(1000):
        if done():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"not reached within 10 s: {what}")


def _client_records(data: bytes) -> list[tuple[int, bytes]]:
    """(offset, value) of the records a consumer gets from a fetched record set (markers skipped)."""
    records, found = MemoryRecords(bytes(data)), []
    while (batch := records.next_batch()) is not None:
        if not batch.is_control_batch:
            found.extend((record.offset, record.value) for record in batch)
    return found


async def _set_mode(harness: InProcessBroker, topic: str, diskless: bool) -> None:
    """`diskless.enable` set as AlterConfigs sets it; returns once the leader switched its log."""
    broker = harness.broker
    current = broker.catalog.get(topic)
    assert current is not None
    await broker.catalog.set_configs(topic, {**current.configs, "diskless.enable": str(diskless).lower()})
    partition = broker.replica_manager.partitions[(topic, 0)]
    await _until(lambda: partition.diskless == diskless, f"{topic}-0 switched")


def test_a_wal_batch_admitted_before_a_switch_to_classic_never_lands_after_that_classic_range(
    tmp_path: Path,
) -> None:
    """One producer connection to the broker that is both representative and leader (sim
    `mode_switch` seed 77047): batch A is admitted diskless and its WAL object's upload
    stalls; the topic goes classic and B, sent after A on the same connection, is appended;
    the topic goes diskless again, and only then A's upload completes. A Kafka broker handles
    a connection's requests in order, so A is in the log before B or not at all: its commit
    is refused (retriable) rather than appended after B."""

    async def scenario() -> None:
        async with InProcessBroker(tmp_path) as harness:
            client = harness.client()
            assert await client.create_topic("t", 1, {"diskless.enable": "true"}) == ErrorCode.NONE
            released = asyncio.Event()
            upload = harness.objects.put_if_absent

            async def stalled_upload(key: str, data: bytes) -> bool:
                await released.wait()
                return await upload(key, data)

            harness.objects.put_if_absent = stalled_upload  # type: ignore[method-assign]
            first = asyncio.ensure_future(client.produce("t", 0, build_batch([(b"k", b"A")])))
            await _until(lambda: harness.broker.wal.inflight_bytes > 0, "A admitted to the WAL writer")
            try:
                await _set_mode(harness, "t", diskless=False)  # marker at 0
                assert await client.produce("t", 0, build_batch([(b"k", b"B")])) == (ErrorCode.NONE, 1)
                await _set_mode(harness, "t", diskless=True)  # marker at 2
            finally:
                released.set()
            code, _offset = await asyncio.wait_for(first, 10)
            part = await client.fetch("t", 0, 0)
            assert _client_records(part.records) == [(1, b"B")]
            assert code == ErrorCode.NOT_LEADER_OR_FOLLOWER  # not appended: the producer sends it again

    asyncio.run(scenario())


def test_an_idle_tick_looks_at_no_partition_and_a_change_wakes_a_full_pass(tmp_path: Path) -> None:
    """Regression (issue 28, item 4): every 0.5 s tick walked every led partition, most of an
    idle broker's CPU (29% of a core at 20,000 partitions). A tick now looks only at the
    partitions whose switch the last pass left unfinished or whose state changed; a topic
    change still reaches them all, and the leader gauges are read at scrape time."""

    async def scenario() -> None:
        async with InProcessBroker(tmp_path) as harness:
            broker = harness.broker
            switcher = broker.mode_switcher
            assert await harness.client().create_topic("t", 40, {"diskless.enable": "true"}) == ErrorCode.NONE
            await _until(lambda: len(broker.replica_manager.partitions) >= 41, "t and the offsets topic open")
            await switcher.stop()  # the test runs the passes
            visited: list[str] = []
            publish = switcher._publish

            async def counting(partition: Partition, topic: object) -> bool:
                visited.append(partition.topic)
                return await publish(partition, topic)  # type: ignore[arg-type]

            switcher._publish = counting  # type: ignore[method-assign]
            await switcher.reconcile()  # the full pass the topic's creation asked for
            assert visited.count("t") == 40
            visited.clear()
            await switcher.reconcile()
            assert visited == [], "an idle tick looked at partitions"
            # Regression (issue 28): every state or role change woke a full pass, so a failover
            # moving thousands of leaderships made thousands of passes over every partition.
            changed = broker.replica_manager.partitions[TopicPartition("t", 3)]
            for listener in broker.replica_manager._role_listeners:
                listener(changed)
            await switcher.reconcile()
            assert visited == ["t"], "a role change looked at more than its partition"
            visited.clear()
            assert sample(broker.metrics, "shoal_leader_partitions_by_mode", mode="diskless") == 40
            assert sample(broker.metrics, "shoal_partition_diskless", topic="t", partition="7") == 1

            current = broker.catalog.get("t")
            assert current is not None
            await broker.catalog.set_configs("t", {**current.configs, "diskless.enable": "false"})
            for _ in range(100):
                await switcher.reconcile()
                if sample(broker.metrics, "shoal_mode_switch_pending_partitions") == 0:
                    break
                await asyncio.sleep(0.02)
            assert sample(broker.metrics, "shoal_leader_partitions_by_mode", mode="classic") == 41  # and the offsets'
            assert sample(broker.metrics, "shoal_partition_diskless", topic="t", partition="7") == 0

    asyncio.run(scenario())


def sample(metrics: object, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)  # type: ignore[attr-defined]
    return 0.0 if value is None else float(value)
