"""Request headers parse by hand; garbage only ever raises HeaderError."""

import struct

import pytest
from hypothesis import given, strategies as st

from broker.protocol.header import HeaderError, encode_response_header, parse_request_header


def _header(api_key: int, version: int, correlation: int, client_id: str | None, flexible: bool, tags: bytes = b"\x00") -> bytes:
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


def test_response_header() -> None:
    assert encode_response_header(5, False) == struct.pack(">i", 5)
    assert encode_response_header(5, True) == struct.pack(">i", 5) + b"\x00"
