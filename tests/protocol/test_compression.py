"""Kafka's codecs as the broker streams them (broker/protocol/compression.py), against
kafka-python's own codecs (kafka.codec, what its producer writes and its consumer reads):
each side reads what the other writes, whatever the data, the level and the chunking; a
stream that is cut or is not the codec's is a CodecError; the output limit holds."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st
from kafka import codec as kafka

from broker.protocol.compression import CHUNK_BYTES, Codec, CodecError, Compressor, decompress

ENCODE = {
    Codec.GZIP: kafka.gzip_encode,
    Codec.SNAPPY: kafka.snappy_encode,
    Codec.LZ4: kafka.lz4_encode,
    Codec.ZSTD: kafka.zstd_encode,
}
DECODE = {
    Codec.GZIP: kafka.gzip_decode,
    Codec.SNAPPY: kafka.snappy_decode,
    Codec.LZ4: kafka.lz4_decode,
    Codec.ZSTD: kafka.zstd_decode,
}
LEVELS = {Codec.GZIP: [-1, 1, 9], Codec.SNAPPY: [0], Codec.LZ4: [9, 1, 12], Codec.ZSTD: [3, -5, 12]}
data = st.one_of(  # a records section is never empty (a batch holds at least one record)
    st.binary(min_size=1, max_size=3000),
    st.builds(lambda unit, n: unit * n, st.binary(min_size=1, max_size=40), st.integers(1, 20_000)),
)


def ours(codec: Codec, blob: bytes, limit: int = 1 << 30) -> bytes:
    chunks = list(decompress(codec, blob, limit))
    bound = 1 << 30 if codec == Codec.SNAPPY else CHUNK_BYTES
    assert all(len(c) <= bound for c in chunks)
    return b"".join(bytes(c) for c in chunks)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(sorted(ENCODE)), data, st.lists(st.integers(1, 50_000), max_size=4), st.data())
def test_each_side_reads_what_the_other_writes(codec: Codec, payload: bytes, cuts: list[int], draw) -> None:  # type: ignore[no-untyped-def]
    level = draw.draw(st.sampled_from(LEVELS[codec]))
    compressor, pieces, start = Compressor(codec, level), [], 0
    for cut in sorted(c % (len(payload) + 1) for c in cuts) + [len(payload)]:
        pieces.append(compressor.compress(payload[start:cut]))
        start = cut
    ours_written = b"".join([*pieces, compressor.flush()])
    assert DECODE[codec](ours_written) == payload
    assert ours(codec, ours_written) == payload
    assert ours(codec, ENCODE[codec](payload)) == payload


@pytest.mark.parametrize("codec", sorted(ENCODE))
def test_a_cut_or_foreign_stream_is_a_codec_error(codec: Codec) -> None:
    blob = ENCODE[codec](b"some records " * 500)
    for bad in (blob[: len(blob) // 2], blob[:-3], b"\x00" * 64):
        with pytest.raises(CodecError):
            ours(codec, bad)


@pytest.mark.parametrize("codec", sorted(ENCODE))
def test_output_stops_at_the_limit(codec: Codec) -> None:
    blob = ENCODE[codec](bytes(4 << 20))
    assert len(ours(codec, blob, 4 << 20)) == 4 << 20
    with pytest.raises(CodecError, match="more than 1048576 bytes"):
        ours(codec, blob, 1 << 20)


def test_raw_snappy_as_librdkafka_writes_it() -> None:
    import snappy

    assert ours(Codec.SNAPPY, snappy.compress(b"abc" * 10_000)) == b"abc" * 10_000


def test_several_gzip_members_and_zstd_frames_are_read_in_turn() -> None:
    assert ours(Codec.GZIP, kafka.gzip_encode(b"one ") + kafka.gzip_encode(b"two")) == b"one two"
    assert ours(Codec.ZSTD, kafka.zstd_encode(b"one ") + kafka.zstd_encode(b"two")) == b"one two"


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.LZ4, Codec.ZSTD])
def test_an_empty_stream_is_empty_not_truncated(codec: Codec) -> None:
    assert ours(codec, ENCODE[codec](b"")) == b""


@pytest.mark.parametrize("checksum", [False, True])
@pytest.mark.parametrize("content_size", [False, True])
def test_zstd_frames_of_every_header_shape(checksum: bool, content_size: bool) -> None:
    """The block walk reads any frame header (window or single segment, content size of any
    width, checksum), across many blocks, and skips skippable frames."""
    import zstandard

    payload = b"".join(b"block %d " % i * 200 for i in range(3000))  # several 128 KiB blocks
    for size in (payload[:100], payload[:300], payload[:70_000], payload):
        frame = zstandard.ZstdCompressor(level=1, write_checksum=checksum, write_content_size=content_size)
        skippable = (0x184D2A53).to_bytes(4, "little") + (5).to_bytes(4, "little") + b"hello"
        assert ours(Codec.ZSTD, skippable + frame.compress(size) + frame.compress(b"!")) == size + b"!"
        streamed = frame.compressobj()
        assert ours(Codec.ZSTD, streamed.compress(size) + streamed.flush()) == size
