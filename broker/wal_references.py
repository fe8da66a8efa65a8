"""The oldest WAL object one replica's partition log references: what this replica tells the
WAL file manager (walgc/), so that it never deletes an object the replica can still serve.

A replica's answer is the smallest creation time (from the object id, walfiles/keys.py) over
the COORDINATES entries from its log start offset to its log end, the uncommitted tail
included (a follower may become leader with it). It is kept per segment and extended
incrementally: a sealed segment is scanned once, the active one from where the last scan
stopped, so asking costs the entries appended since the last question, not the log. A
truncation (a divergent tail, a failed append cut back, a follower restarting at the leader's
log start) forgets what was derived from the entries it dropped; a log start moved inside a
segment (DeleteRecords) rescans that segment from the new start, so records deleted by
DeleteRecords stop pinning their objects at once, not when their segment goes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from walfiles.keys import parse_wal_id

from .log import EntryKind, PartitionLog
from .log.coordinates import decode_ref


def created_ms_of(object_id: str) -> int:
    return parse_wal_id(object_id)[0]


@dataclass(slots=True)
class _Scanned:
    """What is known of one segment: entries in [begin, end) were scanned; `oldest` is the
    smallest creation time among their references (None: none referenced an object)."""

    begin: int
    end: int
    oldest: int | None


class WalReferences:
    def __init__(self, log: PartitionLog, created_ms: Callable[[str], int] = created_ms_of) -> None:
        self._log = log
        self._created_ms = created_ms
        self._segments: dict[int, _Scanned] = {}  # by segment base offset
        log.truncation_listeners.append(self._forget_from)

    def oldest_created_ms(self) -> int | None:
        """The creation time of the oldest WAL object the log references from its log start
        offset on; None when it references none."""
        log = self._log
        bases = log.segment_base_offsets
        start, end = log.log_start_offset, log.log_end_offset
        for gone in self._segments.keys() - set(bases):
            del self._segments[gone]
        oldest: int | None = None
        for i, base in enumerate(bases):
            segment_end = bases[i + 1] if i + 1 < len(bases) else end
            begin = max(base, start)
            if begin >= segment_end:
                self._segments.pop(base, None)
                continue
            scanned = self._segments.get(base)
            if scanned is None or scanned.begin != begin:
                scanned = self._segments[base] = _Scanned(begin, begin, None)
            if scanned.end < segment_end:
                self._scan(scanned, segment_end)
            if scanned.oldest is not None and (oldest is None or scanned.oldest < oldest):
                oldest = scanned.oldest
        return oldest

    def _scan(self, scanned: _Scanned, segment_end: int) -> None:
        for entry in self._log.iter_entries(scanned.end):
            if entry.base_offset >= segment_end:
                break
            if entry.kind is EntryKind.COORDINATES:
                created = self._created_ms(decode_ref(entry.payload).object_id)
                if scanned.oldest is None or created < scanned.oldest:
                    scanned.oldest = created
            scanned.end = entry.last_offset + 1

    def _forget_from(self, offset: int) -> None:
        for base, scanned in list(self._segments.items()):
            if scanned.end > offset:
                del self._segments[base]
