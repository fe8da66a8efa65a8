"""`log_validator.validate`, the produce path's batch checks: each check alone with its Kafka
error code, then fuzzed from valid batches: header fields are set to hostile values and bytes
after the length field flipped (records included), and the CRC is recomputed about half the
time so the checks behind it (record count, offset delta, compression, control and
transactional flags, the records' structure and timestamps, size limits) are reached. An
independent oracle (the records read by tests/protocol/reference_records.py) lists what is
wrong with each batch: a batch set with nothing wrong must be accepted whole, stored with its
records' true maximum timestamp; otherwise the answer must be one of the errors of the first
bad batch."""

from __future__ import annotations

import struct
import zlib

import crc32c
import pytest
from hypothesis import given, settings, strategies as st
from kafka import codec as kafka_codecs
from kafka.record.default_records import DefaultRecordBatchBuilder

from broker.config import load_config
from broker.log_validator import validate
from broker.protocol.batch import parse_header
from broker.protocol.errors import ApiError, ErrorCode as E
from broker.topic_config import effective
from tests.protocol.reference_records import Malformed, record_timestamps


def validate_batches(records: memoryview, settings, now_ms: int):  # type: ignore[no-untyped-def]
    return [(v.header, v.data) for v in validate(records, settings, now_ms)]


NOW = 1_800_000_000_000
OFFSETS = {
    "batch_length": 8,
    "magic": 16,
    "crc": 17,
    "attributes": 21,
    "last_offset_delta": 23,
    "base_timestamp": 27,
    "max_timestamp": 35,
    "producer_id": 43,
    "producer_epoch": 51,
    "base_sequence": 53,
    "records_count": 57,
}
FORMATS = {
    "batch_length": ">i",
    "magic": ">b",
    "crc": ">I",
    "attributes": ">h",
    "last_offset_delta": ">i",
    "base_timestamp": ">q",
    "max_timestamp": ">q",
    "producer_id": ">q",
    "producer_epoch": ">h",
    "base_sequence": ">i",
    "records_count": ">i",
}
FRAMING = {E.CORRUPT_MESSAGE, E.UNSUPPORTED_FOR_MESSAGE_FORMAT}


def build(count: int, ts: int, codec: int, producer_id: int) -> bytearray:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=0 if producer_id >= 0 else -1,
        batch_size=1 << 20,
    )
    for i in range(count):
        builder.append(i, timestamp=ts + i, key=b"k%d" % i, value=b"v" * (20 + 7 * i), headers=[("h", b"x")])
    return bytearray(builder.build())


def fix_crc(batch: bytearray) -> None:
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))


@st.composite
def cases(draw):  # type: ignore[no-untyped-def]
    batches = [
        build(
            draw(st.integers(1, 4)),
            NOW + draw(st.sampled_from([0, -5_000, 5_000, -(10**9), 10**9])),
            draw(st.sampled_from([0, 0, 0, 1])),
            draw(st.sampled_from([-1, 7])),
        )
        for _ in range(draw(st.integers(1, 3)))
    ]
    victim = batches[draw(st.integers(0, len(batches) - 1))]
    for _ in range(draw(st.integers(1, 2))):
        # Each attribute bit the checks look at gets its own kind, so each is reached often.
        kind = draw(st.sampled_from(["codec", "control", "transactional", "attributes", "count", "field", "flip"]))
        if kind in ("codec", "control", "transactional", "attributes"):
            flags = {
                "codec": draw(st.sampled_from([0x05, 0x06, 0x07, 0x0D])),
                "control": 0x20,
                "transactional": 0x10,
                "attributes": draw(st.integers(-(2**15), 2**15 - 1)),
            }[kind]
            struct.pack_into(">h", victim, OFFSETS["attributes"], flags)
        elif kind == "count":  # recordsCount and lastOffsetDelta, together or apart
            count = struct.unpack_from(">i", victim, OFFSETS["records_count"])[0]
            name = draw(st.sampled_from(["records_count", "last_offset_delta"]))
            # an earlier mutation may have left the count at an int32 bound: stay within int32
            nearby = [min(count + 1, 2**31 - 1), max(count - 2, -(2**31))]
            struct.pack_into(">i", victim, OFFSETS[name], draw(st.sampled_from([0, -1, *nearby, 2**31 - 1])))
        elif kind == "field":
            name = draw(st.sampled_from(sorted(FORMATS)))
            fmt = FORMATS[name]
            bits = struct.calcsize(fmt) * 8
            low, high = (0, 2**bits - 1) if fmt == ">I" else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
            current = struct.unpack_from(fmt, victim, OFFSETS[name])[0]
            value = draw(
                st.one_of(
                    st.integers(low, high),
                    st.sampled_from(
                        [v for v in (current - 1, current + 1, 0, -1, 1, NOW + 10**8, NOW - 10**8) if low <= v <= high]
                    ),
                )
            )
            struct.pack_into(fmt, victim, OFFSETS[name], value)
        else:  # any byte after the length field: magic, CRC, header fields or records
            pos = draw(st.integers(12, len(victim) - 1))
            victim[pos] ^= draw(st.integers(1, 255))
    if draw(st.sampled_from([True, True, False])):  # mostly: get past the CRC check
        fix_crc(victim)
    size = len(victim)
    overrides = {
        "max.message.bytes": str(draw(st.sampled_from([1 << 20, size, size - 1]))),
        "segment.bytes": str(draw(st.sampled_from([1 << 30, max(size, 14), max(size - 1, 14)]))),
        "message.timestamp.before.max.ms": str(draw(st.sampled_from([10**12, 10_000]))),
        "message.timestamp.after.max.ms": str(draw(st.sampled_from([10**12, 10_000]))),
    }
    return b"".join(batches), overrides


