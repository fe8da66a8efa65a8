"""The frame reader accepts data split anywhere and rejects impossible sizes."""

import struct

import pytest
from hypothesis import given, settings, strategies as st

from broker.protocol.frames import FrameError, FrameReader, frame


def _stream(payloads: list[bytes]) -> bytes:
    return b"".join(struct.pack(">i", len(p)) + p for p in payloads)


PAYLOADS = [b"", b"a", b"hello world" * 10, bytes(range(256))]


def test_split_at_every_byte_boundary_decodes_the_same() -> None:
    data = _stream(PAYLOADS)
    for cut in range(len(data) + 1):
        reader = FrameReader(1 << 20)
        frames = reader.feed(data[:cut]) + reader.feed(data[cut:])
        assert frames == PAYLOADS
        assert reader.buffered_bytes == 0


def test_byte_by_byte() -> None:
    reader = FrameReader(1 << 20)
    data = _stream(PAYLOADS)
    frames = [f for i in range(len(data)) for f in reader.feed(data[i : i + 1])]
    assert frames == PAYLOADS


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=8), st.lists(st.integers(1, 50), min_size=1, max_size=40))
def test_random_chunking(payloads: list[bytes], chunk_sizes: list[int]) -> None:
    data = _stream(payloads)
    reader = FrameReader(1 << 20)
    out: list[bytes] = []
    pos = 0
    i = 0
    while pos < len(data):
        size = chunk_sizes[i % len(chunk_sizes)]
        out += reader.feed(data[pos : pos + size])
        pos += size
        i += 1
    assert out == payloads


@pytest.mark.parametrize("size", [-1, -2147483648, 1025])
def test_impossible_sizes_are_errors(size: int) -> None:
    reader = FrameReader(1024)
    with pytest.raises(FrameError):
        reader.feed(struct.pack(">i", size) + b"x")


def test_frame_prefixes_total_size() -> None:
    parts = frame([b"ab", bytearray(b"cde")])
    assert b"".join(parts) == struct.pack(">i", 5) + b"abcde"
