"""The frame of Shoal's binary checkpoint files (mode history, remote segments): a 4-byte
magic naming the file's kind, a version and a CRC32C of the body, written atomically. One
place, so every such file fails the same way on a torn, foreign or corrupted file."""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c

from broker.atomic_write import write_atomically

_HEAD = struct.Struct(">4sHI")


class FramedFileError(Exception):
    """The file is truncated, of another kind or version, or fails its checksum."""


def write_framed(path: Path, magic: bytes, version: int, body: bytes) -> None:
    write_atomically(path, _HEAD.pack(magic, version, crc32c.crc32c(body)) + body)


def unframe(data: bytes, magic: bytes, version: int, what: str) -> bytes:
    """The body of a framed file's bytes `data`; `what` names the kind in errors."""
    if len(data) < _HEAD.size:
        raise FramedFileError(f"truncated {what}")
    found_magic, found_version, crc = _HEAD.unpack_from(data)
    body = data[_HEAD.size :]
    if found_magic != magic or found_version != version:
        raise FramedFileError(f"not a {what} of version {version} (magic {found_magic!r}, version {found_version})")
    if crc32c.crc32c(body) != crc:
        raise FramedFileError(f"{what} checksum mismatch")
    return body
