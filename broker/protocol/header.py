"""Request and response headers, parsed by hand so the body stays a zero-copy memoryview.

Request header v1: api_key int16, api_version int16, correlation_id int32, client_id
nullable string (int16 length). v2 (flexible APIs) adds tagged fields; client_id stays a
non-compact string. Response header v0 is the correlation id; v1 adds empty tagged
fields. ApiVersions responses always use header v0 so that a client that sent an
unknown version can still read the answer.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

_FIXED = struct.Struct(">hhih")
_CORRELATION = struct.Struct(">i")
_API = struct.Struct(">hhi")


class HeaderError(ValueError):
    """The request header is truncated or malformed."""


@dataclass(slots=True, frozen=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str = ""  # the peer, as Kafka prints it ("/127.0.0.1"); set by the server
    peer: str = ""  # the connection's "host:port"; set by the server
    forwarded: bool = False  # sent on by another broker (answer here, never forward again)


def peek_api(frame: bytes | memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) from the first 8 bytes of a frame."""
    if len(frame) < 8:
        raise HeaderError(f"request of {len(frame)} bytes is shorter than a header")
    return _API.unpack_from(frame, 0)


def _read_uvarint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise HeaderError("truncated varint in request header")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise HeaderError("varint too long in request header")


def parse_request_header(frame: bytes | memoryview, flexible: bool, peer: str = "") -> tuple[RequestHeader, int]:
    """Parse the header; return it and the offset where the body starts."""
    if len(frame) < _FIXED.size:
        raise HeaderError(f"request of {len(frame)} bytes is shorter than a header")
    api_key, api_version, correlation_id, client_id_len = _FIXED.unpack_from(frame, 0)
    pos = _FIXED.size
    client_id: str | None = None
    if client_id_len >= 0:
        end = pos + client_id_len
        if end > len(frame):
            raise HeaderError("client_id runs past the end of the request")
        try:
            client_id = bytes(frame[pos:end]).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise HeaderError("client_id is not UTF-8") from exc
        pos = end
    elif client_id_len != -1:
        raise HeaderError(f"invalid client_id length {client_id_len}")
    if flexible:
        count, pos = _read_uvarint(frame, pos)
        for _ in range(count):
            _tag, pos = _read_uvarint(frame, pos)
            size, pos = _read_uvarint(frame, pos)
            pos += size
            if pos > len(frame):
                raise HeaderError("tagged field runs past the end of the request")
    client_host = "/" + peer.rpartition(":")[0] if peer else ""
    return RequestHeader(api_key, api_version, correlation_id, client_id, client_host, peer), pos


def encode_response_header(correlation_id: int, flexible: bool) -> bytes:
    """Response header v1 (flexible) or v0."""
    header = _CORRELATION.pack(correlation_id)
    return header + b"\x00" if flexible else header
