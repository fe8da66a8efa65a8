"""The payload of a COORDINATES partition-log entry: where one batch lives in a WAL object.

The entry's 61-byte batch header is the authoritative header of the batch (baseOffset and
partitionLeaderEpoch as assigned by the leader; for LogAppendTime topics also the stamped
attributes, maxTimestamp and CRC). The payload only says where the batch's bytes are. A fetch
serves the entry's header followed by the object's bytes after the first 61, so the WAL object
keeps the producer's original bytes.

Encoded as a msgpack array ``[version, object_id, offset, length]`` (about 50 bytes). Readers
reject versions they do not know, and ranges no batch can have (a negative offset, a length
below 1), with WalRefFormatError. `make_ref` refuses such a range before it can be written
(InvalidCoordinates, an ApiError: a commit carrying one fails its partition, nothing appended).
"""

from __future__ import annotations

import msgspec

from ..protocol.errors import ApiError, ErrorCode

WAL_REF_VERSION = 1
SUPPORTED_WAL_REF_VERSIONS = frozenset({WAL_REF_VERSION})


class WalRefFormatError(ValueError):
    """A COORDINATES payload this broker cannot read (unknown version, garbage)."""


class InvalidCoordinates(ApiError):
    """A commit named coordinates no batch can have. CORRUPT_MESSAGE (retriable): the commit
    message is corrupt, and the producer's retry goes into a new object with new coordinates."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.CORRUPT_MESSAGE, message)


def bad_range(offset: int, length: int) -> str | None:
    """Why (offset, length) cannot locate a batch in a WAL object, or None when it can."""
    if offset < 0 or length < 1:
        return f"bad range: offset {offset} (must be >= 0), length {length} (must be >= 1)"
    return None


class WalRef(msgspec.Struct, array_like=True, frozen=True):
    """(WAL object id, byte offset, byte length) of one batch; the id is the last key segment."""

    version: int
    object_id: str
    offset: int
    length: int

    @property
    def end(self) -> int:
        return self.offset + self.length


_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(WalRef)


def make_ref(object_id: str, offset: int, length: int) -> WalRef:
    why = bad_range(offset, length)
    if why is not None:
        raise InvalidCoordinates(f"coordinates in WAL object {object_id}: {why}")
    return WalRef(WAL_REF_VERSION, object_id, offset, length)


def encode_ref(ref: WalRef) -> bytes:
    return _ENCODER.encode(ref)


def decode_ref(payload: bytes | bytearray | memoryview) -> WalRef:
    try:
        ref = _DECODER.decode(payload)
    except msgspec.DecodeError as exc:
        raise WalRefFormatError(f"unreadable COORDINATES payload: {exc}") from None
    if ref.version not in SUPPORTED_WAL_REF_VERSIONS:
        raise WalRefFormatError(
            f"COORDINATES payload version {ref.version} is not supported (this broker reads "
            f"{sorted(SUPPORTED_WAL_REF_VERSIONS)}); was the log written by a newer broker?"
        )
    why = bad_range(ref.offset, ref.length)
    if why is not None:
        raise WalRefFormatError(f"COORDINATES payload for WAL object {ref.object_id} has a {why}")
    return ref
