"""RPC frames: encode/decode round trips, a stream split anywhere, and malformed headers."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.rpc.framing import (
    FRAME_VERSION,
    HEADER,
    HEADER_BYTES,
    FrameDecoder,
    FrameError,
    FrameKind,
    RpcErrorBody,
    encode_frame,
)

ENCODER = msgspec.msgpack.Encoder()


class Ping(msgspec.Struct, tag="ping"):
    version: int
    payload: bytes


def decoded(frames: list) -> list[tuple[FrameKind, int, bytes]]:
    return [(f.kind, f.correlation_id, bytes(f.body)) for f in frames]


def test_round_trip_one_frame() -> None:
    frame = encode_frame(ENCODER, FrameKind.REQUEST, 7, Ping(1, b"abc"))
    length, version, kind, correlation_id = HEADER.unpack_from(frame)
    assert (length, version, kind, correlation_id) == (len(frame) - 4, FRAME_VERSION, 0, 7)

    decoder = FrameDecoder()
    [out] = decoder.feed(bytes(frame))
    assert (out.kind, out.correlation_id) == (FrameKind.REQUEST, 7)
    assert msgspec.msgpack.decode(out.body, type=Ping) == Ping(1, b"abc")
    assert decoder.at_boundary


def test_error_frame_and_large_body_round_trip() -> None:
    big = Ping(1, bytes(range(256)) * 4096)  # 1 MiB, like a replicated entry
    stream = bytes(encode_frame(ENCODER, FrameKind.RESPONSE, 2**32 - 1, big)) + bytes(
        encode_frame(ENCODER, FrameKind.ERROR, 0, RpcErrorBody("boom"))
    )
    decoder = FrameDecoder()
    frames = decoder.feed(stream[:1000]) + decoder.feed(stream[1000:])
    assert [(f.kind, f.correlation_id) for f in frames] == [(FrameKind.RESPONSE, 2**32 - 1), (FrameKind.ERROR, 0)]
    assert msgspec.msgpack.decode(frames[0].body, type=Ping) == big
    assert msgspec.msgpack.decode(frames[1].body, type=RpcErrorBody).message == "boom"


bodies = st.lists(
    st.tuples(st.sampled_from(list(FrameKind)), st.integers(0, 2**32 - 1), st.binary(max_size=300)),
    max_size=8,
)


@given(bodies, st.lists(st.integers(0, 3000), max_size=20))
def test_split_anywhere_yields_the_same_frames(frames: list, cuts: list[int]) -> None:
    stream = b"".join(bytes(encode_frame(ENCODER, kind, cid, payload)) for kind, cid, payload in frames)
    points = sorted({c % (len(stream) + 1) for c in cuts})
    chunks = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)])]
    decoder = FrameDecoder()
    out = [frame for chunk in chunks for frame in decoder.feed(chunk)]
    expected = [(kind, cid, ENCODER.encode(payload)) for kind, cid, payload in frames]
    assert decoded(out) == expected
    assert decoder.at_boundary


def test_every_single_byte_split() -> None:
    stream = b"".join(bytes(encode_frame(ENCODER, FrameKind.REQUEST, i, Ping(i, b"x" * i))) for i in range(5))
    decoder = FrameDecoder()
    out = [frame for i in range(len(stream)) for frame in decoder.feed(stream[i : i + 1])]
    assert [f.correlation_id for f in out] == [0, 1, 2, 3, 4]
    assert [msgspec.msgpack.decode(f.body, type=Ping).payload for f in out] == [b"x" * i for i in range(5)]


def header(length: int, version: int = FRAME_VERSION, kind: int = 0, correlation_id: int = 1) -> bytes:
    return HEADER.pack(length, version, kind, correlation_id)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (header(1025), "exceeds max_frame_bytes=1024"),
        (header(5), "shorter than"),
        (header(6, version=2), "unknown RPC frame version 2"),
        (header(6, version=0), "unknown RPC frame version 0"),
        (header(6, kind=3), "unknown RPC frame kind 3"),
    ],
)
def test_bad_headers_are_rejected(data: bytes, match: str) -> None:
    decoder = FrameDecoder(max_frame_bytes=1024)
    assert decoder.feed(data[:3]) == []  # a header split across chunks is checked once complete
    with pytest.raises(FrameError, match=match):
        decoder.feed(data[3:])


def test_bad_header_after_good_frames_is_rejected() -> None:
    good = bytes(encode_frame(ENCODER, FrameKind.REQUEST, 1, Ping(1, b"")))
    with pytest.raises(FrameError, match="version 9"):
        FrameDecoder().feed(good + header(6, version=9))


def test_max_frame_bytes_is_inclusive() -> None:
    frame = encode_frame(ENCODER, FrameKind.REQUEST, 1, Ping(1, b"y" * 100))
    limit = len(frame) - 4
    assert len(FrameDecoder(limit).feed(bytes(frame))) == 1
    with pytest.raises(FrameError, match="exceeds"):
        FrameDecoder(limit - 1).feed(bytes(frame))


def test_encode_refuses_an_oversize_frame() -> None:
    with pytest.raises(FrameError, match="exceeds max_frame_bytes=100"):
        encode_frame(ENCODER, FrameKind.REQUEST, 1, Ping(1, b"z" * 200), max_frame_bytes=100)
    assert len(encode_frame(ENCODER, FrameKind.REQUEST, 1, Ping(1, b""), max_frame_bytes=100)) > HEADER_BYTES
