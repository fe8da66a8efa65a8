"""The fetch path's reader of WAL objects: batch coordinates in, batch bytes out.

A diskless fetch turns partition-log entries into `WalRef`s (object id, byte offset, length);
this module turns those into the batches' bytes as stored, with as few GETs as S3 allows:

- cache first (`ObjectCache`): fresh objects are written through by the uploader, so
  consumers at the tail do no GET at all;
- the misses of one object are coalesced (`walfiles.format.coalesce`): ranges at most
  `max_gap_bytes` apart share one ranged GET (the gap is read and thrown away, which is cheaper
  than a second request), up to `max_get_bytes` per GET; what comes back is cached;
- all GETs of one read run concurrently, across objects and ranges (the object store bounds
  its own concurrency, `object.store.max.concurrency`);
- single flight: a read whose range lies inside a GET already in flight (another consumer of
  the same partition, or of a partition in the same object) waits for that GET instead of
  issuing its own. In-flight GETs are bounded by the callers' concurrent reads times their
  coalesced ranges, and each by `max_get_bytes`.

A GET runs to completion even if every reader waiting for it is cancelled (a consumer
disconnects): its bytes still land in the cache, and no other waiter sees a cancellation it
did not ask for.

No Kafka protocol work here: the caller overlays the 61-byte header it keeps in the partition
log. The only look inside a batch is its batchLength, checked against the coordinates, which
catches a wrong object or offset that the batch CRC (bytes 21..end) cannot.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from broker.wal.cache import ObjectCache
from broker.log.coordinates import WalRef
from broker.objectstore.store import ObjectReader
from broker.protocol.batch import BATCH_HEADER_SIZE, LOG_OVERHEAD
from walfiles.format import coalesce

DEFAULT_MAX_GAP_BYTES = 1 << 20
DEFAULT_MAX_GET_BYTES = 16 << 20

_BATCH_LENGTH = slice(8, 12)  # big-endian int32 after the int64 baseOffset


class WalReadError(Exception):
    """The bytes at a batch's coordinates are not that batch (wrong length or batchLength):
    a corrupt object or corrupt coordinates. Never retriable: objects are immutable."""

    retriable = False


ReadFailure = Exception  # WalReadError, or the store's ObjectStoreError (NotFound: the object is gone)


@dataclass(eq=False, slots=True)
class _Get:
    """One ranged GET [start, end) of an object, in flight or just landed."""

    start: int
    end: int
    task: asyncio.Task[bytes]


class WalReader:
    def __init__(
        self,
        store: ObjectReader,
        key_of: Callable[[str], str],
        cache: ObjectCache,
        max_gap_bytes: int = DEFAULT_MAX_GAP_BYTES,
        max_get_bytes: int = DEFAULT_MAX_GET_BYTES,
        on_get: Callable[[int], None] | None = None,
    ) -> None:
        """`key_of` maps a WAL object id to its object key; `on_get(nbytes)` is called once per
        GET that succeeded, with the bytes it returned."""
        if max_gap_bytes < 0:
            raise ValueError(f"max_gap_bytes must be >= 0, got {max_gap_bytes}")
        if max_get_bytes <= 0:
            raise ValueError(f"max_get_bytes must be > 0, got {max_get_bytes}")
        self._store = store
        self._key_of = key_of
        self._cache = cache
        self._max_gap_bytes = max_gap_bytes
        self._max_get_bytes = max_get_bytes
        self._on_get = on_get
        self._in_flight: dict[str, list[_Get]] = {}  # object id -> its GETs in flight

    async def read(self, refs: Sequence[WalRef]) -> list[memoryview]:
        """The bytes of every batch, in the order given: each a view of exactly `ref.length`
        bytes. Raises WalReadError for bytes that are not the batch, and the store's
        ObjectStoreError (NotFound: the object is gone) unchanged."""
        outcomes = await self.read_each(refs)
        failure = next((o for o in outcomes if isinstance(o, Exception)), None)
        if failure is not None:
            raise failure
        return outcomes  # type: ignore[return-value]  # no exception among them

    async def read_each(self, refs: Sequence[WalRef]) -> list[memoryview | ReadFailure]:
        """Like `read`, but one outcome per batch: its bytes, or why they could not be read.
        One unreadable object fails only the batches in it, so a fetch can still serve the
        partitions (and the batches before the failure) that do not depend on it."""
        views: list[memoryview | ReadFailure | None] = [
            self._cache.get(ref.object_id, ref.offset, ref.end) for ref in refs
        ]
        misses: dict[str, list[int]] = {}
        for i, view in enumerate(views):
            if view is None:
                misses.setdefault(refs[i].object_id, []).append(i)
        members: dict[_Get, list[int]] = {}  # GET -> indices of the refs it serves
        for object_id, indices in misses.items():
            self._plan(object_id, refs, indices, members)
        gets = list(members)
        results = await asyncio.gather(*(asyncio.shield(get.task) for get in gets), return_exceptions=True)
        for get, data in zip(gets, results, strict=True):
            if isinstance(data, BaseException) and not isinstance(data, Exception):
                raise data  # a cancellation of our own
            for i in members[get]:
                views[i] = (
                    data
                    if isinstance(data, Exception)
                    else memoryview(data)[refs[i].offset - get.start : refs[i].end - get.start]
                )
        return [_checked(ref, view) for ref, view in zip(refs, views, strict=True)]

    def _plan(self, object_id: str, refs: Sequence[WalRef], indices: list[int], members: dict[_Get, list[int]]) -> None:
        """Assign each missed ref of one object to a GET in flight that covers it, or to a new
        coalesced GET."""
        in_flight = self._in_flight.get(object_id, [])
        rest: list[int] = []
        for i in indices:
            ref = refs[i]
            get = next((g for g in in_flight if g.start <= ref.offset and ref.end <= g.end), None)
            if get is None:
                rest.append(i)
            else:
                members.setdefault(get, []).append(i)
        ranges = [(refs[i].offset, refs[i].end) for i in rest]
        for group in coalesce(ranges, self._max_gap_bytes, self._max_get_bytes):
            members[self._start_get(object_id, group.start, group.end)] = [rest[m] for m in group.members]

    def _start_get(self, object_id: str, start: int, end: int) -> _Get:
        get = _Get(start, end, asyncio.create_task(self._fetch(object_id, start, end)))
        self._in_flight.setdefault(object_id, []).append(get)
        get.task.add_done_callback(lambda _: self._landed(object_id, get))
        return get

    def _landed(self, object_id: str, get: _Get) -> None:
        in_flight = self._in_flight[object_id]
        in_flight.remove(get)
        if not in_flight:
            del self._in_flight[object_id]

    async def _fetch(self, object_id: str, start: int, end: int) -> bytes:
        data = await self._store.get(self._key_of(object_id), start, end)
        if self._on_get is not None:
            self._on_get(len(data))
        self._cache.put_range(object_id, start, data)
        return data


def _checked(ref: WalRef, view: memoryview | ReadFailure | None) -> memoryview | ReadFailure:
    """The view, once it is exactly one batch of `ref.length` bytes (a GET past the end of a
    shorter object returns fewer bytes than asked); else why not."""
    assert view is not None, "every cache miss is served by a GET"
    if isinstance(view, Exception):
        return view
    if len(view) != ref.length:
        return WalReadError(
            f"WAL object {ref.object_id}: {len(view)} bytes at offset {ref.offset}, expected {ref.length} "
            "(object shorter than its coordinates)"
        )
    batch_length = int.from_bytes(view[_BATCH_LENGTH], "big", signed=True)
    if ref.length < BATCH_HEADER_SIZE or batch_length + LOG_OVERHEAD != ref.length:
        return WalReadError(
            f"WAL object {ref.object_id}: batch at offset {ref.offset} has batchLength {batch_length}, "
            f"expected {ref.length - LOG_OVERHEAD} (corrupt object or coordinates)"
        )
    return view
