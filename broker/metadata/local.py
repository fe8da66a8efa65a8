"""`local:` metadata: the embedded single-broker store, under the data dir.

Each change is appended to a journal and fdatasynced before it is acknowledged; the journal
is folded into a snapshot once it outgrows it (store_files.py), so a change costs a write in
proportion to itself, not to the whole state (a partition's leader and ISR are a key each).
With `path=None` nothing is persisted: an in-memory store for simulations and unit tests
(it stands for etcd there, which outlives any broker, so it needs no file).

Everything in the MetadataStore contract works here with etcd's semantics, for one process:
- Leases live in memory and expire on the injected clock's monotonic time: on every call
  (so a test with a manual clock sees expiry as soon as it advances the clock) and from a
  sweeper task that checks every `lease_check_interval_s` while leases exist. Leased keys
  are persisted like any other, but the only holder of a lease is this process, so the
  keys of leases from a previous run are deleted when the store is opened.
- Watches read a bounded in-memory history of changes since the store was opened
  (`history_limit` events; 10,000 by default, far more than a broker's watchers lag). A
  watch that starts before that history, or falls behind past its end, gets
  RevisionCompacted, as an etcd watch does after a compaction.
"""

from __future__ import annotations

import asyncio
import builtins
import itertools
from collections import deque
from collections.abc import AsyncIterator, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from ..clock import Clock
from .store import (
    EventType,
    KeyValue,
    Lease,
    LeaseExpired,
    LeaseKeepAlive,
    MetadataError,
    RevisionCompacted,
    RevisionConflict,
    WatchEvent,
    check_request_size,
    check_ttl,
    check_txn,
)
from .store_files import StoreFiles

DEFAULT_HISTORY_LIMIT = 10_000
DEFAULT_LEASE_CHECK_INTERVAL_S = 0.1


@dataclass
class _LeaseState:
    ttl_s: int
    deadline_ms: int
    keys: set[str] = field(default_factory=set)