def framing_errors(data: bytes) -> tuple[list[int], set[E]]:
    """Positions of the batches (when the blob splits cleanly), or the framing errors."""
    positions, pos = [], 0
    while pos < len(data):
        left = len(data) - pos
        if left > 16 and data[pos + 16] != 2:
            return positions, {E.UNSUPPORTED_FOR_MESSAGE_FORMAT}
        if left < 61:
            return positions, {E.CORRUPT_MESSAGE}
        length = struct.unpack_from(">i", data, pos + 8)[0]
        if length < 49 or pos + 12 + length > len(data):
            return positions, {E.CORRUPT_MESSAGE}
        positions.append(pos)
        pos += 12 + length
    return positions, set()


def batch_errors(batch: bytes, overrides: dict[str, str]) -> set[E]:
    """Everything Kafka's rules find wrong with one well-framed batch."""
    wrong = set()
    (attributes, delta, base_ts, max_ts) = struct.unpack_from(">hiqq", batch, 21)
    count = struct.unpack_from(">i", batch, 57)[0]
    if len(batch) > int(overrides["max.message.bytes"]):
        wrong.add(E.MESSAGE_TOO_LARGE)
    if len(batch) > int(overrides["segment.bytes"]):
        wrong.add(E.RECORD_LIST_TOO_LARGE)
    if crc32c.crc32c(batch[21:]) != struct.unpack_from(">I", batch, 17)[0]:
        wrong.add(E.CORRUPT_MESSAGE)
    if count <= 0 or delta != count - 1:
        wrong.add(E.INVALID_RECORD)
    if attributes & 0x07 > 4:
        wrong.add(E.UNSUPPORTED_COMPRESSION_TYPE)
    if attributes & 0x20:
        wrong.add(E.INVALID_RECORD)
    if attributes & 0x10 and struct.unpack_from(">q", batch, 43)[0] < 0:
        wrong.add(E.INVALID_RECORD)  # a transactional batch needs a producer id
    if wrong:
        return wrong  # the records are read only once the header passes
    stamps = stored_timestamps(batch)
    if stamps is None:
        return {E.INVALID_RECORD}
    earliest = NOW - int(overrides["message.timestamp.before.max.ms"])
    latest = NOW + int(overrides["message.timestamp.after.max.ms"])
    if attributes & 0x08:  # the producer set LogAppendTime: every record has the header's timestamp
        stamps = [max_ts] * count if max_ts != -1 else None
    if stamps is None or any(ts != -1 and not earliest <= ts <= latest for ts in stamps):
        wrong.add(E.INVALID_TIMESTAMP)
    return wrong


def stored_timestamps(batch: bytes) -> list[int] | None:
    """The records' timestamps as Kafka reads them (None: the records are malformed)."""
    codec = struct.unpack_from(">h", batch, 21)[0] & 0x07
    section = batch[61:]
    try:
        if codec:
            section = {1: kafka_codecs.gzip_decode}[codec](section)
        return record_timestamps(
            section, struct.unpack_from(">i", batch, 57)[0], struct.unpack_from(">q", batch, 27)[0]
        )
    except (Malformed, OSError, EOFError, KeyError, ValueError, zlib.error):  # what gzip_decode raises
        return None


