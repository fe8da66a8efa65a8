"""WAL object format: round trips, tail-only index reads, corruption detection, coalesced
ranges. Pure code: no store, no sockets, no clock."""

from __future__ import annotations

import random
import struct
import uuid

import crc32c
import msgspec
import pytest
from hypothesis import given, settings, strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from broker.protocol import batch as kb
from walfiles import format as wf

# --- helpers ------------------------------------------------------------------------------------


def fake_batch(payload: bytes, record_count: int = 1) -> bytes:
    """A batch with valid v2 framing (length, magic, recordsCount) around opaque bytes; its
    CRC is not valid, which the WAL format neither needs nor checks."""
    header = kb.BatchHeader(
        base_offset=0,
        batch_length=kb.BATCH_HEADER_SIZE - kb.LOG_OVERHEAD + len(payload),
        partition_leader_epoch=-1,
        magic=2,
        crc=0,
        attributes=0,
        last_offset_delta=max(record_count - 1, 0),
        base_timestamp=0,
        max_timestamp=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        records_count=record_count,
    )
    return header.pack() + payload


def real_batch(count: int, seed: int, codec: int = 0) -> bytes:
    rng = random.Random(seed)
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=seed,
        producer_epoch=0,
        base_sequence=seed * 10,
        batch_size=1 << 20,
    )
    for i in range(count):
        builder.append(i, timestamp=1_000 + i, key=b"k%d" % i, value=rng.randbytes(rng.randint(0, 300)), headers=[])
    return bytes(builder.build())


def assemble(
    data: bytes,
    index_bytes: bytes,
    batch_count: int,
    version: int = wf.FORMAT_VERSION,
    header_version: int | None = None,
) -> bytes:
    """An object from parts, with correct CRCs: for crafting valid-looking but wrong objects."""
    header = struct.pack(">4sHH", wf.MAGIC, version if header_version is None else header_version, 0)
    index_offset = len(header) + len(data)
    body = struct.pack(">QIIIH", index_offset, len(index_bytes), crc32c.crc32c(index_bytes), batch_count, 0)
    trailer = struct.pack(">H4s", version, wf.MAGIC)
    crc = crc32c.crc32c(trailer, crc32c.crc32c(body))
    return header + data + index_bytes + body + struct.pack(">I", crc) + trailer


def encode_index(index: wf.WalIndex) -> bytes:
    return msgspec.msgpack.Encoder(uuid_format="bytes").encode(index)


TOPICS = [uuid.UUID(int=i * 0x1111_1111_1111_1111) for i in range(1, 4)]

appends = st.lists(
    st.tuples(st.sampled_from(TOPICS), st.integers(0, 5), st.binary(max_size=200), st.integers(0, 1000)),
    max_size=40,
)


def build(items: list[tuple[uuid.UUID, int, bytes, int]]) -> tuple[bytes, list, list[wf.BatchCoordinates]]:
    builder = wf.WalObjectBuilder()
    batches = []
    coords = []
    for topic, partition, payload, count in items:
        raw = fake_batch(payload, count)
        batches.append((topic, partition, raw, count))
        coords.append(builder.append(topic, partition, raw))
    return builder.build(), batches, coords


def small_object() -> bytes:
    items = [(TOPICS[i % 3], i % 2, bytes([i]) * (i * 7), i) for i in range(6)]
    return build(items)[0]


# --- round trips --------------------------------------------------------------------------------


@given(appends)
def test_round_trip_random_batches(items: list) -> None:
    data, batches, coords = build(items)
    index, view = wf.read_object(data)
    assert index.version == wf.INDEX_VERSION and index.batch_count == len(batches)
    # Every batch is where its coordinates say, byte for byte, and the index agrees.
    entries = index.entries()
    assert [(e.offset, e.length) for e in entries] == [(c.offset, c.length) for c in coords]
    for (topic, partition, raw, count), c, e in zip(batches, coords, entries):
        assert bytes(view[c.offset : c.end]) == raw
        assert (e.topic_id, e.partition, e.record_count) == (topic, partition, count)
    # Per partition: append order, and the partition list is sorted and complete.
    for topic, partition in index.partition_keys():
        expected = [c for (t, p, _, _), c in zip(batches, coords) if (t, p) == (topic, partition)]
        assert [(b.offset, b.length) for b in index.batches_of(topic, partition)] == [
            (c.offset, c.length) for c in expected
        ]
    assert set(index.partition_keys()) == {(t, p) for t, p, _, _ in batches}
    assert index.partition_keys() == sorted(index.partition_keys(), key=lambda k: (k[0].bytes, k[1]))
    assert index.batches_of(uuid.UUID(int=0), 0) == []


