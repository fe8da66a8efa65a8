"""Remote-segment markers: the partition-log entries that record a tiered segment's state.

A marker is a real Kafka control batch (attributes: control; no producer id; one record whose
key is the control key (version 0, type `SHOAL_REMOTE_SEGMENT`) and whose value is the msgpack
`RemoteSegmentEvent`). Being a Kafka batch, it is served to consumers like any other and they
skip it, as every client skips control batches (Kafka's own clients, librdkafka, kafka-python,
aiokafka and kafkajs ignore control types they do not know), so the offset it takes never
stalls a consumer; and a tiered segment that covers it holds it as it is, keeping the
segment's offsets dense. Replicated like every entry, applied once committed
(remote_segments.py).

KIP-405's states, in order: COPY_SEGMENT_STARTED (planned; files may exist), COPY_SEGMENT_FINISHED
(readable; supersedes the range's local entries), DELETE_SEGMENT_STARTED (no longer readable;
files being deleted), DELETE_SEGMENT_FINISHED (gone).
"""

from __future__ import annotations

import struct
from enum import IntEnum

import crc32c
import msgspec

from broker.protocol.batch import BATCH_HEADER_SIZE, CONTROL_FLAG, MAGIC_V2, OFFSET_ATTRIBUTES, parse_header

SHOAL_REMOTE_SEGMENT = 0x5301  # control record types: outside Kafka's range (0..6 today)
SHOAL_MODE = 0x5302  # a mode marker (modes.py)
EVENT_VERSION = 1
_CONTROL_KEY = struct.Struct(">hh")
_HEADER = struct.Struct(">qiibIhiqqqhii")


class RemoteSegmentState(IntEnum):
    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3


class MarkerFormatError(ValueError):
    """A marker entry (remote-segment or mode) this broker cannot read."""


class RemoteSegmentEvent(msgspec.Struct, array_like=True, frozen=True):
    """One state change of one tiered segment, with what a reader needs to use it."""

    version: int
    state: RemoteSegmentState
    segment_id: str
    base_offset: int
    end_offset: int  # inclusive
    leader_epoch: int  # epoch of the leader that planned the segment
    size_bytes: int = 0
    max_timestamp_ms: int = -1
    plan_id: str = ""
    index_bytes: int = 0  # sizes of the .index and .timeindex files: a reader GETs them whole
    time_index_bytes: int = 0
    txn_index_bytes: int = 0  # size of the .txnindex, GET whole too; 0: the segment has none


_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(RemoteSegmentEvent)


def _varint(value: int) -> bytes:
    """Kafka's zigzag varint."""
    value = (value << 1) ^ (value >> 63)
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_control(
    control_type: int,
    value: bytes,
    timestamp_ms: int,
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
    attributes: int = CONTROL_FLAG,
) -> bytes:
    """A Kafka control batch of one record: key = (version 0, `control_type`), `value` as
    given (offset 0, epoch 0: the log patches both on append). Shoal's own markers have no
    producer; a transaction marker (txn_markers.py) names its producer and is transactional."""
    key = _CONTROL_KEY.pack(0, control_type)
    body = b"\x00" + _varint(0) + _varint(0) + _varint(len(key)) + key + _varint(len(value)) + value + _varint(0)
    record = _varint(len(body)) + body
    batch = bytearray(
        _HEADER.pack(
            0, 0, 0, MAGIC_V2, 0, attributes, 0, timestamp_ms, timestamp_ms, producer_id, producer_epoch, -1, 1
        )
        + record
    )
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">I", batch, 17, crc32c.crc32c(memoryview(batch)[OFFSET_ATTRIBUTES:]))
    return bytes(batch)


def control_value(data: bytes | bytearray | memoryview, control_type: int) -> memoryview:
    """The value of the one record of a control batch of `control_type` (MarkerFormatError
    if `data` is anything else)."""
    kind, value = control_record(data)
    if kind != control_type:
        raise MarkerFormatError(f"control type {kind} is not {control_type:#x}")
    return value


def control_record(data: bytes | bytearray | memoryview) -> tuple[int, memoryview]:
    """(control type, value) of the one record of a control batch (MarkerFormatError if
    `data` is anything else)."""
    view = memoryview(data)
    try:
        header = parse_header(view)
        if not header.is_control or header.records_count != 1:
            raise MarkerFormatError("a marker is a control batch of one record")
        pos = BATCH_HEADER_SIZE
        _length, pos = _read_varint(view, pos)
        pos += 1  # record attributes
        _ts, pos = _read_varint(view, pos)
        _delta, pos = _read_varint(view, pos)
        key_length, pos = _read_varint(view, pos)
        _version, kind = _CONTROL_KEY.unpack_from(view, pos)
        pos += key_length
        value_length, pos = _read_varint(view, pos)
        if value_length < 0 or pos + value_length > len(view):
            raise MarkerFormatError("marker value overruns the batch")
        return kind, view[pos : pos + value_length]
    except (ValueError, IndexError, struct.error) as exc:
        if isinstance(exc, MarkerFormatError):
            raise
        raise MarkerFormatError(f"unreadable marker: {exc}") from None


def encode_marker(event: RemoteSegmentEvent, timestamp_ms: int) -> bytes:
    """The control batch of a remote-segment event."""
    return encode_control(SHOAL_REMOTE_SEGMENT, _ENCODER.encode(event), timestamp_ms)


def decode_marker(data: bytes | bytearray | memoryview) -> RemoteSegmentEvent:
    """The event of a marker entry's data (the control batch)."""
    try:
        event = _DECODER.decode(control_value(data, SHOAL_REMOTE_SEGMENT))
    except msgspec.DecodeError as exc:
        raise MarkerFormatError(f"unreadable remote-segment marker: {exc}") from None
    if event.version != EVENT_VERSION:
        raise MarkerFormatError(f"remote-segment event version {event.version} is not supported")
    return event


def _read_varint(view: memoryview, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        byte = view[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise MarkerFormatError("varint too long")