def one_batch(**fields: int) -> bytearray:
    batch = build(2, NOW, 0, 7)
    for name, value in fields.items():
        struct.pack_into(FORMATS[name], batch, OFFSETS[name], value)
    return batch


LIMITS = {
    "max.message.bytes": str(1 << 20),
    "segment.bytes": str(1 << 30),
    "message.timestamp.before.max.ms": "10000",
    "message.timestamp.after.max.ms": "10000",
}


@pytest.mark.parametrize(
    "fields, fix, limits, code",
    [
        ({"attributes": 0x05}, True, {}, E.UNSUPPORTED_COMPRESSION_TYPE),
        ({"attributes": 0x20}, True, {}, E.INVALID_RECORD),  # control batch
        ({"attributes": 0x10, "producer_id": -1}, True, {}, E.INVALID_RECORD),  # transactional, no producer
        ({"records_count": 0, "last_offset_delta": -1}, True, {}, E.INVALID_RECORD),
        ({"last_offset_delta": 5}, True, {}, E.INVALID_RECORD),
        ({"base_timestamp": NOW - 10_001}, True, {}, E.INVALID_TIMESTAMP),  # every record's timestamp moves
        ({"base_sequence": 3}, False, {}, E.CORRUPT_MESSAGE),  # CRC no longer matches
        ({"magic": 1}, False, {}, E.UNSUPPORTED_FOR_MESSAGE_FORMAT),
        ({"batch_length": 10_000}, False, {}, E.CORRUPT_MESSAGE),  # overruns the request
        ({}, False, {"max.message.bytes": "100"}, E.MESSAGE_TOO_LARGE),
        ({}, False, {"segment.bytes": "100"}, E.RECORD_LIST_TOO_LARGE),  # a batch larger than a segment
    ],
)
def test_each_check_alone(fields: dict, fix: bool, limits: dict, code: E) -> None:
    batch = one_batch(**fields)
    if fix:
        fix_crc(batch)
    ok = bytes(build(1, NOW, 0, -1))
    with pytest.raises(ApiError) as info:  # all or nothing: a good batch before it changes nothing
        validate_batches(memoryview(ok + bytes(batch)), effective({**LIMITS, **limits}, load_config(environ={})), NOW)
    assert info.value.code == code, info.value.message
    assert validate_batches(memoryview(ok), effective({**LIMITS, **limits}, load_config(environ={})), NOW)
    assert validate_batches(memoryview(bytes(one_batch())), effective(LIMITS, load_config(environ={})), NOW)


def test_empty_partition_data_is_an_invalid_record() -> None:
    with pytest.raises(ApiError) as info:
        validate_batches(memoryview(b""), effective(LIMITS, load_config(environ={})), NOW)
    assert info.value.code == E.INVALID_RECORD


@settings(max_examples=600, deadline=None)
@given(cases())
def test_mutated_batches_are_refused_for_a_real_reason_or_accepted_whole(case) -> None:  # type: ignore[no-untyped-def]
    data, overrides = case
    topic = effective(overrides, load_config(environ={}))
    positions, framing = framing_errors(data)
    expected: set[E] = framing
    if not framing:
        for pos in positions:
            size = 12 + struct.unpack_from(">i", data, pos + 8)[0]
            expected = batch_errors(data[pos : pos + size], overrides)
            if expected:
                break
    try:
        found = validate_batches(memoryview(data), topic, NOW)
    except ApiError as exc:
        assert expected, f"refused with {exc.code.name} ({exc.message}), but nothing is wrong"
        assert exc.code in expected, f"refused with {exc.code.name}, expected one of {sorted(e.name for e in expected)}"
        return
    assert not expected, f"accepted, but: {sorted(e.name for e in expected)}"
    assert len(found) == len(positions)
    for (header, stored), pos in zip(found, positions):
        sent = parse_header(data, pos)
        stamps = stored_timestamps(data[pos : pos + sent.size])
        assert stamps is not None
        true_max = max([-1, *stamps]) if not sent.attributes & 0x08 else sent.max_timestamp
        assert header.max_timestamp == true_max and header.attributes == sent.attributes & ~0x08
        assert (header.base_timestamp, header.records_count, header.producer_id) == (
            sent.base_timestamp,
            sent.records_count,
            sent.producer_id,
        )
        assert bytes(stored[61:]) == data[pos + 61 : pos + sent.size]
        assert crc32c.crc32c(bytes(stored[21:])) == header.crc == parse_header(stored).crc
