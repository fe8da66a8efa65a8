"""What the broker checks in, and does to, each batch a producer sends: Kafka's LogValidator
(and ProduceRequest.validateRecords) over opaque bytes, for classic appends and diskless
representatives alike.

Per partition, all or nothing (`validate`):
1. framing, size (max.message.bytes, segment.bytes), CRC32C and the header's own rules
   (count, codec, no control batches, transactional batches carry a producer id);
2. every record, walked in C (protocol/_records.c) through the codec's stream
   (protocol/compression.py): the records must fit the section exactly and number
   recordsCount (INVALID_RECORD), and with CreateTime every record timestamp other than -1
   must lie within message.timestamp.before.max.ms / after.max.ms of now (INVALID_TIMESTAMP);
3. the batch is stored as Kafka stores it: its maxTimestamp is the records' true maximum
   (some clients send -1) or, with LogAppendTime, now; a topic whose compression.type names
   a codec gets its batches in that codec (the same record bytes, recompressed); the CRC is
   recomputed over what changed, and the sizes are checked again when the batch was rebuilt.

A batch that needs none of step 3 is passed on as the request's own bytes (no copy); the
common case for current clients. Kafka's exceptions: a stream that does not decompress is
INVALID_RECORD here (Kafka answers UNKNOWN_SERVER_ERROR), and a batch whose records decompress
to more than message.decompressed.max.bytes is refused (INVALID_RECORD) instead of holding up
the event loop; Kafka rewrites (not refuses) compressed batches whose records' offset deltas
are not 0, 1, 2...; here they are kept as sent.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c

from .protocol import batch as batches
from .protocol.records import RecordError, Scanner, scan
from .protocol.batch import (
    BATCH_HEADER_SIZE,
    COMPRESSION_MASK,
    LOG_OVERHEAD,
    MAGIC_V2,
    OFFSET_ATTRIBUTES,
    OFFSET_CRC,
    OFFSET_LENGTH,
    OFFSET_MAGIC,
    OFFSET_MAX_TIMESTAMP,
    TIMESTAMP_TYPE_LOG_APPEND,
    BatchFormatError,
    BatchHeader,
    UnsupportedMagicError,
    parse_header,
)
from .protocol.compression import Codec, CodecError, Compressor, decompress
from .protocol.errors import ApiError, ErrorCode
from .topic_config import TopicSettings

_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")
_ZSTD_SINCE_PRODUCE_VERSION = 7  # KIP-110


@dataclass(frozen=True, slots=True)
class ValidatedBatch:
    """One batch as it is to be stored: its header and its bytes (the request's own bytes
    when nothing had to change)."""

    header: BatchHeader
    data: memoryview


def check_produce_request(records: memoryview, version: int) -> None:
    """Kafka's ProduceRequest.validateRecords, run before anything else looks at a
    partition's records: Produce v3-v6 may not carry zstd batches (KIP-110: older clients'
    brokers could not read them), UNSUPPORTED_COMPRESSION_TYPE for that partition."""
    if (
        version < _ZSTD_SINCE_PRODUCE_VERSION
        and len(records) >= BATCH_HEADER_SIZE
        and records[OFFSET_MAGIC] == MAGIC_V2
        and _INT16.unpack_from(records, OFFSET_ATTRIBUTES)[0] & COMPRESSION_MASK == Codec.ZSTD
    ):
        raise ApiError(
            ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
            f"Produce requests with version {version} are not allowed to use ZStandard compression",
        )


def validate(records: memoryview, settings: TopicSettings, now_ms: int) -> list[ValidatedBatch]:
    """Check every batch of one partition's produce data and return them as they are to be
    stored; raises ApiError (nothing is to be appended) with Kafka's error code."""
    if len(records) == 0:
        raise ApiError(ErrorCode.INVALID_RECORD, "produce request has no record batches")
    try:
        found = list(batches.split_batches(records))
    except UnsupportedMagicError as exc:
        raise ApiError(ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, str(exc)) from None
    except BatchFormatError as exc:
        raise ApiError(ErrorCode.CORRUPT_MESSAGE, str(exc)) from None
    validated = []
    for pos, header in found:
        batch = records[pos : pos + header.size]
        _check_header(batch, header, settings)
        validated.append(_store_as_kafka_does(batch, header, settings, now_ms))
    return validated


