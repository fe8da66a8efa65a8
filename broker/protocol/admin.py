"""The Shoal admin API: Shoal-specific operator requests (`shoal walfiles ...`) carried on the
Kafka listener, so the operator CLI needs nothing but a bootstrap address and any client can
reach the same state. Kafka has no API for it; this one uses an API key far above Kafka's
(SHOAL_ADMIN) and is not advertised in ApiVersions, so Kafka clients never see it.

Request (after the 4-byte size prefix): request header v1 (api_key int16 = SHOAL_ADMIN,
api_version int16 = 0, correlation_id int32, client_id nullable string), then
    command  string  (int16 length, UTF-8), e.g. "walfiles.status"
    args     bytes   (int32 length) a JSON object
Response: correlation_id int32, then
    error_code     int16   a Kafka error code (0, NOT_CONTROLLER, INVALID_REQUEST, ...)
    error_message  nullable string (int16 length; -1 = null)
    result         bytes   (int32 length) JSON: the command's answer; for NOT_CONTROLLER
                           {"controller_id", "host", "port"} of the broker to ask instead
Any frame that does not parse closes the connection, like any malformed Kafka request.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

SHOAL_ADMIN = 32000
ADMIN_VERSION = 0

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HEADER = struct.Struct(">hhi")
MAX_ARGS_BYTES = 1 << 20


class AdminFrameError(ValueError):
    """A malformed admin request or response."""


@dataclass(frozen=True, slots=True)
class AdminRequest:
    correlation_id: int
    client_id: str | None
    command: str
    args: dict[str, Any]


@dataclass(frozen=True, slots=True)
class AdminResponse:
    correlation_id: int
    error_code: int
    error_message: str | None
    result: Any


def _string(value: str | None) -> bytes:
    if value is None:
        return _I16.pack(-1)
    raw = value.encode()
    return _I16.pack(len(raw)) + raw


def _read_string(buf: bytes, pos: int) -> tuple[str | None, int]:
    if pos + 2 > len(buf):
        raise AdminFrameError("truncated string length")
    (length,) = _I16.unpack_from(buf, pos)
    pos += 2
    if length == -1:
        return None, pos
    if length < 0 or pos + length > len(buf):
        raise AdminFrameError(f"bad string length {length}")
    try:
        return buf[pos : pos + length].decode(), pos + length
    except UnicodeDecodeError as exc:
        raise AdminFrameError(f"string is not UTF-8: {exc}") from None


def _read_json(buf: bytes, pos: int) -> tuple[Any, int]:
    if pos + 4 > len(buf):
        raise AdminFrameError("truncated bytes length")
    (length,) = _I32.unpack_from(buf, pos)
    pos += 4
    if length < 0 or length > MAX_ARGS_BYTES or pos + length > len(buf):
        raise AdminFrameError(f"bad bytes length {length}")
    try:
        return json.loads(buf[pos : pos + length]), pos + length
    except ValueError as exc:
        raise AdminFrameError(f"not JSON: {exc}") from None


def encode_request(request: AdminRequest) -> bytes:
    args = json.dumps(request.args).encode()
    return (
        _HEADER.pack(SHOAL_ADMIN, ADMIN_VERSION, request.correlation_id)
        + _string(request.client_id)
        + _string(request.command)
        + _I32.pack(len(args))
        + args
    )


def decode_request(frame: bytes) -> AdminRequest:
    if len(frame) < _HEADER.size:
        raise AdminFrameError("truncated header")
    api_key, version, correlation_id = _HEADER.unpack_from(frame, 0)
    if api_key != SHOAL_ADMIN or version != ADMIN_VERSION:
        raise AdminFrameError(f"not a Shoal admin request v{ADMIN_VERSION} (API {api_key} v{version})")
    client_id, pos = _read_string(frame, _HEADER.size)
    command, pos = _read_string(frame, pos)
    if not command:
        raise AdminFrameError("missing command")
    args, pos = _read_json(frame, pos)
    if not isinstance(args, dict):
        raise AdminFrameError("args must be a JSON object")
    if pos != len(frame):
        raise AdminFrameError(f"{len(frame) - pos} bytes after the request")
    return AdminRequest(correlation_id, client_id, command, args)


def encode_response(response: AdminResponse) -> bytes:
    result = json.dumps(response.result).encode()
    return (
        _I32.pack(response.correlation_id)
        + _I16.pack(response.error_code)
        + _string(response.error_message)
        + _I32.pack(len(result))
        + result
    )


def decode_response(frame: bytes) -> AdminResponse:
    if len(frame) < 6:
        raise AdminFrameError("truncated response")
    (correlation_id,) = _I32.unpack_from(frame, 0)
    (error_code,) = _I16.unpack_from(frame, 4)
    message, pos = _read_string(frame, 6)
    (length,) = _I32.unpack_from(frame, pos) if pos + 4 <= len(frame) else (-1,)
    if length < 0 or pos + 4 + length != len(frame):
        raise AdminFrameError("bad result length")
    try:
        result = json.loads(frame[pos + 4 :])
    except ValueError as exc:
        raise AdminFrameError(f"result is not JSON: {exc}") from None
    return AdminResponse(correlation_id, error_code, message, result)
