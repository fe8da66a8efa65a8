"""Producer-state snapshots: format, names, atomic files, restart = snapshot + tail replay."""

from __future__ import annotations

import os
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from broker.clock import ManualClock
from broker.producers import (
    CorruptSnapshotError,
    DuplicateBatch,
    ProducerStateManager,
    SnapshotError,
    UnknownSnapshotVersionError,
)
from broker.producers import snapshot as snap
from broker.protocol.batch import NO_PRODUCER_ID, NO_SEQUENCE, BatchHeader
from broker.protocol.errors import ErrorCode

from .producer_state_support import T0, Log, hdr


def state_of(mgr: ProducerStateManager) -> dict:
    return {pid: (e.producer_epoch, e.last_timestamp_ms, list(e.batches)) for pid, e in mgr.active_producers().items()}


def restart(clock: ManualClock, directory: Path, log: Log, max_offset: int | None = None) -> ProducerStateManager:
    """A new manager: newest snapshot, then replay of the log tail from its offset."""
    mgr = ProducerStateManager(clock)
    start = mgr.load_latest_snapshot(directory, log.next_offset if max_offset is None else max_offset)
    for h, base in log.entries:
        if base + h.last_offset_delta >= start:
            mgr.replay(h, base)
    return mgr


# --- names -----------------------------------------------------------------------------------


@given(st.integers(0, 2**63 - 1))
def test_snapshot_name_round_trip(offset: int) -> None:
    name = snap.format_snapshot_name(offset)
    assert len(name) == 20 + len(".snapshot")
    assert snap.parse_snapshot_name(name) == offset


@given(st.integers(0, 10**12), st.integers(0, 10**12))
def test_snapshot_names_sort_numerically(a: int, b: int) -> None:
    assert (snap.format_snapshot_name(a) < snap.format_snapshot_name(b)) == (a < b)


@pytest.mark.parametrize(
    "name",
    [
        "1.snapshot",
        "0000000000000000001x.snapshot",
        "00000000000000000001.snapshot.tmp",
        "00000000000000000001.log",
        "000000000000000000001.snapshot",
    ],
)
def test_parse_rejects_other_names(name: str) -> None:
    assert snap.parse_snapshot_name(name) is None


def test_negative_offset_rejected() -> None:
    with pytest.raises(ValueError):
        snap.format_snapshot_name(-1)


# --- file format -----------------------------------------------------------------------------