def prepare_diskless(records: memoryview, settings: TopicSettings, now_ms: int) -> list[tuple[memoryview, bytes]]:
    """Representative side of a diskless produce: validate like a classic append and return
    each batch as it is to be stored (the bytes for the WAL object) with its 61-byte header
    (what the leader commits). Needs no replica of the partition: the leader checks producer
    state and the ISR at commit."""
    return [(v.data, bytes(v.data[:BATCH_HEADER_SIZE])) for v in validate(records, settings, now_ms)]


def _check_header(batch: memoryview, header: BatchHeader, settings: TopicSettings) -> None:
    """What the 61-byte header alone tells (Kafka: UnifiedLog.analyzeAndValidateRecords and
    LogValidator.validateBatch)."""
    _check_size(header.size, settings)
    if not batches.crc_is_valid(batch, header):
        raise ApiError(ErrorCode.CORRUPT_MESSAGE, "record batch CRC32C mismatch")
    if header.records_count <= 0 or header.last_offset_delta != header.records_count - 1:
        raise ApiError(
            ErrorCode.INVALID_RECORD,
            f"batch claims {header.records_count} records with lastOffsetDelta {header.last_offset_delta}",
        )
    if header.compression > Codec.ZSTD:
        raise ApiError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"unknown compression codec {header.compression}")
    if header.is_control:
        raise ApiError(ErrorCode.INVALID_RECORD, "clients may not write control batches")
    if header.is_transactional and not header.has_producer_id:
        raise ApiError(ErrorCode.INVALID_RECORD, "a transactional batch needs a producer id")


def _check_size(size: int, settings: TopicSettings) -> None:
    if size > settings.max_message_bytes:
        raise ApiError(
            ErrorCode.MESSAGE_TOO_LARGE,
            f"batch of {size} bytes exceeds max.message.bytes={settings.max_message_bytes}",
        )
    if size > settings.log.segment_bytes:
        raise ApiError(
            ErrorCode.RECORD_LIST_TOO_LARGE,
            f"batch of {size} bytes exceeds segment.bytes={settings.log.segment_bytes}",
        )


def _store_as_kafka_does(
    batch: memoryview, header: BatchHeader, settings: TopicSettings, now_ms: int
) -> ValidatedBatch:
    """Walk the records (step 2) and give the batch the timestamp type, maxTimestamp and
    codec Kafka would store it with (step 3)."""
    producer_stamped = bool(header.attributes & TIMESTAMP_TYPE_LOG_APPEND)
    accepted = _window(settings, now_ms)
    # LogAppendTime: no record timestamp to check; a producer's LogAppendTime flag: only the header's
    window = (_LONG_MIN, _LONG_MAX) if settings.log_append_time or producer_stamped else accepted
    source = Codec(header.compression)
    target = source if settings.compression is None else settings.compression
    records = batch[BATCH_HEADER_SIZE:]
    try:
        if source == target == Codec.NONE:
            max_ts, invalid = scan(records, header.records_count, header.base_timestamp, *window)
            rebuilt = None
        else:
            max_ts, invalid, rebuilt = _through_codecs(records, header, source, target, settings, window)
    except RecordError as exc:
        raise ApiError(ErrorCode.INVALID_RECORD, f"{exc}") from None
    except CodecError as exc:
        raise ApiError(ErrorCode.INVALID_RECORD, f"Failed to decompress record stream: {exc}") from None
    if producer_stamped:
        max_ts, invalid = _producer_stamped(header, settings, accepted)
    if invalid:
        raise ApiError(
            ErrorCode.INVALID_TIMESTAMP,
            "One or more records have been rejected due to invalid timestamp: record(s) "
            f"{', '.join(map(str, invalid[:5]))}{' ...' if len(invalid) > 5 else ''} of the batch are outside "
            f"[{accepted[0]}, {accepted[1]}] (message.timestamp.before.max.ms / message.timestamp.after.max.ms)",
        )
    if settings.log_append_time:
        attributes, max_ts = header.attributes | TIMESTAMP_TYPE_LOG_APPEND, now_ms
    else:
        attributes = header.attributes & ~TIMESTAMP_TYPE_LOG_APPEND
    attributes = (attributes & ~COMPRESSION_MASK) | target
    if rebuilt is None and attributes == header.attributes and max_ts == header.max_timestamp:
        return ValidatedBatch(header, batch)
    return _rewrite(batch, attributes, max_ts, rebuilt, settings)