def test_round_trip_real_kafka_batches() -> None:
    builder = wf.WalObjectBuilder()
    sent = []
    for i in range(12):
        raw = real_batch(count=1 + i % 5, seed=i, codec=[0, 1, 2][i % 3])
        topic, partition = TOPICS[i % 3], i % 4
        # memoryview input is accepted and not copied.
        sent.append((topic, partition, raw, builder.append(topic, partition, memoryview(raw))))
    assert builder.size == wf.HEADER_SIZE + sum(len(r) for _, _, r, _ in sent)
    buffers = builder.buffers()
    data = builder.build()
    assert data == b"".join(buffers) and builder.object_size == len(data)
    index, view = wf.read_object(data)
    for topic, partition, raw, c in sent:
        got = view[c.offset : c.end]
        header = kb.parse_header(got)
        assert bytes(got) == raw and kb.crc_is_valid(got, header)
        entry = next(e for e in index.entries() if e.offset == c.offset)
        assert (entry.topic_id, entry.partition, entry.record_count) == (topic, partition, header.records_count)
        # A consumer-side decoder reads the records after the fetch-path patch.
        patched = bytearray(got)
        kb.set_base_offset(patched, 100)
        assert [r.offset for r in DefaultRecordBatch(bytes(patched))] == list(range(100, 100 + header.records_count))


def test_empty_object_is_valid() -> None:
    builder = wf.WalObjectBuilder()
    data = builder.build()
    index, _ = wf.read_object(data)
    assert index.partitions == [] and len(data) == wf.HEADER_SIZE + len(encode_index(index)) + wf.FOOTER_SIZE


def test_layout_constants() -> None:
    data = small_object()
    assert data[:4] == wf.MAGIC and struct.unpack(">H", data[4:6]) == (wf.FORMAT_VERSION,)
    assert data[-4:] == wf.MAGIC and struct.unpack(">H", data[-6:-4]) == (wf.FORMAT_VERSION,)
    assert (wf.HEADER_SIZE, wf.FOOTER_SIZE, wf.DATA_START) == (8, 32, 8)


def test_builder_is_sealed_by_build_and_build_is_repeatable() -> None:
    builder = wf.WalObjectBuilder()
    builder.append(TOPICS[0], 0, fake_batch(b"x"))
    assert not builder.sealed and builder.object_size is None
    first = builder.build()
    assert builder.sealed and builder.build() == first
    with pytest.raises(RuntimeError, match="sealed"):
        builder.append(TOPICS[0], 0, fake_batch(b"y"))


@pytest.mark.parametrize(
    "batch",
    [
        b"",
        b"\x00" * 60,
        fake_batch(b"abc")[:-1],  # batchLength says one more byte
        fake_batch(b"abc") + b"\x00",  # trailing byte: two batches or garbage
        fake_batch(b"abc") + fake_batch(b""),
        fake_batch(b"abc", record_count=-1),
    ],
)
def test_builder_rejects_what_is_not_one_v2_batch(batch: bytes) -> None:
    with pytest.raises(ValueError):
        wf.WalObjectBuilder().append(TOPICS[0], 0, batch)


def test_builder_rejects_old_magic_bad_partition_and_topic() -> None:
    raw = bytearray(fake_batch(b"abc"))
    raw[kb.OFFSET_MAGIC] = 1
    builder = wf.WalObjectBuilder()
    with pytest.raises(ValueError, match="magic 1"):
        builder.append(TOPICS[0], 0, bytes(raw))
    for partition in (-1, 2**31, True):
        with pytest.raises(ValueError):
            builder.append(TOPICS[0], partition, fake_batch(b""))
    with pytest.raises(TypeError):
        builder.append(str(TOPICS[0]), 0, fake_batch(b""))  # type: ignore[arg-type]
    assert builder.batch_count == 0 and builder.size == wf.HEADER_SIZE


