"""One log segment: a `.log` file of entries plus its `.index` and `.timeindex`.

Files are named after the segment's base offset as in Kafka (`00000000000000000042.log`). The
segment owns its file descriptors, its in-memory indexes and the per-segment statistics the log
needs (size, next offset, largest timestamp and where it is). It does no locking: PartitionLog
serialises access. Sealed segments open their files and load their indexes lazily, so opening a
log with many segments costs a directory listing and a stat per segment.

A segment holds at most one descriptor, its `.log` file's, and only while the broker-wide
bound on open files lets it (open_files.py: the least recently used is closed and opened again
on its next use). Index files are opened only while they are written: at a flush, a rebuild
or a truncation.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from broker.log.entry import (
    HEAD_SIZE,
    LENGTH_SIZE,
    MIN_ENTRY_LENGTH,
    PREFIX_SIZE,
    EntryFormatError,
    EntryKind,
    check_version,
    crc_matches,
    kind_of,
    unpack_prefix,
)
from broker.log.index import OFFSET_ENTRY_SIZE, TIME_ENTRY_SIZE, OffsetIndex, TimeIndex
from broker.log.open_files import OpenFiles, open_with_room
from broker.protocol.batch import BatchHeader, parse_header

log = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIMEINDEX_SUFFIX = ".timeindex"
TXNINDEX_SUFFIX = ".txnindex"  # the aborted-transaction index (txn_index.py), deleted with the segment
NO_TIMESTAMP = -1
SCAN_CHUNK_BYTES = 1 << 20  # read size when scanning entries (recovery, index rebuild)
HEAD_CHUNK_BYTES = 64 << 10  # read size when walking entry heads only

_HAS_FDATASYNC = hasattr(os, "fdatasync")


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


def parse_segment_name(name: str) -> int | None:
    """Base offset of a `.log` file name, or None when the name is not a segment's."""
    if not name.endswith(LOG_SUFFIX):
        return None
    stem = name[: -len(LOG_SUFFIX)]
    if len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem)


def datasync(fd: int) -> None:
    if _HAS_FDATASYNC:
        os.fdatasync(fd)
    else:  # pragma: no cover - macOS
        os.fsync(fd)


@dataclass(slots=True)
class ScanResult:
    """What a checksum-verifying scan found."""

    scanned_bytes: int
    truncated_bytes: int  # bytes cut off the end because they were torn or corrupt
    corrupt: bool  # the scan stopped before the end of the file


