"""An independent reader and validator of Apache Kafka's on-disk log-segment file set.

Written for tests from Kafka's own sources (apache/kafka, trunk at 1eb7644349cb, Oct 2024), never from this
repository's writer, so that the two can check each other:

- clients/src/main/java/org/apache/kafka/common/record/DefaultRecordBatch.java: the v2 batch header (field order
  and offsets, RECORD_BATCH_OVERHEAD = 61), the CRC32C over attributes..end of batch, the attribute bits
  (compression 0-2, timestamp type 3, transactional 4, control 5), lastSequence() and incrementSequence() (wrap
  at Integer.MAX_VALUE).
- clients/src/main/java/org/apache/kafka/common/record/DefaultRecord.java: the varint record layout (readFrom),
  checked here for uncompressed batches only.
- storage/src/main/java/org/apache/kafka/storage/internals/log/OffsetIndex.java and TimeIndex.java: 8-byte
  entries (int32 relative offset, int32 position), 12-byte entries (int64 timestamp, int32 relative offset);
  append() and maybeAppend() for the ordering rules.
- storage/src/main/java/org/apache/kafka/storage/internals/log/LogSegment.java: append(), recover() and
  onBecomeInactiveSegment() for what the index entries point at (see check_segment).
- storage/src/main/java/org/apache/kafka/storage/internals/log/ProducerStateManager.java (readSnapshot,
  writeSnapshot), storage/src/main/resources/message/ProducerSnapshot.json (the generated message, version 1,
  not flexible, so its array has an int32 count), ProducerStateEntry.java, BatchMetadata.java and
  ProducerAppendInfo.java (what each snapshot field holds).
- server-common/src/main/java/org/apache/kafka/server/common/CheckpointFile.java and
  storage/src/main/java/org/apache/kafka/storage/internals/checkpoint/LeaderEpochCheckpointFile.java: the
  text checkpoint ("0", count, "epoch startOffset" lines); LeaderEpochFileCache.java for its monotonicity and
  core/src/main/java/kafka/log/remote/RemoteLogManager.java for what a tiered segment's copy holds.
"""

from __future__ import annotations

import bisect
import re
import struct
from dataclasses import dataclass

import crc32c

__all__ = [
    "BatchInfo",
    "ProducerEntry",
    "SegmentFormatError",
    "check_segment",
    "read_leader_epoch_checkpoint",
    "read_log",
    "read_offset_index",
    "read_producer_snapshot",
    "read_time_index",
]


class SegmentFormatError(AssertionError):
    """The file set does not follow Kafka's on-disk format."""


# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta, baseTimestamp,
# maxTimestamp, producerId, producerEpoch, baseSequence, recordsCount
_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")  # 61 bytes: Kafka's RECORD_BATCH_OVERHEAD
_LOG_OVERHEAD = 12  # baseOffset + batchLength: batchLength counts the bytes after it
_MAGIC_AT = 16
_CRC_FROM = 21  # the CRC covers attributes .. end of batch; partitionLeaderEpoch is deliberately outside it
_COMPRESSION_MASK, _TRANSACTIONAL, _CONTROL = 0x07, 0x10, 0x20
_INT32_MAX = 2**31 - 1
# ProducerId, Epoch, LastSequence, LastOffset, OffsetDelta, Timestamp, CoordinatorEpoch, CurrentTxnFirstOffset
_PRODUCER_ENTRY = struct.Struct(">qhiqiqiq")  # 46 bytes
_EPOCH_LINE = re.compile(r"(\d+) (\d+)")  # LeaderEpochCheckpointFile.Formatter: epoch + " " + startOffset


@dataclass
class BatchInfo:
    position: int
    size: int
    base_offset: int
    last_offset: int
    partition_leader_epoch: int
    magic: int
    attributes: int
    is_control: bool
    is_transactional: bool
    max_timestamp: int
    first_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def last_offset_delta(self) -> int:
        return self.last_offset - self.base_offset

    @property
    def last_sequence(self) -> int:
        """DefaultRecordBatch.lastSequence(): base + lastOffsetDelta, wrapping past Integer.MAX_VALUE to 0."""
        if self.base_sequence == -1:
            return -1
        return (self.base_sequence + self.last_offset_delta) % (_INT32_MAX + 1)


