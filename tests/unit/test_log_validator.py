"""log_validator: what the broker stores for each batch, as Kafka's LogValidator would store it.

Batches whose header maxTimestamp is -1 (older Go clients) get their records' true maximum;
every record's timestamp is checked, not the header's two; LogAppendTime stamps now; a topic's
compression.type recompresses batches that arrive in another codec (the same records, read
back by kafka-python); Produce v3-v6 may not carry zstd; a decompression bomb is refused
within message.decompressed.max.bytes. Each stored batch's CRC32C covers what it holds."""

from __future__ import annotations

import struct

import crc32c
import pytest
from kafka.record.default_records import DefaultRecordBatch

from broker.config import load_config
from broker.log_validator import check_produce_request, prepare_diskless, validate
from broker.protocol.batch import BATCH_HEADER_SIZE, TIMESTAMP_TYPE_LOG_APPEND, parse_header
from broker.protocol.compression import Codec, Compressor
from broker.protocol.errors import ApiError, ErrorCode
from broker.topic_config import effective
from tests.integration.clients import build_batch
from tests.unit.test_batch_timestamps import without_max_timestamp

NOW = 1_800_000_000_000
HOUR = 3_600_000
CODECS = [Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD]


def settings(**overrides: str):  # type: ignore[no-untyped-def]
    broker = {"message.decompressed.max.bytes": overrides.pop("decompressed", str(64 << 20))}
    return effective(overrides, load_config(overrides=broker, environ={}))


def records_of(stored: memoryview | bytes) -> list[tuple[int, bytes | None, bytes | None]]:
    batch = DefaultRecordBatch(bytes(stored))
    assert batch.validate_crc()
    return [(r.timestamp, r.key, r.value) for r in batch]


def one(data: bytes, topic=None, now: int = NOW):  # type: ignore[no-untyped-def]
    [validated] = validate(memoryview(data), topic or settings(), now)
    return validated


def three_records(codec: Codec, stamps: tuple[int, int, int] = (NOW - 50, NOW + 20, NOW - 10)) -> bytes:
    return build_batch([(b"k%d" % i, b"v%d" % i * 40) for i in range(3)], timestamps=list(stamps), compression=codec)


@pytest.mark.parametrize("codec", CODECS)
def test_a_batch_without_max_timestamp_is_stored_with_its_records_maximum(codec: Codec) -> None:
    sent = without_max_timestamp(three_records(codec))
    stored = one(sent)
    assert stored.header.max_timestamp == NOW + 20 == parse_header(stored.data).max_timestamp
    assert stored.header.compression == codec and bytes(stored.data[BATCH_HEADER_SIZE:]) == sent[BATCH_HEADER_SIZE:]
    assert records_of(stored.data) == records_of(three_records(codec))


def test_a_batch_that_needs_nothing_is_the_requests_own_bytes() -> None:
    sent = three_records(Codec.LZ4)
    request = memoryview(sent)
    [stored] = validate(request, settings(), NOW)
    assert stored.data.obj is sent  # no copy on the usual path
    [(batch, head)] = prepare_diskless(request, settings(), NOW)
    assert batch.obj is sent and head == sent[:BATCH_HEADER_SIZE]


@pytest.mark.parametrize("codec", CODECS)
def test_every_record_timestamp_is_checked_not_only_the_headers(codec: Codec) -> None:
    """A record 3 h in the future that is neither first nor the header's maximum (-1)."""
    sent = without_max_timestamp(three_records(codec, (NOW, NOW + 3 * HOUR, NOW)))
    with pytest.raises(ApiError) as info:
        one(sent, settings(**{"message.timestamp.after.max.ms": str(HOUR)}))
    assert info.value.code == ErrorCode.INVALID_TIMESTAMP and "record(s) 1 " in info.value.message
    too_old = three_records(codec, (NOW, NOW - 2 * HOUR, NOW))
    with pytest.raises(ApiError) as info:
        one(too_old, settings(**{"message.timestamp.before.max.ms": str(HOUR)}))
    assert info.value.code == ErrorCode.INVALID_TIMESTAMP
    assert one(too_old, settings()).header.max_timestamp == NOW  # before.max.ms: unbounded by default


def test_a_record_without_timestamp_is_exempt() -> None:
    sent = three_records(Codec.NONE, (-1, -1, -1))
    assert one(sent, settings(**{"message.timestamp.before.max.ms": "0"})).header.max_timestamp == -1


def test_a_wrong_header_maximum_is_corrected_not_refused() -> None:
    """Kafka overwrites maxTimestamp with what the records hold (LogValidator)."""
    raw = bytearray(three_records(Codec.NONE))
    struct.pack_into(">q", raw, 35, NOW + 10 * HOUR)
    struct.pack_into(">I", raw, 17, crc32c.crc32c(bytes(raw[21:])))
    assert one(bytes(raw), settings(**{"message.timestamp.after.max.ms": str(HOUR)})).header.max_timestamp == NOW + 20


@pytest.mark.parametrize("codec", CODECS)
def test_log_append_time_stamps_now(codec: Codec) -> None:
    stored = one(
        without_max_timestamp(three_records(codec, (1, 2, 3))), settings(**{"message.timestamp.type": "LogAppendTime"})
    )
    assert stored.header.max_timestamp == NOW and stored.header.attributes & TIMESTAMP_TYPE_LOG_APPEND
    assert {ts for ts, _k, _v in records_of(stored.data)} == {NOW}


