"""Crash recovery: torn and corrupt tails, lost index files, cost proportional to unflushed data.

A "crash" closes the file descriptors and writes nothing (what kill -9 leaves: the page cache
holds every write). Damage after the crash is done to the files directly.
"""

from __future__ import annotations

import os
import struct
import tempfile
from pathlib import Path

import crc32c
import pytest
from hypothesis import given, settings, strategies as st

from broker.clock import ManualClock
import broker.log.partition_log as partition_log
from broker.log import EntryFormatError, EntryKind, PartitionLog
from broker.log.checkpoint import CHECKPOINT_FILE
from broker.log.segment import Segment, segment_name
from broker.protocol.batch import parse_header
from tests.unit.test_log_support import (
    T0,
    all_entries,
    append_batch,
    crash,
    make_batch,
    open_log,
    segment_files,
    small_config,
)


class Written:
    """What the test appended: per entry (base, last, ts, payload, segment base, position, size)."""

    def __init__(self) -> None:
        self.entries: list[tuple[int, int, int, bytes, int, int, int]] = []

    def append(self, log: PartitionLog, records: int, payload: bytes) -> None:
        ts = T0 + len(self.entries) * 10
        r = append_batch(log, records, payload, ts)
        self.entries.append((r.base_offset, r.last_offset, ts, payload, r.segment_base_offset, r.position, r.size))


def summary(log: PartitionLog) -> list[tuple[int, int, int, bytes]]:
    return [(e.base_offset, e.last_offset, e.header.max_timestamp, bytes(e.payload)) for e in all_entries(log)]


def expected(written: Written, count: int) -> list[tuple[int, int, int, bytes]]:
    return [e[:4] for e in written.entries[:count]]


def files_of(path: Path) -> dict[str, bytes]:
    """Segment files by name, leaving out empty segments (a cut can leave an empty active one)."""
    empty = {p.name[:20] for p in path.iterdir() if p.name.endswith(".log") and p.stat().st_size == 0}
    return {p.name: p.read_bytes() for p in path.iterdir() if p.name != CHECKPOINT_FILE and p.name[:20] not in empty}


def check_recovered(path: Path, cfg, written: Written, survivors: int) -> None:
    """Reopen after damage; the log must hold exactly the first ``survivors`` entries, indexed
    byte for byte as a log that never crashed, and keep assigning dense offsets."""
    log = open_log(path, config=cfg)
    assert summary(log) == expected(written, survivors)
    leo = written.entries[survivors - 1][1] + 1 if survivors else 0
    assert log.log_end_offset == leo
    for base, _last, ts, *_ in written.entries[:survivors]:
        assert log.entry_for_timestamp(ts).base_offset == base
        assert log.read(base, 1, leo)[0].base_offset == base
    log.close()
    with tempfile.TemporaryDirectory() as ref_dir:  # the same entries, never crashed
        ref = open_log(Path(ref_dir), config=cfg)
        for base, last, ts, payload, *_ in written.entries[:survivors]:
            append_batch(ref, last - base + 1, payload, ts)
        ref.close()
        assert files_of(path) == files_of(Path(ref_dir))
    log = open_log(path, config=cfg)
    # A clean close: the reopen reads nothing. A log left empty closes without a checkpoint
    # (there is nothing to remember), so only a non-empty one reports a clean shutdown.
    assert log.last_recovery.scanned_bytes == 0 and (log.last_recovery.clean_shutdown or not survivors)
    for i in range(3):
        assert append_batch(log, 2, os.urandom(20), T0 + 10**6).base_offset == leo + 2 * i
    crash(log)
    log = open_log(path, config=cfg)
    assert summary(log)[:survivors] == expected(written, survivors)
    assert log.log_end_offset == leo + 6
    log.close()


damage = st.one_of(
    st.tuples(st.just("cut"), st.floats(0, 1, exclude_max=True), st.floats(0, 1, exclude_max=True)),
    st.tuples(st.just("flip"), st.floats(0, 1, exclude_max=True), st.floats(0, 1, exclude_max=True)),
)