class Segment:
    __slots__ = (
        "base_offset",
        "directory",
        "size",
        "synced_size",
        "next_offset",
        "created_ms",
        "rolling_timestamp",
        "max_timestamp",
        "offset_of_max_timestamp",
        "bytes_since_last_index",
        "_offset_index",
        "_time_index",
        "_fd",
        "_writable",
        "_files",
        "_released",
        "index_interval_bytes",
        "_batch_bytes",
    )

    def __init__(
        self, directory: Path, base_offset: int, size: int, created_ms: int, files: OpenFiles | None = None
    ) -> None:
        self.base_offset = base_offset
        self.directory = directory
        self.size = size
        self.synced_size = size
        self.next_offset = base_offset
        self.created_ms = created_ms  # when the first entry was appended (or the segment loaded)
        self.rolling_timestamp: int | None = None  # first entry's max timestamp, for segment.ms
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = -1
        self.bytes_since_last_index = 0
        self._offset_index: OffsetIndex | None = None
        self._time_index: TimeIndex | None = None
        self._fd: int | None = None  # the .log file's, while open (open_files.py)
        self._writable = False  # the active segment: its file opens for appending
        self._files = files if files is not None else OpenFiles(None)
        self._released = False  # its file was closed for the bound (reopening it is counted)
        self.index_interval_bytes = 4096  # used when indexes must be rebuilt lazily; set by the log
        self._batch_bytes: int | None = None  # sum of the batch sizes of the entries; None = not counted yet

    # ---- files -------------------------------------------------------------------------------

    @property
    def log_path(self) -> Path:
        return self.directory / (segment_name(self.base_offset) + LOG_SUFFIX)

    @property
    def index_path(self) -> Path:
        return self.directory / (segment_name(self.base_offset) + INDEX_SUFFIX)

    @property
    def timeindex_path(self) -> Path:
        return self.directory / (segment_name(self.base_offset) + TIMEINDEX_SUFFIX)

    @classmethod
    def create(cls, directory: Path, base_offset: int, now_ms: int, files: OpenFiles | None = None) -> "Segment":
        """A new, empty, writable segment (fails if its .log already exists)."""
        seg = cls(directory, base_offset, 0, now_ms, files)
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND
        seg._fd = open_with_room(seg._files, seg.log_path, flags)
        seg._writable = True
        seg._files.opened(seg)
        seg._cut_index_files(0, 0)
        seg._offset_index = OffsetIndex()
        seg._time_index = TimeIndex()
        seg._batch_bytes = 0
        return seg

    @classmethod
    def existing(cls, directory: Path, base_offset: int, now_ms: int, files: OpenFiles | None = None) -> "Segment":
        seg = cls(directory, base_offset, 0, now_ms, files)
        seg.size = seg.synced_size = seg.log_path.stat().st_size
        return seg

    @property
    def fd(self) -> int:
        """The `.log` file's descriptor, opened (again) on first use: for appending if the
        segment is the active one. Valid until another segment file is opened."""
        fd = self._fd
        if fd is not None:
            self._files.used(self)
            return fd
        flags = os.O_RDWR | os.O_APPEND if self._writable else os.O_RDONLY
        fd = self._fd = open_with_room(self._files, self.log_path, flags)
        self._files.opened(self, reopened=self._released)
        self._released = False
        return fd

    def make_writable(self) -> None:
        if not self._writable:
            self._close_file()  # read-only: the next use opens it for appending
            self._writable = True

    def release_file(self) -> None:
        """Closed for the bound on open files (OpenFiles has already let go of it)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
            self._released = True

    def _close_file(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
            self._files.closed(self)

    def _cut_index_files(self, offset_index_bytes: int, time_index_bytes: int) -> None:
        """Create the index files if missing and cut them to these sizes."""
        for path, size in ((self.index_path, offset_index_bytes), (self.timeindex_path, time_index_bytes)):
            fd = open_with_room(self._files, path, os.O_RDWR | os.O_CREAT)
            try:
                os.ftruncate(fd, size)
            finally:
                os.close(fd)

    def close(self) -> None:
        self._close_file()
        self._writable = False

    def delete_files(self) -> None:
        """Close and unlink (.log first, so a crash leaves only orphan indexes, removed at open)."""
        self.close()
        txnindex_path = self.directory / (segment_name(self.base_offset) + TXNINDEX_SUFFIX)
        for path in (self.log_path, self.index_path, self.timeindex_path, txnindex_path):
            try:
                path.unlink()
            except FileNotFoundError:
                pass

    def index_files_look_valid(self) -> bool:
        """Cheap check done at open for trusted segments: both index files exist, whole entries."""
        try:
            isize = self.index_path.stat().st_size
            tsize = self.timeindex_path.stat().st_size
        except FileNotFoundError:
            return False
        return isize % OFFSET_ENTRY_SIZE == 0 and tsize % TIME_ENTRY_SIZE == 0

    # ---- indexes -----------------------------------------------------------------------------

    @property
    def indexes_loaded(self) -> bool:
        return self._offset_index is not None

    @property
    def offset_index(self) -> OffsetIndex:
        if self._offset_index is None:
            self.load_indexes()
        return self._offset_index  # type: ignore[return-value]  # load_indexes sets both indexes

    @property
    def time_index(self) -> TimeIndex:
        if self._time_index is None:
            self.load_indexes()
        return self._time_index  # type: ignore[return-value]  # load_indexes sets both indexes

    def start_empty_indexes(self) -> None:
        """Empty in-memory and on-disk indexes (before a full scan rebuilds them)."""
        self._offset_index, self._time_index = OffsetIndex(), TimeIndex()
        self._cut_index_files(0, 0)

    def load_index_files(self) -> None:
        """Load index files as they are (whole entries only); callers trim them to what they trust."""
        oraw = self.index_path.read_bytes()
        traw = self.timeindex_path.read_bytes()
        self._offset_index = OffsetIndex(oraw[: len(oraw) - len(oraw) % OFFSET_ENTRY_SIZE])
        self._time_index = TimeIndex(traw[: len(traw) - len(traw) % TIME_ENTRY_SIZE])

    def load_indexes(self) -> bool:
        """Load a sealed segment's index files; rebuild them when they fail a sanity check.

        Returns True when a rebuild was needed.
        """
        try:
            oidx = OffsetIndex(self.index_path.read_bytes())
            tidx = TimeIndex(self.timeindex_path.read_bytes())
        except FileNotFoundError:
            pass  # rebuilt below, like indexes that fail the sanity check
        else:
            if self._indexes_sane(oidx, tidx):
                self._offset_index, self._time_index = oidx, tidx
                self._stats_from_time_index()
                return False
        log.warning("rebuilding indexes of segment %s", self.log_path)
        self.rebuild_indexes(self.index_interval_bytes)
        return True

    def _indexes_sane(self, oidx: OffsetIndex, tidx: TimeIndex) -> bool:
        if oidx.size_bytes % OFFSET_ENTRY_SIZE or tidx.size_bytes % TIME_ENTRY_SIZE:
            return False
        limit = self.next_offset - self.base_offset
        last = oidx.last()
        if last is not None and (last[0] >= max(limit, 1) or last[1] >= self.size):
            return False
        tlast = tidx.last()
        if tlast is not None and tlast[1] >= max(limit, 1):
            return False
        return True

    def _stats_from_time_index(self) -> None:
        last = self._time_index.last() if self._time_index is not None else None
        if last is None:
            self.max_timestamp, self.offset_of_max_timestamp = NO_TIMESTAMP, self.base_offset
        else:
            self.max_timestamp, self.offset_of_max_timestamp = last[0], self.base_offset + last[1]

    def load_stats(self) -> None:
        """Largest timestamp of a sealed segment without loading its indexes: the last time-index entry."""
        if self._time_index is not None:
            return
        try:
            size = self.timeindex_path.stat().st_size
        except FileNotFoundError:
            self.load_indexes()
            return
        if size % TIME_ENTRY_SIZE:
            self.load_indexes()
            return
        if size == 0:
            self.max_timestamp, self.offset_of_max_timestamp = NO_TIMESTAMP, self.base_offset
            return
        with open(self.timeindex_path, "rb") as f:
            f.seek(size - TIME_ENTRY_SIZE)
            tail = TimeIndex(f.read(TIME_ENTRY_SIZE))
        ts, rel = tail.entry_at(0)
        self.max_timestamp, self.offset_of_max_timestamp = ts, self.base_offset + rel

    def rebuild_indexes(self, index_interval_bytes: int) -> None:
        """Recreate both indexes from the log (no checksum checks: the data is trusted)."""
        next_offset = self.next_offset
        self.start_empty_indexes()
        self.reset_stats()
        for pos, size, header in self.iter_heads(0, self.size):
            self.track(header.base_offset, header.last_offset, header.max_timestamp, pos, size, index_interval_bytes)
        if self.next_offset != next_offset and next_offset != self.base_offset:
            log.warning("segment %s ends at offset %d, expected %d", self.log_path, self.next_offset, next_offset)
        self.seal()

    def reset_stats(self) -> None:
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = -1
        self.bytes_since_last_index = 0
        self.rolling_timestamp = None
        self.next_offset = self.base_offset
        self._batch_bytes = None

    def batch_bytes(self) -> int:
        """Bytes of the Kafka batches the entries stand for (for diskless entries, the referenced
        batches'). Counted on append; for a segment loaded from disk, by one scan of its heads."""
        if self._batch_bytes is None:
            self._batch_bytes = sum(header.size for _pos, _size, header in self.iter_heads(0, self.size))
        return self._batch_bytes

    def track(
        self,
        base_offset: int,
        last_offset: int,
        max_timestamp: int,
        position: int,
        size: int,
        index_interval_bytes: int,
        batch_size: int = 0,
    ) -> None:
        """Account for one entry appended (or found by a scan) at ``position``; O(1)."""
        if self._batch_bytes is not None:
            self._batch_bytes += batch_size
        if max_timestamp > self.max_timestamp or self.offset_of_max_timestamp < 0:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = base_offset
        if self.rolling_timestamp is None:
            self.rolling_timestamp = max_timestamp  # may be -1 (no timestamp): roll by the clock then
        if self.bytes_since_last_index > index_interval_bytes:
            self._offset_index.append(base_offset - self.base_offset, position)  # type: ignore[union-attr]  # loaded first
            if self.max_timestamp >= 0:
                self._time_index.maybe_append(  # type: ignore[union-attr]  # loaded first
                    self.max_timestamp, self.offset_of_max_timestamp - self.base_offset
                )
            self.bytes_since_last_index = 0
        self.bytes_since_last_index += size
        self.size = position + size
        self.next_offset = last_offset + 1

    def seal(self) -> None:
        """The segment stops being active: make the last time-index entry its largest timestamp."""
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp - self.base_offset)

    def index_full(self, segment_index_bytes: int) -> bool:
        oidx, tidx = self._offset_index, self._time_index
        return (oidx is not None and oidx.size_bytes + OFFSET_ENTRY_SIZE > segment_index_bytes) or (
            tidx is not None and tidx.size_bytes + TIME_ENTRY_SIZE > segment_index_bytes
        )

    @property
    def dirty(self) -> bool:
        """Has data or index bytes not yet fsynced."""
        if self.size != self.synced_size:
            return True
        oidx, tidx = self._offset_index, self._time_index
        return (oidx is not None and oidx.written < oidx.size_bytes) or (
            tidx is not None and tidx.written < tidx.size_bytes
        )

    # ---- durability --------------------------------------------------------------------------

    def capture_unwritten(self) -> tuple[bytes, int, bytes, int]:
        oidx, tidx = self._offset_index, self._time_index
        otail, olen = oidx.unwritten() if oidx is not None else (b"", -1)
        ttail, tlen = tidx.unwritten() if tidx is not None else (b"", -1)
        return otail, olen, ttail, tlen

    def sync(self, otail: bytes, olen: int, ttail: bytes, tlen: int) -> None:
        """Write captured index tails and fsync log and index files (runs without the log lock,
        on a worker thread: through descriptors of its own, which the owner thread's bound on
        open files never closes; fsync covers a file's data whichever descriptor wrote it)."""
        _sync_file(self.log_path, os.O_RDONLY, b"", -1)
        if olen >= 0:
            _sync_file(self.index_path, os.O_RDWR | os.O_CREAT, otail, olen - len(otail))
        if tlen >= 0:
            _sync_file(self.timeindex_path, os.O_RDWR | os.O_CREAT, ttail, tlen - len(ttail))

    def mark_synced(self, size: int, olen: int, tlen: int) -> None:
        if self.synced_size < size <= self.size:
            self.synced_size = size
        if olen >= 0 and self._offset_index is not None:
            self._offset_index.written = max(self._offset_index.written, min(olen, self._offset_index.size_bytes))
        if tlen >= 0 and self._time_index is not None:
            self._time_index.written = max(self._time_index.written, min(tlen, self._time_index.size_bytes))

    # ---- reading -----------------------------------------------------------------------------

    def pread(self, size: int, position: int) -> bytes:
        return os.pread(self.fd, size, position)

    def lookup_position(self, offset: int) -> int:
        """File position of an entry at or before the one holding ``offset`` (sparse index floor)."""
        found = self.offset_index.lookup(offset - self.base_offset)
        return 0 if found is None else found[1]

    def iter_heads(self, start: int, end: int) -> Iterator[tuple[int, int, BatchHeader]]:
        """(position, entry size, header) of each entry in [start, end), reading heads only.

        Checks framing and version but not checksums (for data already verified).
        """
        pos = start
        buf = b""
        buf_pos = start
        while pos + HEAD_SIZE <= end:
            rel = pos - buf_pos
            if rel < 0 or rel + HEAD_SIZE > len(buf):
                buf = os.pread(self.fd, min(HEAD_CHUNK_BYTES, end - pos), pos)
                buf_pos, rel = pos, 0
                if len(buf) < HEAD_SIZE:
                    return
            length, _crc, version, _kind = unpack_prefix(buf, rel)
            if length < MIN_ENTRY_LENGTH:
                raise EntryFormatError(f"{self.log_path}: bad entry length {length} at position {pos}")
            check_version(version)
            size = LENGTH_SIZE + length
            yield pos, size, parse_header(buf, rel + PREFIX_SIZE)
            pos += size

    def find_entry_position(self, offset: int) -> int | None:
        """Position of the entry whose base offset is exactly ``offset`` (None if not a boundary)."""
        if offset == self.next_offset:
            return self.size
        for pos, _size, header in self.iter_heads(self.lookup_position(offset), self.size):
            if header.base_offset == offset:
                return pos
            if header.base_offset > offset:
                return None
        return None

    # ---- recovery and truncation -------------------------------------------------------------

    def restore_stats_before(self, position: int) -> None:
        """Recompute stats for entries in [0, position), trusting the (already truncated) indexes.

        Uses the last time-index entry plus a head-only walk from the last offset-index entry,
        so the cost is about index.interval.bytes, not the segment size.
        """
        self.reset_stats()
        tlast = self.time_index.last()
        if tlast is not None:
            self.max_timestamp, self.offset_of_max_timestamp = tlast[0], self.base_offset + tlast[1]
        olast = self.offset_index.last()
        start = 0 if olast is None else olast[1]
        self.bytes_since_last_index = position - start if olast is not None else position
        if position > 0:
            first = parse_header(os.pread(self.fd, HEAD_SIZE, 0), PREFIX_SIZE)
            self.rolling_timestamp = first.max_timestamp
        for _pos, _size, header in self.iter_heads(start, position):
            if header.max_timestamp > self.max_timestamp or self.offset_of_max_timestamp < 0:
                self.max_timestamp, self.offset_of_max_timestamp = header.max_timestamp, header.base_offset
            self.next_offset = header.last_offset + 1
        if position == 0:
            self.next_offset = self.base_offset
        self.size = position

    def truncate_indexes(self, position: int, offset: int) -> None:
        """Drop index entries at or after ``position`` / ``offset`` in memory and on disk."""
        oidx, tidx = self.offset_index, self.time_index
        oidx.truncate_entries(oidx.valid_prefix(position, offset - self.base_offset))
        tidx.truncate_entries(tidx.valid_prefix(offset - self.base_offset))
        self._cut_index_files(oidx.written, tidx.written)

    def truncate_log(self, position: int) -> None:
        """Cut the .log file at ``position`` and fsync, so cut entries cannot come back."""
        self.make_writable()
        os.ftruncate(self.fd, position)
        datasync(self.fd)
        self.size = self.synced_size = position
        self._batch_bytes = None  # recounted on demand

    def recover(self, position: int, expected_offset: int, index_interval_bytes: int) -> ScanResult:
        """Verify entries from ``position`` to the end of the file, indexing them; cut at the first bad one.

        ``expected_offset`` is the base offset the entry at ``position`` must have (offsets are
        dense). A CRC-valid entry of an unknown version or kind raises EntryFormatError: it was
        written by a newer broker and must not be cut away.
        """
        file_size = os.fstat(self.fd).st_size
        pos = position
        buf = memoryview(b"")
        buf_pos = position
        corrupt = False
        while pos < file_size:
            if pos + HEAD_SIZE > file_size:
                corrupt = True
                break
            rel = pos - buf_pos
            if rel + HEAD_SIZE > len(buf):
                buf = memoryview(os.pread(self.fd, min(SCAN_CHUNK_BYTES, file_size - pos), pos))
                buf_pos, rel = pos, 0
            length = unpack_prefix(buf, rel)[0]
            size = LENGTH_SIZE + length
            if length < MIN_ENTRY_LENGTH or pos + size > file_size:
                corrupt = True
                break
            if rel + size > len(buf):
                buf = memoryview(os.pread(self.fd, max(size, min(SCAN_CHUNK_BYTES, file_size - pos)), pos))
                buf_pos, rel = pos, 0
            if not crc_matches(buf, rel, length):
                corrupt = True
                break
            _length, _crc, version, kind_value = unpack_prefix(buf, rel)
            check_version(version)
            kind = kind_of(kind_value)
            header = parse_header(buf, rel + PREFIX_SIZE)
            if (
                header.base_offset != expected_offset
                or header.last_offset_delta < 0
                or (kind is EntryKind.RECORDS and header.size != size - PREFIX_SIZE)
            ):
                corrupt = True  # stale (pre-truncation) data or an impossible entry
                break
            self.track(header.base_offset, header.last_offset, header.max_timestamp, pos, size, index_interval_bytes)
            expected_offset = header.last_offset + 1
            pos += size
        truncated = file_size - pos
        if truncated:
            log.warning(
                "truncating %d bytes of torn or corrupt data at position %d of %s", truncated, pos, self.log_path
            )
            self.truncate_log(pos)
        else:
            self.size = pos
        return ScanResult(scanned_bytes=pos - position, truncated_bytes=truncated, corrupt=corrupt)


def _sync_file(path: Path, flags: int, tail: bytes, position: int) -> None:
    """Write `tail` at `position` (unless negative) and fdatasync, through a descriptor opened
    for the moment."""
    fd = os.open(path, flags, 0o644)
    try:
        if position >= 0:
            _pwrite_all(fd, tail, position)
        datasync(fd)
    finally:
        os.close(fd)


def _pwrite_all(fd: int, data: bytes, position: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, position)
        view = view[n:]
        position += n
