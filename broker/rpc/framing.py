"""Inter-broker RPC frames: encoding and an incremental decoder, with no I/O.

A frame is `u32 length | u8 version | u8 kind | u32 correlation id | msgpack body`
(big-endian; length counts the bytes after itself). The decoder is fed chunks split
anywhere and hands back whole frames. Replicated entries can be ~1 MiB, so bodies are not
copied more than once: a frame that lies inside one chunk is returned as a view of that
chunk, and a frame spanning chunks is assembled in a buffer allocated once at its full
size. Any violation raises `FrameError`; the stream can no longer be trusted to be aligned
on frame boundaries, so the connection must be closed.
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import NamedTuple

import msgspec

FRAME_VERSION = 1
DEFAULT_MAX_FRAME_BYTES = 64 * 1024 * 1024  # bounds the one partial frame buffered per connection
HEADER = struct.Struct(">IBBI")
HEADER_BYTES = HEADER.size  # 10
_AFTER_LENGTH = HEADER_BYTES - 4  # version, kind and correlation id: counted by `length`


class FrameKind(IntEnum):
    REQUEST = 0
    RESPONSE = 1
    ERROR = 2


class FrameError(Exception):
    """The byte stream is not a valid sequence of RPC frames; close the connection."""


class RpcErrorBody(msgspec.Struct, frozen=True):
    """Body of an ERROR frame: the handler raised instead of returning a response."""

    message: str


class Frame(NamedTuple):
    kind: FrameKind
    correlation_id: int
    body: memoryview  # msgpack; may be a view of a chunk passed to FrameDecoder.feed


def encode_frame(
    encoder: msgspec.msgpack.Encoder,
    kind: FrameKind,
    correlation_id: int,
    body: object,
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
) -> bytearray:
    """Encode `body` straight after a reserved header, so the frame is built in one buffer.

    Raises FrameError when the frame exceeds `max_frame_bytes`: the peer would close the
    connection on it, failing every other call multiplexed over that connection."""
    frame = bytearray(HEADER_BYTES)
    encoder.encode_into(body, frame, HEADER_BYTES)
    length = len(frame) - 4
    if length > max_frame_bytes:
        raise FrameError(f"frame of {length} bytes exceeds max_frame_bytes={max_frame_bytes}")
    HEADER.pack_into(frame, 0, length, FRAME_VERSION, kind, correlation_id)
    return frame


class FrameDecoder:
    """Turns a byte stream split anywhere into frames; after a FrameError, discard it."""

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self._max = max_frame_bytes
        self._head = bytearray()  # a header split across chunks, until complete
        self._body: bytearray | None = None  # a body split across chunks, allocated at full size
        self._filled = 0
        self._kind = FrameKind.REQUEST
        self._correlation_id = 0

    @property
    def at_boundary(self) -> bool:
        """True when no partial frame is buffered (a clean place for the stream to end)."""
        return not self._head and self._body is None

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        """Add received bytes; return every frame now complete, in stream order.

        Returned bodies may be views of `data`: do not modify it while using them."""
        view = memoryview(data).cast("B")
        end = len(view)
        pos = 0
        frames: list[Frame] = []
        while pos < end:
            body = self._body
            if body is not None:
                take = min(len(body) - self._filled, end - pos)
                body[self._filled : self._filled + take] = view[pos : pos + take]
                self._filled += take
                pos += take
                if self._filled == len(body):
                    frames.append(Frame(self._kind, self._correlation_id, memoryview(body)))
                    self._body = None
                continue
            if not self._head and end - pos >= HEADER_BYTES:
                body_bytes = self._parse_header(view, pos)
                pos += HEADER_BYTES
            else:
                take = min(HEADER_BYTES - len(self._head), end - pos)
                self._head += view[pos : pos + take]
                pos += take
                if len(self._head) < HEADER_BYTES:
                    break
                body_bytes = self._parse_header(self._head, 0)
                self._head.clear()
            if end - pos >= body_bytes:
                frames.append(Frame(self._kind, self._correlation_id, view[pos : pos + body_bytes]))
                pos += body_bytes
            else:
                self._body = bytearray(body_bytes)
                self._filled = 0
        return frames

    def _parse_header(self, buf: bytes | bytearray | memoryview, offset: int) -> int:
        """Validate a header and remember its kind and correlation id; return the body size."""
        length, version, kind, correlation_id = HEADER.unpack_from(buf, offset)
        if length > self._max:
            raise FrameError(f"frame of {length} bytes exceeds max_frame_bytes={self._max}")
        if length < _AFTER_LENGTH:
            raise FrameError(f"frame length {length} is shorter than the {_AFTER_LENGTH}-byte header")
        if version != FRAME_VERSION:
            raise FrameError(f"unknown RPC frame version {version} (expected {FRAME_VERSION}): newer broker?")
        try:
            self._kind = FrameKind(kind)
        except ValueError:
            raise FrameError(f"unknown RPC frame kind {kind}") from None
        self._correlation_id = correlation_id
        return length - _AFTER_LENGTH
