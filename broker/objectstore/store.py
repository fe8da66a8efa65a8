"""The object store interface: the one seam between Shoal and S3-compatible storage.

Everything diskless (WAL objects, tiered segments, manifests) goes through these few
operations. Three implementations share this contract and one parametrized test suite
(tests/contract/test_objectstore.py): `memory.py` (unit tests and simulations), `local.py`
(a directory, the embedded default) and `s3.py` (any S3-compatible endpoint).

Components take the narrowest protocol they need (`ObjectReader` for a fetch path,
`ObjectWriter` for an uploader, `ObjectLister` + `ObjectDeleter` for garbage collection),
so a test can hand them a small fake and the dependency is visible in the signature.

Keys are '/'-separated strings (see `validate_key`); listing order is lexicographic by
Unicode code point, which is also S3's order (UTF-8 byte order).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from typing import Protocol, runtime_checkable

import msgspec

from broker.clock import Clock

# S3's own limit on a key (UTF-8 bytes); the other stores enforce it too so a key that
# works in a unit test works against S3.
MAX_KEY_BYTES = 1024

# S3 DeleteObjects accepts at most 1000 keys; ListObjectsV2 returns at most 1000 per page.
MAX_DELETE_BATCH = 1000
MAX_LIST_PAGE = 1000

# Default bound on concurrent requests per store (`object.store.max.concurrency`).
DEFAULT_MAX_CONCURRENCY = 64


class ObjectInfo(msgspec.Struct, frozen=True):
    """What `head` and `list` report about one object."""

    key: str
    size: int
    last_modified_ms: int  # milliseconds since the epoch; S3 has 1-second resolution


class ObjectStoreError(Exception):
    """An object store request failed. `retriable` says whether trying again later may work
    (throttling, 5xx, timeouts, lost connections) or not (access denied, bad request)."""

    retriable: bool = False

    def __init__(self, message: str, *, retriable: bool | None = None) -> None:
        super().__init__(message)
        if retriable is not None:
            self.retriable = retriable


class NotFound(ObjectStoreError):
    """`get` of a key that does not exist."""

    retriable = False


class ObjectStoreUnavailable(ObjectStoreError):
    """A retriable failure that outlasted the retry policy (the last error is the cause)."""

    retriable = True


# on_request(operation, outcome, seconds, nbytes): called once per request attempt.
# operation: "put", "put_if_absent", "get", "head", "list" (one call per page),
#            "delete_many" (one call per batch of at most 1000 keys).
# outcome:   "ok"; "not_found" (get/head of a missing key); "exists" (put_if_absent lost);
#            "throttled" (the store asked us to slow down: 429, 503 SlowDown; will be retried);
#            "retry" (another retriable failure that will be retried); "error" (final failure).
# nbytes:    payload bytes moved (put: sent, get: received); 0 for the rest.
RequestObserver = Callable[[str, str, float, int], None]


class ObjectReader(Protocol):
    async def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        """The object's bytes `[start, end)`: `start` inclusive (default 0), `end` exclusive
        (default: the end of the object), like a Python slice with non-negative bounds.

        A range reaching past the end of the object is cut at the end; a range starting at
        or past the end gives b"". Raises NotFound if the key does not exist (also for an
        empty range) and ValueError if `start < 0` or `end < start`."""
        ...

    async def head(self, key: str) -> ObjectInfo | None:
        """Size and modification time, or None if the key does not exist."""
        ...


class ObjectWriter(Protocol):
    async def put(self, key: str, data: bytes) -> None:
        """Write (or replace) the whole object atomically: readers see the old or the new
        bytes, never a mix or a partial object."""
        ...

    async def put_if_absent(self, key: str, data: bytes) -> bool:
        """Write the object only if the key does not exist (S3 `If-None-Match: *`).

        Returns True if the key now holds exactly `data`: this call created it, or an
        object with the same bytes was already there. Returns False if an object with
        different bytes was there (it is left untouched). Idempotent, so a retry after a
        lost answer (the write happened, the reply did not arrive) is not mistaken for
        losing. Where the winner matters (elections, fencing), make `data` name its
        writer: two writers of identical bytes both get True."""
        ...


class ObjectLister(Protocol):
    def list(self, prefix: str = "", start_after: str | None = None) -> AsyncIterator[ObjectInfo]:
        """Objects whose key starts with `prefix` and sorts after `start_after`, in
        lexicographic key order. Pages are fetched as the iterator advances."""
        ...


class ObjectDeleter(Protocol):
    async def delete_many(self, keys: Iterable[str]) -> list[str]:
        """Delete the keys; return those that are now gone, in the order given. A key that
        did not exist counts as deleted. A key missing from the answer failed (S3 reported a
        per-key error) and may be retried later."""
        ...


@runtime_checkable
class ObjectStore(ObjectReader, ObjectWriter, ObjectLister, ObjectDeleter, Protocol):
    """All operations, plus `close()` to release connections (idempotent)."""

    async def close(self) -> None: ...


def validate_key(key: str) -> str:
    """Reject keys that cannot be used the same way by all three stores: empty, longer than
    1024 UTF-8 bytes, starting or ending with '/', with an empty, '.' or '..' segment, or
    containing NUL. Returns the key."""
    if not isinstance(key, str):
        raise TypeError(f"object key must be str, not {type(key).__name__}")
    if not key:
        raise ValueError("object key must not be empty")
    if len(key.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
        raise ValueError(f"object key is longer than {MAX_KEY_BYTES} bytes: {key[:64]!r}...")
    if "\x00" in key:
        raise ValueError(f"object key contains NUL: {key!r}")
    for segment in key.split("/"):
        if segment in ("", ".", ".."):
            raise ValueError(
                f"object key {key!r} has an empty, '.' or '..' segment "
                "(keys look like 'a/b/c', without leading, trailing or doubled '/')"
            )
    return key


def validate_range(start: int | None, end: int | None) -> tuple[int, int | None]:
    """Normalise `get`'s range arguments to (start, end-or-None)."""
    first = 0 if start is None else start
    if first < 0:
        raise ValueError(f"range start must be >= 0, got {start}")
    if end is not None and end < first:
        raise ValueError(f"range end ({end}) must be >= start ({first})")
    return first, end


def validate_list_page_size(page_size: int) -> int:
    if not 1 <= page_size <= MAX_LIST_PAGE:
        raise ValueError(f"list page size must be in [1, {MAX_LIST_PAGE}], got {page_size}")
    return page_size


def validate_max_concurrency(max_concurrency: int) -> int:
    if max_concurrency < 1:
        raise ValueError(f"object.store.max.concurrency must be >= 1, got {max_concurrency}")
    return max_concurrency


def as_bytes(data: bytes | bytearray | memoryview) -> bytes:
    """Objects are immutable: take a private copy of mutable buffers."""
    return data if isinstance(data, bytes) else bytes(data)


class RequestTimer:
    """Reports one request attempt, timed on `clock`, to an optional `RequestObserver`."""

    __slots__ = ("_clock", "_observer", "_operation", "_started")

    def __init__(self, observer: RequestObserver | None, operation: str, clock: Clock) -> None:
        self._clock = clock
        self._observer = observer
        self._operation = operation
        self._started = clock.monotonic()

    def done(self, outcome: str, nbytes: int = 0) -> None:
        if self._observer is not None:
            self._observer(self._operation, outcome, self._clock.monotonic() - self._started, nbytes)
