"""A partition's tiered segments, as its committed remote-segment markers say (markers.py).

Markers are applied only once committed (below the high watermark), on the leader and on
every follower alike, so the set never has to be rolled back when a divergent tail is
truncated: until then a marker waits in `pending`. KIP-405's transition rules hold (a state
may repeat, for retries; anything else is ignored with a warning), and a COPY_FINISHED that
overlaps a finished (COPY_FINISHED) segment is refused, so readable segments never overlap.

It also holds the partition's log start offset as DeleteRecords moved it (Kafka's
`UnifiedLog.logStartOffset`, which may lie inside the tiered range or above it): readers see
no segment wholly below it and no offset under it, and the offload service deletes the
segments wholly below it (Kafka's RemoteLogManager deletes on a log-start breach).

Persisted as ``remote-segments.checkpoint`` (magic, version, CRC32C, msgpack), written
atomically whenever a marker is applied, the log start offset moves, and at every segment
roll, with `applied_through`: every marker below it is in the file. Opening the partition
replays the log from there, so a follower whose local segments holding old markers were
deleted still knows every segment.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterable
from pathlib import Path

import msgspec

from broker.log.framed_file import FramedFileError, unframe, write_framed
from broker.log.markers import RemoteSegmentEvent, RemoteSegmentState

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "remote-segments.checkpoint"
_MAGIC = b"SHRS"
_VERSION = 1

_VALID = {
    RemoteSegmentState.COPY_SEGMENT_STARTED: {
        RemoteSegmentState.COPY_SEGMENT_STARTED,
        RemoteSegmentState.COPY_SEGMENT_FINISHED,
        RemoteSegmentState.DELETE_SEGMENT_STARTED,
    },
    RemoteSegmentState.COPY_SEGMENT_FINISHED: {
        RemoteSegmentState.COPY_SEGMENT_FINISHED,
        RemoteSegmentState.DELETE_SEGMENT_STARTED,
    },
    RemoteSegmentState.DELETE_SEGMENT_STARTED: {
        RemoteSegmentState.DELETE_SEGMENT_STARTED,
        RemoteSegmentState.DELETE_SEGMENT_FINISHED,
    },
}


class RemoteSegmentsError(ValueError):
    """The checkpoint file is corrupt or of an unknown version."""


class RemoteSegment(msgspec.Struct):
    """One tiered segment and its current state."""

    segment_id: str
    base_offset: int
    end_offset: int  # inclusive
    leader_epoch: int
    state: RemoteSegmentState
    size_bytes: int
    max_timestamp_ms: int
    plan_id: str
    index_bytes: int = 0
    time_index_bytes: int = 0
    txn_index_bytes: int = 0  # 0: no aborted transaction has its marker in the segment

    @property
    def next_offset(self) -> int:
        return self.end_offset + 1


class _Checkpoint(msgspec.Struct, array_like=True):
    applied_through: int
    segments: list[RemoteSegment]
    log_start_offset: int = 0  # moved by DeleteRecords; absent in files written before it existed


_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(_Checkpoint)
_SEGMENT_DECODER = msgspec.msgpack.Decoder(RemoteSegment)


def encode_segment(segment: RemoteSegment) -> bytes:
    """One segment's description, for a broker that reads it without hosting the partition."""
    return _ENCODER.encode(segment)


def decode_segment(data: bytes) -> RemoteSegment:
    return _SEGMENT_DECODER.decode(data)