def test_round_trip_keeps_all_five_batches(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    log = Log(ProducerStateManager(clock))
    seq = 0
    for i in range(7):
        log.produce(hdr(seq=seq, count=2, ts=T0 + i))
        seq += 2
    log.produce(hdr(pid=9, epoch=4, seq=100))
    path = log.mgr.take_snapshot(tmp_path, log.next_offset)
    assert path.name == f"{log.next_offset:020d}.snapshot"
    assert not list(tmp_path.glob("*.tmp"))

    mgr = ProducerStateManager(clock)
    assert mgr.load_latest_snapshot(tmp_path, log.next_offset) == log.next_offset
    assert state_of(mgr) == state_of(log.mgr)
    # every retained batch is still recognised after the restart
    for i, s in enumerate(range(4, 14, 2)):
        assert mgr.check(hdr(seq=s, count=2)) == DuplicateBatch(s, s + 1, T0 + i + 2)
    assert mgr.check(hdr(seq=2, count=2)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_empty_state_round_trip(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    ProducerStateManager(clock).take_snapshot(tmp_path, 0)
    mgr = ProducerStateManager(clock)
    assert mgr.load_latest_snapshot(tmp_path, 10) == 0
    assert mgr.producer_count == 0


def _write_valid(tmp_path: Path, offset: int = 5) -> Path:
    log = Log(ProducerStateManager(ManualClock(T0)))
    for s in range(offset):
        log.produce(hdr(seq=s))
    return log.mgr.take_snapshot(tmp_path, offset)


def test_unknown_version_is_a_clear_error(tmp_path: Path) -> None:
    path = _write_valid(tmp_path)
    data = bytearray(path.read_bytes())
    struct.pack_into(">H", data, 4, 99)
    path.write_bytes(bytes(data))
    with pytest.raises(UnknownSnapshotVersionError, match="version 99 is not supported"):
        snap.read_snapshot(path)
    # the manager refuses too, and leaves the file for the operator
    with pytest.raises(UnknownSnapshotVersionError):
        ProducerStateManager(ManualClock(T0)).load_latest_snapshot(tmp_path, 100)
    assert path.exists()


@pytest.mark.parametrize("damage", ["flip_body", "truncate", "bad_magic", "empty", "garbage_body"])
def test_corrupt_snapshot_is_a_clear_error(tmp_path: Path, damage: str) -> None:
    path = _write_valid(tmp_path)
    data = bytearray(path.read_bytes())
    if damage == "flip_body":
        data[-1] ^= 0xFF
    elif damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "bad_magic":
        data[0:4] = b"NOPE"
    elif damage == "empty":
        data = bytearray()
    elif damage == "garbage_body":
        body = b"\xc1\xc1\xc1"  # msgpack "never used" bytes, with a valid CRC
        import crc32c

        data = bytearray(struct.pack(">4sHI", b"SHPS", 1, crc32c.crc32c(body)) + body)
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptSnapshotError) as info:
        snap.read_snapshot(path)
    assert str(path) in str(info.value)
    assert isinstance(info.value, SnapshotError)


def test_offset_must_match_name(tmp_path: Path) -> None:
    path = _write_valid(tmp_path, 5)
    renamed = path.with_name(snap.format_snapshot_name(6))
    os.rename(path, renamed)
    with pytest.raises(CorruptSnapshotError, match="name says 6"):
        snap.read_snapshot(renamed)


def test_corrupt_newest_falls_back_to_older(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    log = Log(ProducerStateManager(clock))
    for s in range(3):
        log.produce(hdr(seq=s))
    log.mgr.take_snapshot(tmp_path, 3)
    for s in range(3, 6):
        log.produce(hdr(seq=s))
    newest = log.mgr.take_snapshot(tmp_path, 6)
    newest.write_bytes(b"SHPS\x00\x01garbage")
    mgr = restart(clock, tmp_path, log)
    assert not newest.exists()
    assert [o for o, _ in snap.list_snapshots(tmp_path)] == [3]
    assert state_of(mgr) == state_of(log.mgr)


# --- manager file operations -----------------------------------------------------------------


def test_load_removes_snapshots_above_max_offset(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    log = Log(ProducerStateManager(clock))
    for s in range(9):
        log.produce(hdr(seq=s))
        if s in (2, 5, 8):
            log.mgr.take_snapshot(tmp_path, s + 1)
    mgr = ProducerStateManager(clock)
    assert mgr.load_latest_snapshot(tmp_path, 7) == 6
    assert [o for o, _ in snap.list_snapshots(tmp_path)] == [3, 6]
    assert mgr.entry(1000).last_seq == 5
    assert mgr.load_latest_snapshot(tmp_path, 2) == 0
    assert snap.list_snapshots(tmp_path) == [] and mgr.producer_count == 0


def test_load_with_no_directory(tmp_path: Path) -> None:
    assert ProducerStateManager(ManualClock(T0)).load_latest_snapshot(tmp_path / "missing", 10) == 0


def test_stray_tmp_files_ignored_and_removed(tmp_path: Path) -> None:
    _write_valid(tmp_path, 5)
    stray = tmp_path / (snap.format_snapshot_name(9) + ".tmp")
    stray.write_bytes(b"half a write")
    assert [o for o, _ in snap.list_snapshots(tmp_path)] == [5]
    assert ProducerStateManager(ManualClock(T0)).load_latest_snapshot(tmp_path, 100) == 5
    assert not stray.exists()


def test_delete_snapshots_before(tmp_path: Path) -> None:
    mgr = ProducerStateManager(ManualClock(T0))
    for offset in (0, 10, 20, 30):
        mgr.take_snapshot(tmp_path, offset)
    mgr.delete_snapshots_before(tmp_path, 20)
    assert [o for o, _ in snap.list_snapshots(tmp_path)] == [20, 30]


def test_take_snapshot_below_map_end_offset_rejected(tmp_path: Path) -> None:
    log = Log(ProducerStateManager(ManualClock(T0)))
    log.produce(hdr(seq=0, count=3))
    with pytest.raises(ValueError, match="below map_end_offset"):
        log.mgr.take_snapshot(tmp_path, 2)


def test_load_drops_expired_producers(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    log = Log(ProducerStateManager(clock, expiration_ms=1000))
    log.produce(hdr(pid=1, ts=T0))
    log.produce(hdr(pid=2, ts=T0 + 500))
    log.mgr.take_snapshot(tmp_path, 2)
    clock.advance(1000)
    mgr = ProducerStateManager(clock, expiration_ms=1000)
    mgr.load_latest_snapshot(tmp_path, 2)
    assert set(mgr.active_producers()) == {2}


def test_replay_skips_entries_already_in_snapshot(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    log = Log(ProducerStateManager(clock))
    for s in range(4):
        log.produce(hdr(seq=s))
    log.mgr.take_snapshot(tmp_path, 4)
    log.produce(hdr(seq=4))
    mgr = ProducerStateManager(clock)
    mgr.load_latest_snapshot(tmp_path, log.next_offset)
    for h, base in log.entries:  # replaying the whole log is harmless
        mgr.replay(h, base)
    assert state_of(mgr) == state_of(log.mgr)
    assert mgr.map_end_offset == log.next_offset


def test_truncate_and_reload(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    log = Log(ProducerStateManager(clock))
    for s in range(6):
        log.produce(hdr(seq=s))
        if s == 2:
            log.mgr.take_snapshot(tmp_path, 3)
    expected = ProducerStateManager(clock)
    for h, base in log.entries[:4]:
        expected.replay(h, base)
    # the log loses its last two entries (offsets 4, 5)
    mgr = log.mgr
    start = mgr.truncate_and_reload(tmp_path, log_start_offset=0, log_end_offset=4)
    assert start == 3
    for h, base in log.entries[start:4]:
        mgr.replay(h, base)
    assert state_of(mgr) == state_of(expected)
    assert mgr.check(hdr(seq=4)) is None  # the truncated batch may be resent
    # already in step: nothing to reload
    assert mgr.truncate_and_reload(tmp_path, 0, 4) == 4


def test_truncate_and_reload_without_snapshot_starts_at_log_start(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    log = Log(ProducerStateManager(clock))
    for s in range(3):
        log.produce(hdr(seq=s))
    assert log.mgr.truncate_and_reload(tmp_path, log_start_offset=1, log_end_offset=2) == 1
    assert log.mgr.producer_count == 0 and log.mgr.map_end_offset == 1


# --- restart equivalence (hypothesis) ---------------------------------------------------------


@st.composite
def producer_traffic(draw: st.DrawFn) -> list[BatchHeader]:
    """Batches from a few producers: in order, retries, gaps, epoch bumps, stale epochs."""
    n = draw(st.integers(1, 60))
    seqs: dict[int, int] = {}
    epochs: dict[int, int] = {}
    sent: dict[int, list[tuple[int, int, int]]] = {}
    out = []
    for i in range(n):
        pid = draw(st.sampled_from([1, 2, 3, NO_PRODUCER_ID]))
        ts = T0 + draw(st.integers(-10_000, 10_000))
        count = draw(st.integers(1, 4))
        if pid == NO_PRODUCER_ID:
            out.append(hdr(pid=pid, epoch=-1, seq=NO_SEQUENCE, count=count, ts=ts))
            continue
        kind = draw(st.sampled_from(["next", "next", "next", "retry", "gap", "bump", "stale"]))
        epoch = epochs.get(pid, 0)
        seq = seqs.get(pid, 0)
        if kind == "retry" and sent.get(pid):
            epoch, seq, count = draw(st.sampled_from(sent[pid]))
        elif kind == "gap":
            seq += draw(st.integers(1, 5))
        elif kind == "bump":
            epoch += 1
            seq = draw(st.sampled_from([0, 0, seq]))
        elif kind == "stale":
            epoch = max(0, epoch - 1)
        if kind in ("next", "bump"):
            epochs[pid] = max(epochs.get(pid, 0), epoch)
            seqs[pid] = (seq + count) % 2**31
        sent.setdefault(pid, []).append((epoch, seq, count))
        out.append(hdr(pid=pid, epoch=epoch, seq=seq, count=count, ts=ts))
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(producer_traffic(), st.data())
def test_snapshot_plus_tail_replay_equals_never_restarting(
    tmp_path: Path, traffic: list[BatchHeader], data: st.DataObject
) -> None:
    directory = Path(tempfile.mkdtemp(dir=tmp_path))  # fresh per example
    clock = ManualClock(T0)
    log = Log(ProducerStateManager(clock))
    snap_at = data.draw(st.integers(0, len(traffic)))
    for i, h in enumerate(traffic):
        if i == snap_at:
            log.mgr.take_snapshot(directory, log.next_offset)
        log.produce(h)
    if snap_at == len(traffic):
        log.mgr.take_snapshot(directory, log.next_offset)

    restarted = restart(clock, directory, log)
    assert state_of(restarted) == state_of(log.mgr)
    assert restarted.map_end_offset == log.mgr.map_end_offset
    # and both answer the next batches identically
    for h in traffic[-5:] + [hdr(pid=p, epoch=e, seq=s) for p in (1, 2, 3) for e in (0, 1, 2) for s in (0, 1, 7)]:
        assert restarted.check(h) == log.mgr.check(h)

    # replaying the whole log without any snapshot gives the same state as well
    fresh = ProducerStateManager(clock)
    for h, base in log.entries:
        fresh.replay(h, base)
    assert state_of(fresh) == state_of(log.mgr)
