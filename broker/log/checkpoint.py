"""The partition log's checkpoint file: log start offset, high watermark, recovery point.

One small versioned msgspec-JSON file per partition directory, replaced atomically (write a
temporary file, fsync it, rename it over the old one, fsync the directory). The recovery point
says how far the log is known to be on disk (fsynced, indexes included): recovery after a crash
scans only from `recovery_position` in segment `recovery_segment_base` onwards. `clean_shutdown`
is true only in the checkpoint that close() writes; recovery reports it and relies on it for
nothing (the open does not rewrite the checkpoint to clear it: see partition_log._recover).
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from broker.atomic_write import write_atomically

CHECKPOINT_VERSION = 1
CHECKPOINT_FILE = "partition-log.checkpoint"


class CheckpointFormatError(ValueError):
    """The checkpoint file has a version this broker does not know, or is malformed."""


class LogCheckpoint(msgspec.Struct, frozen=True, forbid_unknown_fields=False):
    version: int
    log_start_offset: int
    high_watermark: int
    recovery_point: int  # every entry below this offset is on disk with its index entries
    recovery_segment_base: int  # the segment holding the recovery point
    recovery_position: int  # file position of the recovery point in that segment
    clean_shutdown: bool = False


class _Versioned(msgspec.Struct):
    version: int


def checkpoint_path(directory: Path) -> Path:
    return directory / CHECKPOINT_FILE


def read_checkpoint(directory: Path) -> LogCheckpoint | None:
    """The checkpoint, or None when there is none (new log, or lost file: recovery scans all)."""
    path = checkpoint_path(directory)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        version = msgspec.json.decode(raw, type=_Versioned).version
    except msgspec.DecodeError as e:
        raise CheckpointFormatError(f"{path}: malformed checkpoint: {e}") from None
    if version != CHECKPOINT_VERSION:
        raise CheckpointFormatError(
            f"{path}: checkpoint version {version} is not supported (this broker reads {CHECKPOINT_VERSION})"
        )
    try:
        return msgspec.json.decode(raw, type=LogCheckpoint)
    except msgspec.DecodeError as e:
        raise CheckpointFormatError(f"{path}: malformed checkpoint: {e}") from None


def write_checkpoint(directory: Path, checkpoint: LogCheckpoint) -> None:
    """Atomically replace the checkpoint."""
    write_atomically(checkpoint_path(directory), msgspec.json.encode(checkpoint))
