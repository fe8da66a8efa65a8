"""The leader-epoch checkpoint is written without fsync and recovered from the log (issue 28).

A leader election wrote it with two fsyncs on the event loop; 10,000 partitions changing
leader cost 20,000 of them and most of a failover's time. Now a change only replaces the file
(a process crash keeps it), the log's flush syncs it before the recovery point moves past its
entries, and what a power loss takes (an older file, or a torn one) is rebuilt from the batch
headers the log's recovery verifies. The power losses here are made by hand: the file goes
back to what its last sync left, or is cut short, and the log loses its unflushed state.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from broker.clock import ManualClock
from broker.log.epochs import CHECKPOINT_FILE, EpochEntry, LeaderEpochCache
from broker.metadata.records import PartitionStateRecord
from broker.partition import Partition
from tests.unit.test_partition_tiering import CLOCK_START
from tests.unit.test_restart_inside_a_batch import open_replica, produce

E = EpochEntry
PID = 9


def lead(partition: Partition, epoch: int) -> None:
    partition.make_leader(0, PartitionStateRecord(1, [0], 0, epoch, [0]), epoch)


def count_fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = os.fsync

    def counted(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counted)
    return calls


def crash(partition: Partition) -> None:
    """kill -9: nothing flushed or closed (the page cache keeps what was written)."""
    partition.log._close_without_flush()


def test_an_election_and_a_new_epochs_first_batch_cost_no_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    partition = open_replica(tmp_path, ManualClock(CLOCK_START), diskless=False)
    fsyncs = count_fsyncs(monkeypatch)
    lead(partition, 3)
    assert fsyncs == []
    assert LeaderEpochCache.open(tmp_path).entries() == [E(3, 0)]  # written, for a process crash
    partition.close()


def test_a_flush_syncs_the_epochs_before_the_recovery_point_moves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    partition = open_replica(tmp_path, ManualClock(CLOCK_START), diskless=False)
    lead(partition, 1)
    produce(partition, 0, 2, PID)
    events: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        name = os.readlink(f"/proc/self/fd/{fd}")
        events.append(Path(name).name)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    partition.log.flush()
    assert CHECKPOINT_FILE in events
    # the epoch file before the log checkpoint that moves the recovery point
    assert events.index(CHECKPOINT_FILE) < max(i for i, name in enumerate(events) if name.endswith(".tmp"))
    events.clear()
    partition.log.flush()
    assert CHECKPOINT_FILE not in events  # synced once per change
    partition.close()


@pytest.mark.parametrize("diskless", [False, True], ids=["classic", "diskless"])
def test_epochs_a_power_loss_took_come_back_from_the_log(tmp_path: Path, diskless: bool) -> None:
    clock = ManualClock(CLOCK_START)
    partition = open_replica(tmp_path, clock, diskless=diskless)
    lead(partition, 1)
    produce(partition, 0, 2, PID)  # [0, 1] in epoch 1
    partition.log.flush()  # recovery point 2; the file as synced holds (1, 0)
    synced = (tmp_path / CHECKPOINT_FILE).read_bytes()
    lead(partition, 4)
    produce(partition, 2, 3, PID)  # [2, 4] in epoch 4
    lead(partition, 6)
    produce(partition, 5, 1, PID)  # [5] in epoch 6
    crash(partition)
    (tmp_path / CHECKPOINT_FILE).write_bytes(synced)  # the power loss took the unsynced writes

    reopened = open_replica(tmp_path, clock, diskless=diskless)
    assert reopened.log.log_end_offset == 6
    assert reopened.epochs.entries() == [E(1, 0), E(4, 2), E(6, 5)]
    assert LeaderEpochCache.open(tmp_path).entries() == [E(1, 0), E(4, 2), E(6, 5)]
    reopened.close()


@pytest.mark.parametrize("clean", [True, False], ids=["clean-stop", "kill-9"])
def test_an_epoch_with_no_batch_is_dropped_only_after_an_unclean_stop(tmp_path: Path, clean: bool) -> None:
    """Kafka's load truncates the cache at the log end after an unclean stop: an epoch nothing
    was written in says nothing about the log."""
    clock = ManualClock(CLOCK_START)
    partition = open_replica(tmp_path, clock, diskless=False)
    lead(partition, 1)
    produce(partition, 0, 2, PID)
    lead(partition, 2)
    if clean:
        partition.close()
    else:
        crash(partition)
    reopened = open_replica(tmp_path, clock, diskless=False)
    assert reopened.epochs.entries() == ([E(1, 0), E(2, 2)] if clean else [E(1, 0)])
    reopened.close()


@pytest.mark.parametrize("cut", [0, 1, 4, 7], ids=lambda c: f"cut-at-{c}")
def test_a_torn_checkpoint_is_rebuilt_from_the_whole_log(tmp_path: Path, cut: int) -> None:
    clock = ManualClock(CLOCK_START)
    partition = open_replica(tmp_path, clock, diskless=False)
    lead(partition, 1)
    produce(partition, 0, 2, PID)
    lead(partition, 5)
    produce(partition, 2, 3, PID)
    partition.close()
    path = tmp_path / CHECKPOINT_FILE
    path.write_bytes(path.read_bytes()[:cut])  # what a power loss leaves on some filesystems

    reopened = open_replica(tmp_path, clock, diskless=False)
    assert reopened.epochs.entries() == [E(1, 0), E(5, 2)]
    assert LeaderEpochCache.open(tmp_path).entries() == [E(1, 0), E(5, 2)]
    reopened.close()


def test_a_kafka_checkpoint_is_still_refused_not_rebuilt(tmp_path: Path) -> None:
    clock = ManualClock(CLOCK_START)
    open_replica(tmp_path, clock, diskless=False).close()
    (tmp_path / CHECKPOINT_FILE).write_text("0\n1\n0 0\n")
    with pytest.raises(ValueError, match="version 0 is not supported"):
        open_replica(tmp_path, clock, diskless=False)


def test_starting_over_syncs_the_emptied_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """restart_at puts the recovery point at the new start: a rebuild would keep the old
    log's entries below it, so emptying the cache is made durable at once."""
    partition = open_replica(tmp_path, ManualClock(CLOCK_START), diskless=False)
    lead(partition, 1)
    produce(partition, 0, 2, PID)
    partition.make_follower(PartitionStateRecord(1, [0, 1], 1, 2, [1]), 2)
    synced: list[Path] = []
    import broker.log.epochs as epochs_module

    real = epochs_module.sync_file
    monkeypatch.setattr(epochs_module, "sync_file", lambda path: (synced.append(path), real(path)))
    partition.restart_at(100)
    assert synced == [tmp_path / CHECKPOINT_FILE]
    assert LeaderEpochCache.open(tmp_path).entries() == []
    partition.close()
