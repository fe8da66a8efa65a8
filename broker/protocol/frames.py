"""Incremental Kafka frame reader: a 4-byte big-endian size, then that many bytes.

Sans-io: it is fed whatever the transport delivered (split anywhere) and hands back
complete frames. A size that is negative or above the request size limit is a
protocol error: the connection must be closed, since the stream can no longer be
trusted to be aligned on frame boundaries.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

_SIZE = struct.Struct(">i")


class FrameError(Exception):
    """The byte stream is not a valid sequence of Kafka frames; close the connection."""


class FrameReader:
    def __init__(self, max_frame_bytes: int) -> None:
        self._max = max_frame_bytes
        self._buf = bytearray()
        self._need = -1  # size of the frame being assembled, or -1 while reading the prefix

    @property
    def buffered_bytes(self) -> int:
        return len(self._buf)

    @property
    def incomplete_frame_bytes(self) -> int:
        """The declared size of the frame being assembled (its prefix has arrived, not all of
        its body), else 0: what the server reserves before it reads the body."""
        return max(self._need, 0)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Add received bytes; return every frame now complete (without its size prefix)."""
        buf = self._buf
        buf += data
        frames: list[bytes] = []
        pos = 0
        end = len(buf)
        with memoryview(buf) as view:  # one copy per frame (a bytearray slice would be a second)
            while True:
                if self._need < 0:
                    if end - pos < 4:
                        break
                    (size,) = _SIZE.unpack_from(view, pos)
                    if size < 0:
                        raise FrameError(f"negative frame size {size}")
                    if size > self._max:
                        raise FrameError(f"frame of {size} bytes exceeds socket.request.max.bytes={self._max}")
                    pos += 4
                    self._need = size
                if end - pos < self._need:
                    break
                frames.append(bytes(view[pos : pos + self._need]))
                pos += self._need
                self._need = -1
        if pos:
            del buf[:pos]
        return frames


def frame(payload_parts: Sequence[bytes | bytearray | memoryview]) -> list[bytes | bytearray | memoryview]:
    """Prefix parts with the total size; the transport writes the list without joining."""
    size = sum(len(p) for p in payload_parts)
    return [_SIZE.pack(size), *payload_parts]
