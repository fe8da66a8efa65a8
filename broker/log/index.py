"""Sparse per-segment indexes, in Kafka's file layout, held in memory as raw bytes.

`.index` (offset index): entries of (relative offset u32, file position u32), big-endian, one
per `index.interval.bytes` of log; the relative offset is the *base* offset of the entry the
position points at, minus the segment's base offset.

`.timeindex` (time index): entries of (timestamp i64, relative offset u32), big-endian,
appended only when the segment's largest timestamp grows; (ts, off) means "the entry at
relative offset off has max_timestamp ts and no entry at or before it has a larger one".

The in-memory form is a bytearray with the same bytes as the file, searched by bisection with
struct.unpack_from, so loading costs one read and no per-entry Python work. Appends go to
memory only; `written` counts the bytes already in the file, and the log's flush writes the
tail. The file is therefore a prefix of memory, and anything missing after a crash is rebuilt
from the log by recovery.
"""

from __future__ import annotations

import struct

_OFFSET_ENTRY = struct.Struct(">II")
_TIME_ENTRY = struct.Struct(">qI")
OFFSET_ENTRY_SIZE = _OFFSET_ENTRY.size  # 8
TIME_ENTRY_SIZE = _TIME_ENTRY.size  # 12
MAX_RELATIVE_OFFSET = 2**31 - 1  # Kafka's limit (relative offsets are ints there)


class _Index:
    entry: struct.Struct

    __slots__ = ("buf", "written")

    def __init__(self, data: bytes | bytearray = b"") -> None:
        self.buf = bytearray(data)
        self.written = len(self.buf)  # bytes of buf already in the file

    def __len__(self) -> int:
        return len(self.buf) // self.entry.size

    @property
    def size_bytes(self) -> int:
        return len(self.buf)

    def entry_at(self, i: int) -> tuple[int, int]:
        return self.entry.unpack_from(self.buf, i * self.entry.size)

    def last(self) -> tuple[int, int] | None:
        n = len(self)
        return self.entry_at(n - 1) if n else None

    def truncate_entries(self, count: int) -> None:
        """Keep the first ``count`` entries."""
        del self.buf[count * self.entry.size :]
        self.written = min(self.written, len(self.buf))

    def unwritten(self) -> tuple[bytes, int]:
        """(tail not yet in the file, length of buf it brings the file to)."""
        return bytes(self.buf[self.written :]), len(self.buf)


class OffsetIndex(_Index):
    entry = _OFFSET_ENTRY
    __slots__ = ()

    def append(self, relative_offset: int, position: int) -> None:
        self.buf += _OFFSET_ENTRY.pack(relative_offset, position)

    def lookup(self, relative_offset: int) -> tuple[int, int] | None:
        """The last entry whose relative offset is <= ``relative_offset``, or None."""
        i = _floor(self.buf, len(self), _OFFSET_ENTRY, 0, relative_offset)
        return None if i < 0 else self.entry_at(i)

    def entries_below(self, relative_offset: int) -> int:
        """How many entries have a relative offset < ``relative_offset``."""
        return _floor(self.buf, len(self), _OFFSET_ENTRY, 0, relative_offset - 1) + 1

    def valid_prefix(self, limit_position: int, limit_relative_offset: int) -> int:
        """Entries from the start that are strictly increasing and below both limits."""
        count = 0
        prev_off = prev_pos = -1
        for off, pos in _OFFSET_ENTRY.iter_unpack(memoryview(self.buf)[: len(self) * OFFSET_ENTRY_SIZE]):
            if off <= prev_off or pos <= prev_pos or off >= limit_relative_offset or pos >= limit_position:
                break
            prev_off, prev_pos = off, pos
            count += 1
        return count


class TimeIndex(_Index):
    entry = _TIME_ENTRY
    __slots__ = ()

    def maybe_append(self, timestamp: int, relative_offset: int) -> bool:
        """Append when ``timestamp`` exceeds the last entry's (Kafka's maybeAppend)."""
        last = self.last()
        if last is not None and timestamp <= last[0]:
            return False
        self.buf += _TIME_ENTRY.pack(timestamp, relative_offset)
        return True

    def last_below(self, timestamp: int) -> tuple[int, int] | None:
        """The last entry whose timestamp is < ``timestamp``, or None."""
        i = _floor(self.buf, len(self), _TIME_ENTRY, 0, timestamp - 1)
        return None if i < 0 else self.entry_at(i)

    def valid_prefix(self, limit_relative_offset: int) -> int:
        """Entries from the start with strictly increasing timestamps and offsets below the limit."""
        count = 0
        prev_ts = prev_off = None
        for ts, off in _TIME_ENTRY.iter_unpack(memoryview(self.buf)[: len(self) * TIME_ENTRY_SIZE]):
            if off >= limit_relative_offset or (prev_ts is not None and (ts <= prev_ts or off < prev_off)):
                break
            prev_ts, prev_off = ts, off
            count += 1
        return count


def _floor(buf: bytearray, n: int, entry: struct.Struct, field: int, key: int) -> int:
    """Index of the last entry whose ``field`` is <= key (entries sorted by it), or -1."""
    lo, hi = 0, n
    size = entry.size
    unpack = entry.unpack_from
    while lo < hi:
        mid = (lo + hi) // 2
        if unpack(buf, mid * size)[field] <= key:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1
