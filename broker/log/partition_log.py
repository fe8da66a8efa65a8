"""The partition log: one partition's append-only local log of entries, in segments.

Owns offsets (log start, high watermark, log end), segment rolling, the sparse indexes, reads
by offset and by timestamp, truncation, retention, flushing and crash recovery. Entries are
opaque batches (entry.py); nothing here iterates records.

Threading: every method is meant for the partition's owner thread (the event loop), except
flush(), which may run in a worker thread at the same time. Appends and flushes share a short
state lock; the flush captures what to sync under it and fsyncs without it. Operations that
delete or cut files (truncate_to, delete_records_before, enforce_retention, close) also take
the flush lock, so they wait for an in-progress flush instead of racing its file descriptors.

Durability: an append is one os.writev into the page cache, so a kill -9 right after append()
returns loses nothing. Only flush() makes data survive a power loss; it advances the recovery
point, and recovery after an unclean stop verifies (CRC32C) only what lies after it.
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from broker.atomic_write import TMP_SUFFIX, fsync_directory
from broker.clock import Clock
from broker.log.checkpoint import (
    CHECKPOINT_FILE,
    CHECKPOINT_VERSION,
    LogCheckpoint,
    read_checkpoint,
    write_checkpoint,
)
from broker.log.config import LogConfig
from broker.log.entry import (
    HEAD_SIZE,
    LENGTH_SIZE,
    PREFIX_SIZE,
    EntryKind,
    check_version,
    encode_head,
    kind_of,
    unpack_prefix,
)
from broker.log.index import MAX_RELATIVE_OFFSET
from broker.log.open_files import OpenFiles
from broker.log.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    NO_TIMESTAMP,
    TIMEINDEX_SUFFIX,
    TXNINDEX_SUFFIX,
    Segment,
    parse_segment_name,
)
from broker.protocol.batch import BATCH_HEADER_SIZE, BatchFormatError, BatchHeader, parse_header
from broker.protocol.errors import ApiError, ErrorCode

log = logging.getLogger(__name__)

READ_CHUNK_MAX_BYTES = 4 << 20  # largest single pread of a read() (an entry larger than this is read whole)
ITER_CHUNK_BYTES = 1 << 20  # bytes per read() while iter_entries() replays the log
_NEVER = 2**63 - 1  # maintenance_due_ms of a log with nothing to roll or flush


class OffsetOutOfRangeError(ApiError):
    """A read or DeleteRecords asked for an offset outside the log (wire code OFFSET_OUT_OF_RANGE)."""

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int, what: str = "offset") -> None:
        super().__init__(
            ErrorCode.OFFSET_OUT_OF_RANGE,
            f"{what} {offset} is out of range: the log holds [{log_start_offset}, {log_end_offset}]",
        )
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class LogClosedError(RuntimeError):
    """The log was closed; the partition is being unloaded."""


@dataclass(slots=True)
class AppendResult:
    base_offset: int
    last_offset: int
    segment_base_offset: int  # segment the entry went to
    position: int  # file position of the entry in that segment
    size: int  # bytes written, framing included
    log_start_offset: int
    rolled: bool  # a new segment was started for this entry


@dataclass(slots=True)
class LogEntry:
    kind: EntryKind
    header: BatchHeader  # with the assigned base_offset
    data: memoryview  # 61-byte header + payload; for RECORDS the exact Kafka batch (baseOffset patched)

    @property
    def payload(self) -> memoryview:
        return self.data[BATCH_HEADER_SIZE:]

    @property
    def base_offset(self) -> int:
        return self.header.base_offset

    @property
    def last_offset(self) -> int:
        return self.header.base_offset + self.header.last_offset_delta

    @property
    def size(self) -> int:
        return len(self.data)


@dataclass(frozen=True, slots=True)
class RemoteRetention:
    """Local retention of a partition with tiered segments: what they supersede (offsets below
    `tiered_end`) may go once past these limits (local.retention.ms/bytes, resolved)."""

    tiered_end: int
    local_retention_ms: int
    local_retention_bytes: int


@dataclass(frozen=True, slots=True)
class SealedSegment:
    """What the offload planner needs of a sealed local segment."""

    base_offset: int
    next_offset: int
    batch_bytes: int
    largest_timestamp: int


@dataclass(slots=True)
class RecoveryReport:
    """What open() had to do; tests and metrics use it to check recovery stays proportional."""

    clean_shutdown: bool = False
    scanned_segments: list[int] = field(default_factory=list)  # bases of segments verified by CRC scan
    scanned_bytes: int = 0
    truncated_bytes: int = 0
    deleted_segments: list[int] = field(default_factory=list)  # dropped because they followed corruption
    rebuilt_indexes: list[int] = field(default_factory=list)  # trusted segments whose index files were bad
    verified_from: int = 0  # the offset verification started at: what lies below it was flushed


class PartitionLog:
    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        clock: Clock,
        on_segment_roll: Callable[[int], object] | None,
        open_files: OpenFiles | None = None,
    ) -> None:
        self._dir = directory
        self._files = open_files if open_files is not None else OpenFiles(None)  # shared by the broker's logs
        self._config = config
        self._clock = clock
        self._on_segment_roll = on_segment_roll
        self._segments: list[Segment] = []
        self._bases: list[int] = []
        self._leo = 0
        self._log_start = 0
        self._hw = 0
        self._recovery_point = 0
        self._recovery_segment_base = 0
        self._recovery_position = 0
        self._last_flush_ms = clock.now_ms()
        self._maintenance_due_ms = 0  # see maintenance_due_ms(); 0: look at the log now
        self._dir_dirty = False
        self._closing = False  # close() started: no more changes
        self._closed = False  # close() finished its flush: flush() is a no-op
        self._lock = threading.RLock()  # state; held briefly by append and by flush's capture
        self._flush_lock = threading.Lock()  # one flush at a time; file deletions wait for it
        self._checkpoint_lock = threading.Lock()  # checkpoint files are written in snapshot order
        # What the checkpoint file holds (read at open, or last written): a close of a partition
        # nothing changed writes none (issue 28: two fsyncs each, 20,000 partitions at a stop)
        self._checkpoint_on_disk: LogCheckpoint | None = None
        self.last_recovery = RecoveryReport()
        # Called with the first offset dropped, after truncate_to/restart_at cut entries off
        # the end: anything derived from entries at or above it (wal_references.py) is stale.
        self.truncation_listeners: list[Callable[[int], object]] = []
        # Called by flush, possibly on a worker thread, after the data is synced and before the
        # recovery point moves: state derived from the entries that is written without fsync
        # (the leader-epoch cache) must be durable before recovery stops looking at them.
        self.before_recovery_point_moves: list[Callable[[], object]] = []

    # ---- open / recovery ---------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        clock: Clock,
        on_segment_roll: Callable[[int], object] | None = None,
        open_files: OpenFiles | None = None,
    ) -> "PartitionLog":
        """Open the log in ``directory``, creating it or recovering it after any kind of stop.
        `open_files`: the broker's bound on open segment files (open_files.py)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self = cls(directory, config, clock, on_segment_roll, open_files)
        ckpt = read_checkpoint(directory)
        self._checkpoint_on_disk = ckpt
        self._recover(ckpt)
        return self

    def _recover(self, ckpt: LogCheckpoint | None) -> None:
        directory, cfg, now = self._dir, self._config, self._clock.now_ms()
        report = self.last_recovery
        bases = self._list_segments()
        if not bases:
            base = max(ckpt.log_start_offset, ckpt.recovery_point) if ckpt else 0
            seg = Segment.create(directory, base, now, self._files)
            seg.index_interval_bytes = cfg.index_interval_bytes
            self._segments, self._bases = [seg], [base]
            self._dir_dirty = True
            self._leo = self._recovery_point = self._recovery_segment_base = base
            self._log_start = self._hw = report.verified_from = base
            return  # no checkpoint yet: the segment's name says where the log starts
        segs = [Segment.existing(directory, b, now, self._files) for b in bases]
        for i, seg in enumerate(segs):
            seg.index_interval_bytes = cfg.index_interval_bytes
            if i + 1 < len(segs):
                seg.next_offset = segs[i + 1].base_offset

        # Where verification starts: the checkpoint's recovery point when it is consistent with
        # the files, else the start of the segment holding it, else the whole log.
        start_idx, start_pos, start_offset = 0, 0, segs[0].base_offset
        clean = False
        if ckpt is not None:
            idx = bisect.bisect_left(bases, ckpt.recovery_segment_base)
            if (
                idx < len(bases)
                and bases[idx] == ckpt.recovery_segment_base
                and ckpt.recovery_position <= segs[idx].size
                and segs[idx].index_files_look_valid()
            ):
                start_idx, start_pos, start_offset = idx, ckpt.recovery_position, ckpt.recovery_point
                clean = ckpt.clean_shutdown and idx == len(segs) - 1 and ckpt.recovery_position == segs[idx].size
            else:
                idx = max(bisect.bisect_right(bases, ckpt.recovery_point) - 1, 0)
                start_idx, start_pos, start_offset = idx, 0, segs[idx].base_offset
        report.clean_shutdown = clean

        for seg in segs[:start_idx]:  # trusted: flushed before the recovery point
            if not seg.index_files_look_valid():
                seg.rebuild_indexes(cfg.index_interval_bytes)
                seg.synced_size = seg.size
                report.rebuilt_indexes.append(seg.base_offset)

        # The marker is reported, not trusted: a clean stop's recovery point is the log end,
        # so verifying from it reads nothing, and an open that trusted the marker had to
        # rewrite the checkpoint (two fsyncs) to clear it before any append, 80% of the cost
        # of reopening a partition (issue 28: 20,000 of them at start).
        rseg = segs[start_idx]
        if start_pos > 0:
            rseg.load_index_files()
            rseg.truncate_indexes(start_pos, start_offset)
            rseg.restore_stats_before(start_pos)
            if rseg.next_offset != start_offset:  # checkpoint and file disagree: verify the segment
                log.warning("recovery point %d does not match %s; scanning the segment", start_offset, rseg.log_path)
                start_pos, start_offset, clean = 0, rseg.base_offset, False
                report.clean_shutdown = False
        if start_pos == 0:
            rseg.start_empty_indexes()
            rseg.reset_stats()

        expected, pos = start_offset, start_pos
        for i in range(start_idx, len(segs)):
            seg = segs[i]
            if i > start_idx:
                if seg.base_offset != expected:
                    self._drop_segments(segs, i, report)
                    break
                seg.start_empty_indexes()
                seg.reset_stats()
                pos = 0
            result = seg.recover(pos, expected, cfg.index_interval_bytes)
            seg.synced_size = min(seg.synced_size, pos)
            if result.scanned_bytes or result.truncated_bytes:
                report.scanned_segments.append(seg.base_offset)
            report.scanned_bytes += result.scanned_bytes
            report.truncated_bytes += result.truncated_bytes
            expected = seg.next_offset
            if result.corrupt and i + 1 < len(segs):
                self._drop_segments(segs, i + 1, report)
                break
        for seg in segs[start_idx:-1]:
            seg.seal()
        active = segs[-1]
        active.make_writable()
        self._segments, self._bases = segs, [s.base_offset for s in segs]
        self._leo = active.next_offset
        # rseg is never dropped (only segments after a corrupt entry are), and the scan never
        # cuts below start_pos, so the recovery point stays where verification started.
        self._recovery_point, self._recovery_segment_base, self._recovery_position = (
            start_offset,
            rseg.base_offset,
            start_pos,
        )
        report.verified_from = start_offset
        lso = ckpt.log_start_offset if ckpt else 0
        self._log_start = min(max(lso, segs[0].base_offset), self._leo)
        self._hw = min(max(ckpt.high_watermark if ckpt else 0, self._log_start), self._leo)
        if report.scanned_segments or report.rebuilt_indexes or report.deleted_segments:
            self.flush()  # makes the verified data durable and moves the recovery point
        if report.truncated_bytes or report.deleted_segments:
            log.warning(
                "recovered %s: truncated %d bytes, dropped segments %s; log end offset %d",
                self._dir,
                report.truncated_bytes,
                report.deleted_segments,
                self._leo,
            )

    def _list_segments(self) -> list[int]:
        """Segment base offsets, sorted; removes orphan index files and checkpoint temporaries."""
        names = os.listdir(self._dir)
        bases = sorted(b for b in (parse_segment_name(n) for n in names) if b is not None)
        known = set(bases)
        for name in names:
            for suffix in (INDEX_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX):
                stem = name[: -len(suffix)]
                if name.endswith(suffix) and len(stem) == 20 and stem.isdigit() and int(stem) not in known:
                    (self._dir / name).unlink(missing_ok=True)
            if name == CHECKPOINT_FILE + TMP_SUFFIX:
                (self._dir / name).unlink(missing_ok=True)
        return bases

    def _drop_segments(self, segs: list[Segment], start: int, report: RecoveryReport) -> None:
        for seg in segs[start:]:
            log.warning("deleting segment %s: it follows a torn or corrupt entry", seg.log_path)
            report.deleted_segments.append(seg.base_offset)
            seg.delete_files()
        del segs[start:]
        self._dir_dirty = True

    # ---- offsets -----------------------------------------------------------------------------

    @property
    def directory(self) -> Path:
        return self._dir

    @property
    def config(self) -> LogConfig:
        return self._config

    @property
    def log_start_offset(self) -> int:
        return self._log_start

    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def high_watermark(self) -> int:
        return self._hw

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def size_bytes(self) -> int:
        """What retention.bytes limits: file bytes, or for diskless logs the referenced batch bytes."""
        return sum(self._segment_bytes(s) for s in self._segments)

    def _segment_bytes(self, seg: Segment) -> int:
        return seg.batch_bytes() if self._config.size_by_batch_bytes else seg.size

    def size_bytes_from(self, offset: int) -> int:
        """`size_bytes` of the entries at or above `offset` only (Kafka's
        onlyLocalLogSegmentsSize, with the tiered end as `offset`): whole segments above it,
        and in the segment holding it the entries from there (a walk of entry heads)."""
        with self._lock:
            i = max(bisect.bisect_right(self._bases, offset) - 1, 0)
            segs = self._segments[i:]
            first = segs[0]
            if first.base_offset >= offset:
                return sum(self._segment_bytes(s) for s in segs)
            pos = first.lookup_position(offset)
            by_batch = self._config.size_by_batch_bytes
            partial = sum(
                header.size if by_batch else size
                for _pos, size, header in first.iter_heads(pos, first.size)
                if header.base_offset >= offset
            )
            return partial + sum(self._segment_bytes(s) for s in segs[1:])

    @property
    def segment_base_offsets(self) -> list[int]:
        return list(self._bases)

    def sealed_segments(self) -> list[SealedSegment]:
        """Every sealed segment (all but the active one), oldest first."""
        with self._lock:
            return [
                SealedSegment(seg.base_offset, nxt.base_offset, seg.batch_bytes(), _largest_timestamp(seg))
                for seg, nxt in zip(self._segments, self._segments[1:])
            ]

    def update_high_watermark(self, offset: int) -> int:
        """Move the high watermark forward to ``offset`` (never backwards); returns the new value."""
        with self._lock:
            if offset > self._leo:
                raise ValueError(f"high watermark {offset} would pass the log end offset {self._leo}")
            if offset > self._hw:
                self._hw = offset
            return self._hw

    def update_config(self, config: LogConfig) -> None:
        """New settings apply from the next append, roll, retention or flush check."""
        with self._lock:
            self._config = config
            self._maintenance_due_ms = 0
            for seg in self._segments:
                seg.index_interval_bytes = config.index_interval_bytes

    # ---- append ------------------------------------------------------------------------------

    def append(
        self, kind: EntryKind, header: BatchHeader, data: bytes | bytearray | memoryview, leader_epoch: int
    ) -> AppendResult:
        """Append one entry at the log end offset; ``data`` = 61-byte batch header + payload.

        Patches baseOffset and partitionLeaderEpoch in the bytes written (not in ``data``), sets
        ``header.base_offset`` / ``header.partition_leader_epoch``, and advances the log end
        offset by last_offset_delta + 1. One os.writev per entry; the payload is not copied.
        Flushing is the caller's call: check needs_flush() and run flush() off the event loop.
        """
        size = len(data)
        if size < BATCH_HEADER_SIZE:
            raise BatchFormatError(f"entry data needs at least {BATCH_HEADER_SIZE} bytes, got {size}")
        if kind is EntryKind.RECORDS and header.size != size:
            raise BatchFormatError(f"batch length says {header.size} bytes but {size} were given")
        if header.last_offset_delta < 0:
            raise BatchFormatError(f"negative lastOffsetDelta {header.last_offset_delta}")
        entry_size = size + PREFIX_SIZE
        with self._lock:
            if self._closing:
                raise LogClosedError(f"partition log {self._dir} is closed")
            cfg = self._config
            seg = self._segments[-1]
            base = self._leo
            last = base + header.last_offset_delta
            rolled = False
            if seg.size > 0 and (
                seg.size + entry_size > cfg.segment_bytes
                or (cfg.size_by_batch_bytes and seg.batch_bytes() + header.size > cfg.segment_bytes)
                or self._waited_for_roll(seg, header.max_timestamp) > cfg.segment_ms
                or seg.index_full(cfg.segment_index_bytes)
                or last - seg.base_offset > MAX_RELATIVE_OFFSET
            ):
                seg = self._roll()
                rolled = True
            if seg.size == 0:
                seg.created_ms = self._clock.now_ms()  # segment.ms counts from the first entry
            head = encode_head(kind, data, base, leader_epoch)
            position = seg.size
            fd = seg.fd
            try:
                if size > BATCH_HEADER_SIZE:
                    payload = memoryview(data)[BATCH_HEADER_SIZE:]
                    written = os.writev(fd, (head, payload))
                else:
                    payload = memoryview(b"")
                    written = os.write(fd, head)
                if written != entry_size:
                    _write_rest(fd, head, payload, written)
            except BaseException:
                _cut_back(fd, position)
                raise
            seg.track(base, last, header.max_timestamp, position, entry_size, cfg.index_interval_bytes, header.size)
            self._leo = last + 1
            self._maintenance_due_ms = 0
            header.base_offset = base
            header.partition_leader_epoch = leader_epoch
            result = AppendResult(base, last, seg.base_offset, position, entry_size, self._log_start, rolled)
        if rolled and self._on_segment_roll is not None:
            self._on_segment_roll(seg.base_offset)
        return result

    def _waited_for_roll(self, seg: Segment, max_timestamp: int) -> int:
        """Kafka's timeWaitedForRoll: by record timestamps when the segment's first entry had one
        (so replayed or old-timestamped data does not roll on every append), else by the clock."""
        first = seg.rolling_timestamp
        if first is not None and first >= 0 and max_timestamp >= 0:
            return max_timestamp - first
        return self._clock.now_ms() - seg.created_ms

    def _roll(self) -> Segment:
        """Seal the active segment and start a new one at the log end offset (lock held)."""
        old = self._segments[-1]
        old.seal()
        seg = Segment.create(self._dir, self._leo, self._clock.now_ms(), self._files)
        seg.index_interval_bytes = self._config.index_interval_bytes
        self._segments.append(seg)
        self._bases.append(seg.base_offset)
        self._dir_dirty = True
        return seg

    def maybe_roll(self, now_ms: int | None = None) -> bool:
        """Roll a non-empty active segment whose first entry was appended more than segment.ms ago
        (by the clock: an idle partition still rolls, whatever its record timestamps say)."""
        now = self._clock.now_ms() if now_ms is None else now_ms
        return self.roll(lambda seg: now - seg.created_ms > self._config.segment_ms)

    def roll(self, when: Callable[[Segment], bool] = lambda _seg: True) -> bool:
        """Seal a non-empty active segment (if `when` says so) and start the next one: a mode
        switch starts the new mode in a segment of its own."""
        with self._lock:
            seg = self._segments[-1]
            if self._closing or seg.size == 0 or not when(seg):
                return False
            seg = self._roll()
        if self._on_segment_roll is not None:
            self._on_segment_roll(seg.base_offset)
        return True

    # ---- reads -------------------------------------------------------------------------------

    def read(self, start_offset: int, max_bytes: int, max_offset: int) -> list[LogEntry]:
        """Entries with last_offset >= start_offset and base_offset < max_offset, in order.

        Their total size stays within ``max_bytes``, except that the first entry is always
        returned whole (KIP-74). Raises OffsetOutOfRangeError when start_offset is below the log
        start offset or above the log end offset. Entries share the memory of a few preads.
        """
        with self._lock:
            self._check_open()
            leo, lso = self._leo, self._log_start
            if start_offset < lso or start_offset > leo:
                raise OffsetOutOfRangeError(start_offset, lso, leo)
            limit = min(max_offset, leo)
            if start_offset >= limit:
                return []
            i = bisect.bisect_right(self._bases, start_offset) - 1
            segs = self._segments[i:]
            ends = [s.size for s in segs]
            first_pos = segs[0].lookup_position(start_offset)
        entries: list[LogEntry] = []
        total = 0
        for n, (seg, end) in enumerate(zip(segs, ends)):
            total, done = self._read_segment(
                seg, first_pos if n == 0 else 0, end, start_offset, limit, max_bytes, entries, total
            )
            if done:
                break
        return entries

    def _read_segment(
        self,
        seg: Segment,
        pos: int,
        end: int,
        start_offset: int,
        limit: int,
        max_bytes: int,
        entries: list[LogEntry],
        total: int,
    ) -> tuple[int, bool]:
        buf = memoryview(b"")
        buf_pos = pos
        slack = self._config.index_interval_bytes + HEAD_SIZE
        while pos < end:
            rel = pos - buf_pos
            if rel + HEAD_SIZE > len(buf):
                want = min(end - pos, max(max_bytes - total, 0) + slack, READ_CHUNK_MAX_BYTES)
                buf = memoryview(seg.pread(max(want, HEAD_SIZE), pos))
                buf_pos, rel = pos, 0
                if len(buf) < HEAD_SIZE:
                    return total, True
            length, _crc, version, kind_value = unpack_prefix(buf, rel)
            size = LENGTH_SIZE + length
            header = parse_header(buf, rel + PREFIX_SIZE)
            if header.base_offset + header.last_offset_delta < start_offset:
                pos += size
                continue
            if header.base_offset >= limit:
                return total, True
            data_size = header.size  # the batch's size, also for entries that only refer to it
            if entries and total + data_size > max_bytes:
                return total, True
            check_version(version)
            kind = kind_of(kind_value)
            if rel + size > len(buf):
                want = min(end - pos, max(size, min(max_bytes - total + slack, READ_CHUNK_MAX_BYTES)))
                buf = memoryview(seg.pread(want, pos))
                buf_pos, rel = pos, 0
                if len(buf) < size:
                    return total, True
            entries.append(LogEntry(kind, header, buf[rel + PREFIX_SIZE : rel + size]))
            total += data_size
            pos += size
        return total, False

    def iter_entries(self, start_offset: int) -> Iterator[LogEntry]:
        """Every entry from ``start_offset`` (clamped to the log start offset) to the log end offset."""
        start = max(start_offset, self._log_start)
        while True:
            leo = self._leo
            if start >= leo:
                return
            batch = self.read(max(start, self._log_start), ITER_CHUNK_BYTES, leo)
            if not batch:
                return
            yield from batch
            start = batch[-1].last_offset + 1

    def _entry_at(self, seg: Segment, position: int, size: int) -> LogEntry:
        buf = memoryview(seg.pread(size, position))
        length, _crc, version, kind_value = unpack_prefix(buf, 0)
        check_version(version)
        return LogEntry(kind_of(kind_value), parse_header(buf, PREFIX_SIZE), buf[PREFIX_SIZE : LENGTH_SIZE + length])

    def entry_for_timestamp(self, timestamp_ms: int) -> LogEntry | None:
        """The first entry (at or above the log start offset) whose max_timestamp >= timestamp_ms.

        Uses each segment's largest timestamp to pick the segment and its time index to pick
        where to start walking entry heads. The caller bounds the answer by the high watermark.
        """
        with self._lock:
            lso = self._log_start
            for seg in self._segments:
                if seg.size == 0:
                    continue
                seg.load_stats()
                if seg.max_timestamp < timestamp_ms:
                    continue
                below = seg.time_index.last_below(timestamp_ms)
                start = seg.lookup_position(seg.base_offset + below[1]) if below is not None else 0
                if seg.base_offset < lso:
                    start = max(start, seg.lookup_position(lso))
                for pos, size, header in seg.iter_heads(start, seg.size):
                    if header.last_offset >= lso and header.max_timestamp >= timestamp_ms:
                        return self._entry_at(seg, pos, size)
            return None

    def entry_with_max_timestamp(self) -> LogEntry | None:
        """The entry holding the largest max_timestamp in the log (the first one on ties)."""
        with self._lock:
            lso = self._log_start
            best: tuple[int, int, Segment] | None = None
            for seg in self._segments:
                if seg.size == 0:
                    continue
                seg.load_stats()
                ts, offset = seg.max_timestamp, seg.offset_of_max_timestamp
                if seg.next_offset <= lso:
                    continue
                if offset < lso or seg.base_offset < lso:
                    ts, offset = self._visible_max(seg, lso)
                if best is None or ts > best[0]:
                    best = (ts, offset, seg)
            if best is None:
                return None
            seg = best[2]
            for pos, size, header in seg.iter_heads(seg.lookup_position(best[1]), seg.size):
                if header.base_offset == best[1]:
                    return self._entry_at(seg, pos, size)
            return None  # pragma: no cover - the statistics point at a real entry

    def _visible_max(self, seg: Segment, lso: int) -> tuple[int, int]:
        ts, offset = NO_TIMESTAMP - 1, -1
        for _pos, _size, header in seg.iter_heads(seg.lookup_position(lso), seg.size):
            if header.last_offset >= lso and (header.max_timestamp > ts or offset < 0):
                ts, offset = header.max_timestamp, header.base_offset
        return ts, offset

    # ---- truncation and deletion -------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Drop every entry with base_offset >= ``offset`` (an entry boundary, or >= LEO: no-op).

        Below the log start offset the whole log is dropped and restarts empty at ``offset``.
        The cut is fsynced so truncated entries cannot reappear after a power loss.
        """
        with self._flush_lock, self._lock:
            self._check_open()
            if offset >= self._leo:
                return
            if offset < self._log_start:
                self._truncate_fully(offset)
            else:
                self._truncate_within(offset)
        self._write_checkpoint()
        self._tell_truncated(offset)

    def restart_at(self, offset: int, log_start_offset: int | None = None) -> None:
        """Drop every entry and continue empty at ``offset`` (a follower whose leader deleted
        what the follower still needs). ``log_start_offset`` (default ``offset``) may lie
        above it, by less than the next entry spans: a log start inside that batch
        (DeleteRecords), which the caller appends next, so nothing below it is served."""
        with self._flush_lock, self._lock:
            self._check_open()
            dropped_from = self._bases[0]
            self._truncate_fully(offset)
            if log_start_offset is not None:
                self._log_start = max(log_start_offset, offset)
        self._write_checkpoint()
        self._tell_truncated(dropped_from)

    def _tell_truncated(self, offset: int) -> None:
        for listener in self.truncation_listeners:
            listener(offset)

    def _truncate_within(self, offset: int) -> None:
        i = bisect.bisect_right(self._bases, offset) - 1
        seg = self._segments[i]
        pos = seg.find_entry_position(offset)
        if pos is None:
            raise ValueError(f"offset {offset} is not the base offset of an entry")
        for later in self._segments[i + 1 :]:
            later.delete_files()
        del self._segments[i + 1 :]
        del self._bases[i + 1 :]
        seg.truncate_indexes(pos, offset)
        seg.truncate_log(pos)
        seg.restore_stats_before(pos)
        seg.make_writable()
        self._leo = offset
        self._maintenance_due_ms = 0  # an older segment may be the active one now
        self._hw = min(self._hw, offset)
        if self._recovery_point > offset or self._recovery_segment_base > seg.base_offset:
            self._recovery_point, self._recovery_segment_base, self._recovery_position = offset, seg.base_offset, pos
        self._dir_dirty = True

    def _truncate_fully(self, offset: int) -> None:
        for seg in self._segments:
            seg.delete_files()
        seg = Segment.create(self._dir, offset, self._clock.now_ms(), self._files)
        seg.index_interval_bytes = self._config.index_interval_bytes
        self._segments, self._bases = [seg], [offset]
        self._leo = self._log_start = self._hw = offset
        self._maintenance_due_ms = 0
        self._recovery_point, self._recovery_segment_base, self._recovery_position = offset, offset, 0
        fsync_directory(self._dir)

    def delete_records_before(self, offset: int) -> int:
        """Advance the log start offset to ``offset`` (DeleteRecords); returns the new log start offset.

        Raises OffsetOutOfRangeError above the high watermark. Whole segments below the new log
        start offset are deleted (never the active one); the new value is checkpointed.
        """
        with self._flush_lock, self._lock:
            self._check_open()
            if offset > self._hw or offset < 0:
                raise OffsetOutOfRangeError(offset, self._log_start, self._hw, what="DeleteRecords offset")
            if offset <= self._log_start:
                return self._log_start
            self._log_start = offset
            n = 0
            while n + 1 < len(self._segments) and self._segments[n + 1].base_offset <= offset:
                n += 1
            self._delete_oldest(n)
        self._write_checkpoint()
        return self._log_start

    def enforce_retention(self, now_ms: int | None = None, remote: RemoteRetention | None = None) -> int:
        """Delete the oldest segments past retention.ms (by largest timestamp) or retention.bytes.

        Never deletes the active segment or a segment with entries at or above the high
        watermark. With `remote` (a topic with tiered storage), only segments that tiered
        segments supersede go, by the local retention limits, as Kafka's local retention does.
        Advances the log start offset; returns how many segments were deleted.
        """
        with self._flush_lock, self._lock:
            self._check_open()
            cfg = self._config
            now = self._clock.now_ms() if now_ms is None else now_ms
            segs = self._segments
            upto = self._hw if remote is None else min(self._hw, remote.tiered_end)
            retention_ms = cfg.retention_ms if remote is None else remote.local_retention_ms
            retention_bytes = cfg.retention_bytes if remote is None else remote.local_retention_bytes
            deletable = 0  # sealed segments entirely below the high watermark (and tiered)
            while deletable + 1 < len(segs) and segs[deletable + 1].base_offset <= upto:
                deletable += 1
            by_time = 0
            if retention_ms >= 0:
                while by_time < deletable and now - _largest_timestamp(segs[by_time]) > retention_ms:
                    by_time += 1
            by_size = 0
            if retention_bytes >= 0:
                diff = self.size_bytes - retention_bytes
                while by_size < deletable and diff - self._segment_bytes(segs[by_size]) >= 0:
                    diff -= self._segment_bytes(segs[by_size])
                    by_size += 1
            n = max(by_time, by_size)
            if n == 0:
                return 0
            self._delete_oldest(n)
            self._log_start = max(self._log_start, self._bases[0])
        self._write_checkpoint()
        return n

    def _delete_oldest(self, n: int) -> None:
        """Delete the first ``n`` segments (both locks held; never the active one)."""
        n = min(n, len(self._segments) - 1)
        if n <= 0:
            return
        doomed = self._segments[:n]
        del self._segments[:n]
        del self._bases[:n]
        for seg in doomed:
            seg.delete_files()
        first = self._segments[0]
        if self._recovery_segment_base < first.base_offset:
            self._recovery_point = max(self._recovery_point, first.base_offset)
            self._recovery_segment_base, self._recovery_position = first.base_offset, 0
        self._dir_dirty = True

    # ---- durability --------------------------------------------------------------------------

    @property
    def maintenance_due_ms(self) -> int:
        """The clock time before which neither maybe_roll nor needs_flush can say yes, as of
        the last plan_maintenance(): the broker's flush and roll pass skips the log until then,
        so an idle partition costs that pass one comparison. Only an append, new settings or a
        truncation (an older segment may become the active one) can bring the time forward,
        and each resets it to 0; a flush, roll or deletion only puts it later, so a stale value
        then merely costs a look."""
        return self._maintenance_due_ms

    def plan_maintenance(self) -> None:
        """Compute maintenance_due_ms from the log as it is now."""
        with self._lock:
            cfg = self._config
            seg = self._segments[-1]
            due = _NEVER
            if seg.size > 0:
                due = seg.created_ms + cfg.segment_ms + 1  # maybe_roll: now - created > segment.ms
            unflushed = self._leo - self._recovery_point
            if unflushed > 0:
                due = 0 if unflushed >= cfg.flush_messages else min(due, self._last_flush_ms + cfg.flush_ms)
            self._maintenance_due_ms = due

    def needs_flush(self, now_ms: int) -> bool:
        """flush.messages unflushed offsets, or flush.ms since the last flush with data unflushed."""
        with self._lock:
            unflushed = self._leo - self._recovery_point
            if unflushed <= 0:
                return False
            return unflushed >= self._config.flush_messages or now_ms - self._last_flush_ms >= self._config.flush_ms

    def flush(self) -> None:
        """fsync data and indexes up to the current log end offset, then checkpoint.

        Safe to call from a worker thread while the owner thread appends: it syncs what existed
        when it started, and the recovery point moves only that far.
        """
        self._flush(closing=False)

    def _flush(self, closing: bool) -> None:
        """flush(); `closing`: close() has refused changes since before it started, so the
        checkpoint it writes is the clean-shutdown one, and no flush after it writes another
        (one checkpoint write, two fsyncs, per partition at a broker's stop, not two)."""
        with self._flush_lock:
            with self._lock:
                if self._closed:
                    return
                leo = self._leo
                active = self._segments[-1]
                rseg, rpos = active.base_offset, active.size
                work = [(s, s.size, *s.capture_unwritten()) for s in self._segments if s.dirty]
                dir_dirty, self._dir_dirty = self._dir_dirty, False
            try:
                for seg, _size, otail, olen, ttail, tlen in work:
                    seg.sync(otail, olen, ttail, tlen)
                if dir_dirty:
                    fsync_directory(self._dir)
                for listener in self.before_recovery_point_moves:
                    listener()
            except BaseException:
                with self._lock:
                    self._dir_dirty = self._dir_dirty or dir_dirty
                raise
            with self._lock:
                for seg, size, _otail, olen, _ttail, tlen in work:
                    seg.mark_synced(size, olen, tlen)
                if leo >= self._recovery_point and leo <= self._leo and rseg in self._bases:
                    self._recovery_point, self._recovery_segment_base, self._recovery_position = leo, rseg, rpos
                self._last_flush_ms = self._clock.now_ms()
                if closing:
                    self._closed = True  # no flush after this one: its checkpoint is the last
            self._write_checkpoint(clean_shutdown=closing)

    def checkpoint(self) -> None:
        """Persist log start offset, high watermark and recovery point (atomic replace)."""
        self._write_checkpoint()

    def _write_checkpoint(self, clean_shutdown: bool = False) -> None:
        with self._checkpoint_lock:
            with self._lock:
                ckpt = LogCheckpoint(
                    version=CHECKPOINT_VERSION,
                    log_start_offset=self._log_start,
                    high_watermark=self._hw,
                    recovery_point=self._recovery_point,
                    recovery_segment_base=self._recovery_segment_base,
                    recovery_position=self._recovery_position,
                    clean_shutdown=clean_shutdown,
                )
                if clean_shutdown and not self._dir_dirty and self._checkpoint_on_disk == ckpt:
                    return  # a close of a log nothing changed since the last clean close
                self._dir_dirty = False  # the checkpoint write fsyncs the directory
            write_checkpoint(self._dir, ckpt)
            self._checkpoint_on_disk = ckpt

    def close(self) -> None:
        """Flush, write the clean-shutdown checkpoint and close every file. Idempotent.

        Appends and other changes are refused from the moment close() starts, so the flush it
        does covers everything and the clean-shutdown checkpoint matches the files exactly.
        """
        self.close_durably()
        self.release_files()

    def close_durably(self) -> None:
        """close() but for closing the segment files: refuse changes, flush, write the
        clean-shutdown checkpoint. It syncs through descriptors of its own, so a broker's stop
        runs it for many logs at once on worker threads (the fsyncs overlap), then releases
        the files on the event loop's thread (open_files.py is owner-thread only)."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
            self._segments[-1].seal()  # last time-index entry = largest timestamp, as for sealed segments
            if self._nothing_to_persist():
                self._closed = True
        self._flush(closing=True)

    def release_files(self) -> None:
        """Close every segment file (after close_durably; owner thread)."""
        with self._lock:
            for seg in self._segments:
                seg.close()

    def _nothing_to_persist(self) -> bool:
        """A log never written to, with no checkpoint: opening its directory again gives the same
        log with or without a clean-shutdown checkpoint (the segment's name says where it
        starts), so its close writes nothing. A broker stopping right after creating thousands
        of partitions spent three fsyncs on each (issue 28)."""
        seg = self._segments[-1]
        base = seg.base_offset
        return (
            self._checkpoint_on_disk is None
            and len(self._segments) == 1
            and seg.size == 0
            and self._leo == self._log_start == self._hw == self._recovery_point == base
            and (base == 0 or not self._dir_dirty)  # elsewhere only once its name is durable
        )

    def _check_open(self) -> None:
        if self._closing:
            raise LogClosedError(f"partition log {self._dir} is closed")

    def _close_without_flush(self) -> None:
        """Close file descriptors and write nothing: what a kill -9 leaves behind (tests only)."""
        with self._lock:
            self._closing = self._closed = True
            for seg in self._segments:
                seg.close()


def _largest_timestamp(seg: Segment) -> int:
    """Kafka's segment.largestTimestamp: the largest record timestamp, else the file's mtime."""
    seg.load_stats()
    if seg.max_timestamp >= 0:
        return seg.max_timestamp
    try:
        return seg.log_path.stat().st_mtime_ns // 1_000_000
    except FileNotFoundError:
        return 0


def _write_rest(fd: int, head: bytearray, payload: memoryview, written: int) -> None:
    """Finish a short writev (rare for regular files: a signal or a nearly full disk)."""
    views = [memoryview(head), payload]
    for view in views:
        if written >= len(view):
            written -= len(view)
            continue
        view = view[written:]
        written = 0
        while view:
            view = view[os.write(fd, view) :]


def _cut_back(fd: int, position: int) -> None:
    """Undo a partly written entry so the file ends on an entry boundary."""
    try:
        os.ftruncate(fd, position)
    except OSError:  # pragma: no cover - recovery will cut the torn tail instead
        log.exception("could not cut a partly written entry back to position %d", position)


__all__ = [
    "AppendResult",
    "LogClosedError",
    "LogEntry",
    "OffsetOutOfRangeError",
    "PartitionLog",
    "RecoveryReport",
    "RemoteRetention",
    "SealedSegment",
    "LOG_SUFFIX",
    "INDEX_SUFFIX",
    "TIMEINDEX_SUFFIX",
]
