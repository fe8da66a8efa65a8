"""A partition's mode over its offsets: the mode markers of its log, remembered.

A mode marker (entry kind MODE) is where a leader switched a partition between classic
(RECORDS entries) and diskless (COORDINATES entries): every entry below it was appended in
the previous mode, every entry above it in the marker's. Like a remote-segment marker it is a
real Kafka control batch (type `SHOAL_MODE`, value the msgpack `ModeEvent`), so clients skip
it and tiered segments keep dense offsets.

The mode a partition is in decides only which appends its leader accepts; readers go by each
entry's kind, so a log with both kinds is served as it is. A partition's mode is the last
marker's, or, with none, the mode it was created in (`base`).

`ModeHistory` keeps every marker (offset, mode, epoch) in ``mode-history.checkpoint``, so the
mode survives retention deleting the segment that held the marker. It is written before the
marker is appended and cut back to the log end offset when opened, so a crash between the two
forgets the marker instead of inventing one; a truncation drops markers above the new end.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from broker.log.framed_file import FramedFileError, unframe, write_framed
from broker.log.markers import SHOAL_MODE, MarkerFormatError, control_value, encode_control

CHECKPOINT_FILE = "mode-history.checkpoint"
EVENT_VERSION = 1
_MAGIC = b"SHMH"
_VERSION = 1


class ModeEvent(msgspec.Struct, array_like=True, frozen=True):
    """A mode marker's value: the mode from here on, and the one it replaces."""

    version: int
    diskless: bool
    previous_diskless: bool


class ModeChange(msgspec.Struct, array_like=True, frozen=True):
    offset: int  # the marker's offset: the first offset of the new mode
    diskless: bool
    leader_epoch: int


class ModeHistoryError(ValueError):
    """The checkpoint file is corrupt or of an unknown version."""


_EVENT_ENCODER = msgspec.msgpack.Encoder()
_EVENT_DECODER = msgspec.msgpack.Decoder(ModeEvent)
_CHANGES_DECODER = msgspec.msgpack.Decoder(list[ModeChange])


def encode_mode_marker(event: ModeEvent, timestamp_ms: int) -> bytes:
    """The control batch of a mode marker (offset and epoch patched by the log)."""
    return encode_control(SHOAL_MODE, _EVENT_ENCODER.encode(event), timestamp_ms)


def decode_mode_marker(data: bytes | bytearray | memoryview) -> ModeEvent:
    try:
        event = _EVENT_DECODER.decode(control_value(data, SHOAL_MODE))
    except msgspec.DecodeError as exc:
        raise MarkerFormatError(f"unreadable mode marker: {exc}") from None
    if event.version != EVENT_VERSION:
        raise MarkerFormatError(f"mode event version {event.version} is not supported")
    return event


class ModeHistory:
    """The mode markers of one partition's log, oldest first, persisted in its directory."""

    def __init__(self, path: Path, changes: list[ModeChange]) -> None:
        self._path = path
        self._changes = changes

    @classmethod
    def open(cls, directory: Path, log_end_offset: int) -> "ModeHistory":
        path = directory / CHECKPOINT_FILE
        changes: list[ModeChange] = []
        if path.exists():
            changes = _decode(path.read_bytes(), path)
        history = cls(path, changes)
        history.truncate_from(log_end_offset)  # written before a marker whose append was lost
        return history

    @property
    def changes(self) -> list[ModeChange]:
        return list(self._changes)

    def diskless(self, base: bool) -> bool:
        """The mode at the log end: the last marker's, else `base` (the creation mode)."""
        return self._changes[-1].diskless if self._changes else base

    def boundary(self) -> int:
        """The offset of the last marker (-1 without one)."""
        return self._changes[-1].offset if self._changes else -1

    def last_switch_to_classic(self) -> int:
        """The offset of the last marker that switched to classic (-1 without one)."""
        return next((change.offset for change in reversed(self._changes) if not change.diskless), -1)

    def ever_diskless(self, base: bool) -> bool:
        """Whether any part of the log may have been appended in diskless mode (and so may
        hold COORDINATES entries that reference WAL objects)."""
        return base or any(change.diskless for change in self._changes)

    def record(self, change: ModeChange) -> None:
        """A marker about to be appended at `change.offset` (the log end offset)."""
        if self._changes and change.offset < self._changes[-1].offset:
            raise ValueError(f"mode marker at {change.offset} below the last one at {self._changes[-1].offset}")
        self._changes.append(change)
        self._persist()

    def truncate_from(self, offset: int) -> None:
        """The log was cut back to `offset`: markers at or above it are gone."""
        kept = [c for c in self._changes if c.offset < offset]
        if len(kept) != len(self._changes):
            self._changes = kept
            self._persist()

    def snapshot(self) -> bytes:
        return msgspec.msgpack.encode(self._changes)

    def install(self, snapshot: bytes, start_offset: int) -> None:
        """A follower starting over at the leader's log start `start_offset`: the leader's
        markers below it replace ours (those above it arrive with the log)."""
        theirs = [c for c in _CHANGES_DECODER.decode(snapshot) if c.offset < start_offset]
        self._changes = theirs
        self._persist()

    def _persist(self) -> None:
        write_framed(self._path, _MAGIC, _VERSION, msgspec.msgpack.encode(self._changes))


def _decode(data: bytes, path: Path) -> list[ModeChange]:
    try:
        return _CHANGES_DECODER.decode(unframe(data, _MAGIC, _VERSION, "mode history"))
    except FramedFileError as exc:
        raise ModeHistoryError(f"{path}: {exc}") from None
    except msgspec.DecodeError as exc:
        raise ModeHistoryError(f"{path}: unreadable mode history: {exc}") from None