class LocalMetadataStore:
    def __init__(
        self,
        path: Path | None,
        clock: Clock,
        *,
        history_limit: int = DEFAULT_HISTORY_LIMIT,
        lease_check_interval_s: float = DEFAULT_LEASE_CHECK_INTERVAL_S,
    ) -> None:
        if history_limit < 1:
            raise ValueError("history_limit must be >= 1")
        self._clock = clock
        self._revision = 0
        self._entries: dict[str, KeyValue] = {}
        self._leases: dict[int, _LeaseState] = {}
        self._lease_ids = itertools.count(1)
        self._history: deque[WatchEvent] = deque()
        self._history_limit = history_limit
        self._first_seq = 0  # sequence number of _history[0]
        self._keepers: set[LeaseKeepAlive] = set()
        self._changed = asyncio.Event()
        self._sweeper: asyncio.Task[None] | None = None
        self._lease_check_interval_s = lease_check_interval_s
        self._closed = False
        self._unpersisted: list[WatchEvent] = []  # this revision's changes, for the journal
        self._files = None if path is None else StoreFiles(path)
        if self._files is not None:
            self._revision, self._entries = self._files.load()
            orphans = sorted(key for key, kv in self._entries.items() if kv.lease)
            if orphans:  # leases of a previous run: nobody can keep them alive
                self._revision += 1
                for key in orphans:
                    del self._entries[key]
                self._files.append(self._revision, [], orphans, self._entries)
        # All events with a revision >= this one are in _history.
        self._history_start_revision = self._revision + 1

    # -- key-value ---------------------------------------------------------------------

    async def get(self, key: str) -> KeyValue | None:
        self._ready()
        return self._entries.get(key)

    async def put(
        self, key: str, value: bytes, expected_revision: int | None = None, lease: Lease | None = None
    ) -> int:
        self._ready()
        value = bytes(value)
        check_request_size([(key, value)])
        self._check(key, expected_revision)
        lease_id = self._require_lease(lease)
        self._revision += 1
        self._write(key, value, lease_id)
        self._persist()
        self._notify()
        return self._revision

    async def delete(self, key: str, expected_revision: int | None = None) -> bool:
        self._ready()
        self._check(key, expected_revision)
        if key not in self._entries:
            return False
        self._revision += 1
        self._remove(key)
        self._persist()
        self._notify()
        return True

    async def list(self, prefix: str) -> list[KeyValue]:
        return (await self.list_with_revision(prefix))[0]

    async def list_with_revision(self, prefix: str) -> tuple[builtins.list[KeyValue], int]:
        self._ready()
        kvs = [kv for key, kv in sorted(self._entries.items()) if key.startswith(prefix)]
        return kvs, self._revision

    async def txn(
        self,
        compares: Mapping[str, int],
        puts: Mapping[str, bytes] | None = None,
        deletes: Collection[str] = (),
        lease: Lease | None = None,
    ) -> int:
        self._ready()
        puts = {key: bytes(value) for key, value in (puts or {}).items()}
        deletes = list(deletes)
        check_txn(compares, puts, deletes)
        conflicts = []
        for key, expected in compares.items():
            actual = self._revision_of(key)
            if actual != expected:
                conflicts.append(f"{key}: expected revision {expected}, found {actual}")
        if conflicts:
            raise RevisionConflict("; ".join(conflicts))
        lease_id = self._require_lease(lease) if puts else 0
        present = [key for key in deletes if key in self._entries]
        if not puts and not present:
            return self._revision
        self._revision += 1
        for key, value in puts.items():
            self._write(key, value, lease_id)
        for key in present:
            self._remove(key)
        self._persist()
        self._notify()
        return self._revision

    # -- leases ------------------------------------------------------------------------

    async def grant_lease(self, ttl_s: int) -> Lease:
        self._ready()
        check_ttl(ttl_s)
        lease_id = next(self._lease_ids)
        self._leases[lease_id] = _LeaseState(ttl_s, self._clock.monotonic_ms() + ttl_s * 1000)
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep(), name="local-metadata-leases")
        return Lease(lease_id, ttl_s)

    async def keep_alive(self, lease: Lease) -> int:
        self._ready()
        state = self._leases.get(lease.id)
        if state is None:
            raise LeaseExpired(f"lease {lease.id:x} expired or was revoked")
        state.deadline_ms = self._clock.monotonic_ms() + state.ttl_s * 1000
        return state.ttl_s

    def start_keep_alive(self, lease: Lease) -> LeaseKeepAlive:
        if self._closed:
            raise MetadataError("the metadata store is closed")
        self._keepers = {k for k in self._keepers if k.running}
        keeper = LeaseKeepAlive(self, lease, clock=self._clock).start()
        self._keepers.add(keeper)
        return keeper

    async def revoke_lease(self, lease: Lease) -> None:
        self._ready()
        if lease.id in self._leases:
            self._end_lease(lease.id)
        for keeper in [k for k in self._keepers if k.lease.id == lease.id]:
            self._keepers.discard(keeper)
            await keeper.revoked()

    def expire_leases(self) -> int:
        """End every lease whose TTL has passed on the clock; returns how many ended. Each
        call into the store does this first; tests with a manual clock may call it alone."""
        now_ms = self._clock.monotonic_ms()
        expired = [lease_id for lease_id, state in self._leases.items() if state.deadline_ms <= now_ms]
        for lease_id in expired:
            self._end_lease(lease_id)
        return len(expired)

    # -- watches -----------------------------------------------------------------------

    async def watch(self, prefix: str, start_revision: int | None = None) -> _LocalWatch:
        self._ready()
        start = self._revision + 1 if start_revision is None else start_revision
        if start < self._history_start_revision:
            raise RevisionCompacted(
                f"watch from revision {start}: this store's history starts at revision {self._history_start_revision}",
                self._history_start_revision - 1,
            )
        seq = self._first_seq + len(self._history)
        while seq > self._first_seq and self._history[seq - 1 - self._first_seq].revision >= start:
            seq -= 1
        return _LocalWatch(self, prefix, start, seq)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for keeper in list(self._keepers):
            await keeper.stop()
        self._keepers.clear()
        if self._sweeper is not None:
            self._sweeper.cancel()
            try:
                await self._sweeper
            except asyncio.CancelledError:
                pass
            self._sweeper = None
        if self._files is not None:
            self._files.close()
        self._notify()  # open watches end

    # -- internals ---------------------------------------------------------------------

    def _ready(self) -> None:
        if self._closed:
            raise MetadataError("the metadata store is closed")
        if self._leases:
            self.expire_leases()

    def _revision_of(self, key: str) -> int:
        current = self._entries.get(key)
        return current.revision if current else 0

    def _check(self, key: str, expected_revision: int | None) -> None:
        if expected_revision is None:
            return
        actual = self._revision_of(key)
        if actual != expected_revision:
            raise RevisionConflict(f"{key}: expected revision {expected_revision}, found {actual}")

    def _require_lease(self, lease: Lease | None) -> int:
        if lease is None:
            return 0
        if lease.id not in self._leases:
            raise LeaseExpired(f"lease {lease.id:x} expired or was revoked")
        return lease.id

    def _write(self, key: str, value: bytes, lease_id: int) -> None:
        """Set one key at the current revision (the caller advanced it)."""
        previous = self._entries.get(key)
        if previous is not None and previous.lease and previous.lease != lease_id:
            self._detach(key, previous.lease)
        kv = KeyValue(key, value, self._revision, lease_id)
        self._entries[key] = kv
        if lease_id:
            self._leases[lease_id].keys.add(key)
        self._record(WatchEvent(EventType.PUT, kv))

    def _remove(self, key: str) -> None:
        """Delete one present key at the current revision (the caller advanced it)."""
        previous = self._entries.pop(key)
        if previous.lease:
            self._detach(key, previous.lease)
        self._record(WatchEvent(EventType.DELETE, KeyValue(key, b"", self._revision)))

    def _detach(self, key: str, lease_id: int) -> None:
        state = self._leases.get(lease_id)
        if state is not None:
            state.keys.discard(key)

    def _end_lease(self, lease_id: int) -> None:
        """Drop a lease and delete its keys, in key order, as one change (as etcd does)."""
        state = self._leases.pop(lease_id)
        keys = sorted(state.keys)
        if not keys:
            return
        self._revision += 1
        for key in keys:
            self._remove(key)
        self._persist()
        self._notify()

    def _record(self, event: WatchEvent) -> None:
        self._unpersisted.append(event)
        self._history.append(event)
        if len(self._history) > self._history_limit:
            dropped = self._history.popleft()
            self._first_seq += 1
            self._history_start_revision = dropped.revision + 1

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _sweep(self) -> None:
        while self._leases:
            await self._clock.sleep(self._lease_check_interval_s)
            self.expire_leases()

    def _persist(self) -> None:
        """Make the current revision's changes durable (before they are acknowledged)."""
        events, self._unpersisted = self._unpersisted, []
        if self._files is None or not events:
            return
        latest: dict[str, KeyValue | None] = {}  # each key's last change in this revision
        for event in events:
            latest[event.kv.key] = event.kv if event.type == EventType.PUT else None
        puts = [kv for kv in latest.values() if kv is not None]
        deletes = [key for key, kv in latest.items() if kv is None]
        self._files.append(self._revision, puts, deletes, self._entries)


