"""Partition-log entry framing: one versioned, checksummed frame per appended batch.

An entry is what the partition log stores for one Kafka batch. Layout (big-endian):

    0  entry_length   u32  bytes that follow this field (crc .. end of payload)
    4  crc            u32  CRC32C of every byte after this field (version .. end of payload)
    8  format_version u8   FORMAT_VERSION (1); readers reject others with EntryFormatError
    9  kind           u8   EntryKind
   10  batch header   61   Kafka v2 record-batch header, baseOffset = assigned offset,
                           partitionLeaderEpoch = epoch of the leader that appended it
   71  payload        ..   RECORDS: the batch's records, so bytes 10.. are exactly the Kafka
                           batch; other kinds: a kind-specific payload (coordinates, ...)

Why a frame of our own rather than bare Kafka batches: non-record kinds need a kind tag and a
version; baseOffset and partitionLeaderEpoch sit outside Kafka's batch CRC, and non-record
payloads have no CRC at all, so the frame CRC is what lets recovery find a torn or corrupt tail
for every kind. The length comes first so a scanner can skip an entry without decoding it.
Nothing here ever iterates records.
"""

from __future__ import annotations

import struct
from enum import IntEnum

import crc32c

from broker.protocol.batch import BATCH_HEADER_SIZE, BatchHeader, parse_header

FORMAT_VERSION = 1
SUPPORTED_VERSIONS = frozenset({FORMAT_VERSION})

_PREFIX = struct.Struct(">IIBB")
PREFIX_SIZE = _PREFIX.size  # 10
LENGTH_SIZE = 4
CRC_SIZE = 4
ENTRY_OVERHEAD = PREFIX_SIZE  # bytes an entry adds on top of header + payload
HEAD_SIZE = PREFIX_SIZE + BATCH_HEADER_SIZE  # 71: frame prefix + batch header
MIN_ENTRY_LENGTH = HEAD_SIZE - LENGTH_SIZE  # smallest valid entry_length value
MAX_ENTRY_LENGTH = 0xFFFFFFFF


class EntryKind(IntEnum):
    """What the payload of an entry is. Values are part of the on-disk format: never reuse one."""

    RECORDS = 1  # classic topics: the batch's records (header + payload = the Kafka batch)
    COORDINATES = 2  # diskless topics: where the batch lives in a WAL object
    REMOTE_SEGMENT = 3  # a tiered segment's state change (markers.py): a Kafka control batch
    MODE = 4  # where the partition switched between classic and diskless (modes.py): a control batch


_KINDS = {int(k): k for k in EntryKind}


class EntryFormatError(ValueError):
    """An entry this broker cannot interpret: unknown format version or kind, or bad framing.

    Distinct from a checksum failure: a CRC-valid entry with an unknown version was written by a
    newer broker, and recovery must stop with this error rather than truncate it away.
    """


def kind_of(value: int) -> EntryKind:
    kind = _KINDS.get(value)
    if kind is None:
        raise EntryFormatError(f"unknown partition-log entry kind {value}")
    return kind


def check_version(version: int) -> None:
    if version not in SUPPORTED_VERSIONS:
        raise EntryFormatError(
            f"partition-log entry format version {version} is not supported "
            f"(this broker reads {sorted(SUPPORTED_VERSIONS)}); was the log written by a newer broker?"
        )


def encode_head(
    kind: EntryKind,
    data: bytes | bytearray | memoryview,
    base_offset: int,
    leader_epoch: int,
) -> bytearray:
    """Build the 71-byte head (prefix + patched batch header) for ``data`` = header + payload.

    The CRC field covers head[8:] and the payload; it is filled in here, so the caller writes
    ``head`` followed by ``data[61:]`` (e.g. with os.writev) and never copies the payload.
    ``data`` itself is not modified.
    """
    size = len(data)
    if size < BATCH_HEADER_SIZE:
        raise EntryFormatError(f"entry data needs at least {BATCH_HEADER_SIZE} bytes, got {size}")
    length = size + (PREFIX_SIZE - LENGTH_SIZE)
    if length > MAX_ENTRY_LENGTH:
        raise EntryFormatError(f"entry of {size} bytes is too large")
    head = bytearray(HEAD_SIZE)
    head[PREFIX_SIZE:] = memoryview(data)[:BATCH_HEADER_SIZE]
    _PREFIX.pack_into(head, 0, length, 0, FORMAT_VERSION, int(kind))
    _BASE_OFFSET.pack_into(head, PREFIX_SIZE, base_offset)
    _LEADER_EPOCH.pack_into(head, PREFIX_SIZE + 12, leader_epoch)
    crc = crc32c.crc32c(memoryview(head)[LENGTH_SIZE + CRC_SIZE :])
    if size > BATCH_HEADER_SIZE:
        crc = crc32c.crc32c(memoryview(data)[BATCH_HEADER_SIZE:], crc)
    _CRC.pack_into(head, LENGTH_SIZE, crc)
    return head


_BASE_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")
_CRC = struct.Struct(">I")
_LENGTH = struct.Struct(">I")


def encode_entry(
    kind: EntryKind,
    data: bytes | bytearray | memoryview,
    base_offset: int,
    leader_epoch: int,
) -> bytes:
    """The whole entry as one bytes object (tests, tools; the log itself uses encode_head)."""
    return bytes(encode_head(kind, data, base_offset, leader_epoch)) + bytes(memoryview(data)[BATCH_HEADER_SIZE:])


def read_length(buf: bytes | bytearray | memoryview, pos: int = 0) -> int:
    """entry_length at ``pos``: the entry occupies ``LENGTH_SIZE + entry_length`` bytes."""
    return _LENGTH.unpack_from(buf, pos)[0]


def unpack_prefix(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int, int, int]:
    """(entry_length, crc, format_version, kind) at ``pos``, unchecked."""
    return _PREFIX.unpack_from(buf, pos)


def crc_matches(buf: memoryview, pos: int, length: int) -> bool:
    """True when the entry at ``pos`` (whose entry_length is ``length``) has a valid CRC."""
    stored = _CRC.unpack_from(buf, pos + LENGTH_SIZE)[0]
    return crc32c.crc32c(buf[pos + LENGTH_SIZE + CRC_SIZE : pos + LENGTH_SIZE + length]) == stored


def decode_entry(
    buf: bytes | bytearray | memoryview, pos: int = 0, verify: bool = True
) -> tuple[EntryKind, BatchHeader, memoryview, int]:
    """Decode the entry at ``pos``: (kind, header, data = header+payload view, entry size).

    Raises EntryFormatError for truncation, a bad length, a CRC mismatch (when ``verify``), or
    an unknown version or kind. The returned view shares ``buf``'s memory.
    """
    view = memoryview(buf)
    if len(view) - pos < HEAD_SIZE:
        raise EntryFormatError(f"truncated entry: {len(view) - pos} bytes, need at least {HEAD_SIZE}")
    length, _crc, version, kind_value = _PREFIX.unpack_from(view, pos)
    if length < MIN_ENTRY_LENGTH or pos + LENGTH_SIZE + length > len(view):
        raise EntryFormatError(f"entry length {length} is invalid or overruns the {len(view) - pos} bytes left")
    if verify and not crc_matches(view, pos, length):
        raise EntryFormatError("entry CRC32C mismatch")
    check_version(version)
    kind = kind_of(kind_value)
    header = parse_header(view, pos + PREFIX_SIZE)
    return kind, header, view[pos + PREFIX_SIZE : pos + LENGTH_SIZE + length], LENGTH_SIZE + length