@settings(max_examples=60, deadline=None)
@given(
    shapes=st.lists(st.tuples(st.integers(1, 4), st.integers(0, 120)), min_size=1, max_size=30),
    segment_bytes=st.integers(150, 900),
    interval=st.integers(0, 300),
    flush_fraction=st.one_of(st.none(), st.floats(0, 1)),
    hit=damage,
)
def test_torn_or_corrupt_tail_is_cut_at_last_intact_entry(shapes, segment_bytes, interval, flush_fraction, hit):
    cfg = small_config(segment_bytes=segment_bytes, index_interval_bytes=interval)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d)
        log = open_log(path, config=cfg)
        written = Written()
        flushed = 0 if flush_fraction is None else int(len(shapes) * flush_fraction)
        for i, (records, size) in enumerate(shapes):
            if i == flushed and flush_fraction is not None:
                log.flush()
            written.append(log, records, os.urandom(size))
        if flushed == len(shapes) and flush_fraction is not None:
            log.flush()
        crash(log)
        if flushed == len(shapes):
            check_recovered(path, cfg, written, len(shapes))
            return
        how, which, where = hit
        k = flushed + int((len(shapes) - flushed) * which)  # only unflushed entries get damaged
        _base, _last, _ts, _payload, seg_base, position, size = written.entries[k]
        seg_path = path / f"{segment_name(seg_base)}.log"
        delta = int(size * where)
        if how == "cut":
            os.truncate(seg_path, position + delta)
        else:
            with open(seg_path, "r+b") as f:
                f.seek(position + delta)
                byte = f.read(1)[0]
                f.seek(position + delta)
                f.write(bytes([byte ^ 0x5A]))
        check_recovered(path, cfg, written, k)


def test_crash_loses_nothing_that_append_returned(tmp_path):
    cfg = small_config(segment_bytes=500)
    log = open_log(tmp_path, config=cfg)
    written = Written()
    for i in range(50):
        written.append(log, 1 + i % 3, os.urandom(i))
    crash(log)
    reopened = open_log(tmp_path, config=cfg)
    assert not reopened.last_recovery.clean_shutdown
    assert reopened.last_recovery.truncated_bytes == 0
    assert summary(reopened) == expected(written, 50)
    reopened.close()


def test_recovery_scans_only_segments_after_the_recovery_point(tmp_path, monkeypatch):
    cfg = small_config(segment_bytes=400, index_interval_bytes=50)
    log = open_log(tmp_path, config=cfg)
    written = Written()
    for _ in range(60):
        written.append(log, 2, os.urandom(60))
    log.flush()
    rseg = log.segment_base_offsets[-1]
    recovery_position = written.entries[-1][5] + written.entries[-1][6]
    for _ in range(12):
        written.append(log, 2, os.urandom(60))
    later = [b for b in log.segment_base_offsets if b > rseg]
    assert len(log.segment_base_offsets) > 10 and later
    crash(log)

    recovered: list[tuple[int, int]] = []
    real_recover = Segment.recover

    def counting_recover(self, position, expected_offset, interval):
        recovered.append((self.base_offset, position))
        return real_recover(self, position, expected_offset, interval)

    monkeypatch.setattr(Segment, "recover", counting_recover)
    reopened = open_log(tmp_path, config=cfg)
    report = reopened.last_recovery
    assert recovered == [(rseg, recovery_position)] + [(b, 0) for b in later]
    rseg_grew = (tmp_path / f"{segment_name(rseg)}.log").stat().st_size > recovery_position
    assert report.scanned_segments == ([rseg] if rseg_grew else []) + later
    unflushed = sum(e[6] for e in written.entries[60:])
    assert report.scanned_bytes == unflushed and report.truncated_bytes == 0
    assert summary(reopened) == expected(written, 72)
    reopened.close()


def test_close_writes_one_checkpoint_the_clean_shutdown_one(tmp_path, monkeypatch):
    """A broker's stop closes every partition; each checkpoint write costs two fsyncs, and the
    close used to write two (the flush's, then the clean-shutdown one): 500 partitions took
    9 s to stop here, 20,000 would outlast any grace period."""
    log = open_log(tmp_path)
    Written().append(log, 2, os.urandom(50))
    written: list[bool] = []
    real = partition_log.write_checkpoint
    monkeypatch.setattr(
        partition_log, "write_checkpoint", lambda d, ckpt: (written.append(ckpt.clean_shutdown), real(d, ckpt))[1]
    )
    log.close()
    assert written == [True]
    monkeypatch.undo()
    assert open_log(tmp_path).last_recovery.clean_shutdown


