"""The payload of a COORDINATES partition-log entry: where one batch lives in a WAL object.

The entry's 61-byte batch header is the authoritative header of the batch (baseOffset and
partitionLeaderEpoch as assigned by the leader; for LogAppendTime topics also the stamped
attributes, maxTimestamp and CRC). The payload only says where the batch's bytes are. A fetch
serves the entry's header followed by the object's bytes after the first 61, so the WAL object
keeps the producer's original bytes.

Encoded as a msgpack array ``[version, object_id, offset, length]`` (about 50 bytes). Readers
reject versions they do not know with WalRefFormatError.
"""

from __future__ import annotations

import msgspec

WAL_REF_VERSION = 1
SUPPORTED_WAL_REF_VERSIONS = frozenset({WAL_REF_VERSION})


class WalRefFormatError(ValueError):
    """A COORDINATES payload this broker cannot read (unknown version, garbage)."""


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
            f"{sorted(SUPPORTED_WAL_REF_VERSIONS)}); was the log written by a newer broker?")
    if ref.offset < 0 or ref.length <= 0:
        raise WalRefFormatError(f"COORDINATES payload has a bad range: offset {ref.offset}, length {ref.length}")
    return ref