def test_builder_size_bound() -> None:
    builder = wf.WalObjectBuilder(max_object_bytes=wf.HEADER_SIZE + 222)
    builder.append(TOPICS[0], 0, fake_batch(b"a" * 100))  # 161 bytes
    with pytest.raises(ValueError, match="larger than"):
        builder.append(TOPICS[0], 0, fake_batch(b"a" * 100))
    builder.append(TOPICS[0], 0, fake_batch(b""))  # 61 bytes: exactly at the bound
    assert builder.size == wf.HEADER_SIZE + 222
    with pytest.raises(ValueError):
        wf.WalObjectBuilder(max_object_bytes=10)


# --- index from the tail ------------------------------------------------------------------------


@settings(max_examples=60)
@given(appends, st.integers(wf.FOOTER_SIZE, 20_000))
def test_index_from_tail_one_or_two_gets(items: list, tail_bytes: int) -> None:
    data, _, _ = build(items)
    expected, _ = wf.read_object(data)
    start, end = wf.tail_range(len(data), tail_bytes)
    assert end == len(data) and start == max(0, len(data) - tail_bytes)
    footer, index = wf.index_from_tail(data[start:end], len(data))
    assert footer.batch_count == len(items)
    if start <= footer.index_offset:
        assert index == expected  # one GET was enough
    else:
        assert index is None
        lo, hi = footer.index_range
        assert wf.decode_index(data[lo:hi], footer) == expected


def test_default_tail_holds_the_index_of_an_8_mib_object_of_16_kib_batches() -> None:
    builder = wf.WalObjectBuilder()
    payload = b"\x00" * (16 << 10)
    i = 0
    while builder.size < 8 << 20:
        builder.append(TOPICS[i % 3], i % 100, fake_batch(payload))
        i += 1
    data = builder.build()
    start, end = wf.tail_range(len(data))
    footer, index = wf.index_from_tail(data[start:end], len(data))
    assert index is not None and index.batch_count == i
    # ~10 bytes per batch and ~23 per partition (300 partitions here): ~12 KiB.
    assert footer.index_length <= 10 * i + 23 * len(index.partitions) + 8


def test_parse_footer_argument_errors() -> None:
    data = small_object()
    with pytest.raises(ValueError):
        wf.parse_footer(data, len(data) - 1)  # tail longer than the object
    with pytest.raises(wf.TruncatedObjectError):
        wf.parse_footer(data[-10:], len(data))
    with pytest.raises(wf.TruncatedObjectError):
        wf.parse_footer(data[-wf.FOOTER_SIZE :], wf.MIN_OBJECT_SIZE - 1)
    with pytest.raises(wf.CorruptIndexError, match="wrong object size"):
        wf.parse_footer(data[-100:], len(data) + 1)
    footer = wf.parse_footer(data[-wf.FOOTER_SIZE :], len(data))
    with pytest.raises(wf.TruncatedObjectError):
        wf.decode_index(b"", footer)
    with pytest.raises(ValueError):
        wf.tail_range(100, wf.FOOTER_SIZE - 1)


# --- corruption -----------------------------------------------------------------------------------


def test_every_truncation_is_detected() -> None:
    data = small_object()
    for n in range(len(data)):
        with pytest.raises(wf.WalFormatError):
            wf.read_object(data[:n])  # cut at the end
        with pytest.raises(wf.WalFormatError):
            wf.read_object(data[len(data) - n :])  # cut at the front


def test_tail_read_with_a_wrong_size_is_detected() -> None:
    data = small_object()
    for size in range(len(data) - 40, len(data) + 40):
        if size == len(data):
            continue
        with pytest.raises(wf.WalFormatError):
            tail = data[-min(size, len(data), 64) :]
            wf.index_from_tail(tail, size)


def non_batch_positions(data: bytes) -> list[int]:
    footer = wf.parse_footer(data, len(data))
    return list(range(wf.HEADER_SIZE)) + list(range(footer.index_offset, len(data)))


def test_every_single_bit_flip_in_header_index_and_footer_is_detected() -> None:
    data = small_object()
    for pos in non_batch_positions(data):
        for bit in range(8):
            corrupt = bytearray(data)
            corrupt[pos] ^= 1 << bit
            with pytest.raises(wf.WalFormatError):
                wf.read_object(bytes(corrupt))


@given(st.data())
def test_random_multi_byte_corruption_of_framing_is_detected(draw: st.DataObject) -> None:
    data = small_object()
    positions = non_batch_positions(data)
    corrupt = bytearray(data)
    for pos in draw.draw(st.lists(st.sampled_from(positions), min_size=1, max_size=6, unique=True)):
        corrupt[pos] ^= draw.draw(st.integers(1, 255))
    with pytest.raises(wf.WalFormatError):
        wf.read_object(bytes(corrupt))