def test_clean_shutdown_reopen_reads_nothing_and_writes_no_checkpoint(tmp_path, monkeypatch):
    """A clean stop leaves the recovery point at the log end, so the reopen verifies nothing.
    Regression (issue 28): the reopen rewrote the checkpoint (two fsyncs) to clear the
    clean-shutdown marker, 80% of the cost of opening a partition; the marker is now only
    reported, and recovery always verifies from the recovery point."""
    cfg = small_config(segment_bytes=400)
    log = open_log(tmp_path, config=cfg)
    written = Written()
    for _ in range(40):
        written.append(log, 2, os.urandom(50))
    log.close()

    def no_rebuild(*args, **kwargs):
        raise AssertionError("a clean reopen must not rebuild indexes")

    checkpoints = []
    real = partition_log.write_checkpoint
    monkeypatch.setattr(Segment, "rebuild_indexes", no_rebuild)
    monkeypatch.setattr(partition_log, "write_checkpoint", lambda d, ckpt: (checkpoints.append(ckpt), real(d, ckpt))[1])
    reopened = open_log(tmp_path, config=cfg)
    report = reopened.last_recovery
    assert report.clean_shutdown and report.scanned_segments == [] and report.scanned_bytes == 0
    assert checkpoints == []
    assert summary(reopened) == expected(written, 40)
    written.append(reopened, 1, b"after")
    crash(reopened)  # the checkpoint still says clean, but the log grew past its recovery point
    monkeypatch.undo()
    again = open_log(tmp_path, config=cfg)
    assert not again.last_recovery.clean_shutdown
    assert again.last_recovery.scanned_bytes == written.entries[-1][6]
    assert summary(again) == expected(written, 41)
    again.close()


def test_index_entries_past_a_clean_stops_end_are_cut(tmp_path):
    """The clean-shutdown marker is not trusted: index entries the files hold past the
    recovery point (a later run's index write that reached the disk while its log write did
    not, the marker never cleared) are cut at open, so lookups never point past the log;
    the open trusted the marker and found the stray entry only by rescanning the segment."""
    cfg = small_config(segment_bytes=10_000, index_interval_bytes=1)
    log = open_log(tmp_path, config=cfg)
    written = Written()
    for _ in range(5):
        written.append(log, 2, os.urandom(50))
    log.close()
    index = next(tmp_path.glob("*.index"))
    size = index.stat().st_size
    with index.open("ab") as f:
        f.write(struct.pack(">II", 100, 10_000))  # offset base+100 at a position past the file
    reopened = open_log(tmp_path, config=cfg)
    assert index.stat().st_size == size
    assert reopened.last_recovery.scanned_bytes == 0  # cut, not found out by a rescan
    assert reopened.log_end_offset == 10
    assert summary(reopened) == expected(written, 5)
    written.append(reopened, 2, b"next")
    assert summary(reopened) == expected(written, 6)
    reopened.close()


def test_lost_index_files_are_rebuilt(tmp_path):
    cfg = small_config(segment_bytes=400, index_interval_bytes=30)
    log = open_log(tmp_path, config=cfg)
    written = Written()
    for _ in range(50):
        written.append(log, 3, os.urandom(40))
    log.flush()
    for _ in range(5):
        written.append(log, 3, os.urandom(40))
    crash(log)
    index_files = segment_files(tmp_path, ".index") + segment_files(tmp_path, ".timeindex")
    for p in index_files[::2]:
        p.unlink()
    (index_files[1]).write_bytes(index_files[1].read_bytes() + b"\x01\x02\x03")  # not whole entries
    reopened = open_log(tmp_path, config=cfg)
    assert reopened.last_recovery.rebuilt_indexes  # trusted segments whose files were lost
    assert summary(reopened) == expected(written, 55)
    for base, _last, ts, *_ in written.entries:
        assert reopened.entry_for_timestamp(ts).base_offset == base
        assert reopened.read(base + 1, 1, 10**6)[0].base_offset == base
    crash(reopened)
    check_recovered(tmp_path, cfg, written, 55)  # rebuilt files equal a never-crashed log's


def test_index_garbage_after_recovery_point_is_dropped(tmp_path):
    cfg = small_config(segment_bytes=10_000, index_interval_bytes=0)
    log = open_log(tmp_path, config=cfg)
    written = Written()
    for _ in range(10):
        written.append(log, 1, b"x" * 10)
    log.flush()
    crash(log)
    index = tmp_path / f"{segment_name(0)}.index"
    index.write_bytes(index.read_bytes() + struct.pack(">II", 5, 3) + struct.pack(">II", 900, 99999))
    check_recovered(tmp_path, cfg, written, 10)


def test_lost_checkpoint_means_full_scan(tmp_path):
    cfg = small_config(segment_bytes=300)
    log = open_log(tmp_path, config=cfg)
    written = Written()
    for _ in range(20):
        written.append(log, 1, os.urandom(30))
    log.close()
    (tmp_path / CHECKPOINT_FILE).unlink()
    reopened = open_log(tmp_path, config=cfg)
    assert reopened.last_recovery.scanned_segments == reopened.segment_base_offsets
    assert summary(reopened) == expected(written, 20)
    reopened.close()


