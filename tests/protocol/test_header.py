"""Request headers parse by hand; garbage only ever raises HeaderError."""

import struct

import pytest
from hypothesis import given, settings, strategies as st

from broker.protocol.header import HeaderError, encode_response_header, parse_request_header


def _header(
    api_key: int, version: int, correlation: int, client_id: str | None, flexible: bool, tags: bytes = b"\x00"
) -> bytes:
    cid = b"\xff\xff" if client_id is None else struct.pack(">h", len(client_id.encode())) + client_id.encode()
    return struct.pack(">hhi", api_key, version, correlation) + cid + (tags if flexible else b"")


@pytest.mark.parametrize("flexible", [False, True])
@pytest.mark.parametrize("client_id", [None, "", "rdkafka", "ünïcode"])
def test_parse(flexible: bool, client_id: str | None) -> None:
    raw = _header(3, 12, 77, client_id, flexible) + b"BODY"
    header, offset = parse_request_header(raw, flexible)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (3, 12, 77, client_id)
    assert raw[offset:] == b"BODY"


def test_tagged_fields_are_skipped() -> None:
    tags = b"\x02" + b"\x00\x03abc" + b"\x05\x01z"
    raw = _header(1, 13, 1, "c", True, tags) + b"B"
    header, offset = parse_request_header(raw, True)
    assert raw[offset:] == b"B"


@given(st.binary(max_size=64), st.booleans())
def test_garbage_raises_only_header_error(data: bytes, flexible: bool) -> None:
    try:
        parse_request_header(data, flexible)
    except HeaderError:
        pass


OVERLONG_VARINTS = [b"\xff\xff\xff\xff\xff\x01", b"\x80\x80\x80\x80\x80\x00"]  # 6 bytes
FIVE_BYTE_VARINTS = [b"\x80\x80\x80\x80\x00", b"\x81\x80\x80\x80\x00"]  # the longest Kafka reads


@pytest.mark.parametrize("varint", OVERLONG_VARINTS)
def test_overlong_varint_in_tagged_fields_is_refused(varint: bytes) -> None:
    with pytest.raises(HeaderError, match="varint"):
        parse_request_header(_header(1, 13, 1, "c", True, varint), True)


@pytest.mark.parametrize("varint, value", [(FIVE_BYTE_VARINTS[0], 0), (FIVE_BYTE_VARINTS[1], 1)])
def test_five_byte_varint_is_read(varint: bytes, value: int) -> None:
    tags = varint + (b"\x00\x00" if value else b"")  # one empty field (tag 0) when the count is 1
    header, offset = parse_request_header(_header(1, 13, 1, "c", True, tags) + b"B", True)
    assert offset == len(_header(1, 13, 1, "c", True, tags))


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def model_parse(frame: bytes, flexible: bool):  # type: ignore[no-untyped-def]
    """Kafka's RequestHeader v1/v2 read, written independently: (fields, body offset) or None."""
    if len(frame) < 10:
        return None
    api_key, version, correlation, length = struct.unpack_from(">hhih", frame)
    pos, client_id = 10, None
    if length >= 0:
        if pos + length > len(frame):
            return None
        try:
            client_id = frame[pos : pos + length].decode("utf-8")
        except UnicodeDecodeError:
            return None
        pos += length
    elif length != -1:
        return None

    def uvarint(at: int):  # type: ignore[no-untyped-def]
        value = 0
        for i in range(5):  # Kafka reads at most 5 bytes
            if at + i >= len(frame):
                return None
            value |= (frame[at + i] & 0x7F) << (7 * i)
            if not frame[at + i] & 0x80:
                return value, at + i + 1
        return None

    if flexible:
        got = uvarint(pos)
        if got is None:
            return None
        count, pos = got
        for _ in range(count):
            tag = uvarint(pos)
            size = None if tag is None else uvarint(tag[1])
            if size is None or size[1] + size[0] > len(frame):
                return None
            pos = size[1] + size[0]
    return (api_key, version, correlation, client_id), pos


