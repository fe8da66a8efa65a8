"""The MetadataStore interface: a small versioned key-value store with compare-and-set,
leases and watches.

Two backends share it and one contract suite (tests/contract/test_metadata_store.py):
`local:` (embedded, single broker, one file under the data dir, see `local.py`) and
`etcd://` (a cluster, see `etcd.py`). Values are opaque bytes (msgspec records, see
`records.py`).

Revisions. The store has one revision counter that every change (a put, a delete that
removed something, a transaction, a lease expiry that removed keys) advances by one; all
keys written by one change carry that change's revision (etcd's `mod_revision`). A key's
revision is what compare-and-set compares; 0 means "absent".

Leases. `grant_lease(ttl_s)` returns a lease that lives `ttl_s` seconds unless kept alive
(`keep_alive`, or a `LeaseKeepAlive` task from `start_keep_alive`). Keys put with
`lease=` are deleted, in one change and in key order, when the lease expires or is revoked:
that is how a broker registers itself while it lives.

Watches. `list_with_revision(prefix)` returns the keys and the store revision R they were
read at; `watch(prefix, start_revision=R + 1)` then yields every change after the listing,
in revision order, so a watcher never misses a change between its list and its watch. How
far back a watch may start is up to the backend (etcd: back to its last compaction; local:
a bounded in-memory history since the store was opened); asking for more raises
`RevisionCompacted`, and the caller lists again.

Transactions. `txn(compares, puts, deletes)` applies several puts and deletes atomically
if every compared key still has its expected revision (one new revision for all of them).
"""

from __future__ import annotations

import asyncio
import builtins
import enum
import logging
from collections.abc import AsyncIterator, Collection, Mapping
from typing import Protocol

import msgspec

from ..clock import Clock

log = logging.getLogger(__name__)

# etcd's default --max-txn-ops: compares, and puts + deletes, per transaction. Both
# backends enforce it so a transaction that works on one works on the other.
MAX_TXN_OPS = 128
# Keys plus values of one put or transaction. etcd refuses requests above
# --max-request-bytes (1.5 MiB by default); 1 MiB leaves room for the envelope.
MAX_REQUEST_BYTES = 1024 * 1024
# etcd counts lease TTLs in whole seconds and may grant more than asked (its minimum is
# 1.5 x the election timeout); the granted TTL is in `Lease.ttl_s`.
MIN_LEASE_TTL_S = 1


class KeyValue(msgspec.Struct, frozen=True, omit_defaults=True):
    key: str
    value: bytes
    revision: int  # the store revision of the change that last wrote this key
    lease: int = 0  # the id of the lease the key is attached to; 0 = none


class Lease(msgspec.Struct, frozen=True):
    id: int
    ttl_s: int  # as granted, which may be more than requested


class EventType(enum.Enum):
    PUT = "put"
    DELETE = "delete"


class WatchEvent(msgspec.Struct, frozen=True):
    """One change seen by a watch. For a delete, `kv.value` is empty and `kv.revision` is
    the revision of the deletion. A transaction's changes share one revision and come one
    after another; `last_in_revision` is false on all but the last of them this watch
    delivers, so a watcher knows when it has applied the whole revision."""

    type: EventType
    kv: KeyValue
    last_in_revision: bool = True

    @property
    def revision(self) -> int:
        return self.kv.revision


class MetadataError(Exception):
    """A metadata store request failed. `retriable` says whether trying again later may
    work; every failure a backend reports is one of the subclasses below."""

    retriable: bool = False


class RevisionConflict(MetadataError):
    """A compare-and-set found another revision than the one expected."""


class MetadataUnavailable(MetadataError):
    """The store could not be reached (every endpoint failed, or a request timed out).
    For a write this means its outcome is unknown: read again before retrying a CAS."""

    retriable = True


class LeaseExpired(MetadataError):
    """The lease does not exist any more: it expired or was revoked."""


class RevisionCompacted(MetadataError):
    """A watch asked for history the store no longer has; list again and watch from the
    listing's revision + 1."""

    def __init__(self, message: str, compact_revision: int) -> None:
        super().__init__(message)
        self.compact_revision = compact_revision


class Watch(Protocol):
    """An open watch: an async iterator of `WatchEvent`s in revision order. Iteration
    raises `RevisionCompacted` or `MetadataUnavailable` if the watch cannot go on, and
    ends after `close()` (or the store's close). Also an async context manager."""

    def __aiter__(self) -> AsyncIterator[WatchEvent]: ...

    async def __anext__(self) -> WatchEvent: ...

    async def close(self) -> None: ...

    async def __aenter__(self) -> Watch: ...

    async def __aexit__(self, *exc: object) -> None: ...


