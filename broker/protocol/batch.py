"""Kafka v2 record-batch headers: parse, verify and patch without touching records.

The broker treats record batches as opaque bytes. Everything it needs (offsets,
timestamps, producer id/epoch/sequence, counts) lives in the fixed 61-byte header,
so the hot paths parse that header, check the CRC32C in C, and never iterate records.

Layout (big-endian), offsets in bytes:
    0 baseOffset int64          8 batchLength int32      12 partitionLeaderEpoch int32
   16 magic int8               17 crc uint32             21 attributes int16
   23 lastOffsetDelta int32    27 baseTimestamp int64    35 maxTimestamp int64
   43 producerId int64         51 producerEpoch int16    53 baseSequence int32
   57 recordsCount int32       61 records...
The CRC covers bytes 21..end; baseOffset, batchLength and partitionLeaderEpoch are
outside it, which is why a broker may patch them freely.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterator

import crc32c

BATCH_HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: bytes not counted by batchLength
MAGIC_V2 = 2
NO_PRODUCER_ID = -1
NO_SEQUENCE = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_BASE_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")

OFFSET_BASE = 0
OFFSET_LENGTH = 8
OFFSET_LEADER_EPOCH = 12
OFFSET_MAGIC = 16
OFFSET_CRC = 17
OFFSET_ATTRIBUTES = 21
OFFSET_MAX_TIMESTAMP = 35

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_LOG_APPEND = 0x08
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20


class BatchFormatError(ValueError):
    """The bytes are not a well-formed v2 record batch (truncated, bad length, bad magic)."""


@dataclass(slots=True)
class BatchHeader:
    """The fixed fields of a v2 record batch."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Total bytes of the batch, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record; sequences wrap at 2**31 as in Kafka."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (1 << 31)

    def pack(self) -> bytes:
        return _HEADER.pack(
            self.base_offset,
            self.batch_length,
            self.partition_leader_epoch,
            self.magic,
            self.crc,
            self.attributes,
            self.last_offset_delta,
            self.base_timestamp,
            self.max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.records_count,
        )


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the 61-byte header at ``pos``; raises BatchFormatError when it does not fit."""
    if len(buf) - pos < BATCH_HEADER_SIZE:
        raise BatchFormatError(f"batch header needs {BATCH_HEADER_SIZE} bytes, {len(buf) - pos} left")
    return BatchHeader(*_HEADER.unpack_from(buf, pos))


def split_batches(buf: memoryview) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) for each batch of a records blob, checking only framing.

    Raises BatchFormatError for a truncated batch, a length that overruns the blob, or a
    magic other than 2 (the caller maps these to Kafka error codes).
    """
    pos = 0
    end = len(buf)
    while pos < end:
        # v0/v1 message sets keep their magic at the same offset but are shorter than a v2
        # header, so look at it before demanding 61 bytes.
        if end - pos > OFFSET_MAGIC and buf[pos + OFFSET_MAGIC] != MAGIC_V2:
            raise UnsupportedMagicError(f"record batch magic {buf[pos + OFFSET_MAGIC]} is not supported (only v2)")
        header = parse_header(buf, pos)
        size = header.size
        if header.batch_length < BATCH_HEADER_SIZE - LOG_OVERHEAD or pos + size > end:
            raise BatchFormatError(f"batch length {header.batch_length} overruns the {end - pos} bytes left")
        yield pos, header
        pos += size


class UnsupportedMagicError(BatchFormatError):
    """A batch with a message format older than v2."""


def crc_is_valid(batch: memoryview, header: BatchHeader) -> bool:
    """True when the stored CRC32C matches bytes 21..end (computed in C)."""
    return crc32c.crc32c(batch[OFFSET_ATTRIBUTES : header.size]) == header.crc


def set_base_offset(batch: bytearray | memoryview, base_offset: int) -> None:
    """Patch baseOffset in place (outside the CRC)."""
    _BASE_OFFSET.pack_into(batch, OFFSET_BASE, base_offset)


def set_leader_epoch(batch: bytearray | memoryview, leader_epoch: int) -> None:
    """Patch partitionLeaderEpoch in place (outside the CRC)."""
    _LEADER_EPOCH.pack_into(batch, OFFSET_LEADER_EPOCH, leader_epoch)