def test_flips_inside_batches_are_left_to_the_batch_crc() -> None:
    """The WAL format does not checksum batch bytes: each batch has its own CRC32C, checked at
    produce and by consumers. Bytes outside that CRC are baseOffset and partitionLeaderEpoch
    (overwritten when served) and batchLength (checked against the coordinates' length)."""
    raw = real_batch(3, seed=1)
    builder = wf.WalObjectBuilder()
    c = builder.append(TOPICS[0], 0, raw)
    data = builder.build()
    patched_fields = set(range(kb.OFFSET_BASE, kb.OFFSET_LENGTH)) | set(range(kb.OFFSET_LEADER_EPOCH, kb.OFFSET_MAGIC))
    for pos in range(c.length):
        corrupt = bytearray(data)
        corrupt[c.offset + pos] ^= 0x01
        _, view = wf.read_object(bytes(corrupt))  # not the WAL format's job
        got = view[c.offset : c.end]
        header = kb.parse_header(got)
        caught = header.size != c.length or header.magic != 2 or not kb.crc_is_valid(got, header)
        assert caught == (pos not in patched_fields), pos


@given(st.binary(max_size=300))
def test_garbage_only_raises_format_errors(data: bytes) -> None:
    with pytest.raises(wf.WalFormatError):
        wf.read_object(data)


def test_unknown_format_version_is_rejected_by_number() -> None:
    index = encode_index(wf.WalIndex(wf.INDEX_VERSION, []))
    data = assemble(b"", index, 0, version=7)
    with pytest.raises(wf.UnsupportedVersionError, match="format version 7") as e:
        wf.read_object(data)
    assert e.value.version == 7 and "newer broker" in str(e.value)
    with pytest.raises(wf.UnsupportedVersionError, match="version 7"):
        wf.index_from_tail(data[-wf.FOOTER_SIZE :], len(data))


def test_unknown_index_version_is_rejected_by_number() -> None:
    index = encode_index(wf.WalIndex(9, []))
    with pytest.raises(wf.UnsupportedVersionError, match="index version 9") as e:
        wf.read_object(assemble(b"", index, 0))
    assert e.value.version == 9


def test_header_disagreeing_with_footer_is_corrupt() -> None:
    index = encode_index(wf.WalIndex(wf.INDEX_VERSION, []))
    with pytest.raises(wf.CorruptIndexError, match="disagrees"):
        wf.read_object(assemble(b"", index, 0, header_version=2))


def index_of(*partitions: tuple[uuid.UUID, int, list[tuple[int, int, int]]]) -> bytes:
    return encode_index(
        wf.WalIndex(
            wf.INDEX_VERSION,
            [wf.IndexPartition(t, p, [wf.IndexBatch(*b) for b in batches]) for t, p, batches in partitions],
        )
    )


A, B = TOPICS[0], TOPICS[1]


@pytest.mark.parametrize(
    "data,index,count,message",
    [
        (b"x" * 20, index_of((A, 0, [(8, 10, 1)])), 1, "end at byte 18"),  # uncovered tail
        (b"x" * 20, index_of((A, 0, [(8, 10, 1), (18, 12, 1)])), 2, "end at byte 30"),  # into the index
        (b"x" * 20, index_of((A, 0, [(8, 10, 1), (17, 11, 1)])), 2, "does not follow"),  # overlap
        (b"x" * 20, index_of((A, 0, [(9, 20, 1)])), 1, "does not follow"),  # gap at the start
        (b"x" * 20, index_of((A, 0, [(8, 20, 1)])), 2, "footer says 2"),  # count
        (b"x" * 20, index_of((A, 0, [(8, 0, 1), (8, 20, 1)])), 2, "length 0"),
        (b"x" * 20, index_of((A, 0, [(8, 20, -1)])), 1, "record count -1"),
        (b"x" * 20, index_of((A, -1, [(8, 20, 1)])), 1, "partition -1"),
        (b"x" * 20, index_of((A, 0, []), (A, 1, [(8, 20, 1)])), 1, "no batches"),
        (b"x" * 20, index_of((A, 1, [(8, 10, 1)]), (A, 0, [(18, 10, 1)])), 2, "sorted"),
        (b"x" * 20, index_of((A, 0, [(8, 10, 1)]), (A, 0, [(18, 10, 1)])), 2, "sorted"),
        (b"x" * 20, index_of((B, 0, [(8, 10, 1)]), (A, 0, [(18, 10, 1)])), 2, "sorted"),
        (b"", b"\x92\x01\x91\x93", 0, "does not decode"),
        (b"", b"\xc1", 0, "does not decode"),
        (b"", msgspec.msgpack.encode([1, [["not-a-uuid", 0, []]]]), 0, "does not decode"),
    ],
)
def test_inconsistent_indexes_with_valid_crcs_are_rejected(data: bytes, index: bytes, count: int, message: str) -> None:
    with pytest.raises(wf.CorruptIndexError, match=message):
        wf.read_object(assemble(data, index, count))


