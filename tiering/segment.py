"""Kafka's log-segment file set, built from record batches: what a KIP-405 RemoteStorageManager
keeps for one segment (LogSegmentData), in Kafka's own layouts so that Kafka's tools and
other readers understand our tiered segments.

- ``.log``: the v2 record batches back to back, exactly as a fetch serves them (offsets and
  leader epochs already patched by the caller).
- ``.index``: 8-byte entries (relative offset i32, position i32), big-endian. As Kafka's
  LogSegment.append does, an entry is added when more than ``index.interval.bytes`` were
  written since the last one, and it maps the *largest* offset of the batch to the position
  where that batch starts (a lookup of offset o takes the last entry <= o and scans forward).
- ``.timeindex``: 12-byte entries (timestamp i64, relative offset i32), added with the offset
  index entries when the largest timestamp so far grew, plus a final entry for the segment's
  largest timestamp (Kafka appends it when a segment becomes inactive). The offset is the
  last offset of the batch holding that timestamp.
- ``.snapshot``: Kafka's producer-state snapshot (ProducerStateManager, version 1): int16
  version, uint32 CRC32C of everything after the CRC, int32 count, then per producer: int64
  id, int16 epoch, int32 last sequence, int64 last offset, int32 offset delta, int64
  timestamp, int32 coordinator epoch, int64 first offset of the ongoing transaction.
- ``.leader-epoch-checkpoint``: Kafka's text checkpoint (version 0, count, "epoch offset" lines).

Nothing here iterates records: only the 61-byte batch headers are read. Pure code: bytes in,
bytes out, no I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import crc32c

from broker.protocol.batch import BATCH_HEADER_SIZE, BatchHeader, parse_header

OFFSET_INDEX_ENTRY = struct.Struct(">iI")
TIME_INDEX_ENTRY = struct.Struct(">qi")
MAX_SEGMENT_BYTES = 2**31 - 1  # RemoteLogSegmentMetadata.segmentSizeInBytes is an int32
MAX_RELATIVE_OFFSET = 2**31 - 1
PRODUCER_SNAPSHOT_VERSION = 1
_SNAPSHOT_HEAD = struct.Struct(">hI")
_SNAPSHOT_COUNT = struct.Struct(">i")
_SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")
NO_TIMESTAMP = -1


class SegmentTooLarge(ValueError):
    """The batches do not fit one segment (2 GiB, or more than 2**31 offsets)."""


@dataclass(frozen=True, slots=True)
class ProducerSnapshotEntry:
    """One producer's state at the end of a segment, in the fields Kafka's snapshot keeps."""

    producer_id: int
    epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int  # last offset - first offset of the producer's last batch
    timestamp_ms: int
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1


@dataclass(slots=True)
class SegmentIndexes:
    """The offset and time indexes and the statistics of one segment, built batch by batch."""

    base_offset: int
    index_interval_bytes: int
    offset_index: bytearray = field(default_factory=bytearray)
    time_index: bytearray = field(default_factory=bytearray)
    size: int = 0
    next_offset: int = -1
    max_timestamp: int = NO_TIMESTAMP
    offset_of_max_timestamp: int = -1
    batches: int = 0
    _since_last_entry: int = 0
    _last_indexed_timestamp: int = NO_TIMESTAMP

    def add(self, header: BatchHeader) -> None:
        """Account for the next batch of the segment (its header, with the final offsets)."""
        if self.batches == 0 and header.base_offset != self.base_offset:
            raise ValueError(f"first batch starts at {header.base_offset}, the segment at {self.base_offset}")
        if self.batches and header.base_offset != self.next_offset:
            raise ValueError(f"batch at {header.base_offset} does not follow offset {self.next_offset - 1}")
        last = header.base_offset + header.last_offset_delta
        if last - self.base_offset > MAX_RELATIVE_OFFSET:
            raise SegmentTooLarge(f"offset {last} is more than 2**31-1 above the segment base {self.base_offset}")
        if self.size + header.size > MAX_SEGMENT_BYTES:
            raise SegmentTooLarge(f"segment would exceed {MAX_SEGMENT_BYTES} bytes")
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp, self.offset_of_max_timestamp = header.max_timestamp, last
        if self._since_last_entry > self.index_interval_bytes:
            self.offset_index += OFFSET_INDEX_ENTRY.pack(last - self.base_offset, self.size)
            self._maybe_time_entry()
            self._since_last_entry = 0
        self._since_last_entry += header.size
        self.size += header.size
        self.next_offset = last + 1
        self.batches += 1

    def finish(self) -> None:
        """The segment is complete: the final time-index entry, as Kafka adds on roll."""
        self._maybe_time_entry()

    def _maybe_time_entry(self) -> None:
        if self.max_timestamp > self._last_indexed_timestamp:
            self.time_index += TIME_INDEX_ENTRY.pack(
                self.max_timestamp, self.offset_of_max_timestamp - self.base_offset
            )
            self._last_indexed_timestamp = self.max_timestamp


def index_batches(
    batches: Iterable[bytes | bytearray | memoryview], base_offset: int, index_interval_bytes: int
) -> SegmentIndexes:
    """The indexes of a segment made of `batches` (complete v2 batches, offsets patched)."""
    indexes = SegmentIndexes(base_offset, index_interval_bytes)
    for batch in batches:
        indexes.add(parse_header(batch))
    indexes.finish()
    return indexes


def lookup_position(offset_index: bytes | bytearray | memoryview, base_offset: int, offset: int) -> int:
    """Where to start scanning the .log for `offset`: the position of the last index entry
    whose offset is <= `offset` (0 when none is)."""
    low, high = 0, len(offset_index) // OFFSET_INDEX_ENTRY.size
    target = offset - base_offset
    while low < high:
        mid = (low + high) // 2
        if OFFSET_INDEX_ENTRY.unpack_from(offset_index, mid * OFFSET_INDEX_ENTRY.size)[0] <= target:
            low = mid + 1
        else:
            high = mid
    return 0 if low == 0 else OFFSET_INDEX_ENTRY.unpack_from(offset_index, (low - 1) * OFFSET_INDEX_ENTRY.size)[1]


def lookup_timestamp(time_index: bytes | bytearray | memoryview, base_offset: int, timestamp_ms: int) -> int:
    """The offset from which to look for the first batch with a timestamp >= `timestamp_ms`:
    that of the last time-index entry below it (Kafka's TimeIndex.lookup), else the base."""
    found = base_offset
    for position in range(0, len(time_index) - TIME_INDEX_ENTRY.size + 1, TIME_INDEX_ENTRY.size):
        ts, relative = TIME_INDEX_ENTRY.unpack_from(time_index, position)
        if ts >= timestamp_ms:
            break
        found = base_offset + relative
    return found


def encode_producer_snapshot(entries: Sequence[ProducerSnapshotEntry]) -> bytes:
    body = bytearray(_SNAPSHOT_COUNT.pack(len(entries)))
    for e in sorted(entries, key=lambda e: e.producer_id):
        body += _SNAPSHOT_ENTRY.pack(
            e.producer_id,
            e.epoch,
            e.last_sequence,
            e.last_offset,
            e.offset_delta,
            e.timestamp_ms,
            e.coordinator_epoch,
            e.current_txn_first_offset,
        )
    return _SNAPSHOT_HEAD.pack(PRODUCER_SNAPSHOT_VERSION, crc32c.crc32c(body)) + bytes(body)


def encode_leader_epoch_checkpoint(epochs: Sequence[tuple[int, int]]) -> bytes:
    """Kafka's leader-epoch checkpoint text: "0", the count, then "epoch start_offset" lines."""
    lines = ["0", str(len(epochs)), *(f"{epoch} {offset}" for epoch, offset in epochs)]
    return ("\n".join(lines) + "\n").encode()


def split_log(data: bytes | bytearray | memoryview, start: int = 0) -> list[tuple[int, BatchHeader]]:
    """(position, header) of every complete batch in `data` from `start`; a cut-off batch at
    the end (a ranged GET that stopped mid-batch) is left out."""
    view = memoryview(data)
    found = []
    pos = start
    while len(view) - pos >= BATCH_HEADER_SIZE:
        header = parse_header(view, pos)
        if pos + header.size > len(view):
            break
        found.append((pos, header))
        pos += header.size
    return found
