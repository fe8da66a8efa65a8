"""The C walk over a batch's records (broker/protocol/_records.c) against a plain reading written
from Kafka's record format (reference_records.py): batches built by kafka-python with any
keys, values, headers and timestamps, then mutated (bytes flipped, cut, appended, the count
changed); `scan` and the chunk-fed `Scanner` (a record or varint cut anywhere) must agree with
the reference on every one, failing exactly where it fails."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from broker.protocol.records import RecordError, Scanner, scan
from broker.protocol.batch import BATCH_HEADER_SIZE, parse_header
from tests.protocol.reference_records import Malformed, expected_scan

LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1
timestamps = st.one_of(
    st.integers(0, 2**41),
    st.sampled_from([-1, 0, LONG_MAX, LONG_MIN + 1, 1_700_000_000_000]),
)
blobs = st.one_of(st.none(), st.binary(max_size=40), st.binary(min_size=120, max_size=400))
records = st.lists(
    st.tuples(
        timestamps,
        blobs,
        blobs,
        st.lists(st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=20))), max_size=3),
    ),
    min_size=1,
    max_size=12,
)


def build(entries: list) -> bytes:  # type: ignore[type-arg]
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for i, (ts, key, value, headers) in enumerate(entries):
        builder.append(i, timestamp=ts, key=key, value=value, headers=headers)
    return bytes(builder.build())


def reference(section: bytes, count: int, base: int, earliest: int, latest: int):  # type: ignore[no-untyped-def]
    try:
        return expected_scan(section, count, base, earliest, latest)
    except Malformed:
        return None


def walked(section: bytes, count: int, base: int, earliest: int, latest: int, cuts: list[int]):  # type: ignore[no-untyped-def]
    """(scan's answer, the chunk-fed Scanner's answer), None where it raised RecordError."""
    try:
        whole = scan(section, count, base, earliest, latest)
    except RecordError:
        whole = None
    scanner = Scanner(count, base, earliest, latest)
    try:
        start = 0
        for cut in sorted({c % (len(section) + 1) for c in cuts}) + [len(section)]:
            scanner.feed(memoryview(section)[start:cut])
            start = cut
        fed = scanner.finish()
    except RecordError:
        fed = None
    return whole, fed


@settings(max_examples=400, deadline=None)
@given(
    records,
    st.lists(
        st.tuples(st.sampled_from(["flip", "cut", "append", "count"]), st.integers(0, 10**6), st.integers(1, 255)),
        max_size=3,
    ),
    st.lists(st.integers(0, 10**6), max_size=6),
    st.sampled_from([(LONG_MIN, LONG_MAX), (0, 2**40), (1_699_999_999_000, 1_700_000_000_000)]),
)
def test_walk_agrees_with_the_reference(entries, mutations, cuts, window) -> None:  # type: ignore[no-untyped-def]
    raw = build(entries)
    header = parse_header(raw)
    section = bytearray(raw[BATCH_HEADER_SIZE:])
    count = header.records_count
    for kind, where, value in mutations:
        if kind == "flip" and section:
            section[where % len(section)] ^= value
        elif kind == "cut":
            del section[where % (len(section) + 1) :]
        elif kind == "append":
            section += bytes([value]) * (1 + where % 3)
        else:
            count += value % 3 - 1
    expected = reference(bytes(section), count, header.base_timestamp, *window)
    assert walked(bytes(section), count, header.base_timestamp, *window, cuts) == (expected, expected)


def test_max_timestamp_of_a_batch_whose_header_says_minus_one() -> None:
    """What a client that leaves maxTimestamp at -1 sends: the walk finds the true maximum,
    whichever record holds it."""
    raw = build([(5_000, b"k", b"v", []), (9_000, None, b"w", []), (7_000, b"k", None, [("h", b"x")])])
    header = parse_header(raw)
    assert scan(raw[BATCH_HEADER_SIZE:], 3, header.base_timestamp, 0, 8_000) == (9_000, [1])


@pytest.mark.parametrize(
    "section, message",
    [
        (b"\x02", "premature EOF"),  # a record of one body byte, cut
        (b"\x00\x00", "invalid record structure"),  # an empty record body, then its attributes byte
        (b"\x01", "negative record length"),
        (b"\x28\x00" + b"\xff" * 10, "Varlong is too long"),  # 20 bytes long; its timestamp delta never ends
        (b"\x10\x00\x00\x00\x01\x01\x02\x01\x01", "negative header key"),  # null key, value; a header with a null key
        (b"\x10\x00\x00\x00\x01\x01\x7f\x00\x00", "number of record headers"),  # -64 headers
        (b"\x10\x00\x00\x00\x01\x01\x40\x00\x00", "number of record headers"),  # 32 headers in 2 bytes
    ],
)
def test_structural_faults_name_what_is_wrong(section: bytes, message: str) -> None:
    with pytest.raises(RecordError, match=message):
        scan(section, 1, 0, LONG_MIN, LONG_MAX)


def test_a_finished_scanner_takes_no_more() -> None:
    scanner = Scanner(0, 0, LONG_MIN, LONG_MAX)
    assert scanner.finish() == (-1, [])
    with pytest.raises(RuntimeError):
        scanner.feed(b"")