@st.composite
def mutated_headers(draw):  # type: ignore[no-untyped-def]
    """A valid header (any client id, tagged fields when flexible) and body, then bytes flipped,
    cut, inserted or a length field bent."""
    flexible = draw(st.booleans())
    client_id = draw(st.one_of(st.none(), st.text(max_size=12)))
    cid = b"\xff\xff" if client_id is None else struct.pack(">h", len(client_id.encode())) + client_id.encode()
    tags = b""
    if flexible:
        fields = draw(
            st.lists(
                st.tuples(
                    st.integers(0, 300), st.binary(max_size=6), st.sampled_from([0, 0, 0, 1, 7, 1000])
                ),  # a size that lies
                max_size=3,
            )
        )
        tags = _uvarint(len(fields)) + b"".join(_uvarint(t) + _uvarint(len(v) + lie) + v for t, v, lie in fields)
    fixed = struct.pack(
        ">hhi", draw(st.integers(0, 70)), draw(st.integers(0, 15)), draw(st.integers(-(2**31), 2**31 - 1))
    )
    raw = bytearray(fixed + cid + tags + draw(st.binary(max_size=8)))
    header_end = len(fixed + cid + tags)
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["flip", "cut", "insert", "varint", "client_id_length"]))
        if kind == "flip" and raw:
            raw[draw(st.integers(0, len(raw) - 1))] ^= draw(st.integers(1, 255))
        elif kind == "cut":  # mostly inside the header
            del raw[draw(st.integers(0, min(len(raw), header_end + 1))) :]
        elif kind == "insert":
            at = draw(st.integers(0, min(len(raw), header_end)))
            raw[at:at] = draw(st.sampled_from([b"\x80", b"\x00", b"\xc3"]))
        elif kind == "varint" and flexible and len(raw) >= header_end - len(tags):
            # an over-long varint (6 bytes; Kafka stops at 5) or a 5-byte one where the tags start
            at = header_end - len(tags)
            raw[at:at] = draw(st.sampled_from(OVERLONG_VARINTS + FIVE_BYTE_VARINTS))
        elif len(raw) >= 10:
            raw[8:10] = struct.pack(">h", draw(st.sampled_from([-2, -1, 0, 64, 0x7FFF, len(raw) - 10])))
    return bytes(raw), flexible


@pytest.mark.parametrize(
    "frame, flexible, reason",
    [
        (_header(3, 1, 1, "c", False)[:9], False, "shorter than a header"),
        (struct.pack(">hhih", 3, 1, 1, -2), False, "invalid client_id length -2"),
        (struct.pack(">hhih", 3, 1, 1, 5) + b"abc", False, "client_id runs past the end"),
        (struct.pack(">hhih", 3, 1, 1, 2) + b"\xc3\x28", False, "client_id is not UTF-8"),
        (_header(3, 12, 1, "c", True, b""), True, "truncated varint"),
        (_header(3, 12, 1, "c", True, b"\x01\x00\x05ab"), True, "tagged field runs past the end"),
    ],
)
def test_each_header_error(frame: bytes, flexible: bool, reason: str) -> None:
    with pytest.raises(HeaderError, match=reason):
        parse_request_header(frame, flexible)


@settings(max_examples=400)
@given(mutated_headers())
def test_mutated_headers_parse_as_kafka_reads_them(case) -> None:  # type: ignore[no-untyped-def]
    frame, flexible = case
    expected = model_parse(frame, flexible)
    try:
        header, offset = parse_request_header(frame, flexible)
    except HeaderError:
        assert expected is None, f"refused a header Kafka reads as {expected}"
        return
    assert expected is not None, f"accepted a header Kafka refuses: {header}"
    assert ((header.api_key, header.api_version, header.correlation_id, header.client_id), offset) == expected


def test_response_header() -> None:
    assert encode_response_header(5, False) == struct.pack(">i", 5)
    assert encode_response_header(5, True) == struct.pack(">i", 5) + b"\x00"
