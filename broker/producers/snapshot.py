"""Producer-state snapshot files: format, names, atomic write, strict read.

A snapshot named ``{offset:020d}.snapshot`` holds the idempotent-producer state of one
partition after every batch below ``offset`` was applied (Kafka's ``.snapshot`` files, same
naming idea). On restart the newest usable snapshot is loaded and only the log tail from its
offset is replayed, so recovery costs O(tail), not O(log size).

File layout (versions 1 and 2)::

    0  magic  b"SHPS"   4 bytes
    4  version uint16   big-endian; readers reject versions they do not know
    6  crc32c  uint32   big-endian, over the body
    10 body             msgpack of `Snapshot` (msgspec, array-like structs)

Version 2 (transactions) adds two fields at the end of each producer: its coordinator epoch
and the first offset of its open transaction (-1: none). A version-1 body decodes into the
same struct with both at -1 (no transaction was open: version-1 brokers refused them). The
version number moved so that a version-1 broker refuses a version-2 file rather than drop
open transactions silently.

The header sits outside msgspec so a reader can name an unknown version before it tries to
decode a body whose shape it cannot know. Unlike Kafka (which keeps only the last batch per
producer), all retained batches (up to 5) are stored, so every retry that was detectable
before a restart is still detectable after it.

Writes are atomic: tmp file in the same directory, fsync, rename, fsync of the directory.
A crash leaves either the old set of snapshots or the new one, plus at most a stray
``.tmp`` file that listing ignores and `remove_stray_tmp_files` deletes.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import crc32c
import msgspec

from broker.atomic_write import TMP_SUFFIX, write_atomically

SNAPSHOT_SUFFIX = ".snapshot"
MAGIC = b"SHPS"
CURRENT_VERSION = 2
SUPPORTED_VERSIONS = frozenset({1, 2})

_HEADER = struct.Struct(">4sHI")
HEADER_SIZE = _HEADER.size  # 10


class SnapshotError(Exception):
    """A snapshot file cannot be used."""


class CorruptSnapshotError(SnapshotError):
    """Bad magic, CRC mismatch, truncated or undecodable body, or offset not matching the name."""


class UnknownSnapshotVersionError(SnapshotError):
    """Written by a newer (or unknown) format version; this broker cannot read it."""


class SnapshotBatch(msgspec.Struct, array_like=True, frozen=True):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp_ms: int


class SnapshotProducer(msgspec.Struct, array_like=True, frozen=True):
    producer_id: int
    producer_epoch: int
    last_timestamp_ms: int
    batches: list[SnapshotBatch]  # oldest first, at most 5
    coordinator_epoch: int = -1  # version 2
    current_txn_first_offset: int = -1  # version 2: first offset of the open transaction, -1: none


class Snapshot(msgspec.Struct, frozen=True):
    offset: int  # must equal the offset in the file name
    producers: list[SnapshotProducer]


SnapshotV1 = Snapshot  # the name before version 2; a version-1 body decodes into it unchanged

_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(Snapshot)


# --- names -----------------------------------------------------------------------------------


def format_snapshot_name(offset: int) -> str:
    """``{offset:020d}.snapshot``: zero-padded so listing order is numeric order."""
    if offset < 0:
        raise ValueError(f"snapshot offset must be >= 0, got {offset}")
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


def parse_snapshot_name(name: str) -> int | None:
    """The offset of a snapshot file name, or None when the name is not one."""
    if not name.endswith(SNAPSHOT_SUFFIX):
        return None
    stem = name[: -len(SNAPSHOT_SUFFIX)]
    if len(stem) != 20 or not stem.isdigit() or not stem.isascii():
        return None
    return int(stem)


def list_snapshots(directory: Path) -> list[tuple[int, Path]]:
    """(offset, path) of every snapshot file in ``directory``, ascending; [] if it is missing."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        offset = parse_snapshot_name(name)
        if offset is not None:
            found.append((offset, directory / name))
    found.sort()
    return found


def remove_stray_tmp_files(directory: Path) -> None:
    """Delete ``*.snapshot.tmp`` left by a crash in the middle of `write_snapshot`."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return
    for name in names:
        if name.endswith(SNAPSHOT_SUFFIX + TMP_SUFFIX):
            (directory / name).unlink(missing_ok=True)


# --- bytes -----------------------------------------------------------------------------------


def encode_snapshot(snapshot: Snapshot, version: int = CURRENT_VERSION) -> bytes:
    """The file bytes; ``version=1`` (tests: what an older broker wrote) leaves out the
    transaction fields."""
    if version == 1:
        body = _ENCODER.encode(
            {
                "offset": snapshot.offset,
                "producers": [
                    [p.producer_id, p.producer_epoch, p.last_timestamp_ms, p.batches] for p in snapshot.producers
                ],
            }
        )
    else:
        body = _ENCODER.encode(snapshot)
    return _HEADER.pack(MAGIC, version, crc32c.crc32c(body)) + body


def decode_snapshot(data: bytes, *, source: str = "snapshot") -> Snapshot:
    """Parse snapshot bytes; raises UnknownSnapshotVersionError or CorruptSnapshotError."""
    if len(data) < HEADER_SIZE:
        raise CorruptSnapshotError(f"{source}: {len(data)} bytes, shorter than the {HEADER_SIZE}-byte header")
    magic, version, crc = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise CorruptSnapshotError(f"{source}: bad magic {magic!r}, expected {MAGIC!r}")
    if version not in SUPPORTED_VERSIONS:
        raise UnknownSnapshotVersionError(
            f"{source}: producer snapshot format version {version} is not supported by this broker "
            f"(supported: {sorted(SUPPORTED_VERSIONS)}); it was probably written by a newer version. "
            "Upgrade the broker, or delete the file to rebuild producer state from the log."
        )
    body = memoryview(data)[HEADER_SIZE:]
    computed = crc32c.crc32c(body)
    if computed != crc:
        raise CorruptSnapshotError(f"{source}: CRC mismatch (stored {crc:#010x}, computed {computed:#010x})")
    try:
        return _DECODER.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise CorruptSnapshotError(f"{source}: undecodable body: {e}") from e


# --- files -----------------------------------------------------------------------------------


def write_snapshot(directory: Path, snapshot: Snapshot) -> Path:
    """Atomically write ``snapshot`` as ``directory/{offset:020d}.snapshot``; returns the path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / format_snapshot_name(snapshot.offset)
    write_atomically(path, encode_snapshot(snapshot))
    return path


def read_snapshot(path: Path) -> Snapshot:
    """Read and verify one snapshot file; the offset inside must match the file name."""
    expected = parse_snapshot_name(path.name)
    if expected is None:
        raise CorruptSnapshotError(f"{path}: not a snapshot file name (want {{offset:020d}}{SNAPSHOT_SUFFIX})")
    snapshot = decode_snapshot(path.read_bytes(), source=str(path))
    if snapshot.offset != expected:
        raise CorruptSnapshotError(f"{path}: contains offset {snapshot.offset}, name says {expected}")
    return snapshot


def decode_snapshot_at(data: bytes, offset: int, *, source: str = "snapshot") -> Snapshot:
    """`decode_snapshot` of bytes that must hold the state at ``offset`` (not from a file)."""
    snapshot = decode_snapshot(data, source=source)
    if snapshot.offset != offset:
        raise CorruptSnapshotError(f"{source}: contains offset {snapshot.offset}, expected {offset}")
    return snapshot
