"""The embedded (`local:`) metadata store on disk: a snapshot plus a journal of the changes
since it, so that a change costs a write in proportion to itself.

The snapshot (`store.json`, version 2) holds every key at one revision, replaced atomically.
The journal (`store.journal`, beside it) holds the changes after that revision, one record
per store revision: `[length u32][crc32c u32][msgpack JournalRecord]`, appended and
fdatasynced before the change is acknowledged. Before, every change rewrote the whole file
with two fsyncs: 2 MB per change at 6,700 partitions (issue 28).

Opening loads the snapshot and replays the records after its revision; a record cut short or
failing its checksum ends the journal there (a crash during an append, which was never
acknowledged) and the file is cut back to the last whole record. Once the journal outgrows
the snapshot (and at least COMPACT_MIN_BYTES), the state is written as a new snapshot and the
journal emptied: a crash between the two leaves records the replay skips, since their
revisions are not after the snapshot's. A version-1 file (the whole store, rewritten on every
change, from before the journal) is read, and rewritten as version 2 at once, so that an
older broker refuses the directory rather than read a snapshot without its journal.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import crc32c
import msgspec

from ..atomic_write import fsync_directory, write_all, write_atomically
from .store import KeyValue

FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
JOURNAL_SUFFIX = ".journal"
COMPACT_MIN_BYTES = 1 << 20
_FRAME = struct.Struct(">II")  # payload length, crc32c of the payload


class StoreSnapshot(msgspec.Struct):
    version: int
    revision: int
    entries: dict[str, KeyValue]


class JournalRecord(msgspec.Struct, array_like=True):
    revision: int
    puts: list[KeyValue]
    deletes: list[str]


class StoreFiles:
    """One store's snapshot and journal. `load` first, then `append` each change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.journal_path = path.with_name(path.name + JOURNAL_SUFFIX)
        self._fd: int | None = None
        self._journal_bytes = 0
        self._snapshot_bytes = 0

    def load(self) -> tuple[int, dict[str, KeyValue]]:
        """The stored revision and entries; creates the files for a new store."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        revision, entries, version = 0, {}, FORMAT_VERSION
        if self.path.exists():
            raw = self.path.read_bytes()
            snapshot = msgspec.json.decode(raw, type=StoreSnapshot)
            if snapshot.version not in READABLE_VERSIONS:
                raise ValueError(
                    f"{self.path}: metadata format version {snapshot.version} is not supported "
                    f"(this broker reads versions {', '.join(map(str, READABLE_VERSIONS))})"
                )
            revision, entries, version = snapshot.revision, snapshot.entries, snapshot.version
            self._snapshot_bytes = len(raw)
        revision, good_bytes = self._replay(revision, entries)
        created = not self.journal_path.exists()
        self._fd = os.open(self.journal_path, os.O_WRONLY | os.O_CREAT, 0o644)
        if created:
            fsync_directory(self.path.parent)  # the journal's name must survive a crash too
        if os.fstat(self._fd).st_size != good_bytes:  # a record torn by a crash: never acknowledged
            os.ftruncate(self._fd, good_bytes)
            os.fsync(self._fd)
        os.lseek(self._fd, good_bytes, os.SEEK_SET)
        self._journal_bytes = good_bytes
        if version != FORMAT_VERSION or not self.path.exists():
            self.compact(revision, entries)  # also makes the new journal's name durable
        return revision, entries

    def append(self, revision: int, puts: list[KeyValue], deletes: list[str], entries: dict[str, KeyValue]) -> None:
        """Make one change durable; `entries`: the whole state after it, for a compaction."""
        assert self._fd is not None, "load() first"
        payload = msgspec.msgpack.encode(JournalRecord(revision, puts, deletes))
        write_all(self._fd, _FRAME.pack(len(payload), crc32c.crc32c(payload)) + payload)
        os.fdatasync(self._fd)
        self._journal_bytes += _FRAME.size + len(payload)
        if self._journal_bytes > max(COMPACT_MIN_BYTES, self._snapshot_bytes):
            self.compact(revision, entries)

    def compact(self, revision: int, entries: dict[str, KeyValue]) -> None:
        """Write the state as the snapshot, then empty the journal."""
        raw = msgspec.json.encode(StoreSnapshot(FORMAT_VERSION, revision, entries))
        write_atomically(self.path, raw)
        self._snapshot_bytes = len(raw)
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.lseek(self._fd, 0, os.SEEK_SET)
            os.fsync(self._fd)
            fsync_directory(self.path.parent)
        self._journal_bytes = 0

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _replay(self, revision: int, entries: dict[str, KeyValue]) -> tuple[int, int]:
        """Apply the journal's whole records after `revision` to `entries`; returns the
        revision reached and the bytes of whole records."""
        try:
            data = memoryview(self.journal_path.read_bytes())
        except FileNotFoundError:
            return revision, 0
        position = 0
        while position + _FRAME.size <= len(data):
            length, checksum = _FRAME.unpack_from(data, position)
            payload = data[position + _FRAME.size : position + _FRAME.size + length]
            if len(payload) < length or crc32c.crc32c(payload) != checksum:
                break
            try:
                record = msgspec.msgpack.decode(payload, type=JournalRecord)
            except msgspec.DecodeError:
                break
            position += _FRAME.size + length
            if record.revision <= revision:
                continue  # already in the snapshot (a crash between compaction's two steps)
            for kv in record.puts:
                entries[kv.key] = kv
            for key in record.deletes:
                entries.pop(key, None)
            revision = record.revision
        return revision, position