class RemoteSegments:
    def __init__(
        self,
        path: Path | None = None,
        applied_through: int = 0,
        segments: Iterable[RemoteSegment] = (),
        log_start_offset: int = 0,
    ):
        self._path = path
        self._known = path is not None and path.exists()
        self.applied_through = applied_through
        # Nothing below it is served (DeleteRecords, or the leader's value a follower learnt);
        # it never moves back.
        self.log_start_offset = log_start_offset
        self._segments: dict[str, RemoteSegment] = {s.segment_id: s for s in segments}
        self._pending: list[tuple[int, int, RemoteSegmentEvent]] = []  # (offset, entry epoch, event)
        self._finished: list[RemoteSegment] = []  # every COPY_FINISHED segment, in offset order
        self._readable: list[RemoteSegment] = []  # those not wholly below the log start offset
        self._bases: list[int] = []
        self._reindex()

    @classmethod
    def open(cls, directory: Path) -> "RemoteSegments":
        path = directory / CHECKPOINT_FILE
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return cls(path)
        try:
            ckpt = _DECODER.decode(unframe(raw, _MAGIC, _VERSION, "remote-segments checkpoint"))
        except FramedFileError as exc:
            raise RemoteSegmentsError(f"{path}: {exc}") from None
        return cls(path, ckpt.applied_through, ckpt.segments, ckpt.log_start_offset)

    @property
    def known(self) -> bool:
        """Whether this partition ever had a marker (else opening it need not scan the log)."""
        return self._known

    # -- what readers see ----------------------------------------------------------------------
    @property
    def readable(self) -> list[RemoteSegment]:
        """COPY_FINISHED segments not wholly below the log start offset, in offset order: they
        serve reads (the first may start below it: reads in it start at the log start offset)."""
        return list(self._readable)

    def below_log_start(self) -> list[RemoteSegment]:
        """COPY_FINISHED segments wholly below the log start offset: DeleteRecords dropped
        them, nobody reads them, and the offload service deletes them."""
        return [s for s in self._finished if s.end_offset < self.log_start_offset]

    @property
    def segments(self) -> list[RemoteSegment]:
        """Every known segment, whatever its state, in offset order."""
        return sorted(self._segments.values(), key=lambda s: (s.base_offset, s.segment_id))

    def segment_for(self, offset: int) -> RemoteSegment | None:
        """The readable segment holding `offset` (None below the log start offset)."""
        if offset < self.log_start_offset:
            return None
        i = bisect.bisect_right(self._bases, offset) - 1
        if i >= 0 and self._readable[i].base_offset <= offset <= self._readable[i].end_offset:
            return self._readable[i]
        return None

    @property
    def start_offset(self) -> int | None:
        """The first offset a reader finds in tiered storage, or None."""
        return max(self._readable[0].base_offset, self.log_start_offset) if self._readable else None

    @property
    def tiered_end(self) -> int:
        """The offset after the last readable segment (0 when none is)."""
        return self._readable[-1].next_offset if self._readable else 0

    def covered_end(self, start: int) -> int:
        """The end of the readable segments that cover [start, end) without a gap (`start`
        itself when none covers it): what local retention may drop below."""
        end = start
        for segment in self._readable:
            if segment.base_offset <= end <= segment.end_offset:
                end = segment.next_offset
        return end

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self._readable)

    def has_pending(self, segment_id: str) -> bool:
        """Whether a marker of this segment is in the log but not committed yet."""
        return any(event.segment_id == segment_id for _offset, _epoch, event in self._pending)

    def in_state(self, state: RemoteSegmentState) -> list[RemoteSegment]:
        return [s for s in self.segments if s.state == state]

    def advance_log_start(self, offset: int) -> bool:
        """Move the log start offset up to `offset` (never down); True when it moved. Durable
        at once once the partition has a checkpoint; before its first marker nothing is tiered,
        so the local log start (moved by the caller) says the same, and the first write
        carries it."""
        if offset <= self.log_start_offset:
            return False
        self.log_start_offset = offset
        self._reindex()
        if self._known:
            self.persist()
        return True

    # -- markers -------------------------------------------------------------------------------
    def on_append(self, offset: int, entry_epoch: int, event: RemoteSegmentEvent) -> None:
        """A marker entered the log (leader append, replication, or replay at open)."""
        if not self._known:  # the file now exists, so a restart replays the log from here
            self._known, self.applied_through = True, offset
            self.persist()
        if offset >= self.applied_through:
            self._pending.append((offset, entry_epoch, event))

    def on_truncate(self, offset: int) -> None:
        """Entries from `offset` on were cut off: their markers will never apply, and the
        markers that replace them must (a truncation never reaches below the high watermark,
        so nothing applied is undone, but `applied_through` may have been set above it by a
        marker this replica appended as leader and has now lost)."""
        self._pending = [p for p in self._pending if p[0] < offset]
        if self.applied_through > offset:
            self.applied_through = offset
            self.persist()

    def commit_through(self, high_watermark: int) -> bool:
        """Apply the markers below the high watermark; True when the set changed."""
        ready = [p for p in self._pending if p[0] < high_watermark]
        if not ready:
            return False
        self._pending = [p for p in self._pending if p[0] >= high_watermark]
        for offset, entry_epoch, event in sorted(ready, key=lambda p: p[0]):
            self._apply(offset, entry_epoch, event)
            self._reindex()  # the next marker's checks see this one applied, as if one at a time
        self.applied_through = max(self.applied_through, high_watermark)
        self.persist()
        return True

    def checkpoint_at(self, high_watermark: int) -> None:
        """Persist with `applied_through` moved up to the high watermark (a segment roll):
        opening the partition then replays only the log after it."""
        self.commit_through(high_watermark)
        if not self._pending or min(p[0] for p in self._pending) >= high_watermark:
            self.applied_through = max(self.applied_through, high_watermark)
        self.persist()

    def _apply(self, offset: int, entry_epoch: int, event: RemoteSegmentEvent) -> None:
        current = self._segments.get(event.segment_id)
        if current is None:
            if event.state in (RemoteSegmentState.COPY_SEGMENT_STARTED, RemoteSegmentState.COPY_SEGMENT_FINISHED):
                current = RemoteSegment(
                    event.segment_id,
                    event.base_offset,
                    event.end_offset,
                    event.leader_epoch,
                    RemoteSegmentState.COPY_SEGMENT_STARTED,
                    event.size_bytes,
                    event.max_timestamp_ms,
                    event.plan_id,
                )
            else:
                return  # a delete of a segment already gone: nothing to do
        if event.state not in _VALID[current.state]:
            log.warning(
                "ignoring marker at %d: %s -> %s for segment %s",
                offset,
                current.state.name,
                event.state.name,
                event.segment_id,
            )
            return
        if event.state == RemoteSegmentState.COPY_SEGMENT_FINISHED:
            if entry_epoch != event.leader_epoch or self._overlaps(event):
                log.warning(
                    "ignoring COPY_SEGMENT_FINISHED at %d for segment %s: fenced or overlapping",
                    offset,
                    event.segment_id,
                )
                return
            current.size_bytes, current.max_timestamp_ms = event.size_bytes, event.max_timestamp_ms
            current.index_bytes, current.time_index_bytes = event.index_bytes, event.time_index_bytes
            current.txn_index_bytes = event.txn_index_bytes
        if event.state == RemoteSegmentState.DELETE_SEGMENT_FINISHED:
            self._segments.pop(event.segment_id, None)
            return
        current.state = event.state
        self._segments[event.segment_id] = current

    def _overlaps(self, event: RemoteSegmentEvent) -> bool:
        """Against every finished segment, below the log start offset too: replicas may learn
        that offset at different times, and must all decide alike."""
        return any(
            s.base_offset <= event.end_offset and event.base_offset <= s.end_offset and s.segment_id != event.segment_id
            for s in self._finished
        )

    def _reindex(self) -> None:
        self._finished = sorted(
            (s for s in self._segments.values() if s.state == RemoteSegmentState.COPY_SEGMENT_FINISHED),
            key=lambda s: s.base_offset,
        )
        self._readable = [s for s in self._finished if s.end_offset >= self.log_start_offset]
        self._bases = [s.base_offset for s in self._readable]

    def snapshot(self) -> bytes:
        """The applied state, for a follower that starts over above the markers (install)."""
        return _ENCODER.encode(self._checkpoint())

    def _checkpoint(self) -> _Checkpoint:
        return _Checkpoint(self.applied_through, self.segments, self.log_start_offset)

    def install(self, snapshot: bytes, log_start_offset: int) -> None:
        """Take the leader's applied state (a follower whose log restarts at
        `log_start_offset`, above markers it never saw). Markers from `log_start_offset` on
        are replicated as usual; applying one again is a repeat, which the rules allow."""
        try:
            leader = _DECODER.decode(snapshot)
        except msgspec.DecodeError as exc:
            log.warning("ignoring an unreadable remote-segments snapshot from the leader: %s", exc)
            return
        self._segments = {s.segment_id: s for s in leader.segments}
        self._pending = [p for p in self._pending if p[0] >= log_start_offset]
        self._known, self.applied_through = True, log_start_offset
        self.log_start_offset = max(self.log_start_offset, leader.log_start_offset)
        self._reindex()
        self.persist()

    def persist(self) -> None:
        if self._path is None:
            return
        write_framed(self._path, _MAGIC, _VERSION, _ENCODER.encode(self._checkpoint()))