def test_checkpoint_pointing_past_the_file_falls_back_to_scanning(tmp_path):
    cfg = small_config(segment_bytes=10_000)
    log = open_log(tmp_path, config=cfg)
    written = Written()
    for _ in range(10):
        written.append(log, 1, os.urandom(30))
    log.close()
    cut = written.entries[6][5]
    os.truncate(tmp_path / f"{segment_name(0)}.log", cut)  # e.g. a filesystem that lost the tail
    check_recovered(tmp_path, cfg, written, 6)


def test_unknown_entry_version_stops_recovery_instead_of_truncating(tmp_path):
    cfg = small_config()
    log = open_log(tmp_path, config=cfg)
    append_batch(log, 1, b"old")
    crash(log)
    data = make_batch(1, b"from-the-future")
    entry = bytearray(struct.pack(">IIBB", len(data) + 6, 0, 9, 1) + data)
    struct.pack_into(">q", entry, 10, 1)
    struct.pack_into(">I", entry, 4, crc32c.crc32c(bytes(entry[8:])))
    with open(tmp_path / f"{segment_name(0)}.log", "ab") as f:
        f.write(entry)
    size = (tmp_path / f"{segment_name(0)}.log").stat().st_size
    with pytest.raises(EntryFormatError, match="version 9"):
        open_log(tmp_path, config=cfg)
    assert (tmp_path / f"{segment_name(0)}.log").stat().st_size == size  # nothing was cut


def test_orphan_index_files_are_removed(tmp_path):
    cfg = small_config(segment_bytes=300)
    log = open_log(tmp_path, config=cfg)
    for _ in range(5):
        append_batch(log, 1, 100)
    log.close()
    (tmp_path / f"{segment_name(12345)}.index").write_bytes(b"")
    (tmp_path / f"{segment_name(12345)}.timeindex").write_bytes(b"")
    (tmp_path / "producer-state.snapshot").write_bytes(b"not ours")
    reopened = open_log(tmp_path, config=cfg)
    names = {p.name for p in tmp_path.iterdir()}
    assert f"{segment_name(12345)}.index" not in names and "producer-state.snapshot" in names
    reopened.close()


def test_truncation_is_durable_across_crash(tmp_path):
    cfg = small_config(segment_bytes=400)
    log = open_log(tmp_path, config=cfg)
    written = Written()
    for _ in range(30):
        written.append(log, 2, os.urandom(40))
    log.flush()
    log.truncate_to(20)
    written.entries = written.entries[:10]
    for _ in range(3):
        written.append(log, 1, os.urandom(10))
    crash(log)
    reopened = open_log(tmp_path, config=cfg)
    assert summary(reopened) == expected(written, 13)
    assert reopened.log_end_offset == 23
    reopened.close()


def test_empty_log_reopen_and_restart_offset(tmp_path):
    clock = ManualClock(T0)
    log = PartitionLog.open(tmp_path / "p0", small_config(), clock)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark, log.size_bytes) == (0, 0, 0, 0)
    log.close()
    assert not (tmp_path / "p0" / CHECKPOINT_FILE).exists()  # never written to: its close writes nothing
    again = PartitionLog.open(tmp_path / "p0", small_config(), clock)
    assert again.last_recovery.scanned_bytes == 0 and again.log_end_offset == 0
    data = make_batch(4, b"abc")
    assert again.append(EntryKind.RECORDS, parse_header(data), data, 0).last_offset == 3
    again.close()


def test_a_log_never_written_to_closes_without_a_write(tmp_path, monkeypatch):
    """Regression (issue 28): a broker stopping right after creating thousands of partitions
    spent three fsyncs on each new log's close (the directory, the checkpoint, the directory
    again), 4 s on the event loop for 2,000 here. An empty log with no checkpoint needs none:
    its directory opens as the same log, even if the segment files' names were lost."""
    clock = ManualClock(T0)
    log = PartitionLog.open(tmp_path / "p0", small_config(), clock)
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real_fsync(fd))
    log.close()
    assert synced == [] and not (tmp_path / "p0" / CHECKPOINT_FILE).exists()
    for lost in list((tmp_path / "p0").iterdir()):  # a power loss before the directory was synced
        lost.unlink()
    again = PartitionLog.open(tmp_path / "p0", small_config(), clock)
    assert (again.log_start_offset, again.log_end_offset, again.high_watermark) == (0, 0, 0)
    data = make_batch(2, b"abc")
    assert again.append(EntryKind.RECORDS, parse_header(data), data, 0).base_offset == 0
    again.close()
    assert synced and (tmp_path / "p0" / CHECKPOINT_FILE).exists()  # written to: its close persists it