def test_a_producer_may_not_claim_log_append_time() -> None:
    raw = bytearray(three_records(Codec.NONE))
    struct.pack_into(">h", raw, 21, TIMESTAMP_TYPE_LOG_APPEND)
    struct.pack_into(">I", raw, 17, crc32c.crc32c(bytes(raw[21:])))
    with pytest.raises(ApiError) as info:
        one(bytes(raw), settings(**{"message.timestamp.type": "LogAppendTime"}))
    assert info.value.code == ErrorCode.INVALID_TIMESTAMP
    # On a CreateTime topic Kafka takes the header's timestamp as every record's, and stores CreateTime.
    stored = one(bytes(raw))
    assert stored.header.max_timestamp == NOW + 20 and not stored.header.attributes & TIMESTAMP_TYPE_LOG_APPEND


@pytest.mark.parametrize("source", CODECS)
@pytest.mark.parametrize("target", ["uncompressed", "gzip", "snappy", "lz4", "zstd"])
def test_compression_type_recompresses_the_same_records(source: Codec, target: str) -> None:
    sent = without_max_timestamp(three_records(source))
    stored = one(sent, settings(**{"compression.type": target}))
    codec = {
        "uncompressed": Codec.NONE,
        "gzip": Codec.GZIP,
        "snappy": Codec.SNAPPY,
        "lz4": Codec.LZ4,
        "zstd": Codec.ZSTD,
    }
    assert stored.header.compression == codec[target] and stored.header.max_timestamp == NOW + 20
    assert stored.header.size == len(stored.data) and parse_header(stored.data) == stored.header
    assert (stored.header.records_count, stored.header.base_timestamp) == (3, NOW - 50)
    assert records_of(stored.data) == records_of(three_records(Codec.NONE))
    if source == codec[target]:
        assert bytes(stored.data[BATCH_HEADER_SIZE:]) == sent[BATCH_HEADER_SIZE:]


def test_a_recompressed_batch_is_measured_again() -> None:
    """Kafka checks max.message.bytes again when the batch was rebuilt."""
    sent = build_batch([(None, b"a" * 20_000)], timestamp_ms=NOW, compression=Codec.ZSTD)
    assert len(sent) < 1_000
    with pytest.raises(ApiError) as info:
        one(sent, settings(**{"compression.type": "uncompressed", "max.message.bytes": "10000"}))
    assert info.value.code == ErrorCode.MESSAGE_TOO_LARGE


def varint(value: int) -> bytes:
    raw, out = (value << 1) ^ (value >> 63), bytearray()
    while raw >= 0x80:
        out.append(raw & 0x7F | 0x80)
        raw >>= 7
    return bytes(out + bytes([raw]))


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD])
def test_a_decompression_bomb_is_refused_within_the_limit(codec: Codec) -> None:
    """One well-formed record whose value is 16 MiB of zeros: a few KiB compressed."""
    size = 16 << 20
    body = b"\x00\x00\x00\x01" + varint(size)  # attributes, timestamp and offset deltas, null key, value length
    compressor = Compressor(codec, {Codec.GZIP: 9, Codec.LZ4: 9, Codec.ZSTD: 19}.get(codec, 0))
    zeros = bytes(1 << 20)
    pieces = [compressor.compress(varint(len(body) + size + 1) + body)]
    pieces += [compressor.compress(zeros) for _ in range(size >> 20)]
    section = b"".join([*pieces, compressor.compress(b"\x00"), compressor.flush()])  # no headers
    header = bytearray(build_batch([(None, b"x")], timestamp_ms=NOW)[:BATCH_HEADER_SIZE])
    struct.pack_into(">h", header, 21, codec)
    struct.pack_into(">i", header, 8, BATCH_HEADER_SIZE - 12 + len(section))
    struct.pack_into(">I", header, 17, crc32c.crc32c(bytes(header[21:]) + section))
    assert len(section) < 1 << 20
    assert one(bytes(header) + section, settings(decompressed=str(32 << 20))).header.max_timestamp == NOW
    with pytest.raises(ApiError) as info:
        one(bytes(header) + section, settings(decompressed=str(8 << 20)))
    assert info.value.code == ErrorCode.INVALID_RECORD and "more than 8388608 bytes" in info.value.message


@pytest.mark.parametrize("mutation", ["garbage", "truncated"])
@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD])
def test_a_stream_that_does_not_decompress_is_an_invalid_record(codec: Codec, mutation: str) -> None:
    sent = bytearray(three_records(codec))
    body = sent[BATCH_HEADER_SIZE:]
    body = bytearray(b"\x00" * len(body)) if mutation == "garbage" else body[: len(body) // 2]
    sent[BATCH_HEADER_SIZE:] = body
    struct.pack_into(">i", sent, 8, len(sent) - 12)
    struct.pack_into(">I", sent, 17, crc32c.crc32c(bytes(sent[21:])))
    with pytest.raises(ApiError) as info:
        one(bytes(sent))
    assert info.value.code == ErrorCode.INVALID_RECORD


@pytest.mark.parametrize("version, refused", [(3, True), (4, True), (5, True), (6, True), (7, False), (13, False)])
def test_zstd_needs_produce_v7(version: int, refused: bool) -> None:
    """KIP-110: ProduceRequest.validateRecords refuses zstd below v7."""
    for codec in CODECS:
        records = memoryview(three_records(codec))
        if codec == Codec.ZSTD and refused:
            with pytest.raises(ApiError) as info:
                check_produce_request(records, version)
            assert info.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
        else:
            check_produce_request(records, version)