def test_errors_are_value_errors_and_not_retriable() -> None:
    for cls in (
        wf.TruncatedObjectError,
        wf.BadMagicError,
        wf.UnsupportedVersionError,
        wf.ChecksumMismatchError,
        wf.CorruptIndexError,
    ):
        assert issubclass(cls, wf.WalFormatError) and issubclass(cls, ValueError) and not cls.retriable


# --- coalesce -------------------------------------------------------------------------------------


range_lists = st.lists(
    st.tuples(st.integers(0, 500), st.integers(0, 60)).map(lambda t: (t[0], t[0] + t[1])), max_size=30
)


@given(range_lists, st.integers(0, 50), st.one_of(st.none(), st.integers(1, 200)))
def test_coalesce_properties(ranges: list[tuple[int, int]], max_gap: int, max_bytes: int | None) -> None:
    groups = wf.coalesce(ranges, max_gap, max_bytes)
    # Every requested range is in exactly one group, which covers it.
    members = [m for g in groups for m in g.members]
    assert sorted(members) == list(range(len(ranges)))
    for g in groups:
        for m in g.members:
            assert g.start <= ranges[m][0] and ranges[m][1] <= g.end
        # The group is exactly the span of its members, members in start order.
        assert g.start == min(ranges[m][0] for m in g.members) and g.end == max(ranges[m][1] for m in g.members)
        assert [ranges[m] for m in g.members] == sorted(ranges[m] for m in g.members)
        # No internal gap larger than max_gap (nothing merged across a big hole).
        reach = g.start
        for m in g.members:
            assert ranges[m][0] - reach <= max_gap
            reach = max(reach, ranges[m][1])
    # Ordered and disjoint; two neighbours were kept apart for a reason.
    for a, b in zip(groups, groups[1:]):
        assert a.end <= b.start
        assert b.start - a.end > max_gap or (max_bytes is not None and b.end - a.start > max_bytes)
    if max_bytes is not None:
        for g in groups:
            if g.end - g.start > max_bytes:
                # Only overlap, never a gap join, can push a group over the cap.
                first = ranges[g.members[0]]
                assert len(g.members) == 1 or all(
                    ranges[m][0] < max(ranges[n][1] for n in g.members[:i]) or ranges[m][1] - first[0] <= max_bytes
                    for i, m in enumerate(g.members)
                    if i
                )


def test_coalesce_examples() -> None:
    ranges = [(100, 150), (0, 10), (10, 20), (25, 30), (200, 300)]
    assert [(g.start, g.end, g.members) for g in wf.coalesce(ranges, max_gap=5)] == [
        (0, 30, [1, 2, 3]),
        (100, 150, [0]),
        (200, 300, [4]),
    ]
    assert [(g.start, g.end, g.members) for g in wf.coalesce(ranges, max_gap=100)] == [(0, 300, [1, 2, 3, 0, 4])]
    assert [(g.start, g.end) for g in wf.coalesce(ranges, max_gap=100, max_bytes=150)] == [(0, 150), (200, 300)]
    assert wf.coalesce([], 10) == []
    coords = [wf.BatchCoordinates(8, 10), wf.BatchCoordinates(18, 5)]
    assert [(g.start, g.end, g.members) for g in wf.coalesce_coordinates(coords, 0)] == [(8, 23, [0, 1])]
    for bad in ([(5, 4)], [(-1, 3)]):
        with pytest.raises(ValueError):
            wf.coalesce(bad, 0)
    with pytest.raises(ValueError):
        wf.coalesce([(0, 1)], -1)
    with pytest.raises(ValueError):
        wf.coalesce([(0, 1)], 0, max_bytes=0)