class MetadataStore(Protocol):
    async def get(self, key: str) -> KeyValue | None: ...

    async def put(
        self, key: str, value: bytes, expected_revision: int | None = None, lease: Lease | None = None
    ) -> int:
        """Write `key`; with `expected_revision` (0 = must be absent) it is a compare-and-set
        that raises RevisionConflict. With `lease` the key is deleted when the lease ends
        (LeaseExpired if it already has); without, a previous lease is detached. Returns
        the new revision."""

    async def delete(self, key: str, expected_revision: int | None = None) -> bool:
        """Delete `key`; False if it was absent. With `expected_revision` a CAS as in put."""

    async def list(self, prefix: str) -> list[KeyValue]:
        """The keys starting with `prefix`, in key order."""

    async def list_with_revision(self, prefix: str) -> tuple[builtins.list[KeyValue], int]:
        """`list` plus the store revision the listing is consistent with."""

    async def txn(
        self,
        compares: Mapping[str, int],
        puts: Mapping[str, bytes] | None = None,
        deletes: Collection[str] = (),
        lease: Lease | None = None,
    ) -> int:
        """If every key in `compares` has the expected revision (0 = absent), apply `puts`
        (attached to `lease` if given) then `deletes`, atomically, as one new revision, and
        return the store revision; else raise RevisionConflict and change nothing. A key may
        not be both put and deleted. At most MAX_TXN_OPS compares and MAX_TXN_OPS writes."""

    async def grant_lease(self, ttl_s: int) -> Lease: ...

    async def keep_alive(self, lease: Lease) -> int:
        """Renew the lease once; returns its TTL in seconds. LeaseExpired if it is gone."""

    def start_keep_alive(self, lease: Lease) -> LeaseKeepAlive:
        """Keep the lease alive from a background task until it is stopped, the lease is
        lost, or the store is closed."""

    async def revoke_lease(self, lease: Lease) -> None:
        """End the lease now, deleting its keys. Revoking a lease that is gone is a no-op."""

    async def watch(self, prefix: str, start_revision: int | None = None) -> Watch:
        """Watch the keys starting with `prefix` from `start_revision` (inclusive; None =
        changes after the current revision). The watch is established when this returns."""

    async def close(self) -> None:
        """Stop keep-alive tasks, end open watches, release connections. Idempotent."""


def check_txn(compares: Mapping[str, int], puts: Mapping[str, bytes], deletes: Collection[str]) -> None:
    """The argument checks both backends make before a transaction (ValueError)."""
    if len(compares) > MAX_TXN_OPS or len(puts) + len(deletes) > MAX_TXN_OPS:
        raise ValueError(f"a transaction takes at most {MAX_TXN_OPS} compares and {MAX_TXN_OPS} writes")
    both = set(puts).intersection(deletes)
    if both:
        raise ValueError(f"keys both put and deleted in one transaction: {sorted(both)}")
    if len(deletes) != len(set(deletes)):
        raise ValueError("a key is deleted twice in one transaction")
    for revision in compares.values():
        if revision < 0:
            raise ValueError(f"expected revision must be >= 0, got {revision}")
    check_request_size(puts.items())


def check_request_size(items: Collection[tuple[str, bytes]]) -> None:
    size = sum(len(key.encode()) + len(value) for key, value in items)
    if size > MAX_REQUEST_BYTES:
        raise ValueError(f"a metadata write of {size} bytes exceeds {MAX_REQUEST_BYTES} bytes")


def check_ttl(ttl_s: int) -> None:
    if not isinstance(ttl_s, int) or ttl_s < MIN_LEASE_TTL_S:
        raise ValueError(f"lease TTL must be a whole number of seconds >= {MIN_LEASE_TTL_S}, got {ttl_s!r}")


class LeaseKeepAlive:
    """Keeps one lease alive from one background task (both backends use it).

    Renews every `ttl_s / 3` seconds. A renewal that fails with a retriable error is logged
    and retried every `retry_s` while the lease may still be alive (until `ttl_s` after
    the last success); past that, or when the store reports the lease gone (LeaseExpired),
    `lost` is set and the task ends: the owner must treat its leased keys as gone. Bounded:
    one task and one request in flight per lease.
    """

    def __init__(self, store: MetadataStore, lease: Lease, *, clock: Clock, retry_s: float | None = None) -> None:
        self.lease = lease
        self.lost = asyncio.Event()
        self.failures = 0  # renewals that failed, for metrics and tests
        self._store = store
        self._interval_s = max(lease.ttl_s / 3, 0.1)
        self._retry_s = retry_s if retry_s is not None else min(0.5, self._interval_s)
        self._task: asyncio.Task[None] | None = None
        self._clock = clock

    def start(self) -> LeaseKeepAlive:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"lease-{self.lease.id}")
        return self

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def stop(self) -> None:
        """Stop renewing (the lease then expires after its TTL unless revoked). Idempotent."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    async def revoked(self) -> None:
        """The owner revoked the lease: stop, and report it lost."""
        await self.stop()
        self.lost.set()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        valid_until = loop.time() + self.lease.ttl_s
        delay = self._interval_s
        while True:
            await self._clock.sleep(delay)
            sent = loop.time()
            try:
                ttl_s = await self._store.keep_alive(self.lease)
            except LeaseExpired:
                log.warning("lease %x expired or was revoked: its keys are gone", self.lease.id)
                break
            except MetadataError as exc:
                self.failures += 1
                remaining = valid_until - loop.time()
                if not exc.retriable or remaining <= 0:
                    log.warning("lease %x lost: renewal failed (%s)", self.lease.id, exc)
                    break
                log.warning("lease %x renewal failed (%s); retrying, %.1f s left", self.lease.id, exc, remaining)
                delay = min(self._retry_s, remaining)
                continue
            valid_until = sent + ttl_s  # the server renewed it after we sent
            delay = max(ttl_s / 3, 0.1)
        self.lost.set()