class _LocalWatch:
    """A cursor over the store's history: no queue of its own, so a slow watcher costs
    nothing until it falls past the history's end (then RevisionCompacted)."""

    def __init__(self, store: LocalMetadataStore, prefix: str, start_revision: int, seq: int) -> None:
        self._store = store
        self._prefix = prefix
        self._start_revision = start_revision
        self._seq = seq
        self._closed = False

    def __aiter__(self) -> AsyncIterator[WatchEvent]:
        return self

    async def __anext__(self) -> WatchEvent:
        store = self._store
        while True:
            if self._closed or store._closed:
                raise StopAsyncIteration
            if store._leases:
                store.expire_leases()
            if self._seq < store._first_seq:
                self._closed = True
                raise RevisionCompacted(
                    f"watch of {self._prefix!r} fell behind the store's history "
                    f"(now from revision {store._history_start_revision})",
                    store._history_start_revision - 1,
                )
            index = self._seq - store._first_seq
            if index < len(store._history):
                event = store._history[index]
                self._seq += 1
                if event.revision >= self._start_revision and event.kv.key.startswith(self._prefix):
                    return (
                        event
                        if self._last_in_revision(index)
                        else msgspec.structs.replace(event, last_in_revision=False)
                    )
                continue
            await store._changed.wait()

    def _last_in_revision(self, index: int) -> bool:
        """Whether no later change of the same revision is for this watch: a transaction's
        changes are all in the history before it notifies anyone."""
        history = self._store._history
        revision = history[index].revision
        for later_index in range(index + 1, len(history)):
            later = history[later_index]
            if later.revision != revision:
                return True
            if later.kv.key.startswith(self._prefix):
                return False
        return True

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._store._notify()  # wakes a pending __anext__, which then ends

    async def __aenter__(self) -> _LocalWatch:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
