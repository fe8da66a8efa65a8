"""The MetadataStore interface: a small versioned key-value store with compare-and-set.

Two backends share it: `local:` (embedded, single broker, one file under the data dir)
and, in the cluster issue, etcd. Values are opaque bytes (msgspec records, see
`records.py`); every key carries a revision so writers can compare-and-set.
"""

from __future__ import annotations

from typing import Protocol

import msgspec


class KeyValue(msgspec.Struct, frozen=True):
    key: str
    value: bytes
    revision: int


class RevisionConflict(Exception):
    """A compare-and-set found another revision than the one expected."""


class MetadataStore(Protocol):
    async def get(self, key: str) -> KeyValue | None: ...

    async def put(self, key: str, value: bytes, expected_revision: int | None = None) -> int:
        """Write `key`; with `expected_revision` (0 = must be absent) it is a compare-and-set
        that raises RevisionConflict. Returns the new revision."""

    async def delete(self, key: str, expected_revision: int | None = None) -> bool: ...

    async def list(self, prefix: str) -> list[KeyValue]: ...

    async def close(self) -> None: ...
