"""Batch headers: parse, split, CRC and in-place patches, against kafka-python's builder."""

import pytest
from hypothesis import given, strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from broker.protocol import batch as b


def build(count: int = 3, codec: int = 0, base_ts: int = 1_000, producer_id: int = -1, seq: int = -1) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=seq,
        batch_size=1 << 20,
    )
    for i in range(count):
        builder.append(i, timestamp=base_ts + i, key=b"k%d" % i, value=b"v" * (200 + i), headers=[("h", b"x")])
    return bytes(builder.build())


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_header_fields(codec: int) -> None:
    raw = build(codec=codec, producer_id=7, seq=10)
    header = b.parse_header(raw)
    assert (header.magic, header.records_count, header.last_offset_delta) == (2, 3, 2)
    assert (header.producer_id, header.base_sequence, header.last_sequence) == (7, 10, 12)
    assert header.size == len(raw) and header.compression == codec
    assert b.crc_is_valid(memoryview(raw), header)


def test_split_and_patch_keep_crc() -> None:
    blob = bytearray(build() + build(count=5))
    found = list(b.split_batches(memoryview(blob)))
    assert [h.records_count for _, h in found] == [3, 5]
    pos, header = found[1]
    view = memoryview(blob)[pos : pos + header.size]
    b.set_base_offset(view, 42)
    b.set_leader_epoch(view, 9)
    patched = b.parse_header(view)
    assert (patched.base_offset, patched.partition_leader_epoch) == (42, 9)
    assert b.crc_is_valid(view, patched)
    assert [r.offset for r in DefaultRecordBatch(bytes(view))] == [42, 43, 44, 45, 46]


def test_corruption_is_detected() -> None:
    raw = bytearray(build())
    raw[-1] ^= 0xFF
    assert not b.crc_is_valid(memoryview(raw), b.parse_header(raw))


def test_old_magic_and_truncation() -> None:
    raw = bytearray(build())
    raw[b.OFFSET_MAGIC] = 1
    with pytest.raises(b.UnsupportedMagicError):
        list(b.split_batches(memoryview(raw)))
    with pytest.raises(b.BatchFormatError):
        list(b.split_batches(memoryview(build()[:-1])))


@given(st.binary(max_size=200))
def test_split_garbage_raises_only_format_errors(data: bytes) -> None:
    try:
        list(b.split_batches(memoryview(data)))
    except b.BatchFormatError:
        pass


def expected_split(data: bytes) -> tuple[list[int], str | None]:
    """Kafka's framing of a records blob, independently: batch positions, or the error."""
    positions, pos = [], 0
    while pos < len(data):
        left = len(data) - pos
        if left > b.OFFSET_MAGIC and data[pos + b.OFFSET_MAGIC] != 2:
            return positions, "magic"
        if left < b.BATCH_HEADER_SIZE:
            return positions, "format"
        length = int.from_bytes(data[pos + 8 : pos + 12], "big", signed=True)
        if length < b.BATCH_HEADER_SIZE - b.LOG_OVERHEAD or pos + b.LOG_OVERHEAD + length > len(data):
            return positions, "format"
        positions.append(pos)
        pos += b.LOG_OVERHEAD + length
    return positions, None


@st.composite
def mutated_blobs(draw):  # type: ignore[no-untyped-def]
    """Valid batches back to back, then their framing bent: a length field moved (to 0, a
    neighbour's size, negative, huge, +-1...), a magic byte changed, bytes cut or appended."""
    blob = bytearray(b"".join(build(count=draw(st.integers(1, 3))) for _ in range(draw(st.integers(1, 4)))))
    starts = [pos for pos, _ in b.split_batches(memoryview(bytes(blob)))]
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["length", "magic", "cut", "append"]))
        at = draw(st.sampled_from(starts))
        if kind == "length" and at + 12 <= len(blob):
            old = int.from_bytes(blob[at + 8 : at + 12], "big", signed=True)
            new = draw(st.sampled_from([0, 48, 49, old - 1, old + 1, -1, 2**31 - 1, len(blob)]))
            blob[at + 8 : at + 12] = new.to_bytes(4, "big", signed=True)
        elif kind == "magic" and at + b.OFFSET_MAGIC < len(blob):
            blob[at + b.OFFSET_MAGIC] = draw(st.sampled_from([0, 1, 3, 0xFF]))
        elif kind == "cut":
            del blob[draw(st.integers(0, len(blob))) :]
        else:
            blob += draw(st.binary(min_size=1, max_size=80))
    return bytes(blob)


@given(mutated_blobs())
def test_split_mutated_batches_agrees_with_kafkas_framing(data: bytes) -> None:
    positions, error = expected_split(data)
    try:
        found = list(b.split_batches(memoryview(data)))
    except b.UnsupportedMagicError:
        assert error == "magic"
        return
    except b.BatchFormatError:
        assert error == "format"
        return
    assert error is None and [pos for pos, _ in found] == positions
    assert [h.size for _, h in found] == [int.from_bytes(data[p + 8 : p + 12], "big") + 12 for p in positions]
