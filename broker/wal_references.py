"""Which WAL objects one replica's partition log references: what this replica tells the WAL
file manager (broker/walfiles/), so that it never deletes an object the replica can still serve.

Two questions, both over the COORDINATES entries from the log start offset to the log end
(the uncommitted tail included: a follower may become leader with it):
- `oldest_created_ms`: the smallest creation time (from the object id, walfiles/keys.py) of
  any referenced object, the replica's low watermark;
- `referenced_among`: which of some given objects it references, for objects the watermark
  alone cannot clear (created after the oldest reference, e.g. an upload whose commit never
  happened).

The log is summarised in chunks of up to CHUNK_ENTRIES entries, each with the smallest and
largest creation time it references, kept per segment and extended incrementally: a sealed
segment is scanned once, the active one from where the last scan stopped, so the watermark
costs the entries appended since the last question, not the log. Entries are appended in
commit order and a commit names an object at most `wal.commit.deadline.ms` old, so a chunk's
time range is narrow and `referenced_among` reads only the chunks whose range holds an
asked object's creation time. A truncation (a divergent tail, a failed append cut back, a
follower restarting at the leader's log start) forgets what was derived from the entries it
dropped; a log start moved inside a segment (DeleteRecords) rescans that segment from the
new start, so deleted records stop pinning their objects at once.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from walfiles.keys import parse_wal_id

from .log import EntryKind, PartitionLog
from .log.coordinates import decode_ref

CHUNK_ENTRIES = 256


def created_ms_of(object_id: str) -> int:
    return parse_wal_id(object_id)[0]


@dataclass(slots=True)
class _Chunk:
    """Entries in [first, end) reference objects created within [oldest, newest]."""

    first: int
    end: int
    entries: int
    oldest: int | None = None
    newest: int | None = None


@dataclass(slots=True)
class _Scanned:
    """One segment's entries in [begin, end), in chunks; `oldest` over all of them."""

    begin: int
    end: int
    chunks: list[_Chunk] = field(default_factory=list)
    oldest: int | None = None


class WalReferences:
    def __init__(self, log: PartitionLog, created_ms: Callable[[str], int] = created_ms_of) -> None:
        self._log = log
        self._created_ms = created_ms
        self._segments: dict[int, _Scanned] = {}  # by segment base offset
        log.truncation_listeners.append(self._forget_from)

    def oldest_created_ms(self) -> int | None:
        """The creation time of the oldest WAL object the log references from its log start
        offset on; None when it references none."""
        oldest: int | None = None
        for scanned in self._scanned():
            if scanned.oldest is not None and (oldest is None or scanned.oldest < oldest):
                oldest = scanned.oldest
        return oldest

    def referenced_among(self, asked: Mapping[str, int]) -> dict[str, int]:
        """Of `asked` (object id -> its creation time), the objects the log references, each
        with the last offset of the oldest entry referencing it (below the high watermark:
        the reference is committed, for good)."""
        found: dict[str, int] = {}
        if not asked:
            return found
        times = sorted(set(asked.values()))
        for chunk in (chunk for scanned in self._scanned() for chunk in scanned.chunks):
            if chunk.oldest is None or chunk.newest is None:
                continue
            if not _any_within(times, chunk.oldest, chunk.newest):
                continue
            for entry in self._log.iter_entries(chunk.first):
                if entry.base_offset >= chunk.end:
                    break
                if entry.kind is EntryKind.COORDINATES:
                    object_id = decode_ref(entry.payload).object_id
                    if object_id in asked:
                        found.setdefault(object_id, entry.last_offset)
        return found

    def _scanned(self) -> list[_Scanned]:
        """Every segment from the log start offset to the log end, scanning what is new."""
        log = self._log
        bases = log.segment_base_offsets
        start, end = log.log_start_offset, log.log_end_offset
        for gone in self._segments.keys() - set(bases):
            del self._segments[gone]
        segments: list[_Scanned] = []
        for i, base in enumerate(bases):
            segment_end = bases[i + 1] if i + 1 < len(bases) else end
            begin = max(base, start)
            if begin >= segment_end:
                self._segments.pop(base, None)
                continue
            scanned = self._segments.get(base)
            if scanned is None or scanned.begin != begin:
                scanned = self._segments[base] = _Scanned(begin, begin)
            if scanned.end < segment_end:
                self._scan(scanned, segment_end)
            segments.append(scanned)
        return segments

    def _scan(self, scanned: _Scanned, segment_end: int) -> None:
        chunk = scanned.chunks[-1] if scanned.chunks and scanned.chunks[-1].entries < CHUNK_ENTRIES else None
        for entry in self._log.iter_entries(scanned.end):
            if entry.base_offset >= segment_end:
                break
            if chunk is None or chunk.entries >= CHUNK_ENTRIES:
                chunk = _Chunk(entry.base_offset, entry.base_offset, 0)
                scanned.chunks.append(chunk)
            if entry.kind is EntryKind.COORDINATES:
                created = self._created_ms(decode_ref(entry.payload).object_id)
                if chunk.oldest is None or created < chunk.oldest:
                    chunk.oldest = created
                if chunk.newest is None or created > chunk.newest:
                    chunk.newest = created
                if scanned.oldest is None or created < scanned.oldest:
                    scanned.oldest = created
            chunk.entries += 1
            chunk.end = scanned.end = entry.last_offset + 1

    def _forget_from(self, offset: int) -> None:
        for base, scanned in list(self._segments.items()):
            if scanned.end > offset:
                del self._segments[base]


def _any_within(times: list[int], low: int, high: int) -> bool:
    """Whether the sorted `times` hold a value in [low, high], in O(log n)."""
    i = bisect.bisect_left(times, low)
    return i < len(times) and times[i] <= high