@dataclass
class ProducerEntry:
    producer_id: int
    epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint/varlong (ByteUtils.readVarint/readVarlong); returns (value, next position)."""
    raw, shift = 0, 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise SegmentFormatError(f"truncated or overlong varint at record byte {pos}")
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7


def _check_records(body: bytes, count: int, last_offset_delta: int, where: str) -> None:
    """Walk uncompressed DefaultRecords: each must fill exactly its length, deltas must increase."""
    pos, prev_delta = 0, -1
    for i in range(count):
        length, pos = _varint(body, pos)
        end = pos + length
        if length < 0 or end > len(body):
            raise SegmentFormatError(f"{where}: record {i} length {length} overruns the batch")
        pos += 1  # record attributes (unused)
        _, pos = _varint(body, pos)  # timestampDelta
        delta, pos = _varint(body, pos)
        if not prev_delta < delta <= last_offset_delta:
            raise SegmentFormatError(f"{where}: record {i} offset delta {delta} after {prev_delta}")
        prev_delta = delta
        for field in ("key", "value"):
            n, pos = _varint(body, pos)
            if n < -1:
                raise SegmentFormatError(f"{where}: record {i} {field} length {n}")
            pos += max(n, 0)
        headers, pos = _varint(body, pos)
        if headers < 0:
            raise SegmentFormatError(f"{where}: record {i} has {headers} headers")
        for _ in range(headers):
            n, pos = _varint(body, pos)  # header key: a non-null string
            if n < 0:
                raise SegmentFormatError(f"{where}: record {i} header key length {n}")
            n, pos = _varint(body, pos + n)
            pos += max(n, 0)
        if pos != end:
            raise SegmentFormatError(f"{where}: record {i} body is {pos - end:+d} bytes off its length")
    if pos != len(body):
        raise SegmentFormatError(f"{where}: {len(body) - pos} bytes after the {count} records")


def read_log(data: bytes) -> list[BatchInfo]:
    """Walk the v2 record batches of a .log file; the file must be exactly a sequence of valid batches."""
    batches, pos = [], 0
    while pos < len(data):
        where = f"batch at position {pos}"
        if len(data) - pos < _LOG_OVERHEAD:
            raise SegmentFormatError(f"{where}: {len(data) - pos} trailing bytes, less than a batch header")
        length = struct.unpack_from(">i", data, pos + 8)[0]
        size = _LOG_OVERHEAD + length
        if size < _BATCH_HEADER.size:
            raise SegmentFormatError(f"{where}: batch length {length} is below the v2 header size")
        if pos + size > len(data):
            raise SegmentFormatError(f"{where}: truncated, {size} bytes declared, {len(data) - pos} present")
        if data[pos + _MAGIC_AT] != 2:
            raise SegmentFormatError(f"{where}: magic {data[pos + _MAGIC_AT]}, expected 2")
        (base, _, epoch, magic, crc, attrs, delta, first_ts, max_ts, pid, pepoch, seq, count) = (
            _BATCH_HEADER.unpack_from(data, pos)
        )
        computed = crc32c.crc32c(data[pos + _CRC_FROM : pos + size])
        if crc != computed:
            raise SegmentFormatError(f"{where}: CRC32C mismatch, stored {crc:#010x}, computed {computed:#010x}")
        if delta < 0 or count < 0:
            raise SegmentFormatError(f"{where}: lastOffsetDelta {delta}, recordsCount {count}")
        if attrs & _COMPRESSION_MASK == 0:
            _check_records(data[pos + _BATCH_HEADER.size : pos + size], count, delta, where)
        batches.append(
            BatchInfo(
                position=pos,
                size=size,
                base_offset=base,
                last_offset=base + delta,
                partition_leader_epoch=epoch,
                magic=magic,
                attributes=attrs,
                is_control=bool(attrs & _CONTROL),
                is_transactional=bool(attrs & _TRANSACTIONAL),
                max_timestamp=max_ts,
                first_timestamp=first_ts,
                producer_id=pid,
                producer_epoch=pepoch,
                base_sequence=seq,
                records_count=count,
            )
        )
        pos += size
    return batches


def _entries(data: bytes, fmt: str, name: str) -> list[tuple[int, ...]]:
    size = struct.calcsize(fmt)
    if len(data) % size:
        raise SegmentFormatError(f"{name}: {len(data)} bytes is not a multiple of the {size}-byte entry")
    return list(struct.iter_unpack(fmt, data))


def read_offset_index(data: bytes, base_offset: int) -> list[tuple[int, int]]:
    """A .index file: (absolute offset, physical position) pairs."""
    out = []
    for rel, position in _entries(data, ">ii", "offset index"):
        if rel < 0 or position < 0:
            raise SegmentFormatError(f"offset index: negative entry ({rel}, {position})")
        out.append((base_offset + rel, position))
    return out


def read_time_index(data: bytes, base_offset: int) -> list[tuple[int, int]]:
    """A .timeindex file: (timestamp, absolute offset) pairs."""
    out = []
    for timestamp, rel in _entries(data, ">qi", "time index"):
        if rel < 0:
            raise SegmentFormatError(f"time index: negative relative offset {rel}")
        out.append((timestamp, base_offset + rel))
    return out


def read_producer_snapshot(data: bytes) -> list[ProducerEntry]:
    """A .snapshot file: int16 version (1), uint32 CRC32C of every byte after it, int32 count, then entries."""
    if len(data) < 10:
        raise SegmentFormatError(f"producer snapshot: only {len(data)} bytes")
    version, crc, count = struct.unpack_from(">hIi", data, 0)
    if version != 1:
        raise SegmentFormatError(f"producer snapshot: version {version}, expected 1")
    if crc != crc32c.crc32c(data[6:]):
        raise SegmentFormatError(f"producer snapshot: CRC32C mismatch, stored {crc:#010x}")
    if count < 0 or len(data) != 10 + count * _PRODUCER_ENTRY.size:
        raise SegmentFormatError(f"producer snapshot: {len(data)} bytes for {count} entries")
    return [ProducerEntry(*e) for e in _PRODUCER_ENTRY.iter_unpack(data[10:])]


def read_leader_epoch_checkpoint(text: bytes) -> list[tuple[int, int]]:
    """A leader-epoch checkpoint: lines "0" (version), the entry count, then "epoch startOffset" per entry."""
    lines = text.decode("utf-8").splitlines()
    if not lines:
        return []  # CheckpointReadBuffer.read() of an empty file
    if lines[0] != "0":
        raise SegmentFormatError(f"leader-epoch checkpoint: version line {lines[0]!r}, expected '0'")
    if len(lines) < 2 or not lines[1].isdigit() or int(lines[1]) != len(lines) - 2:
        raise SegmentFormatError(f"leader-epoch checkpoint: count line does not match {len(lines) - 2} entries")
    out = []
    for line in lines[2:]:
        m = _EPOCH_LINE.fullmatch(line)
        if not m:
            raise SegmentFormatError(f"leader-epoch checkpoint: malformed line {line!r}")
        out.append((int(m[1]), int(m[2])))
    return out


def check_segment(
    log: bytes,
    index: bytes,
    timeindex: bytes,
    snapshot: bytes,
    epochs: bytes,
    base_offset: int,
    expect_dense: bool = True,
    expect_final_time_entry: bool = True,
) -> list[BatchInfo]:
    """Validate a segment's file set as a whole; returns its batches or raises SegmentFormatError."""
    batches = read_log(log)
    _check_offsets(batches, base_offset, expect_dense)
    _check_offset_index(batches, read_offset_index(index, base_offset))
    _check_time_index(batches, read_time_index(timeindex, base_offset), expect_final_time_entry)
    _check_epochs(batches, read_leader_epoch_checkpoint(epochs), base_offset)
    _check_producers(batches, read_producer_snapshot(snapshot))
    return batches


