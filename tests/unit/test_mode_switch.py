"""Mode switches on a real Partition in a temp dir (no sockets): mode markers, the history
that remembers them, which appends a leader accepts on each side of a marker, followers,
truncation, reopening, and what the WAL file manager is told.
"""

from __future__ import annotations

from pathlib import Path

import pytest

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
from broker.protocol.batch import parse_header
from broker.protocol.errors import ApiError, ErrorCode
from broker.topic_config import effective
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


def commit(partition: Partition, seq: int, producer_id: int = 7) -> int:
    """A diskless append as the leader's commit path makes it; returns the base offset."""
    [(view, head)] = prepare_diskless(batch(seq, producer_id=producer_id), partition.settings, CLOCK_START)
    return partition.append_coordinates(
        [(head, make_ref(format_wal_id(CLOCK_START, 1, seq), 8, len(view)))], 1
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