def _through_codecs(
    records: memoryview,
    header: BatchHeader,
    source: Codec,
    target: Codec,
    settings: TopicSettings,
    window: tuple[int, int],
) -> tuple[int, list[int], list[bytes | memoryview] | None]:
    """Walk the records through the batch's codec in bounded chunks and, when the topic wants
    another codec, compress the same bytes with it: (max timestamp, records outside the
    window, the new records section or None). A rebuilt section that outgrows
    max.message.bytes stops the work at once."""
    scanner = Scanner(header.records_count, header.base_timestamp, *window)
    recompress = target != source
    compressor = Compressor(target, settings.compression_level) if recompress and target != Codec.NONE else None
    pieces: list[bytes | memoryview] = []
    size = BATCH_HEADER_SIZE
    for chunk in decompress(source, records, settings.max_decompressed_bytes):
        scanner.feed(chunk)
        if recompress:
            piece = compressor.compress(chunk) if compressor is not None else chunk
            pieces.append(piece)
            size += len(piece)
            _check_size(size, settings)
    max_ts, invalid = scanner.finish()
    if compressor is not None:
        pieces.append(compressor.flush())
        _check_size(size + len(pieces[-1]), settings)
    return max_ts, invalid, pieces if recompress else None


def _producer_stamped(header: BatchHeader, settings: TopicSettings, accepted: tuple[int, int]) -> tuple[int, list[int]]:
    """A producer that set the LogAppendTime flag itself: every record's timestamp is the
    header's maxTimestamp. Kafka refuses it on a LogAppendTime topic and when that timestamp
    is -1; on a CreateTime topic it checks it like any record's and stores the batch as
    CreateTime (LogValidator.validateTimestamp)."""
    ts = header.max_timestamp
    if settings.log_append_time or ts == -1:
        raise ApiError(
            ErrorCode.INVALID_TIMESTAMP,
            "Invalid timestamp type in message: producer should not set timestamp type to LogAppendTime",
        )
    return ts, list(range(header.records_count)) if not accepted[0] <= ts <= accepted[1] else []


def _rewrite(
    batch: memoryview, attributes: int, max_ts: int, rebuilt: list[bytes | memoryview] | None, settings: TopicSettings
) -> ValidatedBatch:
    """The batch with new attributes and maxTimestamp (and records section, when rebuilt),
    in one new buffer: batchLength and CRC32C follow; offsets, epoch, producer fields and
    count stay."""
    out = bytearray(batch[:BATCH_HEADER_SIZE])
    for piece in [batch[BATCH_HEADER_SIZE:]] if rebuilt is None else rebuilt:
        out += piece
    _INT16.pack_into(out, OFFSET_ATTRIBUTES, attributes)
    _INT64.pack_into(out, OFFSET_MAX_TIMESTAMP, max_ts)
    _INT32.pack_into(out, OFFSET_LENGTH, len(out) - LOG_OVERHEAD)
    _UINT32.pack_into(out, OFFSET_CRC, crc32c.crc32c(memoryview(out)[OFFSET_ATTRIBUTES:]))
    if rebuilt is not None:
        _check_size(len(out), settings)
    data = memoryview(out)
    return ValidatedBatch(parse_header(data), data)


def _window(settings: TopicSettings, now_ms: int) -> tuple[int, int]:
    """The CreateTime timestamps accepted now (Kafka computes now - ts in a wrapping long;
    here the bounds saturate instead, which differs only for timestamps near the long's ends)."""
    return (
        max(_LONG_MIN, now_ms - settings.timestamp_before_max_ms),
        min(_LONG_MAX, now_ms + settings.timestamp_after_max_ms),
    )