def _check_offsets(batches: list[BatchInfo], base_offset: int, expect_dense: bool) -> None:
    if batches and batches[0].base_offset != base_offset:
        raise SegmentFormatError(f"first batch starts at {batches[0].base_offset}, file name says {base_offset}")
    for prev, b in zip(batches, batches[1:]):
        if b.base_offset <= prev.last_offset:
            raise SegmentFormatError(f"batch at {b.position}: base {b.base_offset} after last {prev.last_offset}")
        if expect_dense and b.base_offset != prev.last_offset + 1:
            raise SegmentFormatError(f"batch at {b.position}: gap, base {b.base_offset} after {prev.last_offset}")
    if batches and batches[-1].last_offset - base_offset > _INT32_MAX:
        raise SegmentFormatError("offsets overflow the indexes' int32 relative offset")


def _check_offset_index(batches: list[BatchInfo], entries: list[tuple[int, int]]) -> None:
    # Kafka's LogSegment.append() writes offsetIndex.append(largestOffset, physicalPosition): the *last* offset of
    # the records appended, at the position where they start (first-offset entries were replaced in 2.0 by
    # KAFKA-6530; recover() switched to batch.lastOffset() in 2.1 by KAFKA-6264). An append of several batches
    # at once (replication) therefore indexes a later batch's last offset at the first batch's position; this
    # checker is stricter and accepts only the base or last offset of the batch starting at that position.
    by_position = {b.position: b for b in batches}
    for i, (offset, position) in enumerate(entries):
        if i and (offset <= entries[i - 1][0] or position <= entries[i - 1][1]):
            raise SegmentFormatError(f"offset index entry {i} ({offset}, {position}) does not increase")
        b = by_position.get(position)
        if b is None:
            raise SegmentFormatError(f"offset index entry {i} ({offset}, {position}): no batch starts there")
        if offset not in (b.base_offset, b.last_offset):
            raise SegmentFormatError(
                f"offset index entry {i} ({offset}, {position}): batch there holds {b.base_offset}..{b.last_offset}"
            )


