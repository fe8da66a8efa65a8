"""`local:` metadata: the embedded single-broker store, one file under the data dir.

Metadata changes are rare (topic create/delete, config changes, producer-id blocks), so
each mutation rewrites the whole file atomically (write, fsync, rename, fsync dir).
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from .store import KeyValue, RevisionConflict

FORMAT_VERSION = 1


class _StoreFile(msgspec.Struct):
    version: int
    revision: int
    entries: dict[str, KeyValue]


class LocalMetadataStore:
    def __init__(self, path: Path) -> None:
        self._path = path
        self._revision = 0
        self._entries: dict[str, KeyValue] = {}
        if path.exists():
            data = msgspec.json.decode(path.read_bytes(), type=_StoreFile)
            if data.version != FORMAT_VERSION:
                raise ValueError(f"{path}: metadata format version {data.version} is not supported "
                                 f"(this broker reads version {FORMAT_VERSION})")
            self._revision, self._entries = data.revision, data.entries
        else:
            path.parent.mkdir(parents=True, exist_ok=True)

    async def get(self, key: str) -> KeyValue | None:
        return self._entries.get(key)

    async def put(self, key: str, value: bytes, expected_revision: int | None = None) -> int:
        self._check(key, expected_revision)
        self._revision += 1
        self._entries[key] = KeyValue(key, value, self._revision)
        self._persist()
        return self._revision

    async def delete(self, key: str, expected_revision: int | None = None) -> bool:
        self._check(key, expected_revision)
        if self._entries.pop(key, None) is None:
            return False
        self._revision += 1
        self._persist()
        return True

    async def list(self, prefix: str) -> list[KeyValue]:
        return [kv for key, kv in sorted(self._entries.items()) if key.startswith(prefix)]

    async def close(self) -> None:
        return None

    def _check(self, key: str, expected_revision: int | None) -> None:
        if expected_revision is None:
            return
        current = self._entries.get(key)
        actual = current.revision if current else 0
        if actual != expected_revision:
            raise RevisionConflict(f"{key}: expected revision {expected_revision}, found {actual}")

    def _persist(self) -> None:
        tmp = self._path.with_suffix(".tmp")
        payload = msgspec.json.encode(_StoreFile(FORMAT_VERSION, self._revision, self._entries))
        with open(tmp, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self._path)
        dir_fd = os.open(self._path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