def _check_time_index(batches: list[BatchInfo], entries: list[tuple[int, int]], expect_final: bool) -> None:
    # Kafka appends (maxTimestampSoFar, shallowOffsetOfMaxTimestampSoFar), only when the timestamp grows
    # (TimeIndex.maybeAppend), where the offset is the last offset of the *earliest* batch reaching that maximum
    # (LogSegment.append updates it only on a strictly larger timestamp). Pointing at a later batch with an equal
    # timestamp would make a lookup for that timestamp skip the earlier batch, so that is rejected; any offset
    # inside the right batch is accepted.
    bases = [b.base_offset for b in batches]
    max_before, running = [], -1
    for b in batches:
        max_before.append(running)
        running = max(running, b.max_timestamp)
    for i, (timestamp, offset) in enumerate(entries):
        if i and (timestamp <= entries[i - 1][0] or offset < entries[i - 1][1]):
            raise SegmentFormatError(f"time index entry {i} ({timestamp}, {offset}) does not increase")
        k = bisect.bisect_right(bases, offset) - 1
        if k < 0 or offset > batches[k].last_offset:
            raise SegmentFormatError(f"time index entry {i} ({timestamp}, {offset}): no batch holds that offset")
        if batches[k].max_timestamp != timestamp or max_before[k] >= timestamp:
            raise SegmentFormatError(
                f"time index entry {i} ({timestamp}, {offset}): batch max timestamp {batches[k].max_timestamp}, "
                f"earlier batches reach {max_before[k]}"
            )
    # A rolled segment's time index ends with the segment's largest timestamp (onBecomeInactiveSegment), which
    # time-based retention reads back.
    if expect_final and running >= 0 and (not entries or entries[-1][0] != running):
        raise SegmentFormatError(f"time index does not end with the segment's max timestamp {running}")


def _check_epochs(batches: list[BatchInfo], entries: list[tuple[int, int]], base_offset: int) -> None:
    for i in range(1, len(entries)):
        if entries[i][0] <= entries[i - 1][0] or entries[i][1] <= entries[i - 1][1]:
            raise SegmentFormatError(f"leader-epoch entries {entries[i - 1]} then {entries[i]} do not increase")
    if not batches:
        return
    if not entries or entries[0][1] > base_offset:
        raise SegmentFormatError(f"leader-epoch checkpoint {entries} does not cover base offset {base_offset}")
    if entries[-1][1] > batches[-1].last_offset:
        raise SegmentFormatError(f"leader-epoch entry {entries[-1]} starts after the segment's end")
    starts = [start for _, start in entries]
    for b in batches:
        epoch = entries[bisect.bisect_right(starts, b.base_offset) - 1][0]
        if b.partition_leader_epoch != epoch:
            raise SegmentFormatError(
                f"batch at {b.position} (offset {b.base_offset}) has leader epoch {b.partition_leader_epoch}, "
                f"the checkpoint says {epoch}"
            )


def _check_producers(batches: list[BatchInfo], entries: list[ProducerEntry]) -> None:
    by_id = {e.producer_id: e for e in entries}
    if len(by_id) != len(entries):
        raise SegmentFormatError("producer snapshot lists a producer id twice")
    last_any: dict[int, BatchInfo] = {}
    last_data: dict[int, BatchInfo] = {}
    for b in batches:
        if b.producer_id >= 0:
            last_any[b.producer_id] = b
            if not b.is_control:
                last_data[b.producer_id] = b
    for pid, b in last_data.items():
        e = by_id.get(pid)
        if e is None:
            raise SegmentFormatError(f"producer {pid} writes at offset {b.base_offset} but is not in the snapshot")
        # LastOffset/LastSequence/OffsetDelta come from the last *data* batch (ProducerStateEntry's
        # BatchMetadata); the epoch from the producer's last batch, since a transaction marker also sets it.
        got = (e.last_offset, e.last_sequence, e.offset_delta, e.epoch)
        want = (b.last_offset, b.last_sequence, b.last_offset_delta, last_any[pid].producer_epoch)
        if got != want:
            raise SegmentFormatError(
                f"producer {pid}: snapshot (lastOffset, lastSequence, offsetDelta, epoch) = {got}, log says {want}"
            )
        # currentTxnFirstOffset: -1 once a marker ended the transaction, else the open transaction's first offset.
        last = last_any[pid]
        if last.is_control and e.current_txn_first_offset != -1:
            raise SegmentFormatError(f"producer {pid}: transaction ended, yet currentTxnFirstOffset is set")
        if not last.is_control and last.is_transactional and not 0 <= e.current_txn_first_offset <= b.base_offset:
            raise SegmentFormatError(
                f"producer {pid}: open transaction, currentTxnFirstOffset {e.current_txn_first_offset}"
            )
